package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/agenthost/agenthost/host/driverhost"
	"github.com/agenthost/agenthost/host/store"
	"github.com/agenthost/agenthost/internal/builtins"
)

// Config is the server's configuration. It comes from a YAML file
// (--config), then AGENTHOST_* environment variables, then flags: each
// later source wins. docs/config.md documents every field.
type Config struct {
	// Listen is the HTTP listen address.
	Listen string `yaml:"listen" env:"AGENTHOST_LISTEN"`
	// Token is the bearer token; required when Listen is not loopback.
	Token string `yaml:"token" env:"AGENTHOST_TOKEN"`
	// TokenFile is a file holding the token (kept out of the process's
	// arguments and environment). Not together with Token.
	TokenFile string `yaml:"token_file" env:"AGENTHOST_TOKEN_FILE"`
	// TLSCert and TLSKey are the PEM files of the server's certificate and
	// key: set, the server speaks HTTPS only. Loaded again on SIGHUP and
	// when the files change.
	TLSCert string `yaml:"tls_cert" env:"AGENTHOST_TLS_CERT"`
	TLSKey  string `yaml:"tls_key" env:"AGENTHOST_TLS_KEY"`
	// Data is the directory of the embedded store and the host's own files
	// (driver certificates, compiled policy cache).
	Data string `yaml:"data" env:"AGENTHOST_DATA"`
	// Store is a built-in driver name (badgerstore, memstore) or the path of
	// a driver binary.
	Store string `yaml:"store" env:"AGENTHOST_STORE"`
	// StoreConfig is passed to the driver at open (driver-specific).
	StoreConfig map[string]string `yaml:"store_config"`
	// StoreScratchConfig is, for a driver given by path, the configuration
	// of the scratch instance the admission gate certifies it on (a "dir"
	// key is pointed at a scratch directory). Required when store_config
	// names a database (a "url" key): the suite must never run on the
	// user's data.
	StoreScratchConfig map[string]string `yaml:"store_scratch_config"`
	// StoreURL is the database URL of a driver that takes one (pgstore's
	// "url"); it overrides store_config's url.
	StoreURL string `yaml:"store_url" env:"AGENTHOST_STORE_URL"`
	// Several hosts on one store (a driver with leases, e.g. pgstore): how
	// long this host's lease lives unless renewed, how often it looks for
	// work no notice announced, and the name its lease shows.
	LeaseTTL     time.Duration `yaml:"lease_ttl" env:"AGENTHOST_LEASE_TTL"`
	PollInterval time.Duration `yaml:"poll_interval" env:"AGENTHOST_POLL_INTERVAL"`
	HostName     string        `yaml:"host_name" env:"AGENTHOST_HOST_NAME"`
	// Policy is a standard policy name (queue, interrupt, reject, inject,
	// refine) or the path of a .wasm policy.
	Policy string `yaml:"policy" env:"AGENTHOST_POLICY"`
	// PolicyConfig is passed to the policy guest at load.
	PolicyConfig string `yaml:"policy_config" env:"AGENTHOST_POLICY_CONFIG"`
	// PrepareStep lists prepareStep hooks, in order: standard names or
	// .wasm paths, each with its configuration.
	PrepareStep []HookConfig `yaml:"prepare_step"`
	// ToolPolicy decides which tool calls run, are refused, or wait for a
	// person's approval.
	ToolPolicy ToolPolicyConfig `yaml:"tool_policy"`
	// ApprovalTimeout is how long a tool call the tool policy asks about
	// waits for an answer; past it the call is rejected.
	ApprovalTimeout time.Duration `yaml:"approval_timeout" env:"AGENTHOST_APPROVAL_TIMEOUT"`
	// MCPServers are the MCP servers whose tools the model is offered
	// (env AGENTHOST_MCP_SERVERS: a JSON list of the same objects).
	MCPServers []MCPServer `yaml:"mcp_servers"`
	// ToolTimeout bounds each call of a tool with no limit of its own (MCP
	// servers set theirs).
	ToolTimeout time.Duration `yaml:"tool_timeout" env:"AGENTHOST_TOOL_TIMEOUT"`
	// Model is "scripted", "scripted:FILE" or "openai".
	Model string `yaml:"model" env:"AGENTHOST_MODEL"`
	// OpenAI configures the openai model.
	OpenAI OpenAIConfig `yaml:"openai"`
	// System is the system prompt.
	System string `yaml:"system" env:"AGENTHOST_SYSTEM"`
	// HistoryWindow is how many of a thread's last history messages a
	// run's prompt is drawn from (whole runs only).
	HistoryWindow int `yaml:"history_window" env:"AGENTHOST_HISTORY_WINDOW"`
	// Limits bound the runtime.
	MaxSteps          int           `yaml:"max_steps" env:"AGENTHOST_MAX_STEPS"`
	MaxConcurrentRuns int           `yaml:"max_concurrent_runs" env:"AGENTHOST_MAX_CONCURRENT_RUNS"`
	MaxAttempts       int           `yaml:"max_attempts" env:"AGENTHOST_MAX_ATTEMPTS"`
	MaxBodyBytes      int64         `yaml:"max_body_bytes" env:"AGENTHOST_MAX_BODY_BYTES"`
	ShutdownTimeout   time.Duration `yaml:"shutdown_timeout" env:"AGENTHOST_SHUTDOWN_TIMEOUT"`
	// DriverStopTimeout bounds the store driver's close at shutdown (and
	// any other wait on the driver past shutdown_timeout): a driver that
	// has not stopped by then is killed.
	DriverStopTimeout time.Duration `yaml:"driver_stop_timeout" env:"AGENTHOST_DRIVER_STOP_TIMEOUT"`
	// DriverCallTimeout bounds every call to the store driver: a driver
	// that does not answer one within it is reported stalled, killed and
	// relaunched (a driver that is not durable is not: the host stops).
	DriverCallTimeout time.Duration `yaml:"driver_call_timeout" env:"AGENTHOST_DRIVER_CALL_TIMEOUT"`
	// AutoCertify lets the host certify a driver binary it has no
	// certificate for (run the suite) and launch it. False: such a binary
	// is refused until "agenthost driver certify" certified it.
	AutoCertify bool `yaml:"auto_certify" env:"AGENTHOST_AUTO_CERTIFY"`
	// LogFormat is "text" or "json".
	LogFormat string `yaml:"log_format" env:"AGENTHOST_LOG_FORMAT"`
	// LogLevel is the least level logged: debug, info, warn or error.
	LogLevel string `yaml:"log_level" env:"AGENTHOST_LOG_LEVEL"`
	// AccessLog logs a line per HTTP request.
	AccessLog bool `yaml:"access_log" env:"AGENTHOST_ACCESS_LOG"`
	// Telemetry turns on OpenTelemetry traces.
	Telemetry TelemetryConfig `yaml:"telemetry"`
}

