package wasm

import (
	"context"
	"errors"
	"fmt"

	"github.com/agenthost/agenthost/abi/guestabi"
	"github.com/agenthost/agenthost/host/toolpolicy"
)

// normToolFallback fills in Options.ToolFallback: ask for one approval when
// unset, and checks it.
func normToolFallback(d *toolpolicy.Decision) error {
	if d.Verdict == "" {
		d.Verdict = toolpolicy.Ask
	}
	if d.Verdict == toolpolicy.Ask && d.Approvals == 0 {
		d.Approvals = 1
	}
	if err := d.Check(); err != nil {
		return fmt.Errorf("wasm: tool fallback: %w", err)
	}
	return nil
}

// ToolPolicy returns the guest's toolPolicy hook as a toolpolicy.Policy
// (Module.DecideTool), or nil if the guest does not implement it.
func (m *Module) ToolPolicy() toolpolicy.Policy {
	if !m.HasHook(guestabi.HookToolPolicy) {
		return nil
	}
	return toolpolicy.Func(m.DecideTool)
}

// DecideTool calls the guest's toolPolicy hook. A failed call (trap,
// deadline, error result, a decision that does not decode) is reported (log,
// OnFailure, Stats) and returns Options.ToolFallback, both as the decision
// and in a *toolpolicy.FallbackError. An empty deny message or ask prompt,
// the guest's or the fallback's, is replaced by one of the host's naming the
// tool.
func (m *Module) DecideTool(ctx context.Context, call toolpolicy.Call) (toolpolicy.Decision, error) {
	if !m.HasHook(guestabi.HookToolPolicy) {
		return toolpolicy.Decision{}, ErrNoHook
	}
	m.calls.Add(1)
	d, err := m.decideTool(ctx, &call)
	if err != nil {
		fb := m.opts.ToolFallback
		switch {
		case fb.Verdict == toolpolicy.Ask && fb.Prompt == "":
			fb.Prompt = "The tool policy " + m.gm.Name + " failed to decide. Run " + toolpolicy.QuoteTool(call.Tool) + "?"
		case fb.Verdict == toolpolicy.Deny && fb.Message == "":
			fb.Message = "The tool " + toolpolicy.QuoteTool(call.Tool) + " was not run: the tool policy failed to decide."
		}
		m.fallbacks.Add(1)
		m.failures.Add(1)
		m.log.Warn("guest call failed; using fallback", "hook", guestabi.HookToolPolicy, "err", err, "fallback", fb.Verdict)
		if m.opts.OnFailure != nil {
			m.opts.OnFailure(Failure{Module: m.gm.Name, Hook: guestabi.HookToolPolicy, Err: err, ToolFallback: fb})
		}
		return fb, &toolpolicy.FallbackError{Decision: fb, Err: err}
	}
	return d.WithText(call.Tool), nil
}

func (m *Module) decideTool(ctx context.Context, call *toolpolicy.Call) (toolpolicy.Decision, error) {
	if call.Step < 0 || int64(call.Step) > int64(^uint32(0)) {
		return toolpolicy.Decision{}, errors.New("tool call step out of range")
	}
	inst, err := m.get(ctx)
	if err != nil {
		return toolpolicy.Decision{}, err
	}
	inst.buf = guestabi.AppendToolRequest(inst.buf[:0], &guestabi.ToolRequest{
		Step: uint32(call.Step), Tool: call.Tool, Server: call.Server, Arguments: call.Arguments,
		CallID: call.CallID, IdempotencyKey: call.IdempotencyKey, RunID: call.RunID, ThreadID: call.ThreadID,
	})
	out, err := m.invoke(ctx, inst, inst.tool, inst.buf)
	if err != nil {
		m.put(inst, false)
		return toolpolicy.Decision{}, err
	}
	gd, err := guestabi.DecodeToolDecision(out)
	m.put(inst, true) // a bad answer is the guest's logic, not its state
	if err != nil {
		return toolpolicy.Decision{}, fmt.Errorf("toolPolicy decision: %w", err)
	}
	return toolpolicy.Decision{Verdict: toolpolicy.Verdict(gd.Decision), Message: gd.Message, Prompt: gd.Prompt, Approvals: gd.Approvals}, nil
}
