package runstate

import (
	"testing"

	"github.com/agenthost/agenthost/abi/record"
)

// An edit retried in another form than the one recorded (key order,
// spacing: edits recorded before arguments were made canonical) is the
// same answer; other values, or numbers written otherwise, are not.
func TestSameAnswerEditByJSONValue(t *testing.T) {
	edit := func(args string) record.Answer {
		return record.Answer{CallID: "c1", Action: record.AnswerEdit, Arguments: args}
	}
	recorded := edit(`{"path": "/tmp/x", "mode": {"a": [1, 2]}}`)
	for _, c := range []struct {
		args string
		same bool
	}{
		{`{"mode":{"a":[1,2]},"path":"/tmp/x"}`, true},
		{`{"path":"/tmp/x","mode":{"a":[1,2]}}`, true},
		{`{"path":"/tmp/y","mode":{"a":[1,2]}}`, false},
		{`{"path":"/tmp/x","mode":{"a":[2,1]}}`, false},
		{`{"path":"/tmp/x","mode":{"a":[1.0,2]}}`, false},
		{`{"path":"/tmp/x"}`, false},
		{`{"path":"/tmp/x","mode":{"a":[1,2]}} {}`, false},
		{`not json`, false},
	} {
		if got := sameAnswer(recorded, edit(c.args)); got != c.same {
			t.Errorf("sameAnswer(%s, %s) = %v, want %v", recorded.Arguments, c.args, got, c.same)
		}
	}
	if sameAnswer(record.Answer{CallID: "c1", Action: record.AnswerEdit, Arguments: "not json"}, edit("not json")) != true {
		t.Error("the same text is not the same answer")
	}
}
