package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/warrenhq/warren/api"
)

func (c *cli) execCommand() *cobra.Command {
	var (
		req     api.ExecRequest
		envs    []string
		timeout float64
		stdin   bool
	)
	cmd := &cobra.Command{
		Use:   "exec [flags] ID [--] CMD [ARGS...]",
		Short: "Run a command in a sandbox",
		Long: `Run a command in a sandbox, streaming its output as it comes, and exit
with its exit code.

The command is an argv, not a shell line: 'warren exec ID -- "ls -la"' runs a
program named "ls -la". For pipes, redirections or variables, use a shell:

  warren exec ID -- sh -c 'ls -la | head'

Flags go before ID; everything after ID belongs to the command.

With --shell NAME the command runs in that named shell (see 'warren shells'):
its words are joined with spaces into one line of bash, so cd, export,
functions and background jobs (&) carry over to the next command run there:

  warren exec --shell main ID -- 'cd /work && export MODE=test'
  warren exec --shell main ID -- make check

With --background the command starts as a job and its id is printed at once;
it keeps running after this program exits (see 'warren jobs', 'warren logs').`,
		Args:        execArgs,
		Annotations: map[string]string{annNotFound: hintSandboxes},
		RunE: func(cmd *cobra.Command, args []string) error {
			id, argv := splitExecArgs(args)
			req.Cmd = argv
			if req.Shell != "" {
				if req.Background {
					return usagef("--shell and --background don't go together: end the command with & to leave it running in the shell")
				}
				req.Cmd, req.Command = nil, strings.Join(argv, " ")
			}
			var err error
			if req.Env, err = parseKV("--env", envs); err != nil {
				return err
			}
			if timeout < 0 {
				return usagef("--timeout %v: want a positive number of seconds", timeout)
			}
			req.TimeoutS = timeout
			if stdin {
				b, err := io.ReadAll(c.in)
				if err != nil {
					return fmt.Errorf("reading stdin: %w", err)
				}
				req.Stdin = string(b)
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			if req.Background {
				j, err := cl.StartJob(cmd.Context(), id, req)
				if err != nil {
					return err
				}
				if c.json {
					return c.printJSON(j)
				}
				_, err = fmt.Fprintln(c.out, j.ID)
				return err
			}
			if c.json {
				res, err := cl.Exec(cmd.Context(), id, req)
				if err != nil {
					return err
				}
				if err := c.printJSON(res); err != nil {
					return err
				}
				return exitWith(res.ExitCode)
			}
			timedOut := false
			code, err := cl.ExecStream(cmd.Context(), id, req, func(ev api.ExecEvent) error {
				switch {
				case ev.Stdout != nil:
					_, err := io.WriteString(c.out, *ev.Stdout)
					return err
				case ev.Stderr != nil:
					_, err := io.WriteString(c.errOut, *ev.Stderr)
					return err
				}
				timedOut = ev.TimedOut
				return nil
			})
			if err != nil {
				return err
			}
			if timedOut && req.Shell != "" {
				fmt.Fprintf(c.errOut, "warren: the command timed out after %vs and was interrupted (SIGINT); the shell lives on\n", timeout)
			} else if timedOut {
				fmt.Fprintf(c.errOut, "warren: the command timed out after %vs and was killed\n", timeout)
			}
			return exitWith(code)
		},
	}
	fl := cmd.Flags()
	fl.SetInterspersed(false) // flags after ID are the command's
	fl.StringVar(&req.Cwd, "cwd", "", "working directory (default: the image's)")
	fl.StringArrayVar(&envs, "env", nil, "environment variable K=V (repeatable)")
	fl.Float64Var(&timeout, "timeout", 0, "kill the command after this many seconds (exit code 124)")
	fl.BoolVar(&stdin, "stdin", false, "read all of this program's stdin and send it as the command's")
	fl.StringVar(&req.Shell, "shell", "", "run the command as a line of this named shell (see 'warren shells')")
	fl.BoolVar(&req.Background, "background", false, "start the command as a background job and print its id")
	return cmd
}

// execArgs accepts ID, an optional "--", and at least one word of command.
func execArgs(_ *cobra.Command, args []string) error {
	if _, argv := splitExecArgs(args); len(argv) == 0 {
		return fmt.Errorf("want a sandbox ID and a command: warren exec ID -- CMD [ARGS...]")
	}
	return nil
}

// splitExecArgs splits exec's arguments into the sandbox id and the argv.
// Flags stop at ID, so a "--" after it is still in args.
func splitExecArgs(args []string) (id string, argv []string) {
	if len(args) == 0 {
		return "", nil
	}
	id, argv = args[0], args[1:]
	if len(argv) > 0 && argv[0] == "--" {
		argv = argv[1:]
	}
	return id, argv
}

// exitWith is the error that ends the CLI with a command's exit code.
func exitWith(code int) error {
	switch {
	case code == 0:
		return nil
	case code < 0 || code > 255:
		return &exitCodeError{exitError}
	}
	return &exitCodeError{code}
}
