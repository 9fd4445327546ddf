// Package httpapi serves the agenthost runtime over HTTP: JSON with
// snake_case fields, errors as RFC 9457 problem details with a stable code,
// run events as Server-Sent Events. docs/http-api.md describes every route;
// openapi.json in this folder is checked against the routes by a test.
package httpapi

import (
	"cmp"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host"
)

// Options configure the handler.
type Options struct {
	// MaxBodyBytes bounds request bodies. Default 1 MiB.
	MaxBodyBytes int64
	// Token, when set, is required as "Authorization: Bearer TOKEN" on every
	// route but /healthz and /readyz.
	Token string
	// MaxWait bounds the wait parameter of the result and submit routes.
	// Default 5m.
	MaxWait time.Duration
	Logger  *slog.Logger
	// DriverRestarts, when set, reports how often the store driver was
	// restarted (for /metrics).
	DriverRestarts func() int64
	// Collectors are further metrics /metrics serves: the wasm guests'
	// counters, the model and tool calls (package observe), for two.
	Collectors []prometheus.Collector
	// CommitLatency, when set, is reported by /metrics; the runtime observes
	// into it (host.Config.ObserveCommit).
	CommitLatency *CommitLatency
	// TracerProvider, when set, makes a server span of every request, a
	// child of the request's traceparent. A traceparent is honoured
	// without it too: the run answering a submission links to it.
	TracerProvider trace.TracerProvider
	// AccessLog logs a line per request (method, route, path, status,
	// bytes, duration, remote address) at level info.
	AccessLog bool
	// ReadyTimeout bounds the store check of /readyz. Default 2s.
	ReadyTimeout time.Duration
	// KeepAlive is the longest an event stream stays silent: a comment
	// line is sent when no event was for this long, so proxies and clients
	// do not take a quiet run for a dead connection. Default 15s.
	KeepAlive time.Duration
}

// Handler serves one runtime.
type Handler struct {
	rt  *host.Runtime
	opt Options
	mux *http.ServeMux
	log *slog.Logger
	// allow maps a route's path pattern to the methods it serves, for 405.
	allow          map[string][]string
	paths          *http.ServeMux
	http           httpMetrics
	metricsHandler http.Handler
	tracer         trace.Tracer // nil: no server spans
}

// routes is every route the handler serves: a "METHOD PATH" pattern of
// http.ServeMux and its handler.
var routes = []struct {
	pattern string
	serve   func(*Handler, http.ResponseWriter, *http.Request)
}{
	{"GET /v1/threads", (*Handler).listThreads},
	{"POST /v1/threads/{thread_id}/inputs", (*Handler).submit},
	{"GET /v1/threads/{thread_id}/runs", (*Handler).threadRuns},
	{"GET /v1/threads/{thread_id}/messages", (*Handler).threadMessages},
	{"GET /v1/runs/{run_id}", (*Handler).getRun},
	{"GET /v1/runs/{run_id}/result", (*Handler).result},
	{"GET /v1/runs/{run_id}/events", (*Handler).events},
	{"GET /v1/runs/{run_id}/steps", (*Handler).steps},
	{"POST /v1/runs/{run_id}/cancel", (*Handler).cancel},
	{"POST /v1/runs/{run_id}/approvals/{call_id}", (*Handler).approve},
	{"GET /healthz", (*Handler).healthz},
	{"GET /metrics", (*Handler).metrics},
	{"GET /readyz", (*Handler).readyz},
}

// Routes lists every route the handler serves, as "METHOD PATH" patterns.
var Routes = func() []string {
	out := make([]string, len(routes))
	for i, r := range routes {
		out[i] = r.pattern
	}
	return out
}()

