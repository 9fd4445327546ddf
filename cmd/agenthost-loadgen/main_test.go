package main

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agenthost/agenthost/internal/apitest"
)

// TestClosed: closed measures a server with either client, and refuses
// an unknown one.
func TestClosed(t *testing.T) {
	var waitingPosts, plainPosts, results atomic.Int64
	srv := apitest.New(t, apitest.Config{HTTP: func(hs *http.Server) {
		api := hs.Handler
		hs.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case r.Method == "POST" && r.URL.Query().Get("wait") != "":
				waitingPosts.Add(1)
			case r.Method == "POST":
				plainPosts.Add(1)
			case strings.HasSuffix(r.URL.Path, "/result"):
				results.Add(1)
			}
			api.ServeHTTP(w, r)
		})
	}})
	for _, client := range []string{"wire", "net/http"} {
		var out, errs strings.Builder
		code := main1([]string{"closed", "--addr", srv.URL, "--clients", "2", "--runs", "10", "--duration", "0", "--prefix", strings.ReplaceAll(client, "/", "-"), "--client", client}, &out, &errs)
		if code != 0 || !strings.Contains(out.String(), "closed clients=2 runs=10 ") {
			t.Fatalf("--client %s: exit %d, out %q, err %q", client, code, out.String(), errs.String())
		}
	}
	if waitingPosts.Load() != 0 || plainPosts.Load() < 20 || results.Load() < 20 {
		t.Fatalf("submit then result: %d submissions with wait, %d without, %d results", waitingPosts.Load(), plainPosts.Load(), results.Load())
	}
	// --one-request: each run one submission with ?wait=.
	for _, client := range []string{"wire", "net/http"} {
		var out, errs strings.Builder
		code := main1([]string{"closed", "--addr", srv.URL, "--clients", "2", "--runs", "10", "--duration", "0", "--prefix", "one-" + strings.ReplaceAll(client, "/", "-"), "--client", client, "--one-request"}, &out, &errs)
		if code != 0 || !strings.Contains(out.String(), "closed clients=2 one-request runs=10 ") {
			t.Fatalf("--one-request --client %s: exit %d, out %q, err %q", client, code, out.String(), errs.String())
		}
	}
	if waitingPosts.Load() < 20 || plainPosts.Load() > 20+2 {
		t.Fatalf("--one-request: %d submissions with wait, %d without", waitingPosts.Load(), plainPosts.Load())
	}
	var out, errs strings.Builder
	if code := main1([]string{"closed", "--addr", srv.URL, "--client", "curl"}, &out, &errs); code != 2 || !strings.Contains(errs.String(), "wire or net/http") {
		t.Fatalf("--client curl: exit %d, err %q", code, errs.String())
	}
}
