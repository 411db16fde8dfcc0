package image

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warrenhq/warren/api"
)

// AddRootfs registers dir, an already prepared tree such as the one
// BuildDebian makes, as the image name with the content address digest
// ("sha256:<hex>"). The tree is copied into the store as hard links (cp -al),
// or as a real copy when dir is on another filesystem; so dir must not be
// modified afterwards. Nothing is copied when the digest is cached already.
// source is recorded as the image's Source, SourceBuiltin when empty.
func (s *Store) AddRootfs(ctx context.Context, name, digest, dir, source string) (api.Image, error) {
	norm, err := NormalizeName(name)
	if err != nil {
		return api.Image{}, err
	}
	if !digestRe.MatchString(digest) {
		return api.Image{}, fmt.Errorf("adding image %s: digest %q is not sha256:<64 hex digits>: %w", norm, digest, api.ErrInvalid)
	}
	if source == "" {
		source = SourceBuiltin
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return api.Image{}, fmt.Errorf("adding image %s: %w", norm, err)
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return api.Image{}, fmt.Errorf("adding image %s: %s is not a directory: %w", norm, dir, api.ErrInvalid)
	}
	if rec, err := s.readRef(norm); err == nil && rec.ID == digest && rec.Source == source {
		if _, err := os.Stat(s.rootfsPath(digest)); err == nil {
			return rec.Image, nil
		}
	}
	rec := refRecord{Image: api.Image{Name: norm, ID: digest, Source: source, CreatedAt: time.Now().UTC()}, Origin: abs}
	out, err := s.install(ctx, rec, func(dst string) error {
		return cloneTree(ctx, abs, dst)
	})
	if err != nil {
		return api.Image{}, fmt.Errorf("adding image %s from %s: %w", norm, dir, err)
	}
	return out, nil
}

// treeSize is the bytes of the regular files under dir, each inode counted once.
func treeSize(dir string) (int64, error) {
	var size int64
	seen := map[[2]uint64]bool{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
			key := [2]uint64{st.Dev, st.Ino}
			if seen[key] {
				return nil
			}
			seen[key] = true
		}
		size += fi.Size()
		return nil
	})
	return size, err
}

// cloneTree fills dst (an empty directory) with the tree at src: hard links
// where it can, copies where src is on another filesystem. Owners, modes
// and times are kept; directories get theirs after their content is in.
func cloneTree(ctx context.Context, src, dst string) error {
	return cloneTreeWith(ctx, src, dst, &cloner{link: true, copied: map[[2]uint64]string{}})
}

func cloneTreeWith(ctx context.Context, src, dst string, c *cloner) error {
	type dirMeta struct {
		path string
		st   *syscall.Stat_t
	}
	var dirs []dirMeta
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no stat information", p)
		}
		if fi.IsDir() {
			if rel != "." {
				if err := os.Mkdir(target, 0o700); err != nil {
					return err
				}
			}
			dirs = append(dirs, dirMeta{target, st})
			return nil
		}
		return c.clone(p, target, fi, st)
	})
	if err != nil {
		return err
	}
	for _, d := range slices.Backward(dirs) {
		if err := setStatMeta(d.path, d.st, true); err != nil {
			return err
		}
	}
	return nil
}

type cloner struct {
	link   bool                 // still trying hard links
	copied map[[2]uint64]string // source inode -> its copy, to keep hard links in copy mode
}

func (c *cloner) clone(src, dst string, fi fs.FileInfo, st *syscall.Stat_t) error {
	if c.link {
		err := os.Link(src, dst)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EXDEV) && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EMLINK) {
			return err
		}
		slog.Debug("cannot hard-link the image tree, copying it", "from", src, "err", err)
		c.link = false
	}
	key := [2]uint64{st.Dev, st.Ino}
	if first, ok := c.copied[key]; ok {
		return os.Link(first, dst)
	}
	switch mode := fi.Mode(); {
	case mode.IsRegular():
		if err := copyFile(src, dst); err != nil {
			return err
		}
	case mode&fs.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		if err := os.Symlink(target, dst); err != nil {
			return err
		}
	case mode&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe) != 0:
		if err := unix.Mknod(dst, st.Mode, int(st.Rdev)); err != nil {
			slog.Debug("skipping special file", "path", src, "err", err)
			return nil
		}
	default:
		slog.Debug("skipping special file", "path", src, "mode", mode)
		return nil
	}
	if st.Nlink > 1 {
		c.copied[key] = dst
	}
	return setStatMeta(dst, st, fi.Mode()&fs.ModeSymlink == 0)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// setStatMeta gives p the owner, mode (unless it is a symlink) and times in st.
func setStatMeta(p string, st *syscall.Stat_t, chmod bool) error {
	if os.Geteuid() == 0 {
		if err := os.Lchown(p, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
	}
	if chmod {
		if err := unix.Chmod(p, st.Mode&0o7777); err != nil {
			return err
		}
	}
	ts := []unix.Timespec{unix.NsecToTimespec(st.Atim.Nano()), unix.NsecToTimespec(st.Mtim.Nano())}
	return unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW)
}
