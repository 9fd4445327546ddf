// Package badgerdriver is the durable store driver on badger v4, served as
// a subprocess by the badgerstore plugin (plugins/badgerstore).
//
// Where to start: Open (with DefaultConfig or ParseConfig) returns a
// *Driver, which implements driver.Driver. keys.go describes the key space:
// records by id, and the secondary indexes the contract needs (runs by
// state, idempotency records by (thread, key), history by (thread, seq)),
// all written in the transaction of the commit that changes them.
// commit.go holds group commit: concurrent commits, each checked on its own,
// share one badger transaction and one sync, applied by one committer
// goroutine, the store's only writer (ADR 0145). lock.go keeps a second
// process off the directory; repair.go clears what a process killed at the
// wrong instant leaves that badger itself would refuse at open; format.go
// versions the stored form, migrates an older directory at open and
// refuses a newer one (ADR 0158).
package badgerdriver
