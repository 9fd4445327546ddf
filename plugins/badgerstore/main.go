// Command agenthost-badgerstore serves the durable badger store driver
// (package badgerdriver) as a go-plugin subprocess of the agenthost host.
// The host sends its configuration at open (see badgerdriver.ParseConfig).
// It is not meant to be run by hand.
package main

import (
	"github.com/agenthost/agenthost/plugins/badgerstore/badgerdriver"
	"github.com/agenthost/agenthost/sdk/storedriver"
)

func main() {
	storedriver.Serve(badgerdriver.Factory{Logger: storedriver.Logger(badgerdriver.Name)})
}
