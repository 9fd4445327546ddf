package soak

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// BadInputs sends requests a server must refuse, each with its documented
// error code (docs/http-api.md), and slow clients that trickle their body.
type BadInputs struct {
	C       *Client
	Addr    string // host:port, for the slow clients' raw connections
	MaxBody int    // the server's max_body_bytes
	Load    *Load  // source of accepted keys (key_reused) and of threads

	mu      sync.Mutex
	sent    int // answered with the expected code
	skipped int // the server was away (transport error or 503)
	slow    int // slow clients accepted
	errs    []error
}

// badCase is one request and the answer it must get.
type badCase struct {
	name         string
	method, path string
	body         []byte
	key          string // the Idempotency-Key, if any
	status       int
	code         string
}

func (b *BadInputs) cases(rng *rand.Rand) []badCase {
	thread := b.Load.ThreadID(rng.IntN(b.Load.cfg.Threads))
	in := "/v1/threads/" + thread + "/inputs"
	post := func(name, body string, status int, code string) badCase {
		return badCase{name: name, method: "POST", path: in, body: []byte(body), status: status, code: code,
			key: fmt.Sprintf("bad-%x", rng.Uint64())}
	}
	big := `{"content":"` + strings.Repeat("x", b.MaxBody+1024) + `"}`
	unknownRun := fmt.Sprintf("run_%032x", rng.Uint64())
	unknownThread := fmt.Sprintf("nothread-%x", rng.Uint64())
	cs := []badCase{
		post("truncated JSON", `{"content": "half`, 400, "bad_request"),
		post("not JSON", `summarise this thread`, 400, "bad_request"),
		post("unknown field", `{"content":"x","priority":1}`, 400, "bad_request"),
		post("empty content", `{"content":"   "}`, 400, "bad_request"),
		post("two JSON values", `{"content":"a"}{"content":"b"}`, 400, "bad_request"),
		post("wrong type", `{"content":42}`, 400, "bad_request"),
		post("oversized body", big, 413, "too_large"),
		{name: "key too long", method: "POST", path: in, body: []byte(`{"content":"x"}`), key: strings.Repeat("k", 300), status: 400, code: "bad_request"},
		{name: "thread id too long", method: "POST", path: "/v1/threads/" + strings.Repeat("t", 300) + "/inputs", body: []byte(`{"content":"x"}`), status: 400, code: "bad_request"},
		{name: "unknown thread runs", method: "GET", path: "/v1/threads/" + unknownThread + "/runs", status: 404, code: "not_found"},
		{name: "unknown thread messages", method: "GET", path: "/v1/threads/" + unknownThread + "/messages", status: 404, code: "not_found"},
		{name: "unknown run", method: "GET", path: "/v1/runs/" + unknownRun, status: 404, code: "not_found"},
		{name: "unknown run result", method: "GET", path: "/v1/runs/" + unknownRun + "/result?wait=10ms", status: 404, code: "not_found"},
		{name: "unknown run cancel", method: "POST", path: "/v1/runs/" + unknownRun + "/cancel", status: 404, code: "not_found"},
		{name: "unknown run events", method: "GET", path: "/v1/runs/" + unknownRun + "/events", status: 404, code: "not_found"},
		{name: "bad wait", method: "GET", path: "/v1/runs/" + unknownRun + "/result?wait=soon", status: 400, code: "bad_request"},
		{name: "unknown route", method: "GET", path: "/v1/nothing", status: 404, code: "not_found"},
	}
	if subs := b.Load.Submissions(); len(subs) > 0 {
		s := subs[rng.IntN(len(subs))]
		body, _ := json.Marshal(SubmitBody{Content: s.Content + " (changed)", Hint: s.Hint})
		cs = append(cs, badCase{name: "key reused", method: "POST", path: "/v1/threads/" + s.Thread + "/inputs", body: body,
			key: s.Key, status: 422, code: "key_reused"})
	}
	return cs
}

