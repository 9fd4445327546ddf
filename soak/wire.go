package soak

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// wireConn is one closed-loop client's HTTP/1.1 connections, one kept
// alive per host, each request written and its answer read by the calling
// goroutine. net/http's Transport hands every request to a writer
// goroutine and every answer back from a reader goroutine: four hand-offs
// between goroutines per run, and their CPU, which on a shared machine is
// taken from the server being measured. Only plain http bases are spoken
// this way (see useWire); the answers are read as net/http would (status,
// Content-Length or chunked, Connection: close).
type wireConn struct {
	c      *Client
	hosts  []*wireHost
	buf    []byte // the request being written
	body   []byte // the answer's body
	status int    // the answer's status
	stop   func() bool
	mu     sync.Mutex // guards done and the hosts' conns against Close
	done   bool
}

type wireHost struct {
	addr   string // host:port
	prefix string // the base URL's path, without a trailing slash
	conn   net.Conn
	br     *bufio.Reader
	used   bool // the connection has carried an answer
}

// useWire reports whether the client's bases can all be spoken to by a
// wireConn: plain http, no client of the caller's own.
func useWire(c *Client) bool {
	if c.HTTP != nil {
		if tr, ok := c.HTTP.Transport.(*http.Transport); !ok || tr.Proxy != nil || tr.TLSClientConfig != nil || tr.DialContext != nil {
			return false
		}
	}
	for _, b := range append([]string{c.Base}, c.More...) {
		u, err := url.Parse(b)
		if err != nil || u.Scheme != "http" || u.Host == "" || u.User != nil || u.RawQuery != "" {
			return false
		}
	}
	return true
}

// newWireConn returns the connections of one client; ctx's end closes
// them, unblocking a request in flight.
func newWireConn(ctx context.Context, c *Client) *wireConn {
	w := &wireConn{c: c}
	for _, b := range append([]string{c.Base}, c.More...) {
		u, _ := url.Parse(b) // useWire checked it
		host := u.Host
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), "80")
		}
		w.hosts = append(w.hosts, &wireHost{addr: host, prefix: trimSlash(u.Path)})
	}
	w.stop = context.AfterFunc(ctx, w.Close)
	return w
}

func trimSlash(p string) string {
	for len(p) > 0 && p[len(p)-1] == '/' {
		p = p[:len(p)-1]
	}
	return p
}

// Close closes the connections.
func (w *wireConn) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
	for _, h := range w.hosts {
		if h.conn != nil {
			h.conn.Close()
			h.conn = nil
		}
	}
}

// release closes the connections and stops watching the context.
func (w *wireConn) release() {
	w.stop()
	w.Close()
}

// submit posts one input with an idempotency key.
func (w *wireConn) submit(ctx context.Context, thread, key, content string) (Admission, error) {
	var a Admission
	err := w.do(ctx, "POST", "/v1/threads/"+thread+"/inputs", key, content, &a)
	return a, err
}

// submitWait posts one input with an idempotency key and ?wait=: settled
// reports that the run settled within wait and res is its result (200);
// otherwise only the admission came back (202).
func (w *wireConn) submitWait(ctx context.Context, thread, key, content string, wait time.Duration) (adm Admission, res Result, settled bool, err error) {
	var a submitAnswer
	err = w.do(ctx, "POST", "/v1/threads/"+thread+"/inputs?wait="+wait.String(), key, content, &a)
	return a.Admission, a.result(), err == nil && w.status == http.StatusOK, err
}

// result waits up to wait for a run's result (settled false: 202).
func (w *wireConn) result(ctx context.Context, runID string, wait time.Duration) (Result, bool, error) {
	var res Result
	err := w.do(ctx, "GET", "/v1/runs/"+runID+"/result?wait="+wait.String(), "", "", &res)
	if errors.Is(err, errAccepted) {
		return Result{}, false, nil
	}
	return res, err == nil, err
}

