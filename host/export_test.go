package host

// HomeOf is the lease epoch, of epochs, that a thread belongs with: the
// host's own choice (ADR 0143), for tests that must place a thread.
func HomeOf(threadID string, epochs ...int64) int64 {
	return homeOf(threadID, epochs[0], epochs[1:])
}
