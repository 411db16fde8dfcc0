package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/warrenhq/warren/api"
)

// accountCommands are keys, quotas, usage, events, webhooks and sandbox
// metrics.
func (c *cli) accountCommands() []*cobra.Command {
	return []*cobra.Command{c.keyCommand(), c.quotaCommand(), c.usageCommand(), c.eventsCommand(),
		c.webhookCommand(), c.metricsCommand()}
}

// cliConfig is the CLI's config file: where the server is and the key to
// use, below flags and environment variables.
type cliConfig struct {
	URL string `json:"url"`
	Key string `json:"key"`
}

// cliConfigPath is $WARREN_CONFIG, else $XDG_CONFIG_HOME/warren/config.json,
// else ~/.config/warren/config.json.
func cliConfigPath() string {
	if p := os.Getenv("WARREN_CONFIG"); p != "" {
		return p
	}
	if d := os.Getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "warren", "config.json")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".config", "warren", "config.json")
}

// configured fills in the URL and key that flags and the environment left
// unset from the config file, if there is one.
func (c *cli) configured(u, key string) (string, string, error) {
	path := cliConfigPath()
	if path == "" {
		return u, key, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return u, key, nil
	}
	if err != nil {
		return u, key, fmt.Errorf("reading the config file: %w", err)
	}
	var cfg cliConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		return u, key, fmt.Errorf("config file %s: %v; it holds {\"url\": \"http://host:7070\", \"key\": \"wk_...\"}", path, err)
	}
	if cfg.URL != "" && !c.root.PersistentFlags().Changed("url") && os.Getenv("WARREN_API_URL") == "" {
		u = cfg.URL
	}
	if key == "" {
		key = cfg.Key
	}
	return u, key, nil
}

func (c *cli) keyCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "key",
		Aliases: []string{"keys"},
		Short:   "API keys of teams (admin key)",
		Long: `Each team has its own keys; a key sees and touches only its team's sandboxes,
snapshots, templates, usage and events. Making and revoking keys needs the
admin key (the server's <state-dir>/admin.key).`,
	}
	cmd.AddCommand(c.keyCreateCommand(), c.keyLsCommand(), c.keyRevokeCommand())
	return cmd
}

func (c *cli) keyCreateCommand() *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "create TEAM",
		Short: "Make a key for TEAM (made with its first key); prints the key, shown only now",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			k, err := cl.CreateKey(cmd.Context(), args[0], name)
			if err != nil {
				return err
			}
			if c.json {
				return c.printJSON(k)
			}
			fmt.Fprintf(c.errOut, "key %s for team %s; save it now, it is not shown again\n", k.ID, k.Team)
			_, err = fmt.Fprintln(c.out, k.Secret)
			return err
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "what the key is for")
	return cmd
}

func (c *cli) keyLsCommand() *cobra.Command {
	var team string
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List keys (revoked ones too)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			keys, err := cl.ListKeys(cmd.Context(), team)
			if err != nil {
				return err
			}
			if c.json {
				if keys == nil {
					keys = []api.Key{}
				}
				return c.printJSON(keys)
			}
			return writeKeyTable(c.out, keys, time.Now())
		},
	}
	cmd.Flags().StringVar(&team, "team", "", "only this team's")
	return cmd
}

func writeKeyTable(w io.Writer, keys []api.Key, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "ID\tTEAM\tNAME\tPREFIX\tCREATED\tREVOKED")
	for _, k := range keys {
		revoked := "-"
		if k.RevokedAt != nil {
			revoked = age(*k.RevokedAt, now)
		}
		name := k.Name
		if k.Admin {
			name = "(admin)"
		}
		prefix := "-"
		if k.Prefix != "" {
			prefix = k.Prefix + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Team, orDash(name), prefix, age(k.CreatedAt, now), revoked)
	}
	return tw.Flush()
}

