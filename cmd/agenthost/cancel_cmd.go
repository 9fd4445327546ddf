package main

import (
	"context"
	"fmt"
	"io"
	"net/url"

	"github.com/agenthost/agenthost/host/httpapi"
)

func init() {
	register("cancel", "cancel a queued or active run (an active one is stopped at once)", runCancel)
}

func runCancel(args []string, stdout, stderr io.Writer) int {
	var c clientFlags
	fs := newFlagSet("cancel", "cancel RUN", "agenthost cancel run_0193…", stderr)
	c.register(fs)
	pos, code, ok := parseN(fs, args, 1)
	if !ok {
		return code
	}
	var run httpapi.Run
	if _, err := c.do(context.Background(), "POST", "/v1/runs/"+url.PathEscape(pos[0])+"/cancel", nil, nil, &run); err != nil {
		return clientErr(stderr, err)
	}
	if c.jsonOut {
		printJSON(stdout, run)
		return exitOK
	}
	fmt.Fprintf(stdout, "canceled: run %s is %s/%s\n", run.ID, run.State, run.TerminalReason)
	return exitOK
}
