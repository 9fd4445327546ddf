// Package driverhost launches store drivers as go-plugin subprocesses and
// hands the host a driver.Driver over them.
//
// Where to start: Launch starts a driver binary (pinned by its SHA-256,
// spoken to over gRPC with automatic mutual TLS, without the host's
// environment), sends it its configuration, and returns a *Driver. The
// Driver restarts the subprocess when it dies: the call that finds it dead
// fails with driver.ErrUnavailable, and the next call runs on a fresh
// process. The subprocess's logs arrive in the host's log/slog logger.
//
// The package knows no driver by name: the drivers built into the agenthost
// binary, served by the binary re-executed, are launched with the Config
// their registry (package internal/builtins) returns.
package driverhost
