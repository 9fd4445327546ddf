package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/agenthost/agenthost/host/httpapi"
)

// clientFlags are the flags every client command shares.
type clientFlags struct {
	server    string
	token     string
	tokenFile string
	caFile    string
	jsonOut   bool

	once   sync.Once
	client *http.Client
	err    error
}

func (c *clientFlags) register(fs *flag.FlagSet) {
	c.server = envOr("AGENTHOST_SERVER", "http://127.0.0.1:7070")
	fs.StringVar(&c.server, "server", c.server, "server URL, http:// or https:// (env AGENTHOST_SERVER)")
	fs.StringVar(&c.token, "token", os.Getenv("AGENTHOST_TOKEN"), "bearer token (env AGENTHOST_TOKEN; visible in ps: prefer --token-file)")
	fs.StringVar(&c.tokenFile, "token-file", os.Getenv("AGENTHOST_TOKEN_FILE"), "file holding the bearer token (env AGENTHOST_TOKEN_FILE)")
	fs.StringVar(&c.caFile, "ca-file", os.Getenv("AGENTHOST_CA_FILE"), "PEM file of the certificate authorities to trust for an https server, besides the system's (env AGENTHOST_CA_FILE)")
	fs.BoolVar(&c.jsonOut, "json", false, "print JSON instead of text")
}

// prepare reads the token file and the CA file, once.
func (c *clientFlags) prepare() (*http.Client, error) {
	c.once.Do(func() {
		c.client = http.DefaultClient
		if c.token == "" && c.tokenFile != "" {
			if c.token, c.err = readTokenFile(c.tokenFile); c.err != nil {
				return
			}
		}
		if c.caFile != "" {
			pem, err := os.ReadFile(c.caFile)
			if err != nil {
				c.err = fmt.Errorf("ca-file: %w", err)
				return
			}
			pool, err := x509.SystemCertPool()
			if err != nil {
				pool = x509.NewCertPool()
			}
			if !pool.AppendCertsFromPEM(pem) {
				c.err = fmt.Errorf("ca-file %s: no PEM certificate in it", c.caFile)
				return
			}
			tr := http.DefaultTransport.(*http.Transport).Clone()
			tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
			c.client = &http.Client{Transport: tr}
		}
	})
	return c.client, c.err
}

// deprecated notes on stderr that an old form of a command was used.
func deprecated(stderr io.Writer, old, replacement string) {
	fmt.Fprintf(stderr, "agenthost: note: %q is deprecated; use %q\n", "agenthost "+old, "agenthost "+replacement)
}

// pages GETs every page of a list route, following next_cursor; each page
// is given to add, which returns the page's next_cursor.
func (c *clientFlags) pages(ctx context.Context, path string, add func([]byte) (string, error)) error {
	after := ""
	for {
		q := url.Values{"limit": {"1000"}}
		if after != "" {
			q.Set("after", after)
		}
		var raw json.RawMessage
		if _, err := c.do(ctx, "GET", path+"?"+q.Encode(), nil, nil, &raw); err != nil {
			return err
		}
		next, err := add(raw)
		if err != nil {
			return err
		}
		if next == "" || next == after {
			return nil
		}
		after = next
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// apiError is a problem detail returned by the server.
type apiError struct {
	status int
	p      httpapi.Problem
}

func (e *apiError) Error() string {
	if e.p.Detail != "" {
		return fmt.Sprintf("%s (%d): %s", e.p.Code, e.status, e.p.Detail)
	}
	return fmt.Sprintf("HTTP %d", e.status)
}

func (c *clientFlags) do(ctx context.Context, method, path string, body any, hdr map[string]string, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = strings.NewReader(string(b))
	}
	hc, err := c.prepare()
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.server, "/")+path, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("cannot reach the server at %s: %w", c.server, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode >= 400 {
		e := &apiError{status: resp.StatusCode}
		json.Unmarshal(b, &e.p)
		return resp.StatusCode, e
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("decoding the server's answer: %w", err)
		}
	}
	return resp.StatusCode, nil
}

func printJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// clientErr prints err and returns the exit status for it.
func clientErr(stderr io.Writer, err error) int {
	fmt.Fprintln(stderr, "agenthost:", err)
	var ae *apiError
	if errors.As(err, &ae) && ae.status < 500 && ae.status != 401 {
		return exitFail
	}
	return exitUsage
}

