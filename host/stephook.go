package host

import (
	"context"
	"fmt"

	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/host/step"
)

// StepHook adapts a prepareStep hook of the guest ABI (a wasm guest, or a
// native step.Hook) to the executor's hook chain. The hook sees the step's
// messages as role and content, its settings and model parameters; what it
// returns replaces the settings, and its messages are added for this step
// only.
func StepHook(h step.Hook) model.PrepareStep {
	return model.PrepareStepFunc(func(ctx context.Context, s model.StepSettings) (model.StepSettings, error) {
		req := step.Request{Step: s.Step + 1, StepSettings: step.Settings{
			System: s.System, ActiveTools: s.ActiveTools, ToolChoice: s.ToolChoice, Model: s.Params,
		}}
		for _, m := range s.Messages {
			req.Messages = append(req.Messages, step.Message{Role: string(m.Role), Content: m.Content})
		}
		res, err := h.PrepareStep(ctx, req)
		if err != nil {
			return s, err
		}
		s.System, s.ActiveTools, s.ToolChoice = res.System, res.ActiveTools, res.ToolChoice
		s.Params = res.Model
		for i, m := range res.AppendMessages {
			s.Messages = append(s.Messages, record.Message{ID: fmt.Sprintf("step%d-ctx%d", s.Step, i), Role: record.Role(m.Role), Content: m.Content})
		}
		return s, nil
	})
}
