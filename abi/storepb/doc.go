// Package storepb is the wire form of the store driver protocol, version 2:
// store.proto and the Go generated from it (run `make proto` after editing
// the .proto file).
//
// Start at store.proto. Nothing here has logic; the conversions between
// these messages and the records of package abi/record, the error mapping,
// the client and server and the go-plugin glue are internal to the module
// (package internal/driverrpc): a driver author serves a driver with
// package sdk/storedriver and never sees the wire form.
package storepb

//go:generate make -C ../.. proto
