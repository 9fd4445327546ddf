package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/guests/policy/standard"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/console"
	"github.com/agenthost/agenthost/host/driverhost"
	"github.com/agenthost/agenthost/host/httpapi"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/host/observe"
	"github.com/agenthost/agenthost/host/policy"
	"github.com/agenthost/agenthost/host/runstate"
	"github.com/agenthost/agenthost/host/trust"
	"github.com/agenthost/agenthost/host/wasm"
	"github.com/agenthost/agenthost/internal/builtins"
)

func init() {
	register("serve", "run the server: HTTP API over the runtime (embedded default: badgerstore, refine, scripted model)", runServe)
}

// stringList is a repeatable flag.
func runServe(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("serve", "serve [--config FILE] [--store NAME|PATH] [--policy NAME|FILE.wasm] [--model scripted[:FILE]|openai] [--data DIR] [--listen ADDR]",
		"agenthost serve --data ./agenthost-data --listen 127.0.0.1:7070", stderr)
	var fc Config
	configPath := fs.String("config", os.Getenv("AGENTHOST_CONFIG"), "YAML configuration file (env AGENTHOST_CONFIG)")
	fs.StringVar(&fc.Listen, "listen", "", "HTTP listen address (default 127.0.0.1:7070)")
	fs.StringVar(&fc.Token, "token", "", "bearer token, required when not listening on loopback (visible in ps: prefer --token-file)")
	fs.StringVar(&fc.TokenFile, "token-file", "", "file holding the bearer token")
	fs.StringVar(&fc.TLSCert, "tls-cert", "", "PEM certificate file: serve HTTPS (with --tls-key; reloaded on SIGHUP and on change)")
	fs.StringVar(&fc.TLSKey, "tls-key", "", "PEM private key file of --tls-cert")
	fs.StringVar(&fc.Data, "data", "", "data directory (default ./agenthost-data)")
	fs.StringVar(&fc.Store, "store", "", "store driver: badgerstore, memstore, pgstore, or a driver binary's path (default badgerstore)")
	fs.StringVar(&fc.StoreURL, "store-url", "", "database URL of the store (pgstore: postgres://...)")
	fs.DurationVar(&fc.LeaseTTL, "lease-ttl", 0, "with a shared store: how long this host's lease lives unless renewed (default 10s)")
	fs.DurationVar(&fc.PollInterval, "poll-interval", 0, "with a shared store: how often to look for work no notice announced (default 2s)")
	fs.StringVar(&fc.HostName, "host-name", "", "with a shared store: the name this host's lease shows (default host/pid)")
	fs.StringVar(&fc.Policy, "policy", "", "input policy: queue, interrupt, reject, inject, refine, or FILE.wasm (default refine)")
	fs.Var(hookFlag{&fc.PrepareStep}, "prepare-step", "prepareStep hook: system-instruction, step-budget or FILE.wasm (repeatable, in order)")
	fs.Var(hookConfigFlag{&fc.PrepareStep}, "prepare-step-config", "configuration (JSON) of the --prepare-step just before")
	fs.Var(mcpFlag{&fc.MCPServers}, "mcp", "MCP tool server: NAME=COMMAND [ARG...] (stdio) or NAME=http(s)://URL (repeatable)")
	fs.DurationVar(&fc.ToolTimeout, "tool-timeout", 0, "time limit of a tool call with none of its own (default 60s)")
	fs.DurationVar(&fc.ApprovalTimeout, "approval-timeout", 0, "how long a tool call the tool policy asks about waits for an answer before it is rejected (default 24h)")
	fs.StringVar(&fc.OpenAI.BaseURL, "openai-base-url", "", "model openai: the API root (default https://api.openai.com/v1)")
	fs.StringVar(&fc.OpenAI.Model, "openai-model", "", "model openai: the model name")
	fs.DurationVar(&fc.OpenAI.Timeout, "openai-timeout", 0, "model openai: time limit of each request (default 120s)")
	fs.StringVar(&fc.Model, "model", "", "model: scripted, scripted:FILE or openai (default scripted)")
	fs.StringVar(&fc.LogLevel, "log-level", "", "least level logged: debug, info, warn or error (default info)")
	fs.StringVar(&fc.LogFormat, "log-format", "", "log format: text or json (default text)")
	fs.BoolVar(&fc.AccessLog, "access-log", false, "log a line per HTTP request")
	if _, code, ok := parse(fs, args); !ok {
		return code
	}
	cfg, err := loadConfig(*configPath, os.LookupEnv, fs, &fc)
	if err != nil {
		fmt.Fprintln(stderr, "agenthost: bad configuration:", err)
		return exitUsage
	}
	log := newLogger(cfg, stderr)
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(serveGCPercent)
	}
	if p := os.Getenv("AGENTHOST_CPU_PROFILE"); p != "" {
		stop, err := startCPUProfile(p)
		if err != nil {
			fmt.Fprintln(stderr, "agenthost: AGENTHOST_CPU_PROFILE:", err)
			return exitUsage
		}
		defer stop()
	}
	if p := os.Getenv("AGENTHOST_TRACE"); p != "" {
		stop, err := startTrace(p)
		if err != nil {
			fmt.Fprintln(stderr, "agenthost: AGENTHOST_TRACE:", err)
			return exitUsage
		}
		defer stop()
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "token" {
			log.Warn("--token shows in the process list (ps); use token_file, AGENTHOST_TOKEN_FILE or --token-file")
		}
	})
	// The first SIGINT or SIGTERM starts the shutdown; a second one ends
	// the process at once, killing the driver.
	sigc := make(chan os.Signal, 2)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var kill killSwitch
	go func() {
		s, ok := <-sigc
		if !ok {
			return
		}
		log.Info("signal received: shutting down; a second signal ends the process at once", "signal", s.String())
		cancel()
		s = <-sigc
		log.Error("second signal: ending at once, the store driver killed", "signal", s.String(), "exit_status", signalStatus(s))
		kill.fire()
		os.Exit(signalStatus(s))
	}()
	noConfig := *configPath == "" && fs.NFlag() == 0 && !anyConfigEnv()
	err = serve(ctx, cfg, noConfig, log, &kill)
	code := serveStatus(err)
	if err != nil {
		log.Error("agenthost stopped", "err", err, "exit_status", code)
	}
	return code
}

