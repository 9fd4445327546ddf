// Package storedriver is the Go SDK for store driver authors.
//
// A driver implements the driver.Driver interface of package
// github.com/agenthost/agenthost/abi/driver. This package holds what every
// driver shares: the shape checks a driver runs on a batch before it writes
// anything (ValidateBatch) and on listing arguments (ValidateListRuns), and
// deep copies of records for drivers that keep them in memory.
package storedriver
