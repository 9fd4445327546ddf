package console_test

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/console"
	"github.com/agenthost/agenthost/host/httpapi"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/host/wasm"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

var updateScreenshot = flag.Bool("update-screenshot", false, "write the timeline screenshot to docs/img/console-timeline.png")

// limit bounds every wait of the browser tests: long, as a loaded machine
// may be slow to start chromium or to build the guest.
const limit = 3 * time.Minute

const token = "console-test-token"

// gatedServer is the API and the console over a runtime whose scripted model
// steps each wait to be released, so a test keeps a thread busy for as long
// as it needs.
type gatedServer struct {
	*httptest.Server
	rt      *host.Runtime
	gate    chan struct{}
	entered chan struct{}
}

// release lets the model step that is waiting (or the next one) finish,
// once it has started.
func (s *gatedServer) release(t *testing.T) {
	t.Helper()
	s.waitStep(t)
	select {
	case s.gate <- struct{}{}:
	case <-time.After(limit):
		t.Fatal("no model step took the release")
	}
}

// waitStep waits until a model step has started and waits for its release.
func (s *gatedServer) waitStep(t *testing.T) {
	t.Helper()
	select {
	case <-s.entered:
	case <-time.After(limit):
		t.Fatal("no model step started")
	}
}

type lookupTool struct{}

func (lookupTool) Spec() model.ToolSpec {
	return model.ToolSpec{Name: "lookup", Description: "looks up notes about the thread"}
}
func (lookupTool) Call(context.Context, string) (string, error) { return "no notes", nil }

