// Command mutants plants each bug of its catalogue (catalogue.go) in a
// scratch copy of the tree, one at a time, and runs the runtime's
// simulation and the store layer's property test against it. It reports,
// for every bug, whether each caught it and with which seed; it fails when
// the simulation misses any bug, or when a bug's code fragment is not found
// exactly once (the catalogue is stale: the code it names has moved).
//
//	go run ./internal/mutants [-seeds N] [-checks N] [-run REGEXP] [-keep]
//
// `make mutants` runs it.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Edit replaces the one occurrence of Find in File (a path from the
// module's root) with Replace.
type Edit struct {
	File, Find, Replace string
}

// Mutant is a planted bug: the edits that plant it and the rule it breaks.
type Mutant struct {
	ID    string
	Rule  string
	Edits []Edit
}

func main() {
	seeds := flag.Int("seeds", 2000, "simulation seeds per bug (it stops at the first failure)")
	checks := flag.Int("checks", 300, "property test checks per bug")
	run := flag.String("run", "", "only the bugs whose id matches this regular expression")
	keep := flag.Bool("keep", false, "keep the scratch copy")
	flag.Parse()
	if err := mainErr(*seeds, *checks, *run, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(1)
	}
}

type result struct {
	m                     Mutant
	simCaught, propCaught bool
	simSeed               string
	simWhy, propWhy       string
	simFirst              string // the simulation's first complaint
	took                  time.Duration
}

func mainErr(seeds, checks int, only string, keep bool) error {
	re, err := regexp.Compile(only)
	if err != nil {
		return err
	}
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	// Every fragment must be found exactly once before anything runs.
	for _, m := range catalogue {
		for _, e := range m.Edits {
			b, err := os.ReadFile(filepath.Join(root, e.File))
			if err != nil {
				return fmt.Errorf("%s: %w", m.ID, err)
			}
			if n := bytes.Count(b, []byte(e.Find)); n != 1 {
				return fmt.Errorf("%s: the fragment to replace is found %d times in %s, not once (the catalogue is stale):\n%s", m.ID, n, e.File, e.Find)
			}
		}
	}
	scratch, err := os.MkdirTemp("", "agenthost-mutants-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Println("scratch copy:", scratch)
	} else {
		defer os.RemoveAll(scratch)
	}
	if err := copyTree(root, scratch); err != nil {
		return err
	}
	fmt.Printf("unmutated tree: simulation (%d seeds) and property test (%d checks)\n", seeds, checks)
	if r := test(scratch, Mutant{ID: "none"}, seeds, checks); r.simCaught || r.propCaught {
		return fmt.Errorf("the unmutated tree fails: simulation: %s; property test: %s", r.simWhy, r.propWhy)
	}
	var results []result
	for _, m := range catalogue {
		if !re.MatchString(m.ID) {
			continue
		}
		var saved []Edit
		for _, e := range m.Edits {
			p := filepath.Join(scratch, e.File)
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			saved = append(saved, Edit{File: e.File, Find: string(b)})
			if err := os.WriteFile(p, bytes.Replace(b, []byte(e.Find), []byte(e.Replace), 1), 0o644); err != nil {
				return err
			}
		}
		r := test(scratch, m, seeds, checks)
		results = append(results, r)
		fmt.Printf("%-28s simulation: %-22s property test: %-8s (%s)\n", m.ID, caught(r.simCaught, r.simSeed), caught(r.propCaught, ""), r.took.Round(time.Second))
		if r.simCaught {
			fmt.Printf("%28s %s\n", "", r.simFirst)
		}
		for i := len(saved) - 1; i >= 0; i-- {
			if err := os.WriteFile(filepath.Join(scratch, saved[i].File), []byte(saved[i].Find), 0o644); err != nil {
				return err
			}
		}
	}
	missed, prop := 0, 0
	fmt.Println()
	for _, r := range results {
		if !r.simCaught {
			missed++
			fmt.Printf("MISSED by the simulation: %s (%s)\n%s\n", r.m.ID, r.m.Rule, r.simWhy)
		}
		if r.propCaught {
			prop++
		}
	}
	fmt.Printf("%d planted bugs: %d caught by the simulation, %d by the property test\n", len(results), len(results)-missed, prop)
	if missed > 0 {
		return fmt.Errorf("%d planted bugs missed by the simulation", missed)
	}
	return nil
}

func caught(ok bool, seed string) string {
	if !ok {
		return "missed"
	}
	if seed != "" {
		return "caught (seed " + seed + ")"
	}
	return "caught"
}

var seedRE = regexp.MustCompile(`simulation failed with seed (\d+)`)

// test runs the simulation and the property test in dir.
func test(dir string, m Mutant, seeds, checks int) result {
	began := time.Now()
	r := result{m: m}
	out, err := goTest(dir, "./host", "-run", "^TestSimulation$", fmt.Sprintf("-sim.seeds=%d", seeds))
	if err != nil {
		r.simCaught = true
		if s := seedRE.FindStringSubmatch(out); s != nil {
			r.simSeed = s[1]
		}
		r.simWhy = firstLines(out, 12)
		r.simFirst = firstComplaint(out)
	}
	out, err = goTest(dir, "./host/store", "-run", "^TestStoreProperties$", fmt.Sprintf("-rapid.checks=%d", checks))
	if err != nil {
		r.propCaught = true
		r.propWhy = firstLines(out, 12)
	}
	r.took = time.Since(began)
	return r
}

func goTest(dir, pkg string, args ...string) (string, error) {
	cmd := exec.Command("go", append([]string{"test", "-count=1", "-timeout=20m", pkg}, args...)...)
	cmd.Dir = dir
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	return buf.String(), err
}

var complaintRE = regexp.MustCompile(`(?m)^\s+\w+_test\.go:\d+: (.*)$`)

// firstComplaint is the first message a test reported, shortened.
func firstComplaint(out string) string {
	m := complaintRE.FindStringSubmatch(out)
	if m == nil {
		return firstLines(out, 1)
	}
	if len(m[1]) > 160 {
		return m[1][:160] + "…"
	}
	return m[1]
}

func firstLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside a Go module")
	}
	return filepath.Dir(mod), nil
}

// copyTree copies the module's files that git tracks or would track.
func copyTree(root, dst string) error {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("listing the tree's files: %w", err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, f)
		st, err := os.Lstat(src)
		if err != nil {
			if os.IsNotExist(err) {
				continue // deleted in the work tree
			}
			return err
		}
		if !st.Mode().IsRegular() {
			continue
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		p := filepath.Join(dst, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, b, st.Mode().Perm()); err != nil {
			return err
		}
	}
	return nil
}