func (c *cli) keyRevokeCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "revoke ID...",
		Short: "Revoke keys: every later call with them is refused",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			for _, id := range args {
				if err := cl.RevokeKey(cmd.Context(), id); err != nil {
					return fmt.Errorf("%s: %w", id, err)
				}
				fmt.Fprintln(c.out, id)
			}
			return nil
		},
	}
}

func (c *cli) quotaCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "quota [TEAM]",
		Short: "Show a team's quotas and what it uses (default: your team's)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			team := ""
			if len(args) == 1 {
				team = args[0]
			}
			q, err := cl.Quota(cmd.Context(), team)
			if err != nil {
				return err
			}
			if c.json {
				return c.printJSON(q)
			}
			return writeQuotaTable(c.out, q)
		},
	}
	cmd.AddCommand(c.quotaSetCommand())
	return cmd
}

// quotaRows pairs each quota's name with its fields.
func quotaRows(q api.Quota) []struct {
	name        string
	limit, over *int64
	used        int64
} {
	return []struct {
		name        string
		limit, over *int64
		used        int64
	}{
		{"running_sandboxes", q.Limits.RunningSandboxes, q.Overrides.RunningSandboxes, q.Used.RunningSandboxes},
		{"running_memory_mb", q.Limits.RunningMemoryMB, q.Overrides.RunningMemoryMB, q.Used.RunningMemoryMB},
		{"storage_mb", q.Limits.StorageMB, q.Overrides.StorageMB, q.Used.StorageMB},
		{"creates_per_minute", q.Limits.CreatesPerMinute, q.Overrides.CreatesPerMinute, q.Used.CreatesPerMinute},
	}
}

func writeQuotaTable(w io.Writer, q api.Quota) error {
	fmt.Fprintf(w, "team %s\n", q.Team)
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "QUOTA\tUSED\tLIMIT\tSET BY")
	for _, r := range quotaRows(q) {
		limit := "unlimited"
		if r.limit != nil && *r.limit > 0 {
			limit = strconv.FormatInt(*r.limit, 10)
		}
		by := "default"
		if r.over != nil {
			by = "team"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", r.name, r.used, limit, by)
	}
	return tw.Flush()
}

func (c *cli) quotaSetCommand() *cobra.Command {
	flags := []string{"running-sandboxes", "running-memory-mb", "storage-mb", "creates-per-minute"}
	vals := make([]string, len(flags))
	cmd := &cobra.Command{
		Use:   "set TEAM [--running-sandboxes N] [--running-memory-mb N] [--storage-mb N] [--creates-per-minute N]",
		Short: "Set a team's quotas (admin key); N is a number (0: unlimited) or \"default\"",
		Long: `Set a team's quotas; quotas not named keep their setting. A number overrides the
server's default (0 is unlimited); "default" goes back to it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			q, err := cl.Quota(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			o := q.Overrides
			dst := []**int64{&o.RunningSandboxes, &o.RunningMemoryMB, &o.StorageMB, &o.CreatesPerMinute}
			changed := false
			for i, f := range flags {
				if !cmd.Flags().Changed(f) {
					continue
				}
				changed = true
				if vals[i] == "default" {
					*dst[i] = nil
					continue
				}
				n, err := strconv.ParseInt(vals[i], 10, 64)
				if err != nil || n < 0 {
					return usagef("--%s %q: want a number (0: unlimited) or \"default\"", f, vals[i])
				}
				*dst[i] = &n
			}
			if !changed {
				return usagef("name at least one quota to set, like --running-sandboxes 10")
			}
			q, err = cl.SetQuota(cmd.Context(), args[0], o)
			if err != nil {
				return err
			}
			if c.json {
				return c.printJSON(q)
			}
			return writeQuotaTable(c.out, q)
		},
	}
	help := []string{"running sandboxes at once", "memory of running sandboxes, in MB", "snapshot storage, in MB", "sandboxes created per minute"}
	for i, f := range flags {
		cmd.Flags().StringVar(&vals[i], f, "", help[i])
	}
	return cmd
}
