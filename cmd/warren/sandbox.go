package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/client"
)

func (c *cli) createCommand() *cobra.Command {
	var (
		req            api.CreateSandboxRequest
		cpus           float64
		memory, disk   int64
		envs, metadata []string
		nf             netFlags
	)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a sandbox and print its id",
		Long: `Create a sandbox, wait until it answers commands, and print its id alone,
so that ID=$(warren create) works. With --json, print the whole sandbox.`,
		Args:        noArgs,
		Annotations: map[string]string{annNotFound: hintImages},
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if req.Env, err = parseKV("--env", envs); err != nil {
				return err
			}
			if req.Metadata, err = parseKV("--metadata", metadata); err != nil {
				return err
			}
			if err := nf.apply(&req); err != nil {
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
			cl, err := c.client()
			if err != nil {
				return err
			}
			sb, err := cl.CreateSandbox(cmd.Context(), req)
			if err != nil {
				return err
			}
			if c.json {
				return c.printJSON(sb)
			}
			_, err = fmt.Fprintln(c.out, sb.ID)
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&req.Image, "image", "", "image to boot (default: the server's default image)")
	fl.StringVar(&req.Template, "template", "", "start from this template (warren template build)")
	fl.StringVar(&req.Snapshot, "snapshot", "", "start from this snapshot")
	fl.StringVar(&req.Name, "name", "", "a name for people")
	fl.Float64Var(&cpus, "cpus", 0, "vCPUs (default: the server's)")
	fl.Int64Var(&memory, "memory", 0, "memory in MB (default: the server's)")
	fl.Int64Var(&disk, "disk", 0, "disk in MB (default: the server's)")
	fl.StringArrayVar(&envs, "env", nil, "environment variable K=V of every command (repeatable)")
	fl.StringArrayVar(&metadata, "metadata", nil, "metadata K=V to find the sandbox by (repeatable)")
	nf.register(fl)
	return cmd
}

func (c *cli) lsCommand() *cobra.Command {
	var (
		state    string
		metadata []string
	)
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List sandboxes",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			md, err := parseKV("--metadata", metadata)
			if err != nil {
				return err
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			sbs, err := cl.ListSandboxes(cmd.Context(), client.ListOptions{State: state, Metadata: md})
			if err != nil {
				return err
			}
			if c.json {
				if sbs == nil {
					sbs = []api.Sandbox{}
				}
				return c.printJSON(sbs)
			}
			return writeSandboxTable(c.out, sbs, time.Now())
		},
	}
	cmd.Flags().StringVar(&state, "state", "", "only sandboxes in this state: creating, running, paused or error")
	cmd.Flags().StringArrayVar(&metadata, "metadata", nil, "only sandboxes with metadata K=V (repeatable)")
	return cmd
}

func writeSandboxTable(w io.Writer, sbs []api.Sandbox, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSTATE\tIMAGE\tCPUS\tMEMORY\tCREATED")
	for _, sb := range sbs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sb.ID, orDash(sb.Name), sb.State, orDash(source(sb)),
			formatFloat(sb.CPUs), strconv.FormatInt(sb.MemoryMB, 10)+" MB", age(sb.CreatedAt, now))
	}
	return tw.Flush()
}

// source is what a sandbox was made from: its image, else its template or
// snapshot.
func source(sb api.Sandbox) string {
	switch {
	case sb.Image != "":
		return sb.Image
	case sb.Template != "":
		return "template:" + sb.Template
	case sb.FromSnapshot != "":
		return "snapshot:" + sb.FromSnapshot
	}
	return ""
}

func (c *cli) getCommand() *cobra.Command {
	return &cobra.Command{
		Use:         "get ID",
		Short:       "Show a sandbox",
		Args:        cobra.ExactArgs(1),
		Annotations: map[string]string{annNotFound: hintSandboxes},
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			sb, err := cl.GetSandbox(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if c.json {
				return c.printJSON(sb)
			}
			return writeSandbox(c.out, sb, time.Now())
		},
	}
}

// writeSandbox writes sb as aligned "key: value" lines.
func writeSandbox(w io.Writer, sb api.Sandbox, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	line := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	line("id", sb.ID)
	line("name", sb.Name)
	line("state", sb.State)
	line("error", sb.Error)
	line("image", sb.Image)
	line("template", sb.Template)
	line("from_snapshot", sb.FromSnapshot)
	line("created", sb.CreatedAt.Local().Format(time.RFC3339)+" ("+age(sb.CreatedAt, now)+")")
	line("cpus", formatFloat(sb.CPUs))
	line("memory", strconv.FormatInt(sb.MemoryMB, 10)+" MB")
	line("disk", strconv.FormatInt(sb.DiskMB, 10)+" MB")
	line("egress", formatEgress(sb.Network.Egress))
	for _, v := range sb.Volumes {
		mode := "rw"
		if v.ReadOnly {
			mode = "ro"
		}
		line("volume", fmt.Sprintf("%s at %s (%s)", v.Volume, v.Path, mode))
	}
	if sb.Idle.Action != "" {
		line("idle", fmt.Sprintf("%s after %ds", sb.Idle.Action, sb.Idle.TimeoutS))
	}
	if sb.CheckpointIntervalS > 0 {
		line("checkpoint_interval", strconv.Itoa(sb.CheckpointIntervalS)+"s")
	}
	if sb.LastCheckpointAt != nil {
		line("last_checkpoint", age(*sb.LastCheckpointAt, now))
	}
	for _, k := range slices.Sorted(maps.Keys(sb.Env)) {
		line("env", k+"="+sb.Env[k])
	}
	for _, k := range slices.Sorted(maps.Keys(sb.Metadata)) {
		line("metadata", k+"="+sb.Metadata[k])
	}
	return tw.Flush()
}

func formatEgress(e any) string {
	switch e := e.(type) {
	case nil:
		return ""
	case string:
		return e
	case []any:
		parts := make([]string, len(e))
		for i, p := range e {
			parts[i] = fmt.Sprint(p)
		}
		return strings.Join(parts, ", ")
	}
	return fmt.Sprint(e)
}

func (c *cli) rmCommand() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:         "rm ID...",
		Aliases:     []string{"delete"},
		Short:       "Delete sandboxes (their volumes stay)",
		Args:        cobra.MinimumNArgs(1),
		Annotations: map[string]string{annNotFound: hintSandboxes},
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			failed := 0
			for _, id := range args {
				err := cl.DeleteSandbox(cmd.Context(), id)
				switch {
				case err == nil, force && errors.Is(err, client.ErrNotFound):
					if !c.json {
						fmt.Fprintln(c.out, id)
					}
				default:
					failed++
					fmt.Fprintf(c.errOut, "warren: rm %s: %s\n", id, c.explain(cmd, err))
				}
			}
			if failed > 0 {
				return fmt.Errorf("%d of %d sandboxes not deleted", failed, len(args))
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&force, "force", "f", false, "succeed for sandboxes that do not exist")
	return cmd
}

// parseKV parses K=V arguments of flag into a map; nil when there are none.
func parseKV(flag string, kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usagef("%s %q: want KEY=VALUE", flag, kv)
		}
		m[k] = v
	}
	return m, nil
}

// age is how long ago t was, for people: "12s ago", "3m ago", "5d ago".
func age(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd ago", int(d/(24*time.Hour)))
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
