package host_test

import (
	"context"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/host/driverhost"
	"github.com/agenthost/agenthost/internal/builtins"
)

func driverhostBuiltin(dir string) (driverhost.Config, error) {
	lc, err := builtins.Launch("badgerstore", map[string]string{"dir": dir})
	lc.Logger = quietLog
	return lc, err
}

func launch(ctx context.Context, lc driverhost.Config) (driver.Driver, error) {
	d, err := driverhost.Launch(ctx, lc)
	if err != nil {
		return nil, err
	}
	return d.Store(), nil
}
