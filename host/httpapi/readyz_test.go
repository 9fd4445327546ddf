package httpapi_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/httpapi"
	"github.com/agenthost/agenthost/internal/apitest"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

// downDriver is memstore whose Info fails while down is set, as a driver
// that is down and cannot be relaunched answers.
type downDriver struct {
	driver.Driver
	down atomic.Bool
}

func (d *downDriver) Info(ctx context.Context) (driver.Info, error) {
	if d.down.Load() {
		return driver.Info{}, fmt.Errorf("%w: restarting driver: exec: no such file", driver.ErrUnavailable)
	}
	return d.Driver.Info(ctx)
}

type readiness struct {
	Status string `json:"status"`
	Reason string `json:"reason"`
}

// TestReadyz: /readyz says no while the store driver does not answer and
// while the server drains; /healthz, liveness, says yes throughout.
func TestReadyz(t *testing.T) {
	gate := make(chan struct{})
	d := &downDriver{Driver: memdriver.New()}
	api := apitest.New(t, apitest.Config{
		Sleep: func(ctx context.Context, _ time.Duration) error {
			select {
			case <-gate:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		Host: host.Config{Driver: d, Policy: hintPolicy{}},
		API:  httpapi.Options{Token: "t0k3n"},
	})
	rt := api.Runtime
	s := &server{rt: rt, Server: api.Server}
	ready := func(want int, reason string) {
		t.Helper()
		resp, body := s.do(t, "GET", "/readyz", "")
		r := decode[readiness](t, body)
		if resp.StatusCode != want || r.Reason != reason {
			t.Fatalf("readyz: %d %s, want %d reason %q", resp.StatusCode, body, want, reason)
		}
		if resp, _ := s.do(t, "GET", "/healthz", ""); resp.StatusCode != 200 {
			t.Fatalf("healthz: %d", resp.StatusCode)
		}
	}
	ready(200, "")
	d.down.Store(true)
	ready(503, "store_unavailable")
	if _, body := s.do(t, "GET", "/readyz", ""); strings.Contains(string(body), "no such file") {
		t.Fatalf("readyz, with no token, shows the driver's error: %s", body)
	}
	d.down.Store(false)
	ready(200, "")

	// A run in flight holds the drain open.
	resp, body := s.do(t, "POST", "/v1/threads/T/inputs", `{"content":"hold"}`, "Authorization", "Bearer t0k3n")
	if resp.StatusCode != 202 {
		t.Fatalf("submit: %d %s", resp.StatusCode, body)
	}
	closed := make(chan struct{})
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		rt.Close(ctx)
		close(closed)
	}()
	deadline := time.Now().Add(time.Minute)
	for !rt.Draining() {
		if time.Now().After(deadline) {
			t.Fatal("never draining")
		}
		time.Sleep(time.Millisecond)
	}
	ready(503, "draining")
	resp, body = s.do(t, "POST", "/v1/threads/U/inputs", `{"content":"late"}`, "Authorization", "Bearer t0k3n")
	wantProblem(t, resp, body, 503, "unavailable")
	close(gate)
	<-closed
	ready(503, "draining")
}
