package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/warrenhq/warren/api"
)

// Credentials and git.

const hintCredentials = "run `warren credential ls` to see your credentials"

func (c *cli) credentialCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "credential",
		Short: "Add, list and revoke credentials (git first) that never enter a sandbox",
		Long: `A credential is a secret for a URL prefix. The daemon keeps it; a sandbox
granted it (warren create --git-credential NAME, or warren git clone
--credential NAME) reaches the URL through the daemon's proxy, which adds the
secret to its requests. The secret is never inside the sandbox nor in its
snapshots. Revoking it ends its use at once.`,
	}
	var u, username string
	add := &cobra.Command{
		Use:   "add NAME --url URL [--username USER]",
		Short: "Add a credential; the secret is read from stdin (asked for on a terminal)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if u == "" {
				return usagef("--url is required: the prefix the credential is for, like https://github.com/")
			}
			secret, err := c.readSecret()
			if err != nil {
				return err
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			cr, err := cl.CreateCredential(cmd.Context(), api.CreateCredentialRequest{Name: args[0], URL: u, Username: username, Secret: secret})
			if err != nil {
				return err
			}
			if c.json {
				return c.printJSON(cr)
			}
			_, err = fmt.Fprintf(c.out, "%s %s\n", cr.Name, cr.URL)
			return err
		},
	}
	add.Flags().StringVar(&u, "url", "", "the URL prefix the credential is for, like https://github.com/")
	add.Flags().StringVar(&username, "username", "", "the user name sent with the secret (for a GitHub token: x-access-token)")
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List your credentials (names and URLs; never secrets)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			crs, err := cl.ListCredentials(cmd.Context())
			if err != nil {
				return err
			}
			if c.json {
				if crs == nil {
					crs = []api.Credential{}
				}
				return c.printJSON(crs)
			}
			tw := tabwriter.NewWriter(c.out, 0, 0, 3, ' ', 0)
			fmt.Fprintln(tw, "NAME\tURL\tUSERNAME\tCREATED")
			for _, cr := range crs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", cr.Name, cr.URL, orDash(cr.Username), age(cr.CreatedAt, time.Now()))
			}
			return tw.Flush()
		},
	}
	rm := &cobra.Command{
		Use:         "rm NAME...",
		Short:       "Revoke credentials: every sandbox loses them at once",
		Args:        cobra.MinimumNArgs(1),
		Annotations: map[string]string{annNotFound: hintCredentials},
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			for _, name := range args {
				if err := cl.DeleteCredential(cmd.Context(), name); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.AddCommand(add, ls, rm)
	return cmd
}

// readSecret reads a secret: asked for without echo on a terminal, else
// all of stdin but its final line break.
func (c *cli) readSecret() (string, error) {
	if f, ok := c.in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(c.errOut, "secret: ")
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(c.errOut)
		return string(b), err
	}
	b, err := io.ReadAll(bufio.NewReader(io.LimitReader(c.in, 1<<20)))
	if err != nil {
		return "", err
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", usagef("no secret on stdin: pipe it in, like: printenv TOKEN | warren credential add ...")
	}
	return s, nil
}

func (c *cli) gitCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "git",
		Short: "Git inside a sandbox, with credentials that stay outside it",
	}
	var credential, cwd string
	clone := &cobra.Command{
		Use:   "clone ID URL [PATH]",
		Short: "Clone a repository inside a sandbox, through the credential proxy",
		Long: `Run git clone URL [PATH] inside sandbox ID. With --credential NAME, the
sandbox is granted that credential first (its git then reaches the
credential's URL through the daemon's proxy; the secret never enters it).
Exits with git's exit code.`,
		Args:        cobra.RangeArgs(2, 3),
		Annotations: map[string]string{annNotFound: hintSandboxes},
		RunE: func(cmd *cobra.Command, args []string) error {
			id, repo := args[0], args[1]
			cl, err := c.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if credential != "" {
				sb, err := cl.GetSandbox(ctx, id)
				if err != nil {
					return err
				}
				if !slices.Contains(sb.Network.GitCredentials, credential) {
					names := append(slices.Clone(sb.Network.GitCredentials), credential)
					if _, err := cl.SetNetwork(ctx, id, api.NetworkPatch{GitCredentials: &names}); err != nil {
						return err
					}
				}
				if crs, err := cl.ListCredentials(ctx); err == nil {
					for _, cr := range crs {
						if cr.Name == credential && !strings.HasPrefix(repo, cr.URL) {
							fmt.Fprintf(c.errOut, "warren: note: %s is not under %s, the URL of credential %s; git will not use it\n", repo, cr.URL, credential)
						}
					}
				}
			}
			argv := []string{"git", "clone", "--", repo}
			if len(args) == 3 {
				argv = append(argv, args[2])
			}
			code, err := cl.ExecStream(ctx, id, api.ExecRequest{Cmd: argv, Cwd: cwd, Env: map[string]string{"GIT_TERMINAL_PROMPT": "0"}},
				func(ev api.ExecEvent) error {
					switch {
					case ev.Stdout != nil:
						_, err := io.WriteString(c.out, *ev.Stdout)
						return err
					case ev.Stderr != nil:
						_, err := io.WriteString(c.errOut, *ev.Stderr)
						return err
					}
					return nil
				})
			if err != nil {
				return err
			}
			return exitWith(code)
		},
	}
	clone.Flags().StringVar(&credential, "credential", "", "grant the sandbox this credential first")
	clone.Flags().StringVar(&cwd, "cwd", "", "directory to clone in (default: the image's working directory)")
	cmd.AddCommand(clone)
	return cmd
}
