// Package storedriver is the Go SDK for store driver authors, and the Go
// side of the store protocol (package abi/storepb) for both ends.
//
// Where to start: a driver implements driver.Driver (package abi/driver),
// wraps its constructor in a Factory, and its main is one call:
//
//	func main() { storedriver.Serve(storedriver.FactoryFunc(open)) }
//
// Serve speaks go-plugin (handshake Handshake, protocol version 1 through
// VersionedPlugins, gRPC with messages up to MaxMessageSize) and ends the
// process when its host dies. Options adjust the process: WithMaxProcs runs
// it on fewer threads (memstore runs on one, see docs/adr/0121). The host
// side of the same protocol is Client, a driver.Driver that forwards to the
// subprocess; ToStatus and FromStatus carry the driver sentinels across, so
// errors.Is works on the host.
//
// The package also holds what every driver shares: the shape checks a driver
// runs on a batch before it writes anything (ValidateBatch) and on listing
// arguments (ValidateListRuns), deep copies of records for drivers that keep
// them in memory, and the conversions to and from the wire form. The contract
// every driver must pass is the test function in package storedrivertest.
package storedriver
