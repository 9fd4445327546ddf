package trust

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agenthost/agenthost/conformance"
	"github.com/agenthost/agenthost/host/driverhost"
)

// Errors of the gate.
var (
	// ErrRefused: the driver failed the conformance suite (see *RefusedError).
	ErrRefused = errors.New("driver refused: it failed the conformance suite")
	// ErrNotCertified: the driver is not certified and the gate was told not
	// to certify on its own (Options.NoAutoCertify).
	ErrNotCertified = errors.New("driver not certified")
	// ErrTampered: the gate's copy of a certified binary no longer has the
	// certified checksum.
	ErrTampered = errors.New("certified driver binary was modified")
	// ErrNoCertificate: Revoke found no certificate to revoke.
	ErrNoCertificate = errors.New("no such certificate")
)

// RefusedError is the error of a driver that failed the suite. It wraps
// ErrRefused.
type RefusedError struct {
	Source string
	// Rules are the rules the driver broke.
	Rules  []string
	Report *conformance.Report
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%v: %s broke %s", ErrRefused, e.Source, strings.Join(e.Rules, ", "))
}

func (e *RefusedError) Unwrap() error { return ErrRefused }

// Source is a driver to certify or launch: a binary, or a built-in driver
// of the host binary.
type Source struct {
	// Path is the driver binary. Ignored when Builtin is set.
	Path string
	// Builtin names a driver built into the host binary, served by the
	// binary re-executed (see Options.Builtins).
	Builtin string
	// Env is the driver process's whole environment (its own config).
	Env []string
	// ScratchConfig is the configuration of a scratch instance on dir. Nil:
	// for a built-in, what Options.Builtins' Scratch says for the
	// configuration it is launched with (pgstore: the same database, a
	// scratch schema, dropped after the suite); otherwise the driver's
	// launch configuration with its "dir" key, if any, set to dir.
	ScratchConfig conformance.ConfigFunc
}

func (s Source) String() string {
	if s.Builtin != "" {
		return "builtin:" + s.Builtin
	}
	return s.Path
}

// Certificate records that a driver binary passed the suite.
type Certificate struct {
	// Key identifies the certificate: "sha256:HEX", with "+NAME" for a
	// built-in driver NAME.
	Key    string `json:"key"`
	SHA256 string `json:"sha256"`
	// Builtin is the built-in driver's name, empty for a driver binary.
	Builtin string `json:"builtin,omitempty"`
	// Source is the path the binary was certified from.
	Source string `json:"source"`
	// Binary is the gate's read-only copy, the file the host launches.
	Binary       string                 `json:"binary"`
	SuiteVersion string                 `json:"suite_version"`
	Profile      conformance.Profile    `json:"profile"`
	Driver       conformance.DriverInfo `json:"driver"`
	Tiers        []conformance.Tier     `json:"tiers"`
	// Lacks says what the driver lacks of the store protocol, and what a
	// host does instead (conformance.Report.Lacks); empty when nothing.
	Lacks string `json:"lacks,omitempty"`
	// Durability says what the durable tier was checked against, when the
	// driver passed it (conformance.Report.Durability): "power-cut", or
	// "process-kill" when the gate could not cut the power.
	Durability  string    `json:"durability,omitempty"`
	CertifiedAt time.Time `json:"certified_at"`
}

// Protocol describes the store protocol the certified driver speaks, for
// people: "2 (steps)", or "1 (no steps: ...)" with what a host does
// instead.
func (c Certificate) Protocol() string {
	if c.Driver.ProtocolVersion >= 2 {
		return fmt.Sprintf("%d (steps)", c.Driver.ProtocolVersion)
	}
	return fmt.Sprintf("%d (no steps: recovered runs restart from step 0, no injection)", c.Driver.ProtocolVersion)
}

