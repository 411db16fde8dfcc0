// Command warren is Warren's command line: `warren server` runs the daemon,
// and every other command is a client of its HTTP API through the Go SDK
// (package client).
//
// Exit codes: 0 success, 1 an error, 2 bad usage, 130 interrupted, and
// `warren exec` exits with the command's own code.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/warrenhq/warren/client"
)

const (
	exitError       = 1
	exitUsage       = 2
	exitInterrupted = 130
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second signal ends the process at once
	}()
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command line args and returns the process's exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := &cli{in: stdin, out: stdout, errOut: stderr}
	root := c.rootCommand()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	return c.exitCode(ctx, cmd, err)
}

// cli is one run of the command line: its streams and global flags.
type cli struct {
	in     io.Reader
	out    io.Writer
	errOut io.Writer

	root    *cobra.Command
	url     string
	key     string
	keyFile string
	json    bool

	// started is set once the arguments of the command are valid: an
	// error before that is a usage error.
	started bool
	// keyHint says how to give a key, when none was found.
	keyHint string
}

// annNotFound is the annotation of a command holding what to suggest when
// the thing it names does not exist.
const annNotFound = "warren/not-found-hint"

const (
	hintSandboxes = "run `warren ls` to see your sandboxes"
	hintImages    = "run `warren image ls` to see the images"
)

func (c *cli) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "warren",
		Short: "Persistent gVisor sandboxes for AI agents",
		Long: `Warren runs persistent gVisor sandboxes for AI agents.

Start the daemon with 'warren server' (as root); every other command talks to
it over its HTTP API at --url with the key from --key, WARREN_API_KEY,
~/.config/warren/config.json ({"url": ..., "key": ...}) or the daemon's
admin key file.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			c.started = true
			return nil
		},
	}
	c.root = root
	pf := root.PersistentFlags()
	pf.StringVar(&c.url, "url", client.DefaultURL, "the server's URL (env WARREN_API_URL)")
	pf.StringVar(&c.key, "key", "", "API key (env WARREN_API_KEY; default: the key file's contents)")
	pf.StringVar(&c.keyFile, "key-file", client.DefaultKeyFile, "file holding the API key (env WARREN_KEY_FILE)")
	pf.BoolVar(&c.json, "json", false, "print JSON for machines instead of text for people")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })

	root.AddCommand(
		c.serverCommand(),
		c.createCommand(), c.lsCommand(), c.getCommand(), c.rmCommand(),
		c.execCommand(), c.cpCommand(),
		c.imageCommand(),
	)
	root.AddCommand(c.lifecycleCommands()...)
	root.AddCommand(c.templateCommand())
	root.AddCommand(c.insideCommands()...)
	root.AddCommand(c.mcpCommand())
	root.AddCommand(c.accountCommands()...)
	root.AddCommand(c.networkCommands()...)
	root.AddCommand(
		c.versionCommand(),
	)
	return root
}

// client returns a client of the server named by the global flags and the
// environment. A missing default key file is not an error here: health
// needs no key, and an unauthorized answer then says how to give one.
func (c *cli) client() (*client.Client, error) {
	u := c.url
	if v := os.Getenv("WARREN_API_URL"); v != "" && !c.root.PersistentFlags().Changed("url") {
		u = v
	}
	key := c.key
	if !c.root.PersistentFlags().Changed("key") {
		key = os.Getenv("WARREN_API_KEY")
	}
	u, key, err := c.configured(u, key) // ~/.config/warren/config.json
	if err != nil {
		return nil, err
	}
	if key == "" {
		path, explicit := c.keyFile, c.root.PersistentFlags().Changed("key-file")
		if v := os.Getenv("WARREN_KEY_FILE"); v != "" && !explicit {
			path, explicit = v, true
		}
		b, err := os.ReadFile(path)
		switch {
		case err == nil:
			key = strings.TrimSpace(string(b))
		case explicit:
			return nil, fmt.Errorf("reading the API key: %w", err)
		default:
			c.keyHint = fmt.Sprintf("no API key: pass --key, set WARREN_API_KEY, or run as a user who can read %s", path)
		}
	}
	return client.New(u, key), nil
}

// exitCode reports err, if any, and returns the exit code it means.
func (c *cli) exitCode(ctx context.Context, cmd *cobra.Command, err error) int {
	if err == nil {
		return 0
	}
	var ec *exitCodeError
	if errors.As(err, &ec) {
		return ec.code
	}
	var ue *usageError
	if !c.started || errors.As(err, &ue) {
		path := "warren"
		if cmd != nil {
			path = cmd.CommandPath()
		}
		fmt.Fprintf(c.errOut, "warren: %v\nRun '%s --help' for usage.\n", err, path)
		return exitUsage
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		fmt.Fprintln(c.errOut, "warren: interrupted")
		return exitInterrupted
	}
	fmt.Fprintf(c.errOut, "warren: %s\n", c.explain(cmd, err))
	return exitError
}

// explain is err's message with what to do about it, when we know.
func (c *cli) explain(cmd *cobra.Command, err error) string {
	msg := err.Error()
	switch {
	case errors.Is(err, client.ErrUnauthorized) && c.keyHint != "":
		msg += "; " + c.keyHint
	case errors.Is(err, client.ErrNotFound) && cmd != nil:
		// The server's own message may already say what to run, and a
		// missing file inside a sandbox is not a missing sandbox.
		if hint := cmd.Annotations[annNotFound]; hint != "" &&
			!strings.Contains(msg, "warren ") && !strings.HasPrefix(msg, "no such file") {
			msg += "; " + hint
		}
	}
	return msg
}

// exitCodeError ends the process with code, printing nothing more: the
// command has said what it had to.
type exitCodeError struct{ code int }

func (e *exitCodeError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// usageError is a command line that does not make sense.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return &usageError{fmt.Errorf(format, args...)} }

// printJSON writes v indented, as --json asks.
func (c *cli) printJSON(v any) error {
	enc := json.NewEncoder(c.out)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
