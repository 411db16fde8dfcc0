package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/warrenhq/warren/api"
)

func (c *cli) codeCommand() *cobra.Command {
	var (
		req     api.CodeRequest
		file    string
		timeout float64
	)
	cmd := &cobra.Command{
		Use:   "code [flags] ID [CODE | -]",
		Short: "Run Python in a sandbox's persistent interpreter",
		Long: `Run Python code in a code context of a sandbox: a persistent interpreter
whose variables, imports and functions stay from one call to the next.

The code is the argument, or the file given with -f, or stdin when it is '-'
or missing. What it prints goes to stdout and stderr; the value of its last
expression, if any and not None, is printed after. An exception prints its
traceback on stderr and exits 1; the context keeps its state either way.

  warren code ID 'import math; x = 2'
  warren code ID 'math.sqrt(x)'
  warren code -f analysis.py ID`,
		Args:        cobra.RangeArgs(1, 2),
		Annotations: map[string]string{annNotFound: hintSandboxes},
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout < 0 {
				return usagef("--timeout %v: want a positive number of seconds", timeout)
			}
			req.TimeoutS = timeout
			switch {
			case file != "" && len(args) == 2:
				return usagef("give the code as an argument or with -f, not both")
			case file != "":
				b, err := os.ReadFile(file)
				if err != nil {
					return err
				}
				req.Code = string(b)
			case len(args) == 2 && args[1] != "-":
				req.Code = args[1]
			default:
				b, err := io.ReadAll(c.in)
				if err != nil {
					return fmt.Errorf("reading the code from stdin: %w", err)
				}
				req.Code = string(b)
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			res, err := cl.RunCode(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			if c.json {
				if err := c.printJSON(res); err != nil {
					return err
				}
			} else {
				io.WriteString(c.out, res.Stdout)
				io.WriteString(c.errOut, res.Stderr)
				if res.Result != "" {
					fmt.Fprintln(c.out, res.Result)
				}
				if res.Error != nil {
					tb := res.Error.Traceback
					if tb == "" {
						tb = res.Error.Name + ": " + res.Error.Value
					}
					fmt.Fprint(c.errOut, strings.TrimRight(tb, "\n")+"\n")
				}
				if res.TimedOut {
					fmt.Fprintf(c.errOut, "warren: the code was interrupted at its timeout of %vs\n", timeout)
				}
			}
			if res.Error != nil {
				return exitWith(exitError)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.SetInterspersed(false)
	fl.StringVar(&req.Context, "context", "", "the code context (default: \"default\", made on first use)")
	fl.StringVarP(&file, "file", "f", "", "read the code from this file")
	fl.Float64Var(&timeout, "timeout", 0, "interrupt the code (KeyboardInterrupt) after this many seconds")
	return cmd
}

func (c *cli) contextsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "contexts",
		Short: "Create, list, restart and delete code contexts",
		Long: `A code context is a persistent Python interpreter in a sandbox; 'warren
code --context NAME' runs code in it. The context "default" is made on first
use; others are made with 'warren contexts create'.`,
	}
	var (
		cwd  string
		envs []string
	)
	create := &cobra.Command{
		Use:         "create ID NAME",
		Short:       "Start a code context",
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
			cc, err := cl.CreateContext(cmd.Context(), args[0], api.CreateContextRequest{Name: args[1], Cwd: cwd, Env: env})
			if err != nil {
				return err
			}
			if c.json {
				return c.printJSON(cc)
			}
			return nil
		},
	}
	create.Flags().StringVar(&cwd, "cwd", "", "the interpreter's working directory")
	create.Flags().StringArrayVar(&envs, "env", nil, "environment variable K=V of the interpreter (repeatable)")
	ls := &cobra.Command{
		Use:         "ls ID",
		Short:       "List code contexts",
		Args:        cobra.ExactArgs(1),
		Annotations: map[string]string{annNotFound: hintSandboxes},
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			ccs, err := cl.ListContexts(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if c.json {
				if ccs == nil {
					ccs = []api.CodeContext{}
				}
				return c.printJSON(ccs)
			}
			tw := tabwriter.NewWriter(c.out, 0, 0, 3, ' ', 0)
			fmt.Fprintln(tw, "NAME\tLANGUAGE\tPID\tCALLS\tCREATED")
			for _, cc := range ccs {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", cc.Name, cc.Language, cc.PID, cc.ExecutionCount, age(cc.CreatedAt, time.Now()))
			}
			return tw.Flush()
		},
	}
	nameOp := func(use, short string, op func(cmd *cobra.Command, id, name string) error) *cobra.Command {
		return &cobra.Command{
			Use:         use + " ID NAME",
			Short:       short,
			Args:        cobra.ExactArgs(2),
			Annotations: map[string]string{annNotFound: hintSandboxes},
			RunE:        func(cmd *cobra.Command, args []string) error { return op(cmd, args[0], args[1]) },
		}
	}
	restart := nameOp("restart", "Give a code context a fresh interpreter (its state is lost)", func(cmd *cobra.Command, id, name string) error {
		cl, err := c.client()
		if err != nil {
			return err
		}
		cc, err := cl.RestartContext(cmd.Context(), id, name)
		if err != nil {
			return err
		}
		if c.json {
			return c.printJSON(cc)
		}
		return nil
	})
	rm := nameOp("rm", "End a code context", func(cmd *cobra.Command, id, name string) error {
		cl, err := c.client()
		if err != nil {
			return err
		}
		return cl.DeleteContext(cmd.Context(), id, name)
	})
	cmd.AddCommand(create, ls, restart, rm)
	return cmd
}
