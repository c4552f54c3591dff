// Command mcpserver is a tiny MCP server over stdio for the tests of `terret dev`: its
// one tool, "whoami", returns the server's process id, so a test sees which process
// answered (and that a killed one was started again).
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type whoamiArgs struct{}

type whoamiResult struct {
	PID int `json:"pid"`
}

func main() {
	fmt.Fprintf(os.Stderr, "mcpserver: started pid %d\n", os.Getpid())
	srv := mcp.NewServer(&mcp.Implementation{Name: "mcpserver", Version: "v1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "whoami", Description: "the server's process id"},
		func(ctx context.Context, req *mcp.CallToolRequest, _ whoamiArgs) (*mcp.CallToolResult, whoamiResult, error) {
			return nil, whoamiResult{PID: os.Getpid()}, nil
		})
	if err := srv.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "mcpserver:", err)
		os.Exit(1)
	}
}