func init() {
	register("submit", "submit an input to a thread (--wait streams its events and prints the answer)", runSubmit)
	register("runs list", "list a thread's runs", runRunsList)
	register("runs show", "show a run and its result", runRunsShow)
	register("thread show", "show a thread's conversation", runThreadShow)
	register("threads list", "list the store's threads", runThreadsList)
}

func newFlagSet(name, usageLine, example string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: agenthost %s\n\nFlags:\n", usageLine)
		fs.PrintDefaults()
		fmt.Fprintf(stderr, "\nExample:\n  %s\n", example)
	}
	return fs
}

// parse parses flags, allowing them after positional arguments too.
func parse(fs *flag.FlagSet, args []string) ([]string, int, bool) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, exitOK, false
			}
			return nil, exitUsage, false
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, 0, true
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// parseN is parse for a command that takes exactly n arguments: any other
// count prints the usage and fails.
func parseN(fs *flag.FlagSet, args []string, n int) ([]string, int, bool) {
	pos, code, ok := parse(fs, args)
	if ok && len(pos) != n {
		fs.Usage()
		return nil, exitUsage, false
	}
	return pos, code, ok
}

func runSubmit(args []string, stdout, stderr io.Writer) int {
	var c clientFlags
	fs := newFlagSet("submit", "submit THREAD [--key K] [--hint H] [--wait] TEXT",
		`agenthost submit demo --key q1 --wait "summarise this thread"`, stderr)
	c.register(fs)
	thread := fs.String("thread", "", "deprecated: give the thread as the first argument")
	key := fs.String("key", "", "idempotency key: retrying with it is safe")
	hint := fs.String("hint", "", "hint for the input policy, e.g. refine or redirect")
	wait := fs.Bool("wait", false, "stream the run's events and print the answer")
	timeout := fs.Duration("timeout", 10*time.Minute, "how long --wait waits")
	pos, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	if *thread != "" {
		deprecated(stderr, "submit --thread T TEXT", "submit T TEXT")
	} else if len(pos) > 0 {
		*thread, pos = pos[0], pos[1:]
	}
	if *thread == "" || len(pos) == 0 {
		fs.Usage()
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var adm httpapi.Admission
	hdr := map[string]string{}
	if *key != "" {
		hdr["Idempotency-Key"] = *key
	}
	if _, err := c.do(ctx, "POST", "/v1/threads/"+url.PathEscape(*thread)+"/inputs", httpapi.SubmitRequest{Content: strings.Join(pos, " "), Hint: *hint}, hdr, &adm); err != nil {
		return clientErr(stderr, err)
	}
	if !*wait {
		if c.jsonOut {
			printJSON(stdout, adm)
		} else {
			fmt.Fprintf(stdout, "accepted: run %s, input %s, thread %s\n", adm.RunID, adm.InputMessageID, adm.ThreadID)
		}
		return exitOK
	}
	if !c.jsonOut {
		fmt.Fprintf(stdout, "accepted: run %s\n", adm.RunID)
		if err := c.streamEvents(ctx, adm.RunID, stdout); err != nil {
			fmt.Fprintln(stderr, "agenthost: events:", err) // the result below still settles it
		}
	}
	res, err := c.waitResult(ctx, adm.RunID)
	if err != nil {
		return clientErr(stderr, err)
	}
	return printResult(stdout, res, c.jsonOut)
}

// streamEvents prints a run's events until its stream ends, resuming with
// Last-Event-ID when the connection drops.
func (c *clientFlags) streamEvents(ctx context.Context, runID string, w io.Writer) error {
	hc, err := c.prepare()
	if err != nil {
		return err
	}
	last := ""
	for attempt := 0; attempt < 5; attempt++ {
		req, err := http.NewRequestWithContext(ctx, "GET", strings.TrimRight(c.server, "/")+"/v1/runs/"+url.PathEscape(runID)+"/events", nil)
		if err != nil {
			return err
		}
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		if last != "" {
			req.Header.Set("Last-Event-ID", last)
		}
		resp, err := hc.Do(req)
		if err != nil {
			time.Sleep(time.Second)
			continue
		}
		done := false
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		var typ, data string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "id: "):
				last = line[4:]
			case strings.HasPrefix(line, "event: "):
				typ = line[7:]
			case strings.HasPrefix(line, "data: "):
				data = line[6:]
			case line == "" && typ != "": // a blank line after a comment (keep-alive) ends no event
				var ev struct {
					Data map[string]string `json:"data"`
				}
				json.Unmarshal([]byte(data), &ev)
				fmt.Fprintf(w, "  %-13s %s\n", typ, formatData(ev.Data))
				done = typ == "terminal" || typ == "absorbed"
				typ, data = "", ""
			}
		}
		resp.Body.Close()
		if done {
			return nil
		}
	}
	return errors.New("the event stream kept dropping")
}