// Options configure a Gate.
type Options struct {
	// Profile is the suite profile a driver must pass. Default quick.
	Profile conformance.Profile
	// NoAutoCertify makes Launch refuse an uncertified driver with
	// ErrNotCertified instead of certifying it.
	NoAutoCertify bool
	// Logger receives the gate's and the drivers' logs. Default slog.Default.
	Logger *slog.Logger
	// Progress, if set, sees each result of a certification as it comes.
	Progress func(conformance.Result)
	// Builtins are the drivers built into the host binary, which
	// Source.Builtin names; nil: none.
	Builtins Builtins
}

// Builtins are the drivers built into the host binary, served by the
// binary re-executed. The command wires in its registry.
type Builtins interface {
	// Launch returns the configuration that launches the built-in driver
	// name (its Path and Env), opened with driverConfig.
	Launch(name string, driverConfig map[string]string) (driverhost.Config, error)
	// Scratch returns how the conformance suite makes the scratch instances
	// of the built-in driver name that runs with configuration launch.
	Scratch(name string, launch map[string]string) (conformance.Scratch, error)
}

// Gate certifies drivers and launches certified ones.
type Gate struct {
	dir  string
	opts Options
	mu   sync.Mutex // serializes certifications and trust file updates
}

// Open returns the gate over the host data directory dataDir.
func Open(dataDir string, opts Options) (*Gate, error) {
	if opts.Profile == "" {
		opts.Profile = conformance.Quick
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	dir := filepath.Join(dataDir, "drivers")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("trust: %w", err)
	}
	g := &Gate{dir: dir, opts: opts}
	g.ownerWritableDirs()
	return g, nil
}

// ownerWritableDirs gives the copies' directories back their owner's write
// permission: earlier versions made them read-only (0500), which stopped
// an ordinary rm -rf of the data directory by its owner. The copies
// themselves stay read-only; the checksum pinned at every launch is what
// refuses a modified one. It does what it may: on a directory the caller
// cannot write (driver list, prune --dry-run by another user) Open still
// succeeds.
func (g *Gate) ownerWritableDirs() {
	dirs, _ := filepath.Glob(filepath.Join(g.dir, "sha256", "*"))
	for _, d := range dirs {
		if st, err := os.Lstat(d); err == nil && st.IsDir() && st.Mode().Perm()&0o200 == 0 {
			_ = os.Chmod(d, 0o700)
		}
	}
}

// lockDir takes an exclusive flock on the gate's directory, held by
// certifications, revokes and prunes of every process on the data
// directory: a prune must not remove the copy or the scratch data of a
// certification in another process. It returns the unlock.
func (g *Gate) lockDir() (func(), error) {
	f, err := os.Open(g.dir)
	if err != nil {
		return nil, fmt.Errorf("trust: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("trust: locking %s: %w", g.dir, err)
	}
	return func() { f.Close() }, nil // closing releases the lock
}

// Dir is the directory the gate keeps its trust file and binaries in.
func (g *Gate) Dir() string { return g.dir }

func (g *Gate) trustFile() string { return filepath.Join(g.dir, "trust.json") }

type trustFile struct {
	Certificates []Certificate `json:"certificates"`
}

func (g *Gate) load() ([]Certificate, error) {
	b, err := os.ReadFile(g.trustFile())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("trust: %w", err)
	}
	var tf trustFile
	if err := json.Unmarshal(b, &tf); err != nil {
		return nil, fmt.Errorf("trust: %s: %w", g.trustFile(), err)
	}
	return tf.Certificates, nil
}

