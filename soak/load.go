package soak

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// LoadConfig configures the load generator.
type LoadConfig struct {
	// Seed drives every choice: threads, texts, hints, keys, pauses.
	Seed uint64
	// Threads is the number of threads submitted to.
	Threads int
	// Workers is the number of concurrent clients.
	Workers int
	// Target stops the load after this many accepted submissions (0: run
	// until Stop or the context ends).
	Target int
	// Pause is the longest pause of a client between two submissions.
	Pause time.Duration
	// RequestTimeout bounds one HTTP request. Default 5s.
	RequestTimeout time.Duration
	// RetryBudget bounds the retries of one submission; a submission that
	// is not accepted within it is abandoned. Default 90s.
	RetryBudget time.Duration
	// DupRate is the share of accepted submissions that the client sends
	// again at once with the same key, as a client that lost the answer
	// would; the answer must be the same admission.
	DupRate float64
}

// Submission is one submission the server accepted (202).
type Submission struct {
	N              int       `json:"n"`
	Thread         string    `json:"thread"`
	Key            string    `json:"key"`
	Content        string    `json:"content"`
	Hint           string    `json:"hint,omitempty"`
	RunID          string    `json:"run_id"`
	InputMessageID string    `json:"input_message_id"`
	Attempts       int       `json:"attempts"`
	SubmittedAt    time.Time `json:"submitted_at"`
	AcceptedAt     time.Time `json:"accepted_at"`
}

// Load is a running load generator.
type Load struct {
	cfg  LoadConfig
	c    *Client
	stop chan struct{}
	once sync.Once

	mu        sync.Mutex
	subs      []Submission
	errs      []error
	accepted  atomic.Int64
	abandoned atomic.Int64
	retries   atomic.Int64
	dups      atomic.Int64
	n         atomic.Int64
}

// NewLoad returns a load generator for the server behind c.
func NewLoad(c *Client, cfg LoadConfig) *Load {
	if cfg.Threads <= 0 {
		cfg.Threads = 16
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 8
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 5 * time.Second
	}
	if cfg.RetryBudget <= 0 {
		cfg.RetryBudget = 90 * time.Second
	}
	return &Load{cfg: cfg, c: c, stop: make(chan struct{})}
}

// ThreadID returns the name of thread i.
func (l *Load) ThreadID(i int) string { return fmt.Sprintf("t%x-%03d", l.cfg.Seed, i) }

// Threads lists the thread names.
func (l *Load) Threads() []string {
	out := make([]string, l.cfg.Threads)
	for i := range out {
		out[i] = l.ThreadID(i)
	}
	return out
}

// Stop asks the clients to stop after their submission in flight.
func (l *Load) Stop() { l.once.Do(func() { close(l.stop) }) }

func (l *Load) stopped() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

// Accepted is the number of accepted submissions so far.
func (l *Load) Accepted() int { return int(l.accepted.Load()) }

// Submissions returns the accepted submissions.
func (l *Load) Submissions() []Submission {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Submission(nil), l.subs...)
}

// Errors returns what went wrong: answers no client should get.
func (l *Load) Errors() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// Stats returns the counts of abandoned submissions, retried requests and
// duplicate submissions checked.
func (l *Load) Stats() (abandoned, retries, dups int) {
	return int(l.abandoned.Load()), int(l.retries.Load()), int(l.dups.Load())
}

func (l *Load) fail(err error) {
	l.mu.Lock()
	l.errs = append(l.errs, err)
	l.mu.Unlock()
}

// Record adds an accepted submission made by someone else (the slow client).
func (l *Load) Record(s Submission) {
	l.mu.Lock()
	s.N = int(l.n.Add(1))
	l.subs = append(l.subs, s)
	l.mu.Unlock()
	l.accepted.Add(1)
}

