package soak_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

// TestClosedLoopOneRequest: with OneRequest each run answered within the
// wait is one submission with ?wait= and no result request; a run not
// answered in time is waited for with GET result?wait=.
func TestClosedLoopOneRequest(t *testing.T) {
	ctx := context.Background()
	var slow atomic.Bool
	var waiting, results atomic.Int64
	srv := apitest.New(t, apitest.Config{
		Sleep: func(ctx context.Context, _ time.Duration) error {
			if !slow.Load() {
				return nil
			}
			select {
			case <-time.After(time.Second):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		HTTP: func(hs *http.Server) {
			api := hs.Handler
			hs.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == "POST" && r.URL.Query().Get("wait") != "" {
					waiting.Add(1)
				}
				if strings.HasSuffix(r.URL.Path, "/result") {
					results.Add(1)
				}
				api.ServeHTTP(w, r)
			})
		},
	})
	c := soak.NewClient(srv.URL)
	for _, netHTTP := range []bool{false, true} {
		waiting.Store(0)
		results.Store(0)
		prefix := fmt.Sprintf("one-%v", netHTTP)
		st, err := soak.ClosedLoop{Clients: 2, Runs: 10, PerThread: 4, Prefix: prefix, NetHTTP: netHTTP, OneRequest: true}.Run(ctx, c)
		if err != nil || st.Runs != 10 {
			t.Fatalf("net/http %v: %d runs, %v", netHTTP, st.Runs, err)
		}
		if waiting.Load() < 10 || results.Load() != 0 {
			t.Fatalf("net/http %v: %d submissions with wait, %d result requests", netHTTP, waiting.Load(), results.Load())
		}
		// Runs that outlast the wait: answered 202, then waited for.
		slow.Store(true)
		results.Store(0)
		st, err = soak.ClosedLoop{Clients: 1, Runs: 2, Prefix: prefix + "-slow", NetHTTP: netHTTP, OneRequest: true, Wait: time.Millisecond}.Run(ctx, c)
		slow.Store(false)
		if err != nil || st.Runs != 2 {
			t.Fatalf("net/http %v, slow runs: %d runs, %v", netHTTP, st.Runs, err)
		}
		if results.Load() == 0 {
			t.Fatalf("net/http %v: runs of a second answered within a wait of 1ms", netHTTP)
		}
	}
}
