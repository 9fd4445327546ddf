package trust_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/agenthost/host/driverhost"
	"github.com/agenthost/agenthost/host/trust"
	"github.com/agenthost/agenthost/internal/builtins"
)

// rmAsOwner runs rm -rf dir as dir's owner: as the unprivileged user
// nobody after handing it the tree when the test runs as root (root's
// rm ignores permissions).
func rmAsOwner(t *testing.T, dir string) {
	t.Helper()
	cmd := exec.Command("rm", "-rf", dir)
	if os.Geteuid() == 0 {
		const nobody = 65534
		if err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, nobody, nobody)
		}); err != nil {
			t.Fatal(err)
		}
		// The parent must let nobody unlink dir itself.
		parent := filepath.Dir(dir)
		if err := os.Chown(parent, nobody, nobody); err != nil {
			t.Fatal(err)
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("rm -rf %s as its owner: %v\n%s", dir, err, out)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s still there after rm -rf: %v", dir, err)
	}
}

// TestDataDirRemovable: the gate's read-only copies do not stop their
// owner's rm -rf of the data directory, also for directories an earlier
// version made read-only.
func TestDataDirRemovable(t *testing.T) {
	ctx := context.Background()
	// Directly under the temporary directory: nobody must reach it.
	parent, err := os.MkdirTemp("", "agenthost-rm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	data := filepath.Join(parent, "data")
	g, err := trust.Open(data, trust.Options{Builtins: builtins.Registry{}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	d, cert, err := g.Launch(ctx, trust.Source{Builtin: "memstore"}, driverhost.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	_ = d.Close(ctx)
	if st, err := os.Stat(cert.Binary); err != nil || st.Mode().Perm()&0o222 != 0 {
		t.Fatalf("the copy %s: %v %v; want read-only", cert.Binary, st.Mode(), err)
	}
	// The layout earlier versions left: the copy's directory read-only.
	if err := os.Chmod(filepath.Dir(cert.Binary), 0o500); err != nil {
		t.Fatal(err)
	}
	if _, err := trust.Open(data, trust.Options{Builtins: builtins.Registry{}, Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	rmAsOwner(t, data)
}

// TestPrune: copies nobody uses are removed; revoke removes its copy; with
// Stale, certificates whose source changed go too.
func TestPrune(t *testing.T) {
	ctx := context.Background()
	g, _ := gate(t, trust.Options{})
	d, cert, err := g.Launch(ctx, trust.Source{Builtin: "memstore"}, driverhost.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	_ = d.Close(ctx)
	// A copy no certificate names, read-only as earlier versions left it.
	orphan := filepath.Join(g.Dir(), "sha256", "0123456789abcdef")
	if err := os.MkdirAll(orphan, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(orphan, "driver"), make([]byte, 1000), 0o500); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(orphan, 0o500); err != nil {
		t.Fatal(err)
	}
	dry, err := g.Prune(trust.PruneOptions{DryRun: true})
	if err != nil || len(dry.Copies) != 1 || dry.Copies[0] != orphan || dry.Bytes != 1000 {
		t.Fatalf("dry run: %+v, %v", dry, err)
	}
	if _, err := os.Stat(orphan); err != nil {
		t.Fatal("the dry run removed the copy")
	}
	if p, err := g.Prune(trust.PruneOptions{}); err != nil || len(p.Copies) != 1 || len(p.Certificates) != 0 {
		t.Fatalf("prune: %+v, %v", p, err)
	}
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Fatalf("orphan copy still there: %v", err)
	}
	if _, err := os.Stat(cert.Binary); err != nil {
		t.Fatalf("the certified copy was removed: %v", err)
	}
	// Stale: the certificate's source no longer holds its binary.
	if p, err := g.Prune(trust.PruneOptions{Stale: true}); err != nil || len(p.Certificates) != 0 {
		t.Fatalf("nothing is stale yet: %+v, %v", p, err)
	}
	certs, _ := g.List()
	certs[0].Source = filepath.Join(t.TempDir(), "replaced")
	b, _ := json.Marshal(map[string]any{"certificates": certs})
	if err := os.WriteFile(filepath.Join(g.Dir(), "trust.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if p, err := g.Prune(trust.PruneOptions{Stale: true}); err != nil || len(p.Certificates) != 1 || len(p.Copies) != 1 {
		t.Fatalf("stale prune: %+v, %v", p, err)
	}
	if _, err := os.Stat(filepath.Dir(cert.Binary)); !os.IsNotExist(err) {
		t.Fatalf("stale copy still there: %v", err)
	}
	// Revoke removes the copy it no longer needs.
	d, cert, err = g.Launch(ctx, trust.Source{Builtin: "memstore"}, driverhost.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	_ = d.Close(ctx)
	if _, err := g.Revoke(cert.Key); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(cert.Binary)); !os.IsNotExist(err) {
		t.Fatalf("revoked copy still there: %v", err)
	}
}

// TestPruneWaitsForCertification: a prune does not remove what a
// certification in another process is writing (its incoming copy, its
// scratch data): it waits for the lock certifications hold on the
// gate's directory.
func TestPruneWaitsForCertification(t *testing.T) {
	g, _ := gate(t, trust.Options{})
	incoming := filepath.Join(g.Dir(), "sha256", "incoming-123")
	if err := os.MkdirAll(incoming, 0o700); err != nil {
		t.Fatal(err)
	}
	// The certifying process: another open of the directory, locked.
	f, err := os.Open(g.Dir())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := g.Prune(trust.PruneOptions{})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("prune ran during a certification: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := os.Stat(incoming); err != nil {
		t.Fatalf("the certification's incoming copy: %v", err)
	}
	f.Close() // the certification ends
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("prune still waiting after the certification ended")
	}
	if _, err := os.Stat(incoming); !os.IsNotExist(err) {
		t.Fatalf("a leftover incoming copy after prune: %v", err)
	}
}
