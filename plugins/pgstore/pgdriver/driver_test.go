package pgdriver_test

import (
	"context"
	"testing"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/internal/pgtest"
	"github.com/agenthost/agenthost/plugins/pgstore/pgdriver"
	"github.com/agenthost/agenthost/sdk/storedriver/storedrivertest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// open opens a driver on a fresh schema of url.
func open(t testing.TB, url, schema string) *pgdriver.Driver {
	t.Helper()
	cfg := pgdriver.DefaultConfig(url)
	cfg.Schema = schema
	d, err := pgdriver.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(context.Background()) })
	return d
}

// TestContract: the driver SDK's contract, each subtest on a schema of its
// own in one database.
func TestContract(t *testing.T) {
	url := pgtest.URL(t)
	n := 0
	storedrivertest.Run(t, func(t *testing.T) driver.Driver {
		n++
		return open(t, url, "contract_"+string(rune('a'+n)))
	})
}
