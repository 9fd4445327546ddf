// Package pgtest gives tests and benchmarks a throwaway PostgreSQL.
//
// Where to start: a test calls URL, which returns the URL of a new, empty
// database of its own (dropped when the test ends):
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	func TestX(t *testing.T) {
//		url := pgtest.URL(t) // postgres://postgres@127.0.0.1:PORT/agenthost_test_...
//		...
//	}
//
// The server is the one AGENTHOST_PG_URL names, when it is set (a URL whose
// user may create databases; its own database is left alone). Otherwise the
// test binary starts one cluster of its own, once, from the machine's
// PostgreSQL binaries (initdb and pg_ctl on PATH, or the newest
// /usr/lib/postgresql/*/bin): initdb into a temporary directory, pg_ctl
// start on a free loopback TCP port with its unix socket in that directory
// (never the system's), trust authentication. initdb refuses to run as
// root, so as root the cluster runs as the "postgres" user, or "nobody".
// Main (or Run) stops it when the tests end; a reaper process stops it
// too if the test binary dies without doing so (SIGKILL, a panic), so no
// postgres is left behind.
//
// Without AGENTHOST_PG_URL and without PostgreSQL binaries, URL skips the
// test, saying why; under AGENTHOST_REQUIRE_ALL=1 it fails it instead.
//
// Programs (make bench) use Start, Cluster.URL, Cluster.CreateDatabase and
// Cluster.Stop directly.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvURL names an existing server to use instead of starting one.
const EnvURL = "AGENTHOST_PG_URL"

// EnvRequireAll, set to 1, turns the skip of a test without PostgreSQL into
// a failure (CI sets it).
const EnvRequireAll = "AGENTHOST_REQUIRE_ALL"

// ErrNoPostgres: no PostgreSQL binaries were found to start a cluster with.
var ErrNoPostgres = errors.New("no PostgreSQL binaries (initdb, pg_ctl) on PATH or under /usr/lib/postgresql/*/bin")

// Options configure a cluster started with StartWith.
type Options struct {
	// Fsync turns fsync on. A cluster for tests runs without it: a test
	// never survives the machine crashing, and the durability a test checks
	// is the driver's, against a server that stays up. A cluster for a
	// benchmark runs with it, so that its commits cost what they cost in
	// production.
	Fsync bool
	// MaxConnections is the server's max_connections (default 300: the
	// conformance suite runs many driver processes, each with a pool).
	MaxConnections int
}

// Cluster is a PostgreSQL cluster started from the machine's binaries, in a
// directory of its own.
type Cluster struct {
	dir     string // the temporary directory: data/, the socket, the log
	bin     string // the directory of initdb, pg_ctl and postgres
	port    int
	cred    *syscall.Credential // who the server runs as; nil: this process's user
	reaper  *exec.Cmd
	reapIn  io.WriteCloser
	stopped atomic.Bool
	stopMu  sync.Mutex
	// startOpts are the server options pg_ctl started it with (Halt and
	// Resume).
	startOpts string
}

// Start starts a cluster in a new temporary directory under dir (the system
// temp dir when empty), with fsync on (see Options.Fsync): the one for
// programs such as benchmarks. Stop it with Stop. As root, dir must be
// reachable by the user the server runs as.
func Start(dir string) (*Cluster, error) {
	return StartWith(dir, Options{Fsync: true})
}

// FindBin returns the directory of the newest PostgreSQL binaries: that of
// initdb and pg_ctl on PATH, else the newest /usr/lib/postgresql/*/bin.
// It returns ErrNoPostgres when there are none.
func FindBin() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if _, err := exec.LookPath("pg_ctl"); err == nil {
			if real, err := filepath.EvalSymlinks(p); err == nil {
				p = real
			}
			dir := filepath.Dir(p)
			if isFile(filepath.Join(dir, "pg_ctl")) && isFile(filepath.Join(dir, "postgres")) {
				return dir, nil
			}
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	var best string
	bestV := -1.0
	for _, d := range dirs {
		if !isFile(filepath.Join(d, "initdb")) || !isFile(filepath.Join(d, "pg_ctl")) || !isFile(filepath.Join(d, "postgres")) {
			continue
		}
		v, err := strconv.ParseFloat(filepath.Base(filepath.Dir(d)), 64)
		if err != nil {
			v = 0
		}
		if v > bestV {
			best, bestV = d, v
		}
	}
	if best == "" {
		return "", ErrNoPostgres
	}
	return best, nil
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// StartWith starts a cluster in a new temporary directory under dir (the
// system temp dir when empty).
func StartWith(dir string, opts Options) (*Cluster, error) {
	bin, err := FindBin()
	if err != nil {
		return nil, err
	}
	if opts.MaxConnections <= 0 {
		opts.MaxConnections = 300
	}
	tmp, err := os.MkdirTemp(dir, "agenthost-pg-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	c := &Cluster{dir: tmp, bin: bin}
	if os.Geteuid() == 0 {
		// initdb and postgres refuse to run as root.
		if c.cred, err = serverUser(); err == nil {
			err = os.Chown(tmp, int(c.cred.Uid), int(c.cred.Gid))
		}
		if err != nil {
			os.RemoveAll(tmp)
			return nil, fmt.Errorf("pgtest: running the server as a user other than root: %w", err)
		}
	}
	if err := c.startReaper(); err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			c.Stop()
		}
	}()
	// --no-sync: the cluster is thrown away; nothing initdb writes needs to
	// survive a machine crash.
	if _, err := c.run("/bin/true"); err != nil {
		return nil, fmt.Errorf("pgtest: %s is not reachable by the server's user: %w", tmp, err)
	}
	if out, err := c.run("initdb", "-D", c.data(), "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"); err != nil {
		return nil, fmt.Errorf("pgtest: initdb: %v\n%s", err, out)
	}
	fsync := "off"
	if opts.Fsync {
		fsync = "on"
	}
	// A free port can be taken by someone else before the server binds it:
	// try a few.
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			return nil, fmt.Errorf("pgtest: finding a free port: %w", err)
		}
		o := strings.Join([]string{
			"-c listen_addresses=127.0.0.1", "-p " + strconv.Itoa(port), "-k " + c.dir,
			"-c fsync=" + fsync, "-c full_page_writes=" + fsync,
			"-c max_connections=" + strconv.Itoa(opts.MaxConnections),
		}, " ")
		out, err := c.run("pg_ctl", "-D", c.data(), "-l", c.logFile(), "-w", "-t", "60", "-o", o, "start")
		if err == nil {
			c.port, c.startOpts = port, o
			ok = true
			return c, nil
		}
		log, _ := os.ReadFile(c.logFile())
		lastErr = fmt.Errorf("pgtest: pg_ctl start: %v\n%s\n%s", err, out, tail(log, 2000))
		if !strings.Contains(string(log), "could not bind") && !strings.Contains(string(log), "Address already in use") {
			break
		}
	}
	return nil, lastErr
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func (c *Cluster) data() string    { return filepath.Join(c.dir, "data") }
func (c *Cluster) logFile() string { return filepath.Join(c.dir, "postgres.log") }

