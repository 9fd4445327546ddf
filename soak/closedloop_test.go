package soak_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/httpapi"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
	"github.com/agenthost/agenthost/soak"
)

func TestClosedLoop(t *testing.T) {
	ctx := context.Background()
	m, err := model.NewScripted(model.Script{})
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	rt, err := host.New(ctx, host.Config{Driver: memdriver.New(), Model: m, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(rt, httpapi.Options{Logger: logger}))
	t.Cleanup(func() {
		srv.Close()
		rt.Close(ctx)
	})
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
	m, err := model.NewScripted(model.Script{})
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	rt, err := host.New(ctx, host.Config{Driver: memdriver.New(), Model: m, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(httpapi.New(rt, httpapi.Options{Logger: logger}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		rt.Close(ctx)
	})
	st, err := soak.ClosedLoop{Clients: 1, Runs: 40, PerThread: 10}.Run(ctx, soak.NewClient(srv.URL))
	if err != nil || st.Runs != 40 {
		t.Fatalf("%d runs, %v", st.Runs, err)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for one client's 80 requests", n)
	}
}
