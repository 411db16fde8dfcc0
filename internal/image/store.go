// Package image keeps Warren's images: read-only root filesystems, unpacked
// once into a content-addressed cache that every sandbox made from them
// shares.
//
// On disk, under the store's root:
//
//	rootfs/<hex>/         an unpacked tree, named by the image's config digest
//	                      (for the built-in image, the digest of its recipe);
//	                      complete when it appears, never modified after
//	refs/<name>.json      local name -> digest and metadata, the name escaped
//	                      for a file name; written atomically
//	tmp/                  work in progress: spooled archives, trees being
//	                      unpacked; each entry X is in use while X.lock is locked
//	locks/                lock files: one for the refs, one per digest
//
// Trees are unpacked in tmp/ and renamed into rootfs/ when complete, so a
// crash never leaves a half-unpacked tree where a sandbox could use it; Open
// removes what a crash left in tmp/. A digest's lock makes concurrent imports
// of one image unpack it once; the refs lock orders ref writes against Delete.
// Both are flocks, so they hold between processes as well as goroutines.
package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/fsutil"
)

// Store is an image cache rooted at one directory. It is safe for
// concurrent use, also by several processes.
type Store struct {
	root string
}

// Image is a cached image ready to run.
type Image struct {
	api.Image
	// Rootfs is the absolute path of the unpacked tree. It is shared by
	// every user of the image and must not be written to.
	Rootfs string
	// Config is the image's run configuration, when the image has one.
	Config ImageConfig
}

// ImageConfig is the part of an OCI image config that says how to run it.
type ImageConfig struct {
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"working_dir,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	User       string   `json:"user,omitempty"`
}

// refRecord is the content of refs/<name>.json.
type refRecord struct {
	api.Image
	Config ImageConfig `json:"config"`
	// Origin is where the image came from: the pulled reference, or the
	// directory the built-in image was copied from.
	Origin string `json:"origin,omitempty"`
}

// Open opens (creating it if needed) the store rooted at root, and removes
// what an interrupted import left in its tmp directory.
func Open(root string) (*Store, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("opening image store %s: %w", root, err)
	}
	s := &Store{root: abs}
	for _, d := range []string{abs, s.path("rootfs"), s.path("refs"), s.path("tmp"), s.path("locks")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("opening image store %s: %w", root, err)
		}
	}
	if err := s.removeStaleTemp(); err != nil {
		return nil, fmt.Errorf("opening image store %s: %w", root, err)
	}
	return s, nil
}

// Root is the directory the store keeps its files in.
func (s *Store) Root() string { return s.root }

func (s *Store) path(elem ...string) string {
	return filepath.Join(append([]string{s.root}, elem...)...)
}

func (s *Store) rootfsPath(digest string) string {
	return s.path("rootfs", strings.TrimPrefix(digest, "sha256:"))
}

func (s *Store) refPath(name string) string {
	return s.path("refs", escapeName(name)+".json")
}

// Get returns the image called name. An unknown name is an error wrapping
// api.ErrNotFound that says how to get the image.
func (s *Store) Get(ctx context.Context, name string) (Image, error) {
	norm, err := NormalizeName(name)
	if err != nil {
		return Image{}, err
	}
	rec, err := s.readRef(norm)
	if errors.Is(err, fs.ErrNotExist) {
		return Image{}, fmt.Errorf("image %q not found locally; run warren image pull %s or warren image import FILE: %w", name, name, api.ErrNotFound)
	}
	if err != nil {
		return Image{}, fmt.Errorf("image %q: %w", name, err)
	}
	rootfs := s.rootfsPath(rec.ID)
	if _, err := os.Stat(rootfs); err != nil {
		return Image{}, fmt.Errorf("image %q: its files (%s) are missing; run warren image rm %s and pull or import it again: %w", name, rootfs, name, api.ErrNotFound)
	}
	return Image{Image: rec.Image, Rootfs: rootfs, Config: rec.Config}, nil
}

// List returns every image, sorted by name.
func (s *Store) List(ctx context.Context) ([]api.Image, error) {
	recs, err := s.readRefs()
	if err != nil {
		return nil, err
	}
	out := make([]api.Image, 0, len(recs))
	for _, r := range recs {
		out = append(out, r.Image)
	}
	slices.SortFunc(out, func(a, b api.Image) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Delete removes the name, and the unpacked tree when no other name refers
// to it. It does not know about sandboxes: a caller must not delete an image
// a sandbox still runs from.
func (s *Store) Delete(ctx context.Context, name string) error {
	norm, err := NormalizeName(name)
	if err != nil {
		return err
	}
	unlock, err := s.lockRefs(ctx)
	if err != nil {
		return err
	}
	rec, err := s.readRef(norm)
	if errors.Is(err, fs.ErrNotExist) {
		unlock()
		return fmt.Errorf("image %q not found locally; warren image ls lists the images: %w", name, api.ErrNotFound)
	}
	if err != nil {
		unlock()
		return fmt.Errorf("deleting image %q: %w", name, err)
	}
	if err := os.Remove(s.refPath(norm)); err != nil {
		unlock()
		return fmt.Errorf("deleting image %q: %w", name, err)
	}
	if err := fsutil.SyncDir(s.path("refs")); err != nil {
		unlock()
		return fmt.Errorf("deleting image %q: %w", name, err)
	}
	recs, err := s.readRefs()
	if err != nil {
		unlock()
		return fmt.Errorf("deleting image %q: %w", name, err)
	}
	if slices.ContainsFunc(recs, func(r refRecord) bool { return r.ID == rec.ID }) {
		unlock()
		return nil
	}
	// Move the tree out of rootfs/ while holding the lock, so a concurrent
	// import sees it either complete or gone; remove it after.
	trash := s.path("tmp", "deleted-"+strings.TrimPrefix(rec.ID, "sha256:")+fmt.Sprintf("-%d", time.Now().UnixNano()))
	err = os.Rename(s.rootfsPath(rec.ID), trash)
	unlock()
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting image %q: %w", name, err)
	}
	if err := os.RemoveAll(trash); err != nil {
		return fmt.Errorf("deleting image %q: removing %s: %w", name, trash, err)
	}
	return nil
}

func (s *Store) readRef(name string) (refRecord, error) {
	data, err := os.ReadFile(s.refPath(name))
	if err != nil {
		return refRecord{}, err
	}
	var rec refRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return refRecord{}, fmt.Errorf("reading %s: %w", s.refPath(name), err)
	}
	return rec, nil
}