// serverUser is the user a root process runs the server as: postgres if
// there is one, else nobody.
func serverUser() (*syscall.Credential, error) {
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
	}
	return nil, errors.New("neither a postgres nor a nobody user")
}

// command returns the PostgreSQL program name with args, run as the
// server's user in the cluster's directory with a minimal environment.
func (c *Cluster) command(name string, args ...string) *exec.Cmd {
	if !filepath.IsAbs(name) {
		name = filepath.Join(c.bin, name)
	}
	cmd := exec.Command(name, args...)
	cmd.Dir = c.dir
	cmd.Env = []string{"PATH=" + c.bin + ":/usr/bin:/bin", "LC_ALL=C", "TZ=UTC"}
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	return cmd
}

func (c *Cluster) run(name string, args ...string) ([]byte, error) {
	return c.command(name, args...).CombinedOutput()
}

// startReaper starts a shell, as the server's user, that waits for this
// process to end (its standard input closes when this process dies, however
// it dies) and then stops the server and removes the directory. Stop does
// the same first, and then ends the reaper.
func (c *Cluster) startReaper() error {
	script := `read _ignored; "$1/pg_ctl" -D "$2/data" -m immediate -w stop >/dev/null 2>&1; rm -rf "$2"`
	cmd := exec.Command("/bin/sh", "-c", script, "reaper", c.bin, c.dir)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // not killed with our process group by ^C
	if c.cred != nil {
		cmd.SysProcAttr.Credential = c.cred
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("pgtest: reaper: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: reaper: %w", err)
	}
	c.reaper, c.reapIn = cmd, in
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Port is the server's TCP port on 127.0.0.1.
func (c *Cluster) Port() int { return c.port }

// Dir is the cluster's directory (its data directory is Dir/data).
func (c *Cluster) Dir() string { return c.dir }

// URL returns the URL of database db on the cluster, as the superuser
// postgres (trust authentication, no password).
func (c *Cluster) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, url.PathEscape(db))
}

// CreateDatabase creates the empty database name.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) error {
	return createDatabase(ctx, c.URL("postgres"), name)
}

// DropDatabase drops database name, ending its connections.
func (c *Cluster) DropDatabase(ctx context.Context, name string) error {
	return dropDatabase(ctx, c.URL("postgres"), name)
}

