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
	"github.com/warrenhq/warren/client"
)

func (c *cli) imageCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "image",
		Aliases: []string{"images"},
		Short:   "Manage the server's images",
	}
	cmd.AddCommand(c.imageLsCommand(), c.imageBuildCommand(), c.imageImportCommand(),
		c.imagePullCommand(), c.imageRmCommand())
	return cmd
}

func (c *cli) imageLsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List the images in the server's cache",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			imgs, err := cl.ListImages(cmd.Context())
			if err != nil {
				return err
			}
			if c.json {
				if imgs == nil {
					imgs = []api.Image{}
				}
				return c.printJSON(imgs)
			}
			return writeImageTable(c.out, imgs, time.Now())
		},
	}
}

func writeImageTable(w io.Writer, imgs []api.Image, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tID\tSIZE\tSOURCE\tCREATED")
	for _, img := range imgs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", img.Name, shortID(img.ID), humanSize(img.SizeBytes),
			orDash(img.Source), age(img.CreatedAt, now))
	}
	return tw.Flush()
}

// shortID is the first 12 hex digits of a content address.
func shortID(id string) string {
	_, hex, ok := strings.Cut(id, ":")
	if !ok {
		hex = id
	}
	if len(hex) > 12 {
		hex = hex[:12]
	}
	return hex
}

// longImageOp runs op with progress on stderr and prints the image it
// ends with: its name alone, or all of it with --json.
func (c *cli) longImageOp(op func(*progress) (api.Image, error)) error {
	p := newProgress(c.errOut)
	img, err := op(p)
	p.done()
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(img)
	}
	fmt.Fprintf(c.errOut, "%s: %s, %s\n", img.Name, shortID(img.ID), humanSize(img.SizeBytes))
	_, err = fmt.Fprintln(c.out, img.Name)
	return err
}

func (c *cli) imageBuildCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "build",
		Short: "Build the built-in Debian image (or find it in the cache)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			return c.longImageOp(func(p *progress) (api.Image, error) {
				return cl.BuildImage(cmd.Context(), p.server)
			})
		},
	}
}

func (c *cli) imageImportCommand() *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "import FILE|-",
		Short: "Import a `docker save` or OCI archive",
		Long: `Import a 'docker save' or OCI image archive (a tar, optionally gzipped),
read from FILE or, with '-', from stdin.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, total := c.in, int64(-1)
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				fi, err := f.Stat()
				if err != nil {
					return err
				}
				if fi.IsDir() {
					return usagef("image import %s: a directory; give a tar archive (docker save, or tar of an OCI layout)", args[0])
				}
				r, total = f, fi.Size()
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			return c.longImageOp(func(p *progress) (api.Image, error) {
				body := &countingReader{r: r, total: total, p: p}
				return cl.ImportImage(cmd.Context(), body, name, p.server)
			})
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "local name (default: the archive's own)")
	return cmd
}

func (c *cli) imagePullCommand() *cobra.Command {
	var opts client.PullOptions
	cmd := &cobra.Command{
		Use:   "pull REF",
		Short: "Pull an image from a registry",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			return c.longImageOp(func(p *progress) (api.Image, error) {
				return cl.PullImage(cmd.Context(), args[0], opts, p.server)
			})
		},
	}
	cmd.Flags().StringVar(&opts.Name, "name", "", "local name (default: REF)")
	cmd.Flags().BoolVar(&opts.Insecure, "insecure", false, "allow a registry over plain HTTP")
	return cmd
}

func (c *cli) imageRmCommand() *cobra.Command {
	return &cobra.Command{
		Use:         "rm NAME",
		Short:       "Remove an image from the server's cache",
		Args:        cobra.ExactArgs(1),
		Annotations: map[string]string{annNotFound: hintImages},
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			return cl.DeleteImage(cmd.Context(), args[0])
		},
	}
}
