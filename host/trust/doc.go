// Package trust is the host's admission gate for store drivers: a driver
// binary the host has not certified must pass the conformance suite's quick
// profile on a scratch instance before the host launches it.
//
// Where to start: Open a Gate on the host's data directory, and launch
// drivers through Gate.Launch instead of driverhost.Launch. Launch
// certifies an uncertified driver first (Certify), then launches it from
// the gate's own copy of the binary, pinned by checksum. Certify, List and
// Revoke are what "agenthost driver certify|list|revoke" call.
//
// Certificates live in DIR/drivers/trust.json, one per (binary SHA-256,
// suite version): a binary that changes, or a new suite version, must pass
// again (Options.NoAutoCertify: is refused until certified explicitly).
// Certifying copies the binary, read-only, into DIR/drivers/sha256/HEX/driver,
// a content-addressed directory the host owns; the host launches that copy
// with go-plugin's SecureConfig set to the certified checksum, so a copy
// that is modified afterwards is refused. Prune removes the copies no
// certificate names. Built-in drivers, served by
// re-executing the host binary, are certified the same way, keyed by the
// host binary's checksum and the driver's name.
//
// The suite runs on scratch data under DIR/drivers/scratch, never on the
// user's: the driver's configuration for the scratch instance is the
// configuration it will run with, its "dir" key pointed at scratch (see
// Source.ScratchConfig). A driver whose data lives outside that directory
// says how its scratch instances keep theirs (conformance.ScratchOf): the
// built-in pgstore keeps its data in a database, not a directory, so its
// scratch instances use the database it is launched with, each in a schema
// of its own named after its scratch directory, dropped when the suite
// ends. The host's environment is never passed to a driver
// (driverhost.Config.Env is its whole environment).
//
// The gate knows no driver by name: the drivers built into the host binary
// come from Options.Builtins, which the command wires in.
package trust
