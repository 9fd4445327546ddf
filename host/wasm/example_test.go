package wasm_test

import (
	"context"
	"fmt"

	"github.com/agenthost/agenthost/host/policy"
	"github.com/agenthost/agenthost/host/wasm"
)

// Load the C refine guest and decide an input that refines the running one.
func Example() {
	ctx := context.Background()
	e, err := wasm.NewEngine(ctx, wasm.EngineConfig{}) // set CacheDir to keep compiled code
	if err != nil {
		panic(err)
	}
	defer e.Close(ctx)
	m, err := e.LoadFile(ctx, "../../guests/policy/refine-c/refine.wasm", wasm.Options{
		Config: []byte(`{"coalescePending": true}`),
	})
	if err != nil {
		panic(err)
	}
	var p policy.Policy = m
	fmt.Println(p.Manifest().Name, p.Manifest().Actions)
	d, _ := p.Decide(ctx, policy.Request{
		ThreadID: "t-1",
		Input:    policy.Input{Content: "actually, in bullet points"},
		Active:   &policy.RunInfo{RunID: "r-1", Seq: 1, Steps: 2, Inputs: []string{"summarise this thread"}},
	})
	fmt.Println(d.Action, d.CoalescePending)
	// Output:
	// refine-c [queue inject interrupt]
	// inject true
}
