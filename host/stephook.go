package host

import (
	"context"
	"fmt"
	"strconv"

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
			System: s.System, ActiveTools: s.ActiveTools, ToolChoice: s.ToolChoice, Model: toParams(s.Params),
		}}
		for _, m := range s.Messages {
			req.Messages = append(req.Messages, step.Message{Role: string(m.Role), Content: m.Content})
		}
		res, err := h.PrepareStep(ctx, req)
		if err != nil {
			return s, err
		}
		s.System, s.ActiveTools, s.ToolChoice = res.System, res.ActiveTools, res.ToolChoice
		s.Params = fromParams(s.Params, res.Model)
		for i, m := range res.AppendMessages {
			s.Messages = append(s.Messages, record.Message{ID: fmt.Sprintf("step%d-ctx%d", s.Step, i), Role: record.Role(m.Role), Content: m.Content})
		}
		return s, nil
	})
}

func toParams(p map[string]string) step.ModelParams {
	var out step.ModelParams
	out.Model = p["model"]
	if v, err := strconv.ParseFloat(p["temperature"], 64); err == nil {
		out.Temperature = &v
	}
	if v, err := strconv.ParseFloat(p["top_p"], 64); err == nil {
		out.TopP = &v
	}
	if v, err := strconv.Atoi(p["max_tokens"]); err == nil {
		out.MaxTokens = v
	}
	return out
}

func fromParams(old map[string]string, p step.ModelParams) map[string]string {
	out := make(map[string]string, len(old)+4)
	for k, v := range old {
		out[k] = v
	}
	set := func(k, v string, ok bool) {
		if ok {
			out[k] = v
		} else {
			delete(out, k)
		}
	}
	set("model", p.Model, p.Model != "")
	set("temperature", fmtFloat(p.Temperature), p.Temperature != nil)
	set("top_p", fmtFloat(p.TopP), p.TopP != nil)
	set("max_tokens", strconv.Itoa(p.MaxTokens), p.MaxTokens > 0)
	return out
}

func fmtFloat(f *float64) string {
	if f == nil {
		return ""
	}
	return strconv.FormatFloat(*f, 'g', -1, 64)
}
