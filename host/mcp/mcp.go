// Package mcp gives a run the tools of Model Context Protocol servers,
// through the official Go SDK. A server is reached over stdio (a subprocess
// the host starts, supervises and restarts if it dies) or over streamable
// HTTP. Each server's tools are listed once, at start, and offered to the
// model as model.Tools named "<prefix>_<tool>", where the prefix is the
// server's name unless configured: names OpenAI-compatible APIs accept
// (^[a-zA-Z0-9_-]{1,64}$) and that cannot collide, since a prefix holds no
// "_". Characters of a tool's own name outside that set become "_"; two
// tools that map to one name, or a name past 64 characters, are a start
// error.
//
// Every call has a time limit (ServerConfig.Timeout, default 60s; the
// executor enforces it through model.TimeLimited) and carries the call's
// idempotency key, "runID/stepN/callIndex", in the request's _meta under
// MetaIdempotencyKey, and for HTTP servers in an Idempotency-Key header as
// well. A tool's error result, and a call that fails, become an error the
// model sees; they do not fail the run.
package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/host/model"
)

// MetaIdempotencyKey is the _meta key of a tool call's idempotency key.
const MetaIdempotencyKey = "agenthost/idempotency-key"

// Defaults of a ServerConfig.
const (
	DefaultTimeout      = 60 * time.Second
	DefaultStartTimeout = 30 * time.Second
)

// DefaultInheritedEnv are the variables a stdio server gets from the host's
// environment besides its allow-list (those set): enough to find programs
// and a home directory, nothing secret.
var DefaultInheritedEnv = []string{"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"}

// ServerConfig describes one MCP server. Exactly one of Command and URL is
// set.
type ServerConfig struct {
	// Name identifies the server in logs and errors, and is the default
	// prefix of its tools' names: letters, digits and "-", at most 32.
	Name string
	// Prefix replaces Name in the tools' names (same characters).
	Prefix string

	// Command starts a stdio server; Args are its arguments and Dir its
	// working directory (empty: the host's).
	Command string
	Args    []string
	Dir     string
	// Env lists the names of the host's environment variables the server
	// is given, besides DefaultInheritedEnv; no other variable is passed.
	Env []string

	// URL is a streamable HTTP server's endpoint.
	URL string
	// Headers are sent with every request to URL: header name → the name
	// of the environment variable holding its value (so secrets stay out of
	// configuration files). A variable that is not set is a start error.
	Headers map[string]string

	// Timeout bounds each tool call. Zero means DefaultTimeout.
	Timeout time.Duration
	// StartTimeout bounds connecting, the initialize handshake and listing
	// the tools, at start and at each restart. Zero means
	// DefaultStartTimeout.
	StartTimeout time.Duration
}

// Options configure Start.
type Options struct {
	Logger *slog.Logger
	// LookupEnv reads the host's environment. Default os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// HTTPClient makes the requests to HTTP servers. Default
	// http.DefaultClient's transport.
	HTTPClient *http.Client
}

var (
	nameRE     = regexp.MustCompile(`^[a-zA-Z0-9-]{1,32}$`)
	toolCharRE = regexp.MustCompile(`[^a-zA-Z0-9_-]`)
)

// maxToolName is the longest tool name OpenAI-compatible APIs accept.
const maxToolName = 64

// Servers are the started MCP servers and their tools.
type Servers struct {
	servers []*server
	tools   []model.Tool
}

