package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/agenthost/agenthost/host/httpapi"
)

func init() {
	register("approve", "approve a tool call a waiting run waits on (--edit: with other arguments)", runApprove)
	register("reject", "reject a tool call a waiting run waits on: it is not run", runReject)
	register("respond", "answer a tool call a waiting run waits on in the tool's place", runRespond)
}

func runApprove(args []string, stdout, stderr io.Writer) int {
	fs, c, key := answerFlags("approve", "approve RUN CALL [--edit JSON] [--key K]", `agenthost approve run_0193… call_1 --edit '{"path": "/tmp/x"}'`, stderr)
	edit := fs.String("edit", "", "run the call with these arguments instead (a JSON object)")
	pos, code, ok := parseN(fs, args, 2)
	if !ok {
		return code
	}
	editGiven := false
	fs.Visit(func(f *flag.Flag) { editGiven = editGiven || f.Name == "edit" })
	if editGiven && strings.TrimSpace(*edit) == "" {
		// An unset shell variable would otherwise approve the original
		// arguments the person meant to replace.
		fmt.Fprintln(stderr, "agenthost approve: --edit is empty; give the arguments as a JSON object, or leave --edit out to approve the call as it is")
		return exitUsage
	}
	req := httpapi.ApprovalRequest{Action: "approve", Key: *key}
	if editGiven {
		if !json.Valid([]byte(*edit)) || !strings.HasPrefix(strings.TrimSpace(*edit), "{") {
			fmt.Fprintln(stderr, "agenthost approve: --edit must be a JSON object, e.g. '{\"path\": \"/tmp/x\"}'")
			return exitUsage
		}
		req.Action, req.Arguments = "edit", json.RawMessage(*edit)
	}
	return answerCall(c, pos[0], pos[1], req, stdout, stderr)
}

func runReject(args []string, stdout, stderr io.Writer) int {
	fs, c, key := answerFlags("reject", "reject RUN CALL [--message TEXT] [--key K]", `agenthost reject run_0193… call_1 --message "not this folder"`, stderr)
	msg := fs.String("message", "", "what the model sees as the tool's result (default: a text saying a person rejected the call)")
	pos, code, ok := parseN(fs, args, 2)
	if !ok {
		return code
	}
	return answerCall(c, pos[0], pos[1], httpapi.ApprovalRequest{Action: "reject", Message: *msg, Key: *key}, stdout, stderr)
}

func runRespond(args []string, stdout, stderr io.Writer) int {
	fs, c, key := answerFlags("respond", "respond RUN CALL --message TEXT [--key K]", `agenthost respond run_0193… call_1 --message "the answer is 42"`, stderr)
	msg := fs.String("message", "", "the answer the model sees in the tool's place (required)")
	pos, code, ok := parseN(fs, args, 2)
	if !ok {
		return code
	}
	if strings.TrimSpace(*msg) == "" {
		fs.Usage()
		return exitUsage
	}
	return answerCall(c, pos[0], pos[1], httpapi.ApprovalRequest{Action: "respond", Message: *msg, Key: *key}, stdout, stderr)
}

// answerFlags makes the flag set of an answering command: the client's
// flags and --key, which the three commands share.
func answerFlags(name, usage, example string, stderr io.Writer) (*flag.FlagSet, *clientFlags, *string) {
	c := new(clientFlags)
	fs := newFlagSet(name, usage, example, stderr)
	c.register(fs)
	key := fs.String("key", "", "idempotency key: retrying with it is safe")
	return fs, c, key
}

// answerCall posts an answer and prints what was recorded.
//
// Without --key it sends a fresh random key and prints it first (to stderr,
// before the request, so it is known even when the reply is lost): a retry
// that passes it is recorded once.
func answerCall(c *clientFlags, run, call string, req httpapi.ApprovalRequest, stdout, stderr io.Writer) int {
	if req.Key == "" {
		req.Key = "cli-" + rand.Text()
		fmt.Fprintf(stderr, "idempotency key %s (to retry safely: --key %s)\n", req.Key, req.Key)
	}
	var out httpapi.ApprovalReply
	path := "/v1/runs/" + url.PathEscape(run) + "/approvals/" + url.PathEscape(call)
	if _, err := c.do(context.Background(), "POST", path, req, nil, &out); err != nil {
		return clientErr(stderr, err)
	}
	if c.jsonOut {
		printJSON(stdout, out)
		return exitOK
	}
	what := "recorded"
	if out.Duplicate {
		what = "already recorded"
	}
	fmt.Fprintf(stdout, "%s: %s of call %s; run %s is %s", what, out.Answer.Action, out.Answer.CallID, out.Run.ID, out.Run.State)
	if len(out.Run.PendingCallIDs) > 0 {
		fmt.Fprintf(stdout, " (still waiting on %s)", strings.Join(out.Run.PendingCallIDs, ", "))
	}
	fmt.Fprintln(stdout)
	return exitOK
}
