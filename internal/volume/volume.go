// Package volume keeps volumes: durable storage of a team, mounted into
// sandboxes at a path, that outlives them.
//
// Each volume is an ext4 filesystem in a file of its own,
// <dir>/<id>/volume.img, allocated in full when the volume is made
// (fallocate: the host's space is reserved then, so filling volumes can
// never fill the host) and loop-mounted at <dir>/<id>/mnt. Sandboxes get
// that directory as an OCI bind mount, served by gVisor's gofer; a write
// past the volume's size fails inside the sandbox with ENOSPC, as on any
// full filesystem.
//
// A volume is shared, durable storage: sandboxes mounting it at once see
// each other's writes; a snapshot does not contain it (revert and fork do
// not roll it back or copy it: a fork mounts the same volume); it is
// mounted again, from its id, wherever a snapshot is restored. A volume
// whose sandboxes are all gone is unmounted when the daemon stops, and
// mounted again when needed.
package volume

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/store"
)

// Size bounds, in MB.
const (
	DefaultSizeMB = 1024
	MinSizeMB     = 16
	MaxSizeMB     = 1 << 20 // 1 TiB
)

// Manager makes, mounts and removes volumes under one directory.
type Manager struct {
	dir   string
	store *store.Store
	log   *slog.Logger
	// mu serialises mounts and unmounts.
	mu sync.Mutex
}

// Open returns a Manager of the volumes under dir. It removes what an
// interrupted create left behind (directories no row names).
func Open(ctx context.Context, dir string, st *store.Store, log *slog.Logger) (*Manager, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("volumes directory %s: %w", dir, err)
	}
	m := &Manager{dir: dir, store: st, log: log}
	vols, err := st.ListVolumes(ctx, "")
	if err != nil {
		return nil, err
	}
	known := map[string]bool{}
	for _, v := range vols {
		known[v.ID] = true
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if known[e.Name()] || !idPattern.MatchString(e.Name()) {
			continue
		}
		log.Info("removing a volume an interrupted create or delete left", "volume_id", e.Name())
		if err := m.remove(e.Name()); err != nil {
			log.Warn("removing a leftover volume", "volume_id", e.Name(), "err", err)
		}
	}
	return m, nil
}

var namePattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$`)
var idPattern = regexp.MustCompile(`^vol-[a-z2-7]{12}$`)

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

func newID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "vol-" + idEncoding.EncodeToString(b)[:12]
}

func invalid(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, api.ErrInvalid)...)
}

func (m *Manager) image(id string) string { return filepath.Join(m.dir, id, "volume.img") }

// Dir is where volume id is mounted on the host: the source of its bind
// mounts.
func (m *Manager) Dir(id string) string { return filepath.Join(m.dir, id, "mnt") }

// IDOf returns the id of the volume whose Dir is dir, "" when dir is no
// volume's.
func (m *Manager) IDOf(dir string) string {
	rel, err := filepath.Rel(m.dir, filepath.Clean(dir))
	if err != nil {
		return ""
	}
	id, rest, _ := strings.Cut(rel, string(filepath.Separator))
	if rest != "mnt" || !idPattern.MatchString(id) {
		return ""
	}
	return id
}

// Create makes volume req.Name of team: its image, filesystem and mount.
func (m *Manager) Create(ctx context.Context, team string, req api.CreateVolumeRequest) (store.Volume, error) {
	if !namePattern.MatchString(req.Name) {
		return store.Volume{}, invalid("volume name %q: use 1-63 letters, digits, '_', '.', '-', starting with a letter or digit", req.Name)
	}
	size := req.SizeMB
	if size == 0 {
		size = DefaultSizeMB
	}
	if size < MinSizeMB || size > MaxSizeMB {
		return store.Volume{}, invalid("size_mb %d: must be between %d and %d", size, MinSizeMB, MaxSizeMB)
	}
	if _, err := m.store.GetVolume(ctx, team, req.Name); err == nil {
		return store.Volume{}, fmt.Errorf("a volume named %q already exists: %w", req.Name, api.ErrConflict)
	}
	v := store.Volume{ID: newID(), TeamID: team, Name: req.Name, SizeMB: size, CreatedAt: time.Now().UTC()}
	start := time.Now()
	if err := m.makeFS(ctx, v); err != nil {
		m.remove(v.ID)
		return store.Volume{}, err
	}
	if err := m.Mount(v.ID); err != nil {
		m.remove(v.ID)
		return store.Volume{}, err
	}
	if err := m.store.CreateVolume(ctx, v); err != nil {
		m.remove(v.ID)
		return store.Volume{}, err
	}
	m.log.Info("volume created", "volume_id", v.ID, "name", v.Name, "size_mb", v.SizeMB, "took", time.Since(start).Round(time.Millisecond))
	return v, nil
}

// makeFS allocates v's image in full and makes its filesystem.
func (m *Manager) makeFS(ctx context.Context, v store.Volume) error {
	if err := os.MkdirAll(m.Dir(v.ID), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(m.image(v.ID), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	err = unix.Fallocate(int(f.Fd()), 0, 0, v.SizeMB<<20)
	f.Close()
	if errors.Is(err, unix.ENOSPC) {
		return fmt.Errorf("volume %q: the host has no room for %d MB; make it smaller or free space: %w", v.Name, v.SizeMB, api.ErrQuota)
	}
	if err != nil {
		return fmt.Errorf("volume %q: allocating %d MB: %w", v.Name, v.SizeMB, err)
	}
	// -m 0: no blocks reserved (sandboxes write as root anyway);
	// nodiscard: keep the allocation, not punch it out again.
	if out, err := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-E", "nodiscard",
		"-L", labelOf(v.Name), m.image(v.ID)).CombinedOutput(); err != nil {
		return fmt.Errorf("volume %q: mkfs.ext4: %w: %s (is e2fsprogs installed? scripts/up.sh installs it)", v.Name, err, bytes.TrimSpace(out))
	}
	return nil
}

// labelOf is an ext4 label (at most 16 bytes) for a volume name.
func labelOf(name string) string {
	if len(name) > 16 {
		return name[:16]
	}
	return name
}

// Mount mounts volume id at Dir(id) unless it is mounted.
func (m *Manager) Mount(id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir := m.Dir(id)
	if mounted(dir) {
		return nil
	}
	if _, err := os.Stat(m.image(id)); err != nil {
		return fmt.Errorf("volume %s: its image is missing: %w", id, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// A loop device that goes away with the mount (autoclear).
	if out, err := exec.Command("mount", "-t", "ext4", "-o", "loop,nosuid,nodev", m.image(id), dir).CombinedOutput(); err != nil {
		return fmt.Errorf("volume %s: mounting: %w: %s", id, err, bytes.TrimSpace(out))
	}
	// The root of the filesystem is the root of the volume inside a
	// sandbox: open to everyone there, like a fresh /tmp is not, but as a
	// fresh disk is to root.
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	return nil
}

// mounted reports whether dir is a mount point.
func mounted(dir string) bool {
	var st, parent unix.Stat_t
	if unix.Stat(dir, &st) != nil || unix.Stat(filepath.Dir(dir), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// Unmount unmounts volume id; one that is not mounted is fine. A mount
// still busy (a sandbox's gofer holding it) is detached lazily.
func (m *Manager) Unmount(id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir := m.Dir(id)
	if !mounted(dir) {
		return nil
	}
	err := unix.Unmount(dir, 0)
	if errors.Is(err, unix.EBUSY) {
		m.log.Warn("volume busy at unmount; detaching it lazily", "volume_id", id)
		err = unix.Unmount(dir, unix.MNT_DETACH)
	}
	if err != nil {
		return fmt.Errorf("volume %s: unmounting %s: %w", id, dir, err)
	}
	return nil
}

// remove unmounts volume id and deletes its files.
func (m *Manager) remove(id string) error {
	if err := m.Unmount(id); err != nil {
		return err
	}
	return os.RemoveAll(filepath.Join(m.dir, id))
}

// Get returns team's volume name.
func (m *Manager) Get(ctx context.Context, team, name string) (store.Volume, error) {
	return m.store.GetVolume(ctx, team, name)
}

// Usage is what a volume's filesystem reports.
type Usage struct {
	UsedBytes      int64
	AvailableBytes int64
}

// Usage mounts volume id if needed and returns its filesystem's usage.
func (m *Manager) Usage(id string) (Usage, error) {
	if err := m.Mount(id); err != nil {
		return Usage{}, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(m.Dir(id), &st); err != nil {
		return Usage{}, fmt.Errorf("volume %s: %w", id, err)
	}
	return Usage{UsedBytes: int64(st.Blocks-st.Bfree) * st.Bsize, AvailableBytes: int64(st.Bavail) * st.Bsize}, nil
}

// List lists team's volumes.
func (m *Manager) List(ctx context.Context, team string) ([]store.Volume, error) {
	return m.store.ListVolumes(ctx, team)
}

// Users lists the sandboxes of team that mount volume name.
func (m *Manager) Users(ctx context.Context, team, name string) ([]string, error) {
	return m.store.VolumeUsers(ctx, team, name)
}

// Delete removes team's volume name and its data, unless a sandbox mounts
// it (ErrConflict). Snapshots of sandboxes that mounted it can no longer
// be restored.
func (m *Manager) Delete(ctx context.Context, team, name string) error {
	v, err := m.store.DeleteVolume(ctx, team, name)
	if err != nil {
		return err
	}
	if err := m.remove(v.ID); err != nil {
		// The row is gone; Open removes the files at the next start.
		m.log.Warn("removing a deleted volume's files", "volume_id", v.ID, "err", err)
	}
	m.log.Info("volume deleted", "volume_id", v.ID, "name", v.Name)
	return nil
}

// Resolve returns team's volume name and its host directory, mounted.
func (m *Manager) Resolve(ctx context.Context, team, name string) (store.Volume, string, error) {
	v, err := m.store.GetVolume(ctx, team, name)
	if err != nil {
		return v, "", fmt.Errorf("%w; create it with `warren volume create %s`", err, name)
	}
	if err := m.Mount(v.ID); err != nil {
		return v, "", err
	}
	return v, m.Dir(v.ID), nil
}

// ResolveID returns volume id and its host directory, mounted; a volume
// deleted since is ErrConflict.
func (m *Manager) ResolveID(ctx context.Context, id string) (store.Volume, string, error) {
	v, err := m.store.GetVolumeByID(ctx, id)
	if errors.Is(err, api.ErrNotFound) {
		return v, "", fmt.Errorf("volume %s was deleted after the snapshot was taken; it cannot be restored without it: %w", id, api.ErrConflict)
	}
	if err != nil {
		return v, "", err
	}
	if err := m.Mount(v.ID); err != nil {
		return v, "", err
	}
	return v, m.Dir(v.ID), nil
}

// UnmountAll unmounts every volume (the daemon stops with no sandbox
// left).
func (m *Manager) UnmountAll(ctx context.Context) error {
	vols, err := m.store.ListVolumes(ctx, "")
	if err != nil {
		return err
	}
	var errs []error
	for _, v := range vols {
		errs = append(errs, m.Unmount(v.ID))
	}
	return errors.Join(errs...)
}
