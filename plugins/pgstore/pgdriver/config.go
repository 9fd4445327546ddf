package pgdriver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agenthost/agenthost/abi/driver"
)

// Config configures a Driver. Start from DefaultConfig.
type Config struct {
	// URL names the server and the database: a postgres:// URL or a
	// key=value connection string (see pgx's ParseConfig).
	URL string
	// Schema is the schema every table lives in.
	Schema string
	// MaxConns bounds the pool. Concurrent commits each take a connection;
	// the server groups their WAL flushes.
	MaxConns int32
	// ConnectTimeout bounds one connection attempt.
	ConnectTimeout time.Duration
}

// DefaultSchema is the schema of a configuration without one.
const DefaultSchema = "agenthost"

// DefaultConfig returns the default configuration for the database at url.
func DefaultConfig(url string) Config {
	return Config{URL: url, Schema: DefaultSchema, MaxConns: 16, ConnectTimeout: 10 * time.Second}
}

var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// maxSchemaLen leaves room in PostgreSQL's 63-byte identifiers for the
// notice channel's suffix.
const maxSchemaLen = 48

// ParseConfig reads the configuration a host sends at open. Keys:
//
//	url              postgres://USER:PASSWORD@HOST:PORT/DATABASE?... (required)
//	schema           lower-case identifier, at most 48 bytes (default agenthost)
//	max_conns        the pool's size (default 16)
//	connect_timeout  Go duration (default 10s)
//
// An unknown key or a bad value is an error wrapping
// driver.ErrInvalidArgument that names the key; a password is never echoed.
func ParseConfig(m map[string]string) (Config, error) {
	c := DefaultConfig("")
	for k, v := range m {
		var err error
		switch k {
		case "url":
			c.URL = v
		case "schema":
			c.Schema = v
		case "max_conns":
			var n int64
			n, err = strconv.ParseInt(v, 10, 32)
			if err == nil && n <= 0 {
				err = errors.New("must be positive")
			}
			c.MaxConns = int32(n)
		case "connect_timeout":
			c.ConnectTimeout, err = time.ParseDuration(v)
			if err == nil && c.ConnectTimeout <= 0 {
				err = errors.New("must be positive")
			}
		default:
			return Config{}, fmt.Errorf("%w: pgstore config: unknown key %q (have url, schema, max_conns, connect_timeout)", driver.ErrInvalidArgument, k)
		}
		if err != nil {
			return Config{}, fmt.Errorf("%w: pgstore config %s=%q: %v", driver.ErrInvalidArgument, k, v, err)
		}
	}
	return c, c.check()
}

func (c Config) check() error {
	switch {
	case c.URL == "":
		return fmt.Errorf("%w: pgstore config: no database (key \"url\", e.g. postgres://user:password@host:5432/db)", driver.ErrInvalidArgument)
	case !schemaName.MatchString(c.Schema) || len(c.Schema) > maxSchemaLen:
		return fmt.Errorf("%w: pgstore config schema=%q: want a lower-case identifier ([a-z_][a-z0-9_]*) of at most %d bytes", driver.ErrInvalidArgument, c.Schema, maxSchemaLen)
	case strings.HasPrefix(c.Schema, "pg_"):
		return fmt.Errorf("%w: pgstore config schema=%q: names starting with pg_ are PostgreSQL's", driver.ErrInvalidArgument, c.Schema)
	case c.MaxConns <= 0 || c.ConnectTimeout <= 0:
		return fmt.Errorf("%w: pgstore config: bad limits (max_conns %d, connect_timeout %v)", driver.ErrInvalidArgument, c.MaxConns, c.ConnectTimeout)
	}
	return nil
}

// appName is the application_name of the driver's connections, unless the
// URL sets one.
const appName = "agenthost-pgstore"

// poolConfig parses the URL into a pool configuration.
func (c Config) poolConfig() (*pgxpool.Config, error) {
	pc, err := pgxpool.ParseConfig(c.URL)
	if err != nil {
		return nil, fmt.Errorf("%w: pgstore config url: %s", driver.ErrInvalidArgument, redact(err.Error(), c.URL))
	}
	pc.MaxConns = c.MaxConns
	if pc.ConnConfig.ConnectTimeout == 0 { // the URL's connect_timeout wins
		pc.ConnConfig.ConnectTimeout = c.ConnectTimeout
	}
	if pc.ConnConfig.RuntimeParams == nil {
		pc.ConnConfig.RuntimeParams = map[string]string{}
	}
	if _, ok := pc.ConnConfig.RuntimeParams["application_name"]; !ok {
		pc.ConnConfig.RuntimeParams["application_name"] = appName
	}
	// Commits rely on READ COMMITTED's snapshot per statement (see
	// commit_batch); a server whose default is stricter is overridden.
	pc.ConnConfig.RuntimeParams["default_transaction_isolation"] = "read committed"
	// A connection idle for a while is pinged before use, so that a commit
	// is rarely sent on a connection the server has already closed (its
	// outcome would then be unknown).
	pc.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool { return p.IdleDuration > 200*time.Millisecond }
	return pc, nil
}

