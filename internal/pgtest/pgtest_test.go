package pgtest

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) {
	code := Run(m.Run)
	// No postgres started by this binary outlives it.
	if shared.cluster != nil {
		deadline := time.Now().Add(10 * time.Second)
		for {
			left := clustersIn(shared.cluster.Dir())
			if len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				os.Stderr.WriteString("FAIL: postgres processes left behind: " + strings.Join(left, " ") + "\n")
				code = 1
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if _, err := os.Stat(shared.cluster.Dir()); !os.IsNotExist(err) {
			os.Stderr.WriteString("FAIL: the cluster's directory is left behind\n")
			code = 1
		}
	}
	os.Exit(code)
}

// clustersIn lists the pids of the postgres processes whose command line
// names a data directory under dir.
func clustersIn(dir string) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if i := slices.Index(args, "-D"); i >= 0 && i+1 < len(args) && strings.HasPrefix(args[i+1], dir) {
			out = append(out, e.Name())
		}
	}
	return out
}

func query(t *testing.T, url, sql string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var s string
	if err := conn.QueryRow(ctx, sql).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestURL: each call gives a new empty database; it is dropped after the
// test.
func TestURL(t *testing.T) {
	var names []string
	t.Run("two", func(t *testing.T) {
		a, b := URL(t), URL(t)
		if a == b {
			t.Fatalf("two calls gave one URL %s", a)
		}
		for _, u := range []string{a, b} {
			db := query(t, u, "SELECT current_database()")
			names = append(names, db)
			if n := query(t, u, "SELECT count(*)::text FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"); n != "0" {
				t.Fatalf("database %s has %s tables, want none", db, n)
			}
		}
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "CREATE TABLE x (id int)"); err != nil {
			t.Fatal(err)
		}
		if n := query(t, b, "SELECT count(*)::text FROM pg_tables WHERE tablename = 'x'"); n != "0" {
			t.Fatal("a table of one test database shows in the other")
		}
	})
	if len(names) != 2 {
		return
	}
	u := URL(t)
	for _, n := range names {
		if got := query(t, u, "SELECT count(*)::text FROM pg_database WHERE datname = '"+n+"'"); got != "0" {
			t.Errorf("database %s was not dropped after its test", n)
		}
	}
}

// TestServerUser: as root the server does not run as root.
func TestServerUser(t *testing.T) {
	u := URL(t)
	if os.Getenv(EnvURL) != "" {
		t.Skip("the server is " + EnvURL + "'s")
	}
	dir := query(t, u, "SHOW data_directory")
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 && st.Sys() != nil {
		if uid := statUID(st); uid == 0 {
			t.Fatalf("the data directory %s belongs to root", dir)
		}
	}
	if got := query(t, u, "SHOW listen_addresses"); got != "127.0.0.1" {
		t.Errorf("listen_addresses = %s", got)
	}
	if sock := query(t, u, "SHOW unix_socket_directories"); !strings.HasPrefix(sock, shared.cluster.Dir()) {
		t.Errorf("the unix socket is in %s, not in the cluster's directory", sock)
	}
}

// TestStartStop: a cluster for programs starts with fsync on, serves
// databases, and leaves nothing behind when stopped.
func TestStartStop(t *testing.T) {
	if _, err := FindBin(); err != nil {
		if os.Getenv(EnvRequireAll) == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	c, err := Start("")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	ctx := context.Background()
	if err := c.CreateDatabase(ctx, "bench_db"); err != nil {
		t.Fatal(err)
	}
	if got := query(t, c.URL("bench_db"), "SHOW fsync"); got != "on" {
		t.Errorf("fsync = %s, want on", got)
	}
	if err := c.CreateDatabase(ctx, "bad name"); err == nil {
		t.Error("a database name with a space was accepted")
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if left := clustersIn(c.Dir()); len(left) > 0 {
		t.Fatalf("postgres processes %v left after Stop", left)
	}
	if _, err := os.Stat(c.Dir()); !os.IsNotExist(err) {
		t.Fatalf("%s left after Stop", c.Dir())
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

func TestWithDatabase(t *testing.T) {
	got, err := withDatabase("postgres://u:p@h:5/postgres?sslmode=disable", "x")
	if err != nil || got != "postgres://u:p@h:5/x?sslmode=disable" {
		t.Fatalf("%s, %v", got, err)
	}
	got, _ = withDatabase("host=h user=u", "x")
	if got != "host=h user=u dbname=x" {
		t.Fatal(got)
	}
}

// TestReaper: a test binary killed with SIGKILL leaves no cluster behind.
func TestReaper(t *testing.T) {
	if os.Getenv("PGTEST_HELPER") == "1" {
		c, err := Start("")
		if err != nil {
			os.Stdout.WriteString("ERR " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Stdout.WriteString(c.Dir() + "\n")
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	if _, err := FindBin(); err != nil {
		if os.Getenv(EnvRequireAll) == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestReaper$")
	cmd.Env = append(os.Environ(), "PGTEST_HELPER=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "/") {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the helper said %q, %v", line, err)
	}
	dir := strings.TrimSpace(line)
	if len(clustersIn(dir)) == 0 {
		t.Fatalf("no postgres runs in %s", dir)
	}
	cmd.Process.Kill()
	cmd.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for len(clustersIn(dir)) > 0 || exists(dir) {
		if time.Now().After(deadline) {
			t.Fatalf("30s after the test binary was killed, postgres %v still runs in %s (or the directory is left)", clustersIn(dir), dir)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
