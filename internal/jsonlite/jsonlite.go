package jsonlite

import (
	"errors"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth bounds the nesting of arrays and objects Parse accepts.
const MaxDepth = 256

// SyntaxError reports malformed JSON.
type SyntaxError struct {
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string {
	return "json: " + e.Msg + " at offset " + strconv.Itoa(e.Offset)
}

// Parse parses one JSON value, which must be the whole of b (surrounding white
// space aside).
func Parse(b []byte) (any, error) {
	p := parser{b: b}
	p.space()
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.space()
	if p.i != len(b) {
		return nil, p.err("trailing data")
	}
	return v, nil
}

type parser struct {
	b []byte
	i int
}

func (p *parser) err(msg string) error { return &SyntaxError{Offset: p.i, Msg: msg} }

func (p *parser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) lit(s string, v any) (any, error) {
	if len(p.b)-p.i < len(s) || string(p.b[p.i:p.i+len(s)]) != s {
		return nil, p.err("invalid literal")
	}
	p.i += len(s)
	return v, nil
}

func (p *parser) value(depth int) (any, error) {
	if p.i >= len(p.b) {
		return nil, p.err("unexpected end of input")
	}
	switch c := p.b[p.i]; {
	case c == '{':
		return p.object(depth + 1)
	case c == '[':
		return p.array(depth + 1)
	case c == '"':
		return p.str()
	case c == 't':
		return p.lit("true", true)
	case c == 'f':
		return p.lit("false", false)
	case c == 'n':
		return p.lit("null", nil)
	case c == '-' || '0' <= c && c <= '9':
		return p.number()
	}
	return nil, p.err("unexpected character")
}

func (p *parser) object(depth int) (any, error) {
	if depth > MaxDepth {
		return nil, p.err("nested too deeply")
	}
	p.i++ // {
	m := map[string]any{}
	p.space()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return m, nil
	}
	for {
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return nil, p.err("expected a member name")
		}
		k, err := p.str()
		if err != nil {
			return nil, err
		}
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return nil, p.err("expected ':'")
		}
		p.i++
		p.space()
		v, err := p.value(depth)
		if err != nil {
			return nil, err
		}
		m[k] = v
		p.space()
		if p.i >= len(p.b) {
			return nil, p.err("unexpected end of input")
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case '}':
			p.i++
			return m, nil
		default:
			return nil, p.err("expected ',' or '}'")
		}
	}
}

func (p *parser) array(depth int) (any, error) {
	if depth > MaxDepth {
		return nil, p.err("nested too deeply")
	}
	p.i++ // [
	a := []any{}
	p.space()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return a, nil
	}
	for {
		p.space()
		v, err := p.value(depth)
		if err != nil {
			return nil, err
		}
		a = append(a, v)
		p.space()
		if p.i >= len(p.b) {
			return nil, p.err("unexpected end of input")
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case ']':
			p.i++
			return a, nil
		default:
			return nil, p.err("expected ',' or ']'")
		}
	}
}

func (p *parser) number() (any, error) {
	start := p.i
	if p.b[p.i] == '-' {
		p.i++
	}
	digits := func() int {
		n := 0
		for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	intStart := p.i
	if n := digits(); n == 0 || n > 1 && p.b[intStart] == '0' {
		return nil, p.err("invalid number")
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if digits() == 0 {
			return nil, p.err("invalid number")
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return nil, p.err("invalid number")
		}
	}
	f, err := strconv.ParseFloat(string(p.b[start:p.i]), 64)
	if err != nil {
		return nil, &SyntaxError{Offset: start, Msg: "number out of range"}
	}
	return f, nil
}

func (p *parser) str() (string, error) {
	p.i++ // "
	start := p.i
	// Fast path: no escapes.
	for p.i < len(p.b) {
		c := p.b[p.i]
		if c == '"' {
			s := string(p.b[start:p.i])
			p.i++
			return validUTF8(s), nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", p.err("control character in string")
		}
		p.i++
	}
	buf := append([]byte(nil), p.b[start:p.i]...)
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return validUTF8(string(buf)), nil
		case c < 0x20:
			return "", p.err("control character in string")
		case c != '\\':
			buf = append(buf, c)
			p.i++
			continue
		}
		p.i++
		if p.i >= len(p.b) {
			break
		}
		e := p.b[p.i]
		p.i++
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return "", p.err("invalid \\u escape")
			}
			if utf16.IsSurrogate(r) {
				// A pair makes one rune; anything else makes U+FFFD and
				// leaves what follows to be read on its own.
				back := p.i
				r2 := rune(-1)
				if len(p.b)-p.i >= 2 && p.b[p.i] == '\\' && p.b[p.i+1] == 'u' {
					p.i += 2
					if r2, ok = p.hex4(); !ok {
						return "", p.err("invalid \\u escape")
					}
				}
				if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
					p.i = back
				}
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return "", p.err("invalid escape")
		}
	}
	return "", p.err("unterminated string")
}

