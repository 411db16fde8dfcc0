package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/warrenhq/warren/api"
)

// Ports and egress policy of a sandbox.

func (c *cli) portCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "port ID PORT",
		Short: "Print the URL at which a server inside a sandbox is reached",
		Long: `Print the daemon's URL for PORT inside sandbox ID: requests to it (HTTP or
WebSocket, with the API key as for any call) go to whatever listens on that
port inside; a paused sandbox is resumed first.`,
		Args:        cobra.ExactArgs(2),
		Annotations: map[string]string{annNotFound: hintSandboxes},
		RunE: func(cmd *cobra.Command, args []string) error {
			port, err := strconv.Atoi(args[1])
			if err != nil || port < 1 || port > 65535 {
				return usagef("port %q: want a TCP port, 1 to 65535", args[1])
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			// The sandbox must be there; the URL alone would not say so.
			if _, err := cl.GetSandbox(cmd.Context(), args[0]); err != nil {
				return err
			}
			u := cl.PortURL(args[0], port)
			if c.json {
				return c.printJSON(map[string]string{"url": u})
			}
			_, err = fmt.Fprintln(c.out, u)
			return err
		},
	}
}

func (c *cli) egressCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "egress ID none|open|CIDR-or-NAME...",
		Short: "Set what a sandbox may reach: nothing, anything, or a list of CIDRs and domain names",
		Long: `Set sandbox ID's egress policy, at once (connections it already opened
too): none, open (NAT through the host), or CIDRs and domain names it may
reach (names as the daemon's resolver answers them; *.example.com for every
name under example.com). A sandbox never reaches the host or other sandboxes.`,
		Args:        cobra.MinimumNArgs(2),
		Annotations: map[string]string{annNotFound: hintSandboxes},
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := parseEgress(args[1:])
			if err != nil {
				return err
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			sb, err := cl.SetNetwork(cmd.Context(), args[0], api.NetworkPatch{Egress: e})
			if err != nil {
				return err
			}
			if c.json {
				return c.printJSON(sb)
			}
			_, err = fmt.Fprintf(c.out, "%s egress %v\n", sb.ID, sb.Network.Egress)
			return err
		},
	}
}