// errAccepted: the answer was 202 (the run not settled yet).
var errAccepted = errors.New("202 accepted")

// do sends one request, a submission's body when content is set, and
// decodes a 200 or 201 answer into out (202 is errAccepted; others a
// *Problem). Hosts take turns as in Client.do, a host that cannot be
// dialed skipped; a request on a kept-alive connection the server closed
// before answering is sent again once on a new one (it carries an
// idempotency key, or reads).
func (w *wireConn) do(ctx context.Context, method, path, key, content string, out any) error {
	n := len(w.hosts)
	first := 0
	if n > 1 {
		first = int(w.c.turn.Add(1) % uint64(n))
	}
	for i := range n {
		h := w.hosts[(first+i)%n]
		status, err := w.roundTrip(h, method, path, key, content)
		if errors.Is(err, errStale) && h.used && ctx.Err() == nil {
			status, err = w.roundTrip(h, method, path, key, content) // a stale connection
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, errDial) && i < n-1 {
			continue
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
		w.status = status
		switch {
		case status == http.StatusAccepted && method == "GET":
			return errAccepted
		case status >= 300:
			p := &Problem{}
			if json.Unmarshal(w.body, p) != nil || p.Code == "" {
				p = &Problem{Code: "?", Detail: string(w.body)}
			}
			p.Status = status
			return p
		}
		if err := json.Unmarshal(w.body, out); err != nil {
			return fmt.Errorf("%s %s: decoding %q: %w", method, path, w.body, err)
		}
		return nil
	}
	return errors.New("no host") // n == 0 cannot happen: Base is one
}

var (
	errDial = errors.New("dial")
	// errStale: the connection was closed or reset before any of the
	// answer came (a kept-alive connection the server closed).
	errStale = errors.New("connection closed before the answer")
)

// stale marks the error of a connection closed before any answer.
func stale(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return fmt.Errorf("%w: %w", errStale, err)
	}
	return err
}

// roundTrip writes the request on h's connection (dialing one if needed)
// and reads the answer's status and body (into w.body). On any error the
// connection is closed.
func (w *wireConn) roundTrip(h *wireHost, method, path, key, content string) (status int, err error) {
	if !sendable(path) || !sendable(key) || !sendable(w.c.Token) {
		return 0, fmt.Errorf("a path, key or token with a space or control character cannot be sent: %q", path)
	}
	w.mu.Lock()
	if w.done {
		w.mu.Unlock()
		return 0, net.ErrClosed
	}
	if h.conn == nil {
		conn, err := net.DialTimeout("tcp", h.addr, 10*time.Second)
		if err != nil {
			w.mu.Unlock()
			return 0, fmt.Errorf("%w: %w", errDial, err)
		}
		if h.br == nil {
			h.br = bufio.NewReaderSize(conn, 4096)
		} else {
			h.br.Reset(conn)
		}
		h.conn, h.used = conn, false
	}
	conn := h.conn
	w.mu.Unlock()
	defer func() {
		if err != nil {
			w.mu.Lock()
			if h.conn == conn {
				h.conn = nil
			}
			w.mu.Unlock()
			conn.Close()
		}
	}()
	b := append(w.buf[:0], method...)
	b = append(b, ' ')
	b = append(b, h.prefix...)
	b = append(b, path...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, h.addr...)
	b = append(b, "\r\nUser-Agent: agenthost-loadgen\r\n"...)
	if w.c.Token != "" {
		b = append(b, "Authorization: Bearer "...)
		b = append(b, w.c.Token...)
		b = append(b, "\r\n"...)
	}
	if key != "" {
		b = append(b, "Idempotency-Key: "...)
		b = append(b, key...)
		b = append(b, "\r\n"...)
	}
	if method == "POST" {
		var body [256]byte
		js := append(body[:0], `{"content":`...)
		js = appendJSONString(js, content)
		js = append(js, '}')
		b = append(b, "Content-Type: application/json\r\nContent-Length: "...)
		b = strconv.AppendInt(b, int64(len(js)), 10)
		b = append(b, "\r\n\r\n"...)
		b = append(b, js...)
	} else {
		b = append(b, "\r\n"...)
	}
	w.buf = b
	if _, err := conn.Write(b); err != nil {
		return 0, stale(err)
	}
	status, closeAfter, err := w.readAnswer(h.br)
	if err != nil {
		return 0, err
	}
	h.used = true
	if closeAfter {
		w.mu.Lock()
		if h.conn == conn {
			h.conn = nil
		}
		w.mu.Unlock()
		conn.Close()
	}
	return status, nil
}