// where describes the server and database of a connection configuration,
// for error messages: never its password.
func where(cc *pgx.ConnConfig) string {
	host := cc.Host
	if !strings.HasPrefix(host, "/") {
		host = fmt.Sprintf("%s:%d", host, cc.Port)
	}
	return fmt.Sprintf("database %q as user %q on %s", cc.Database, cc.User, host)
}

var (
	urlPassword = regexp.MustCompile(`(://[^:/?#@\s]*:)[^@/?#\s]*@`)
	kvPassword  = regexp.MustCompile(`(?i)(password\s*=\s*)('[^']*'|\S+)`)
)

// redact removes the password of connection string conn from msg: the
// URL's user password, a password= setting, and the password's text
// wherever it appears.
func redact(msg, conn string) string {
	var secrets []string
	if u, err := url.Parse(conn); err == nil && u.User != nil {
		if p, ok := u.User.Password(); ok && p != "" {
			secrets = append(secrets, p, url.QueryEscape(p), url.PathEscape(p))
		}
		for _, k := range []string{"password", "sslpassword"} {
			if p := u.Query().Get(k); p != "" {
				secrets = append(secrets, p)
			}
		}
	}
	for _, m := range urlPassword.FindAllStringSubmatch(conn, -1) {
		if p := strings.TrimSuffix(strings.TrimPrefix(m[0], m[1]), "@"); p != "" {
			secrets = append(secrets, p)
		}
	}
	for _, m := range kvPassword.FindAllStringSubmatch(conn, -1) {
		if p := strings.Trim(m[2], "'"); p != "" {
			secrets = append(secrets, p)
		}
	}
	msg = urlPassword.ReplaceAllString(msg, "${1}xxxxx@")
	msg = kvPassword.ReplaceAllString(msg, "${1}xxxxx")
	for _, s := range secrets {
		if len(s) >= 1 {
			msg = strings.ReplaceAll(msg, s, "xxxxx")
		}
	}
	return msg
}

// ScratchSchema is the schema of a scratch instance on data directory dir
// (the conformance suite's and the admission gate's): the same directory
// always gives the same schema, and no user's schema is ever one.
func ScratchSchema(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	sum := sha256.Sum256([]byte(dir))
	return ScratchPrefix + hex.EncodeToString(sum[:12])
}

// ScratchPrefix starts the name of every scratch schema.
const ScratchPrefix = "agenthost_scratch_"

// ScratchConfig is the configuration of a scratch instance on dir of a
// driver launched with config launch: the same server, database and pool
// settings, in schema ScratchSchema(dir), never the user's tables. It
// implements conformance.ScratchConfigurer.
func (Factory) ScratchConfig(launch map[string]string, dir string) map[string]string {
	out := map[string]string{}
	for _, k := range []string{"url", "max_conns", "connect_timeout"} {
		if v, ok := launch[k]; ok {
			out[k] = v
		}
	}
	out["schema"] = ScratchSchema(dir)
	return out
}

// CleanScratch drops the schema of the scratch instance on dir of a driver
// launched with config launch, with everything in it; without a url in
// launch no instance could start, and there is nothing to drop. The
// instances on dir must be closed. It implements
// conformance.ScratchCleaner.
func (f Factory) CleanScratch(ctx context.Context, launch map[string]string, dir string) error {
	if launch["url"] == "" {
		return nil
	}
	c, err := ParseConfig(f.ScratchConfig(launch, dir))
	if err != nil {
		return err
	}
	return DropSchema(ctx, c.URL, c.Schema)
}

// DropSchema drops schema, and everything in it, from the database at url.
func DropSchema(ctx context.Context, url, schema string) error {
	c := DefaultConfig(url)
	c.Schema = schema
	if err := c.check(); err != nil {
		return err
	}
	pc, err := c.poolConfig()
	if err != nil {
		return err
	}
	conn, err := pgx.ConnectConfig(ctx, pc.ConnConfig)
	if err != nil {
		return connectError(pc.ConnConfig, c.URL, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "SET lock_timeout = '30s'"); err != nil {
		return mapError(err)
	}
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("pgstore: dropping schema %s: %w", schema, mapError(err))
	}
	return nil
}

// Factory opens PostgreSQL drivers from the configuration a host sends; it
// is what the pgstore plugin serves.
type Factory struct{}

// Open implements storedriver.Factory.
func (Factory) Open(ctx context.Context, config map[string]string) (driver.Driver, error) {
	c, err := ParseConfig(config)
	if err != nil {
		return nil, err
	}
	return Open(ctx, c)
}
