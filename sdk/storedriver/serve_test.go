package storedriver

import "testing"

func TestServeProcs(t *testing.T) {
	env := func(v string, set bool) func(string) (string, bool) {
		return func(k string) (string, bool) {
			if k == "GOMAXPROCS" {
				return v, set
			}
			return "", false
		}
	}
	for _, tc := range []struct {
		opts []ServeOption
		env  func(string) (string, bool)
		want int
	}{
		{nil, env("", false), 0},
		{[]ServeOption{WithMaxProcs(1)}, env("", false), 1},
		{[]ServeOption{WithMaxProcs(1)}, env("4", true), 0}, // the host's setting wins
		{[]ServeOption{WithMaxProcs(0)}, env("", false), 0},
	} {
		var o serveOptions
		for _, opt := range tc.opts {
			opt(&o)
		}
		if got := o.procs(tc.env); got != tc.want {
			t.Errorf("options %+v: procs = %d, want %d", o, got, tc.want)
		}
	}
}
