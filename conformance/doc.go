// Package conformance is the store driver conformance suite: the checks a
// store driver must pass before the agenthost host accepts it, as a Go API
// for a driver author's own tests, as the runner behind
// "agenthost conformance", and as the host's admission gate (package
// host/trust).
//
// Where to start: from go test, call Run with a Target that starts your
// driver, in the manner of testing/fstest.TestFS:
//
//	func TestConformance(t *testing.T) {
//		target := conformance.Binary("./my-driver", conformance.DirConfig)
//		conformance.Run(t, target, conformance.Options{})
//	}
//
// Binary launches the driver binary as the host does (go-plugin, checksum
// pinned, no host environment). InProcess serves a storedriver.Factory in
// the test process through the same gRPC server and client as
// storedriver.Serve and the host; it is fast, but cannot be killed, so the
// durable tier is not checked with it. Check runs the suite and returns a
// Report (JSON, JUnit XML, a table); Main is the command "agenthost
// conformance DRIVER [--profile quick|full] [--json FILE] [--junit FILE]",
// which also tests the drivers a binary has built in, by name, when it is
// given them (Builtins). The suite itself knows no driver by name.
//
// The suite has a version (Version) that every report carries and that
// keys the host's certificates. It is organised in groups (handshake,
// atomicity, concurrency, reads, indexes, badinput, scale, durability,
// crash, leases, shared, semantics), each case checking named rules
// ("atomicity.absorbing-pair", "index.list-by-state", ...); a failure names
// the rules broken. Cases belong to capability tiers: basic (every driver),
// durable (claimed by driver.Info.Durable: kill -9 the driver process during
// a stream of commits, and at each fault point of the driver SDK's server,
// armed by AGENTHOST_DRIVER_FAULT in the driver's environment; and, where a
// FUSE file system can be mounted (Options.PowerCut), cut the power under
// a driver whose data directory is on a file system that drops every write
// not synced (package internal/lazyfs); every acknowledged commit
// survives, no batch lands in part; Report.Durability says whether the
// power cut ran), leases (claimed by driver.Info.Leases: every rule of
// driver.Leaser, by the store's clock, with no timing that can flake: a
// lease that must be dead is waited well past its expiry) and shared
// (several driver processes on one data set, seeing each other's commits,
// leases and notices and fencing each other; claimed through Options.Tiers,
// skipped otherwise).
//
// A driver whose data lives outside its instance's data directory (pgstore,
// in a database) gets a place of its own there per directory and is told
// to remove it afterwards: a Target that is a Cleaner (WithCleanup). The
// driver's storedriver.Factory says how through the optional interfaces
// ScratchConfigurer and ScratchCleaner, which ScratchOf turns into a
// target's configuration and cleanup.
//
// Profiles: Quick is the gate and runs every group with small sizes; Full
// adds 10k runs across 1k threads, 1 MiB messages and longer commit
// streams.
//
// The semantics group runs the host's own store layer (package host/store)
// over the driver through scenarios S1, S5, S6, S7, S10 and S13 and checks
// invariants I1-I4 and I6 (both numbered as in docs/design.md); S14 (an
// absorbing pair lands whole) is in the atomicity group. The in-process contract of package
// sdk/storedriver/storedrivertest is the same contract at the Go interface;
// this suite checks it over the protocol, against a real process.
//
// See docs/conformance.md for driver authors.
package conformance
