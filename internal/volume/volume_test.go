package volume

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/store"
)

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), "warren.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for _, team := range []string{"t1", "t2"} {
		if _, err := st.EnsureTeam(t.Context(), team, team); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

func TestIDOf(t *testing.T) {
	m := &Manager{dir: "/state/volumes"}
	for dir, want := range map[string]string{
		"/state/volumes/vol-abcdefghijkl/mnt":    "vol-abcdefghijkl",
		"/state/volumes/vol-abcdefghijkl/mnt/":   "vol-abcdefghijkl",
		"/state/volumes/vol-abcdefghijkl":        "",
		"/state/volumes/vol-abcdefghijkl/x":      "",
		"/state/volumes/../vol-abcdefghijkl/mnt": "",
		"/state/agent":                           "",
		"/state/volumes/nope/mnt":                "",
	} {
		if got := m.IDOf(dir); got != want {
			t.Errorf("IDOf(%q): got %q, want %q", dir, got, want)
		}
	}
	if got := m.IDOf(m.Dir("vol-abcdefghijkl")); got != "vol-abcdefghijkl" {
		t.Errorf("IDOf(Dir(id)): got %q", got)
	}
}

func TestCreateInvalid(t *testing.T) {
	m := &Manager{dir: t.TempDir(), store: openStore(t), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, req := range []api.CreateVolumeRequest{
		{Name: ""}, {Name: "-x"}, {Name: "a/b"}, {Name: strings.Repeat("a", 64)},
		{Name: "ok", SizeMB: MinSizeMB - 1}, {Name: "ok", SizeMB: MaxSizeMB + 1}, {Name: "ok", SizeMB: -5},
	} {
		if _, err := m.Create(t.Context(), "t1", req); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("Create(%+v): got %v, want ErrInvalid", req, err)
		}
	}
	if entries, _ := os.ReadDir(m.dir); len(entries) != 0 {
		t.Errorf("invalid creates left %d entries in the volumes directory", len(entries))
	}
}

// TestVolume makes a real volume: an ext4 image loop-mounted, full at its
// size, removed with its mount and loop device.
func TestVolume(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("needs mkfs.ext4 (e2fsprogs)")
	}
	ctx := t.Context()
	st := openStore(t)
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m, err := Open(ctx, dir, st, log)
	if err != nil {
		t.Fatal(err)
	}
	v, err := m.Create(ctx, "t1", api.CreateVolumeRequest{Name: "data", SizeMB: 32})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { m.Unmount(v.ID) })
	if _, err := m.Create(ctx, "t1", api.CreateVolumeRequest{Name: "data", SizeMB: 32}); !errors.Is(err, api.ErrConflict) {
		t.Errorf("Create twice: got %v, want ErrConflict", err)
	}
	if !mounted(m.Dir(v.ID)) {
		t.Fatalf("%s is not mounted after Create", m.Dir(v.ID))
	}
	// The image is allocated in full up front.
	var st2 syscall.Stat_t
	if err := syscall.Stat(m.image(v.ID), &st2); err != nil || st2.Blocks*512 < 32<<20 {
		t.Errorf("image: %d bytes allocated, %v; want all of 32 MB", st2.Blocks*512, err)
	}

	// Writing past the size fails with ENOSPC.
	f, err := os.Create(filepath.Join(m.Dir(v.ID), "big"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	var werr error
	for i := 0; i < 64 && werr == nil; i++ {
		_, werr = f.Write(buf)
	}
	f.Close()
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Errorf("writing 64 MB to a 32 MB volume: got %v, want ENOSPC", werr)
	}
	u, err := m.Usage(v.ID)
	if err != nil || u.UsedBytes < 20<<20 || u.AvailableBytes > 1<<20 {
		t.Errorf("Usage of a full volume: got %+v, %v", u, err)
	}

	// Unmounted (as at a daemon stop), Resolve mounts it again, data intact.
	if err := m.UnmountAll(ctx); err != nil {
		t.Fatal(err)
	}
	if mounted(m.Dir(v.ID)) {
		t.Fatal("still mounted after UnmountAll")
	}
	_, got, err := m.Resolve(ctx, "t1", "data")
	if err != nil || got != m.Dir(v.ID) || !mounted(got) {
		t.Fatalf("Resolve: got %q, %v (mounted %v)", got, err, mounted(got))
	}
	if fi, err := os.Stat(filepath.Join(got, "big")); err != nil || fi.Size() < 20<<20 {
		t.Errorf("data after a remount: %v, %v", fi, err)
	}
	if _, _, err := m.Resolve(ctx, "t2", "data"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("another team's volume: got %v, want ErrNotFound", err)
	}
	if _, _, err := m.ResolveID(ctx, v.ID); err != nil {
		t.Errorf("ResolveID: %v", err)
	}

	// In use: 409, nothing changes.
	sb := &store.Sandbox{ID: "sb-aaaaaaaaaaaa", TeamID: "t1", State: api.StateRunning, CPUs: 1, MemoryMB: 64, DiskMB: 64,
		Volumes: []api.VolumeMount{{Volume: "data", Path: "/data"}}}
	if err := st.CreateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if err := m.Delete(ctx, "t1", "data"); !errors.Is(err, api.ErrConflict) {
		t.Errorf("Delete in use: got %v, want ErrConflict", err)
	}
	if !mounted(m.Dir(v.ID)) {
		t.Errorf("a refused delete unmounted the volume")
	}
	st.DeleteSandbox(ctx, sb.ID)
	if err := m.Delete(ctx, "t1", "data"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, v.ID)); !os.IsNotExist(err) {
		t.Errorf("files of a deleted volume remain: %v", err)
	}
	if out, _ := exec.Command("losetup", "-a").Output(); strings.Contains(string(out), v.ID) {
		t.Errorf("loop device left behind: %s", out)
	}
	if _, _, err := m.ResolveID(ctx, v.ID); !errors.Is(err, api.ErrConflict) {
		t.Errorf("ResolveID of a deleted volume: got %v, want ErrConflict", err)
	}

	// A leftover directory without a row goes at the next Open.
	left := filepath.Join(dir, "vol-leftoverleft")
	os.MkdirAll(filepath.Join(left, "mnt"), 0o700)
	if _, err := Open(ctx, dir, st, log); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Errorf("leftover %s not removed by Open: %v", left, err)
	}
}
