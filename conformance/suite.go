package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/agenthost/agenthost/internal/lazyfs"
)

// Version is the version of the suite. It appears in every report and keys
// the host's certificates: a driver certified by another version of the
// suite is certified again.
const Version = "1.4.0"

// Tier is a capability tier a driver claims.
type Tier string

// The tiers. Every driver is held to basic; durable and shared are claimed.
const (
	// TierBasic: the contract of package abi/driver, over the protocol.
	TierBasic Tier = "basic"
	// TierDurable: acknowledged commits survive kill -9 of the driver
	// process, and a power cut where the suite can cut one (see
	// Options.PowerCut), and a commit cut by a crash is whole or absent.
	// Claimed by driver.Info.Durable.
	TierDurable Tier = "durable"
	// TierLeases: the rules of driver.Leaser (leases by the store's clock,
	// fenced commits, notices). Claimed by driver.Info.Leases.
	TierLeases Tier = "leases"
	// TierShared: several driver processes on the same data (several hosts
	// on one database) see each other's commits and fence each other by
	// version, and, with leases, by fence. Claimed only through
	// Options.Tiers.
	TierShared Tier = "shared"
)

// Tiers lists the tiers in order.
var Tiers = []Tier{TierBasic, TierDurable, TierLeases, TierShared}

// Profile says how much of the suite runs.
type Profile string

// The profiles.
const (
	// Quick is the gate: every group, with small sizes.
	Quick Profile = "quick"
	// Full adds scale (10k runs across 1k threads, 1 MiB messages) and
	// longer commit streams.
	Full Profile = "full"
)

// Options configure a run of the suite. The zero value runs the quick
// profile with the tiers the driver's Info claims.
type Options struct {
	// Profile is Quick (default) or Full.
	Profile Profile
	// Tiers are claimed on top of basic, and durable and leases when Info
	// says so. Claiming durable (leases) for a driver whose Info is not
	// durable (has no leases) is a failure.
	Tiers []Tier
	// ScratchDir is where the suite makes the data directories of the
	// instances it starts. Default: the system temp dir.
	ScratchDir string
	// Progress, if set, is called with each result as it is known.
	Progress func(Result)
	// Only, if set, runs the cases whose "group/name" contains it.
	Only string
	// PowerCut says whether the durable tier cuts the power under the
	// driver, on a FUSE file system that drops unsynced writes: PowerCutAuto
	// (the default) when FUSE can be mounted here, PowerCutRequire, or
	// PowerCutOff. Report.Durability says which was checked.
	PowerCut PowerCut
}

// Status is the outcome of one case.
type Status string

// The statuses.
const (
	Pass Status = "pass"
	Fail Status = "fail"
	Skip Status = "skip"
)

// Result is the outcome of one case of the suite.
type Result struct {
	Group  string `json:"group"`
	Name   string `json:"name"`
	Tier   Tier   `json:"tier"`
	Status Status `json:"status"`
	// Rules are the rules the driver broke, e.g. "atomicity.batch-whole".
	Rules []string `json:"rules,omitempty"`
	// Message says what was seen: the failures, or why the case was skipped.
	Message  string        `json:"message,omitempty"`
	Duration time.Duration `json:"duration_ns"`
}

// ID is the result's "group/name".
func (r Result) ID() string { return r.Group + "/" + r.Name }

// DriverInfo is what the driver said of itself.
type DriverInfo struct {
	ProtocolVersion int    `json:"protocol_version"`
	Name            string `json:"name"`
	Version         string `json:"version"`
	Durable         bool   `json:"durable"`
	Leases          bool   `json:"leases,omitempty"`
}

// Report is the outcome of a run of the suite.
type Report struct {
	Suite        string        `json:"suite"`
	SuiteVersion string        `json:"suite_version"`
	Profile      Profile       `json:"profile"`
	Target       string        `json:"target"`
	Driver       DriverInfo    `json:"driver"`
	Claimed      []Tier        `json:"claimed_tiers"`
	Passed       []Tier        `json:"passed_tiers"`
	Pass         bool          `json:"pass"`
	Started      time.Time     `json:"started"`
	Duration     time.Duration `json:"duration_ns"`
	Results      []Result      `json:"results"`
	// Error is set when the suite could not run at all (e.g. the driver did
	// not start); Pass is then false.
	Error string `json:"error,omitempty"`
	// Durability says what a passed durable tier was checked against:
	// DurablePowerCut, or DurableProcessKill when the power cut did not
	// run (its case's message says why). Empty when the durable tier did
	// not pass.
	Durability string `json:"durability,omitempty"`
}

