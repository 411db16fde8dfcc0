package main

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/client"
)

func (c *cli) jobsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "jobs ID [JOB]",
		Short: "List a sandbox's background jobs, or show one",
		Long: `List the background jobs of a sandbox (started with 'warren exec
--background'), or show one. A job keeps running after the client that
started it has gone; read its output with 'warren logs', stop it with
'warren kill'.`,
		Args:        cobra.RangeArgs(1, 2),
		Annotations: map[string]string{annNotFound: hintSandboxes},
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			var jobs []api.Job
			if len(args) == 2 {
				j, err := cl.GetJob(cmd.Context(), args[0], args[1])
				if err != nil {
					return err
				}
				if c.json {
					return c.printJSON(j)
				}
				jobs = []api.Job{j}
			} else {
				if jobs, err = cl.ListJobs(cmd.Context(), args[0]); err != nil {
					return err
				}
				if c.json {
					if jobs == nil {
						jobs = []api.Job{}
					}
					return c.printJSON(jobs)
				}
			}
			return writeJobTable(c.out, jobs, time.Now())
		},
	}
}

func writeJobTable(w io.Writer, jobs []api.Job, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSTATE\tEXIT\tSTARTED\tOUTPUT\tCOMMAND")
	for _, j := range jobs {
		exit := "-"
		if j.ExitCode != nil {
			exit = strconv.Itoa(*j.ExitCode)
			if j.Signal != "" {
				exit += " (" + j.Signal + ")"
			}
		}
		cmd := j.Command
		if len(cmd) > 60 {
			cmd = cmd[:57] + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", j.ID, j.State, exit, age(j.StartedAt, now),
			formatBytes(j.StdoutBytes+j.StderrBytes), cmd)
	}
	return tw.Flush()
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func (c *cli) logsCommand() *cobra.Command {
	var (
		opts   client.OutputOptions
		stderr bool
	)
	cmd := &cobra.Command{
		Use:   "logs ID JOB",
		Short: "Print a background job's output",
		Long: `Print a background job's stdout (or --stderr) as it was written, bytes
intact. With -f, keep printing as the job writes, until it ends.

Only the last 32 to 64 MiB of each stream are kept; output before that is
gone, and printing starts at the oldest byte still kept.`,
		Args:        cobra.ExactArgs(2),
		Annotations: map[string]string{annNotFound: hintSandboxes},
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Offset < 0 {
				return usagef("--offset %d: want a byte offset, 0 or more", opts.Offset)
			}
			if stderr {
				opts.Stream = "stderr"
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			rc, _, err := cl.JobOutput(cmd.Context(), args[0], args[1], opts)
			if err != nil {
				return err
			}
			defer rc.Close()
			_, err = io.Copy(c.out, rc)
			return err
		},
	}
	fl := cmd.Flags()
	fl.BoolVarP(&opts.Follow, "follow", "f", false, "keep printing output as it comes, until the job ends")
	fl.BoolVar(&stderr, "stderr", false, "print the job's stderr instead of its stdout")
	fl.Int64Var(&opts.Offset, "offset", 0, "start at this byte of the stream")
	return cmd
}

func (c *cli) killCommand() *cobra.Command {
	var signal string
	cmd := &cobra.Command{
		Use:         "kill ID JOB",
		Short:       "Send a signal to a background job (TERM by default)",
		Long:        `Send a signal to a background job and everything it started (its session).`,
		Args:        cobra.ExactArgs(2),
		Annotations: map[string]string{annNotFound: hintSandboxes},
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			j, err := cl.KillJob(cmd.Context(), args[0], args[1], signal)
			if err != nil {
				return err
			}
			if c.json {
				return c.printJSON(j)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&signal, "signal", "s", "TERM", "the signal: a name (TERM, KILL, INT, HUP...) or a number")
	return cmd
}