// serveGCPercent is the garbage collector's target of serve when GOGC is
// not set: the heap may grow to five times what is live before a
// collection, rather than twice (ADR 0148).
const serveGCPercent = 400

// startCPUProfile writes a CPU profile of the process (runtime/pprof) to
// path until stop is called: AGENTHOST_CPU_PROFILE, for measuring where a
// host spends its time (docs/operations.md).
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// startTrace writes an execution trace of the process (runtime/trace) to
// path until stop is called: AGENTHOST_TRACE, for seeing where a request
// waits (docs/operations.md).
func startTrace(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := trace.Start(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		trace.Stop()
		f.Close()
	}, nil
}

// Exit statuses of serve besides exitOK (docs/config.md, "Shutdown and
// exit status").
const (
	// exitServeFailed: the HTTP server failed while serving.
	exitServeFailed = 1
	// exitUnsettled: the shutdown ended with runs left active or queued
	// (shutdown_timeout passed, or the store could not say): the next
	// start recovers them.
	exitUnsettled = 3
	// exitKilled: a wait of the shutdown passed its bound (the runtime or
	// the store driver did not stop): the driver was killed.
	exitKilled = 4
	// exitShutdownFailed: every run settled or was left for the next start,
	// but a step of the shutdown failed (releasing the lease, closing the
	// store driver).
	exitShutdownFailed = 5
	// exitStoreLost: the store driver, not durable, ended while serving
	// (crashed, killed, or stalled and killed): every run and message it
	// held is gone, so the host stopped rather than serve from an empty
	// store it did not fill (docs/adr/0131).
	exitStoreLost = 6
)

// Errors of serve's shutdown, mapped to exit statuses by serveStatus.
var (
	errServeFailed = errors.New("the HTTP server failed")
	errUnsettled   = errors.New("runs left unsettled at shutdown; the next start recovers them")
	errStuck       = errors.New("the runtime did not stop within its bound")
	errShutdown    = errors.New("the shutdown failed")
	errStoreLost   = errors.New("the store driver is not durable and ended: its data is gone")
)

// serveStatus is the exit status of a serve that returned err.
func serveStatus(err error) int {
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errStoreLost):
		return exitStoreLost
	case errors.Is(err, driverhost.ErrKilled), errors.Is(err, errStuck):
		return exitKilled
	case errors.Is(err, errUnsettled):
		return exitUnsettled
	case errors.Is(err, errServeFailed):
		return exitServeFailed
	case errors.Is(err, errShutdown):
		return exitShutdownFailed
	}
	return exitUsage
}

