//go:build race

package host_test

// Under the race detector the simulation runs fewer seeds by default: the
// full count runs in the plain test pass.
func init() { raceEnabled = true }