// OpenAIConfig configures an OpenAI-compatible chat completions endpoint.
type OpenAIConfig struct {
	BaseURL string `yaml:"base_url" env:"AGENTHOST_OPENAI_BASE_URL"`
	Model   string `yaml:"model" env:"AGENTHOST_OPENAI_MODEL"`
	// APIKey is read from this environment variable, never from the file.
	APIKeyEnv string `yaml:"api_key_env" env:"AGENTHOST_OPENAI_API_KEY_ENV"`
	// Timeout bounds each request of a model call (reading a streamed
	// answer included); MaxRetries is how often a request that failed with
	// 429, 5xx, a lost connection or the timeout is tried again, waiting
	// with back-off capped at MaxRetryDelay.
	Timeout       time.Duration `yaml:"timeout" env:"AGENTHOST_OPENAI_TIMEOUT"`
	MaxRetries    int           `yaml:"max_retries" env:"AGENTHOST_OPENAI_MAX_RETRIES"`
	MaxRetryDelay time.Duration `yaml:"max_retry_delay" env:"AGENTHOST_OPENAI_MAX_RETRY_DELAY"`
}

// defaults is the embedded default: badgerstore in ./agenthost-data, the
// refine policy, the scripted model, loopback.
func defaults() Config {
	return Config{
		Listen: "127.0.0.1:7070", Data: "./agenthost-data", Store: "badgerstore", Policy: "refine", Model: "scripted",
		HistoryWindow: store.DefaultHistoryWindow, MaxSteps: 16, MaxConcurrentRuns: 64, MaxAttempts: 3, MaxBodyBytes: 1 << 20, ShutdownTimeout: 30 * time.Second,
		DriverStopTimeout: 15 * time.Second, DriverCallTimeout: driverhost.DefaultCallTimeout, AutoCertify: true,
		LogFormat: "text", LogLevel: "info", ToolTimeout: 60 * time.Second, ApprovalTimeout: 24 * time.Hour,
		OpenAI: OpenAIConfig{BaseURL: "https://api.openai.com/v1", APIKeyEnv: "OPENAI_API_KEY", Timeout: 120 * time.Second, MaxRetries: 2, MaxRetryDelay: 8 * time.Second},
	}
}

