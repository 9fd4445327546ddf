// Package driverrpc is the Go side of the store protocol (package
// abi/storepb) for both ends: the host's Client, a driver.Driver that
// forwards every call to a driver subprocess, and the Server that
// storedriver.Serve runs in the driver process; the go-plugin glue
// (Handshake, PluginSets); the conversions between the records and their
// wire form; and the mapping of the driver sentinels to gRPC statuses and
// back (ToStatus, FromStatus), so that errors.Is works on the host.
//
// Commits from concurrent callers of one Client share round trips (see
// coalesce.go): the driver commits them each on its own, through
// driver.ManyCommitter when it has it. A driver that stores its records
// in their wire form gets them as the host sent them (EncodedCommitter,
// see wire.go). Step commits share round trips the same way
// (CommitStepsMany); a driver that takes several step batches in one call
// gets them so (StepsManyCommitter, see steps.go), any other one batch per
// CommitSteps; one that stores steps in their wire form gets them as the
// host sent them (EncodedStepsCommitter, see wire.go).
package driverrpc
