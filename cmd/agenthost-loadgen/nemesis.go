package main

import (
	"context"
	"fmt"
	"io"
	"sort"

	"github.com/agenthost/agenthost/soak"
)

func nemesisNames() []string {
	var out []string
	for n := range soak.NemesisProfiles {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// runNemesis runs one nemesis profile (docs/soak.md, "Nemeses").
func runNemesis(ctx context.Context, p soak.NemesisProfile, seed uint64, dir, bin string, stdout, stderr io.Writer) int {
	fmt.Fprintf(stdout, "seed %d\n", seed)
	sum, err := soak.RunNemesis(ctx, soak.NemesisOptions{Profile: p, Seed: seed, Dir: dir, Bin: bin, Log: stderr})
	if err != nil {
		fmt.Fprintf(stderr, "nemesis %s FAILED (seed %d): %v\n", p.Name, seed, err)
		return 1
	}
	for i, pr := range sum.Problems {
		if i == 50 {
			fmt.Fprintf(stderr, "… and %d more\n", len(sum.Problems)-50)
			break
		}
		fmt.Fprintln(stderr, "nemesis:", pr)
	}
	fmt.Fprintln(stdout, sum.Line())
	if len(sum.Problems) > 0 {
		fmt.Fprintf(stderr, "nemesis FAILED: replay with: go run ./cmd/agenthost-loadgen soak -profile %s -seed %d\n", p.Name, seed)
		return 1
	}
	return 0
}