// readAnswer reads one HTTP/1.1 answer: its status, and its body into
// w.body; closeAfter when the server closes the connection after it.
func (w *wireConn) readAnswer(br *bufio.Reader) (status int, closeAfter bool, err error) {
	line, err := readLine(br)
	if err != nil {
		return 0, false, stale(err)
	}
	// "HTTP/1.1 200 OK"
	proto, rest, ok := bytes.Cut(line, []byte(" "))
	if !ok || !bytes.HasPrefix(proto, []byte("HTTP/1.")) || len(rest) < 3 {
		return 0, false, fmt.Errorf("malformed status line %q", line)
	}
	status, err = strconv.Atoi(string(rest[:3]))
	if err != nil || status < 100 || status > 999 {
		return 0, false, fmt.Errorf("malformed status line %q", line)
	}
	length, chunked := int64(-1), false
	for {
		line, err := readLine(br)
		if err != nil {
			return 0, false, err
		}
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return 0, false, fmt.Errorf("malformed header line %q", line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case asciiEqualFold(name, "Content-Length"):
			if length, err = strconv.ParseInt(string(value), 10, 64); err != nil || length < 0 {
				return 0, false, fmt.Errorf("bad Content-Length %q", value)
			}
		case asciiEqualFold(name, "Transfer-Encoding"):
			chunked = asciiEqualFold(value, "chunked")
		case asciiEqualFold(name, "Connection"):
			closeAfter = closeAfter || asciiEqualFold(value, "close")
		}
	}
	switch {
	case status < 200 || status == http.StatusNoContent || status == http.StatusNotModified:
		if status < 200 {
			return 0, false, fmt.Errorf("unexpected interim answer %d", status)
		}
		w.body = w.body[:0]
	case chunked:
		if w.body, err = readAll(httputil.NewChunkedReader(br), w.body[:0]); err == nil {
			// The chunked reader stops after the last chunk: the trailer
			// (usually none) and its closing empty line are still to read.
			for {
				line, err := readLine(br)
				if err != nil {
					return 0, false, err
				}
				if len(line) == 0 {
					break
				}
			}
		}
	case length > maxAnswer:
		return 0, false, fmt.Errorf("answer of %d bytes, over %d", length, maxAnswer)
	case length >= 0:
		if int64(cap(w.body)) < length {
			w.body = make([]byte, length)
		}
		w.body = w.body[:length]
		_, err = io.ReadFull(br, w.body)
	default: // the body ends with the connection
		closeAfter = true
		w.body, err = readAll(br, w.body[:0])
	}
	return status, closeAfter, err
}

// An answer longer than maxAnswer is an error, never cut short.
func readAll(r io.Reader, b []byte) ([]byte, error) {
	var buf bytes.Buffer
	buf.Write(b)
	n, err := buf.ReadFrom(io.LimitReader(r, maxAnswer+1))
	if err == nil && n > maxAnswer {
		return nil, fmt.Errorf("answer over %d bytes", maxAnswer)
	}
	return buf.Bytes(), err
}

// readLine reads one line, without its CRLF; the slice is valid until the
// next read.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, errors.New("header line too long")
		}
		return nil, err
	}
	return bytes.TrimRight(line, "\r\n"), nil
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// sendable reports whether s can go in a request line or header as is.
func sendable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] == 0x7f {
			return false
		}
	}
	return true
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
