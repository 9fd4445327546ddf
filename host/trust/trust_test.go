package trust_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/conformance"
	"github.com/agenthost/agenthost/host/driverhost"
	"github.com/agenthost/agenthost/host/trust"
	"github.com/agenthost/agenthost/internal/builtins"
	"github.com/agenthost/agenthost/internal/pgtest"
	"github.com/agenthost/agenthost/internal/testbin"
	"github.com/agenthost/agenthost/plugins/badgerstore/badgerdriver"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
	"github.com/agenthost/agenthost/sdk/storedriver"
)

// lossyEnv makes this test binary, re-executed, serve a driver that claims
// durability and keeps everything in memory: it fails the suite.
const lossyEnv = "AGENTHOST_TEST_LOSSY_DRIVER"

var bins = map[string]string{}

var noBins string

func TestMain(m *testing.M) {
	if served, err := builtins.ServeIfAsked(); served {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv(echoEnv) != "" {
		storedriver.Serve(storedriver.FactoryFunc(func(context.Context, map[string]string) (driver.Driver, error) {
			return echo{memdriver.New()}, nil
		}))
		os.Exit(0)
	}
	if os.Getenv(myBadgerEnv) != "" {
		storedriver.Serve(storedriver.FactoryFunc(func(ctx context.Context, config map[string]string) (driver.Driver, error) {
			d, err := badgerdriver.Factory{}.Open(ctx, config)
			if err != nil {
				return nil, err
			}
			return renamed{Driver: d, StepStore: d.(driver.StepStore), ThreadLister: d.(driver.ThreadLister)}, nil
		}))
		os.Exit(0)
	}
	if os.Getenv(impostorEnv) != "" {
		storedriver.Serve(storedriver.FactoryFunc(func(context.Context, map[string]string) (driver.Driver, error) {
			return memdriver.New(), nil // it calls itself memstore
		}))
		os.Exit(0)
	}
	if os.Getenv(lossyEnv) != "" {
		storedriver.Serve(storedriver.FactoryFunc(func(context.Context, map[string]string) (driver.Driver, error) {
			return lossy{memdriver.New()}, nil
		}))
		os.Exit(0)
	}
	if os.Getenv(splitEnv) != "" {
		storedriver.Serve(storedriver.FactoryFunc(func(context.Context, map[string]string) (driver.Driver, error) {
			return split{memdriver.New()}, nil
		}))
		os.Exit(0)
	}
	os.Exit(run(m))
}

// echoEnv makes this test binary, re-executed, serve memstore with the
// value of secretEnv in its environment as its version.
const (
	echoEnv   = "AGENTHOST_TEST_ECHO_DRIVER"
	secretEnv = "AGENTHOST_TEST_HOST_SECRET"
)

type echo struct{ *memdriver.Driver }

func (e echo) Info(ctx context.Context) (driver.Info, error) {
	info, err := e.Driver.Info(ctx)
	info.Name, info.Version = "echo", "secret="+os.Getenv(secretEnv)
	return info, err
}

// splitEnv makes this test binary, re-executed, serve a driver that
// persists only the first run record of a batch (S14).
const splitEnv = "AGENTHOST_TEST_SPLIT_DRIVER"

type split struct{ *memdriver.Driver }

func (s split) Commit(ctx context.Context, b driver.Batch) (int64, error) {
	if len(b.Runs) > 1 {
		b.Runs = b.Runs[:1]
	}
	return s.Driver.Commit(ctx, b)
}

type lossy struct{ *memdriver.Driver }

func (l lossy) Info(ctx context.Context) (driver.Info, error) {
	info, err := l.Driver.Info(ctx)
	info.Name, info.Durable = "lossy", true
	return info, err
}

func run(m *testing.M) int {
	return testbin.Run([]string{"badgerstore"}, func(b map[string]string, why string) int {
		bins, noBins = b, why
		return pgtest.Run(m.Run)
	})
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// gate opens a gate on a fresh data dir that counts its certifications.
func gate(t *testing.T, opts trust.Options) (*trust.Gate, *int) {
	t.Helper()
	runs := new(int)
	opts.Logger = quiet
	opts.Builtins = builtins.Registry{}
	opts.Progress = func(r conformance.Result) {
		if r.ID() == "handshake/info" {
			*runs++
		}
	}
	g, err := trust.Open(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return g, runs
}

func commit(t *testing.T, d driver.Driver) {
	t.Helper()
	b := driver.Batch{CommitID: "c1", ThreadID: "user-thread", Thread: record.Thread{ID: "user-thread", Version: 1, LastCommitID: "c1"}}
	if _, err := d.Commit(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

// TestBuiltin: a built-in driver served by the host binary goes through
// the gate once; a certified one is launched without running it again.
func TestBuiltin(t *testing.T) {
	ctx := context.Background()
	g, runs := gate(t, trust.Options{})
	src := trust.Source{Builtin: "memstore"}
	d, cert, err := g.Launch(ctx, src, driverhost.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	commit(t, d)
	_ = d.Close(ctx)
	exe, _ := os.Executable()
	if *runs != 1 || !strings.HasSuffix(cert.Key, "+memstore") || cert.SuiteVersion != conformance.Version || cert.Source != exe {
		t.Fatalf("after the first launch: %d suite runs, certificate %+v", *runs, cert)
	}
	if !strings.HasPrefix(cert.Binary, g.Dir()) {
		t.Fatalf("launched %s, not the gate's copy", cert.Binary)
	}
	d, _, err = g.Launch(ctx, src, driverhost.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	_ = d.Close(ctx)
	if *runs != 1 {
		t.Fatalf("a certified driver ran the suite again (%d runs)", *runs)
	}
	// A new gate on the same data dir reads the certificate.
	g2, err := trust.Open(filepath.Dir(g.Dir()), trust.Options{NoAutoCertify: true, Builtins: builtins.Registry{}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	d, _, err = g2.Launch(ctx, src, driverhost.Config{Logger: quiet})
	if err != nil {
		t.Fatalf("launch after a restart: %v", err)
	}
	_ = d.Close(ctx)
	// Another built-in of the same binary is another certificate.
	if _, ok, _ := g2.Lookup(trust.Source{Builtin: "badgerstore"}); ok {
		t.Fatal("badgerstore certified by memstore's certificate")
	}
	if _, _, err := g2.Launch(ctx, trust.Source{Builtin: "badgerstore"}, driverhost.Config{Logger: quiet}); !errors.Is(err, trust.ErrNotCertified) {
		t.Fatalf("uncertified badgerstore without auto-certify: %v", err)
	}
	// A gate told of no built-in drivers knows none, certified or not.
	g3, err := trust.Open(filepath.Dir(g.Dir()), trust.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := g3.Lookup(src); err == nil || !strings.Contains(err.Error(), "no built-in store driver") {
		t.Fatalf("a gate without built-ins looked memstore up: %v", err)
	}
	// Revoke: the next launch runs the suite again.
	if gone, err := g.Revoke(cert.Key[:12]); err != nil || len(gone) != 1 {
		t.Fatalf("Revoke = %v, %v", gone, err)
	}
	if certs, _ := g.List(); len(certs) != 0 {
		t.Fatalf("after revoke: %v", certs)
	}
	if _, err := g.Revoke(cert.Key); !errors.Is(err, trust.ErrNoCertificate) {
		t.Fatalf("second revoke: %v", err)
	}
	d, _, err = g.Launch(ctx, src, driverhost.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	_ = d.Close(ctx)
	if *runs != 2 {
		t.Fatalf("after revoke the launch ran the suite %d times in all, want 2", *runs)
	}
}

// TestBinary: a driver binary is certified on scratch data, never the
// user's, launched from a read-only copy; a modified binary is refused or
// must pass again.
func TestBinary(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	g, runs := gate(t, trust.Options{})
	// The driver the user points at, in a directory the user owns.
	bin := filepath.Join(t.TempDir(), "my-driver")
	copyFile(t, exe, bin)
	env := []string{myBadgerEnv + "=1"}
	userData := t.TempDir()
	cfg := driverhost.Config{DriverConfig: map[string]string{"dir": userData}, Logger: quiet}
	d, cert, err := g.Launch(ctx, trust.Source{Path: bin, Env: env}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if *runs != 1 || !slices.Contains(cert.Tiers, conformance.TierDurable) {
		t.Fatalf("certification: %d runs, %+v", *runs, cert)
	}
	if cert.Driver.ProtocolVersion != 2 || cert.Lacks != "" || cert.Protocol() != "2 (steps)" || d.Protocol() != 2 {
		t.Fatalf("certificate of a protocol 2 driver: protocol %d (%s), lacks %q; launched speaking %d", cert.Driver.ProtocolVersion, cert.Protocol(), cert.Lacks, d.Protocol())
	}
	// The suite wrote nothing to the user's data.
	for _, th := range []string{"atom", "s1", "kill-0", "crash"} {
		snap, err := d.LoadThread(ctx, th)
		if err != nil || snap.Thread.Version != 0 {
			t.Fatalf("the user's data holds suite thread %s: %+v, %v", th, snap.Thread, err)
		}
	}
	commit(t, d)
	_ = d.Close(ctx)
	st, err := os.Stat(cert.Binary)
	if err != nil || st.Mode().Perm()&0o222 != 0 {
		t.Fatalf("the gate's copy %s: %v, %v; want read-only", cert.Binary, st.Mode(), err)
	}

	// The gate's copy modified: refused.
	tamper(t, cert.Binary)
	if _, _, err := g.Launch(ctx, trust.Source{Path: bin, Env: env}, cfg); !errors.Is(err, trust.ErrTampered) {
		t.Fatalf("launch of a modified copy: %v, want ErrTampered", err)
	}
	if _, err := g.Revoke(cert.Key); err != nil {
		t.Fatal(err)
	}

	// The user's binary replaced: a new checksum, which must pass again.
	tamper(t, bin)
	d, cert2, err := g.Launch(ctx, trust.Source{Path: bin, Env: env}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	_ = d.Close(ctx)
	if *runs != 2 || cert2.SHA256 == cert.SHA256 {
		t.Fatalf("a replaced binary: %d runs, certificate %s (was %s)", *runs, cert2.SHA256, cert.SHA256)
	}
}

// TestRefused: a driver that fails the suite is refused, with the rules
// it broke, and nothing is recorded: one that loses acknowledged writes on
// a kill, and one that persists only one record of an absorbing pair (S14).
func TestRefused(t *testing.T) {
	ctx := context.Background()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for env, rule := range map[string]string{lossyEnv: "durability.acked-survives-kill", splitEnv: "atomicity.absorbing-pair"} {
		t.Run(rule, func(t *testing.T) {
			g, _ := gate(t, trust.Options{})
			src := trust.Source{Path: exe, Env: []string{env + "=1"}}
			_, _, err := g.Launch(ctx, src, driverhost.Config{Logger: quiet})
			var refused *trust.RefusedError
			if !errors.As(err, &refused) || !errors.Is(err, trust.ErrRefused) || !slices.Contains(refused.Rules, rule) {
				t.Fatalf("launch of a broken driver: %v, want it refused for %s", err, rule)
			}
			if !strings.Contains(err.Error(), rule) {
				t.Fatalf("the error does not list the rule: %v", err)
			}
			if certs, _ := g.List(); len(certs) != 0 {
				t.Fatalf("a refused driver was certified: %v", certs)
			}
			if ents, _ := os.ReadDir(filepath.Join(g.Dir(), "sha256")); len(ents) != 0 {
				t.Fatalf("a refused driver's copy was kept: %v", ents)
			}
		})
	}
}

// myBadgerEnv makes this test binary, re-executed, serve badgerstore under
// a name of its own: a third-party durable driver.
const myBadgerEnv = "AGENTHOST_TEST_MY_BADGER_DRIVER"

type renamed struct {
	driver.Driver
	driver.StepStore
	driver.ThreadLister
}

func (r renamed) Info(ctx context.Context) (driver.Info, error) {
	info, err := r.Driver.Info(ctx)
	info.Name = "my-badger"
	return info, err
}

// impostorEnv makes this test binary, re-executed, serve a driver that
// works and calls itself by a built-in driver's name (memstore).
const impostorEnv = "AGENTHOST_TEST_IMPOSTOR_DRIVER"

// TestBuiltinNameRefused: a driver binary given by its path that calls
// itself by the name of a driver built into the host is refused, though it
// passes the suite, and leaves no certificate nor copy.
func TestBuiltinNameRefused(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	g, _ := gate(t, trust.Options{})
	_, _, err = g.Launch(context.Background(), trust.Source{Path: exe, Env: []string{impostorEnv + "=1"}}, driverhost.Config{Logger: quiet})
	var refused *trust.RefusedError
	if !errors.As(err, &refused) || !slices.Equal(refused.Rules, []string{trust.RuleBuiltinName}) {
		t.Fatalf("launch of a driver named memstore by its path: %v, want it refused for %s alone", err, trust.RuleBuiltinName)
	}
	if !refused.Report.Pass {
		t.Fatalf("the impostor failed the suite (%v): the test shows nothing", refused.Report.FailedRules())
	}
	if certs, _ := g.List(); len(certs) != 0 {
		t.Fatalf("a refused driver was certified: %v", certs)
	}
	if ents, _ := os.ReadDir(filepath.Join(g.Dir(), "sha256")); len(ents) != 0 {
		t.Fatalf("a refused driver's copy was kept: %v", ents)
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// tamper appends bytes to a binary (it still runs).
func tamper(t *testing.T, path string) {
	t.Helper()
	_ = os.Chmod(filepath.Dir(path), 0o700)
	_ = os.Chmod(path, 0o700)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("tampered")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestHostEnvironment: a driver launched through the gate gets its own
// environment, never the host's.
func TestHostEnvironment(t *testing.T) {
	ctx := context.Background()
	t.Setenv(secretEnv, "leaked")
	g, _ := gate(t, trust.Options{})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	d, cert, err := g.Launch(ctx, trust.Source{Path: exe, Env: []string{echoEnv + "=1"}}, driverhost.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(ctx)
	info, err := d.Info(ctx)
	if err != nil || info.Version != "secret=" || cert.Driver.Version != "secret=" {
		t.Fatalf("the driver saw the host's environment: %+v (certified as %+v), %v", info, cert.Driver, err)
	}
}

// TestProtocolOfCertificate: a certificate says what store protocol its
// driver speaks, and for protocol 1 what a host does instead of steps.
func TestProtocolOfCertificate(t *testing.T) {
	c := trust.Certificate{Driver: conformance.DriverInfo{ProtocolVersion: 1}}
	if p := c.Protocol(); !strings.HasPrefix(p, "1 (no steps") || !strings.Contains(p, "step 0") {
		t.Fatalf("protocol of a version 1 certificate: %q", p)
	}
}
