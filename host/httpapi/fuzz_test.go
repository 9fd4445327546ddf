package httpapi_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/agenthost/agenthost/host/httpapi"
)

// FuzzSubmit sends arbitrary bodies, keys and thread ids to the inputs
// endpoint: it never answers 500, and every input it accepts (202) is
// durable under the run it named.
func FuzzSubmit(f *testing.F) {
	f.Add("T", "", `{"content":"hello"}`)
	f.Add("T", "k", `{"content":"hello","hint":"reject"}`)
	f.Add("thread-2", "key", `{"content":"x","metadata":{"a":"b"}}`)
	f.Add("T", "k", `{"content":1}`)
	f.Add("T", "", `{"content":"\u0000"}`)
	f.Add("", "", `{}`)
	s := newServer(f, false, httpapi.Options{MaxBodyBytes: 4096})
	f.Fuzz(func(t *testing.T, thread, key, body string) {
		req, err := http.NewRequest("POST", s.URL+"/v1/threads/"+thread+"/inputs", nil)
		if err != nil {
			return // not a URL a client can send
		}
		if !validHeaderValue(key) {
			return // not a header a client can send
		}
		resp, b := s.do(t, "POST", req.URL.EscapedPath(), body, "Idempotency-Key", key)
		if resp.StatusCode >= 500 {
			t.Fatalf("thread %q key %q body %q: %d %s", thread, key, body, resp.StatusCode, b)
		}
		if resp.StatusCode == http.StatusAccepted {
			adm := decode[httpapi.Admission](t, b)
			run, err := s.rt.Run(context.Background(), adm.RunID)
			if err != nil {
				t.Fatalf("accepted run %s is not durable: %v", adm.RunID, err)
			}
			found := false
			for _, id := range run.InputMessageIDs {
				found = found || id == adm.InputMessageID
			}
			if !found {
				t.Fatalf("accepted input %s is not in run %s", adm.InputMessageID, adm.RunID)
			}
		}
	})
}

func validHeaderValue(v string) bool {
	for i := range len(v) {
		if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
