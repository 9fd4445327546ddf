package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/agenthost/agenthost/abi/guestabi"
	"github.com/agenthost/agenthost/guests/policy/rules"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/toolpolicy"
	"github.com/agenthost/agenthost/host/wasm"
)

// ToolPolicyConfig is the tool policy (docs/config.md): which tool calls
// run, are refused, or wait for a person's approval. In YAML:
//
//	tool_policy:
//	  module: tool-approval          # or ./policies/tools.wasm
//	  config: {rules: [{match: "*delete*", decision: ask}], default: allow}
//	  fallback: ask                  # when the guest fails: allow, deny, ask
type ToolPolicyConfig struct {
	// Module is "tool-approval" (the standard guest's rules, built in) or
	// the path of a .wasm module with a toolPolicy hook. Empty: no tool
	// policy, every call runs.
	Module string `env:"AGENTHOST_TOOL_POLICY"`
	// Config is given to the module at load (JSON text; in YAML also a
	// mapping).
	Config string `env:"AGENTHOST_TOOL_POLICY_CONFIG"`
	// Fallback is the decision when a wasm module fails to decide: allow,
	// deny or ask (the default).
	Fallback string `env:"AGENTHOST_TOOL_POLICY_FALLBACK"`
}

// StandardToolPolicy is the name of the built-in tool policy.
const StandardToolPolicy = "tool-approval"

// UnmarshalYAML implements yaml.Unmarshaler.
func (c *ToolPolicyConfig) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: tool_policy is a mapping {module: NAME|FILE.wasm, config: ..., fallback: ask}", n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch k.Value {
		case "module":
			c.Module = v.Value
		case "fallback":
			c.Fallback = v.Value
		case "config":
			text, err := configText(v, "tool_policy")
			if err != nil {
				return err
			}
			c.Config = text
		default:
			return fmt.Errorf("line %d: tool_policy: unknown key %q (want module, config, fallback)", k.Line, k.Value)
		}
	}
	return nil
}

// check reports what is wrong with c that can be told without loading it.
func (c ToolPolicyConfig) check() error {
	if c.Module == "" {
		if c.Config != "" || c.Fallback != "" {
			return fmt.Errorf("tool_policy: config or fallback given without a module")
		}
		return nil
	}
	if c.Module != StandardToolPolicy && !strings.HasSuffix(c.Module, ".wasm") {
		return fmt.Errorf("tool_policy module %q: want %s or a .wasm file", c.Module, StandardToolPolicy)
	}
	if c.Fallback != "" {
		if _, err := toolpolicy.ParseVerdict(c.Fallback); err != nil {
			return fmt.Errorf("tool_policy fallback: %w", err)
		}
		if c.Module == StandardToolPolicy {
			return fmt.Errorf("tool_policy fallback: %s runs built in and cannot fail; the fallback is for a .wasm module", StandardToolPolicy)
		}
	}
	return nil
}

// loadToolPolicy loads the configured tool policy: nil when none is
// configured; the standard tool-approval rules, run natively; or a wasm
// module's toolPolicy hook, sandboxed, which is also returned for its
// metrics (hook tool_policy).
func loadToolPolicy(ctx context.Context, eng *wasm.Engine, c ToolPolicyConfig, log *slog.Logger) (host.ToolPolicy, *wasm.Module, error) {
	if err := c.check(); err != nil {
		return nil, nil, err
	}
	switch {
	case c.Module == "":
		return nil, nil, nil
	case c.Module == StandardToolPolicy:
		rc, err := rules.ParseToolApprovalConfig([]byte(c.Config))
		if err != nil {
			return nil, nil, fmt.Errorf("tool_policy %s: %w", c.Module, err)
		}
		return toolpolicy.Func(func(_ context.Context, call toolpolicy.Call) (toolpolicy.Decision, error) {
			d := rules.ToolApproval(rc, &guestabi.ToolRequest{Tool: call.Tool, Server: call.Server, Arguments: call.Arguments})
			out := toolpolicy.Decision{Verdict: toolpolicy.Verdict(d.Decision), Message: d.Message, Prompt: d.Prompt, Approvals: d.Approvals}
			if out.Verdict == toolpolicy.Ask && out.Approvals == 0 {
				out.Approvals = 1 // the ABI's 0 means one approval
			}
			return out.WithText(call.Tool), nil
		}), nil, nil
	}
	fb := toolpolicy.Decision{Verdict: toolpolicy.Verdict(c.Fallback)}
	m, err := eng.LoadFile(ctx, c.Module, wasm.Options{Config: []byte(c.Config), Logger: log, ToolFallback: fb})
	if err != nil {
		return nil, nil, fmt.Errorf("tool_policy %s: %w", c.Module, err)
	}
	if !m.HasHook(guestabi.HookToolPolicy) {
		m.Close(ctx)
		return nil, nil, fmt.Errorf("tool_policy %s: the module implements no toolPolicy hook", c.Module)
	}
	return m.ToolPolicy(), m, nil
}
