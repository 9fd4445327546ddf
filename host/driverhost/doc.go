// Package driverhost launches store drivers as go-plugin subprocesses and
// hands the host a driver.Driver over them.
//
// Where to start: Launch starts a driver binary (pinned by its SHA-256,
// spoken to over gRPC with automatic mutual TLS, without the host's
// environment), sends it its configuration, and returns a *Driver. The
// Driver restarts the subprocess when it dies: the call that finds it dead
// fails with driver.ErrUnavailable, and the next call runs on a fresh
// process. Every call has a deadline (Config.CallTimeout): a process that
// does not answer within it is killed and replaced the same way. A driver
// whose Info says it is not durable is not restarted: its data died with
// it (ErrLost, Lost). Generation moves at each of these, for the host to
// drop what it cached of the driver (docs/adr/0131). The subprocess's logs
// arrive in the host's log/slog logger.
//
// The package knows no driver by name: the drivers built into the agenthost
// binary, served by the binary re-executed, are launched with the Config
// their registry (package internal/builtins) returns.
package driverhost