// New returns a handler for rt.
func New(rt *host.Runtime, opt Options) *Handler {
	if opt.MaxBodyBytes <= 0 {
		opt.MaxBodyBytes = 1 << 20
	}
	if opt.MaxWait <= 0 {
		opt.MaxWait = 5 * time.Minute
	}
	if opt.KeepAlive <= 0 {
		opt.KeepAlive = 15 * time.Second
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.ReadyTimeout <= 0 {
		opt.ReadyTimeout = defaultReadyTimeout
	}
	h := &Handler{rt: rt, opt: opt, mux: http.NewServeMux(), log: opt.Logger, allow: map[string][]string{}, paths: http.NewServeMux(), http: newHTTPMetrics()}
	for _, rt := range routes {
		h.mux.HandleFunc(rt.pattern, func(w http.ResponseWriter, r *http.Request) { rt.serve(h, w, r) })
		method, path, _ := strings.Cut(rt.pattern, " ")
		if _, ok := h.allow[path]; !ok {
			h.paths.HandleFunc(path, func(http.ResponseWriter, *http.Request) {})
		}
		h.allow[path] = append(h.allow[path], method)
	}
	if opt.TracerProvider != nil {
		h.tracer = opt.TracerProvider.Tracer("github.com/agenthost/agenthost/host/httpapi")
	}
	h.mux.HandleFunc("/", h.notFound)
	h.metricsHandler = promhttp.HandlerFor(h.newRegistry(), promhttp.HandlerOpts{ErrorLog: slogPrinter{h.log}})
	return h
}

// accessLog logs the request if the access log is on.
func (h *Handler) accessLog(r *http.Request, route string, status int, bytes int64, d time.Duration) {
	if !h.opt.AccessLog {
		return
	}
	h.log.LogAttrs(r.Context(), slog.LevelInfo, "http request",
		slog.String("method", r.Method), slog.String("route", route), slog.String("path", r.URL.Path),
		slog.Int("status", status), slog.Int64("bytes", bytes), slog.Duration("duration", d),
		slog.String("remote", r.RemoteAddr))
}

// route is the pattern of the route r goes to, "unmatched" if none.
func (h *Handler) route(r *http.Request) string {
	_, p := h.mux.Handler(r)
	return matched(p)
}

// matched is the route of a pattern the mux matched: "unmatched" for none
// and for the fallback that answers 404 and 405.
func matched(pattern string) string {
	if pattern == "" || pattern == "/" {
		return "unmatched"
	}
	return pattern
}

// notFound answers a request no route takes: 405 with Allow when the path
// is a route's with another method, else 404.
func (h *Handler) notFound(w http.ResponseWriter, r *http.Request) {
	if _, path := h.paths.Handler(r); path != "" {
		methods := h.allow[path]
		w.Header().Set("Allow", strings.Join(methods, ", "))
		problem(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not served on "+r.URL.Path+"; allowed: "+strings.Join(methods, ", "))
		return
	}
	problem(w, http.StatusNotFound, "not_found", "no such route: "+r.Method+" "+r.URL.Path)
}

// slogPrinter logs the metrics handler's errors.
type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.log.Error("metrics: " + fmt.Sprint(v...)) }

// statusWriter records the status a handler answered with.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	n, err := s.ResponseWriter.Write(b)
	s.bytes += int64(n)
	return n, err
}

// Flush passes on to the writer's Flush (event streams need it).
func (s *statusWriter) Flush() {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the writer.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	var span trace.Span
	route := ""
	if h.tracer != nil {
		// The span is named before the request is served: match its route
		// now. Without one, the route is the pattern the mux matched.
		route = h.route(r)
		ctx, span = h.tracer.Start(ctx, route, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("http.route", route), attribute.String("url.path", r.URL.Path)))
	}
	if ctx != r.Context() {
		r = r.WithContext(ctx)
	}
	defer func() {
		status := sw.status
		if status == 0 {
			status = http.StatusOK
		}
		if route == "" {
			route = r.Pattern // set by the mux as it served r
			if route == "" {
				route = h.route(r) // refused before the mux (no token)
			} else {
				route = matched(route)
			}
		}
		d := time.Since(start)
		h.http.observe(route, status, d)
		if span != nil {
			span.SetAttributes(attribute.Int("http.response.status_code", status))
			if status >= 500 {
				span.SetStatus(codes.Error, http.StatusText(status))
			}
			span.End()
		}
		h.accessLog(r, route, status, sw.bytes, d)
	}()
	h.serve(sw, r)
}

