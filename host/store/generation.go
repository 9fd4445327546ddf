package store

// Generational is implemented by a driver whose process may be relaunched
// or lost (package host/driverhost's Driver): Generation changes whenever
// what its calls reach may differ from what they reached before.
type Generational interface {
	Generation() uint64
}

// revalidate drops every cache of the store layer when the driver's
// generation moved since they were filled: a relaunched driver may hold
// less than they say (a driver that is not durable holds nothing; a
// durable one may not hold a commit whose outcome its crash left unknown).
// What the caches hold is then read again. It returns the generation the
// caller's operation runs under (see current).
func (s *Store) revalidate() uint64 {
	g, ok := s.d.(Generational)
	if !ok {
		return 0
	}
	n := g.Generation()
	if s.gen.Load() == n {
		return n
	}
	s.genMu.Lock()
	defer s.genMu.Unlock()
	if s.gen.Load() != n {
		s.snaps.reset()
		s.hist.reset()
		s.done.reset()
		s.memo.reset()
		s.gen.Store(n)
	}
	return n
}

// current reports whether the driver is still at generation g: what an
// operation begun under g read may go into the caches.
func (s *Store) current(g uint64) bool {
	d, ok := s.d.(Generational)
	return !ok || d.Generation() == g
}

func (c *snapCache) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.f.clear()
}

func (c *histCache) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.f.clear()
	c.total = 0
}

func (c *doneCache) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.f.clear()
}

func (f *fifo[V]) clear() {
	clear(f.m)
	f.order = nil
}
