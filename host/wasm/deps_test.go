package wasm

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestGuestDependencies keeps the dependency direction (abi depends on
// nothing of ours, sdk on abi and internal packages, guests on sdk and abi) and keeps Go guests free
// of encoding/json and fmt, which would add over a megabyte to each and slow
// their loading (docs/benchmarks.md).
func TestGuestDependencies(t *testing.T) {
	const mod = "github.com/agenthost/agenthost/"
	const jsonlite = mod + "internal/jsonlite"
	allowed := map[string][]string{
		"./abi/guestabi":         nil,
		"./sdk/...":              {mod + "abi/", mod + "sdk/", mod + "internal/"},
		"./guests/...":           {mod + "abi/", mod + "sdk/", mod + "guests/", jsonlite},
		"./sdk/guest":            {mod + "abi/", mod + "sdk/", jsonlite},
		"./guests/policy/refine": {mod + "abi/", mod + "sdk/", mod + "guests/", jsonlite},
	}
	for pattern, prefixes := range allowed {
		cmd := exec.Command(goTool(), "list", "-deps", pattern)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pattern, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			if dep == "encoding/json" || dep == "fmt" {
				if strings.HasPrefix(pattern, "./guests") || strings.HasPrefix(pattern, "./sdk/guest") {
					t.Errorf("%s depends on %s", pattern, dep)
				}
			}
			if !strings.HasPrefix(dep, mod) {
				continue
			}
			ok := false
			for _, p := range prefixes {
				ok = ok || strings.HasPrefix(dep, p)
			}
			if !ok && !strings.HasPrefix(dep+"/", mod+strings.TrimSuffix(strings.TrimPrefix(pattern, "./"), "/...")+"/") {
				t.Errorf("%s depends on %s", pattern, dep)
			}
		}
	}
}
