// Package apitest serves the HTTP API in memory for tests: a runtime over
// a fresh memstore driver (in process, no plugin), with a scripted model,
// behind httpapi.New on an httptest server. Config says what a test wants
// otherwise: the model's script, held model steps, another driver, tools,
// policies, the API's options.
//
//	s := apitest.New(t, apitest.Config{API: httpapi.Options{Token: "t0k3n"}})
//	resp, err := http.Get(s.URL + "/healthz")
package apitest

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/httpapi"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// Config is what a test server differs in. Its zero value serves a
// runtime over a fresh memstore whose model answers every input at once
// by echoing it, with a logger that discards and no token.
type Config struct {
	// Host is the runtime's configuration. Where unset, Driver is a
	// fresh memstore, Model a scripted model playing Script, and Logger
	// one that discards.
	Host host.Config
	// Script is what the scripted model plays when Host.Model is unset
	// (model.NewScripted: empty, it echoes the input).
	Script model.Script
	// Sleep, when set, replaces the scripted model's waits
	// (model.Scripted.Sleep), before the runtime starts: a test holds its
	// model steps with it. Only with Host.Model unset.
	Sleep func(ctx context.Context, d time.Duration) error
	// API is the HTTP API's options; Logger, unset, is Host.Logger.
	API httpapi.Options
	// HTTP, when set, is called with the test server's http.Server before
	// it starts (to watch its connections, say).
	HTTP func(*http.Server)
}

// Server is a test server of the API. It is closed, and its runtime
// closed without waiting for runs in flight, when the test ends.
type Server struct {
	*httptest.Server
	// Runtime is the runtime the API serves. A test may close it itself;
	// closing it again at the end is harmless.
	Runtime *host.Runtime
}

// New starts a test server as cfg says; any failure to start ends the
// test.
func New(t testing.TB, cfg Config) *Server {
	t.Helper()
	hc := cfg.Host
	if hc.Driver == nil {
		hc.Driver = memdriver.New()
	}
	if hc.Logger == nil {
		hc.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	switch {
	case hc.Model == nil:
		m, err := model.NewScripted(cfg.Script)
		if err != nil {
			t.Fatalf("apitest: %v", err)
		}
		if cfg.Sleep != nil {
			m.Sleep = cfg.Sleep
		}
		hc.Model = m
	case cfg.Sleep != nil || len(cfg.Script.Steps) > 0 || len(cfg.Script.When) > 0:
		t.Fatal("apitest: Config.Script and Config.Sleep are for the scripted model; Host.Model is set")
	}
	rt, err := host.New(context.Background(), hc)
	if err != nil {
		t.Fatalf("apitest: %v", err)
	}
	opt := cfg.API
	if opt.Logger == nil {
		opt.Logger = hc.Logger
	}
	s := &Server{Server: httptest.NewUnstartedServer(httpapi.New(rt, opt)), Runtime: rt}
	if cfg.HTTP != nil {
		cfg.HTTP(s.Config)
	}
	s.Start()
	t.Cleanup(func() {
		s.Close()
		// Runs still in flight (a held model step, say) are abandoned, not
		// waited for.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		rt.Close(ctx)
	})
	return s
}