// send sends c and checks its answer. away reports that the server was
// not there to answer.
func (b *BadInputs) send(ctx context.Context, c badCase) (away bool, err error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := b.C.do(rctx, c.method, c.path, c.body, c.key, nil)
	if retryable(err) {
		return true, nil
	}
	p, _ := err.(*Problem)
	if p == nil {
		return false, fmt.Errorf("bad input %q (%s %s): got %d, want %d %s", c.name, c.method, c.path, st, c.status, c.code)
	}
	if p.Status != c.status || p.Code != c.code {
		return false, fmt.Errorf("bad input %q (%s %.80s): got %d %s (%s), want %d %s", c.name, c.method, c.path, p.Status, p.Code, p.Detail, c.status, c.code)
	}
	return false, nil
}

func (b *BadInputs) note(away bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case err != nil:
		b.errs = append(b.errs, err)
	case away:
		b.skipped++
	default:
		b.sent++
	}
}

// Run sends a random bad request (or a slow client) every interval until
// stop is closed.
func (b *BadInputs) Run(ctx context.Context, seed uint64, interval time.Duration, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(seed, 0xbad))
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
		if i%10 == 9 {
			// A slow client alongside: it must not hold the others up.
			thread := b.Load.ThreadID(rng.IntN(b.Load.cfg.Threads))
			key := fmt.Sprintf("slow%x-%d", seed, i)
			content := fmt.Sprintf("[slow.%d] summarise this thread, slowly", i)
			wg.Add(1)
			go func() {
				defer wg.Done()
				b.slowClient(ctx, thread, key, content)
			}()
			continue
		}
		cs := b.cases(rng)
		b.note(b.send(ctx, cs[rng.IntN(len(cs))]))
	}
}

// All sends every case once with the server up; a server away is retried
// a few times, then is an error.
func (b *BadInputs) All(ctx context.Context, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0xa11))
	for _, c := range b.cases(rng) {
		var away bool
		var err error
		for try := 0; try < 20; try++ {
			if away, err = b.send(ctx, c); !away {
				break
			}
			sleep(ctx, 250*time.Millisecond)
		}
		if away {
			err = fmt.Errorf("bad input %q: the server did not answer", c.name)
		}
		b.note(false, err)
	}
}

// slowClient submits a valid input whose body it trickles over about two
// seconds on a raw connection. Accepted, it is recorded like any other
// submission; cut off by a kill, it is retried at normal speed with the
// same key, as a client would.
func (b *BadInputs) slowClient(ctx context.Context, thread, key, content string) {
	body, _ := json.Marshal(SubmitBody{Content: content})
	s := Submission{Thread: thread, Key: key, Content: content, SubmittedAt: time.Now()}
	a, err := b.trickle(ctx, thread, key, body)
	s.Attempts = 1
	if err != nil && retryable(err) {
		var n int
		a, n, err = b.Load.submit(ctx, rand.New(rand.NewPCG(uint64(len(key)), 7)), thread, key, SubmitBody{Content: content})
		s.Attempts += n
	}
	switch {
	case err == nil:
		s.RunID, s.InputMessageID, s.AcceptedAt = a.RunID, a.InputMessageID, time.Now()
		b.Load.Record(s)
		b.mu.Lock()
		b.slow++
		b.mu.Unlock()
	case retryable(err):
		b.note(true, nil)
	default:
		b.note(false, fmt.Errorf("slow client %s on %s: %w", key, thread, err))
	}
}

func (b *BadInputs) trickle(ctx context.Context, thread, key string, body []byte) (Admission, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", b.Addr)
	if err != nil {
		return Admission{}, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "POST /v1/threads/%s/inputs HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nIdempotency-Key: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n",
		thread, b.Addr, key, len(body))
	chunk := max(len(body)/20, 1)
	for i := 0; i < len(body); i += chunk {
		if _, err := conn.Write(body[i:min(i+chunk, len(body))]); err != nil {
			return Admission{}, err
		}
		sleep(ctx, 100*time.Millisecond)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return Admission{}, err
	}
	defer resp.Body.Close()
	var a Admission
	dec := json.NewDecoder(resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		p := &Problem{}
		dec.Decode(p)
		p.Status = resp.StatusCode
		return Admission{}, p
	}
	if err := dec.Decode(&a); err != nil {
		return Admission{}, err
	}
	return a, nil
}

// Counts returns the requests answered as documented, those skipped while
// the server was away, and the slow clients accepted.
func (b *BadInputs) Counts() (sent, skipped, slow int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sent, b.skipped, b.slow
}

// Errors returns the answers that were not the documented ones.
func (b *BadInputs) Errors() []error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]error(nil), b.errs...)
}