// Stop stops the server (fast shutdown: open connections are ended) and
// removes its directory. Stopping twice is not an error.
func (c *Cluster) Stop() error {
	c.stopMu.Lock()
	defer c.stopMu.Unlock()
	if c.stopped.Swap(true) {
		return nil
	}
	var err error
	if isFile(filepath.Join(c.data(), "postmaster.pid")) {
		if out, e := c.run("pg_ctl", "-D", c.data(), "-m", "fast", "-w", "-t", "60", "stop"); e != nil {
			err = fmt.Errorf("pgtest: pg_ctl stop: %v\n%s", e, out)
		}
	}
	if c.reaper != nil {
		c.reapIn.Close() // the reaper stops the server (already stopped) and removes the directory
		_ = c.reaper.Wait()
	}
	_ = os.RemoveAll(c.dir)
	return err
}

var validName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

func createDatabase(ctx context.Context, admin, name string) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("pgtest: bad database name %q", name)
	}
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return fmt.Errorf("pgtest: connecting to create database %s: %w", name, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C'"); err != nil {
		return fmt.Errorf("pgtest: CREATE DATABASE %s: %w", name, err)
	}
	return nil
}

func dropDatabase(ctx context.Context, admin, name string) error {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return fmt.Errorf("pgtest: connecting to drop database %s: %w", name, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("pgtest: DROP DATABASE %s: %w", name, err)
	}
	return nil
}

// The server of this test binary: AGENTHOST_PG_URL's, or a cluster
// started on first use.
var shared struct {
	once    sync.Once
	admin   string // a URL of the server's maintenance database
	cluster *Cluster
	err     error
	mu      sync.Mutex
}

func server() (admin string, err error) {
	shared.once.Do(func() {
		if u := os.Getenv(EnvURL); u != "" {
			shared.admin = u
			return
		}
		shared.mu.Lock()
		defer shared.mu.Unlock()
		c, err := StartWith("", Options{})
		if err != nil {
			shared.err = err
			return
		}
		shared.cluster = c
		shared.admin = c.URL("postgres")
	})
	return shared.admin, shared.err
}

var seq atomic.Int64

// NewDatabase creates a new empty database on the test binary's server (see
// the package doc) and returns its name and URL. Programs that are not
// tests may use it; tests use URL.
func NewDatabase(ctx context.Context) (name, dbURL string, err error) {
	admin, err := server()
	if err != nil {
		return "", "", err
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	name = fmt.Sprintf("agenthost_test_%d_%d_%s", os.Getpid(), seq.Add(1), hex.EncodeToString(rnd[:]))
	if err := createDatabase(ctx, admin, name); err != nil {
		return "", "", err
	}
	dbURL, err = withDatabase(admin, name)
	return name, dbURL, err
}

// withDatabase returns the URL u with its database replaced by db. u may be
// a URL or a key=value connection string.
func withDatabase(u, db string) (string, error) {
	if strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://") {
		p, err := url.Parse(u)
		if err != nil {
			return "", fmt.Errorf("pgtest: %s is not a URL", EnvURL)
		}
		p.Path = "/" + db
		p.RawPath = ""
		return p.String(), nil
	}
	// key=value: a later dbname wins.
	return u + " dbname=" + db, nil
}

// URL returns the URL of a new, empty database for t, on the server of the
// test binary (see the package doc), dropped when t ends. Without a server
// it skips t (fails it under AGENTHOST_REQUIRE_ALL=1).
func URL(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name, dbURL, err := NewDatabase(ctx)
	if errors.Is(err, ErrNoPostgres) {
		why := fmt.Sprintf("PostgreSQL is needed: %v, and %s is not set", err, EnvURL)
		if os.Getenv(EnvRequireAll) == "1" {
			t.Fatalf("%s (%s=1)", why, EnvRequireAll)
		}
		t.Skip(why)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		admin, _ := server()
		if err := dropDatabase(ctx, admin, name); err != nil {
			t.Errorf("dropping the test database: %v", err)
		}
	})
	return dbURL
}

// Available reports whether URL can give tests a database (a server is
// named or binaries are found), without starting anything.
func Available() bool {
	if os.Getenv(EnvURL) != "" {
		return true
	}
	_, err := FindBin()
	return err == nil
}

// Run runs tests and then stops the cluster the test binary started, if it
// started one, returning tests' exit code. TestMain functions that do more
// than run the tests use it; the others use Main.
func Run(tests func() int) int {
	code := tests()
	if err := StopShared(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Main is a TestMain that runs the tests and stops the cluster after:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
func Main(m *testing.M) {
	os.Exit(Run(m.Run))
}

// StopShared stops the cluster the test binary started, if any.
func StopShared() error {
	shared.mu.Lock()
	c := shared.cluster
	shared.mu.Unlock()
	if c == nil {
		return nil
	}
	return c.Stop()
}