func (g *Gate) save(certs []Certificate) error {
	b, err := json.MarshalIndent(trustFile{Certificates: certs}, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(g.dir, "trust-*.json")
	if err != nil {
		return fmt.Errorf("trust: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err = tmp.Write(append(b, '\n')); err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), g.trustFile())
	}
	if err != nil {
		return fmt.Errorf("trust: writing %s: %w", g.trustFile(), err)
	}
	return nil
}

// List returns the certificates, by key.
func (g *Gate) List() ([]Certificate, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	certs, err := g.load()
	slices.SortFunc(certs, func(a, b Certificate) int { return strings.Compare(a.Key, b.Key) })
	return certs, err
}

// Revoke removes the certificates whose key is key or starts with it (at
// least 8 characters of a key), and returns them. The driver must pass the
// suite again before it is launched.
func (g *Gate) Revoke(key string) ([]Certificate, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	unlock, err := g.lockDir()
	if err != nil {
		return nil, err
	}
	defer unlock()
	certs, err := g.load()
	if err != nil {
		return nil, err
	}
	var kept, gone []Certificate
	for _, c := range certs {
		if c.Key == key || (len(key) >= 8 && strings.HasPrefix(c.Key, key)) {
			gone = append(gone, c)
		} else {
			kept = append(kept, c)
		}
	}
	if len(gone) == 0 {
		return nil, fmt.Errorf("%w: %q", ErrNoCertificate, key)
	}
	if err := g.save(kept); err != nil {
		return nil, err
	}
	// A copy no certificate names any more is never launched again.
	var errs []error
	for _, c := range gone {
		if !slices.ContainsFunc(kept, func(k Certificate) bool { return k.SHA256 == c.SHA256 }) {
			if err := g.removeCopy(c.SHA256); err != nil {
				errs = append(errs, fmt.Errorf("trust: the certificate is revoked, but its copy was not removed (driver prune retries): %w", err))
			}
		}
	}
	return gone, errors.Join(errs...)
}

// PruneOptions say what Prune removes besides the copies no certificate
// names.
type PruneOptions struct {
	// Stale also removes the certificates this host can no longer use: of
	// another suite version, or whose source path no longer holds the
	// certified binary (a driver or agenthost binary replaced since), and
	// their copies. A server of another agenthost version still running
	// on the same data directory may need its certificate to relaunch its
	// driver: stop it first.
	Stale bool
	// DryRun reports what would be removed and removes nothing.
	DryRun bool
}

// Pruned is what Prune removed (or would remove).
type Pruned struct {
	// Certificates are the stale certificates removed.
	Certificates []Certificate
	// Copies are the directories of binary copies removed; those that
	// could not be are in Prune's error, not here.
	Copies []string
	// Bytes is the size of the copies.
	Bytes int64
}

// Prune removes the gate's copies of driver binaries that no certificate
// names (left by an older version's revoke or an interrupted
// certification) and the leftovers of certifications (scratch data,
// incomplete copies); with opts.Stale also the certificates this host can
// no longer use. It waits for a certification in progress, in this process
// or another on the same data directory, to end first: their copies and
// scratch data are theirs until then.
func (g *Gate) Prune(opts PruneOptions) (Pruned, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !opts.DryRun {
		unlock, err := g.lockDir()
		if err != nil {
			return Pruned{}, err
		}
		defer unlock()
	}
	certs, err := g.load()
	if err != nil {
		return Pruned{}, err
	}
	var out Pruned
	kept := certs
	if opts.Stale {
		kept = nil
		for _, c := range certs {
			if c.SuiteVersion != conformance.Version || !sourceHolds(c) {
				out.Certificates = append(out.Certificates, c)
			} else {
				kept = append(kept, c)
			}
		}
	}
	used := map[string]bool{}
	for _, c := range kept {
		used[c.SHA256] = true
	}
	dirs, _ := filepath.Glob(filepath.Join(g.dir, "sha256", "*"))
	for _, d := range dirs {
		if used[filepath.Base(d)] {
			continue
		}
		out.Copies = append(out.Copies, d)
		out.Bytes += dirSize(d)
	}
	if opts.DryRun {
		return out, nil
	}
	if len(out.Certificates) > 0 {
		if err := g.save(kept); err != nil {
			return Pruned{}, err
		}
	}
	var errs []error
	removed := out.Copies[:0]
	for _, d := range out.Copies {
		size := dirSize(d)
		_ = os.Chmod(d, 0o700)
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("trust: removing copy %s: %w", d, err))
			out.Bytes -= size
			continue
		}
		removed = append(removed, d)
	}
	out.Copies = removed
	if err := os.RemoveAll(filepath.Join(g.dir, "scratch")); err != nil {
		errs = append(errs, err)
	}
	return out, errors.Join(errs...)
}

