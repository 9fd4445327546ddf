package standard_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/agenthost/agenthost/guests/policy/standard"
)

// TestRefineCIsTheBuiltModule: the embedded copy is the committed build of
// guests/policy/refine-c (whose own test checks it against its source).
func TestRefineCIsTheBuiltModule(t *testing.T) {
	built, err := os.ReadFile("../refine-c/refine.wasm")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(built, standard.RefineC) {
		t.Fatal("guests/policy/standard/refine-c.wasm differs from guests/policy/refine-c/refine.wasm: copy it again")
	}
}
