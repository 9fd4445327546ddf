// Package storedriver is the Go SDK for store driver authors: what a
// driver's main needs to serve a driver.Driver (package abi/driver) as a
// plugin subprocess of the agenthost host, and the shape checks every driver
// makes.
//
// Where to start: a driver implements driver.Driver, wraps its constructor
// in a Factory, and its main is one call:
//
//	func main() { storedriver.Serve(storedriver.FactoryFunc(open)) }
//
// Serve speaks the store protocol (package abi/storepb) over go-plugin and
// gRPC, and offers the host a direct transport next to it, a Unix socket
// in a private directory that carries the unary calls with less work per
// call (docs/adr/0151); it ends the process when its host dies. Options adjust the
// process: WithMaxProcs runs it on fewer threads (memstore runs on one, see
// docs/adr/0121). Logger is the logger a driver process logs with, so that
// its lines reach the host's log with their levels and fields.
//
// A driver runs ValidateBatch on a batch before it writes anything, and
// ValidateListRuns on the arguments of ListRuns; a driver of store protocol
// 2 (driver.StepStore, driver.ThreadLister) runs ValidateStepBatch and
// ValidateReadSteps on those of CommitSteps and ReadSteps. Serve offers
// protocols 1 and 2 and speaks 2 only for a driver that implements both
// interfaces. Optional capabilities (driver.Leaser, driver.ManyCommitter)
// are found on the driver by type assertion; the records' copying and normalising helpers are in package
// abi/record. The contract every driver must pass is the test function in
// package storedrivertest, and over the protocol, against the real process,
// package conformance.
package storedriver
