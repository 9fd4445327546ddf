// Command agenthost-pgstore serves the PostgreSQL store driver (package
// pgdriver) as a go-plugin subprocess of the agenthost host. The host sends
// its configuration at open (see pgdriver.ParseConfig). It is not meant to
// be run by hand.
package main

import (
	"github.com/agenthost/agenthost/plugins/pgstore/pgdriver"
	"github.com/agenthost/agenthost/sdk/storedriver"
)

func main() {
	storedriver.Serve(pgdriver.Factory{})
}