// Start connects to every server, lists its tools and names them. A server
// that cannot be started, does not answer initialize within its start
// timeout, or cannot list its tools is an error naming it; then no server is
// left running. reserved are names already taken (the application's own
// tools).
func Start(ctx context.Context, cfgs []ServerConfig, opt Options, reserved ...string) (*Servers, error) {
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.LookupEnv == nil {
		opt.LookupEnv = os.LookupEnv
	}
	names := map[string]string{} // offered name → what holds it
	for _, r := range reserved {
		names[r] = "a tool of the application"
	}
	seen := map[string]bool{}
	for i := range cfgs {
		if err := cfgs[i].check(); err != nil {
			return nil, err
		}
		if seen[cfgs[i].Name] {
			return nil, fmt.Errorf("mcp server %q: configured twice", cfgs[i].Name)
		}
		seen[cfgs[i].Name] = true
	}
	out := &Servers{}
	for _, c := range cfgs {
		s := &server{cfg: c, opt: opt, log: opt.Logger.With("mcp_server", c.Name), ready: make(chan struct{})}
		if err := s.prepare(); err != nil {
			out.Close()
			return nil, err
		}
		sess, tools, err := s.start(ctx)
		if err != nil {
			out.Close()
			return nil, err
		}
		out.servers = append(out.servers, s)
		s.set(sess)
		for _, t := range tools {
			name := c.prefix() + "_" + toolCharRE.ReplaceAllString(t.Name, "_")
			if len(name) > maxToolName {
				out.Close()
				return nil, fmt.Errorf("mcp server %q: tool %q would be offered as %q, longer than %d characters (set a shorter prefix)", c.Name, t.Name, name, maxToolName)
			}
			if holder, ok := names[name]; ok {
				out.Close()
				return nil, fmt.Errorf("mcp server %q: tool %q would be offered as %q, which %s already has", c.Name, t.Name, name, holder)
			}
			names[name] = fmt.Sprintf("tool %q of mcp server %q", t.Name, c.Name)
			schema, err := json.Marshal(t.InputSchema)
			if err != nil || t.InputSchema == nil {
				schema = nil
			}
			out.tools = append(out.tools, &tool{srv: s, remote: t.Name, spec: model.ToolSpec{Name: name, Description: t.Description, Parameters: string(schema)}})
		}
		s.log.Info("mcp server started", "tools", len(tools))
	}
	return out, nil
}

// Tools returns the tools of every server, in configuration order.
func (s *Servers) Tools() []model.Tool { return slices.Clone(s.tools) }

// Restarts reports how often the servers were restarted after they died.
func (s *Servers) Restarts() int64 {
	var n int64
	for _, srv := range s.servers {
		n += srv.restarts.Load()
	}
	return n
}

// Close ends every session and stops the stdio servers.
func (s *Servers) Close() error {
	var errs []error
	for _, srv := range s.servers {
		errs = append(errs, srv.close())
	}
	return errors.Join(errs...)
}

// Check reports what is wrong with the configuration, without starting
// anything.
func (c ServerConfig) Check() error { return c.check() }

func (c *ServerConfig) check() error {
	if !nameRE.MatchString(c.Name) {
		return fmt.Errorf("mcp server %q: a name is 1 to 32 letters, digits or \"-\"", c.Name)
	}
	if c.Prefix != "" && !nameRE.MatchString(c.Prefix) {
		return fmt.Errorf("mcp server %q: prefix %q: a prefix is 1 to 32 letters, digits or \"-\"", c.Name, c.Prefix)
	}
	switch {
	case c.Command == "" && c.URL == "":
		return fmt.Errorf("mcp server %q: neither a command nor a url", c.Name)
	case c.Command != "" && c.URL != "":
		return fmt.Errorf("mcp server %q: both a command and a url", c.Name)
	case c.Command == "" && (len(c.Args) > 0 || len(c.Env) > 0 || c.Dir != ""):
		return fmt.Errorf("mcp server %q: args, env and dir are for a command", c.Name)
	case c.URL == "" && len(c.Headers) > 0:
		return fmt.Errorf("mcp server %q: headers are for a url", c.Name)
	case c.Timeout < 0 || c.StartTimeout < 0:
		return fmt.Errorf("mcp server %q: negative timeout", c.Name)
	}
	if c.URL != "" {
		u, err := url.Parse(c.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("mcp server %q: url %q is not an absolute http or https URL", c.Name, c.URL)
		}
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = DefaultStartTimeout
	}
	return nil
}

func (c *ServerConfig) prefix() string {
	if c.Prefix != "" {
		return c.Prefix
	}
	return c.Name
}

// server is one MCP server and its current session.
type server struct {
	cfg ServerConfig
	opt Options
	log *slog.Logger

	env     []string    // a stdio server's environment
	headers http.Header // an HTTP server's headers

	mu       sync.Mutex
	sess     *sdk.ClientSession // nil while restarting
	ready    chan struct{}      // closed when sess is set
	closed   bool
	stop     context.CancelFunc // ends the restart loop
	restarts atomic.Int64
}

