package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/agenthost/agenthost/guests/policy/rules"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/mcp"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/host/step"
	"github.com/agenthost/agenthost/host/wasm"
)

// HookConfig is one prepareStep hook: a standard hook's name
// (system-instruction, step-budget) or a .wasm module's path, and the
// configuration it is given at load (JSON). In YAML it is either the name
// alone or a mapping {hook: NAME, config: ...}, where config is JSON text or
// a YAML mapping.
type HookConfig struct {
	Hook   string
	Config string
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (h *HookConfig) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		h.Hook = n.Value
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: a prepare_step entry is a hook name or {hook: NAME, config: ...}", n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch k.Value {
		case "hook":
			h.Hook = v.Value
		case "config":
			text, err := configText(v, "prepare_step")
			if err != nil {
				return err
			}
			h.Config = text
		default:
			return fmt.Errorf("line %d: prepare_step: unknown key %q (want hook, config)", k.Line, k.Value)
		}
	}
	if h.Hook == "" {
		return fmt.Errorf("line %d: prepare_step entry without a hook", n.Line)
	}
	return nil
}

// hookFlags fill HookConfigs from --prepare-step and --prepare-step-config,
// the latter configuring the hook named just before it.
type hookFlags struct{ hooks *[]HookConfig }

type hookFlag hookFlags

func (f hookFlag) String() string {
	if f.hooks == nil {
		return ""
	}
	var s []string
	for _, h := range *f.hooks {
		s = append(s, h.Hook)
	}
	return strings.Join(s, ",")
}

func (f hookFlag) Set(s string) error {
	*f.hooks = append(*f.hooks, HookConfig{Hook: s})
	return nil
}

type hookConfigFlag hookFlags

func (f hookConfigFlag) String() string { return "" }

func (f hookConfigFlag) Set(s string) error {
	n := len(*f.hooks)
	if n == 0 {
		return errors.New("--prepare-step-config configures the --prepare-step before it; there is none")
	}
	if (*f.hooks)[n-1].Config != "" {
		return fmt.Errorf("--prepare-step %s is configured twice", (*f.hooks)[n-1].Hook)
	}
	(*f.hooks)[n-1].Config = s
	return nil
}

// standardHooks are the prepareStep hooks serve has built in, by name: the
// standard guests' rules, run natively.
var standardHooks = map[string]func(config []byte) (step.Hook, error){
	"system-instruction": func(b []byte) (step.Hook, error) {
		c, err := rules.ParseSystemInstructionConfig(b)
		if err != nil {
			return nil, err
		}
		return step.HookFunc(func(_ context.Context, r step.Request) (step.Result, error) {
			return rules.SystemInstruction(c, &r), nil
		}), nil
	},
	"step-budget": func(b []byte) (step.Hook, error) {
		c, err := rules.ParseStepBudgetConfig(b)
		if err != nil {
			return nil, err
		}
		return step.HookFunc(func(_ context.Context, r step.Request) (step.Result, error) {
			return rules.StepBudget(c, &r), nil
		}), nil
	},
}

// loadHooks loads the configured prepareStep hooks, in order, and returns
// the wasm modules among them too.
func loadHooks(ctx context.Context, eng *wasm.Engine, hooks []HookConfig, log *slog.Logger) ([]model.PrepareStep, []*wasm.Module, error) {
	var out []model.PrepareStep
	var mods []*wasm.Module
	for _, h := range hooks {
		if mk, ok := standardHooks[h.Hook]; ok {
			sh, err := mk([]byte(h.Config))
			if err != nil {
				return nil, nil, fmt.Errorf("prepare_step %s: %w", h.Hook, err)
			}
			out = append(out, host.StepHook(sh))
			continue
		}
		if !strings.HasSuffix(h.Hook, ".wasm") {
			return nil, nil, fmt.Errorf("prepare_step %q: want system-instruction, step-budget or a .wasm file", h.Hook)
		}
		m, err := eng.LoadFile(ctx, h.Hook, wasm.Options{Config: []byte(h.Config), Logger: log})
		if err != nil {
			return nil, nil, fmt.Errorf("prepare_step %s: %w", h.Hook, err)
		}
		if !m.HasHook("prepareStep") {
			return nil, nil, fmt.Errorf("prepare_step %s: the module implements no prepareStep hook", h.Hook)
		}
		out = append(out, host.StepHook(m))
		mods = append(mods, m)
	}
	return out, mods, nil
}

