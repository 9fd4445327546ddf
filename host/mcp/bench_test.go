package mcp_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/host/mcp"
	"github.com/agenthost/agenthost/host/model"
	"github.com/agenthost/agenthost/internal/mcptest"
)

// addTool is a Go tool doing the test server's "add" work: decode two
// numbers, add them, format the sum.
type addTool struct{}

func (addTool) Spec() model.ToolSpec { return model.ToolSpec{Name: "add"} }
func (addTool) Call(_ context.Context, args string) (string, error) {
	var in struct{ A, B float64 }
	if err := jsonUnmarshal(args, &in); err != nil {
		return "", err
	}
	return fmt.Sprint(in.A + in.B), nil
}

// BenchmarkToolCall measures one tool call through the MCP client, over
// stdio (a subprocess) and over streamable HTTP (loopback), beside a Go
// tool doing the same work, the three alternating so that they meet the same
// load. It reports each one's p50 and p99 in µs.
func BenchmarkToolCall(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	srv := mcptest.NewServer(mcptest.Options{})
	ts := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	defer ts.Close()
	env := map[string]string{mcptest.StdioEnv: "1"}
	servers, err := mcp.Start(context.Background(), []mcp.ServerConfig{
		{Name: "stdio", Command: exe, Env: []string{mcptest.StdioEnv}},
		{Name: "http", URL: ts.URL},
	}, mcp.Options{Logger: quiet, LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		b.Fatal(err)
	}
	defer servers.Close()
	tools := toolsByName(servers)
	calls := []struct {
		name string
		tool model.Tool
		lat  []time.Duration
	}{{name: "go", tool: addTool{}}, {name: "mcp-stdio", tool: tools["stdio_add"]}, {name: "mcp-http", tool: tools["http_add"]}}
	ctx := model.WithCall(context.Background(), model.Call{RunID: "run_bench", Step: 0, Index: 0})
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		for j := range calls {
			c := &calls[(i+j)%len(calls)] // rotate who goes first
			start := time.Now()
			out, err := c.tool.Call(ctx, `{"a":1.5,"b":2}`)
			c.lat = append(c.lat, time.Since(start))
			if err != nil || out != "3.5" {
				b.Fatalf("%s: %q, %v", c.name, out, err)
			}
		}
	}
	b.StopTimer()
	for _, c := range calls {
		slices.Sort(c.lat)
		b.ReportMetric(float64(c.lat[len(c.lat)/2].Nanoseconds())/1e3, c.name+"-p50-µs")
		b.ReportMetric(float64(c.lat[len(c.lat)*99/100].Nanoseconds())/1e3, c.name+"-p99-µs")
	}
}
