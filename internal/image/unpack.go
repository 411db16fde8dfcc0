package image

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/warrenhq/warren/api"
)

// layerSource is one layer of an image, as its bytes come (gzip, zstd or
// plain tar; the reader finds out which).
type layerSource struct {
	open   func() (io.ReadCloser, error)
	size   int64  // bytes open returns, 0 when unknown
	diffID string // sha256:... of the uncompressed tar, from the image config
}

// unpacker applies layers, in order, to the tree at root.
type unpacker struct {
	root  string
	chown bool
	// layer holds the paths (relative to root, symlinks resolved) written
	// by the layer being applied, and their parents: whiteouts hide only
	// what lower layers made.
	layer map[string]bool
	// dirTimes are set last, since writing into a directory changes its mtime.
	dirTimes map[string]time.Time
}

func newUnpacker(root string) *unpacker {
	return &unpacker{root: root, chown: os.Geteuid() == 0, dirTimes: map[string]time.Time{}}
}

// unpackLayers applies every layer to dir, reporting bytes read per layer
// to progress under phase.
func unpackLayers(ctx context.Context, dir string, layers []layerSource, phase string, progress func(api.Progress)) error {
	u := newUnpacker(dir)
	for i, l := range layers {
		label := fmt.Sprintf("layer %d/%d %s", i+1, len(layers), shortDigest(l.diffID))
		if err := u.applyLayer(ctx, l, label, phase, progress); err != nil {
			return fmt.Errorf("layer %d/%d (%s): %w", i+1, len(layers), l.diffID, err)
		}
	}
	return u.finish()
}

func shortDigest(d string) string {
	d = strings.TrimPrefix(d, "sha256:")
	return d[:min(12, len(d))]
}

func (u *unpacker) applyLayer(ctx context.Context, l layerSource, label, phase string, progress func(api.Progress)) error {
	rc, err := l.open()
	if err != nil {
		return err
	}
	defer rc.Close()
	counted := &progressReader{ctx: ctx, r: rc, total: l.size, phase: phase, message: label, progress: progress}
	counted.report()
	raw := bufio.NewReaderSize(counted, 1<<20)
	plain, closeDec, err := decompress(raw)
	if err != nil {
		return err
	}
	defer closeDec()
	h := sha256.New()
	stream := io.TeeReader(plain, h)
	tr := tar.NewReader(stream)
	u.layer = map[string]bool{}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("reading the layer's tar stream: %w: %w", err, api.ErrInvalid)
		}
		if err := u.apply(hdr, tr); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("%q: %w", hdr.Name, err)
		}
	}
	// Read what follows the tar's end marker too: the digest covers it, and
	// readers that verify a digest do so at EOF.
	if _, err := io.Copy(io.Discard, stream); err != nil {
		return fmt.Errorf("reading the layer: %w", err)
	}
	if _, err := io.Copy(io.Discard, raw); err != nil {
		return fmt.Errorf("reading the layer: %w", err)
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); l.diffID != "" && got != l.diffID {
		return fmt.Errorf("content is %s, but the image config says %s; the image is corrupt: %w", got, l.diffID, api.ErrInvalid)
	}
	counted.done()
	return nil
}

// decompress returns the tar stream inside r, which may be gzip, zstd or
// plain.
func decompress(r *bufio.Reader) (io.Reader, func(), error) {
	magic, _ := r.Peek(4)
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, nil, fmt.Errorf("reading gzip layer: %w: %w", err, api.ErrInvalid)
		}
		return zr, func() { zr.Close() }, nil
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(r)
		if err != nil {
			return nil, nil, fmt.Errorf("reading zstd layer: %w: %w", err, api.ErrInvalid)
		}
		return zr, zr.Close, nil
	default:
		return r, func() {}, nil
	}
}

// progressReader counts the bytes read through it and reports them,
// at most every 1 MiB and at the end. It also stops reading when ctx is done.
type progressReader struct {
	ctx      context.Context
	r        io.Reader
	n, shown int64
	total    int64
	phase    string
	message  string
	progress func(api.Progress)
}

func (p *progressReader) Read(b []byte) (int, error) {
	if err := p.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := p.r.Read(b)
	p.n += int64(n)
	if p.n-p.shown >= 1<<20 {
		p.report()
	}
	return n, err
}

func (p *progressReader) report() {
	p.shown = p.n
	if p.progress != nil {
		p.progress(api.Progress{Phase: p.phase, Message: p.message, Current: p.n, Total: max(p.total, p.n)})
	}
}