// loadConfig builds the configuration from the file (if any), the
// environment and the flags already parsed into fs (only those set).
func loadConfig(path string, env func(string) (string, bool), fs *flag.FlagSet, flagCfg *Config) (Config, error) {
	cfg := defaults()
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return Config{}, fmt.Errorf("config: %w", err)
		}
		dec := yaml.NewDecoder(strings.NewReader(string(b)))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
			return Config{}, fmt.Errorf("config %s: %w", path, err)
		}
	}
	if err := applyEnv(reflect.ValueOf(&cfg).Elem(), env); err != nil {
		return Config{}, err
	}
	if s, ok := env("AGENTHOST_MCP_SERVERS"); ok && strings.TrimSpace(s) != "" {
		cfg.MCPServers = nil
		dec := json.NewDecoder(strings.NewReader(s))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&cfg.MCPServers); err != nil {
			return Config{}, fmt.Errorf("AGENTHOST_MCP_SERVERS: want a JSON list of servers: %w", err)
		}
	}
	// Flags win: copy each flag that was set.
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "listen":
			cfg.Listen = flagCfg.Listen
		case "token":
			cfg.Token = flagCfg.Token
		case "token-file":
			cfg.TokenFile = flagCfg.TokenFile
		case "tls-cert":
			cfg.TLSCert = flagCfg.TLSCert
		case "tls-key":
			cfg.TLSKey = flagCfg.TLSKey
		case "data":
			cfg.Data = flagCfg.Data
		case "store":
			cfg.Store = flagCfg.Store
		case "store-url":
			cfg.StoreURL = flagCfg.StoreURL
		case "lease-ttl":
			cfg.LeaseTTL = flagCfg.LeaseTTL
		case "poll-interval":
			cfg.PollInterval = flagCfg.PollInterval
		case "host-name":
			cfg.HostName = flagCfg.HostName
		case "policy":
			cfg.Policy = flagCfg.Policy
		case "prepare-step":
			cfg.PrepareStep = flagCfg.PrepareStep
		case "mcp":
			cfg.MCPServers = flagCfg.MCPServers
		case "tool-timeout":
			cfg.ToolTimeout = flagCfg.ToolTimeout
		case "approval-timeout":
			cfg.ApprovalTimeout = flagCfg.ApprovalTimeout
		case "openai-base-url":
			cfg.OpenAI.BaseURL = flagCfg.OpenAI.BaseURL
		case "openai-model":
			cfg.OpenAI.Model = flagCfg.OpenAI.Model
		case "openai-timeout":
			cfg.OpenAI.Timeout = flagCfg.OpenAI.Timeout
		case "model":
			cfg.Model = flagCfg.Model
		case "log-level":
			cfg.LogLevel = flagCfg.LogLevel
		case "log-format":
			cfg.LogFormat = flagCfg.LogFormat
		case "access-log":
			cfg.AccessLog = flagCfg.AccessLog
		}
	})
	if err := cfg.validate(); err != nil {
		return cfg, err
	}
	if cfg.TokenFile != "" {
		tok, err := readTokenFile(cfg.TokenFile)
		if err != nil {
			return cfg, err
		}
		cfg.Token = tok
	}
	return cfg, nil
}

func applyEnv(v reflect.Value, env func(string) (string, bool)) error {
	t := v.Type()
	for i := range t.NumField() {
		f, fv := t.Field(i), v.Field(i)
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(time.Duration(0)) {
			if err := applyEnv(fv, env); err != nil {
				return err
			}
			continue
		}
		name := f.Tag.Get("env")
		if name == "" {
			continue
		}
		s, ok := env(name)
		if !ok {
			continue
		}
		switch {
		case f.Type == reflect.TypeOf(time.Duration(0)):
			d, err := time.ParseDuration(s)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			fv.SetInt(int64(d))
		case f.Type.Kind() == reflect.String:
			fv.SetString(s)
		case f.Type.Kind() == reflect.Bool:
			b, err := strconv.ParseBool(s)
			if err != nil {
				return fmt.Errorf("%s: %q is not true or false", name, s)
			}
			fv.SetBool(b)
		case f.Type.Kind() == reflect.Int || f.Type.Kind() == reflect.Int64:
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return fmt.Errorf("%s: %q is not a number", name, s)
			}
			fv.SetInt(n)
		}
	}
	return nil
}

