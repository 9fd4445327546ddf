package badgerdriver

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/agenthost/agenthost/abi/driver"
)

// Config configures a Driver. Start from DefaultConfig.
type Config struct {
	// Dir is the data directory. Required unless InMemory.
	Dir string
	// InMemory keeps everything in memory (tests only; not durable).
	InMemory bool
	// SyncWrites syncs every commit to disk before acknowledging it. On by
	// default; without it an acknowledged commit can be lost to a machine
	// crash (not to a process kill).
	SyncWrites bool
	// GCInterval is how often the value log is garbage collected; 0 disables.
	GCInterval time.Duration
	// GCDiscardRatio is the fraction of a value log file that must be garbage
	// for it to be rewritten.
	GCDiscardRatio float64
	// MaxGroup bounds the commits merged into one badger transaction.
	MaxGroup int
	// MaxBatchBytes bounds the encoded size of one batch; a larger one is
	// driver.ErrTooLarge.
	MaxBatchBytes int
	// Logger receives badger's warnings and errors. Default: stderr.
	Logger hclog.Logger
}

// DefaultConfig returns the default configuration for data directory dir.
func DefaultConfig(dir string) Config {
	return Config{
		Dir:            dir,
		SyncWrites:     true,
		GCInterval:     5 * time.Minute,
		GCDiscardRatio: 0.5,
		MaxGroup:       256,
		MaxBatchBytes:  driver.MaxBatchBytes,
	}
}

// ParseConfig reads the configuration a host sends at open. Keys:
//
//	dir               data directory (required unless in_memory)
//	in_memory         true|false (default false)
//	sync_writes       true|false (default true)
//	gc_interval       Go duration, 0 disables (default 5m)
//	gc_discard_ratio  in (0, 1) (default 0.5)
//	max_group         commits per badger transaction (default 256)
//	max_batch_bytes   encoded size limit of one batch (default 8 MiB)
//
// An unknown key or a bad value is an error wrapping
// driver.ErrInvalidArgument.
func ParseConfig(m map[string]string) (Config, error) {
	c := DefaultConfig("")
	bad := func(key, v string, err error) (Config, error) {
		return Config{}, fmt.Errorf("%w: badgerstore config %s=%q: %v", driver.ErrInvalidArgument, key, v, err)
	}
	for k, v := range m {
		var err error
		switch k {
		case "dir":
			c.Dir = v
		case "in_memory":
			c.InMemory, err = strconv.ParseBool(v)
		case "sync_writes":
			c.SyncWrites, err = strconv.ParseBool(v)
		case "gc_interval":
			c.GCInterval, err = time.ParseDuration(v)
			if err == nil && c.GCInterval < 0 {
				err = fmt.Errorf("negative")
			}
		case "gc_discard_ratio":
			c.GCDiscardRatio, err = strconv.ParseFloat(v, 64)
			if err == nil && (c.GCDiscardRatio <= 0 || c.GCDiscardRatio >= 1) {
				err = fmt.Errorf("must be between 0 and 1")
			}
		case "max_group":
			c.MaxGroup, err = strconv.Atoi(v)
			if err == nil && c.MaxGroup <= 0 {
				err = fmt.Errorf("must be positive")
			}
		case "max_batch_bytes":
			c.MaxBatchBytes, err = strconv.Atoi(v)
			if err == nil && c.MaxBatchBytes <= 0 {
				err = fmt.Errorf("must be positive")
			}
		default:
			return Config{}, fmt.Errorf("%w: badgerstore config: unknown key %q", driver.ErrInvalidArgument, k)
		}
		if err != nil {
			return bad(k, v, err)
		}
	}
	return c, c.check()
}

func (c Config) check() error {
	switch {
	case c.Dir == "" && !c.InMemory:
		return fmt.Errorf("%w: badgerstore config: no data directory (key \"dir\")", driver.ErrInvalidArgument)
	case c.MaxGroup <= 0, c.MaxBatchBytes <= 0, c.GCInterval < 0, c.GCDiscardRatio <= 0 || c.GCDiscardRatio >= 1:
		return fmt.Errorf("%w: badgerstore config: bad limits %+v", driver.ErrInvalidArgument, c)
	}
	return nil
}

// Factory opens badger drivers from the configuration a host sends; it is
// what the badgerstore plugin serves.
type Factory struct {
	// Logger is the logger of the drivers it opens.
	Logger hclog.Logger
}

// Open implements storedriver.Factory.
func (f Factory) Open(ctx context.Context, config map[string]string) (driver.Driver, error) {
	c, err := ParseConfig(config)
	if err != nil {
		return nil, err
	}
	c.Logger = f.Logger
	return Open(c)
}