// MCPServer configures one MCP tool server (docs/config.md).
type MCPServer struct {
	Name         string            `yaml:"name" json:"name"`
	Prefix       string            `yaml:"prefix" json:"prefix"`
	Command      string            `yaml:"command" json:"command"`
	Args         []string          `yaml:"args" json:"args"`
	Dir          string            `yaml:"dir" json:"dir"`
	Env          []string          `yaml:"env" json:"env"`
	URL          string            `yaml:"url" json:"url"`
	Headers      map[string]string `yaml:"headers" json:"headers"`
	Timeout      Duration          `yaml:"timeout" json:"timeout"`
	StartTimeout Duration          `yaml:"start_timeout" json:"start_timeout"`
}

// Duration is a time.Duration written as Go writes one ("90s") in JSON.
type Duration time.Duration

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string such as \"90s\": %s", b)
	}
	v, err := time.ParseDuration(s)
	*d = Duration(v)
	return err
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*d = Duration(v)
	return nil
}

// parseMCPFlag reads --mcp NAME=COMMAND [ARG...] or --mcp NAME=URL.
func parseMCPFlag(s string) (MCPServer, error) {
	name, rest, ok := strings.Cut(s, "=")
	rest = strings.TrimSpace(rest)
	if !ok || name == "" || rest == "" {
		return MCPServer{}, fmt.Errorf("--mcp %q: want NAME=COMMAND [ARG...] or NAME=http(s)://URL", s)
	}
	if strings.HasPrefix(rest, "http://") || strings.HasPrefix(rest, "https://") {
		return MCPServer{Name: name, URL: rest}, nil
	}
	f := strings.Fields(rest)
	return MCPServer{Name: name, Command: f[0], Args: f[1:]}, nil
}

// mcpFlag collects --mcp flags.
type mcpFlag struct{ servers *[]MCPServer }

func (f mcpFlag) String() string { return "" }

func (f mcpFlag) Set(s string) error {
	m, err := parseMCPFlag(s)
	if err != nil {
		return err
	}
	*f.servers = append(*f.servers, m)
	return nil
}

// startMCP starts the configured MCP servers. reserved are the names of the
// other tools.
func startMCP(ctx context.Context, servers []MCPServer, log *slog.Logger, reserved []string) (*mcp.Servers, error) {
	cfgs := make([]mcp.ServerConfig, 0, len(servers))
	for _, s := range servers {
		cfgs = append(cfgs, s.config())
	}
	return mcp.Start(ctx, cfgs, mcp.Options{Logger: log}, reserved...)
}

func (s MCPServer) config() mcp.ServerConfig {
	return mcp.ServerConfig{
		Name: s.Name, Prefix: s.Prefix, Command: s.Command, Args: s.Args, Dir: s.Dir, Env: s.Env,
		URL: s.URL, Headers: s.Headers, Timeout: time.Duration(s.Timeout), StartTimeout: time.Duration(s.StartTimeout),
	}
}

// configText is a guest's configuration as the guest receives it: a scalar
// as written, a mapping or a list as JSON text.
func configText(v *yaml.Node, what string) (string, error) {
	if v.Kind == yaml.ScalarNode {
		return v.Value, nil
	}
	var x any
	if err := v.Decode(&x); err != nil {
		return "", err
	}
	b, err := json.Marshal(x)
	if err != nil {
		return "", fmt.Errorf("line %d: %s config: %w", v.Line, what, err)
	}
	return string(b), nil
}
