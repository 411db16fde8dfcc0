package integration

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/client"
)

// sh runs a shell command in sandbox id and returns its stdout; a non-zero
// exit is fatal unless ok says otherwise.
func sh(t *testing.T, c *client.Client, id, cmd string) api.ExecResult {
	t.Helper()
	res, err := c.Exec(ctxT(t), id, api.ExecRequest{Command: cmd, TimeoutS: 60})
	if err != nil {
		t.Fatalf("exec %q: %v", cmd, err)
	}
	return res
}

func mustSh(t *testing.T, c *client.Client, id, cmd string) string {
	t.Helper()
	res := sh(t, c, id, cmd)
	if res.ExitCode != 0 {
		t.Fatalf("exec %q: exit %d: %s%s", cmd, res.ExitCode, res.Stdout, res.Stderr)
	}
	return res.Stdout
}

// TestVolumeLifecycle: data on a volume outlives its sandbox and appears
// in the next; the size holds inside (ENOSPC) and on the host; a volume in
// use is not deleted; bad input changes nothing; a deleted volume leaves no
// mount or loop device behind.
func TestVolumeLifecycle(t *testing.T) {
	s := StartServer(t)
	ctx := ctxT(t)
	c := s.Client

	v, err := c.CreateVolume(ctx, api.CreateVolumeRequest{Name: "data", SizeMB: 32})
	if err != nil {
		t.Fatalf("create volume: %v\n%s", err, s.Log())
	}
	if v.Name != "data" || v.SizeMB != 32 || len(v.UsedBy) != 0 || v.AvailableBytes < 20<<20 {
		t.Errorf("new volume: got %+v", v)
	}
	if _, err := c.CreateVolume(ctx, api.CreateVolumeRequest{Name: "data", SizeMB: 32}); !errors.Is(err, client.ErrConflict) {
		t.Errorf("the same name twice: got %v, want conflict", err)
	}

	a, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Volume: "data", Path: "/data"}}})
	if err != nil {
		t.Fatalf("create with a volume: %v\n%s", err, s.Log())
	}
	if len(a.Volumes) != 1 || a.Volumes[0] != (api.VolumeMount{Volume: "data", Path: "/data"}) {
		t.Errorf("sandbox volumes: got %+v", a.Volumes)
	}
	mustSh(t, c, a.ID, "echo kept > /data/note && head -c 5000000 /dev/urandom > /data/blob && sync")
	v, err = c.GetVolume(ctx, "data")
	if err != nil || v.UsedBytes < 5000000 || len(v.UsedBy) != 1 || v.UsedBy[0] != a.ID {
		t.Errorf("volume in use: got %+v, %v; want 5 MB used by %s", v, err, a.ID)
	}
	if err := c.DeleteVolume(ctx, "data"); !errors.Is(err, client.ErrConflict) || !strings.Contains(err.Error(), a.ID) {
		t.Errorf("delete in use: got %v, want conflict naming %s", err, a.ID)
	}

	// Past the size: ENOSPC inside, and the host's file stays its size.
	res := sh(t, c, a.ID, `python3 -c '
import errno
try:
    with open("/data/big", "wb") as f:
        for _ in range(64):
            f.write(b"x" * (1 << 20))
            f.flush()
    print("wrote it all")
except OSError as e:
    print("errno", errno.errorcode[e.errno])
'`)
	if strings.TrimSpace(res.Stdout) != "errno ENOSPC" {
		t.Errorf("writing 64 MB to a 32 MB volume: got %q %q, want errno ENOSPC", res.Stdout, res.Stderr)
	}
	imgs, _ := filepath.Glob(filepath.Join(s.StateDir, "volumes", "vol-*", "volume.img"))
	if len(imgs) != 1 {
		t.Fatalf("volume images: got %v, want one", imgs)
	}
	if fi, err := os.Stat(imgs[0]); err != nil || fi.Size() != 32<<20 {
		t.Errorf("the image on the host: %v, %v; want 32 MB exactly", fi, err)
	}
	mustSh(t, c, a.ID, "rm /data/big")

	if err := c.DeleteSandbox(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	b, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Volumes: []api.VolumeMount{
		{Volume: "data", Path: "/mnt/d"}, {Volume: "data", Path: "/ro", ReadOnly: true}}})
	if err != nil {
		t.Fatalf("create with the volume again: %v", err)
	}
	if got := mustSh(t, c, b.ID, "cat /mnt/d/note /ro/note"); got != "kept\nkept\n" {
		t.Errorf("a new sandbox reads %q, want the first one's data", got)
	}
	if res := sh(t, c, b.ID, "touch /ro/x"); res.ExitCode == 0 || !strings.Contains(res.Stderr, "Read-only") {
		t.Errorf("writing a read-only mount: got exit %d %q, want a read-only error", res.ExitCode, res.Stderr)
	}

	t.Run("bad input", func(t *testing.T) {
		for _, req := range []api.CreateSandboxRequest{
			{Volumes: []api.VolumeMount{{Volume: "nope", Path: "/data"}}},
			{Volumes: []api.VolumeMount{{Volume: "data", Path: "relative"}}},
			{Volumes: []api.VolumeMount{{Volume: "data", Path: "/"}}},
			{Volumes: []api.VolumeMount{{Volume: "data", Path: "/proc/x"}}},
			{Volumes: []api.VolumeMount{{Volume: "data", Path: "/a"}, {Volume: "data", Path: "/a/b"}}},
		} {
			_, err := c.CreateSandbox(ctx, req)
			var ce *client.Error
			if !errors.As(err, &ce) || ce.Status/100 != 4 {
				t.Errorf("create with %+v: got %v, want a 4xx", req.Volumes, err)
			}
		}
		for _, req := range []api.CreateVolumeRequest{{Name: ""}, {Name: "a/b"}, {Name: "tiny", SizeMB: 1}, {Name: "huge", SizeMB: 1 << 30}} {
			if _, err := c.CreateVolume(ctx, req); !errors.Is(err, client.ErrInvalid) {
				t.Errorf("create volume %+v: got %v, want invalid", req, err)
			}
		}
		if _, err := c.GetVolume(ctx, "nope"); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("get a missing volume: got %v, want not_found", err)
		}
		if sbs, _ := c.ListSandboxes(ctx, client.ListOptions{}); len(sbs) != 1 {
			t.Errorf("bad creates left sandboxes: got %d, want 1", len(sbs))
		}
		if vols, _ := c.ListVolumes(ctx); len(vols) != 1 {
			t.Errorf("bad creates left volumes: got %d, want 1", len(vols))
		}
	})

	t.Run("another team", func(t *testing.T) {
		k, err := c.CreateKey(ctx, "team-vol", "")
		if err != nil {
			t.Fatal(err)
		}
		other := client.New("http://"+s.Addr, k.Secret)
		if _, err := other.GetVolume(ctx, "data"); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("another team's get: got %v, want not_found", err)
		}
		if err := other.DeleteVolume(ctx, "data"); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("another team's delete: got %v, want not_found", err)
		}
		if _, err := other.CreateSandbox(ctx, api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Volume: "data", Path: "/data"}}}); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("another team mounting it: got %v, want not_found", err)
		}
		// Its own volume of the same name is another volume.
		if _, err := other.CreateVolume(ctx, api.CreateVolumeRequest{Name: "data", SizeMB: 16}); err != nil {
			t.Errorf("another team's own volume named data: %v", err)
		}
		if err := other.DeleteVolume(ctx, "data"); err != nil {
			t.Error(err)
		}
	})

	if err := c.DeleteSandbox(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteVolume(ctx, "data"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if vols, _ := c.ListVolumes(ctx); len(vols) != 0 {
		t.Errorf("volumes after delete: %+v", vols)
	}
	if b, _ := os.ReadFile("/proc/mounts"); strings.Contains(string(b), filepath.Join(s.StateDir, "volumes")) {
		t.Errorf("a volume is still mounted after its delete")
	}
	if out, _ := exec.Command("losetup", "-a").Output(); strings.Contains(string(out), s.StateDir) {
		t.Errorf("a loop device is left: %s", out)
	}
}

// TestVolumeSnapshots: a volume is shared durable storage. A snapshot does
// not contain it, a revert does not roll it back, a fork mounts the same
// volume (each sees the other's writes), and a restore from disk (a stored
// pause) finds its mount again.
func TestVolumeSnapshots(t *testing.T) {
	s := StartServerWith(t, map[string]any{"store_after_s": 1, "policy_interval_ms": 100})
	ctx := ctxT(t)
	c := s.Client
	if _, err := c.CreateVolume(ctx, api.CreateVolumeRequest{Name: "shared", SizeMB: 32}); err != nil {
		t.Fatal(err)
	}
	a, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Volume: "shared", Path: "/shared"}}})
	if err != nil {
		t.Fatalf("create: %v\n%s", err, s.Log())
	}
	mustSh(t, c, a.ID, "echo v1 > /shared/f; echo v1 > /root/local")
	sn, err := c.SnapshotSandbox(ctx, a.ID, "")
	if err != nil {
		t.Fatalf("snapshot: %v\n%s", err, s.Log())
	}
	mustSh(t, c, a.ID, "echo v2 > /shared/f; echo v2 > /root/local")
	if _, err := c.RevertSandbox(ctx, a.ID, sn.ID); err != nil {
		t.Fatalf("revert: %v\n%s", err, s.Log())
	}
	if got := mustSh(t, c, a.ID, "cat /shared/f /root/local"); got != "v2\nv1\n" {
		t.Errorf("after a revert: got %q, want the volume as it is (v2) and the disk as snapshotted (v1)", got)
	}

	forks, err := c.ForkSnapshot(ctx, sn.ID, 1)
	if err != nil {
		t.Fatalf("fork: %v\n%s", err, s.Log())
	}
	f := forks[0]
	if len(f.Volumes) != 1 || f.Volumes[0].Volume != "shared" || f.Volumes[0].Path != "/shared" {
		t.Errorf("the fork's volumes: got %+v, want shared at /shared", f.Volumes)
	}
	mustSh(t, c, f.ID, "echo from-fork > /shared/fork")
	if got := mustSh(t, c, a.ID, "cat /shared/fork"); got != "from-fork\n" {
		t.Errorf("the parent reads %q of the fork's write, want from-fork", got)
	}
	if v, _ := c.GetVolume(ctx, "shared"); len(v.UsedBy) != 2 {
		t.Errorf("used_by: got %v, want the sandbox and its fork", v.UsedBy)
	}

	// Stored to disk and restored: the mount comes back.
	if _, err := c.PauseSandbox(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if !waitFor(30*time.Second, func() bool { return strings.Contains(s.Log(), "paused sandbox stored to disk") }) {
		t.Fatalf("the paused sandbox was not stored to disk:\n%s", s.Log())
	}
	mustSh(t, c, f.ID, "echo while-stored > /shared/f")
	if _, err := c.ResumeSandbox(ctx, a.ID); err != nil {
		t.Fatalf("resume from disk: %v\n%s", err, s.Log())
	}
	if got := mustSh(t, c, a.ID, "cat /shared/f; echo more >> /shared/f"); got != "while-stored\n" {
		t.Errorf("after a resume from disk: got %q, want the write made while it was stored", got)
	}
	if got := mustSh(t, c, f.ID, "tail -1 /shared/f"); got != "more\n" {
		t.Errorf("the fork reads %q, want the parent's write after its resume", got)
	}
}
