package main

import (
	"context"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/warrenhq/warren/internal/daemon"
	"github.com/warrenhq/warren/internal/mcpserver"
)

func (c *cli) mcpCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "mcp",
		Short: "Serve Warren's tools to an AI agent over MCP (stdio)",
		Long: `Speak the Model Context Protocol on stdin and stdout, giving an MCP client
(Claude Desktop, an IDE, an agent framework) tools to create, run, pause,
snapshot and fork sandboxes: create_sandbox, list_sandboxes, exec, run_code,
read_file, write_file, list_files, snapshot_sandbox, revert_sandbox,
fork_sandbox, and more. It talks to the server at --url with the key from
--key, WARREN_API_KEY or the key file, like every other command.

Register it in an MCP client's configuration:

  {"mcpServers": {"warren": {"command": "warren", "args": ["mcp"],
    "env": {"WARREN_API_URL": "http://127.0.0.1:7070", "WARREN_API_KEY": "..."}}}}`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			// stdout is the protocol's: say what is wrong on stderr, which
			// clients show in their logs, and serve anyway (the server may
			// come up later).
			if c.keyHint != "" {
				fmt.Fprintf(c.errOut, "warren mcp: %s\n", c.keyHint)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 3*time.Second)
			if _, err := cl.Health(ctx); err != nil {
				fmt.Fprintf(c.errOut, "warren mcp: %v\n", err)
			}
			cancel()
			srv := mcpserver.New(cl, mcpserver.Options{Version: daemon.Version})
			return srv.Run(cmd.Context(), &mcp.StdioTransport{})
		},
	}
}