func (p *progressReader) done() {
	if p.n != p.shown || p.n == 0 {
		p.report()
	}
}

// cleanName makes a tar entry name relative to the root. Absolute names are
// taken as relative to the root, as tar does; a ".." component is refused,
// since it can only mean to escape.
func cleanName(name string) (string, error) {
	p := strings.TrimLeft(name, "/")
	if slices.Contains(strings.Split(p, "/"), "..") {
		return "", fmt.Errorf("the path %q leaves the image root: %w", name, api.ErrInvalid)
	}
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("the path %q has a NUL byte: %w", name, api.ErrInvalid)
	}
	p = path.Clean(p)
	if p == "." {
		return "", nil
	}
	return p, nil
}

func (u *unpacker) host(rel string) string {
	return filepath.Join(u.root, filepath.FromSlash(rel))
}

// resolveDir resolves the directory rel (relative to the root) the way a
// process chrooted into the root would, following symlinks but never out of
// the root: an absolute target starts again at the root, and ".." at the
// root stays there. It returns the resolved path, free of symlinks. With
// create, missing directories are made.
func (u *unpacker) resolveDir(rel string, create bool) (string, error) {
	var done []string
	todo := splitPath(rel)
	links := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(done) > 0 {
				done = done[:len(done)-1]
			}
			continue
		}
		p := u.host(path.Join(path.Join(done...), c))
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist) && create:
			if err := os.Mkdir(p, 0o755); err != nil {
				return "", err
			}
			done = append(done, c)
		case err != nil:
			return "", err
		case fi.Mode()&fs.ModeSymlink != 0:
			if links++; links > 255 {
				return "", fmt.Errorf("too many levels of symbolic links in %q: %w", rel, api.ErrInvalid)
			}
			target, err := os.Readlink(p)
			if err != nil {
				return "", err
			}
			if path.IsAbs(target) {
				done = nil
			}
			todo = append(splitPath(target), todo...)
		case fi.IsDir():
			done = append(done, c)
		default:
			return "", fmt.Errorf("%q is not a directory: %w", path.Join(path.Join(done...), c), api.ErrInvalid)
		}
	}
	return path.Join(done...), nil
}

func splitPath(p string) []string {
	return strings.FieldsFunc(p, func(r rune) bool { return r == '/' })
}

// resolve resolves the parent of rel and returns the path of rel inside
// the root with its last component unresolved, as the entry itself is
// what gets written or replaced.
func (u *unpacker) resolve(rel string, create bool) (string, error) {
	dir, base := path.Split(rel)
	parent, err := u.resolveDir(dir, create)
	if err != nil {
		return "", err
	}
	return path.Join(parent, base), nil
}

// mark records rel and its parents as written by the current layer.
func (u *unpacker) mark(rel string) {
	for p := rel; p != "." && p != "" && p != "/"; p = path.Dir(p) {
		if u.layer[p] {
			return
		}
		u.layer[p] = true
	}
}

// apply writes one tar entry.
func (u *unpacker) apply(hdr *tar.Header, r io.Reader) error {
	rel, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	if rel == "" {
		if hdr.Typeflag != tar.TypeDir {
			return fmt.Errorf("an entry that is not a directory names the root: %w", api.ErrInvalid)
		}
		return u.setMeta(hdr, u.root, "")
	}
	if base := path.Base(rel); strings.HasPrefix(base, ".wh.") {
		return u.whiteout(path.Dir(rel), base)
	}
	rel, err = u.resolve(rel, true)
	if err != nil {
		return err
	}
	if rel == "" {
		return fmt.Errorf("the entry resolves to the image root: %w", api.ErrInvalid)
	}
	u.mark(rel)
	target := u.host(rel)

	// Replace what is there, except a directory by a directory: those merge.
	if fi, err := os.Lstat(target); err == nil {
		if fi.IsDir() && hdr.Typeflag == tar.TypeDir {
			return u.setMeta(hdr, target, rel)
		}
		if err := os.RemoveAll(target); err != nil {
			return err
		}
	}

	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := os.Mkdir(target, 0o700); err != nil {
			return err
		}
	case tar.TypeReg, tar.TypeGNUSparse:
		f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, r)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	case tar.TypeSymlink:
		if err := os.Symlink(hdr.Linkname, target); err != nil {
			return err
		}
	case tar.TypeLink:
		return u.hardlink(hdr.Linkname, target)
	case tar.TypeFifo:
		if err := unix.Mkfifo(target, 0o600); err != nil {
			return err
		}
	case tar.TypeChar, tar.TypeBlock:
		// The sandbox's kernel provides /dev; device nodes in an image
		// would only be a way to reach the host's devices.
		slog.Debug("skipping device node in image layer", "path", rel)
		return nil
	default:
		slog.Debug("skipping tar entry of unknown type", "path", rel, "type", hdr.Typeflag)
		return nil
	}
	return u.setMeta(hdr, target, rel)
}