// sourceHolds reports whether c's source path still holds the binary c
// certifies.
func sourceHolds(c Certificate) bool {
	sum, err := fileSum(c.Source)
	return err == nil && sum == c.SHA256
}

func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			if info, err := e.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// removeCopy removes the copy of the binary with checksum sum.
func (g *Gate) removeCopy(sum string) error {
	dir := filepath.Join(g.dir, "sha256", sum)
	_ = os.Chmod(dir, 0o700)
	return os.RemoveAll(dir)
}

// resolved is a source with its binary and checksum.
type resolved struct {
	src    Source
	path   string // the binary to copy
	sum    string // hex SHA-256 of it
	key    string
	config conformance.ConfigFunc
	clean  func(ctx context.Context, dir string) error // nil: scratch data lives in dir alone
	env    []string
}

func (g *Gate) resolve(src Source, launch map[string]string) (*resolved, error) {
	r := &resolved{src: src, path: src.Path, config: src.ScratchConfig, env: slices.Clone(src.Env)}
	if src.Builtin != "" {
		cfg, err := g.builtin(src.Builtin)
		if err != nil {
			return nil, err
		}
		r.path, r.env = cfg.Path, append(cfg.Env, r.env...)
		if r.config == nil {
			sc, err := g.opts.Builtins.Scratch(src.Builtin, launch)
			if err != nil {
				return nil, err
			}
			r.config, r.clean = sc.Config, sc.Clean
		}
	}
	if r.path == "" {
		return nil, errors.New("trust: no driver binary")
	}
	if r.config == nil {
		r.config = func(dir string) map[string]string {
			m := maps.Clone(launch)
			if _, ok := m["dir"]; ok {
				m["dir"] = dir
			}
			return m
		}
	}
	sum, err := fileSum(r.path)
	if err != nil {
		return nil, fmt.Errorf("trust: driver binary: %w", err)
	}
	r.sum = sum
	r.key = "sha256:" + sum
	if src.Builtin != "" {
		r.key += "+" + src.Builtin
	}
	return r, nil
}

// builtin returns the launch configuration of the built-in driver name.
func (g *Gate) builtin(name string) (driverhost.Config, error) {
	if g.opts.Builtins == nil {
		return driverhost.Config{}, fmt.Errorf("trust: no built-in store driver %q: the gate knows no built-in drivers (Options.Builtins)", name)
	}
	return g.opts.Builtins.Launch(name, nil)
}