// prepare reads the environment the server needs.
func (s *server) prepare() error {
	if s.cfg.Command != "" {
		for _, k := range slices.Concat(DefaultInheritedEnv, s.cfg.Env) {
			if v, ok := s.opt.LookupEnv(k); ok && !slices.ContainsFunc(s.env, func(e string) bool { return strings.HasPrefix(e, k+"=") }) {
				s.env = append(s.env, k+"="+v)
			}
		}
		return nil
	}
	s.headers = http.Header{}
	for h, k := range s.cfg.Headers {
		v, ok := s.opt.LookupEnv(k)
		if !ok {
			return fmt.Errorf("mcp server %q: header %s: environment variable %s is not set", s.cfg.Name, h, k)
		}
		s.headers.Set(h, v)
	}
	return nil
}

// start connects and lists the tools, within the start timeout.
func (s *server) start(ctx context.Context) (*sdk.ClientSession, []*sdk.Tool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.StartTimeout)
	defer cancel()
	client := sdk.NewClient(&sdk.Implementation{Name: "agenthost", Version: "1"}, nil)
	var t sdk.Transport
	what := "url " + s.cfg.URL
	if s.cfg.Command != "" {
		cmd := exec.Command(s.cfg.Command, s.cfg.Args...)
		cmd.Env, cmd.Dir = s.env, s.cfg.Dir
		cmd.Stderr = logWriter(s.log)
		t = &sdk.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
		what = "command " + s.cfg.Command
	} else {
		base := http.DefaultTransport
		if s.opt.HTTPClient != nil && s.opt.HTTPClient.Transport != nil {
			base = s.opt.HTTPClient.Transport
		}
		hc := &http.Client{Transport: &headerTransport{base: base, headers: s.headers}}
		t = &sdk.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: hc, DisableStandaloneSSE: true}
	}
	sess, err := client.Connect(ctx, t, nil)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("mcp server %q (%s): no answer to initialize within %s: %w", s.cfg.Name, what, s.cfg.StartTimeout, err)
		}
		return nil, nil, fmt.Errorf("mcp server %q (%s): initialize: %w", s.cfg.Name, what, err)
	}
	var tools []*sdk.Tool
	for t, err := range sess.Tools(ctx, nil) {
		if err != nil {
			sess.Close()
			return nil, nil, fmt.Errorf("mcp server %q: listing its tools: %w", s.cfg.Name, err)
		}
		tools = append(tools, t)
	}
	return sess, tools, nil
}

// set installs a session and watches it: a session that ends while the
// server is in use is replaced, with back-off, by a new one.
func (s *server) set(sess *sdk.ClientSession) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		sess.Close()
		return
	}
	s.sess = sess
	close(s.ready)
	go s.watch(sess)
}

