package guestabi

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestSafeText(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain text", "plain text"},
		{"tab\tkept", "tab\tkept"},
		{"line\nforged=1", `line\x0aforged=1`},
		{"\x1b[31mred", `\x1b[31mred`},
		{"bad \xff byte", "bad \uFFFD byte"},
		{"rtl \u202e override", `rtl \u202e override`},
		{"héllo", "héllo"},
	} {
		if got := SafeText([]byte(c.in), 100); got != c.want {
			t.Errorf("SafeText(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	big := strings.Repeat("é", 10<<20)
	got := SafeText([]byte(big), MaxErrorMessage)
	if !strings.HasSuffix(got, "… (20971520 bytes)") || len(got) > MaxErrorMessage+32 || !utf8.ValidString(got) {
		t.Errorf("10 MiB message: %d bytes, suffix %q", len(got), got[len(got)-30:])
	}
}

func TestGuestErrorIsCut(t *testing.T) {
	msg := append([]byte{StatusError}, strings.Repeat("x\n", 5<<20)...)
	_, err := DecodeResult(msg)
	ge, ok := err.(*GuestError)
	if !ok || len(ge.Message) > MaxErrorMessage+32 || strings.Contains(ge.Message, "\n") {
		t.Fatalf("error message not cut or not sanitised: %d bytes", len(err.Error()))
	}
}
