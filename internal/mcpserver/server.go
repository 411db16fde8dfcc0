// Package mcpserver serves Warren to AI agents over the Model Context
// Protocol: one MCP tool per thing an agent does with a sandbox (create,
// exec, files, code, snapshot, fork, ...), each a call of the Go SDK
// (package client) against a Warren server.
//
// Every tool answers with a short text for the model and the API's data as
// structured content beside it; a failed call is a tool error (IsError)
// whose text is the server's message, which says what to do.
//
//	srv := mcpserver.New(client.New(url, key), mcpserver.Options{Version: v})
//	srv.Run(ctx, &mcp.StdioTransport{})
package mcpserver

import (
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/warrenhq/warren/client"
)

// Options tune the server.
type Options struct {
	// Version is reported to clients as the server's version.
	Version string
	// MaxOutputBytes bounds each of stdout and stderr (and a file read) in
	// a tool's answer: the model's context is small. 50 KiB when 0.
	MaxOutputBytes int
}

// DefaultMaxOutput is Options.MaxOutputBytes when unset.
const DefaultMaxOutput = 50 << 10

// instructions is what a client may show its model about the server as a
// whole.
const instructions = `Warren gives you persistent Linux sandboxes (gVisor; Debian with bash and python3 by default).
Start with create_sandbox and pass its sandbox_id to the other tools. A sandbox keeps its files, running processes
and memory until you delete it: pause_sandbox when you are done for a while (costs no CPU, resume takes ~100 ms);
an idle sandbox is paused after 10 minutes on its own, never lost. Use exec for commands (shell: NAME keeps cd and
variables between calls; background: true for long jobs, then get_job), run_code for Python whose variables persist,
read_file/write_file/list_files for files. snapshot_sandbox before a risky change lets revert_sandbox undo it;
fork_sandbox copies a sandbox to try several things at once.`

// New returns an MCP server whose tools act through c.
func New(c *client.Client, opts Options) *mcp.Server {
	if opts.MaxOutputBytes <= 0 {
		opts.MaxOutputBytes = DefaultMaxOutput
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "warren", Title: "Warren sandboxes", Version: opts.Version},
		&mcp.ServerOptions{Instructions: instructions, Capabilities: &mcp.ServerCapabilities{}})
	t := &tools{c: c, max: opts.MaxOutputBytes}
	t.register(srv)
	return srv
}
