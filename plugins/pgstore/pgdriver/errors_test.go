package pgdriver_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/internal/pgtest"
	"github.com/agenthost/agenthost/plugins/pgstore/pgdriver"
)

const secret = "s3cr3t-pa55"

func TestParseConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  map[string]string
		want string
	}{
		{map[string]string{}, `no database (key "url"`},
		{map[string]string{"url": "postgres://x/y", "dir": "/x"}, `unknown key "dir"`},
		{map[string]string{"url": "postgres://x/y", "schema": "Bad-Name"}, "schema="},
		{map[string]string{"url": "postgres://x/y", "schema": "pg_mine"}, "schema="},
		{map[string]string{"url": "postgres://x/y", "schema": strings.Repeat("a", 49)}, "schema="},
		{map[string]string{"url": "postgres://x/y", "max_conns": "0"}, "max_conns"},
		{map[string]string{"url": "postgres://x/y", "connect_timeout": "soon"}, "connect_timeout"},
	} {
		_, err := pgdriver.ParseConfig(tc.cfg)
		if !errors.Is(err, driver.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseConfig(%v) = %v, want ErrInvalidArgument naming %q", tc.cfg, err, tc.want)
		}
	}
	c, err := pgdriver.ParseConfig(map[string]string{"url": "postgres://x/y", "schema": "s1", "max_conns": "4", "connect_timeout": "3s"})
	if err != nil || c.Schema != "s1" || c.MaxConns != 4 || c.ConnectTimeout != 3*time.Second {
		t.Fatalf("ParseConfig = %+v, %v", c, err)
	}
}

// openErr opens a driver on config and returns the error, which must wrap
// want, name the url key or the server, and never show the password.
func openErr(t *testing.T, config map[string]string, want error, says string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := pgdriver.Factory{}.Open(ctx, config)
	if err == nil {
		d.Close(ctx)
		t.Fatalf("Open(%s) succeeded, want %v", config["url"], want)
	}
	if !errors.Is(err, want) {
		t.Fatalf("Open(%s) = %v, want %v", config["url"], err, want)
	}
	if !strings.Contains(err.Error(), says) {
		t.Errorf("Open(%s) = %q: want it to say %q", config["url"], err, says)
	}
	if strings.Contains(err.Error(), secret) {
		t.Errorf("Open(%s) = %q: the error shows the password", config["url"], err)
	}
	t.Logf("%s: %v", config["url"], err)
}

func TestBadURL(t *testing.T) {
	for _, u := range []string{
		"postgres://user:" + secret + "@host:notaport/db",
		"postgres://user:" + secret + "@[::1/db",
		"host=h password=" + secret + " port=x",
		"mysql://user:" + secret + "@host/db",
	} {
		openErr(t, map[string]string{"url": u}, driver.ErrInvalidArgument, "url")
	}
}

func TestUnreachableServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	openErr(t, map[string]string{"url": "postgres://user:" + secret + "@" + addr + "/db?sslmode=disable", "connect_timeout": "2s"},
		driver.ErrUnavailable, "cannot reach")
}

func TestMissingDatabase(t *testing.T) {
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/no_such_database"
	u.User = url.UserPassword(u.User.Username(), secret)
	openErr(t, map[string]string{"url": u.String()}, driver.ErrInvalidArgument, `database "no_such_database"`)
}
