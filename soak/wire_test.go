package soak

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// wireServer answers like the API: a submission (checking its headers and
// body), and a result that is 202 (streamed, chunked) on the first ask of
// a run and 200 (closing the connection when close is set) after.
func wireServer(t *testing.T, close bool) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	asked := map[string]bool{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/threads/{thread}/inputs", func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		if r.Header.Get("Authorization") != "Bearer tok" || r.Header.Get("Content-Type") != "application/json" {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(401)
			w.Write([]byte(`{"code":"unauthorized","detail":"headers ` + r.Header.Get("Authorization") + `"}`))
			return
		}
		if body["content"] != "say \"hi\"\n\\ now" {
			w.WriteHeader(400)
			w.Write([]byte(`{"code":"bad_request","detail":"content"}`))
			return
		}
		w.WriteHeader(202)
		json.NewEncoder(w).Encode(Admission{RunID: "run-" + r.Header.Get("Idempotency-Key"), ThreadID: r.PathValue("thread")})
	})
	mux.HandleFunc("GET /v1/runs/{run}/result", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("run")
		if r.URL.Query().Get("wait") != "1s" {
			w.WriteHeader(400)
			return
		}
		if !asked[id] {
			asked[id] = true
			w.WriteHeader(202)
			w.Write([]byte(`{"id":"` + id + `",`))
			w.(http.Flusher).Flush() // chunked from here
			w.Write([]byte(`"state":"active"}`))
			return
		}
		if close {
			w.Header().Set("Connection", "close")
		}
		json.NewEncoder(w).Encode(Result{RunID: id, State: "completed"})
	})
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

func TestWireConn(t *testing.T) {
	ctx := context.Background()
	for _, close := range []bool{false, true} {
		srv, conns := wireServer(t, close)
		c := NewClient(srv.URL + "/")
		c.Token = "tok"
		if !useWire(c) {
			t.Fatal("a plain http base is not spoken on the wire")
		}
		w := newWireConn(ctx, c)
		for i := range 3 {
			key := "k" + string(rune('0'+i))
			a, err := w.submit(ctx, "th", key, "say \"hi\"\n\\ now")
			if err != nil || a.RunID != "run-"+key || a.ThreadID != "th" {
				t.Fatalf("submit: %+v, %v", a, err)
			}
			if _, settled, err := w.result(ctx, a.RunID, time.Second); err != nil || settled {
				t.Fatalf("first result: settled %v, %v (want 202)", settled, err)
			}
			res, settled, err := w.result(ctx, a.RunID, time.Second)
			if err != nil || !settled || res.RunID != a.RunID || res.State != "completed" {
				t.Fatalf("second result: %+v settled %v, %v", res, settled, err)
			}
		}
		// Without Connection: close, one connection carried the nine
		// requests; with it, each closing answer took its connection.
		if want := map[bool]int64{false: 1, true: 3}[close]; conns.Load() != want {
			t.Errorf("close=%v: %d connections, want %d", close, conns.Load(), want)
		}
		// A connection the server closed while idle is dialed again.
		srv.CloseClientConnections()
		if _, err := w.submit(ctx, "th", "k9", "say \"hi\"\n\\ now"); err != nil {
			t.Fatalf("after the server closed the connection: %v", err)
		}
		// An error answer is a Problem.
		c.Token = "wrong"
		_, err := w.submit(ctx, "th", "k10", "x")
		var p *Problem
		if !errors.As(err, &p) || p.Status != 401 || p.Code != "unauthorized" {
			t.Fatalf("refused: %v", err)
		}
		// A key that cannot go in a header is refused, not sent.
		c.Token = "tok"
		if _, err := w.submit(ctx, "th", "bad\r\nX: y", "x"); err == nil || !strings.Contains(err.Error(), "cannot be sent") {
			t.Fatalf("bad key: %v", err)
		}
		w.release()
	}
}

// TestWireConnSkipsUnreachableHosts: requests take turns between hosts, a
// host that cannot be dialed skipped.
func TestWireConnSkipsUnreachableHosts(t *testing.T) {
	ctx := context.Background()
	srv, _ := wireServer(t, false)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	c := NewClient(dead)
	c.More = []string{srv.URL}
	c.Token = "tok"
	w := newWireConn(ctx, c)
	defer w.release()
	for i := range 4 {
		if _, err := w.submit(ctx, "th", "k"+string(rune('0'+i)), "say \"hi\"\n\\ now"); err != nil {
			t.Fatalf("submission %d: %v", i, err)
		}
	}
	c.More = nil
	w2 := newWireConn(ctx, c)
	defer w2.release()
	if _, err := w2.submit(ctx, "th", "k", "x"); err == nil {
		t.Fatal("no host reachable: no error")
	}
}

// TestWireConnEndsWithItsContext: a request in flight when the context
// ends returns at once.
func TestWireConnEndsWithItsContext(t *testing.T) {
	hold := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-hold }))
	defer srv.Close()
	defer close(hold)
	ctx, cancel := context.WithCancel(context.Background())
	w := newWireConn(ctx, NewClient(srv.URL))
	defer w.release()
	errc := make(chan error, 1)
	go func() {
		_, _, err := w.result(ctx, "r", time.Second)
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the request did not end with its context")
	}
}

func TestUseWire(t *testing.T) {
	for base, want := range map[string]bool{
		"http://127.0.0.1:7070": true, "http://h/prefix": true, "https://127.0.0.1:7070": false,
		"http://u:p@h": false, "127.0.0.1:7070": false,
	} {
		if got := useWire(NewClient(base)); got != want {
			t.Errorf("%s: %v, want %v", base, got, want)
		}
	}
	c := NewClient("http://127.0.0.1:7070")
	c.HTTP = &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment}}
	if useWire(c) {
		t.Error("a client with a proxy is spoken to on the wire")
	}
}

// TestWireReadAllRefusesLongAnswers: an answer without a length (chunked,
// or ending with its connection) that runs past the limit is an error, not
// an answer cut short.
func TestWireReadAllRefusesLongAnswers(t *testing.T) {
	if b, err := readAll(strings.NewReader(strings.Repeat("x", maxAnswer)), []byte("y")); err != nil || len(b) != maxAnswer+1 {
		t.Fatalf("an answer at the limit: %d bytes, %v", len(b), err)
	}
	if _, err := readAll(strings.NewReader(strings.Repeat("x", maxAnswer+1)), nil); err == nil || !strings.Contains(err.Error(), "over") {
		t.Fatalf("an answer past the limit: %v", err)
	}
}