// signalStatus is the exit status of a process ended by a second signal s:
// 128 plus the signal's number, as a shell reports a process killed by it.
func signalStatus(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return 128 + int(syscall.SIGTERM)
}

// killSwitch kills the store driver from the signal goroutine, once serve
// has one.
type killSwitch struct {
	mu   sync.Mutex
	kill func()
}

func (k *killSwitch) set(f func()) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.kill = f
}

func (k *killSwitch) fire() {
	k.mu.Lock()
	f := k.kill
	k.mu.Unlock()
	if f != nil {
		f()
	}
}

// newLogger logs at cfg.LogLevel and above, in cfg.LogFormat, durations
// written as Go duration strings ("1.5s", not nanoseconds).
func newLogger(cfg Config, w io.Writer) *slog.Logger {
	level, _ := parseLevel(cfg.LogLevel) // validated with the configuration
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: durationString}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// durationString writes a duration attribute as its Go string.
func durationString(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

// parseLevel reads a log level: debug, info, warn or error.
func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil || strings.ContainsAny(s, "+-") {
		return 0, fmt.Errorf("log_level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// anyConfigEnv reports whether an AGENTHOST_* configuration variable is set.
func anyConfigEnv() bool {
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "AGENTHOST_") && !strings.HasPrefix(kv, "AGENTHOST_SERVER=") && !strings.HasPrefix(kv, "AGENTHOST_REQUIRE_ALL=") {
			return true
		}
	}
	return false
}

// serve runs the server until ctx is done, then closes it gracefully,
// every wait bounded (docs/adr/0129). noConfig says that nothing was
// configured: the embedded default runs. kill is armed with the driver's
// kill once the driver runs.
func serve(ctx context.Context, cfg Config, noConfig bool, log *slog.Logger, kill *killSwitch) (err error) {
	if !httpapi.IsLoopback(cfg.Listen) && cfg.Token == "" {
		return fmt.Errorf("listening on %s, which is not loopback, needs a token (token_file, AGENTHOST_TOKEN_FILE or --token-file; or token)", cfg.Listen)
	}
	var certs *certReloader
	if cfg.TLSCert != "" {
		if certs, err = newCertReloader(cfg.TLSCert, cfg.TLSKey, log); err != nil {
			return err
		}
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		go func() {
			for range hup {
				log.Info("SIGHUP: reloading the TLS certificate")
				certs.reloadLogged()
			}
		}()
	} else if !httpapi.IsLoopback(cfg.Listen) {
		log.Warn("WARNING: serving plain HTTP on a non-loopback address: the bearer token and every input cross the network in clear; set tls_cert and tls_key, or terminate TLS in front of this port", "listen", cfg.Listen)
	}
	if noConfig {
		log.Info("no configuration given: running on the embedded default",
			"store", "badgerstore", "data", cfg.Data, "policy", "refine", "model", "scripted", "listen", cfg.Listen)
	}
	log.Info("agenthost starting", "store", cfg.Store, "data", cfg.Data, "policy", cfg.Policy, "model", cfg.Model, "listen", cfg.Listen)
	if err := os.MkdirAll(cfg.Data, 0o750); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	d, err := openStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	pd := driverhost.Of(d)
	if pd != nil {
		kill.set(pd.Kill)
	}
	defer func() {
		cerr := closeDriver(d, cfg.DriverStopTimeout, log)
		if cerr != nil && (err == nil || errors.Is(cerr, driverhost.ErrKilled)) {
			err = errors.Join(fmt.Errorf("%w: closing the store driver: %w", errShutdown, cerr), err)
		}
	}()
	eng, err := wasm.NewEngine(ctx, wasm.EngineConfig{CacheDir: filepath.Join(cfg.Data, "wasm-cache")})
	if err != nil {
		return err
	}
	defer eng.Close(context.Background())
	pol, err := loadPolicy(ctx, eng, cfg, log)
	if err != nil {
		return err
	}
	hooks, hookMods, err := loadHooks(ctx, eng, cfg.PrepareStep, log)
	if err != nil {
		return err
	}
	toolPol, toolPolMod, err := loadToolPolicy(ctx, eng, cfg.ToolPolicy, log)
	if err != nil {
		return err
	}
	if toolPol != nil {
		log.Info("tool policy: tool calls are decided before they run", "module", cfg.ToolPolicy.Module, "approval_timeout", cfg.ApprovalTimeout)
	}
	mdl, tools, err := newModel(cfg)
	if err != nil {
		return err
	}
	tel, err := startTelemetry(ctx, cfg.Telemetry, log)
	if err != nil {
		return err
	}
	defer tel.shutdown(log)
	var latency httpapi.CommitLatency
	if len(cfg.MCPServers) > 0 {
		var names []string
		for _, t := range tools {
			names = append(names, t.Spec().Name)
		}
		servers, err := startMCP(ctx, cfg.MCPServers, log, names)
		if err != nil {
			return err
		}
		defer servers.Close()
		tools = append(tools, servers.Tools()...)
		names = names[:0]
		for _, t := range servers.Tools() {
			names = append(names, t.Spec().Name)
		}
		log.Info("mcp tools offered to the model", "tools", strings.Join(names, ","))
	}
	callMetrics := observe.NewMetrics()
	var observer host.Observer
	if tel.tracer != nil {
		observer = tel.tracer
	}
	rt, err := host.New(ctx, host.Config{
		Driver: d, Policy: pol, PrepareStep: hooks, Observer: observer,
		Model: observe.Model(mdl, modelName(cfg), callMetrics, tel.tracer), Tools: observe.Tools(tools, callMetrics, tel.tracer), System: cfg.System, ToolTimeout: cfg.ToolTimeout,
		HistoryWindow: cfg.HistoryWindow, MaxSteps: cfg.MaxSteps, MaxConcurrentRuns: cfg.MaxConcurrentRuns, MaxAttempts: cfg.MaxAttempts, Logger: log,
		LeaseTTL: cfg.LeaseTTL, PollInterval: cfg.PollInterval, HostName: cfg.HostName, ObserveCommit: latency.Observe,
		ToolPolicy: toolPol, ApprovalTimeout: cfg.ApprovalTimeout,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		rt.Close(context.Background())
		return err
	}
	restarts := func() int64 { return 0 }
	var lost <-chan struct{}
	if pd != nil {
		restarts = func() int64 { return int64(max(pd.Starts()-1, 0)) }
		lost = pd.Lost()
	}
	srv := &http.Server{
		Handler: console.Mount(httpapi.New(rt, httpapi.Options{
			MaxBodyBytes: cfg.MaxBodyBytes, Token: cfg.Token, Logger: log, DriverRestarts: restarts, CommitLatency: &latency,
			Collectors: append(driverMetrics(pd), guestMetrics(pol, hookMods, toolPolMod), callMetrics), TracerProvider: tel.provider(), AccessLog: cfg.AccessLog,
		})),
		ReadHeaderTimeout: 10 * time.Second,
	}
	errc := make(chan error, 1)
	scheme := "http"
	if certs != nil {
		scheme = "https"
		srv.TLSConfig = certs.tlsConfig()
		go func() { errc <- srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { errc <- srv.Serve(ln) }()
	}
	log.Info("agenthost listening", "addr", ln.Addr().String(), "scheme", scheme, "epoch", rt.Epoch(), "lease", rt.LeaseEpoch(), "recovered_runs", rt.Stats().Recovered)
	var serveErr error
	closeCfg := cfg
	select {
	case <-ctx.Done():
		log.Info("shutting down: no new inputs; runs in flight may finish", "timeout", cfg.ShutdownTimeout)
	case err := <-errc:
		log.Error("HTTP server failed", "err", err)
		serveErr = fmt.Errorf("%w: %v", errServeFailed, err)
	case <-lost:
		// Nothing the runtime holds is in the store any more: stop at
		// once, runs in flight abandoned (they cannot commit), and let a
		// supervisor start a fresh host on a fresh store.
		log.Error("the store driver is not durable and ended: its data is gone; stopping without draining",
			"exit_status", exitStoreLost)
		serveErr = errStoreLost
		closeCfg.ShutdownTimeout = time.Nanosecond
	}
	cerr := closeRuntime(rt, pd, closeCfg, log)
	hctx, hcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer hcancel()
	srv.Shutdown(hctx)
	return errors.Join(serveErr, cerr)
}

// closeRuntime closes rt, letting runs finish for cfg.ShutdownTimeout. The
// runtime may still wait past that on driver calls in flight (a driver that
// stopped answering): after a further cfg.DriverStopTimeout the driver is
// killed, which ends those calls, and after another the wait is given up.
func closeRuntime(rt *host.Runtime, pd *driverhost.Driver, cfg Config, log *slog.Logger) error {
	type closed struct {
		rep host.CloseReport
		err error
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	done := make(chan closed, 1)
	go func() {
		rep, err := rt.Close(sctx)
		done <- closed{rep, err}
	}()
	var c closed
	var stuck error
	select {
	case c = <-done:
	case <-time.After(cfg.ShutdownTimeout + cfg.DriverStopTimeout):
		log.Error("the runtime has not stopped: killing the store driver", "waited", cfg.ShutdownTimeout+cfg.DriverStopTimeout)
		stuck = fmt.Errorf("%w (%v); the store driver was killed", errStuck, cfg.ShutdownTimeout+cfg.DriverStopTimeout)
		if pd != nil {
			pd.Kill()
		}
		select {
		case c = <-done:
		case <-time.After(cfg.DriverStopTimeout):
			log.Error("the runtime did not stop after its driver was killed; leaving it")
			return stuck
		}
	}
	log.Info("runtime closed", "settled", c.rep.Settled, "left_active", len(c.rep.Abandoned), "left_queued", len(c.rep.Queued))
	var err error
	if !c.rep.Settled {
		err = fmt.Errorf("%w (%d active, %d queued)", errUnsettled, len(c.rep.Abandoned), len(c.rep.Queued))
	}
	if c.err != nil {
		c.err = fmt.Errorf("%w: closing the runtime: %w", errShutdown, c.err)
	}
	return errors.Join(stuck, c.err, err)
}

// closeDriver closes the store driver, killing it when it does not close
// within timeout.
func closeDriver(d driver.Driver, timeout time.Duration, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := d.Close(ctx)
	switch {
	case errors.Is(err, driverhost.ErrKilled):
		log.Error("the store driver did not close in time and was killed; its store recovers at the next start", "timeout", timeout, "err", err)
	case err != nil:
		log.Error("closing the store driver", "err", err)
	default:
		log.Info("store driver closed")
	}
	return err
}

// openStore launches the configured driver as a subprocess, through the
// admission gate: a driver the host has not certified runs the conformance
// suite's quick profile on a scratch instance first, and is refused if it
// fails; a certified one is launched from the gate's read-only copy, pinned
// by its checksum.
func openStore(ctx context.Context, cfg Config, log *slog.Logger) (driver.Driver, error) {
	dcfg := map[string]string{}
	for k, v := range cfg.StoreConfig {
		dcfg[k] = v
	}
	var src trust.Source
	if builtins.Has(cfg.Store) {
		var err error
		if dcfg, err = builtins.Configure(cfg.Store, dcfg, builtins.Host{Data: cfg.Data, StoreURL: cfg.StoreURL}); err != nil {
			return nil, err
		}
		src.Builtin = cfg.Store
	} else {
		if !isPath(cfg.Store) {
			return nil, fmt.Errorf("store %q: not a built-in driver (%s) nor a path to a driver binary", cfg.Store, strings.Join(builtins.Names(), ", "))
		}
		src.Path = cfg.Store
		if len(cfg.StoreScratchConfig) > 0 {
			src.ScratchConfig = func(dir string) map[string]string {
				m := map[string]string{}
				for k, v := range cfg.StoreScratchConfig {
					m[k] = v
				}
				if _, ok := m["dir"]; ok {
					m["dir"] = dir
				}
				return m
			}
		}
	}
	gate, err := trust.Open(cfg.Data, trust.Options{Builtins: builtins.Registry{}, Logger: log, NoAutoCertify: !cfg.AutoCertify})
	if err != nil {
		return nil, err
	}
	d, cert, err := gate.Launch(ctx, src, driverhost.Config{DriverConfig: dcfg, Logger: log, CallTimeout: cfg.DriverCallTimeout})
	if err != nil {
		var refused *trust.RefusedError
		if errors.As(err, &refused) {
			return nil, fmt.Errorf("store %s refused: it fails the conformance suite on %s", cfg.Store, strings.Join(refused.Rules, ", "))
		}
		if errors.Is(err, trust.ErrNotCertified) {
			return nil, fmt.Errorf("store %s: %w; auto_certify is off: certify it first with \"agenthost driver certify --data %s %s\"", cfg.Store, err, cfg.Data, cfg.Store)
		}
		return nil, fmt.Errorf("store %s: %w", cfg.Store, err)
	}
	info, err := d.Info(ctx)
	if err != nil {
		d.Close(context.Background())
		return nil, fmt.Errorf("store %s: %w", cfg.Store, err)
	}
	log.Info("store driver ready", "name", info.Name, "version", info.Version, "protocol", d.Protocol(), "durable", info.Durable, "certificate", cert.Key, "pid", d.Pid())
	if d.Protocol() < 2 {
		log.Warn("the store driver speaks store protocol 1: it keeps no step records, so a recovered run restarts from its first step and no input is taken by injection", "name", info.Name)
	}
	return d.Store(), nil
}

// loadPolicy returns the configured input policy: a standard one by name,
// or a wasm module from a file.
func loadPolicy(ctx context.Context, eng *wasm.Engine, cfg Config, log *slog.Logger) (policy.Policy, error) {
	opts := wasm.Options{Config: []byte(cfg.PolicyConfig), Logger: log}
	switch cfg.Policy {
	case "refine":
		return eng.Load(ctx, standard.RefineC, opts)
	case "queue", "interrupt", "reject", "inject":
		var pc struct {
			CoalescePending bool `json:"coalescePending"`
		}
		if cfg.PolicyConfig != "" {
			dec := json.NewDecoder(strings.NewReader(cfg.PolicyConfig))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&pc); err != nil {
				return nil, fmt.Errorf("policy_config for %s: want {\"coalescePending\": true|false}: %w", cfg.Policy, err)
			}
		}
		return policy.Static{Name: cfg.Policy, Decision: runstate.Decision{Action: runstate.Action(cfg.Policy), CoalescePending: pc.CoalescePending}}, nil
	}
	if !strings.HasSuffix(cfg.Policy, ".wasm") {
		return nil, fmt.Errorf("policy %q: want queue, interrupt, reject, inject, refine or a .wasm file", cfg.Policy)
	}
	m, err := eng.LoadFile(ctx, cfg.Policy, opts)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", cfg.Policy, err)
	}
	if !m.HasHook("inputPolicy") {
		return nil, fmt.Errorf("policy %s: the module implements no inputPolicy hook", cfg.Policy)
	}
	return m, nil
}

// defaultScript is the scripted model of the embedded default: a short
// lookup, then an answer that echoes the inputs it saw.
var defaultScript = model.Script{Steps: []model.ScriptStep{
	{Delay: model.Duration(500 * time.Millisecond), Tool: &model.ScriptTool{Name: "lookup", Arguments: `{}`}},
	{Delay: model.Duration(500 * time.Millisecond), Answer: "echo"},
}}

// lookupTool is the scripted model's tool.
type lookupTool struct{}

func (lookupTool) Spec() model.ToolSpec {
	return model.ToolSpec{Name: "lookup", Description: "looks up notes about the thread"}
}
func (lookupTool) Call(context.Context, string) (string, error) { return "no notes", nil }

// modelName is the model's name in metrics and traces.
func modelName(cfg Config) string {
	if cfg.Model == "openai" {
		return cfg.OpenAI.Model
	}
	return "scripted"
}

func newModel(cfg Config) (model.Model, []model.Tool, error) {
	switch {
	case cfg.Model == "scripted":
		m, err := model.NewScripted(defaultScript)
		return m, []model.Tool{lookupTool{}}, err
	case strings.HasPrefix(cfg.Model, "scripted:"):
		s, err := model.LoadScript(strings.TrimPrefix(cfg.Model, "scripted:"))
		if err != nil {
			return nil, nil, err
		}
		m, err := model.NewScripted(s)
		return m, []model.Tool{lookupTool{}}, err
	case cfg.Model == "openai":
		retries := cfg.OpenAI.MaxRetries
		if retries == 0 {
			retries = -1 // none; model.OpenAIConfig reads 0 as its default
		}
		m, err := model.NewOpenAI(model.OpenAIConfig{
			BaseURL: cfg.OpenAI.BaseURL, Model: cfg.OpenAI.Model, APIKey: os.Getenv(cfg.OpenAI.APIKeyEnv),
			Timeout: cfg.OpenAI.Timeout, MaxRetries: retries, MaxRetryDelay: cfg.OpenAI.MaxRetryDelay,
		})
		return m, nil, err
	}
	return nil, nil, errors.New("unknown model " + cfg.Model)
}
