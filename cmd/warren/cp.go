package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/client"
)

func (c *cli) cpCommand() *cobra.Command {
	var recursive bool
	cmd := &cobra.Command{
		Use:   "cp [-r] SRC DST",
		Short: "Copy files and directories between this host and a sandbox",
		Long: `Copy a file, or with -r a directory, into or out of a sandbox. One side is
ID:/abs/path in the sandbox, the other a local path; '-' as the local side is
stdin or stdout (with -r, a tar of the directory).

  warren cp ./main.py ID:/work/main.py
  warren cp ID:/work/out.csv .
  echo hi | warren cp - ID:/tmp/hi.txt
  warren cp -r ./src ID:/work/src
  warren cp -r ID:/work/results ./results

As with cp -r, a directory copied to a destination that is an existing
directory goes inside it, under its own name; otherwise the destination
becomes the copy. Files keep their modes, times and symbolic links; files of
the same names at the destination are replaced. A local path with a colon in
its first element needs a ./ in front.`,
		Args:        cobra.ExactArgs(2),
		Annotations: map[string]string{annNotFound: hintSandboxes},
		RunE: func(cmd *cobra.Command, args []string) error {
			spec, err := parseCopy(args[0], args[1])
			if err != nil {
				return err
			}
			spec.recursive = recursive
			cl, err := c.client()
			if err != nil {
				return err
			}
			if spec.upload {
				return c.upload(cmd.Context(), cl, spec)
			}
			return c.download(cmd.Context(), cl, spec)
		},
	}
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "copy directories, and everything in them")
	cmd.Flags().BoolVarP(&recursive, "R", "R", false, "the same as -r")
	cmd.Flags().MarkHidden("R")
	return cmd
}

// copySpec is a parsed `warren cp`.
type copySpec struct {
	upload bool   // local to sandbox; else sandbox to local
	id     string // the sandbox
	remote string // absolute path in the sandbox
	local  string // local path, or "-" for stdin or stdout
	// recursive copies directories (as tar streams when local is "-").
	recursive bool
}

// parseCopy makes sense of cp's SRC and DST: exactly one is ID:/abs/path.
func parseCopy(src, dst string) (copySpec, error) {
	sid, spath, sremote, err := parseRemote(src)
	if err != nil {
		return copySpec{}, err
	}
	did, dpath, dremote, err := parseRemote(dst)
	if err != nil {
		return copySpec{}, err
	}
	switch {
	case sremote && dremote:
		return copySpec{}, usagef("cp %s %s: copying between sandboxes is not supported; copy through a local file", src, dst)
	case !sremote && !dremote:
		return copySpec{}, usagef("cp %s %s: one side must be ID:/path in a sandbox", src, dst)
	case sremote:
		return copySpec{id: sid, remote: spath, local: dst}, nil
	}
	return copySpec{upload: true, id: did, remote: dpath, local: src}, nil
}

// parseRemote parses ID:/abs/path. A string whose part before the first
// colon is empty of slashes names a sandbox; anything else is local.
func parseRemote(s string) (id, p string, remote bool, err error) {
	if s == "" {
		return "", "", false, usagef("cp: an empty path")
	}
	before, after, found := strings.Cut(s, ":")
	if !found || strings.Contains(before, "/") {
		return "", "", false, nil
	}
	switch {
	case before == "":
		return "", "", false, usagef("cp %s: no sandbox id before the colon; want ID:/path", s)
	case !strings.HasPrefix(after, "/"):
		return "", "", false, usagef("cp %s: the path in the sandbox must be absolute (ID:/path); for a local file, write ./%s", s, s)
	}
	return before, after, true, nil
}

// errDirectory is the answer to copying a directory without -r.
func errDirectory(p string) error {
	return usagef("cp: %s is a directory; copy it with -r", p)
}

