package httpapi_test

import (
	"context"
	"net/http"
	"slices"
	"sort"
	"sync"
	"testing"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/httpapi"
	"github.com/agenthost/agenthost/internal/apitest"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// plainDriver hides every optional interface of the driver it holds:
// ThreadLister among them.
type plainDriver struct{ driver.Driver }

// listingDriver is a driver that lists its threads: the ones it saw
// committed, read back from the driver it wraps.
type listingDriver struct {
	driver.Driver
	mu  sync.Mutex
	ids map[string]bool
}

func (l *listingDriver) Commit(ctx context.Context, b driver.Batch) (int64, error) {
	v, err := l.Driver.Commit(ctx, b)
	if err == nil {
		l.mu.Lock()
		l.ids[b.ThreadID] = true
		l.mu.Unlock()
	}
	return v, err
}

func (l *listingDriver) ListThreads(ctx context.Context, after string, limit int) ([]record.Thread, error) {
	l.mu.Lock()
	var ids []string
	for id := range l.ids {
		if id > after {
			ids = append(ids, id)
		}
	}
	l.mu.Unlock()
	sort.Strings(ids)
	var out []record.Thread
	for _, id := range ids[:min(limit, len(ids))] {
		snap, err := l.Driver.LoadThread(ctx, id)
		if err != nil {
			return nil, err
		}
		out = append(out, snap.Thread)
	}
	return out, nil
}

func serveDriver(t *testing.T, d driver.Driver) *server {
	t.Helper()
	api := apitest.New(t, apitest.Config{Host: host.Config{Driver: d}})
	return &server{Server: api.Server, rt: api.Runtime}
}

// settle submits content to thread and waits for its answer.
func (s *server) settle(t *testing.T, thread, body string) httpapi.Admission {
	t.Helper()
	resp, b := s.do(t, "POST", "/v1/threads/"+thread+"/inputs", body)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("submit: %d %s", resp.StatusCode, b)
	}
	adm := decode[httpapi.Admission](t, b)
	if resp, b := s.do(t, "GET", "/v1/runs/"+adm.RunID+"/result?wait=60s", ""); resp.StatusCode != 200 {
		t.Fatalf("result: %d %s", resp.StatusCode, b)
	}
	return adm
}

func TestListThreads(t *testing.T) {
	s := serveDriver(t, &listingDriver{Driver: memdriver.New(), ids: map[string]bool{}})
	for _, th := range []string{"c", "a", "b"} {
		s.settle(t, th, `{"content":"hi"}`)
	}
	resp, body := s.do(t, "GET", "/v1/threads?limit=2", "")
	page := decode[httpapi.ThreadPage](t, body)
	if resp.StatusCode != 200 || len(page.Threads) != 2 || page.Threads[0].ID != "a" || page.Threads[1].ID != "b" || page.NextCursor != "b" {
		t.Fatalf("first page: %d %s", resp.StatusCode, body)
	}
	th := page.Threads[0]
	if th.Version == 0 || th.Busy || th.OpenRunIDs == nil || len(th.OpenRunIDs) != 0 || th.UpdatedAt.IsZero() {
		t.Errorf("thread a: %+v", th)
	}
	_, body = s.do(t, "GET", "/v1/threads?limit=2&after="+page.NextCursor, "")
	page = decode[httpapi.ThreadPage](t, body)
	if len(page.Threads) != 1 || page.Threads[0].ID != "c" || page.NextCursor != "" {
		t.Fatalf("last page: %s", body)
	}
	_, body = s.do(t, "GET", "/v1/threads", "")
	if page = decode[httpapi.ThreadPage](t, body); len(page.Threads) != 3 || page.NextCursor != "" {
		t.Fatalf("one page of all: %s", body)
	}
	for _, q := range []string{"limit=0", "limit=1001", "limit=x"} {
		resp, body := s.do(t, "GET", "/v1/threads?"+q, "")
		wantProblem(t, resp, body, http.StatusBadRequest, "bad_request")
	}
}

func TestListThreadsNotSupported(t *testing.T) {
	s := serveDriver(t, plainDriver{memdriver.New()})
	resp, body := s.do(t, "GET", "/v1/threads", "")
	wantProblem(t, resp, body, http.StatusNotImplemented, "not_implemented")
}

// TestRunsAndMessagesPages: both routes page with after and limit, and the
// messages carry the inputs' metadata and hints.
func TestRunsAndMessagesPages(t *testing.T) {
	s := serveDriver(t, memdriver.New())
	var runs []string
	for _, c := range []string{"one", "two", "three"} {
		runs = append(runs, s.settle(t, "T", `{"content":"`+c+`","hint":"h-`+c+`","metadata":{"n":"`+c+`"}}`).RunID)
	}
	var got []string
	after := ""
	for range 3 {
		_, body := s.do(t, "GET", "/v1/threads/T/runs?limit=2&after="+after, "")
		page := decode[httpapi.RunPage](t, body)
		for _, r := range page.Runs {
			got = append(got, r.ID)
		}
		if after = page.NextCursor; after == "" {
			break
		}
	}
	if !slices.Equal(got, runs) {
		t.Fatalf("runs paged %v, want %v", got, runs)
	}
	var msgs []httpapi.Message
	after = ""
	pages := 0
	for range 10 {
		_, body := s.do(t, "GET", "/v1/threads/T/messages?limit=4&after="+after, "")
		page := decode[httpapi.MessagePage](t, body)
		msgs = append(msgs, page.Messages...)
		pages++
		if after = page.NextCursor; after == "" {
			break
		}
	}
	if len(msgs) != 6 || pages != 2 {
		t.Fatalf("%d messages in %d pages, want 6 in 2", len(msgs), pages)
	}
	if m := msgs[2]; m.Role != "user" || m.Content != "two" || m.Hint != "h-two" || m.Metadata["n"] != "two" {
		t.Errorf("input message %+v: want its hint and metadata", m)
	}
	if m := msgs[3]; m.Role != "assistant" || m.Metadata != nil {
		t.Errorf("answer %+v", m)
	}
	resp, body := s.do(t, "GET", "/v1/threads/T/messages?after=x", "")
	wantProblem(t, resp, body, http.StatusBadRequest, "bad_request")
}
