// Package storepb is the wire form of the store driver protocol, version 1:
// store.proto and the Go generated from it (run `make proto` after editing
// the .proto file).
//
// Start at store.proto. Nothing here has logic; the conversions between
// these messages and the records of package abi/record, the error mapping,
// and the go-plugin glue live in package sdk/storedriver.
package storepb

//go:generate make -C ../.. proto
