package integration

import (
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/client"
)

// killAllRunsc kills every runsc container of the server, as a host crash
// would, and waits until their processes are gone.
func killAllRunsc(t *testing.T, s *Server) {
	t.Helper()
	for id := range s.Containers() {
		exec.Command(s.Runsc, "--root", s.RunscRoot(), "kill", "--all", id, "KILL").Run()
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		alive := 0
		for _, st := range s.Containers() {
			if st == "running" || st == "paused" {
				alive++
			}
		}
		if alive == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("runsc containers still alive after kill: %v", s.Containers())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestCrashRecovery kills the server and every sandbox process (a host
// crash): a sandbox with periodic checkpoints comes back with its last
// checkpointed memory and files; one without becomes error, saying why.
func TestCrashRecovery(t *testing.T) {
	s := StartServerWith(t, map[string]any{"policy_interval_ms": 200, "keep_checkpoints": 2})
	ctx := ctxT(t)
	c := s.Client
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{CheckpointIntervalS: ptr(5)})
	if err != nil {
		t.Fatal(err)
	}
	bare, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	startHolder(t, c, sb.ID, "checkpointed")
	token, _, _ := probe(t, c, sb.ID) // count 1

	// Wait for two checkpoints after the probe, so the older one is pruned
	// and the newest has count 1.
	start := time.Now()
	deadline := start.Add(60 * time.Second)
	for {
		got, err := c.GetSandbox(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.LastCheckpointAt != nil && got.LastCheckpointAt.After(start.Add(5*time.Second)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint after 60s:\n%s", s.Log())
		}
		time.Sleep(200 * time.Millisecond)
	}
	var ckpts []api.Snapshot
	all, err := c.ListSnapshots(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, sn := range all {
		if sn.Kind == "checkpoint" {
			ckpts = append(ckpts, sn)
		}
	}
	if len(ckpts) < 1 || len(ckpts) > 2 {
		t.Errorf("checkpoints kept: got %d, want 1 or 2 (keep_checkpoints 2)", len(ckpts))
	}

	s.Kill()
	killAllRunsc(t, s)
	s.Start() // on a new address: use s.Client from here on

	got, err := s.Client.GetSandbox(ctx, sb.ID)
	if err != nil || got.State != api.StateRunning {
		t.Fatalf("after a crash: got %q %q, %v; want running, restored from its checkpoint\n%s", got.State, got.Error, err, s.Log())
	}
	tok, n, file := probe(t, s.Client, sb.ID)
	if tok != token || n != "2" || file != "checkpointed" {
		t.Errorf("after a crash: got %s %s %q, want %s 2 checkpointed", tok, n, file, token)
	}
	got, err = s.Client.GetSandbox(ctx, bare.ID)
	if err != nil || got.State != api.StateError || !strings.Contains(got.Error, "no checkpoint") {
		t.Errorf("sandbox without checkpoints after a crash: got %q %q, %v; want error saying it has no checkpoint", got.State, got.Error, err)
	}
}

// TestKillDuringOperations kills the server with SIGKILL in the middle of
// snapshot, fork, pause and revert, then restarts it: no sandbox is lost,
// every listed snapshot is complete, and the sandbox still works.
func TestKillDuringOperations(t *testing.T) {
	s := StartServer(t)
	ctx := ctxT(t)
	sb, err := s.Client.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	base, err := s.Client.SnapshotSandbox(ctx, sb.ID, "base")
	if err != nil {
		t.Fatal(err)
	}
	ops := []struct {
		name string
		do   func(c *client.Client) error
	}{
		{"snapshot", func(c *client.Client) error { _, err := c.SnapshotSandbox(ctx, sb.ID, ""); return err }},
		{"fork", func(c *client.Client) error { _, err := c.ForkSnapshot(ctx, base.ID, 2); return err }},
		{"pause", func(c *client.Client) error { _, err := c.PauseSandbox(ctx, sb.ID); return err }},
		{"revert", func(c *client.Client) error { _, err := c.RevertSandbox(ctx, sb.ID, base.ID); return err }},
	}
	for _, op := range ops {
		for _, delay := range []time.Duration{time.Duration(rand.IntN(50)) * time.Millisecond, 150 * time.Millisecond} {
			done := make(chan error, 1)
			c := s.Client
			go func() { done <- op.do(c) }()
			time.Sleep(delay)
			s.Kill()
			acked := <-done == nil
			s.Start()

			got, err := s.Client.GetSandbox(ctx, sb.ID)
			if err != nil {
				t.Fatalf("%s killed after %s: sandbox lost: %v\n%s", op.name, delay, err, s.Log())
			}
			if got.State == api.StatePaused {
				if _, err := s.Client.ResumeSandbox(ctx, sb.ID); err != nil {
					t.Fatalf("%s killed after %s: resume: %v\n%s", op.name, delay, err, s.Log())
				}
			} else if got.State != api.StateRunning {
				t.Fatalf("%s killed after %s (acknowledged %v): sandbox is %s (%s)\n%s", op.name, delay, acked, got.State, got.Error, s.Log())
			}
			if res, err := s.Client.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}}); err != nil || res.ExitCode != 0 {
				t.Fatalf("%s killed after %s: exec: %+v, %v", op.name, delay, res, err)
			}
			snaps, err := s.Client.ListSnapshots(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			for _, sn := range snaps {
				man := filepath.Join(s.StateDir, "snapshots", sn.ID, "manifest.json")
				if _, err := os.Stat(man); err != nil {
					t.Errorf("%s killed after %s: snapshot %s listed without its files: %v", op.name, delay, sn.ID, err)
				}
			}
			tmp, _ := os.ReadDir(filepath.Join(s.StateDir, "snapshots", ".tmp"))
			if len(tmp) != 0 {
				t.Errorf("%s killed after %s: %d half-written images left after restart", op.name, delay, len(tmp))
			}
		}
	}
	// Forks that were acknowledged (or recovered) are usable; delete them
	// all through the harness.
}

// TestSnapshotDiskFull runs a snapshot with its image directory on a
// small file system: a clear error, earlier snapshots intact, the sandbox
// still running.
func TestSnapshotDiskFull(t *testing.T) {
	RequiresRoot(t)
	s := StartServer(t)
	ctx := ctxT(t)
	sb, err := s.Client.CreateSandbox(ctx, api.CreateSandboxRequest{MemoryMB: ptr(int64(512))})
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.Client.SnapshotSandbox(ctx, sb.ID, "small")
	if err != nil {
		t.Fatal(err)
	}
	// Put the snapshot directory on a tmpfs with room for little more
	// than what is there.
	snapDir := filepath.Join(s.StateDir, "snapshots")
	s.Stop()
	moved := snapDir + ".real"
	if err := os.Rename(snapDir, moved); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(snapDir, 0o700)
	size := first.SizeBytes + 48<<20
	if err := syscall.Mount("tmpfs", snapDir, "tmpfs", 0, "size="+strconv.FormatInt(size, 10)); err != nil {
		t.Fatalf("mounting a small tmpfs: %v", err)
	}
	t.Cleanup(func() {
		syscall.Unmount(snapDir, syscall.MNT_DETACH)
	})
	if out, err := exec.Command("cp", "-a", filepath.Join(moved, first.ID), filepath.Join(moved, ".tmp"), snapDir+"/").CombinedOutput(); err != nil {
		t.Fatalf("copying snapshots onto the tmpfs: %v: %s", err, out)
	}
	s.Start()

	// Touch 200 MB so the next image can't fit.
	res, err := s.Client.Exec(ctx, sb.ID, api.ExecRequest{Command: "nohup python3 -c 'import time; b = bytearray(200 << 20); b[::4096] = b\"x\" * len(b[::4096]); time.sleep(10**6)' >/dev/null 2>&1 & sleep 3"})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("filling memory: %+v, %v", res, err)
	}
	_, err = s.Client.SnapshotSandbox(ctx, sb.ID, "too big")
	if err == nil {
		t.Fatalf("a snapshot on a full disk: got no error")
	}
	if !strings.Contains(err.Error(), "keeps running") {
		t.Errorf("a snapshot on a full disk: got %v, want an error saying the sandbox keeps running", err)
	}
	if res, err := s.Client.Exec(ctx, sb.ID, api.ExecRequest{Command: "pgrep -c python3"}); err != nil || strings.TrimSpace(res.Stdout) != "1" {
		t.Errorf("after a failed snapshot: got %+v, %v; want the sandbox running with its process", res, err)
	}
	snaps, err := s.Client.ListSnapshots(ctx, sb.ID)
	if err != nil || len(snaps) != 1 || snaps[0].ID != first.ID {
		t.Errorf("after a failed snapshot: got %+v, %v; want only the first snapshot", snaps, err)
	}
	// The first snapshot is whole: it still forks (a fork's writable layer
	// lives beside the sandboxes, not on the full file system).
	if _, err := s.Client.ForkSnapshot(ctx, first.ID, 1); err != nil {
		t.Errorf("fork of the earlier snapshot: %v", err)
	}
}
