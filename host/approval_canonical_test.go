package host

import (
	"errors"
	"testing"
)

// TestCanonicalObjectSurrogates: an escaped UTF-16 surrogate with no
// partner is what a decoder replaces with U+FFFD, so an edit holding one
// would run the tool with other text than sent; it is refused, and a
// proper pair, or an escaped backslash before a "u", is not.
func TestCanonicalObjectSurrogates(t *testing.T) {
	for _, bad := range []string{
		`{"n": "\ud800"}`,
		`{"n": "x\udc00y"}`,
		`{"n": "\ud83d\u0041"}`,
		`{"n": "\ud83d\ud83d"}`,
		`{"\udfff": 1}`,
		`{"l": ["ok", "\\\ud800"]}`,
		`{"n": "\ud800\`,
		`{"n": "\`,
		`{"n": "\u00`,
	} {
		if got, err := canonicalObject(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("canonicalObject(%s) = %q, %v; want ErrInvalid", bad, got, err)
		}
	}
	for in, want := range map[string]string{
		`{"n": "\ud83d\ude00"}`: `{"n":"😀"}`,
		`{"n": "\\ud800"}`:      `{"n":"\\ud800"}`,
		`{"n": "\u00e9\"\\"}`:   `{"n":"é\"\\"}`,
	} {
		if got, err := canonicalObject(in); err != nil || got != want {
			t.Errorf("canonicalObject(%s) = %q, %v; want %q", in, got, err, want)
		}
	}
}
