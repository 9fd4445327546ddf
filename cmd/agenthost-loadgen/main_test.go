package main

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/httpapi"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// TestClosed: closed measures a server with either client, and refuses
// an unknown one.
func TestClosed(t *testing.T) {
	ctx := context.Background()
	m, err := model.NewScripted(model.Script{})
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	rt, err := host.New(ctx, host.Config{Driver: memdriver.New(), Model: m, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(rt, httpapi.Options{Logger: logger}))
	t.Cleanup(func() {
		srv.Close()
		rt.Close(ctx)
	})
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
