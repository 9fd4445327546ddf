package runstate_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// allowedStd are the standard library packages the reducer, and our packages
// it imports, may import directly. Nothing here does I/O, reads a clock or
// draws random numbers.
var allowedStd = map[string]bool{
	"cmp": true, "crypto/sha256": true, "encoding/hex": true, "errors": true,
	"bytes": true, "encoding/json": true, "reflect": true,
	"fmt": true, "maps": true, "slices": true, "sort": true, "strconv": true,
	"strings": true, "time": true, "unicode": true, "unicode/utf8": true,
}

// allowedOwn are the packages of this module the reducer may depend on.
var allowedOwn = map[string]bool{
	"github.com/agenthost/agenthost/host/runstate": true,
	"github.com/agenthost/agenthost/abi/record":    true,
}

// TestPurity fails if the reducer, or a package of ours it depends on,
// imports anything beyond a short list of pure standard packages: no os, net,
// database/sql, syscall, driver or plugin packages, no randomness.
func TestPurity(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-json=ImportPath,Imports,Standard,GoFiles,Dir", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
			Standard   bool
			GoFiles    []string
			Dir        string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if p.Standard {
			continue
		}
		if !allowedOwn[p.ImportPath] {
			t.Errorf("the reducer depends on %s; only %v are allowed", p.ImportPath, keys(allowedOwn))
			continue
		}
		for _, imp := range p.Imports {
			if !allowedStd[imp] && !allowedOwn[imp] {
				t.Errorf("%s imports %s, which is not on the reducer's allow-list", p.ImportPath, imp)
			}
		}
		for _, f := range p.GoFiles {
			checkSource(t, filepath.Join(p.Dir, f))
		}
	}
}

// checkSource rejects goroutines and clock reads in a reducer source file.
func checkSource(t *testing.T, path string) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			t.Errorf("%s: the reducer starts a goroutine", fset.Position(n.Pos()))
		case *ast.SelectorExpr:
			if id, ok := n.X.(*ast.Ident); ok && id.Name == "time" {
				switch n.Sel.Name {
				case "Now", "Since", "Until", "Sleep", "After", "Tick", "NewTimer", "NewTicker", "AfterFunc":
					t.Errorf("%s: the reducer calls time.%s", fset.Position(n.Pos()), n.Sel.Name)
				}
			}
		}
		return true
	})
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