func (c Config) validate() error {
	var errs []error
	if c.Listen == "" {
		errs = append(errs, errors.New("listen is empty"))
	}
	if c.Data == "" {
		errs = append(errs, errors.New("data is empty"))
	}
	if c.Store == "" {
		errs = append(errs, errors.New("store is empty"))
	}
	if c.Model != "scripted" && c.Model != "openai" && !strings.HasPrefix(c.Model, "scripted:") {
		errs = append(errs, fmt.Errorf("model %q: want scripted, scripted:FILE or openai", c.Model))
	}
	if c.MaxSteps <= 0 || c.MaxConcurrentRuns <= 0 || c.MaxAttempts <= 0 || c.MaxBodyBytes <= 0 || c.HistoryWindow <= 0 {
		errs = append(errs, errors.New("history_window, max_steps, max_concurrent_runs, max_attempts and max_body_bytes must be positive"))
	}
	if c.MaxAttempts > 1023 {
		errs = append(errs, fmt.Errorf("max_attempts %d: at most 1023 (each attempt has an event id of its own)", c.MaxAttempts))
	}
	if c.ShutdownTimeout <= 0 || c.DriverStopTimeout <= 0 || c.DriverCallTimeout <= 0 {
		errs = append(errs, errors.New("shutdown_timeout, driver_stop_timeout and driver_call_timeout must be positive"))
	}
	if c.LeaseTTL < 0 || c.PollInterval < 0 {
		errs = append(errs, errors.New("lease_ttl and poll_interval must not be negative"))
	}
	if c.LeaseTTL > 0 && c.LeaseTTL < 300*time.Millisecond {
		errs = append(errs, fmt.Errorf("lease_ttl %v: at least 300ms (it is renewed every third of it)", c.LeaseTTL))
	}
	if isPath(c.Store) && c.StoreConfig["url"] != "" && len(c.StoreScratchConfig) == 0 {
		errs = append(errs, fmt.Errorf("store %s: store_config names a database (url), so the driver gate needs store_scratch_config, the configuration it certifies the driver on: the conformance suite never runs on your data", c.Store))
	}
	if builtins.Has(c.Store) {
		if _, err := builtins.Configure(c.Store, c.StoreConfig, builtins.Host{Data: c.Data, StoreURL: c.StoreURL}); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Token != "" && c.TokenFile != "" {
		errs = append(errs, errors.New("token and token_file are both set: give one (token_file keeps the token out of the process's arguments)"))
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, errors.New("tls_cert and tls_key go together: give both or neither"))
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		errs = append(errs, fmt.Errorf("log_format %q: want text or json", c.LogFormat))
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		errs = append(errs, err)
	}
	if err := c.Telemetry.validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Model == "openai" && c.OpenAI.Model == "" {
		errs = append(errs, errors.New("model openai needs openai.model"))
	}
	if c.OpenAI.Timeout <= 0 || c.OpenAI.MaxRetries < 0 || c.OpenAI.MaxRetryDelay <= 0 {
		errs = append(errs, errors.New("openai.timeout and openai.max_retry_delay must be positive, openai.max_retries not negative"))
	}
	if c.ApprovalTimeout <= 0 {
		errs = append(errs, errors.New("approval_timeout must be positive"))
	}
	if c.ToolTimeout <= 0 {
		errs = append(errs, errors.New("tool_timeout must be positive"))
	}
	for _, m := range c.MCPServers {
		if err := m.config().Check(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.ToolPolicy.check(); err != nil {
		errs = append(errs, err)
	}
	for i, h := range c.PrepareStep {
		if h.Hook == "" {
			errs = append(errs, fmt.Errorf("prepare_step %d: no hook", i))
		}
	}
	return errors.Join(errs...)
}

// isPath reports whether store names a driver binary rather than a built-in.
func isPath(store string) bool { return strings.ContainsRune(store, os.PathSeparator) }
