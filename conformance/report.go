package conformance

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Time     string       `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name       string          `xml:"name,attr"`
	Tests      int             `xml:"tests,attr"`
	Failures   int             `xml:"failures,attr"`
	Skipped    int             `xml:"skipped,attr"`
	Time       string          `xml:"time,attr"`
	Properties []junitProperty `xml:"properties>property"`
	Cases      []junitCase     `xml:"testcase"`
}

type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

func secs(d time.Duration) string { return fmt.Sprintf("%.3f", d.Seconds()) }

// WriteJUnit writes the report as JUnit XML: one testsuite per group, the
// suite version, profile, driver and tiers as properties.
func (r *Report) WriteJUnit(w io.Writer) error {
	props := []junitProperty{
		{"suite_version", r.SuiteVersion}, {"profile", string(r.Profile)}, {"target", r.Target},
		{"driver", r.Driver.Name + " " + r.Driver.Version}, {"claimed_tiers", tierList(r.Claimed)}, {"passed_tiers", tierList(r.Passed)},
	}
	if r.Durability != "" {
		props = append(props, junitProperty{"durability", r.Durability})
	}
	out := junitSuites{Name: SuiteName + " " + r.SuiteVersion, Time: secs(r.Duration)}
	idx := map[string]int{}
	for _, res := range r.Results {
		i, ok := idx[res.Group]
		if !ok {
			i = len(out.Suites)
			idx[res.Group] = i
			out.Suites = append(out.Suites, junitSuite{Name: res.Group, Properties: props})
		}
		s := &out.Suites[i]
		jc := junitCase{Name: res.Name, Classname: SuiteName + "." + res.Group, Time: secs(res.Duration)}
		switch res.Status {
		case Fail:
			jc.Failure = &junitMessage{Message: strings.Join(res.Rules, " "), Text: res.Message}
			s.Failures++
			out.Failures++
		case Skip:
			jc.Skipped = &junitMessage{Message: res.Message}
			s.Skipped++
			out.Skipped++
		}
		s.Tests++
		out.Tests++
		s.Time = secs(parseSecs(s.Time) + res.Duration)
		s.Cases = append(s.Cases, jc)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(out); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

func parseSecs(s string) time.Duration {
	var f float64
	_, _ = fmt.Sscanf(s, "%f", &f)
	return time.Duration(f * float64(time.Second))
}

func tierList(ts []Tier) string {
	var s []string
	for _, t := range ts {
		s = append(s, string(t))
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ",")
}

// ProgressLine is the line a runner prints for a result as it comes.
func ProgressLine(res Result) string {
	line := fmt.Sprintf("%-4s  %-44s %8s", strings.ToUpper(string(res.Status)), res.ID(), res.Duration.Round(time.Millisecond))
	switch {
	case res.Status == Fail:
		line += "\n      " + strings.ReplaceAll(res.Message, "\n", "\n      ")
	case res.Message != "":
		line += "  (" + res.Message + ")"
	}
	return line
}

// WriteText writes the report as a table for people: the driver, the
// results, the tiers passed and the rules broken.
func (r *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "suite\t%s %s, profile %s\n", SuiteName, r.SuiteVersion, r.Profile)
	fmt.Fprintf(tw, "target\t%s\n", r.Target)
	fmt.Fprintf(tw, "driver\t%s %s (protocol %d, durable %v, leases %v)\n", r.Driver.Name, r.Driver.Version, r.Driver.ProtocolVersion, r.Driver.Durable, r.Driver.Leases)
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "STATUS\tCASE\tTIER\tTIME\tRULES")
	for _, res := range r.Results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", strings.ToUpper(string(res.Status)), res.ID(), res.Tier, res.Duration.Round(time.Millisecond), strings.Join(res.Rules, " "))
	}
	fmt.Fprintln(tw)
	p, f, s := r.Counts()
	fmt.Fprintf(tw, "cases\t%d passed, %d failed, %d skipped in %s\n", p, f, s, r.Duration.Round(time.Millisecond))
	fmt.Fprintf(tw, "tiers\tclaimed %s; passed %s\n", tierList(r.Claimed), tierList(r.Passed))
	if d := r.DurabilityText(); d != "" {
		fmt.Fprintf(tw, "durable\t%s\n", d)
	}
	if lacks := r.Lacks(); lacks != "" {
		fmt.Fprintf(tw, "lacks\t%s\n", lacks)
	}
	if rules := r.FailedRules(); len(rules) > 0 {
		fmt.Fprintf(tw, "broken rules\t%s\n", strings.Join(rules, ", "))
	}
	if r.Error != "" {
		fmt.Fprintf(tw, "error\t%s\n", r.Error)
	}
	verdict := "PASS"
	if !r.Pass {
		verdict = "FAIL"
	}
	fmt.Fprintf(tw, "verdict\t%s\n", verdict)
	return tw.Flush()
}

// DurabilityText says, for people, what a passed durable tier was checked
// against (Durability); empty when it did not pass.
func (r *Report) DurabilityText() string {
	switch r.Durability {
	case DurablePowerCut:
		return "checked against a power cut: every acknowledged commit survived with the writes the driver had not synced dropped"
	case DurableProcessKill:
		why := "its case did not run"
		for _, res := range r.Results {
			if res.Group == "durability" && res.Name == "power-cut" && res.Message != "" {
				why = strings.TrimPrefix(res.Message, powerCutSkip)
			}
		}
		return "checked against process kills only, not a power cut (" + why + ")"
	}
	return ""
}