func (c *cli) download(ctx context.Context, cl *client.Client, s copySpec) error {
	if s.recursive {
		fe, err := cl.StatFile(ctx, s.id, s.remote)
		if err != nil {
			return err
		}
		if fe.Type == "dir" {
			return c.downloadDir(ctx, cl, s)
		}
	}
	rc, err := cl.ReadFile(ctx, s.id, s.remote)
	if err != nil {
		if errors.Is(err, client.ErrInvalid) {
			if fe, serr := cl.StatFile(ctx, s.id, s.remote); serr == nil && fe.Type == "dir" {
				return errDirectory(s.id + ":" + s.remote)
			}
		}
		return err
	}
	defer rc.Close()
	if s.local == "-" {
		_, err := io.Copy(c.out, rc)
		return err
	}
	dst := s.local
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
		dst = filepath.Join(dst, path.Base(s.remote))
	}
	// Write beside the target and rename, so a failed copy leaves the old
	// file, if any, whole.
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".warren-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, rc); err != nil {
		tmp.Close()
		return fmt.Errorf("copying %s:%s to %s: %w", s.id, s.remote, dst, err)
	}
	mode := os.FileMode(0o644)
	if fi, err := os.Stat(dst); err == nil {
		mode = fi.Mode().Perm()
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

func (c *cli) upload(ctx context.Context, cl *client.Client, s copySpec) error {
	var (
		r    io.Reader = c.in
		mode os.FileMode
	)
	if s.local != "-" {
		f, err := os.Open(s.local)
		if err != nil {
			return err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		if fi.IsDir() {
			if !s.recursive {
				return errDirectory(s.local)
			}
			return c.uploadDir(ctx, cl, s)
		}
		r, mode = f, fi.Mode().Perm()
	} else if s.recursive {
		return c.uploadDir(ctx, cl, s)
	}
	// Into a directory, the file keeps its name; stdin has none.
	dst := s.remote
	intoDir := strings.HasSuffix(dst, "/")
	if !intoDir {
		fe, err := cl.StatFile(ctx, s.id, dst)
		if err != nil && !errors.Is(err, client.ErrNotFound) {
			return err
		}
		intoDir = err == nil && fe.Type == "dir"
	}
	if intoDir {
		if s.local == "-" {
			return usagef("cp - %s:%s: that is a directory; name the file to write stdin to", s.id, s.remote)
		}
		dst = path.Join(dst, filepath.Base(s.local))
	}
	fe, err := cl.WriteFile(ctx, s.id, dst, r, mode)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(fe)
	}
	return nil
}

// uploadDir copies a local directory (or a tar read from stdin) into a
// sandbox.
func (c *cli) uploadDir(ctx context.Context, cl *client.Client, s copySpec) error {
	dst := s.remote
	if s.local != "-" {
		fe, err := cl.StatFile(ctx, s.id, dst)
		switch {
		case err == nil && fe.Type == "dir":
			dst = path.Join(dst, filepath.Base(filepath.Clean(s.local)))
		case err == nil:
			return usagef("cp -r %s %s:%s: the destination is a file, not a directory", s.local, s.id, s.remote)
		case !errors.Is(err, client.ErrNotFound):
			return err
		}
	}
	var (
		res api.ArchiveResult
		err error
	)
	if s.local == "-" {
		res, err = cl.WriteArchive(ctx, s.id, dst, c.in)
	} else {
		res, err = cl.UploadDir(ctx, s.id, s.local, dst)
	}
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(res)
	}
	return nil
}

// downloadDir copies a sandbox's directory to a local one (or as a tar to
// stdout).
func (c *cli) downloadDir(ctx context.Context, cl *client.Client, s copySpec) error {
	if s.local == "-" {
		rc, err := cl.ReadArchive(ctx, s.id, s.remote)
		if err != nil {
			return err
		}
		defer rc.Close()
		_, err = io.Copy(c.out, rc)
		return err
	}
	dst := s.local
	if fi, err := os.Stat(dst); err == nil {
		if !fi.IsDir() {
			return usagef("cp -r %s:%s %s: the destination is a file, not a directory", s.id, s.remote, s.local)
		}
		dst = filepath.Join(dst, path.Base(s.remote))
	}
	res, err := cl.DownloadDir(ctx, s.id, s.remote, dst)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(res)
	}
	return nil
}
