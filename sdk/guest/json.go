package guest

import (
	"errors"

	"github.com/agenthost/agenthost/abi/guestabi"
	"github.com/agenthost/agenthost/internal/jsonlite"
)

// The SDK writes and reads the ABI's JSON with jsonlite rather than
// encoding/json, which would add about 1.2 MB (reflect, fmt) to every guest.

func appendManifest(dst []byte, m *guestabi.Manifest) []byte {
	dst = append(dst, `{"abi":`...)
	dst = jsonlite.AppendFloat(dst, float64(m.ABI))
	dst = append(dst, `,"name":`...)
	dst = jsonlite.AppendString(dst, m.Name)
	dst = append(dst, `,"version":`...)
	dst = jsonlite.AppendString(dst, m.Version)
	dst = append(dst, `,"hooks":`...)
	dst = jsonlite.AppendStrings(dst, m.Hooks)
	if len(m.Actions) > 0 {
		dst = append(dst, `,"actions":`...)
		dst = jsonlite.AppendStrings(dst, m.Actions)
	}
	return append(dst, '}')
}

func appendMessages(dst []byte, ms []guestabi.Message) []byte {
	dst = append(dst, '[')
	for i, m := range ms {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"role":`...)
		dst = jsonlite.AppendString(dst, m.Role)
		dst = append(dst, `,"content":`...)
		dst = jsonlite.AppendString(dst, m.Content)
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

func appendStepResult(dst []byte, r *guestabi.StepResult) []byte {
	dst = append(dst, `{"system":`...)
	dst = jsonlite.AppendString(dst, r.System)
	dst = append(dst, `,"activeTools":`...)
	dst = jsonlite.AppendStrings(dst, r.ActiveTools)
	dst = append(dst, `,"toolChoice":`...)
	dst = jsonlite.AppendString(dst, r.ToolChoice)
	dst = append(dst, `,"model":{`...)
	sep := ""
	member := func(name string) {
		dst = append(dst, sep...)
		dst = append(dst, '"')
		dst = append(dst, name...)
		dst = append(dst, `":`...)
		sep = ","
	}
	if p := r.Model; p.Model != "" {
		member("model")
		dst = jsonlite.AppendString(dst, p.Model)
	}
	if p := r.Model; p.Temperature != nil {
		member("temperature")
		dst = jsonlite.AppendFloat(dst, *p.Temperature)
	}
	if p := r.Model; p.TopP != nil {
		member("topP")
		dst = jsonlite.AppendFloat(dst, *p.TopP)
	}
	if p := r.Model; p.MaxTokens != 0 {
		member("maxTokens")
		dst = jsonlite.AppendFloat(dst, float64(p.MaxTokens))
	}
	if p := r.Model; len(p.Stop) > 0 {
		member("stop")
		dst = jsonlite.AppendStrings(dst, p.Stop)
	}
	dst = append(dst, '}')
	if len(r.AppendMessages) > 0 {
		dst = append(dst, `,"appendMessages":`...)
		dst = appendMessages(dst, r.AppendMessages)
	}
	return append(dst, '}')
}

var errStepRequest = errors.New("prepareStep request: malformed")

func decodeStepRequest(b []byte, r *guestabi.StepRequest) error {
	v, err := jsonlite.Parse(b)
	if err != nil {
		return err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return errStepRequest
	}
	var errs [8]error
	r.Step, errs[0] = jsonlite.Int(m, "step", 0)
	r.System, errs[1] = jsonlite.String(m, "system")
	r.ActiveTools, errs[2] = jsonlite.Strings(m, "activeTools")
	r.ToolChoice, errs[3] = jsonlite.String(m, "toolChoice")
	if ms, ok := m["messages"].([]any); ok {
		r.Messages = make([]guestabi.Message, len(ms))
		for i, e := range ms {
			em, ok := e.(map[string]any)
			if !ok {
				return errStepRequest
			}
			r.Messages[i].Role, errs[4] = jsonlite.String(em, "role")
			r.Messages[i].Content, errs[5] = jsonlite.String(em, "content")
			if err := errors.Join(errs[4], errs[5]); err != nil {
				return err
			}
		}
	} else if m["messages"] != nil {
		return errStepRequest
	}
	r.Model = guestabi.ModelParams{}
	if mp, ok := m["model"].(map[string]any); ok {
		r.Model.Model, errs[6] = jsonlite.String(mp, "model")
		r.Model.MaxTokens, errs[7] = jsonlite.Int(mp, "maxTokens", 0)
		for _, f := range []struct {
			name string
			dst  **float64
		}{{"temperature", &r.Model.Temperature}, {"topP", &r.Model.TopP}} {
			switch x := mp[f.name].(type) {
			case nil:
			case float64:
				*f.dst = &x
			default:
				return errStepRequest
			}
		}
		stop, err := jsonlite.Strings(mp, "stop")
		if err != nil {
			return err
		}
		r.Model.Stop = stop
	} else if m["model"] != nil {
		return errStepRequest
	}
	return errors.Join(errs[:]...)
}