func (s *server) watch(sess *sdk.ClientSession) {
	err := sess.Wait()
	s.mu.Lock()
	if s.closed || s.sess != sess {
		s.mu.Unlock()
		return
	}
	s.sess, s.ready = nil, make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	s.mu.Unlock()
	s.log.Warn("mcp server session ended; restarting it", "err", err)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		next, _, err := s.start(ctx)
		if err == nil {
			s.restarts.Add(1)
			s.log.Info("mcp server restarted")
			s.set(next)
			return
		}
		s.log.Warn("restarting the mcp server failed; trying again", "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// session returns the current session, waiting while the server restarts.
func (s *server) session(ctx context.Context) (*sdk.ClientSession, error) {
	s.mu.Lock()
	sess, ready, closed := s.sess, s.ready, s.closed
	s.mu.Unlock()
	switch {
	case closed:
		return nil, fmt.Errorf("mcp server %q is closed", s.cfg.Name)
	case sess != nil:
		return sess, nil
	}
	select {
	case <-ready:
		return s.session(ctx)
	case <-ctx.Done():
		return nil, fmt.Errorf("mcp server %q is restarting", s.cfg.Name)
	}
}

// lost ends a session whose connection failed, and waits for watch to
// stop offering it.
func (s *server) lost(sess *sdk.ClientSession) {
	sess.Close()
	for {
		s.mu.Lock()
		cur, closed := s.sess == sess, s.closed
		s.mu.Unlock()
		if !cur || closed {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *server) close() error {
	s.mu.Lock()
	s.closed = true
	sess := s.sess
	s.sess = nil
	if s.stop != nil {
		s.stop()
	}
	s.mu.Unlock()
	if sess == nil {
		return nil
	}
	if err := sess.Close(); err != nil && !errors.Is(err, sdk.ErrConnectionClosed) {
		return fmt.Errorf("mcp server %q: %w", s.cfg.Name, err)
	}
	return nil
}

// tool is one tool of a server, as offered to the model.
type tool struct {
	srv    *server
	remote string
	spec   model.ToolSpec
}

var _ model.TimeLimited = (*tool)(nil)

func (t *tool) Spec() model.ToolSpec { return t.spec }

// Server names the MCP server providing the tool, for the tool policy.
func (t *tool) Server() string         { return t.srv.cfg.Name }
func (t *tool) Timeout() time.Duration { return t.srv.cfg.Timeout }

// Call implements model.Tool. A result the server marks as an error is
// returned as an error, with its text.
func (t *tool) Call(ctx context.Context, arguments string) (string, error) {
	args := json.RawMessage(strings.TrimSpace(arguments))
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(args, &obj); err != nil || obj == nil {
		return "", fmt.Errorf("arguments are not a JSON object: %s", truncate(string(args)))
	}
	p := &sdk.CallToolParams{Name: t.remote, Arguments: args}
	if c, ok := model.CallFrom(ctx); ok {
		key := c.IdempotencyKey()
		p.Meta = sdk.Meta{MetaIdempotencyKey: key}
		ctx = context.WithValue(ctx, keyCtx{}, key)
	}
	var res *sdk.CallToolResult
	for attempt := 0; ; attempt++ {
		sess, err := t.srv.session(ctx)
		if err != nil {
			return "", err
		}
		res, err = sess.CallTool(ctx, p)
		if err == nil {
			break
		}
		if !errors.Is(err, sdk.ErrConnectionClosed) && !errors.Is(err, sdk.ErrSessionMissing) {
			return "", fmt.Errorf("mcp server %q: %w", t.srv.cfg.Name, err)
		}
		// The session is gone (the server died, or forgot it): once, the
		// call is made again, with the same key, on the next session.
		t.srv.lost(sess)
		if attempt > 0 || ctx.Err() != nil {
			return "", fmt.Errorf("mcp server %q: %w", t.srv.cfg.Name, err)
		}
		t.srv.log.Warn("mcp server connection lost during a call; calling again on a new session", "tool", t.remote, "err", err)
	}
	text := resultText(res)
	if res.IsError {
		if text == "" {
			text = "the tool reported an error"
		}
		return "", errors.New(text)
	}
	return text, nil
}

// resultText is what the model is told of a result: its text contents, each
// other content as JSON, or else the structured content as JSON.
func resultText(res *sdk.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			parts = append(parts, tc.Text)
			continue
		}
		if b, err := json.Marshal(c); err == nil {
			parts = append(parts, string(b))
		}
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			parts = append(parts, string(b))
		}
	}
	return strings.Join(parts, "\n")
}

func truncate(s string) string {
	if len(s) > 200 {
		return strings.ToValidUTF8(s[:200], "") + "..."
	}
	return s
}

// keyCtx carries a call's idempotency key to the HTTP transport.
type keyCtx struct{}

// headerTransport adds the configured headers, and a call's Idempotency-Key,
// to each request.
type headerTransport struct {
	base    http.RoundTripper
	headers http.Header
}

func (h *headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	key, _ := req.Context().Value(keyCtx{}).(string)
	if len(h.headers) == 0 && key == "" {
		return h.base.RoundTrip(req)
	}
	req = req.Clone(req.Context())
	for k, v := range h.headers {
		req.Header[k] = slices.Clone(v)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	return h.base.RoundTrip(req)
}

// logWriter logs what a stdio server writes to its stderr, line by line.
func logWriter(log *slog.Logger) io.Writer {
	r, w := io.Pipe()
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 4096), 64<<10)
		for sc.Scan() {
			log.Info("mcp server stderr", "line", sc.Text())
		}
		r.CloseWithError(io.ErrClosedPipe)
	}()
	return w
}