func fileSum(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// copyName is the file name of every copy: one binary per checksum, however
// many paths and built-in names it was certified under.
const copyName = "driver"

// store copies the binary into the content-addressed directory, read-only,
// and returns the copy's path. An existing intact copy is reused.
func (g *Gate) store(r *resolved) (string, error) {
	dir := filepath.Join(g.dir, "sha256", r.sum)
	dst := filepath.Join(dir, copyName)
	if sum, err := fileSum(dst); err == nil && sum == r.sum {
		return dst, nil
	}
	if err := os.MkdirAll(filepath.Join(g.dir, "sha256"), 0o700); err != nil {
		return "", err
	}
	tmpDir, err := os.MkdirTemp(filepath.Join(g.dir, "sha256"), "incoming-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmpDir)
	in, err := os.Open(r.path)
	if err != nil {
		return "", err
	}
	defer in.Close()
	tmp := filepath.Join(tmpDir, copyName)
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o500)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(out, h), in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != r.sum {
		return "", fmt.Errorf("%s changed while it was copied", r.path)
	}
	_ = os.Chmod(dir, 0o700) // a stale copy: replace it
	_ = os.RemoveAll(dir)
	if err := os.Rename(tmpDir, dir); err != nil {
		return "", err
	}
	return dst, nil
}

// Certify runs the suite on a scratch instance of the driver, from the
// gate's copy of its binary, and records a certificate when it passes. A
// driver that fails is refused with a *RefusedError naming the broken
// rules; the report is returned either way. Certify always runs the suite,
// also for a certified driver.
func (g *Gate) Certify(ctx context.Context, src Source) (Certificate, *conformance.Report, error) {
	return g.certify(ctx, src, nil, true)
}

// certify certifies src; unless always, a current certificate found once
// the lock is held (another launch certified it meanwhile) is returned.
func (g *Gate) certify(ctx context.Context, src Source, launch map[string]string, always bool) (Certificate, *conformance.Report, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	unlock, err := g.lockDir()
	if err != nil {
		return Certificate{}, nil, err
	}
	defer unlock()
	r, err := g.resolve(src, launch)
	if err != nil {
		return Certificate{}, nil, err
	}
	if !always {
		certs, err := g.load()
		if err != nil {
			return Certificate{}, nil, err
		}
		for _, c := range certs {
			if c.Key == r.key && c.SuiteVersion == conformance.Version {
				return c, nil, nil
			}
		}
	}
	bin, err := g.store(r)
	if err != nil {
		return Certificate{}, nil, fmt.Errorf("trust: copying %s: %w", r.path, err)
	}
	sum, _ := hex.DecodeString(r.sum)
	scratch := filepath.Join(g.dir, "scratch")
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		return Certificate{}, nil, err
	}
	g.opts.Logger.Info("certifying store driver", "driver", src.String(), "sha256", r.sum, "suite", conformance.Version, "profile", g.opts.Profile)
	f := conformance.Launched(src.String(), driverhost.Config{Path: bin, Checksum: sum, Env: r.env, Logger: g.opts.Logger}, r.config)
	if r.clean != nil {
		f = conformance.WithCleanup(f, r.clean)
	}
	rep, err := conformance.Check(ctx, f, conformance.Options{Profile: g.opts.Profile, ScratchDir: scratch, Progress: g.opts.Progress})
	if err != nil {
		return Certificate{}, nil, err
	}
	if src.Builtin == "" && g.builtinName(rep.Driver.Name) {
		// A binary given by its path that names itself as a driver built
		// into the host would pass for it in the logs, the certificates
		// and the reports.
		g.dropCopy(r)
		rules := append(rep.FailedRules(), RuleBuiltinName)
		slices.Sort(rules)
		g.opts.Logger.Error("store driver refused: a driver binary given by its path calls itself by the name of a built-in driver",
			"driver", src.String(), "name", rep.Driver.Name)
		return Certificate{}, rep, &RefusedError{Source: src.String(), Rules: slices.Compact(rules), Report: rep}
	}
	if !rep.Pass {
		g.dropCopy(r)
		return Certificate{}, rep, &RefusedError{Source: src.String(), Rules: rep.FailedRules(), Report: rep}
	}
	cert := Certificate{Key: r.key, SHA256: r.sum, Builtin: src.Builtin, Source: r.path, Binary: bin,
		SuiteVersion: rep.SuiteVersion, Profile: rep.Profile, Driver: rep.Driver, Tiers: rep.Passed, Lacks: rep.Lacks(), Durability: rep.Durability, CertifiedAt: time.Now().UTC()}
	certs, err := g.load()
	if err != nil {
		return Certificate{}, rep, err
	}
	certs = slices.DeleteFunc(certs, func(c Certificate) bool { return c.Key == cert.Key })
	if err := g.save(append(certs, cert)); err != nil {
		return Certificate{}, rep, err
	}
	g.opts.Logger.Info("store driver certified", "driver", src.String(), "key", cert.Key, "tiers", rep.Passed, "protocol", rep.Driver.ProtocolVersion)
	if cert.Durability == conformance.DurableProcessKill {
		g.opts.Logger.Warn("the durable tier was checked against process kills only, not a power cut", "driver", src.String(), "why", rep.DurabilityText())
	}
	if cert.Lacks != "" {
		g.opts.Logger.Warn("the certified store driver lacks part of the store protocol", "driver", src.String(), "lacks", cert.Lacks)
	}
	return cert, rep, nil
}