// validUTF8 replaces every byte of s that is not part of valid UTF-8 with
// U+FFFD, as encoding/json does.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	b := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = utf8.AppendRune(b, utf8.RuneError)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return string(b)
}

func (p *parser) hex4() (rune, bool) {
	if len(p.b)-p.i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range p.b[p.i : p.i+4] {
		r <<= 4
		switch {
		case '0' <= c && c <= '9':
			r |= rune(c - '0')
		case 'a' <= c && c <= 'f':
			r |= rune(c - 'a' + 10)
		case 'A' <= c && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	p.i += 4
	return r, true
}

// AppendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD.
func AppendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c == '\n':
				dst = append(dst, '\\', 'n')
			case c == '\r':
				dst = append(dst, '\\', 'r')
			case c == '\t':
				dst = append(dst, '\\', 't')
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, `\ufffd`...)
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}

// AppendStrings appends a JSON array of strings.
func AppendStrings(dst []byte, ss []string) []byte {
	dst = append(dst, '[')
	for i, s := range ss {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendString(dst, s)
	}
	return append(dst, ']')
}

// AppendFloat appends f as a JSON number; NaN and infinities, which JSON
// cannot hold, become null.
func AppendFloat(dst []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(dst, "null"...)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, 64)
}

// Object parses b as a JSON object whose members are all among allowed. An
// empty (or white space only) b is an empty object.
func Object(b []byte, allowed ...string) (map[string]any, error) {
	empty := true
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			empty = false
			break
		}
	}
	if empty {
		return map[string]any{}, nil
	}
	v, err := Parse(b)
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("json: want an object")
	}
	for k := range m {
		known := false
		for _, a := range allowed {
			if k == a {
				known = true
				break
			}
		}
		if !known {
			return nil, errors.New("json: unknown member " + strconv.Quote(k))
		}
	}
	return m, nil
}

// String returns m[key] as a string: "" if absent, an error if another type.
func String(m map[string]any, key string) (string, error) {
	switch v := m[key].(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	}
	return "", errors.New("json: " + key + " must be a string")
}

// Bool returns m[key] as a bool: false if absent, an error if another type.
func Bool(m map[string]any, key string) (bool, error) {
	switch v := m[key].(type) {
	case nil:
		return false, nil
	case bool:
		return v, nil
	}
	return false, errors.New("json: " + key + " must be true or false")
}

// Int returns m[key] as an int: def if absent, an error if not an integer.
func Int(m map[string]any, key string, def int) (int, error) {
	switch v := m[key].(type) {
	case nil:
		return def, nil
	case float64:
		if v == math.Trunc(v) && math.Abs(v) <= 1<<53 {
			return int(v), nil
		}
	}
	return 0, errors.New("json: " + key + " must be an integer")
}

// Strings returns m[key] as a []string: nil if absent, an error if not an
// array of strings.
func Strings(m map[string]any, key string) ([]string, error) {
	switch v := m[key].(type) {
	case nil:
		return nil, nil
	case []any:
		ss := make([]string, len(v))
		for i, e := range v {
			s, ok := e.(string)
			if !ok {
				return nil, errors.New("json: " + key + " must be an array of strings")
			}
			ss[i] = s
		}
		return ss, nil
	}
	return nil, errors.New("json: " + key + " must be an array of strings")
}
