// Command agenthost-memstore serves the in-memory store driver (package
// memdriver) as a go-plugin subprocess of the agenthost host. It is not
// meant to be run by hand.
package main

import (
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
	"github.com/agenthost/agenthost/sdk/storedriver"
)

func main() {
	storedriver.Serve(memdriver.Factory, memdriver.ServeOptions...)
}
