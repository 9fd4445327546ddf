package main

import (
	"strings"
	"testing"

	"github.com/agenthost/agenthost/internal/apitest"
)

// TestClosed: closed measures a server with either client, and refuses
// an unknown one.
func TestClosed(t *testing.T) {
	srv := apitest.New(t, apitest.Config{})
	for _, client := range []string{"wire", "net/http"} {
		var out, errs strings.Builder
		code := main1([]string{"closed", "--addr", srv.URL, "--clients", "2", "--runs", "10", "--duration", "0", "--prefix", strings.ReplaceAll(client, "/", "-"), "--client", client}, &out, &errs)
		if code != 0 || !strings.Contains(out.String(), "closed clients=2 runs=10 ") {
			t.Fatalf("--client %s: exit %d, out %q, err %q", client, code, out.String(), errs.String())
		}
	}
	var out, errs strings.Builder
	if code := main1([]string{"closed", "--addr", srv.URL, "--client", "curl"}, &out, &errs); code != 2 || !strings.Contains(errs.String(), "wire or net/http") {
		t.Fatalf("--client curl: exit %d, err %q", code, errs.String())
	}
}
