package rules

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// naive is the definition of Refine written plainly, to check the fast one.
func naive(hint, content string) string {
	switch strings.ToLower(hint) {
	case "refine":
		return "inject"
	case "redirect":
		return "interrupt"
	}
	t := strings.TrimLeft(content, " \t\r\n")
	l := asciiLower(t)
	words := strings.FieldsFunc(l, func(r rune) bool { return r > 127 || !isLetter(byte(r)) })
	for _, w := range words {
		if w == "stop" || w == "cancel" {
			return "interrupt"
		}
	}
	for _, p := range []string{"bullet point", "shorter", "more concise", "more detail"} {
		if strings.Contains(l, p) {
			return "inject"
		}
	}
	for _, p := range []string{"actually", "also"} {
		if strings.HasPrefix(l, p) && (len(l) == len(p) || !isLetter(l[len(p)])) {
			return "inject"
		}
	}
	return "queue"
}

func asciiLower(s string) string {
	b := []byte(s)
	for i := range b {
		b[i] = lower(b[i])
	}
	return string(b)
}

func TestRefineMatchesDefinition(t *testing.T) {
	frags := []string{"stop", "Stop", "cancel", "actually", "also", "bullet point", "shorter", "more concise",
		"more detail", "x", " ", "ab", "s", "sto", "more", "bullet", ",", "\n", "é", "STOPPED", "m", "unstop", "CANCEL"}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		var b strings.Builder
		for range rng.IntN(12) {
			b.WriteString(frags[rng.IntN(len(frags))])
		}
		hint := []string{"", "refine", "REDIRECT", "other"}[rng.IntN(4)]
		if got, want := Refine(hint, b.String()), naive(hint, b.String()); got != want {
			t.Fatalf("Refine(%q, %q) = %s, want %s", hint, b.String(), got, want)
		}
	}
	long := strings.Repeat("word ", 100)
	for _, c := range []struct{ s, want string }{{long + "stop", "interrupt"}, {long + "shorter", "inject"}, {long, "queue"}} {
		if got := Refine("", c.s); got != c.want {
			t.Errorf("long text: %s, want %s", got, c.want)
		}
	}
}