func formatData(d map[string]string) string {
	var parts []string
	for _, k := range []string{"decision", "attempt", "step", "input_message_id", "from_run_id", "tool", "call_id", "text", "state", "reason", "into_run_id", "error"} {
		if v := d[k]; v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	return strings.Join(parts, " ")
}

// waitResult polls the result route until the run settles.
func (c *clientFlags) waitResult(ctx context.Context, runID string) (httpapi.Result, error) {
	for {
		var raw json.RawMessage
		status, err := c.do(ctx, "GET", "/v1/runs/"+url.PathEscape(runID)+"/result?wait=30s", nil, nil, &raw)
		if err != nil {
			return httpapi.Result{}, err
		}
		if status == http.StatusOK {
			var res httpapi.Result
			return res, json.Unmarshal(raw, &res)
		}
		if err := ctx.Err(); err != nil {
			return httpapi.Result{}, fmt.Errorf("run %s did not settle in time: %w", runID, err)
		}
	}
}

func printResult(w io.Writer, res httpapi.Result, jsonOut bool) int {
	if jsonOut {
		printJSON(w, res)
	} else {
		fmt.Fprintf(w, "run %s: %s", res.RunID, res.State)
		if res.TerminalReason != "" && res.TerminalReason != res.State {
			fmt.Fprintf(w, " (%s)", res.TerminalReason)
		}
		if res.AnsweredByRunID != "" && res.AnsweredByRunID != res.RunID {
			fmt.Fprintf(w, ", answered by %s", res.AnsweredByRunID)
		}
		fmt.Fprintln(w)
		if res.Error != "" {
			fmt.Fprintf(w, "error: %s\n", res.Error)
		}
		if res.Answer != nil {
			fmt.Fprintf(w, "answer: %s\n", res.Answer.Content)
		}
	}
	if res.Answer == nil {
		return exitFail
	}
	return exitOK
}

func runRunsList(args []string, stdout, stderr io.Writer) int {
	var c clientFlags
	fs := newFlagSet("runs list", "runs list THREAD", "agenthost runs list demo", stderr)
	c.register(fs)
	thread := fs.String("thread", "", "deprecated: give the thread as the argument")
	pos, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	if *thread != "" && len(pos) == 0 {
		deprecated(stderr, "runs list --thread T", "runs list T")
		pos = []string{*thread}
	}
	if len(pos) != 1 {
		fs.Usage()
		return exitUsage
	}
	var out struct {
		Runs []httpapi.Run `json:"runs"`
	}
	err := c.pages(context.Background(), "/v1/threads/"+url.PathEscape(pos[0])+"/runs", func(b []byte) (string, error) {
		var p httpapi.RunPage
		err := json.Unmarshal(b, &p)
		out.Runs = append(out.Runs, p.Runs...)
		return p.NextCursor, err
	})
	if err != nil {
		return clientErr(stderr, err)
	}
	if c.jsonOut {
		printJSON(stdout, out.Runs)
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tRUN\tSTATE\tREASON\tINPUTS\tATTEMPT\tABSORBED INTO")
	for _, r := range out.Runs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%s\n", r.Seq, r.ID, r.State, r.TerminalReason, len(r.InputMessageIDs), r.Attempt, r.AbsorbedIntoRunID)
	}
	tw.Flush()
	return exitOK
}

func runRunsShow(args []string, stdout, stderr io.Writer) int {
	var c clientFlags
	fs := newFlagSet("runs show", "runs show RUN", "agenthost runs show run_0193…", stderr)
	c.register(fs)
	pos, code, ok := parseN(fs, args, 1)
	if !ok {
		return code
	}
	var run httpapi.Run
	if _, err := c.do(context.Background(), "GET", "/v1/runs/"+url.PathEscape(pos[0]), nil, nil, &run); err != nil {
		return clientErr(stderr, err)
	}
	var res json.RawMessage
	status, err := c.do(context.Background(), "GET", "/v1/runs/"+url.PathEscape(pos[0])+"/result", nil, nil, &res)
	if err != nil {
		return clientErr(stderr, err)
	}
	if c.jsonOut {
		out := map[string]any{"run": run}
		if status == http.StatusOK {
			out["result"] = res
		}
		printJSON(stdout, out)
		return exitOK
	}
	fmt.Fprintf(stdout, "run       %s\nthread    %s (seq %d)\nstate     %s %s\ninputs    %s\nattempt   %d\n", run.ID, run.ThreadID, run.Seq, run.State, run.TerminalReason, strings.Join(run.InputMessageIDs, ", "), run.Attempt)
	if run.AbsorbedIntoRunID != "" {
		fmt.Fprintf(stdout, "absorbed  into %s\n", run.AbsorbedIntoRunID)
	}
	for _, p := range run.PendingApprovals {
		fmt.Fprintf(stdout, "waiting   call %s: %s %s", p.CallID, p.Tool, string(p.Arguments))
		if p.Approvals > 1 {
			fmt.Fprintf(stdout, " (%d of %d approvals)", p.Approved, p.Approvals)
		}
		fmt.Fprintf(stdout, ", until %s\n          %s\n", p.Deadline.Format(time.RFC3339), p.Prompt)
	}
	if len(run.PendingApprovals) > 0 {
		fmt.Fprintf(stdout, "          answer with: agenthost approve|reject|respond %s CALL\n", run.ID)
	}
	if run.Error != "" {
		fmt.Fprintf(stdout, "error     %s\n", run.Error)
	}
	if status == http.StatusOK {
		var r httpapi.Result
		json.Unmarshal(res, &r)
		if r.Answer != nil {
			fmt.Fprintf(stdout, "answer    %s\n", r.Answer.Content)
		}
	}
	return exitOK
}

func runThreadShow(args []string, stdout, stderr io.Writer) int {
	var c clientFlags
	fs := newFlagSet("thread show", "thread show T", "agenthost thread show demo", stderr)
	c.register(fs)
	pos, code, ok := parseN(fs, args, 1)
	if !ok {
		return code
	}
	var out struct {
		Messages []httpapi.Message `json:"messages"`
	}
	err := c.pages(context.Background(), "/v1/threads/"+url.PathEscape(pos[0])+"/messages", func(b []byte) (string, error) {
		var p httpapi.MessagePage
		err := json.Unmarshal(b, &p)
		out.Messages = append(out.Messages, p.Messages...)
		return p.NextCursor, err
	})
	if err != nil {
		return clientErr(stderr, err)
	}
	if c.jsonOut {
		printJSON(stdout, out.Messages)
		return exitOK
	}
	for _, m := range out.Messages {
		switch {
		case len(m.ToolCalls) > 0:
			for _, tc := range m.ToolCalls {
				fmt.Fprintf(stdout, "%-9s calls %s(%s)\n", m.Role, tc.Name, tc.Arguments)
			}
		case m.Role == "tool":
			fmt.Fprintf(stdout, "%-9s %s\n", "tool", m.Content)
		default:
			fmt.Fprintf(stdout, "%-9s %s\n", m.Role, m.Content)
		}
	}
	return exitOK
}

func runThreadsList(args []string, stdout, stderr io.Writer) int {
	var c clientFlags
	fs := newFlagSet("threads list", "threads list [--after CURSOR] [--limit N]", "agenthost threads list --limit 50", stderr)
	c.register(fs)
	after := fs.String("after", "", "list the threads after this id (a next_cursor)")
	limit := fs.Int("limit", 100, "threads per page (1 to 1000)")
	_, code, ok := parseN(fs, args, 0)
	if !ok {
		return code
	}
	q := url.Values{"limit": {strconv.Itoa(*limit)}}
	if *after != "" {
		q.Set("after", *after)
	}
	var page httpapi.ThreadPage
	if _, err := c.do(context.Background(), "GET", "/v1/threads?"+q.Encode(), nil, nil, &page); err != nil {
		return clientErr(stderr, err)
	}
	if c.jsonOut {
		printJSON(stdout, page)
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "THREAD\tVERSION\tBUSY\tOPEN RUNS\tUPDATED")
	for _, t := range page.Threads {
		fmt.Fprintf(tw, "%s\t%d\t%t\t%s\t%s\n", t.ID, t.Version, t.Busy, strings.Join(t.OpenRunIDs, ","), t.UpdatedAt.Format(time.RFC3339))
	}
	tw.Flush()
	if page.NextCursor != "" {
		fmt.Fprintf(stdout, "more: agenthost threads list --after %s\n", page.NextCursor)
	}
	return exitOK
}
