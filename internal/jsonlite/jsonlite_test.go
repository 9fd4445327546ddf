package jsonlite

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestParseAgreesWithEncodingJSON(t *testing.T) {
	for _, s := range []string{
		`{}`, `[]`, `null`, `true`, `false`, `0`, `-0.5e+3`, `12.25`, `"a\"b\\c\/\n\t\u00e9\ud83d\ude00"`,
		` {"a": [1, "x", {"b": null}], "c": true} `, `[[[]]]`, `"é"`, `1E2`,
	} {
		got, err := Parse([]byte(s))
		if err != nil {
			t.Errorf("%s: %v", s, err)
			continue
		}
		var want any
		if err := json.Unmarshal([]byte(s), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %#v, want %#v", s, got, want)
		}
	}
	for _, s := range []string{``, `{`, `[1,]`, `{"a" 1}`, `01`, `1.`, `-`, `"abc`, "\"a\x01\"", `tru`, `{} x`, `"\x"`, `{1:2}`, `1e`} {
		if _, err := Parse([]byte(s)); err == nil {
			t.Errorf("%q parsed", s)
		}
		var v any
		if json.Unmarshal([]byte(s), &v) == nil {
			t.Errorf("%q: encoding/json accepts it", s)
		}
	}
}

func TestAppendString(t *testing.T) {
	for _, s := range []string{"", "plain", "q\"b\\s", "\n\r\t\x01", "é😀", "<&>", "bad\xffutf8"} {
		var got string
		if err := json.Unmarshal(AppendString(nil, s), &got); err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		want := s
		if s == "bad\xffutf8" {
			want = "bad\ufffdutf8"
		}
		if got != want {
			t.Errorf("%q: round trip %q", s, got)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"a":[1,"x",null,true]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := Parse(b)
		var want any
		werr := json.Unmarshal(b, &want)
		if (err == nil) != (werr == nil) {
			t.Fatalf("%q: jsonlite err %v, encoding/json err %v", b, err, werr)
		}
		if err == nil && !reflect.DeepEqual(v, want) {
			t.Fatalf("%q: %#v vs %#v", b, v, want)
		}
	})
}
