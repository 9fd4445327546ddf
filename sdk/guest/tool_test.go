package guest

import "testing"

func TestParseArguments(t *testing.T) {
	v, err := ParseArguments(`{"amount": 250, "to": "acct"}`)
	if m, ok := v.(map[string]any); err != nil || !ok || m["amount"] != 250.0 || m["to"] != "acct" {
		t.Errorf("%v %v", v, err)
	}
	if _, err := ParseArguments(`{"amount": `); err == nil || err.Error()[:10] != "arguments:" {
		t.Errorf("bad JSON: %v", err)
	}
}
