package memdriver_test

import (
	"testing"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
	"github.com/agenthost/agenthost/sdk/storedriver/storedrivertest"
)

func TestContract(t *testing.T) {
	storedrivertest.Run(t, func(t *testing.T) driver.Driver { return memdriver.New() })
}

func TestContractShared(t *testing.T) {
	storedrivertest.Run(t, func(t *testing.T) driver.Driver { return memdriver.NewShared(nil) })
}
