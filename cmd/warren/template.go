package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/warrenhq/warren/api"
)

func (c *cli) templateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "template",
		Short: "Templates: an image set up once and snapshotted, so sandboxes start warm",
	}
	cmd.AddCommand(c.templateBuildCommand(), c.templateLsCommand(), c.templateRmCommand())
	return cmd
}

func (c *cli) templateBuildCommand() *cobra.Command {
	var (
		req     api.CreateTemplateRequest
		envs    []string
		cpus    float64
		memory  int64
		disk    int64
		timeout int
	)
	cmd := &cobra.Command{
		Use:   "build NAME [--image I] [--setup CMD]...",
		Short: "Build or rebuild a template; the setup's output streams to stderr",
		Long: `Boot the image, run each --setup command in order (by /bin/sh -c), wait until
the machine is idle, and snapshot it as template NAME. Sandboxes created with
'warren create --template NAME' start from that snapshot. Rebuilding replaces
the template only once the new build is complete; sandboxes already made are
not touched.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Name = args[0]
			var err error
			if req.Env, err = parseKV("--env", envs); err != nil {
				return err
			}
			fl := cmd.Flags()
			if fl.Changed("cpus") {
				req.CPUs = &cpus
			}
			if fl.Changed("memory") {
				req.MemoryMB = &memory
			}
			if fl.Changed("disk") {
				req.DiskMB = &disk
			}
			req.SetupTimeoutS = timeout
			cl, err := c.client()
			if err != nil {
				return err
			}
			start := time.Now()
			t, err := cl.BuildTemplate(cmd.Context(), req, func(ev api.TemplateEvent) {
				switch {
				case ev.Command != "":
					fmt.Fprintf(c.errOut, "==> [%d] %s\n", ev.Step, ev.Command)
				case ev.Stdout != nil:
					io.WriteString(c.errOut, *ev.Stdout)
				case ev.Stderr != nil:
					io.WriteString(c.errOut, *ev.Stderr)
				case ev.Message != "":
					fmt.Fprintf(c.errOut, "==> %s\n", ev.Message)
				}
			})
			if err != nil {
				return err
			}
			if c.json {
				return c.printJSON(t)
			}
			fmt.Fprintf(c.errOut, "==> template %s built in %s (snapshot %s)\n", t.Name, time.Since(start).Round(time.Millisecond), t.SnapshotID)
			_, err = fmt.Fprintln(c.out, t.Name)
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&req.Image, "image", "", "image to boot (default: the server's default image)")
	fl.StringArrayVar(&req.Setup, "setup", nil, "a setup command, run by /bin/sh -c (repeatable, in order)")
	fl.StringArrayVar(&envs, "env", nil, "environment K=V (repeatable)")
	fl.Float64Var(&cpus, "cpus", 0, "vCPUs of sandboxes made from it")
	fl.Int64Var(&memory, "memory", 0, "memory in MB of sandboxes made from it")
	fl.Int64Var(&disk, "disk", 0, "writable disk in MB")
	fl.IntVar(&timeout, "timeout", 0, "seconds each setup command may take (default 1800)")
	return cmd
}

func (c *cli) templateLsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List templates",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			ts, err := cl.ListTemplates(cmd.Context())
			if err != nil {
				return err
			}
			if c.json {
				if ts == nil {
					ts = []api.Template{}
				}
				return c.printJSON(ts)
			}
			return writeTemplateTable(c.out, ts, time.Now())
		},
	}
}

func writeTemplateTable(w io.Writer, ts []api.Template, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tIMAGE\tSTEPS\tCPUS\tMEMORY\tSNAPSHOT\tUPDATED")
	for _, t := range ts {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%v\t%d MB\t%s\t%s\n", t.Name, t.Image, len(t.Setup), t.CPUs, t.MemoryMB, t.SnapshotID, age(t.UpdatedAt, now))
	}
	return tw.Flush()
}

func (c *cli) templateRmCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME...",
		Short: "Delete templates (sandboxes made from them are not affected)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			for _, name := range args {
				if err := cl.DeleteTemplate(cmd.Context(), name); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				fmt.Fprintln(c.out, name)
			}
			return nil
		},
	}
}
