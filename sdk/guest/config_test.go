package guest

import "testing"

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`{"on": true, "n": 3, "s": "x", "l": ["a","b"]}`), "on", "n", "s", "l", "absent")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := c.Bool("on"); !v || err != nil {
		t.Errorf("Bool(on) = %v, %v", v, err)
	}
	if v, err := c.Int("n", 7); v != 3 || err != nil {
		t.Errorf("Int(n) = %v, %v", v, err)
	}
	if v, err := c.Int("absent", 7); v != 7 || err != nil {
		t.Errorf("Int(absent) = %v, %v", v, err)
	}
	if v, err := c.String("s"); v != "x" || err != nil {
		t.Errorf("String(s) = %v, %v", v, err)
	}
	if v, err := c.Strings("l"); len(v) != 2 || v[1] != "b" || err != nil {
		t.Errorf("Strings(l) = %v, %v", v, err)
	}
	if _, err := c.Bool("n"); err == nil || err.Error() != "config: json: n must be true or false" {
		t.Errorf("Bool(n) error = %v", err)
	}
	if !c.Has("on") || c.Has("absent") {
		t.Error("Has is wrong")
	}
	if _, err := ParseConfig([]byte(`{"typo": 1}`), "on"); err == nil {
		t.Error("an unknown member was accepted")
	}
	if _, err := ParseConfig([]byte(`[1]`)); err == nil {
		t.Error("an array was accepted")
	}
	if c, err := ParseConfig(nil, "on"); err != nil || c.Has("on") {
		t.Errorf("empty blob: %v", err)
	}
}
