package guest

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/agenthost/agenthost/abi/guestabi"
)

func TestStepJSONAgreesWithEncodingJSON(t *testing.T) {
	temp, topP := 0.25, 1.0
	for _, r := range []guestabi.StepRequest{
		{},
		{Step: 3, Messages: []guestabi.Message{{Role: "user", Content: "héllo \"x\"\n"}, {Role: "tool", Content: "<&>"}},
			StepSettings: guestabi.StepSettings{System: "s", ActiveTools: []string{"a", "b"}, ToolChoice: "auto",
				Model: guestabi.ModelParams{Model: "m", Temperature: &temp, TopP: &topP, MaxTokens: 100, Stop: []string{"END"}}}},
	} {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var got guestabi.StepRequest
		if err := decodeStepRequest(b, &got); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		var want guestabi.StepRequest
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("decode %s:\n got %+v\nwant %+v", b, got, want)
		}
		res := guestabi.StepResult{StepSettings: r.StepSettings, AppendMessages: r.Messages}
		enc := appendStepResult(nil, &res)
		var back guestabi.StepResult
		if err := json.Unmarshal(enc, &back); err != nil {
			t.Fatalf("%s: %v", enc, err)
		}
		if back.ActiveTools == nil {
			back.ActiveTools = res.ActiveTools
		}
		if len(back.ActiveTools) == 0 && len(res.ActiveTools) == 0 {
			back.ActiveTools = res.ActiveTools
		}
		if !reflect.DeepEqual(back, res) {
			t.Errorf("encode %s:\n got %+v\nwant %+v", enc, back, res)
		}
	}
	for _, bad := range []string{`[]`, `{"step": "x"}`, `{"messages": [1]}`, `{"model": {"temperature": "hot"}}`, `{"activeTools": [1]}`} {
		var r guestabi.StepRequest
		if decodeStepRequest([]byte(bad), &r) == nil {
			t.Errorf("%s decoded", bad)
		}
	}
}

func TestManifestJSON(t *testing.T) {
	m := guestabi.Manifest{ABI: 1, Name: "n\"", Version: "1", Hooks: []string{"inputPolicy"}, Actions: []string{"queue"}}
	var got guestabi.Manifest
	if err := json.Unmarshal(appendManifest(nil, &m), &got); err != nil || !reflect.DeepEqual(got, m) {
		t.Errorf("got %+v, %v", got, err)
	}
}

func TestNewRequest(t *testing.T) {
	r := NewRequest(&FullRequest{ThreadID: "t", Content: "c", Hint: "h", Active: &Run{Steps: 2}, Queued: []Run{{RunID: "q"}},
		Metadata: map[string]string{"k": "v"}})
	if r.ThreadID != "t" || r.Content != "c" || r.Hint != "h" || !r.Active || r.ActiveSteps != 2 || r.Queued != 1 {
		t.Errorf("%+v", r)
	}
	f, err := r.Full()
	if err != nil || f.Queued[0].RunID != "q" || f.Metadata["k"] != "v" {
		t.Errorf("%+v %v", f, err)
	}
}
