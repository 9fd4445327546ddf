package conformance_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/conformance"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
	"github.com/agenthost/agenthost/sdk/storedriver"
)

// sharedMem serves in process one shared memdriver (memdriver.NewShared)
// per data directory, so that several instances on one directory share
// its data as several hosts share a database.
type sharedMem struct {
	mu  sync.Mutex
	dbs map[string]*memdriver.Driver
}

func (s *sharedMem) open(_ context.Context, config map[string]string) (driver.Driver, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	db, ok := s.dbs[config["dir"]]
	if !ok {
		db = memdriver.NewShared(nil)
		s.dbs[config["dir"]] = db
	}
	return &memInstance{Driver: db}, nil
}

// memInstance is one instance on a shared memdriver: closing it closes
// the instance, not the data.
type memInstance struct {
	*memdriver.Driver
	mu     sync.RWMutex
	closed bool
}

func (m *memInstance) Close(context.Context) error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	return nil
}

func (m *memInstance) Commit(ctx context.Context, b driver.Batch) (int64, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return 0, driver.ErrClosed
	}
	return m.Driver.Commit(ctx, b)
}

// TestLeasesMemstore: memdriver.NewShared, the reference driver with
// leases, passes the leases tier and the shared tier in process.
func TestLeasesMemstore(t *testing.T) {
	sm := &sharedMem{dbs: map[string]*memdriver.Driver{}}
	f := conformance.InProcess("memstore-shared", storedriver.FactoryFunc(sm.open), conformance.DirConfig)
	rep, err := conformance.Check(context.Background(), f, conformance.Options{Tiers: []conformance.Tier{conformance.TierShared}, Only: "", ScratchDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		if r.Status == conformance.Fail {
			t.Errorf("%s broke %v: %s", r.ID(), r.Rules, r.Message)
		}
	}
	if want := []conformance.Tier{conformance.TierBasic, conformance.TierLeases, conformance.TierShared}; !slices.Equal(rep.Passed, want) {
		t.Errorf("passed tiers %v, want %v", rep.Passed, want)
	}
}