func (h *Handler) serve(w http.ResponseWriter, r *http.Request) {
	if h.opt.Token != "" && r.URL.Path != "/healthz" && r.URL.Path != "/readyz" {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(h.opt.Token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="agenthost"`)
			problem(w, http.StatusUnauthorized, "unauthorized", "a bearer token is required")
			return
		}
	}
	r.Body = http.MaxBytesReader(w, r.Body, h.opt.MaxBodyBytes)
	h.mux.ServeHTTP(w, r)
}

// IsLoopback reports whether a listen address only accepts local clients.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Problem is an RFC 9457 problem detail with a stable code.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	Code   string `json:"code"`
	// TakenBy is set with code taken: the active run that took the
	// canceled run's inputs.
	TakenBy string `json:"taken_by,omitempty"`
	// Recorded is set with code answered: the answer the call has.
	Recorded *ApprovalAnswer `json:"recorded,omitempty"`
}

func problem(w http.ResponseWriter, status int, code, detail string) {
	writeProblem(w, Problem{Status: status, Code: code, Detail: detail})
}

func writeProblem(w http.ResponseWriter, p Problem) {
	p.Type, p.Title = "https://agenthost.dev/problems/"+p.Code, http.StatusText(p.Status)
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	json.NewEncoder(w).Encode(p)
}

// fail maps an error from the runtime to a problem.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	var mbe *http.MaxBytesError
	var te *host.TakenError
	var ae *host.AnsweredError
	switch {
	case errors.As(err, &ae):
		rec := toApprovalAnswer(record.Step{Answer: ae.Recorded})
		writeProblem(w, Problem{Status: http.StatusConflict, Code: "answered", Detail: err.Error(), Recorded: &rec})
	case errors.Is(err, host.ErrNotWaiting):
		problem(w, http.StatusConflict, "not_waiting", err.Error())
	case errors.As(err, &te):
		writeProblem(w, Problem{Status: http.StatusConflict, Code: "taken", Detail: err.Error(), TakenBy: te.TakenBy})
	case errors.As(err, &mbe), errors.Is(err, host.ErrTooLarge):
		problem(w, http.StatusRequestEntityTooLarge, "too_large", err.Error())
	case errors.Is(err, host.ErrBusy):
		problem(w, http.StatusConflict, "busy", err.Error())
	case errors.Is(err, host.ErrKeyReused):
		problem(w, http.StatusUnprocessableEntity, "key_reused", err.Error())
	case errors.Is(err, host.ErrNotFound):
		problem(w, http.StatusNotFound, "not_found", err.Error())
	case errors.Is(err, host.ErrNotQueued):
		problem(w, http.StatusConflict, "not_queued", err.Error())
	case errors.Is(err, host.ErrInvalid):
		problem(w, http.StatusBadRequest, "bad_request", err.Error())
	case errors.Is(err, host.ErrNotSupported):
		problem(w, http.StatusNotImplemented, "not_implemented", err.Error())
	case errors.Is(err, host.ErrClosed):
		problem(w, http.StatusServiceUnavailable, "unavailable", err.Error())
	case errors.Is(err, host.ErrUnavailable):
		problem(w, http.StatusServiceUnavailable, "unavailable", "the store is unavailable; retry with the same idempotency key")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		problem(w, http.StatusServiceUnavailable, "unavailable", err.Error())
	default:
		h.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		problem(w, http.StatusInternalServerError, "internal", "internal error")
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// validID checks a path id: printable, not too long.
func validID(what, id string) error {
	if id == "" || len(id) > host.MaxIDLen || !utf8.ValidString(id) || strings.ContainsFunc(id, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return fmt.Errorf("%w: %s must be 1 to %d printable bytes", host.ErrInvalid, what, host.MaxIDLen)
	}
	return nil
}

// pathID returns the path parameter name, or answers bad_request and false
// when it is not a valid id.
func (h *Handler) pathID(w http.ResponseWriter, r *http.Request, name string) (string, bool) {
	id := r.PathValue(name)
	if err := validID(name, id); err != nil {
		h.fail(w, r, err)
		return "", false
	}
	return id, true
}

// decodeBody decodes the request's body, one JSON object of the given
// shape with no unknown field, into v. On failure it answers the request
// (400 naming the shape, or 413 for a body over the limit) and reports
// false.
func (h *Handler) decodeBody(w http.ResponseWriter, r *http.Request, v any, shape string) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			h.fail(w, r, err)
			return false
		}
		h.fail(w, r, fmt.Errorf("%w: body must be a JSON object %s: %v", host.ErrInvalid, shape, err))
		return false
	}
	if dec.More() {
		h.fail(w, r, fmt.Errorf("%w: body holds more than one JSON value", host.ErrInvalid))
		return false
	}
	return true
}

// SubmitRequest is the body of POST /v1/threads/{thread_id}/inputs.
type SubmitRequest struct {
	Content  string            `json:"content"`
	Hint     string            `json:"hint,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Admission is the answer to a submission.
type Admission struct {
	RunID          string `json:"run_id"`
	InputMessageID string `json:"input_message_id"`
	ThreadID       string `json:"thread_id"`
}

// SubmitResult is the answer to a submission that waited for its run
// (POST .../inputs?wait=) and saw it settle: the admission and the result.
type SubmitResult struct {
	RunID           string  `json:"run_id"`
	InputMessageID  string  `json:"input_message_id"`
	ThreadID        string  `json:"thread_id"`
	AnsweredByRunID string  `json:"answered_by_run_id,omitempty"`
	State           string  `json:"state"`
	TerminalReason  string  `json:"terminal_reason,omitempty"`
	Error           string  `json:"error,omitempty"`
	Answer          *Answer `json:"answer"`
}

// waitParam reads the wait query parameter: how long a request waits for
// a run to settle, at most MaxWait. set is false when it is absent.
func (h *Handler) waitParam(r *http.Request) (wait time.Duration, set bool, err error) {
	if r.URL.RawQuery == "" {
		return 0, false, nil // no query to parse
	}
	q := r.URL.Query()
	if !q.Has("wait") {
		return 0, false, nil
	}
	d, perr := time.ParseDuration(q.Get("wait")) // "" is an error too
	if perr != nil || d < 0 {
		return 0, false, fmt.Errorf("%w: wait must be a duration such as 30s", host.ErrInvalid)
	}
	return min(d, h.opt.MaxWait), true, nil
}

func (h *Handler) submit(w http.ResponseWriter, r *http.Request) {
	thread, ok := h.pathID(w, r, "thread_id")
	if !ok {
		return
	}
	// Checked before the input is admitted: a bad wait admits nothing.
	wait, waits, err := h.waitParam(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if len(key) > host.MaxKeyLen {
		h.fail(w, r, fmt.Errorf("%w: Idempotency-Key longer than %d bytes", host.ErrInvalid, host.MaxKeyLen))
		return
	}
	var req SubmitRequest
	if !h.decodeBody(w, r, &req, `{"content": ..., "hint": ..., "metadata": {...}}`) {
		return
	}
	if strings.TrimSpace(req.Content) == "" {
		h.fail(w, r, fmt.Errorf("%w: content is empty", host.ErrInvalid))
		return
	}
	tk, err := h.rt.Submit(r.Context(), thread, req.Content, host.SubmitOptions{IdempotencyKey: key, Hint: req.Hint, Metadata: req.Metadata})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	adm := Admission{RunID: tk.RunID, InputMessageID: tk.InputMessageID, ThreadID: thread}
	if !waits {
		writeJSON(w, http.StatusAccepted, adm)
		return
	}
	// The input is durable: whatever the wait meets, the answer is the
	// admission (202) unless the run settled (200). A client that retries
	// with the same key gets the same run, and waits for it again.
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	res, err := h.rt.Wait(ctx, tk.RunID)
	if err != nil || !res.Settled {
		// Out of time, or the runtime closing (the run then settles
		// after a restart, or on another host): the admission says all.
		quiet := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, host.ErrClosed)
		if err != nil && !quiet && r.Context().Err() == nil {
			h.log.Warn("waiting for a submitted input's run failed; answering with the admission", "run", tk.RunID, "thread", thread, "err", err)
		}
		writeJSON(w, http.StatusAccepted, adm)
		return
	}
	out := SubmitResult{RunID: adm.RunID, InputMessageID: adm.InputMessageID, ThreadID: thread,
		AnsweredByRunID: res.AnsweredByRunID, State: string(res.State), TerminalReason: string(res.TerminalReason), Error: res.Error}
	if res.Answer != nil {
		out.Answer = &Answer{ID: res.Answer.ID, Content: res.Answer.Content}
	}
	writeJSON(w, http.StatusOK, out)
}

// Run is a run record on the wire.
type Run struct {
	ID                 string   `json:"id"`
	ThreadID           string   `json:"thread_id"`
	Seq                int64    `json:"seq"`
	State              string   `json:"state"`
	TerminalReason     string   `json:"terminal_reason,omitempty"`
	InputMessageIDs    []string `json:"input_message_ids"`
	AssistantMessageID string   `json:"assistant_message_id"`
	AbsorbedIntoRunID  string   `json:"absorbed_into_run_id,omitempty"`
	TakenBy            string   `json:"taken_by,omitempty"`
	TranscriptIDs      []string `json:"transcript_ids,omitempty"`
	Attempt            int      `json:"attempt"`
	// PendingCallIDs: the tool calls a waiting run waits on (state
	// waiting); PendingApprovals describes them, on the routes that
	// return one run.
	PendingCallIDs   []string          `json:"pending_call_ids,omitempty"`
	PendingApprovals []PendingApproval `json:"pending_approvals,omitempty"`
	Error            string            `json:"error,omitempty"`
	CreatedAt        time.Time         `json:"created_at"`
	StartedAt        *time.Time        `json:"started_at,omitempty"`
	EndedAt          *time.Time        `json:"ended_at,omitempty"`
}

func toRun(r record.Run) Run {
	opt := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	state := string(r.State)
	if host.Waiting(r) {
		state = StateWaiting
	}
	return Run{
		ID: r.ID, ThreadID: r.ThreadID, Seq: r.Seq, State: state, TerminalReason: string(r.TerminalReason), PendingCallIDs: r.Pending,
		InputMessageIDs: r.InputMessageIDs, AssistantMessageID: r.AssistantMessageID, AbsorbedIntoRunID: r.AbsorbedIntoRunID,
		TakenBy: r.TakenBy, TranscriptIDs: r.TranscriptIDs,
		Attempt: r.Attempt, Error: r.Error, CreatedAt: r.CreatedAt, StartedAt: opt(r.StartedAt), EndedAt: opt(r.EndedAt),
	}
}

func (h *Handler) getRun(w http.ResponseWriter, r *http.Request) {
	id, ok := h.pathID(w, r, "run_id")
	if !ok {
		return
	}
	out, err := h.fullRun(r.Context(), id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// fullRun is a run with its pending approvals.
func (h *Handler) fullRun(ctx context.Context, id string) (Run, error) {
	pend, run, err := h.rt.PendingApprovals(ctx, id)
	if err != nil {
		return Run{}, err
	}
	out := toRun(run)
	for _, p := range pend {
		out.PendingApprovals = append(out.PendingApprovals, toPendingApproval(p))
	}
	return out, nil
}

// Result is what answered a run.
type Result struct {
	RunID           string  `json:"run_id"`
	AnsweredByRunID string  `json:"answered_by_run_id,omitempty"`
	State           string  `json:"state"`
	TerminalReason  string  `json:"terminal_reason,omitempty"`
	Error           string  `json:"error,omitempty"`
	Answer          *Answer `json:"answer"`
}

// Answer is an answering message.
type Answer struct {
	ID      string `json:"id"`
	Content string `json:"content"`
}

func (h *Handler) result(w http.ResponseWriter, r *http.Request) {
	id, ok := h.pathID(w, r, "run_id")
	if !ok {
		return
	}
	wait, _, err := h.waitParam(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	res, err := h.rt.Wait(ctx, id)
	if err != nil && !(errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil) {
		h.fail(w, r, err)
		return
	}
	if !res.Settled {
		run, err := h.rt.Run(r.Context(), id)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusAccepted, toRun(run))
		return
	}
	out := Result{RunID: res.RunID, AnsweredByRunID: res.AnsweredByRunID, State: string(res.State), TerminalReason: string(res.TerminalReason), Error: res.Error}
	if res.Answer != nil {
		out.Answer = &Answer{ID: res.Answer.ID, Content: res.Answer.Content}
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Handler) cancel(w http.ResponseWriter, r *http.Request) {
	id, ok := h.pathID(w, r, "run_id")
	if !ok {
		return
	}
	run, err := h.rt.Cancel(r.Context(), id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toRun(run))
}

func (h *Handler) threadRuns(w http.ResponseWriter, r *http.Request) {
	thread, ok := h.pathID(w, r, "thread_id")
	if !ok {
		return
	}
	pg, ok := h.page(w, r)
	if !ok {
		return
	}
	runs, err := h.rt.ThreadRuns(r.Context(), thread)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if len(runs) == 0 {
		problem(w, http.StatusNotFound, "not_found", "no thread "+strconv.Quote(thread))
		return
	}
	// The cursor is the seq of the last run given.
	after, err := pg.position()
	if err != nil {
		h.fail(w, r, err)
		return
	}
	i := 0
	for i < len(runs) && runs[i].Seq <= after {
		i++
	}
	runs = runs[i:]
	next := ""
	if len(runs) > pg.limit {
		runs = runs[:pg.limit]
		next = strconv.FormatInt(runs[pg.limit-1].Seq, 10)
	}
	out := make([]Run, len(runs))
	for i, run := range runs {
		out[i] = toRun(run)
	}
	writeJSON(w, http.StatusOK, RunPage{ThreadID: thread, Runs: out, NextCursor: next})
}

// Message is a history message on the wire.
type Message struct {
	ID      string `json:"id"`
	RunID   string `json:"run_id"`
	Seq     int64  `json:"seq"`
	Role    string `json:"role"`
	Content string `json:"content"`
	// Hint and Metadata are an input's, as submitted.
	Hint       string            `json:"hint,omitempty"`
	Metadata   map[string]string `json:"metadata,omitempty"`
	ToolCalls  []ToolCall        `json:"tool_calls,omitempty"`
	ToolCallID string            `json:"tool_call_id,omitempty"`
	CreatedAt  time.Time         `json:"created_at"`
}

// ToolCall is a model's call of a tool.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

func (h *Handler) threadMessages(w http.ResponseWriter, r *http.Request) {
	thread, ok := h.pathID(w, r, "thread_id")
	if !ok {
		return
	}
	pg, ok := h.page(w, r)
	if !ok {
		return
	}
	after, err := pg.position()
	if err != nil {
		h.fail(w, r, err)
		return
	}
	msgs, err := h.rt.History(r.Context(), thread)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if len(msgs) == 0 {
		// No conversation yet: a thread with runs, or no thread at all.
		// A failed read says so; it is not an empty thread.
		runs, err := h.rt.ThreadRuns(r.Context(), thread)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		if len(runs) == 0 {
			problem(w, http.StatusNotFound, "not_found", "no thread "+strconv.Quote(thread))
			return
		}
	}
	// The conversation only grows at its end (runs join it as they end):
	// the cursor is the count of messages given so far.
	total := int64(len(msgs))
	msgs = msgs[min(after, total):]
	next := ""
	if len(msgs) > pg.limit {
		msgs = msgs[:pg.limit]
		next = strconv.FormatInt(min(after, total)+int64(pg.limit), 10)
	}
	out := make([]Message, len(msgs))
	for i, m := range msgs {
		out[i] = toMessage(m)
	}
	writeJSON(w, http.StatusOK, MessagePage{ThreadID: thread, Messages: out, NextCursor: next})
}

// RunPage is the answer of GET /v1/threads/{thread_id}/runs.
type RunPage struct {
	ThreadID string `json:"thread_id"`
	Runs     []Run  `json:"runs"`
	// NextCursor is the after of the next page; empty at the end.
	NextCursor string `json:"next_cursor"`
}

// MessagePage is the answer of GET /v1/threads/{thread_id}/messages.
type MessagePage struct {
	ThreadID   string    `json:"thread_id"`
	Messages   []Message `json:"messages"`
	NextCursor string    `json:"next_cursor"`
}

// ThreadSummary is a thread in GET /v1/threads.
type ThreadSummary struct {
	ID         string    `json:"id"`
	Version    int64     `json:"version"`
	OpenRunIDs []string  `json:"open_run_ids"`
	Busy       bool      `json:"busy"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// ThreadPage is the answer of GET /v1/threads.
type ThreadPage struct {
	Threads    []ThreadSummary `json:"threads"`
	NextCursor string          `json:"next_cursor"`
}

// Page sizes of the list routes.
const (
	defaultPageLimit = 100
	maxPageLimit     = host.MaxThreadPage
)

// pageParams are a list route's after and limit.
type pageParams struct {
	after string
	limit int
}

// position reads the cursor as the number the runs and messages routes
// give.
func (p pageParams) position() (int64, error) {
	if p.after == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(p.after, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: after must be a next_cursor this route returned", host.ErrInvalid)
	}
	return n, nil
}

// page reads ?after= and ?limit= (default 100, at most 1000), or answers
// bad_request and false.
func (h *Handler) page(w http.ResponseWriter, r *http.Request) (pageParams, bool) {
	q := r.URL.Query()
	p := pageParams{after: q.Get("after"), limit: defaultPageLimit}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxPageLimit {
			h.fail(w, r, fmt.Errorf("%w: limit must be 1 to %d", host.ErrInvalid, maxPageLimit))
			return p, false
		}
		p.limit = n
	}
	if len(p.after) > host.MaxIDLen {
		h.fail(w, r, fmt.Errorf("%w: after is longer than %d bytes", host.ErrInvalid, host.MaxIDLen))
		return p, false
	}
	return p, true
}

func (h *Handler) listThreads(w http.ResponseWriter, r *http.Request) {
	pg, ok := h.page(w, r)
	if !ok {
		return
	}
	ths, next, err := h.rt.ListThreads(r.Context(), pg.after, pg.limit)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := ThreadPage{Threads: make([]ThreadSummary, len(ths)), NextCursor: next}
	for i, t := range ths {
		open := t.OpenRunIDs
		if open == nil {
			open = []string{}
		}
		out.Threads[i] = ThreadSummary{ID: t.ID, Version: t.Version, OpenRunIDs: open, Busy: len(t.OpenRunIDs) > 0, UpdatedAt: t.UpdatedAt}
	}
	writeJSON(w, http.StatusOK, out)
}

func toMessage(m record.Message) Message {
	out := Message{ID: m.ID, RunID: m.RunID, Seq: m.Seq, Role: string(m.Role), Content: m.Content, Hint: m.Hint, Metadata: m.Metadata, ToolCallID: m.ToolCallID, CreatedAt: m.CreatedAt}
	for _, c := range m.ToolCalls {
		out.ToolCalls = append(out.ToolCalls, ToolCall(c))
	}
	return out
}

// Step is a step record on the wire.
type Step struct {
	ID        string   `json:"id"`
	RunID     string   `json:"run_id"`
	Seq       int64    `json:"seq"`
	Attempt   int      `json:"attempt"`
	ModelStep int      `json:"model_step"`
	Kind      string   `json:"kind"`
	Message   *Message `json:"message,omitempty"`
	Taken     []Take   `json:"taken,omitempty"`
	// Ask is set on an ask step (Approved 0), Answer on an answer step.
	Ask       *PendingApproval `json:"ask,omitempty"`
	Answer    *ApprovalAnswer  `json:"answer,omitempty"`
	CreatedAt time.Time        `json:"created_at"`
}

// Take is what a take step took from one queued run.
type Take struct {
	RunID           string   `json:"run_id"`
	InputMessageIDs []string `json:"input_message_ids"`
}

// Paging of GET /v1/runs/{run_id}/steps.
const (
	defaultStepsLimit = 100
	maxStepsLimit     = 1000
)

func (h *Handler) steps(w http.ResponseWriter, r *http.Request) {
	id, ok := h.pathID(w, r, "run_id")
	if !ok {
		return
	}
	after, limit := int64(0), defaultStepsLimit
	q := r.URL.Query()
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			h.fail(w, r, fmt.Errorf("%w: after must be a step seq (an integer ≥ 0)", host.ErrInvalid))
			return
		}
		after = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxStepsLimit {
			h.fail(w, r, fmt.Errorf("%w: limit must be an integer from 1 to %d", host.ErrInvalid, maxStepsLimit))
			return
		}
		limit = n
	}
	steps, err := h.rt.Steps(r.Context(), id, after, limit)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := make([]Step, len(steps))
	for i, st := range steps {
		out[i] = Step{ID: st.ID, RunID: st.RunID, Seq: st.Seq, Attempt: st.Attempt, ModelStep: st.Model, Kind: string(st.Kind), CreatedAt: st.CreatedAt}
		if st.Kind == record.StepModel || st.Kind == record.StepTool {
			msg := st.Message
			if msg.CreatedAt.IsZero() {
				msg.CreatedAt = st.CreatedAt // a step's message is known when its step is written
			}
			m := toMessage(msg)
			out[i].Message = &m
		}
		for _, tk := range st.Taken {
			out[i].Taken = append(out[i].Taken, Take{RunID: tk.RunID, InputMessageIDs: tk.InputMessageIDs})
		}
		switch st.Kind {
		case record.StepAsk:
			a := st.Ask
			p := toPendingApproval(host.PendingApproval{CallID: a.CallID, Tool: a.Tool, Server: a.Server, Arguments: a.Arguments,
				Prompt: a.Prompt, Approvals: a.Approvals, Step: st.Model, Deadline: a.Deadline})
			out[i].Ask = &p
		case record.StepAnswer:
			a := toApprovalAnswer(st)
			out[i].Answer = &a
		}
	}
	body := map[string]any{"run_id": id, "steps": out}
	if len(steps) == limit {
		body["next_cursor"] = strconv.FormatInt(steps[len(steps)-1].Seq, 10)
	}
	writeJSON(w, http.StatusOK, body)
}

func (h *Handler) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "epoch": h.rt.Epoch()})
}

// events streams a run's events as Server-Sent Events. Durable events are
// derived from the run's committed records (host.Runtime.RunEvents): each
// has an id, the same on every host and after a restart, and a client
// resumes after it with Last-Event-ID. Ephemeral events (step_started,
// delta, step_finished) come from this process's memory and carry no id: a
// reconnecting client gets none of those it missed. The stream ends after
// the run's terminal (or absorbed) event.
func (h *Handler) events(w http.ResponseWriter, r *http.Request) {
	id, ok := h.pathID(w, r, "run_id")
	if !ok {
		return
	}
	after := int64(0)
	resumed := false
	if s := r.Header.Get("Last-Event-ID"); s != "" {
		var err error
		if after, err = strconv.ParseInt(s, 10, 64); err != nil || after < 0 {
			h.fail(w, r, fmt.Errorf("%w: Last-Event-ID must be an event id", host.ErrInvalid))
			return
		}
		resumed = true
	}
	evs, _, err := h.rt.RunEvents(r.Context(), id, after)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		problem(w, http.StatusInternalServerError, "internal", "streaming unsupported")
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	// Ephemeral events: from the start on a fresh connection, from now on
	// a resumed one (those it missed are gone).
	memAfter := int64(0)
	if resumed {
		mem, _ := h.rt.Events(id, 0)
		if n := len(mem); n > 0 {
			memAfter = mem[n-1].Seq
		}
	}
	poll := time.NewTicker(min(time.Second, h.opt.KeepAlive))
	defer poll.Stop()
	lastWrite := time.Now()
	for {
		mem, more := h.rt.Events(id, memAfter)
		if n := len(mem); n > 0 {
			memAfter = mem[n-1].Seq
		}
		// One stream in time order: durable events first on a tie.
		var out []host.Event
		out = append(out, evs...)
		for _, e := range mem {
			if !host.IsDurableEvent(e.Type) {
				e.Seq = 0
				out = append(out, e)
			}
		}
		slices.SortStableFunc(out, func(a, b host.Event) int {
			if c := a.Time.Compare(b.Time); c != 0 {
				return c
			}
			return cmp.Compare(min(b.Seq, 1), min(a.Seq, 1))
		})
		for _, e := range out {
			writeEvent(w, e)
			lastWrite = time.Now()
			if e.Seq != 0 {
				after = e.Seq
			}
			if e.Type == host.EventTerminal || e.Type == host.EventAbsorbed {
				fl.Flush()
				return
			}
		}
		fl.Flush()
		if len(evs) == 0 {
			// Settled, and the client has every event: nothing to invent.
			if run, err := h.rt.Run(r.Context(), id); err == nil && host.IsTerminal(run.State) {
				if rest, _, err := h.rt.RunEvents(r.Context(), id, after); err == nil && len(rest) == 0 {
					return
				}
			}
		}
		select {
		case <-more:
		case <-poll.C:
			// Another host may have committed: the records say.
			if time.Since(lastWrite) >= h.opt.KeepAlive {
				io.WriteString(w, ": keep-alive\n\n")
				fl.Flush()
				lastWrite = time.Now()
			}
		case <-r.Context().Done():
			return
		}
		if evs, _, err = h.rt.RunEvents(r.Context(), id, after); err != nil {
			evs = nil // the store is briefly unavailable: the next pass reads again
		}
	}
}

// writeEvent writes one event; an ephemeral one (Seq 0) has no id, so that
// a client's Last-Event-ID stays the last durable event's.
func writeEvent(w io.Writer, e host.Event) {
	b, _ := json.Marshal(map[string]any{"seq": e.Seq, "run_id": e.RunID, "thread_id": e.ThreadID, "type": e.Type, "time": e.Time, "data": e.Data})
	if e.Seq != 0 {
		fmt.Fprintf(w, "id: %d\n", e.Seq)
	}
	fmt.Fprintf(w, "event: %s\ndata: %s\n\n", e.Type, b)
}
