// Command warren-agent runs as PID 1 of every Warren sandbox: it reaps
// orphans and serves the agent API (commands, named shells, background jobs,
// code contexts, the terminal and files) that the daemon reaches at the
// sandbox's address, port 49982. See internal/agent.
//
// Build it static: CGO_ENABLED=0 go build ./cmd/warren-agent
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/agent"
)

// version is set at build time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("warren-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", fmt.Sprintf(":%d", api.AgentPort), "address to serve the agent API on")
	stateDir := fs.String("state-dir", agent.DefaultStateDir, "where job output, shells' files and the code driver are kept, on the sandbox's own disk")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, "warren-agent", version)
		return 0
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))

	// Commands start from the agent's environment, with PATH and HOME
	// defaulted: PID 1 may be given none.
	a, err := agent.New(agent.Config{Version: version, Logger: log, StateDir: *stateDir})
	if err != nil {
		log.Error("starting agent", "err", err)
		return 1
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Error("listening", "addr", *listen, "err", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := a.Serve(ctx, ln); err != nil {
		log.Error("serving", "err", err)
		return 1
	}
	return 0
}