func newGatedServer(t *testing.T) *gatedServer {
	t.Helper()
	m, err := model.NewScripted(model.Script{Steps: []model.ScriptStep{
		{Tool: &model.ScriptTool{Name: "lookup", Arguments: `{"q":"notes"}`}},
		{Answer: "echo"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	s := &gatedServer{gate: make(chan struct{}), entered: make(chan struct{}, 64)}
	stop := make(chan struct{})
	m.Sleep = func(ctx context.Context, _ time.Duration) error {
		s.entered <- struct{}{}
		select {
		case <-s.gate:
			return nil
		case <-stop:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	ctx := context.Background()
	eng, err := wasm.NewEngine(ctx, wasm.EngineConfig{CacheDir: filepath.Join(os.TempDir(), "agenthost-console-test-wasm-cache")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close(context.Background()) })
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	pol, err := eng.Load(ctx, injectGuest(t), wasm.Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	s.rt, err = host.New(ctx, host.Config{Driver: memdriver.New(), Model: m, Tools: []model.Tool{lookupTool{}}, Policy: pol, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	s.Server = httptest.NewServer(console.Mount(httpapi.New(s.rt, httpapi.Options{Token: token, Logger: logger})))
	t.Cleanup(func() {
		close(stop)
		s.Close()
		cctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		s.rt.Close(cctx)
	})
	return s
}

// injectGuest builds the standard inject policy guest (GOOS=wasip1).
func injectGuest(t *testing.T) []byte {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("AGENTHOST_REQUIRE_ALL") != "1" {
			t.Skipf("no go command to build the inject guest: %v", err)
		}
		t.Fatalf("no go command to build the inject guest: %v", err)
	}
	out := filepath.Join(t.TempDir(), "inject.wasm")
	cmd := exec.Command(gobin, "build", "-buildmode=c-shared", "-o", out, "github.com/agenthost/agenthost/guests/policy/inject")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the inject guest: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// chromium finds Debian's chromium, or skips the test (fails it under
// AGENTHOST_REQUIRE_ALL=1).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("AGENTHOST_REQUIRE_ALL") == "1" {
		t.Fatal("chromium is not installed (apt-get install chromium) and AGENTHOST_REQUIRE_ALL=1")
	}
	t.Skip("chromium is not installed (apt-get install chromium)")
	return ""
}

// browser starts a headless chromium and returns a context driving one tab.
func browser(t *testing.T) context.Context {
	t.Helper()
	exe := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox, // the CI runs as root
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelC := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelC(); cancelA() })
	// Start the browser now (the first call's context must carry no
	// deadline: the browser lives as long as it), under a bound.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("starting chromium: %v", err)
		}
	case <-time.After(limit):
		t.Fatal("chromium did not start")
	}
	return ctx
}

type css = chromedp.CSS

// run runs browser actions under the test's wait bound.
func run(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	if err := chromedp.Do(c, actions...); err != nil {
		fail(t, ctx, what, err)
	}
}

// value runs one browser action that answers a value.
func value[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	v, err := chromedp.Run(c, a)
	if err != nil {
		fail(t, ctx, what, err)
	}
	return v
}

// fail ends the test with what the page shows.
func fail(t *testing.T, ctx context.Context, what string, err error) {
	t.Helper()
	pc, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	page, _ := chromedp.Run(pc, chromedp.Text(css("main")))
	t.Fatalf("%s: %v\npage text:\n%s", what, err, page)
}

// submit types an input into the page's submit form and returns the run id
// the server answered, different from every id in not.
func submit(t *testing.T, ctx context.Context, content string, not ...string) string {
	t.Helper()
	sel := `#submit-result a[data-run-link]`
	for _, id := range not {
		sel += `:not([data-run-link="` + id + `"])`
	}
	run(t, ctx, "submitting "+content,
		chromedp.WaitVisible(css(`#submit-content`)),
		chromedp.SendKeys(css(`#submit-content`), content),
		chromedp.Click(css(`#submit-form button[type=submit]`)),
		chromedp.WaitVisible(css(sel)),
	)
	res := value(t, ctx, "reading the run id", chromedp.AttributeValue(css(sel), "data-run-link"))
	id := res.Value
	if id == "" {
		t.Fatalf("submitting %q: no run id on the page", content)
	}
	return id
}

func waitRun(t *testing.T, rt *host.Runtime, id string) host.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	res, err := rt.Wait(ctx, id)
	if err != nil {
		t.Fatalf("waiting for %s: %v", id, err)
	}
	return res
}

// TestConsole drives the console in chromium: the token, an input absorbed
// into the run that was working (drawn as an arrow once that run completes),
// and cancelling a queued run from its page.
func TestConsole(t *testing.T) {
	ctx := browser(t)
	s := newGatedServer(t)

	t.Run("wrong token", func(t *testing.T) {
		run(t, ctx, "signing in with a wrong token",
			chromedp.Navigate(s.URL+"/ui/"),
			chromedp.WaitVisible(css(`#token`)),
			chromedp.SendKeys(css(`#token`), "not-the-token"),
			chromedp.Click(css(`#token-form button[type=submit]`)),
			chromedp.WaitVisible(css(`#token-msg .notice.error`)),
		)
		msg := value(t, ctx, "reading the message", chromedp.Text(css(`#token-msg`)))
		if !strings.Contains(msg, "refused this token") || !strings.Contains(msg, "401") {
			t.Fatalf("message for a wrong token: %q", msg)
		}
		run(t, ctx, "signing in with the token",
			chromedp.Clear(css(`#token`)),
			chromedp.SendKeys(css(`#token`), token),
			chromedp.Click(css(`#token-form button[type=submit]`)),
			chromedp.WaitVisible(css(`input#q`)),
		)
		writeScreenshot(t, "console-threads.png", value(t, ctx, "a screenshot of the threads page", chromedp.FullScreenshot(100)))
	})

	t.Run("an injected input's arrow reaches the run that answered it", func(t *testing.T) {
		run(t, ctx, "opening the thread", chromedp.Navigate(s.URL+"/ui/#/threads/T1"), chromedp.WaitVisible(css(`#submit-content`)))
		first := submit(t, ctx, "what is on the calendar today?")
		s.release(t) // the tool call
		s.release(t) // the answer
		waitRun(t, s.rt, first)
		a := submit(t, ctx, "summarise this thread", first)
		s.waitStep(t) // A's first model call is under way: the next input is offered to it
		b := submit(t, ctx, "actually, in bullet points", first, a)
		run(t, ctx, "the timeline shows B's input with the policy's decision",
			chromedp.WaitVisible(css(`#timeline [data-run="`+b+`"] [data-input][data-decision="inject"]`)),
			chromedp.WaitVisible(css(`#timeline [data-run="`+a+`"][data-state="active"]`)),
		)
		if *updateScreenshot {
			// Not a wait for anything: for the picture, A works on for a
			// while after B arrived, as a model does.
			time.Sleep(2 * time.Second)
		}
		select {
		case s.gate <- struct{}{}: // A's tool call
		case <-time.After(limit):
			t.Fatal("A's first step did not take the release")
		}
		s.release(t) // A's answer, with B's input taken at its boundary
		res := waitRun(t, s.rt, b)
		if res.AnsweredByRunID != a || res.TerminalReason != record.ReasonAbsorbed {
			t.Fatalf("B was not absorbed into A: %+v", res)
		}
		arrow := `#timeline [data-arrow][data-kind="absorbed"][data-from-run="` + b + `"][data-to-run="` + a + `"]`
		run(t, ctx, "the arrow from B's input reaches A once A completed",
			chromedp.WaitReady(css(arrow)),
			chromedp.WaitVisible(css(`#timeline [data-run="`+a+`"][data-state="completed"]`)),
			chromedp.WaitVisible(css(`#timeline [data-run="`+b+`"][data-state="superseded"]`)),
			chromedp.ScrollIntoView(css(`#timeline-section`)),
		)
		png := value(t, ctx, "a screenshot of the timeline", chromedp.Screenshot(css(`#timeline-section`)))
		writeScreenshot(t, "console-timeline.png", png)
		if *updateScreenshot {
			if err := os.WriteFile(filepath.Join("..", "..", "docs", "img", "console-timeline.png"), png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		scheme(t, ctx, "dark")
		dark := value(t, ctx, "a screenshot of the timeline, dark", chromedp.Screenshot(css(`#timeline-section`)))
		scheme(t, ctx, "light")
		writeScreenshot(t, "console-timeline-dark.png", dark)
		// The run's page: its transcript holds B's input and the tool call
		// with its idempotency key.
		run(t, ctx, "opening A's page from the timeline",
			chromedp.Focus(css(`#timeline [data-run="`+a+`"]`)),
			chromedp.KeyEvent("\r"),
			chromedp.WaitVisible(css(`#run-state[data-state="completed"]`)),
			chromedp.WaitVisible(css(`[data-call]`)),
		)
		text := value(t, ctx, "reading A's page", chromedp.Text(css(`main`)))
		writeScreenshot(t, "console-run.png", value(t, ctx, "a screenshot of A's page", chromedp.FullScreenshot(100)))
		for _, want := range []string{"actually, in bullet points", "lookup", a + "/step0/0"} {
			if !strings.Contains(text, want) {
				t.Errorf("A's page lacks %q:\n%s", want, text)
			}
		}
	})

	t.Run("cancel a queued run from its page", func(t *testing.T) {
		tk, err := s.rt.Submit(context.Background(), "T2", "write a report", host.SubmitOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.waitStep(t)
		q, err := s.rt.Submit(context.Background(), "T2", "and a summary", host.SubmitOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r, err := s.rt.Run(context.Background(), q.RunID); err != nil || r.State != record.StateQueued {
			t.Fatalf("second run: %+v, %v; want it queued", r, err)
		}
		run(t, ctx, "cancelling the queued run",
			chromedp.Navigate(s.URL+"/ui/#/runs/"+q.RunID),
			chromedp.WaitVisible(css(`#run-state[data-state="queued"]`)),
			chromedp.Click(css(`#cancel`)),
			chromedp.WaitVisible(css(`#cancel-yes`)),
			chromedp.Click(css(`#cancel-yes`)),
			chromedp.WaitVisible(css(`#run-state[data-state="interrupted"]`)),
		)
		msg := value(t, ctx, "reading the run's page", chromedp.Text(css(`main`)))
		if !strings.Contains(msg, "Canceled") {
			t.Errorf("no confirmation on the page:\n%s", msg)
		}
		r, err := s.rt.Run(context.Background(), q.RunID)
		if err != nil || r.State != record.StateInterrupted || r.TerminalReason != record.ReasonCanceled {
			t.Fatalf("canceled run: %+v, %v", r, err)
		}
		select {
		case s.gate <- struct{}{}:
		case <-time.After(limit):
			t.Fatal("the first run's step did not take the release")
		}
		s.release(t)
		if res := waitRun(t, s.rt, tk.RunID); res.State != record.StateCompleted {
			t.Fatalf("first run: %+v", res)
		}
	})
}

// scheme makes the page prefer a light or dark color scheme.
func scheme(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	_, err := chromedp.Call(c, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: name}},
	})
	if err != nil {
		t.Fatalf("emulating the %s scheme: %v", name, err)
	}
}

func writeScreenshot(t *testing.T, name string, png []byte) {
	t.Helper()
	p := filepath.Join(t.ArtifactDir(), name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
}

// The console's files are served with their headers under /ui/, and every
// other path goes to the API.
func TestMount(t *testing.T) {
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	srv := httptest.NewServer(console.Mount(api))
	defer srv.Close()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, c := range []struct {
		method, path string
		status       int
		want         string
	}{
		{"GET", "/ui/", 200, "agenthost console"},
		{"GET", "/ui/app.js", 200, "streamRunEvents"},
		{"GET", "/ui/timeline.js", 200, "buildModel"},
		{"GET", "/ui/style.css", 200, "prefers-color-scheme"},
		{"GET", "/ui", 301, ""},
		{"POST", "/ui/", 405, ""},
		{"GET", "/ui/nothing.js", 404, ""},
		{"GET", "/v1/runs/x", 418, ""},
		{"GET", "/uix", 418, ""},
	} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, nil)
		res, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != c.status || !strings.Contains(string(body), c.want) {
			t.Errorf("%s %s: %d %.80q, want %d with %q", c.method, c.path, res.StatusCode, body, c.status, c.want)
		}
		if c.status == 200 && !strings.Contains(res.Header.Get("Content-Security-Policy"), "script-src 'self'") {
			t.Errorf("%s %s: no content security policy", c.method, c.path)
		}
		if c.path == "/ui" && res.Header.Get("Location") != "/ui/" {
			t.Errorf("GET /ui redirects to %q", res.Header.Get("Location"))
		}
	}
}
