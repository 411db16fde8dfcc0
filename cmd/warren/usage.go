package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/client"
)

// parseWhen reads --from and --to: an RFC 3339 time, a date, or a
// duration ago ("24h").
func parseWhen(flag, v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if t, err := time.Parse("2006-01-02", v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, usagef("%s %q: give a time (2026-03-01T12:00:00Z), a date (2026-03-01) or a duration ago (24h)", flag, v)
}

func (c *cli) usageCommand() *cobra.Command {
	var from, to, team string
	cmd := &cobra.Command{
		Use:   "usage [--from T] [--to T] [--team NAME]",
		Short: "What your sandboxes used (running vCPU and memory, storage) and its cost",
		Long: `Per sandbox and in total: time running, vCPU-seconds and memory GB-seconds
(paused time costs no compute), storage GB-hours, and the cost from the
server's price table. By default this month until now.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			now := time.Now()
			var opts client.UsageOptions
			var err error
			if opts.From, err = parseWhen("--from", from, now); err != nil {
				return err
			}
			if opts.To, err = parseWhen("--to", to, now); err != nil {
				return err
			}
			opts.Team = team
			cl, err := c.client()
			if err != nil {
				return err
			}
			u, err := cl.Usage(cmd.Context(), opts)
			if err != nil {
				return err
			}
			if c.json {
				return c.printJSON(u)
			}
			return writeUsageTable(c.out, u)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&from, "from", "", "start: a time, a date or a duration ago (default: the start of this month)")
	fl.StringVar(&to, "to", "", "end (default: now)")
	fl.StringVar(&team, "team", "", "another team's usage (admin key)")
	return cmd
}

func formatSeconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(time.Second).String()
}

func writeUsageTable(w io.Writer, u api.Usage) error {
	fmt.Fprintf(w, "team %s, %s to %s\n", u.Team, u.From.Local().Format("2006-01-02 15:04"), u.To.Local().Format("2006-01-02 15:04"))
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "SANDBOX\tRUNNING\tVCPU-S\tMEMORY GB-S\tSTORAGE GB-H\tCOST $\t")
	row := func(name string, f api.UsageFigures) {
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t%.3f\t%.4f\t\n", name, formatSeconds(f.RunningSeconds), f.VCPUSeconds,
			f.MemoryGBSeconds, f.StorageGBHours, f.Cost.Total)
	}
	for _, s := range u.Sandboxes {
		row(s.SandboxID, s.UsageFigures)
	}
	row("TOTAL", u.Total)
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "prices: $%s per vCPU-second, $%s per GB-second of memory, $%s per GB-month of storage above %s GB free (saved $%.4f)\n",
		formatFloat(u.Prices.VCPUSecond), formatFloat(u.Prices.MemoryGBSecond), formatFloat(u.Prices.StorageGBMonth),
		formatFloat(u.Prices.StorageFreeGB), u.Total.Cost.StorageFree)
	return err
}

func (c *cli) eventsCommand() *cobra.Command {
	var after int64
	var all bool
	cmd := &cobra.Command{
		Use:   "events [--after ID | --all]",
		Short: "Follow your sandboxes' lifecycle events (Ctrl-C to stop)",
		Long: `Print your team's lifecycle events as they happen: created, paused,
idle-paused, resumed, snapshotted, forked, reverted, restored, stored, deleted,
error, quota-refused. --after ID starts after that event, --all with the oldest
the server keeps. With --json, one JSON object per line.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			start := int64(client.FromNow)
			switch {
			case all:
				start = 0
			case cmd.Flags().Changed("after"):
				start = after
			}
			err = cl.Events(cmd.Context(), start, func(ev api.Event) error {
				if c.json {
					return c.printJSONLine(ev)
				}
				_, err := fmt.Fprintln(c.out, formatEvent(ev))
				return err
			})
			if errors.Is(err, cmd.Context().Err()) && cmd.Context().Err() != nil {
				return nil // interrupted: the normal end
			}
			return err
		},
	}
	cmd.Flags().Int64Var(&after, "after", 0, "start after this event id")
	cmd.Flags().BoolVar(&all, "all", false, "start with the oldest event kept")
	return cmd
}

func formatEvent(ev api.Event) string {
	s := fmt.Sprintf("%d\t%s\t%-13s\t%s", ev.ID, ev.At.Local().Format("15:04:05.000"), ev.Kind, orDash(ev.SandboxID))
	if ev.State != "" {
		s += "\t" + ev.State
	}
	if ev.SnapshotID != "" {
		s += "\tsnapshot " + ev.SnapshotID
	}
	if ev.DurationMS > 0 {
		s += "\t" + (time.Duration(ev.DurationMS) * time.Millisecond).String()
	}
	if ev.Op != "" {
		s += "\t" + ev.Op
	}
	if ev.Error != "" {
		s += "\t" + ev.Error
	}
	return s
}

// printJSONLine writes v as one line, for streams.
func (c *cli) printJSONLine(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = c.out.Write(append(b, '\n'))
	return err
}

func (c *cli) webhookCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "webhook",
		Aliases: []string{"webhooks"},
		Short:   "Deliver your team's events to a URL, signed",
	}
	add := &cobra.Command{
		Use:   "add URL",
		Short: "POST each event to URL from now on; prints the signing secret, shown only now",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			w, err := cl.CreateWebhook(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if c.json {
				return c.printJSON(w)
			}
			fmt.Fprintf(c.errOut, "webhook %s; verify deliveries with this secret (Warren-Signature), shown only now\n", w.ID)
			_, err = fmt.Fprintln(c.out, w.Secret)
			return err
		},
	}
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List webhooks",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			ws, err := cl.ListWebhooks(cmd.Context())
			if err != nil {
				return err
			}
			if c.json {
				if ws == nil {
					ws = []api.Webhook{}
				}
				return c.printJSON(ws)
			}
			tw := tabwriter.NewWriter(c.out, 0, 0, 3, ' ', 0)
			fmt.Fprintln(tw, "ID\tURL\tDELIVERED\tLAST STATUS\tLAST ERROR")
			for _, w := range ws {
				status := "-"
				if w.LastStatus != 0 {
					status = strconv.Itoa(w.LastStatus)
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", w.ID, w.URL, w.Delivered, status, orDash(w.LastError))
			}
			return tw.Flush()
		},
	}
	rm := &cobra.Command{
		Use:   "rm ID...",
		Short: "Stop delivering to webhooks",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			for _, id := range args {
				if err := cl.DeleteWebhook(cmd.Context(), id); err != nil {
					return fmt.Errorf("%s: %w", id, err)
				}
				fmt.Fprintln(c.out, id)
			}
			return nil
		},
	}
	cmd.AddCommand(add, ls, rm)
	return cmd
}

func (c *cli) metricsCommand() *cobra.Command {
	return &cobra.Command{
		Use:         "metrics ID",
		Short:       "CPU and memory a sandbox uses now",
		Args:        cobra.ExactArgs(1),
		Annotations: map[string]string{annNotFound: hintSandboxes},
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			m, err := cl.SandboxMetrics(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if c.json {
				return c.printJSON(m)
			}
			limit := "-"
			if m.MemoryLimitBytes > 0 {
				limit = formatBytes(m.MemoryLimitBytes)
			}
			_, err = fmt.Fprintf(c.out, "%s  %s  cpu %.2fs (of %v vCPU)  memory %s of %s\n", m.SandboxID, m.State,
				m.CPUSeconds, m.CPUs, formatBytes(m.MemoryBytes), limit)
			return err
		},
	}
}