// SuiteName names the suite in reports.
const SuiteName = "agenthost-store-conformance"

// FailedRules lists the rules the driver broke, sorted, without repeats.
func (r *Report) FailedRules() []string {
	var out []string
	for _, res := range r.Results {
		out = append(out, res.Rules...)
	}
	if r.Error != "" && len(out) == 0 {
		out = append(out, "handshake.start")
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Lacks says what the driver lacks of the protocol the suite speaks, and
// what a host does instead; empty for a driver of the latest protocol (or
// one whose handshake failed).
func (r *Report) Lacks() string {
	if r.Driver.ProtocolVersion == 1 {
		return Lacks1
	}
	return ""
}

// Counts returns the number of passed, failed and skipped cases.
func (r *Report) Counts() (pass, fail, skip int) {
	for _, res := range r.Results {
		switch res.Status {
		case Pass:
			pass++
		case Fail:
			fail++
		case Skip:
			skip++
		}
	}
	return
}

// Check runs the suite against the drivers target starts and returns the report.
// It fails (Report.Pass false) when any case fails; an error is returned
// only for bad options.
func Check(ctx context.Context, target Target, opts Options) (*Report, error) {
	if opts.Profile == "" {
		opts.Profile = Quick
	}
	if opts.Profile != Quick && opts.Profile != Full {
		return nil, fmt.Errorf("unknown profile %q (want quick or full)", opts.Profile)
	}
	switch opts.PowerCut {
	case "":
		opts.PowerCut = PowerCutAuto
	case PowerCutAuto, PowerCutRequire, PowerCutOff:
	default:
		return nil, fmt.Errorf("unknown power cut setting %q (want auto, require or off)", opts.PowerCut)
	}
	for _, t := range opts.Tiers {
		if !slices.Contains(Tiers, t) {
			return nil, fmt.Errorf("unknown tier %q (want basic, durable, leases or shared)", t)
		}
	}
	rep := &Report{Suite: SuiteName, SuiteVersion: Version, Profile: opts.Profile, Target: target.String(), Started: time.Now()}
	defer func() { rep.Duration = time.Since(rep.Started) }()
	if opts.PowerCut != PowerCutOff {
		// A power cut file system left mounted by a suite that died (its
		// mount point answers ENOTCONN, and its directory cannot be
		// removed) is detached.
		parent := opts.ScratchDir
		if parent == "" {
			parent = os.TempDir()
		}
		_, _ = lazyfs.DetachStale(parent)
	}
	scratch, err := os.MkdirTemp(opts.ScratchDir, "conformance-")
	if err != nil {
		return nil, fmt.Errorf("scratch directory: %w", err)
	}
	defer os.RemoveAll(scratch)
	s := &suite{target: target, opts: opts, scratch: scratch}
	// Instances are closed before their data is cleaned (see Cleaner):
	// this runs after the shared instance's close below.
	defer s.clean()

	// Handshake: start once to learn what the driver claims.
	info, err := s.probe(ctx)
	if err != nil {
		rep.Error = err.Error()
		res := Result{Group: "handshake", Name: "start", Tier: TierBasic, Status: Fail, Rules: []string{"handshake.start"}, Message: err.Error()}
		rep.Results = append(rep.Results, res)
		if opts.Progress != nil {
			opts.Progress(res)
		}
		return rep, nil
	}
	rep.Driver = info
	rep.Claimed = claimed(info, opts.Tiers)

	s.info, s.claimed = info, rep.Claimed
	defer func() {
		if s.shared != nil {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = s.shared.Close(cctx)
		}
	}()
	for _, tc := range cases {
		if opts.Only != "" && !strings.Contains(tc.group+"/"+tc.name, opts.Only) {
			continue
		}
		res := s.run(ctx, tc)
		rep.Results = append(rep.Results, res)
		if opts.Progress != nil {
			opts.Progress(res)
		}
	}
	rep.Passed = passed(rep)
	rep.Pass = len(rep.Passed) == len(rep.Claimed)
	rep.Durability = durability(rep)
	return rep, nil
}

func (s *suite) probe(ctx context.Context) (DriverInfo, error) {
	dir, err := os.MkdirTemp(s.scratch, "probe-")
	if err != nil {
		return DriverInfo{}, err
	}
	s.dirs = append(s.dirs, dir)
	in, err := s.target.Start(ctx, dir, nil)
	if err != nil {
		return DriverInfo{}, fmt.Errorf("starting the driver: %w", err)
	}
	defer in.Close(ctx)
	info, err := in.Info(ctx)
	if err != nil {
		return DriverInfo{}, fmt.Errorf("driver info: %w", err)
	}
	return DriverInfo{ProtocolVersion: info.ProtocolVersion, Name: info.Name, Version: info.Version, Durable: info.Durable, Leases: info.Leases}, nil
}

// clean removes what the instances on the suite's data directories keep
// outside them, when the target is a Cleaner.
func (s *suite) clean() {
	cl, ok := s.target.(Cleaner)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, dir := range s.dirs {
		_ = cl.Clean(ctx, dir) // what is left is harmless (see Cleaner)
	}
}

func claimed(info DriverInfo, extra []Tier) []Tier {
	out := []Tier{TierBasic}
	if info.Durable || slices.Contains(extra, TierDurable) {
		out = append(out, TierDurable)
	}
	if info.Leases || slices.Contains(extra, TierLeases) {
		out = append(out, TierLeases)
	}
	if slices.Contains(extra, TierShared) {
		out = append(out, TierShared)
	}
	return out
}

// passed lists the claimed tiers all of whose cases, and all of the lower
// tiers' cases, passed or were left out by the profile.
func passed(rep *Report) []Tier {
	var out []Tier
	for _, t := range rep.Claimed {
		ok := true
		for _, res := range rep.Results {
			if tierRank(res.Tier) <= tierRank(t) && res.Status == Fail {
				ok = false
			}
			if res.Tier == t && res.Status == Skip && !strings.HasPrefix(res.Message, profileSkip) && !strings.HasPrefix(res.Message, protocolSkip) && !strings.HasPrefix(res.Message, powerCutSkip) {
				ok = false
			}
		}
		if !ok {
			break
		}
		out = append(out, t)
	}
	return out
}

// durability says what a passed durable tier was checked against: a power
// cut when its case passed, process kills only otherwise.
func durability(rep *Report) string {
	if !slices.Contains(rep.Passed, TierDurable) {
		return ""
	}
	for _, res := range rep.Results {
		if res.Group == "durability" && res.Name == "power-cut" && res.Status == Pass {
			return DurablePowerCut
		}
	}
	return DurableProcessKill
}

func tierRank(t Tier) int { return slices.Index(Tiers, t) }

const profileSkip = "full profile only"

// testCase is one case of the suite.
type testCase struct {
	group, name string
	tier        Tier
	fullOnly    bool
	fn          func(c *C)
}

// cases is the suite, in the order it runs: each group's file appends its
// cases in its init function (files initialize in name order).
var cases []testCase

type suite struct {
	target  Target
	opts    Options
	info    DriverInfo
	claimed []Tier
	scratch string
	dirs    []string // every data directory made, for clean
	// shared is one instance that the cases which need no data set of
	// their own share, each on threads and runs of its own (the cases that
	// list every run, or kill and relaunch, start their own). It is
	// started on first use and closed at the end.
	shared Instance
}

// sharedInstance returns the suite's shared instance.
func (c *C) sharedInstance() Instance {
	if cr, ok := c.s.shared.(crashReporter); ok && cr.crashes() > 0 {
		// It crashed in an earlier case (reported there): the cases after
		// it get an instance that works.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = c.s.shared.Close(ctx)
		cancel()
		c.s.shared = nil
	}
	if c.s.shared == nil {
		in, err := c.s.target.Start(c.ctx, c.newDir(), nil)
		if err != nil {
			c.Fatalf("handshake.start", "starting the driver: %v", err)
		}
		c.s.shared = in
	}
	c.watchCrashes(c.s.shared)
	return c.s.shared
}

// stop unwinds a case that failed fatally or skipped.
type stop struct{}

func (s *suite) run(ctx context.Context, tc testCase) (res Result) {
	res = Result{Group: tc.group, Name: tc.name, Tier: tc.tier}
	began := time.Now()
	defer func() { res.Duration = time.Since(began) }()
	switch {
	case !slices.Contains(s.claimed, tc.tier):
		res.Status, res.Message = Skip, fmt.Sprintf("tier %s not claimed", tc.tier)
		return res
	case tc.fullOnly && s.opts.Profile != Full:
		res.Status, res.Message = Skip, profileSkip
		return res
	}
	c := &C{ctx: ctx, s: s, full: s.opts.Profile == Full}
	func() {
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(stop); !ok {
					c.errorf("suite.panic", "the case panicked: %v\n%s", r, debug.Stack())
				}
			}
		}()
		tc.fn(c)
	}()
	c.reportCrash()
	c.cleanup()
	switch {
	case c.failed:
		res.Status = Fail
	case c.skip != "":
		res.Status = Skip
	default:
		res.Status = Pass
	}
	slices.Sort(c.rules)
	res.Rules = slices.Compact(c.rules)
	res.Message = strings.Join(c.msgs, "\n")
	switch {
	case c.skip != "" && !c.failed:
		res.Message = c.skip
	case !c.failed:
		res.Message = strings.Join(c.notes, "; ")
	}
	return res
}