// hardlink links target to the entry linkname names, which an earlier
// entry (of this layer or a lower one) made inside the root.
func (u *unpacker) hardlink(linkname, target string) error {
	lrel, err := cleanName(linkname)
	if err != nil {
		return err
	}
	if lrel == "" {
		return fmt.Errorf("hard link to the image root: %w", api.ErrInvalid)
	}
	lrel, err = u.resolve(lrel, false)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("hard link to %q: %w", linkname, err)
	}
	src := u.host(lrel)
	fi, err := os.Lstat(src)
	if err != nil || lrel == "" {
		return fmt.Errorf("hard link to %q, which the layers have not made: %w", linkname, api.ErrInvalid)
	}
	if fi.IsDir() {
		return fmt.Errorf("hard link to the directory %q: %w", linkname, api.ErrInvalid)
	}
	return os.Link(src, target)
}

// whiteout applies a whiteout entry found in dir: ".wh..wh..opq" hides
// everything lower layers put in dir; ".wh.NAME" hides NAME.
func (u *unpacker) whiteout(dir, base string) error {
	parent, err := u.resolveDir(dir, false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // nothing below to hide
	}
	if err != nil {
		return err
	}
	if base == ".wh..wh..opq" {
		return u.opaque(parent)
	}
	name := strings.TrimPrefix(base, ".wh.")
	if strings.HasPrefix(name, ".wh.") || name == "" || name == "." {
		slog.Debug("skipping unknown whiteout", "path", path.Join(dir, base))
		return nil
	}
	rel := path.Join(parent, name)
	if u.layer[rel] {
		return nil // made by this layer: a whiteout hides only lower layers
	}
	return os.RemoveAll(u.host(rel))
}

// opaque removes what lower layers put in dir, keeping what this layer
// wrote there.
func (u *unpacker) opaque(dir string) error {
	entries, err := os.ReadDir(u.host(dir))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
			return nil
		}
		return err
	}
	for _, e := range entries {
		rel := path.Join(dir, e.Name())
		if !u.layer[rel] {
			if err := os.RemoveAll(u.host(rel)); err != nil {
				return err
			}
			continue
		}
		if e.IsDir() {
			if err := u.opaque(rel); err != nil {
				return err
			}
		}
	}
	return nil
}

// setMeta sets owner, mode, extended attributes and times. Directory
// times are set by finish.
func (u *unpacker) setMeta(hdr *tar.Header, target, rel string) error {
	if u.chown {
		if err := os.Lchown(target, hdr.Uid, hdr.Gid); err != nil {
			return err
		}
	}
	if hdr.Typeflag != tar.TypeSymlink {
		// After chown, which clears set-user-ID bits.
		if err := unix.Chmod(target, uint32(hdr.Mode&0o7777)); err != nil {
			return err
		}
	}
	for k, v := range hdr.PAXRecords {
		attr, ok := strings.CutPrefix(k, "SCHILY.xattr.")
		if !ok || !(attr == "security.capability" || strings.HasPrefix(attr, "user.")) {
			continue
		}
		if err := unix.Lsetxattr(target, attr, []byte(v), 0); err != nil {
			slog.Debug("cannot set extended attribute", "path", rel, "attr", attr, "err", err)
		}
	}
	if hdr.Typeflag == tar.TypeDir {
		u.dirTimes[rel] = hdr.ModTime
		return nil
	}
	return lutimes(target, hdr.AccessTime, hdr.ModTime)
}

func lutimes(p string, atime, mtime time.Time) error {
	if atime.IsZero() {
		atime = mtime
	}
	ts := []unix.Timespec{unix.NsecToTimespec(atime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
	return unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// finish sets directory times, deepest first. A directory removed by a
// later whiteout is skipped.
func (u *unpacker) finish() error {
	dirs := make([]string, 0, len(u.dirTimes))
	for d := range u.dirTimes {
		dirs = append(dirs, d)
	}
	slices.SortFunc(dirs, func(a, b string) int { return len(splitPath(b)) - len(splitPath(a)) })
	for _, d := range dirs {
		p := u.host(d)
		if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
			continue
		}
		if err := lutimes(p, time.Time{}, u.dirTimes[d]); err != nil {
			return err
		}
	}
	return nil
}
