package host

// Draining reports whether Close has begun: the runtime admits no more
// inputs (Submit answers ErrClosed) while the runs in flight finish.
func (rt *Runtime) Draining() bool {
	return rt.coord.isClosed()
}
