package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/warrenhq/warren/api"
)

// Volumes, and the network flags of create.

const hintVolumes = "run `warren volume ls` to see your volumes"

// networkCommands are the commands of volumes, egress, ports and
// credentials.
func (c *cli) networkCommands() []*cobra.Command {
	return []*cobra.Command{c.volumeCommand(), c.egressCommand(), c.portCommand(), c.credentialCommand(), c.gitCommand()}
}

func (c *cli) volumeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "volume",
		Short: "Make, list and delete volumes (durable storage that outlives sandboxes)",
		Long: `Volumes are durable storage of your team, mounted into sandboxes at create
(warren create --volume NAME:/PATH). They outlive sandboxes, are shared by the
sandboxes that mount them, and are not part of snapshots: a revert does not
roll a volume back, and a fork mounts the same volumes as its parent.`,
	}
	var size int64
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Make a volume (its space is reserved on the host at once)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			v, err := cl.CreateVolume(cmd.Context(), api.CreateVolumeRequest{Name: args[0], SizeMB: size})
			if err != nil {
				return err
			}
			if c.json {
				return c.printJSON(v)
			}
			_, err = fmt.Fprintln(c.out, v.Name)
			return err
		},
	}
	create.Flags().Int64Var(&size, "size", 0, "size in MB (default: 1024)")
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List your volumes with the space they use",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			vols, err := cl.ListVolumes(cmd.Context())
			if err != nil {
				return err
			}
			if c.json {
				if vols == nil {
					vols = []api.Volume{}
				}
				return c.printJSON(vols)
			}
			return writeVolumeTable(c.out, vols, time.Now())
		},
	}
	get := &cobra.Command{
		Use:         "get NAME",
		Short:       "Show a volume",
		Args:        cobra.ExactArgs(1),
		Annotations: map[string]string{annNotFound: hintVolumes},
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			v, err := cl.GetVolume(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if c.json {
				return c.printJSON(v)
			}
			return writeVolumeTable(c.out, []api.Volume{v}, time.Now())
		},
	}
	rm := &cobra.Command{
		Use:         "rm NAME...",
		Short:       "Delete volumes and their data (refused while a sandbox mounts one)",
		Args:        cobra.MinimumNArgs(1),
		Annotations: map[string]string{annNotFound: hintVolumes},
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			for _, name := range args {
				if err := cl.DeleteVolume(cmd.Context(), name); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.AddCommand(create, ls, get, rm)
	return cmd
}

func writeVolumeTable(w io.Writer, vols []api.Volume, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSIZE\tUSED\tAVAILABLE\tUSED BY\tCREATED")
	for _, v := range vols {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", v.Name, humanSize(v.SizeMB<<20), humanSize(v.UsedBytes),
			humanSize(v.AvailableBytes), orDash(strings.Join(v.UsedBy, ",")), age(v.CreatedAt, now))
	}
	return tw.Flush()
}

// netFlags are create's flags for volumes, egress and credentials.
type netFlags struct {
	volumes     []string
	egress      []string
	credentials []string
}

func (f *netFlags) register(fl *pflag.FlagSet) {
	fl.StringArrayVar(&f.volumes, "volume", nil, "mount volume NAME at PATH: NAME:/PATH[:ro] (repeatable)")
	fl.StringArrayVar(&f.egress, "egress", nil, `egress policy: none (default), open, or CIDRs and domain names (repeatable, or comma-separated)`)
	fl.StringArrayVar(&f.credentials, "git-credential", nil, "credential git inside may use (repeatable; see 'warren credential')")
}

// apply puts the flags into req.
func (f *netFlags) apply(req *api.CreateSandboxRequest) error {
	for _, v := range f.volumes {
		m, err := parseVolumeFlag(v)
		if err != nil {
			return err
		}
		req.Volumes = append(req.Volumes, m)
	}
	if len(f.egress) > 0 {
		e, err := parseEgress(f.egress)
		if err != nil {
			return err
		}
		req.Network = &api.Network{Egress: e}
	}
	req.GitCredentials = f.credentials
	return nil
}

// parseVolumeFlag parses NAME:/PATH[:ro|:rw].
func parseVolumeFlag(s string) (api.VolumeMount, error) {
	name, rest, ok := strings.Cut(s, ":")
	if !ok || name == "" || !strings.HasPrefix(rest, "/") {
		return api.VolumeMount{}, usagef("--volume %q: want NAME:/PATH or NAME:/PATH:ro", s)
	}
	m := api.VolumeMount{Volume: name, Path: rest}
	if p, mode, ok := strings.Cut(rest, ":"); ok {
		switch mode {
		case "ro":
			m.ReadOnly = true
		case "rw":
		default:
			return api.VolumeMount{}, usagef("--volume %q: the mode after the path is ro or rw", s)
		}
		m.Path = p
	}
	return m, nil
}

// parseEgress turns --egress values into the egress field: "none",
// "open", or the list of entries.
func parseEgress(vals []string) (any, error) {
	var entries []any
	for _, v := range vals {
		for _, e := range strings.Split(v, ",") {
			if e = strings.TrimSpace(e); e != "" {
				entries = append(entries, e)
			}
		}
	}
	if len(entries) == 1 && (entries[0] == "none" || entries[0] == "open") {
		return entries[0], nil
	}
	for _, e := range entries {
		if e == "none" || e == "open" {
			return nil, usagef("--egress %s: give it alone, not with CIDRs or names", e)
		}
	}
	if entries == nil {
		return "none", nil
	}
	return entries, nil
}