// texts are the submissions' texts by kind, with the hint a client sends.
var texts = []struct {
	weight int
	hint   string
	texts  []string
}{
	{40, "", []string{"summarise this thread", "what is the capital of France?", "list three risks of the plan", "how many steps are left?", "explain the last answer"}},
	{22, "refine", []string{"actually, in bullet points", "make it shorter", "actually, add a table", "in French, please"}},
	{10, "", []string{"actually, in bullet points", "actually, shorter please"}},
	{14, "redirect", []string{"stop, do X instead", "stop, summarise the other document instead", "forget that, list the open issues"}},
	{6, "", []string{"stop, do X instead", "stop, answer the first question instead"}},
	{4, "", []string{"please fail this one"}},
	{4, "refine", []string{"please fail, but in bullet points"}},
}

// Pick returns a text and hint chosen with rng.
func Pick(rng *rand.Rand) (text, hint string) {
	total := 0
	for _, t := range texts {
		total += t.weight
	}
	x := rng.IntN(total)
	for _, t := range texts {
		if x < t.weight {
			return t.texts[rng.IntN(len(t.texts))], t.hint
		}
		x -= t.weight
	}
	panic("unreachable")
}

// Run runs the clients until Stop, the target or ctx, and returns when all
// submissions in flight are accepted or abandoned.
func (l *Load) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for w := range l.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.worker(ctx, w)
		}()
	}
	wg.Wait()
}

func (l *Load) worker(ctx context.Context, w int) {
	rng := rand.New(rand.NewPCG(l.cfg.Seed, uint64(w)+1))
	for i := 0; ctx.Err() == nil && !l.stopped(); i++ {
		if l.cfg.Target > 0 && l.Accepted() >= l.cfg.Target {
			l.Stop()
			return
		}
		thread := l.ThreadID(rng.IntN(l.cfg.Threads))
		text, hint := Pick(rng)
		key := fmt.Sprintf("k%x-%d-%d", l.cfg.Seed, w, i)
		body := SubmitBody{Content: fmt.Sprintf("[w%d.%d] %s", w, i, text), Hint: hint}
		s := Submission{Thread: thread, Key: key, Content: body.Content, Hint: hint, SubmittedAt: time.Now()}
		a, attempts, err := l.submit(ctx, rng, thread, key, body)
		s.Attempts = attempts
		switch {
		case err == nil:
			s.RunID, s.InputMessageID, s.AcceptedAt = a.RunID, a.InputMessageID, time.Now()
			l.Record(s)
			if rng.Float64() < l.cfg.DupRate {
				l.dups.Add(1)
				b, _, err := l.submit(ctx, rng, thread, key, body)
				if err == nil && (b.RunID != a.RunID || b.InputMessageID != a.InputMessageID) {
					l.fail(fmt.Errorf("key %s on %s: first admission %+v, repeated %+v", key, thread, a, b))
				} else if err != nil && !retryable(err) {
					l.fail(fmt.Errorf("key %s on %s: repeated submission: %w", key, thread, err))
				}
			}
		case retryable(err):
			l.abandoned.Add(1)
		default:
			l.fail(fmt.Errorf("submission %s on %s (%q, hint %q): %w", key, thread, body.Content, hint, err))
		}
		if l.cfg.Pause > 0 {
			sleep(ctx, time.Duration(rng.Int64N(int64(l.cfg.Pause))))
		}
	}
}

// submit posts until accepted, refused for good, or out of budget; it
// retries with the same key after transport errors, timeouts and 503.
func (l *Load) submit(ctx context.Context, rng *rand.Rand, thread, key string, body SubmitBody) (Admission, int, error) {
	deadline := time.Now().Add(l.cfg.RetryBudget)
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, l.cfg.RequestTimeout)
		a, err := l.c.Submit(rctx, thread, key, body)
		cancel()
		if err == nil || !retryable(err) || ctx.Err() != nil || time.Now().After(deadline) {
			if err == nil && (a.RunID == "" || a.InputMessageID == "") {
				err = errors.New("202 without run_id or input_message_id")
			}
			return a, attempt, err
		}
		l.retries.Add(1)
		sleep(ctx, backoff/2+time.Duration(rng.Int64N(int64(backoff))))
		backoff = min(backoff*2, time.Second)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