// C is the context of one case: it starts driver instances and records
// failures, each against a named rule.
type C struct {
	ctx     context.Context
	s       *suite
	full    bool
	failed  bool
	skip    string
	rules   []string
	msgs    []string
	notes   []string
	closers []func()
	watched []watched // instances used, for crashes (see reportCrash)
}

func (c *C) errorf(rule, format string, args ...any) {
	c.failed = true
	c.rules = append(c.rules, rule)
	c.msgs = append(c.msgs, "["+rule+"] "+fmt.Sprintf(format, args...))
}

// Errorf records a failure of rule and goes on.
func (c *C) Errorf(rule, format string, args ...any) { c.errorf(rule, format, args...) }

// Fatalf records a failure of rule and ends the case.
func (c *C) Fatalf(rule, format string, args ...any) {
	c.errorf(rule, format, args...)
	panic(stop{})
}

// Logf notes something about a case that passes (it goes in its message).
func (c *C) Logf(format string, args ...any) { c.notes = append(c.notes, fmt.Sprintf(format, args...)) }

// Skipf ends the case as skipped.
func (c *C) Skipf(format string, args ...any) {
	c.skip = fmt.Sprintf(format, args...)
	panic(stop{})
}

func (c *C) cleanup() {
	for i := len(c.closers) - 1; i >= 0; i-- {
		c.closers[i]()
	}
	c.closers = nil
}

