// Package dbospeer is a peer benchmark for agenthost: the same unit of work
// as one agenthost run (durably admit an input under an idempotency key, make
// one zero-delay model step, durably commit its answer, wait for it), done as
// a one-step durable workflow in DBOS Transact for Go over PostgreSQL.
//
// It is a module of its own so that the runtime's go.mod never depends on
// DBOS. See README.md.
package dbospeer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"
)

const (
	envPGURL      = "AGENTHOST_PG_URL"
	envRequireAll = "AGENTHOST_REQUIRE_ALL"
)

// stepRuns counts executions of the model step, so that the idempotency test
// can tell a replayed result from a re-execution.
var stepRuns atomic.Int64

// answerTo is the "model": zero delay, a short answer derived from the input.
func answerTo(input string) string { return "answer: " + input }

// oneStep is the workflow: exactly one durable step, whose result is the
// workflow's result.
func oneStep(ctx dbos.Context, input string) (string, error) {
	return dbos.RunAsStep(ctx, func(context.Context) (string, error) {
		stepRuns.Add(1)
		return answerTo(input), nil
	}, dbos.WithStepName("model"))
}

// pgURL returns the superuser URL of the PostgreSQL server to use, or skips
// (fails under AGENTHOST_REQUIRE_ALL=1) when none is given.
func pgURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv(envPGURL)
	if u == "" {
		msg := envPGURL + " is not set: this peer benchmark needs a PostgreSQL server " +
			"(a superuser URL, e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable)"
		if os.Getenv(envRequireAll) == "1" {
			tb.Fatal(msg + ", and " + envRequireAll + "=1")
		}
		// A skipped benchmark says nothing without -v: say it on stderr too.
		fmt.Fprintln(os.Stderr, "dbospeer: skipped: "+msg)
		tb.Skip(msg)
	}
	return u
}

// withDatabase returns connURL with its database replaced by name. It takes
// both URL (postgres://...) and keyword/value DSN forms.
func withDatabase(connURL, name string) (string, error) {
	if strings.HasPrefix(connURL, "postgres://") || strings.HasPrefix(connURL, "postgresql://") {
		u, err := url.Parse(connURL)
		if err != nil {
			return "", err
		}
		u.Path = "/" + name
		u.RawPath = ""
		return u.String(), nil
	}
	// keyword/value DSN: a later key overrides an earlier one.
	return connURL + " dbname=" + name, nil
}

// freshDatabase creates a database of its own on the server at adminURL and
// drops it when tb ends (after DBOS, registered later, has shut down). It
// returns the new database's URL and its name.
func freshDatabase(tb testing.TB, adminURL string) (string, string) {
	tb.Helper()
	ctx := context.Background()
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		tb.Fatal(err)
	}
	name := "dbospeer_" + hex.EncodeToString(rnd[:])
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		tb.Fatalf("connecting to %s: %v", envPGURL, err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		tb.Fatalf("creating database %s: %v", name, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		admin, err := pgx.Connect(ctx, adminURL)
		if err != nil {
			tb.Errorf("dropping database %s: %v", name, err)
			return
		}
		defer admin.Close(ctx)
		// FORCE (PostgreSQL 13+) ends any connection DBOS left behind.
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			tb.Errorf("dropping database %s: %v", name, err)
		}
	})
	dbURL, err := withDatabase(adminURL, name)
	if err != nil {
		tb.Fatalf("%s: %v", envPGURL, err)
	}
	return dbURL, name
}

// launch starts DBOS on a fresh system database with the one-step workflow
// registered, and shuts it down when tb ends. DBOS logs at warning level and
// above only: at info level it announces its startup and shutdown.
func launch(tb testing.TB) (dbos.Context, string) {
	tb.Helper()
	dbURL, name := freshDatabase(tb, pgURL(tb))
	ctx, err := dbos.NewContext(context.Background(), dbos.Config{
		AppName:     "dbospeer",
		DatabaseURL: dbURL,
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		tb.Fatalf("dbos.NewContext: %v", err)
	}
	dbos.RegisterWorkflow(ctx, oneStep)
	if err := dbos.Launch(ctx); err != nil {
		dbos.Shutdown(ctx, 30*time.Second)
		tb.Fatalf("dbos.Launch: %v", err)
	}
	tb.Cleanup(func() {
		if err := dbos.Shutdown(ctx, 30*time.Second); err != nil {
			tb.Errorf("dbos.Shutdown: %v", err)
		}
	})
	return ctx, name
}

// submitAndWait is one run: start the workflow under the idempotency key id
// and wait for its result.
func submitAndWait(ctx dbos.Context, id, input string) error {
	h, err := dbos.RunWorkflow(ctx, oneStep, input, dbos.WithWorkflowID(id))
	if err != nil {
		return fmt.Errorf("RunWorkflow %s: %w", id, err)
	}
	got, err := h.GetResult()
	if err != nil {
		return fmt.Errorf("GetResult %s: %w", id, err)
	}
	if want := answerTo(input); got != want {
		return fmt.Errorf("workflow %s returned %q, want %q", id, got, want)
	}
	return nil
}

// BenchmarkDBOSOneStepWorkflow: runs per second of a durable one-step DBOS
// workflow, b.N workflows spread over a fixed number of concurrent
// submitters, each starting one workflow at a time under a fresh workflow ID
// (its idempotency key) and waiting for its result. DBOS is launched once,
// outside the timer, on a database of its own that is dropped at the end.
// ns/op is wall time divided by runs, the inverse of runs/s; mean-latency-ms
// is the mean time one submitter waited for one run.
func BenchmarkDBOSOneStepWorkflow(b *testing.B) {
	ctx, name := launch(b)
	var seq atomic.Int64 // workflow IDs are unique across sub-benchmarks and their rounds
	for _, conc := range []int{1, 64} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			var (
				next    atomic.Int64
				waited  atomic.Int64 // nanoseconds, summed over runs
				wg      sync.WaitGroup
				errOnce sync.Once
			)
			b.ResetTimer()
			start := time.Now()
			for range conc {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						n := seq.Add(1)
						began := time.Now()
						err := submitAndWait(ctx, fmt.Sprintf("%s-%d", name, n), fmt.Sprintf("in %d", n))
						waited.Add(int64(time.Since(began)))
						if err != nil {
							errOnce.Do(func() { b.Error(err) })
							return
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "runs/s")
			b.ReportMetric(float64(waited.Load())/float64(b.N)/1e6, "mean-latency-ms")
		})
	}
}

// TestDBOSWorkflowIDIsIdempotencyKey checks the premise of the comparison:
// starting the workflow again under the same ID returns the recorded answer
// without running the step again, as agenthost answers a repeated
// idempotency key from its record.
func TestDBOSWorkflowIDIsIdempotencyKey(t *testing.T) {
	ctx, name := launch(t)
	id := name + "-key"
	before := stepRuns.Load()
	if err := submitAndWait(ctx, id, "hello"); err != nil {
		t.Fatal(err)
	}
	h, err := dbos.RunWorkflow(ctx, oneStep, "other input", dbos.WithWorkflowID(id))
	if err != nil {
		t.Fatal(err)
	}
	got, err := h.GetResult()
	if err != nil {
		t.Fatal(err)
	}
	if want := answerTo("hello"); got != want {
		t.Fatalf("second start under %s returned %q, want the recorded %q", id, got, want)
	}
	if n := stepRuns.Load() - before; n != 1 {
		t.Fatalf("the step ran %d times for one workflow ID, want 1", n)
	}
}
