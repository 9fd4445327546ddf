package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/host/toolpolicy"
	"github.com/agenthost/agenthost/host/wasm"
)

func configFrom(t *testing.T, yaml string, env map[string]string) (Config, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agenthost.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	return loadConfig(path, lookup, flag.NewFlagSet("t", flag.ContinueOnError), &Config{})
}

func TestToolPolicyConfig(t *testing.T) {
	cfg, err := configFrom(t, `
tool_policy:
  module: tool-approval
  config:
    rules: [{match: "*delete*", decision: ask, prompt: "Deleting?"}]
    default: allow
`, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ToolPolicy.Module != "tool-approval" || cfg.ToolPolicy.Config != `{"default":"allow","rules":[{"decision":"ask","match":"*delete*","prompt":"Deleting?"}]}` {
		t.Errorf("%+v", cfg.ToolPolicy)
	}
	cfg, err = configFrom(t, "tool_policy: {module: ./p.wasm, config: '{\"a\": 1}', fallback: deny}\n",
		map[string]string{"AGENTHOST_TOOL_POLICY_FALLBACK": "allow"})
	if err != nil || cfg.ToolPolicy != (ToolPolicyConfig{Module: "./p.wasm", Config: `{"a": 1}`, Fallback: "allow"}) {
		t.Errorf("%+v %v", cfg.ToolPolicy, err)
	}
	cfg, err = configFrom(t, "", map[string]string{"AGENTHOST_TOOL_POLICY": "x.wasm"})
	if err != nil || cfg.ToolPolicy.Module != "x.wasm" {
		t.Errorf("env: %+v %v", cfg.ToolPolicy, err)
	}
	for yaml, want := range map[string]string{
		"tool_policy: tool-approval\n":                           "tool_policy is a mapping",
		"tool_policy: {module: tool-approval, colour: red}\n":    `unknown key "colour"`,
		"tool_policy: {module: approve-all}\n":                   `module "approve-all": want tool-approval or a .wasm file`,
		"tool_policy: {module: p.wasm, fallback: maybe}\n":       `tool_policy fallback: tool decision "maybe"`,
		"tool_policy: {module: tool-approval, fallback: deny}\n": "cannot fail",
		"tool_policy: {fallback: deny}\n":                        "without a module",
	} {
		_, err := configFrom(t, yaml, nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", yaml, err, want)
		}
	}
}

func TestLoadToolPolicy(t *testing.T) {
	ctx := context.Background()
	eng, err := wasm.NewEngine(ctx, wasm.EngineConfig{CacheDir: filepath.Join(t.TempDir(), "cache")})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(ctx)
	log := slog.New(slog.DiscardHandler)
	if p, m, err := loadToolPolicy(ctx, eng, ToolPolicyConfig{}, log); p != nil || m != nil || err != nil {
		t.Errorf("none: %v %v %v", p, m, err)
	}
	p, m, err := loadToolPolicy(ctx, eng, ToolPolicyConfig{Module: "tool-approval",
		Config: `{"rules": [{"match": "*delete*", "decision": "ask"}, {"match": "shell_*", "decision": "deny", "message": "no"}], "default": "allow"}`}, log)
	if err != nil || m != nil {
		t.Fatal(err)
	}
	for tool, want := range map[string]toolpolicy.Decision{
		"fs_delete":  {Verdict: toolpolicy.Ask, Prompt: `Run "fs_delete"?`, Approvals: 1},
		"shell_exec": {Verdict: toolpolicy.Deny, Message: "no"},
		"fs_read":    {Verdict: toolpolicy.Allow},
	} {
		if d, err := p.Decide(ctx, toolpolicy.Call{Tool: tool}); err != nil || d != want || d.Check() != nil {
			t.Errorf("%s: %+v %v", tool, d, err)
		}
	}
	if _, _, err := loadToolPolicy(ctx, eng, ToolPolicyConfig{Module: "tool-approval", Config: `{"rules": [1]}`}, log); err == nil || !strings.Contains(err.Error(), "rule 1") {
		t.Errorf("bad rules: %v", err)
	}
	root := filepath.Join("..", "..")
	p, m, err = loadToolPolicy(ctx, eng, ToolPolicyConfig{Module: filepath.Join(root, "guests", "examples", "wat", "policy.wasm")}, log)
	if err != nil || m == nil {
		t.Fatal(err)
	}
	if d, err := p.Decide(ctx, toolpolicy.Call{Tool: "shell_exec"}); err != nil || d.Verdict != toolpolicy.Deny || d.Message != "shell_exec is not allowed" {
		t.Errorf("wasm: %+v %v", d, err)
	}
	p, _, err = loadToolPolicy(ctx, eng, ToolPolicyConfig{Module: filepath.Join(root, "host", "wasm", "testdata", "hostile", "tooltricks.wasm"), Fallback: "deny"}, log)
	if err != nil {
		t.Fatal(err)
	}
	var fb *toolpolicy.FallbackError
	if d, err := p.Decide(ctx, toolpolicy.Call{Tool: "trap"}); !errors.As(err, &fb) || d.Verdict != toolpolicy.Deny {
		t.Errorf("fallback deny: %+v %v", d, err)
	}
	_, _, err = loadToolPolicy(ctx, eng, ToolPolicyConfig{Module: filepath.Join(root, "guests", "policy", "refine-c", "refine.wasm")}, log)
	if err == nil || !strings.Contains(err.Error(), "no toolPolicy hook") {
		t.Errorf("inputPolicy module: %v", err)
	}
}