func (s *Store) readRefs() ([]refRecord, error) {
	entries, err := os.ReadDir(s.path("refs"))
	if err != nil {
		return nil, fmt.Errorf("listing images: %w", err)
	}
	var out []refRecord
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || !strings.HasSuffix(e.Name(), ".json") {
			continue // a temporary file of writeFileSync
		}
		data, err := os.ReadFile(s.path("refs", e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("listing images: %w", err)
		}
		var rec refRecord
		if err := json.Unmarshal(data, &rec); err != nil {
			slog.Warn("skipping unreadable image ref", "file", s.path("refs", e.Name()), "err", err)
			continue
		}
		out = append(out, rec)
	}
	return out, nil
}

// commit writes rec's ref once the tree for rec.ID is in place. It reports
// false when the tree vanished (a concurrent Delete), and the caller
// unpacks again.
func (s *Store) commit(ctx context.Context, rec refRecord) (bool, error) {
	unlock, err := s.lockRefs(ctx)
	if err != nil {
		return false, err
	}
	defer unlock()
	if _, err := os.Stat(s.rootfsPath(rec.ID)); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return false, err
	}
	if err := writeFileSync(s.refPath(rec.Name), append(data, '\n'), 0o644); err != nil {
		return false, err
	}
	return true, nil
}

// install makes sure the tree for rec.ID exists, calling fill to make one
// in an empty directory if not, and then points rec.Name at it.
func (s *Store) install(ctx context.Context, rec refRecord, fill func(dir string) error) (api.Image, error) {
	for attempt := 0; ; attempt++ {
		if err := s.ensureRootfs(ctx, rec.ID, fill); err != nil {
			return api.Image{}, err
		}
		size, err := treeSize(s.rootfsPath(rec.ID))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return api.Image{}, err
		}
		rec.SizeBytes = size
		ok, err := s.commit(ctx, rec)
		if err != nil {
			return api.Image{}, err
		}
		if ok {
			return rec.Image, nil
		}
		if attempt == 2 {
			return api.Image{}, fmt.Errorf("image %s was deleted while being added; try again: %w", rec.Name, api.ErrConflict)
		}
	}
}

// ensureRootfs fills rootfs/<digest> unless it is there already. Under the
// digest's lock only one caller fills it; the others wait and find it done.
func (s *Store) ensureRootfs(ctx context.Context, digest string, fill func(dir string) error) (err error) {
	final := s.rootfsPath(digest)
	if _, err := os.Stat(final); err == nil {
		return nil
	}
	unlock, err := lockFile(ctx, s.path("locks", strings.TrimPrefix(digest, "sha256:")+".lock"))
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := os.Stat(final); err == nil {
		return nil
	}
	dir, release, err := s.tempDir(ctx)
	if err != nil {
		return err
	}
	defer release()
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	if err := fill(dir); err != nil {
		return err
	}
	if err := syncFS(dir); err != nil {
		return err
	}
	if err := os.Rename(dir, final); err != nil {
		if _, serr := os.Stat(final); serr == nil {
			return nil // someone who does not take our locks got there first
		}
		return err
	}
	return fsutil.SyncDir(filepath.Dir(final))
}

// tempDir makes an empty directory under tmp/ and locks it against
// removal by Open. release removes whatever is still there.
func (s *Store) tempDir(ctx context.Context) (dir string, release func(), err error) {
	lock, err := os.CreateTemp(s.path("tmp"), "*.lock")
	if err != nil {
		return "", nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		lock.Close()
		os.Remove(lock.Name())
		return "", nil, err
	}
	dir = strings.TrimSuffix(lock.Name(), ".lock")
	if err := os.Mkdir(dir, 0o700); err != nil {
		lock.Close()
		os.Remove(lock.Name())
		return "", nil, err
	}
	return dir, func() {
		if err := os.RemoveAll(dir); err != nil {
			slog.WarnContext(ctx, "removing temporary image directory", "dir", dir, "err", err)
		}
		os.Remove(lock.Name())
		lock.Close()
	}, nil
}

// removeStaleTemp removes entries of tmp/ whose lock nobody holds.
func (s *Store) removeStaleTemp() error {
	tmp := s.path("tmp")
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return err
	}
	held := map[string]bool{}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".lock")
		if !ok {
			continue
		}
		f, err := os.Open(filepath.Join(tmp, e.Name()))
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			held[name] = true
		}
		f.Close()
	}
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".lock")
		if held[name] {
			continue
		}
		slog.Info("removing stale temporary image data", "path", filepath.Join(tmp, e.Name()))
		if err := os.RemoveAll(filepath.Join(tmp, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) lockRefs(ctx context.Context) (func(), error) {
	unlock, err := lockFile(ctx, s.path("locks", "refs.lock"))
	if err != nil {
		return nil, fmt.Errorf("locking image refs: %w", err)
	}
	return unlock, nil
}
