package guestabi

import (
	"strconv"
	"unicode"
	"unicode/utf8"
)

// SafeText returns text a guest provided (an error message, a log line, a
// manifest name) in a form fit for the host's logs, errors and events: at
// most max bytes of it, cut on a character boundary and followed by a note
// of the full length; invalid UTF-8 replaced by U+FFFD; control and
// format characters (newlines, escapes, bidirectional overrides) other than
// tab written as \x or \u escapes, so that a guest can neither forge log
// lines nor hide text.
func SafeText(b []byte, max int) string {
	out := make([]byte, 0, min(len(b), max)+16)
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		var enc []byte
		switch {
		case r == utf8.RuneError && n <= 1:
			enc = []byte("\uFFFD")
		case r != '\t' && (unicode.IsControl(r) || unicode.Is(unicode.Cf, r)):
			if r < 0x80 {
				enc = []byte(`\x` + hex2(byte(r)))
			} else {
				enc = strconv.AppendQuoteRuneToASCII(nil, r)
				enc = enc[1 : len(enc)-1]
			}
		default:
			enc = b[i : i+n]
		}
		if len(out)+len(enc) > max {
			return string(out) + "… (" + strconv.Itoa(len(b)) + " bytes)"
		}
		out = append(out, enc...)
		i += n
	}
	return string(out)
}

func hex2(c byte) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[c>>4], digits[c&15]})
}
