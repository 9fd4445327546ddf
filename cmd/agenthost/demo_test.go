package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/host/policy"
	"github.com/agenthost/agenthost/host/runstate"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
)

func TestDemoInProcess(t *testing.T) {
	d := memdriver.New()
	var out bytes.Buffer
	pol := policy.Static{Name: "inject", Decision: runstate.Decision{Action: runstate.ActionInject}}
	if err := demo(context.Background(), &out, d, pol, func() (driver.Driver, error) { return d, nil }); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	for _, want := range []string{"took input", "absorbed_into_run_id -> A", "Nothing accepted was lost"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("timeline lacks %q", want)
		}
	}
	t.Log("\n" + out.String())
}