// newDir returns a fresh scratch data directory.
func (c *C) newDir() string {
	dir, err := os.MkdirTemp(c.s.scratch, "data-")
	if err != nil {
		c.Fatalf("suite.scratch", "scratch directory: %v", err)
	}
	c.s.dirs = append(c.s.dirs, dir)
	return dir
}

// start starts an instance on a fresh data directory.
func (c *C) start() (Instance, string) {
	dir := c.newDir()
	return c.startOn(dir), dir
}

// startOn starts an instance on dir, with extra environment.
func (c *C) startOn(dir string, env ...string) Instance {
	in, err := c.s.target.Start(c.ctx, dir, env)
	if err != nil {
		c.Fatalf("handshake.start", "starting the driver: %v", err)
	}
	if len(env) == 0 { // an instance armed with a fault point is to end on its own
		c.watchCrashes(in)
	}
	c.closers = append(c.closers, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = in.Close(ctx)
	})
	return in
}

// want fails rule when err is not (wrapping) target.
func (c *C) wantErr(rule, what string, err, target error) {
	if !errors.Is(err, target) {
		c.Fatalf(rule, "%s: got error %v, want %v", what, err, target)
	}
}

// ok fails rule when err is not nil.
func (c *C) ok(rule, what string, err error) {
	if err != nil {
		c.Fatalf(rule, "%s: %v", what, err)
	}
}
