package apitest_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/httpapi"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/internal/apitest"
)

func do(t *testing.T, method, url, body, token string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// submit submits an input to thread T and returns its run's ID.
func submit(t *testing.T, s *apitest.Server, token string) string {
	t.Helper()
	code, body := do(t, "POST", s.URL+"/v1/threads/T/inputs", `{"content":"hi"}`, token)
	if code != http.StatusAccepted {
		t.Fatalf("submit: %d %s", code, body)
	}
	var adm httpapi.Admission
	if err := json.Unmarshal(body, &adm); err != nil {
		t.Fatal(err)
	}
	return adm.RunID
}

// answer waits for run id's result and returns its body.
func answer(t *testing.T, s *apitest.Server, id, token string) string {
	t.Helper()
	code, body := do(t, "GET", s.URL+"/v1/runs/"+id+"/result?wait=60s", "", token)
	if code != http.StatusOK {
		t.Fatalf("result: %d %s", code, body)
	}
	return string(body)
}

// TestConfig: the script, the held steps, the API's options and the HTTP
// hook each reach the server.
func TestConfig(t *testing.T) {
	release := make(chan struct{})
	var held, conns atomic.Int64
	s := apitest.New(t, apitest.Config{
		Script: model.Script{Steps: []model.ScriptStep{{Answer: "scripted"}}},
		Sleep: func(ctx context.Context, _ time.Duration) error {
			held.Add(1)
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		API: httpapi.Options{Token: "t0k3n"},
		HTTP: func(hs *http.Server) {
			hs.ConnState = func(_ net.Conn, st http.ConnState) {
				if st == http.StateNew {
					conns.Add(1)
				}
			}
		},
	})
	if code, body := do(t, "POST", s.URL+"/v1/threads/T/inputs", `{"content":"hi"}`, ""); code != http.StatusUnauthorized {
		t.Fatalf("no token: %d %s", code, body)
	}
	id := submit(t, s, "t0k3n")
	for deadline := time.Now().Add(time.Minute); held.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the model step was never held")
		}
	}
	if r, err := s.Runtime.Run(context.Background(), id); err != nil || r.State != record.StateActive {
		t.Fatalf("held run: %+v, %v", r, err)
	}
	close(release)
	if got := answer(t, s, id, "t0k3n"); !strings.Contains(got, "scripted") {
		t.Fatalf("result %s, want the script's answer", got)
	}
	if conns.Load() == 0 {
		t.Error("the HTTP hook saw no connection")
	}
}

// TestDefaults: the zero Config echoes the input at once, with no token.
func TestDefaults(t *testing.T) {
	s := apitest.New(t, apitest.Config{})
	if got := answer(t, s, submit(t, s, ""), ""); !strings.Contains(got, `"content":"hi"`) {
		t.Fatalf("result %s, want the input echoed", got)
	}
}
