// Command mcptestserver serves the mcptest tools: over stdio by default, or
// over streamable HTTP with -http ADDR. With MCPTEST_CALLS set, every call
// is appended to that file as "tool key header-key".
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/internal/mcptest"
)

func main() {
	addr := flag.String("http", "", "serve streamable HTTP on this address (default: stdio)")
	flag.Parse()
	if *addr == "" {
		os.Exit(mcptest.ServeStdio())
	}
	rec := &mcptest.Recorder{File: os.Getenv("MCPTEST_CALLS")}
	s := mcptest.NewServer(mcptest.Options{Recorder: rec})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	fmt.Fprintf(os.Stderr, "mcptestserver: serving on http://%s/mcp\n", *addr)
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	log.Fatal(http.ListenAndServe(*addr, mux))
}
