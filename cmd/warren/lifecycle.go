package main

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/warrenhq/warren/api"
)

// Pause, resume, snapshots, revert and fork.

func (c *cli) lifecycleCommands() []*cobra.Command {
	return []*cobra.Command{
		c.sandboxStateCommand("pause", "Pause a sandbox (memory kept; stored to disk after a while)",
			func(cmd *cobra.Command, id string) (api.Sandbox, error) {
				cl, err := c.client()
				if err != nil {
					return api.Sandbox{}, err
				}
				return cl.PauseSandbox(cmd.Context(), id)
			}),
		c.sandboxStateCommand("resume", "Resume a paused sandbox, every process as it was",
			func(cmd *cobra.Command, id string) (api.Sandbox, error) {
				cl, err := c.client()
				if err != nil {
					return api.Sandbox{}, err
				}
				return cl.ResumeSandbox(cmd.Context(), id)
			}),
		c.snapshotCommand(), c.snapshotsCommand(), c.revertCommand(), c.forkCommand(),
	}
}

func (c *cli) sandboxStateCommand(use, short string, op func(*cobra.Command, string) (api.Sandbox, error)) *cobra.Command {
	return &cobra.Command{
		Use:         use + " ID",
		Short:       short,
		Args:        cobra.ExactArgs(1),
		Annotations: map[string]string{annNotFound: hintSandboxes},
		RunE: func(cmd *cobra.Command, args []string) error {
			sb, err := op(cmd, args[0])
			if err != nil {
				return err
			}
			if c.json {
				return c.printJSON(sb)
			}
			_, err = fmt.Fprintf(c.out, "%s %s\n", sb.ID, sb.State)
			return err
		},
	}
}

func (c *cli) snapshotCommand() *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "snapshot ID",
		Short: "Snapshot a running sandbox and print the snapshot's id",
		Long: `Save a running sandbox's memory, processes and disk while it keeps running,
and print the snapshot's id (so SNAP=$(warren snapshot ID) works).`,
		Args:        cobra.ExactArgs(1),
		Annotations: map[string]string{annNotFound: hintSandboxes},
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			sn, err := cl.SnapshotSandbox(cmd.Context(), args[0], name)
			if err != nil {
				return err
			}
			if c.json {
				return c.printJSON(sn)
			}
			_, err = fmt.Fprintln(c.out, sn.ID)
			return err
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "a name for the snapshot")
	return cmd
}

func (c *cli) snapshotsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshots [ID]",
		Short: "List snapshots (of one sandbox with ID); rm SNAPSHOT deletes one",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			id := ""
			if len(args) == 1 {
				id = args[0]
			}
			sns, err := cl.ListSnapshots(cmd.Context(), id)
			if err != nil {
				return err
			}
			if c.json {
				if sns == nil {
					sns = []api.Snapshot{}
				}
				return c.printJSON(sns)
			}
			return writeSnapshotTable(c.out, sns, time.Now())
		},
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "rm SNAPSHOT...",
		Short: "Delete snapshots",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			for _, id := range args {
				if err := cl.DeleteSnapshot(cmd.Context(), id); err != nil {
					return fmt.Errorf("%s: %w", id, err)
				}
				fmt.Fprintln(c.out, id)
			}
			return nil
		},
	})
	return cmd
}

func writeSnapshotTable(w io.Writer, sns []api.Snapshot, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSANDBOX\tKIND\tPARENT\tSIZE\tCREATED")
	for _, sn := range sns {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sn.ID, dash(sn.Name), sn.SandboxID, sn.Kind,
			dash(sn.ParentID), humanSize(sn.SizeBytes), age(sn.CreatedAt, now))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (c *cli) revertCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "revert ID SNAPSHOT",
		Short: "Return a sandbox to a snapshot, same id (a failed revert changes nothing)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			sb, err := cl.RevertSandbox(cmd.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			if c.json {
				return c.printJSON(sb)
			}
			_, err = fmt.Fprintf(c.out, "%s %s\n", sb.ID, sb.State)
			return err
		},
	}
}

func (c *cli) forkCommand() *cobra.Command {
	var count int
	cmd := &cobra.Command{
		Use:   "fork ID|SNAPSHOT",
		Short: "Start copies of a sandbox (snapshotted now) or of a snapshot; print their ids",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if count < 1 {
				return &usageError{fmt.Errorf("--count %s: must be at least 1", strconv.Itoa(count))}
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			var sbs []api.Sandbox
			if len(args[0]) > 3 && args[0][:3] == "sn-" {
				sbs, err = cl.ForkSnapshot(cmd.Context(), args[0], count)
			} else {
				sbs, err = cl.ForkSandbox(cmd.Context(), args[0], count)
			}
			if err != nil {
				return err
			}
			if c.json {
				return c.printJSON(sbs)
			}
			for _, sb := range sbs {
				fmt.Fprintln(c.out, sb.ID)
			}
			return nil
		},
	}
	cmd.Flags().IntVarP(&count, "count", "n", 1, "how many copies")
	return cmd
}
