package soak_test

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/agenthost/agenthost/internal/apitest"
	"github.com/agenthost/agenthost/soak"
)

func TestClosedLoop(t *testing.T) {
	ctx := context.Background()
	srv := apitest.New(t, apitest.Config{})
	c := soak.NewClient(srv.URL)
	st, err := soak.ClosedLoop{Clients: 3, Runs: 20, PerThread: 4}.Run(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if st.Runs != 20 || len(st.Latencies) != 20 || st.Percentile(50) <= 0 || st.Percentile(99) < st.Percentile(50) {
		t.Fatalf("stats %+v", st)
	}
	// Through net/http's client, too.
	if st, err := (soak.ClosedLoop{Clients: 2, Runs: 6, Prefix: "nh", NetHTTP: true}).Run(ctx, c); err != nil || st.Runs != 6 {
		t.Fatalf("net/http client: %d runs, %v", st.Runs, err)
	}
	runs, err := c.ThreadRuns(ctx, "cl-0-0")
	if err != nil || len(runs) == 0 || len(runs) > 4 {
		t.Fatalf("thread cl-0-0: %d runs, %v (4 inputs a thread)", len(runs), err)
	}
	// Bad configurations and a server that refuses are errors.
	if _, err := (soak.ClosedLoop{Runs: 1}).Run(ctx, c); err == nil {
		t.Error("no clients: no error")
	}
	if _, err := (soak.ClosedLoop{Clients: 1}).Run(ctx, c); err == nil {
		t.Error("neither runs nor duration: no error")
	}
	if _, err := (soak.ClosedLoop{Clients: 1, Runs: 1, Prefix: "bad/thread"}).Run(ctx, c); err == nil {
		t.Error("a refused submission: no error")
	}
}

// TestClosedLoopKeepsItsConnections: each client's requests go over one
// kept-alive connection (a new connection per request would measure the
// TCP handshakes, and cost both sides CPU).
func TestClosedLoopKeepsItsConnections(t *testing.T) {
	ctx := context.Background()
	var conns atomic.Int64
	srv := apitest.New(t, apitest.Config{HTTP: func(hs *http.Server) {
		hs.ConnState = func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				conns.Add(1)
			}
		}
	}})
	st, err := soak.ClosedLoop{Clients: 1, Runs: 40, PerThread: 10}.Run(ctx, soak.NewClient(srv.URL))
	if err != nil || st.Runs != 40 {
		t.Fatalf("%d runs, %v", st.Runs, err)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for one client's 80 requests", n)
	}
}