// RuleBuiltinName is the rule of a refusal of a driver binary, given by
// its path, whose Info names it as one of the drivers built into the host.
const RuleBuiltinName = "handshake.builtin-name"

// builtinName reports whether name is a driver built into the host, as
// far as Options.Builtins can list them (a Names method).
func (g *Gate) builtinName(name string) bool {
	b, ok := g.opts.Builtins.(interface{ Names() []string })
	return ok && slices.Contains(b.Names(), name)
}

// dropCopy removes the copy of a binary no certificate needs.
func (g *Gate) dropCopy(r *resolved) {
	certs, _ := g.load()
	if slices.ContainsFunc(certs, func(c Certificate) bool { return c.SHA256 == r.sum }) {
		return
	}
	if err := g.removeCopy(r.sum); err != nil {
		g.opts.Logger.Warn("removing the copy of a refused driver (driver prune retries)", "sha256", r.sum, "error", err)
	}
}

// Lookup returns the current certificate of src: one for its binary's
// checksum and this suite version, whose copy is intact.
func (g *Gate) Lookup(src Source) (Certificate, bool, error) {
	r, err := g.resolve(src, nil)
	if err != nil {
		return Certificate{}, false, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	certs, err := g.load()
	if err != nil {
		return Certificate{}, false, err
	}
	for _, c := range certs {
		if c.Key == r.key && c.SuiteVersion == conformance.Version {
			return c, true, nil
		}
	}
	return Certificate{}, false, nil
}

// Launch is driverhost.Launch behind the gate: it certifies src first
// unless it holds a current certificate for it, then launches the gate's
// copy of the binary with its checksum pinned. cfg gives the driver's
// configuration, logger and timeouts; its Path, Env and Checksum are set
// from src and the certificate.
func (g *Gate) Launch(ctx context.Context, src Source, cfg driverhost.Config) (*driverhost.Driver, Certificate, error) {
	cert, ok, err := g.Lookup(src)
	if err != nil {
		return nil, Certificate{}, err
	}
	if !ok {
		if g.opts.NoAutoCertify {
			r, err := g.resolve(src, nil)
			if err != nil {
				return nil, Certificate{}, err
			}
			return nil, Certificate{}, fmt.Errorf("%w: %s (sha256 %s) has no certificate and the gate certifies none on its own", ErrNotCertified, src, r.sum)
		}
		if cert, _, err = g.certify(ctx, src, cfg.DriverConfig, false); err != nil {
			return nil, Certificate{}, err
		}
	}
	sum, err := fileSum(cert.Binary)
	if err != nil || sum != cert.SHA256 {
		return nil, cert, fmt.Errorf("%w: %s (certificate %s): revoke it and certify again", ErrTampered, cert.Binary, cert.Key)
	}
	pin, _ := hex.DecodeString(cert.SHA256)
	cfg.Path, cfg.Checksum = cert.Binary, pin
	cfg.Env = slices.Clone(src.Env)
	if src.Builtin != "" {
		lc, err := g.builtin(src.Builtin)
		if err != nil {
			return nil, cert, err
		}
		cfg.Env = append(lc.Env, cfg.Env...)
	}
	if cfg.Logger == nil {
		cfg.Logger = g.opts.Logger
	}
	d, err := driverhost.Launch(ctx, cfg)
	if err != nil {
		return nil, cert, err
	}
	return d, cert, nil
}
