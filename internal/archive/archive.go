// Package archive writes a directory tree as a tar stream and extracts one
// into a directory: the format of Warren's files/archive calls, used by the
// in-sandbox agent on one side and by the SDK (warren cp -r) on the other.
//
// Entries are named relative to the directory ("./" is the directory
// itself, then "a.txt", "sub/", "sub/b.txt"), parents before children.
// Regular files, directories, symbolic links and hard links are carried, with
// their permission bits (setuid, setgid and sticky included), modification
// times and numeric owners; other kinds of files (devices, sockets, FIFOs) are
// skipped. Extraction never writes outside its directory: names with ".."
// or absolute names are refused, and so is writing through a symbolic link
// that leads out of it.
package archive

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// ErrInvalid wraps what is wrong with an archive given to Extract.
var ErrInvalid = errors.New("invalid archive")

// Write writes a tar of the tree at dir to w. It does not follow symbolic
// links. A file that vanishes while it is read is skipped; any other error
// ends the stream early and is returned.
func Write(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	links := map[[2]uint64]string{} // (dev, ino) -> first name, for hard links
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p != dir {
				return nil
			}
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		name := filepath.ToSlash(rel)
		var target string
		switch m := fi.Mode(); {
		case m.IsDir():
			if name == "." {
				name = "./"
			} else {
				name += "/"
			}
		case m&fs.ModeSymlink != 0:
			if target, err = os.Readlink(p); err != nil {
				return err
			}
		case m.IsRegular():
		default:
			return nil // devices, sockets, FIFOs
		}
		hdr, err := tar.FileInfoHeader(fi, target)
		if err != nil {
			return err
		}
		hdr.Name = name
		hdr.Uname, hdr.Gname = "", ""
		hdr.Format = tar.FormatPAX // sub-second times, long names
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() && st.Nlink > 1 {
			key := [2]uint64{uint64(st.Dev), st.Ino}
			if first, ok := links[key]; ok {
				hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
			} else {
				links[key] = name
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		// A file that grew is cut at its size when stat'ed; one that
		// shrank can't be padded honestly.
		if _, err := io.CopyN(tw, f, hdr.Size); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// Stats counts what Extract wrote.
type Stats struct {
	Entries int
	Bytes   int64
}

// Extract reads a tar from r into dir, which must exist. Files are written
// with the archive's permission bits and times but owned by the caller
// (as `docker cp` does); existing files of the same name are replaced, and
// existing directories are merged into. Problems with the archive itself
// wrap ErrInvalid.
func Extract(r io.Reader, dir string) (Stats, error) {
	var st Stats
	root, err := os.OpenRoot(dir)
	if err != nil {
		return st, err
	}
	defer root.Close()
	type dirMeta struct {
		name  string
		mode  fs.FileMode
		mtime time.Time
	}
	var dirs []dirMeta
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return st, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		name, err := entryName(hdr.Name)
		if err != nil {
			return st, err
		}
		mode := hdr.FileInfo().Mode()
		switch hdr.Typeflag {
		case tar.TypeDir:
			if name != "." {
				if err := mkdirAll(root, name); err != nil {
					return st, err
				}
			}
			dirs = append(dirs, dirMeta{name, mode & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky), hdr.ModTime})
		case tar.TypeReg:
			if err := prepare(root, name); err != nil {
				return st, err
			}
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return st, fmt.Errorf("%s: %w", name, err)
			}
			n, err := io.Copy(f, tr)
			st.Bytes += n
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return st, fmt.Errorf("%s: %w", name, err)
			}
			if err := root.Chmod(name, mode&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
				return st, err
			}
			if err := root.Chtimes(name, hdr.ModTime, hdr.ModTime); err != nil {
				return st, err
			}
		case tar.TypeSymlink:
			if err := prepare(root, name); err != nil {
				return st, err
			}
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return st, fmt.Errorf("%s: %w", name, err)
			}
		case tar.TypeLink:
			old, err := entryName(hdr.Linkname)
			if err != nil {
				return st, err
			}
			if err := prepare(root, name); err != nil {
				return st, err
			}
			if err := root.Link(old, name); err != nil {
				return st, fmt.Errorf("%s: %w", name, err)
			}
		default:
			continue // devices, FIFOs, PAX globals: not ours to make
		}
		st.Entries++
	}
	// Directories last, deepest first: writing into one changes its time,
	// and a read-only one could not be written into.
	slices.Reverse(dirs)
	for _, d := range dirs {
		if err := root.Chmod(d.name, d.mode); err != nil {
			return st, err
		}
		if err := root.Chtimes(d.name, d.mtime, d.mtime); err != nil {
			return st, err
		}
	}
	return st, nil
}

// entryName cleans an entry's name and refuses one that leaves the root.
func entryName(n string) (string, error) {
	n = strings.TrimPrefix(n, "./")
	if n == "" || n == "." || n == "./" {
		return ".", nil
	}
	clean := path.Clean(n)
	if !filepath.IsLocal(clean) {
		return "", fmt.Errorf("%w: entry %q leaves the directory", ErrInvalid, n)
	}
	return clean, nil
}

// prepare makes room for a file named name: its parents exist, and nothing
// but a directory is in the way (an existing file or link is removed; a
// directory is an error).
func prepare(root *os.Root, name string) error {
	if dir := path.Dir(name); dir != "." {
		if err := mkdirAll(root, dir); err != nil {
			return err
		}
	}
	fi, err := root.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.IsDir():
		return fmt.Errorf("%w: %s is a directory in the destination, a file in the archive", ErrInvalid, name)
	}
	return root.Remove(name)
}

func mkdirAll(root *os.Root, name string) error {
	if err := root.MkdirAll(name, 0o755); err != nil {
		if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%w: %s: a part of it is a file in the destination", ErrInvalid, name)
		}
		return err
	}
	return nil
}
