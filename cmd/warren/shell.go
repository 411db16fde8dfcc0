package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/warrenhq/warren/api"
)

// What runs inside a sandbox: the terminal, named shells, jobs, code.

func (c *cli) insideCommands() []*cobra.Command {
	return []*cobra.Command{
		c.shellCommand(), c.shellsCommand(),
		c.jobsCommand(), c.logsCommand(), c.killCommand(),
		c.codeCommand(), c.contextsCommand(),
	}
}

func (c *cli) shellCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "shell ID",
		Short: "Open an interactive shell in a sandbox",
		Long: `Open an interactive login shell in a sandbox, on a terminal of this one's
size, and exit with the shell's exit code when it ends.

When this program's stdin is not a terminal, what it reads is typed into the
shell, and its end is a ^D:

  echo 'make test; exit $?' | warren shell ID`,
		Args:        cobra.ExactArgs(1),
		Annotations: map[string]string{annNotFound: hintSandboxes},
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			inFile, _ := c.in.(*os.File)
			outFile, _ := c.out.(*os.File)
			interactive := inFile != nil && term.IsTerminal(int(inFile.Fd()))
			cols, rows := 0, 0
			if outFile != nil && term.IsTerminal(int(outFile.Fd())) {
				cols, rows, _ = term.GetSize(int(outFile.Fd()))
			}
			t, err := cl.OpenTerminal(cmd.Context(), args[0], cols, rows)
			if err != nil {
				return err
			}
			defer t.Close()
			if interactive {
				old, err := term.MakeRaw(int(inFile.Fd()))
				if err != nil {
					return fmt.Errorf("putting the terminal in raw mode: %w", err)
				}
				defer term.Restore(int(inFile.Fd()), old)
			}
			if outFile != nil && term.IsTerminal(int(outFile.Fd())) {
				winch := make(chan os.Signal, 1)
				signal.Notify(winch, syscall.SIGWINCH)
				defer signal.Stop(winch)
				go func() {
					for range winch {
						if w, h, err := term.GetSize(int(outFile.Fd())); err == nil {
							_ = t.Resize(w, h)
						}
					}
				}()
			}
			go func() {
				_, err := io.Copy(t, c.in)
				if err == nil && !interactive {
					_, _ = t.Write([]byte{4}) // ^D: the end of what was piped in
				}
			}()
			if _, err := io.Copy(c.out, t); err != nil {
				return err
			}
			code, ok := t.ExitCode()
			if !ok {
				return errors.New("the terminal closed before the shell exited")
			}
			return exitWith(code)
		},
	}
}

func (c *cli) shellsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "shells",
		Short: "Create, list and delete named shells",
		Long: `A named shell is a bash that lives in the sandbox between commands: run
commands in it with 'warren exec --shell NAME ID -- ...', and cd, exported
variables, functions, aliases and background jobs (&) persist from one to the
next, across pause, resume and fork.`,
	}
	var (
		cwd  string
		envs []string
	)
	create := &cobra.Command{
		Use:         "create ID NAME",
		Short:       "Start a named shell",
		Args:        cobra.ExactArgs(2),
		Annotations: map[string]string{annNotFound: hintSandboxes},
		RunE: func(cmd *cobra.Command, args []string) error {
			env, err := parseKV("--env", envs)
			if err != nil {
				return err
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			sh, err := cl.CreateShell(cmd.Context(), args[0], api.CreateShellRequest{Name: args[1], Cwd: cwd, Env: env})
			if err != nil {
				return err
			}
			if c.json {
				return c.printJSON(sh)
			}
			return nil
		},
	}
	create.Flags().StringVar(&cwd, "cwd", "", "where the shell starts")
	create.Flags().StringArrayVar(&envs, "env", nil, "variable K=V exported in the shell (repeatable)")
	ls := &cobra.Command{
		Use:         "ls ID",
		Short:       "List named shells",
		Args:        cobra.ExactArgs(1),
		Annotations: map[string]string{annNotFound: hintSandboxes},
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			shells, err := cl.ListShells(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if c.json {
				if shells == nil {
					shells = []api.Shell{}
				}
				return c.printJSON(shells)
			}
			tw := tabwriter.NewWriter(c.out, 0, 0, 3, ' ', 0)
			fmt.Fprintln(tw, "NAME\tPID\tCALLS\tBUSY\tCREATED")
			for _, sh := range shells {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%v\t%s\n", sh.Name, sh.PID, sh.Calls, sh.Busy, age(sh.CreatedAt, time.Now()))
			}
			return tw.Flush()
		},
	}
	rm := &cobra.Command{
		Use:         "rm ID NAME",
		Short:       "Kill a named shell and what runs in it",
		Args:        cobra.ExactArgs(2),
		Annotations: map[string]string{annNotFound: hintSandboxes},
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			return cl.DeleteShell(cmd.Context(), args[0], args[1])
		},
	}
	cmd.AddCommand(create, ls, rm)
	return cmd
}
