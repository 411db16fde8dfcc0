package integration

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/client"
)

// holder is a Python process that keeps a random token and a counter in
// memory only, served on 127.0.0.1:8000 inside the sandbox: if the token
// comes back after a pause, a restore or in a fork, the process's memory
// did.
const holder = `
import http.server, secrets
token = secrets.token_hex(8)
n = 0
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        global n
        if self.path != "/ready":
            n += 1
        self.send_response(200)
        self.end_headers()
        self.wfile.write(f"{token} {n}".encode())
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", 8000), H).serve_forever()
`

// startHolder writes a file and starts the holder in sandbox id.
func startHolder(t *testing.T, c *client.Client, id, file string) {
	t.Helper()
	ctx := ctxT(t)
	if _, err := c.WriteFile(ctx, id, "/root/holder.py", strings.NewReader(holder), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteFile(ctx, id, "/root/data.txt", strings.NewReader(file), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := c.Exec(ctx, id, api.ExecRequest{Command: "nohup python3 /root/holder.py >/dev/null 2>&1 & " +
		"for i in $(seq 100); do curl -sf -o /dev/null http://127.0.0.1:8000/ready && exit 0; sleep 0.1; done; exit 1"})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("starting the holder: %+v, %v", res, err)
	}
}

// probe returns the holder's token and counter and the file's content.
func probe(t *testing.T, c *client.Client, id string) (token string, n string, file string) {
	t.Helper()
	res, err := c.Exec(ctxT(t), id, api.ExecRequest{Command: "curl -sf http://127.0.0.1:8000/; echo; cat /root/data.txt"})
	if err != nil {
		t.Fatalf("probing %s: %v", id, err)
	}
	lines := strings.SplitN(res.Stdout, "\n", 2)
	f := strings.Fields(lines[0])
	if len(f) != 2 || len(lines) != 2 {
		t.Fatalf("probing %s: got %q (stderr %q), want the holder's token and counter, then the file", id, res.Stdout, res.Stderr)
	}
	return f[0], f[1], lines[1]
}

func TestPauseResume(t *testing.T) {
	s := StartServerWith(t, map[string]any{"store_after_s": 2, "policy_interval_ms": 200})
	ctx := ctxT(t)
	c := s.Client
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{MemoryMB: ptr(int64(256))})
	if err != nil {
		t.Fatal(err)
	}
	startHolder(t, c, sb.ID, "on disk")
	token, _, _ := probe(t, c, sb.ID)

	t.Run("resident", func(t *testing.T) {
		got, err := c.PauseSandbox(ctx, sb.ID)
		if err != nil || got.State != api.StatePaused {
			t.Fatalf("pause: got %+v, %v", got.State, err)
		}
		rid := s.RuntimeID(sb.ID)
		freezer, _ := os.ReadFile("/sys/fs/cgroup/freezer/warren/" + rid + "/freezer.state")
		if st := s.Containers()[rid]; st != "paused" && strings.TrimSpace(string(freezer)) != "FROZEN" {
			t.Errorf("runsc says %q and the freezer %q; want the sandbox frozen in memory", st, freezer)
		}
		if _, err := c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}}); !errors.Is(err, client.ErrConflict) || !strings.Contains(err.Error(), "resume") {
			t.Errorf("exec while paused: got %v, want a conflict telling to resume", err)
		}
		if got, err := c.ResumeSandbox(ctx, sb.ID); err != nil || got.State != api.StateRunning {
			t.Fatalf("resume: got %+v, %v", got.State, err)
		}
		tok, n, file := probe(t, c, sb.ID)
		if tok != token || n != "2" || file != "on disk" {
			t.Errorf("after resume: got token %s count %s file %q, want %s 2 %q", tok, n, file, token, "on disk")
		}
	})

	t.Run("stored", func(t *testing.T) {
		if _, err := c.PauseSandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		// After store_after_s the sandbox is checkpointed to disk and its
		// processes end.
		deadline := time.Now().Add(60 * time.Second)
		for len(s.Containers()) != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("paused sandbox still in memory after 60s: %v\n%s", s.Containers(), s.Log())
			}
			time.Sleep(200 * time.Millisecond)
		}
		got, err := c.GetSandbox(ctx, sb.ID)
		if err != nil || got.State != api.StatePaused {
			t.Fatalf("a stored sandbox: got %q, %v; want paused, as the user sees it", got.State, err)
		}
		if got, err := c.ResumeSandbox(ctx, sb.ID); err != nil || got.State != api.StateRunning {
			t.Fatalf("resume from disk: got %+v, %v\n%s", got.State, err, s.Log())
		}
		tok, n, file := probe(t, c, sb.ID)
		if tok != token || n != "3" || file != "on disk" {
			t.Errorf("after resume from disk: got token %s count %s file %q, want %s 3 %q", tok, n, file, token, "on disk")
		}
	})
}

func TestSnapshotForkRevert(t *testing.T) {
	s := StartServer(t)
	ctx := ctxT(t)
	c := s.Client
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "parent", MemoryMB: ptr(int64(256))})
	if err != nil {
		t.Fatal(err)
	}
	startHolder(t, c, sb.ID, "v1")
	token, _, _ := probe(t, c, sb.ID) // count 1, as of the snapshot

	snap, err := c.SnapshotSandbox(ctx, sb.ID, "first")
	if err != nil {
		t.Fatalf("snapshot: %v\n%s", err, s.Log())
	}
	if snap.SandboxID != sb.ID || snap.Kind != "manual" || snap.SizeBytes <= 0 || snap.Name != "first" {
		t.Errorf("snapshot: got %+v", snap)
	}
	// The sandbox kept running through the snapshot, and changes after it.
	if _, err := c.WriteFile(ctx, sb.ID, "/root/data.txt", strings.NewReader("v2"), 0); err != nil {
		t.Fatal(err)
	}
	if tok, n, _ := probe(t, c, sb.ID); tok != token || n != "2" {
		t.Fatalf("after snapshot: got %s %s, want the same process, count 2", tok, n)
	}

	forks, err := c.ForkSnapshot(ctx, snap.ID, 2)
	if err != nil {
		t.Fatalf("fork: %v\n%s", err, s.Log())
	}
	if len(forks) != 2 || forks[0].ID == forks[1].ID || forks[0].FromSnapshot != snap.ID {
		t.Fatalf("fork: got %+v", forks)
	}
	for _, f := range forks {
		tok, n, file := probe(t, c, f.ID)
		if tok != token || n != "2" || file != "v1" {
			t.Errorf("fork %s: got token %s count %s file %q; want the parent as of the snapshot: %s 2 v1", f.ID, tok, n, file, token)
		}
	}
	// Forks are isolated from each other and from the parent.
	if _, err := c.WriteFile(ctx, forks[0].ID, "/root/data.txt", strings.NewReader("fork0"), 0); err != nil {
		t.Fatal(err)
	}
	if _, n, file := probe(t, c, forks[1].ID); file != "v1" || n != "3" {
		t.Errorf("fork 1 after fork 0 wrote: got file %q count %s, want v1 and its own count 3", file, n)
	}
	if _, n, file := probe(t, c, sb.ID); file != "v2" || n != "3" {
		t.Errorf("parent after forks: got file %q count %s, want v2 3", file, n)
	}

	// Revert in place: same id, memory and disk as of the snapshot.
	got, err := c.RevertSandbox(ctx, sb.ID, snap.ID)
	if err != nil {
		t.Fatalf("revert: %v\n%s", err, s.Log())
	}
	if got.ID != sb.ID || got.State != api.StateRunning {
		t.Errorf("revert: got %+v", got)
	}
	if tok, n, file := probe(t, c, sb.ID); tok != token || n != "2" || file != "v1" {
		t.Errorf("after revert: got %s %s %q, want %s 2 v1", tok, n, file, token)
	}

	// A damaged snapshot fails to revert, and the sandbox stays as it was.
	bad, err := c.SnapshotSandbox(ctx, sb.ID, "to damage")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteFile(ctx, sb.ID, "/root/data.txt", strings.NewReader("v3"), 0); err != nil {
		t.Fatal(err)
	}
	pages := filepath.Join(s.StateDir, "snapshots", bad.ID, "checkpoint.img")
	if err := os.Truncate(pages, 100); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RevertSandbox(ctx, sb.ID, bad.ID); err == nil {
		t.Errorf("revert to a damaged snapshot: got no error")
	}
	if tok, n, file := probe(t, c, sb.ID); tok != token || n != "3" || file != "v3" {
		t.Errorf("after a failed revert: got %s %s %q, want the sandbox as before: %s 3 v3", tok, n, file, token)
	}

	// Listing, parents, bad input, delete.
	list, err := c.ListSnapshots(ctx, sb.ID)
	if err != nil || len(list) != 2 || list[1].ParentID != snap.ID {
		t.Errorf("list: got %+v, %v; want 2 snapshots, the second a child of the first", list, err)
	}
	if _, err := c.ForkSnapshot(ctx, snap.ID, 0); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("fork 0: got %v, want invalid", err)
	}
	if _, err := c.ForkSnapshot(ctx, "sn-nosuchsnapsh", 1); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("fork of an unknown snapshot: got %v, want not found", err)
	}
	if _, err := c.RevertSandbox(ctx, sb.ID, ""); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("revert without a snapshot: got %v, want invalid", err)
	}
	if err := c.DeleteSnapshot(ctx, bad.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSnapshot(ctx, bad.ID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("get after delete: got %v, want not found", err)
	}
	if _, err := os.Stat(filepath.Join(s.StateDir, "snapshots", bad.ID)); !os.IsNotExist(err) {
		t.Errorf("deleted snapshot's files: got %v, want gone", err)
	}

	// Fork of a running sandbox: snapshot now, then copies.
	more, err := c.ForkSandbox(ctx, forks[0].ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, file := probe(t, c, more[0].ID); file != "fork0" {
		t.Errorf("fork of fork 0: got file %q, want fork0", file)
	}
}

func TestIdlePolicy(t *testing.T) {
	s := StartServerWith(t, map[string]any{"policy_interval_ms": 200})
	ctx := ctxT(t)
	c := s.Client
	pause, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Idle: &api.IdlePolicy{TimeoutS: 2, Action: "pause"}})
	if err != nil {
		t.Fatal(err)
	}
	del, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Idle: &api.IdlePolicy{TimeoutS: 2, Action: "delete"}})
	if err != nil {
		t.Fatal(err)
	}
	// A streaming command in flight keeps its sandbox active past the timeout.
	busy, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Idle: &api.IdlePolicy{TimeoutS: 2, Action: "pause"}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, busy.ID, api.ExecRequest{Command: "sleep 4"})
		done <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := c.GetSandbox(ctx, pause.ID)
		_, derr := c.GetSandbox(ctx, del.ID)
		if err == nil && got.State == api.StatePaused && errors.Is(derr, client.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: pause-policy sandbox is %q, delete-policy sandbox: %v; want paused and gone", got.State, derr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := <-done; err != nil {
		t.Errorf("a command running past the idle timeout: %v", err)
	}
	if got, _ := c.GetSandbox(ctx, busy.ID); got.State != api.StateRunning {
		t.Errorf("sandbox with a command in flight: got %q right after it ended, want running", got.State)
	}
}

// TestDeletePaused deletes sandboxes paused in memory and stored on disk:
// nothing is left behind (the harness checks).
func TestDeletePaused(t *testing.T) {
	s := StartServerWith(t, map[string]any{"store_after_s": 1, "policy_interval_ms": 100})
	ctx := ctxT(t)
	c := s.Client
	resident, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Idle: &api.IdlePolicy{TimeoutS: 0, Action: "pause"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PauseSandbox(ctx, resident.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteSandbox(ctx, resident.ID); err != nil {
		t.Errorf("deleting a paused sandbox: %v", err)
	}
	stored, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PauseSandbox(ctx, stored.ID); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(s.Containers()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("not stored after 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := c.DeleteSandbox(ctx, stored.ID); err != nil {
		t.Errorf("deleting a stored sandbox: %v", err)
	}
	if ids, _ := os.ReadDir(filepath.Join(s.StateDir, "snapshots")); len(ids) != 1 { // only .tmp
		t.Errorf("images left after deleting a stored sandbox: %d entries", len(ids))
	}
}

// TestCPULimitKept: restores and checkpoints run without a CPU quota (they
// finish sooner so), and the sandbox's own limit is in its cgroup when they
// return: after a snapshot, in a fork, in a fork of a fork (whose snapshot
// spec came from the first fork's bundle), after a resume from disk, and
// after a restart of the server that found the quota lifted (a crash in
// the middle of a checkpoint).
func TestCPULimitKept(t *testing.T) {
	s := StartServerWith(t, map[string]any{"store_after_s": 1, "policy_interval_ms": 100})
	ctx := ctxT(t)
	c := s.Client
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{CPUs: ptr(0.5)})
	if err != nil {
		t.Fatal(err)
	}
	check := func(what, id string) {
		t.Helper()
		rid := s.RuntimeID(id)
		if got := cgroupCPUQuota(t, rid); got != "50000 100000" {
			t.Errorf("%s: cgroup CPU quota and period %q, want \"50000 100000\" (cpus 0.5)", what, got)
		}
		b, err := os.ReadFile(filepath.Join(s.StateDir, "sandboxes", id, rid, "bundle", "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		var spec specs.Spec
		if err := json.Unmarshal(b, &spec); err != nil {
			t.Fatal(err)
		}
		if r := spec.Linux.Resources; r == nil || r.CPU == nil || r.CPU.Quota == nil || *r.CPU.Quota != 50000 {
			t.Errorf("%s: the bundle's spec lost the CPU quota: %+v", what, r)
		}
	}
	check("created", sb.ID)
	if _, err := c.SnapshotSandbox(ctx, sb.ID, ""); err != nil {
		t.Fatal(err)
	}
	check("after a snapshot", sb.ID)

	forks, err := c.ForkSandbox(ctx, sb.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	check("fork", forks[0].ID)
	// A fork of the fork restores from a snapshot whose spec came from the
	// fork's bundle.
	again, err := c.ForkSandbox(ctx, forks[0].ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	check("fork of a fork", again[0].ID)

	if _, err := c.PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	s.WaitStored(s.RuntimeID(sb.ID))
	if _, err := c.ResumeSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	check("resumed from disk", sb.ID)

	rid := s.RuntimeID(sb.ID)
	quota := filepath.Join("/sys/fs/cgroup/cpu/warren", rid, "cpu.cfs_quota_us")
	if _, err := os.Stat(quota); err != nil {
		quota = filepath.Join("/sys/fs/cgroup/warren", rid, "cpu.max")
	}
	unlimited := "-1"
	if filepath.Base(quota) == "cpu.max" {
		unlimited = "max"
	}
	s.Stop()
	if err := os.WriteFile(quota, []byte(unlimited), 0); err != nil {
		t.Fatal(err)
	}
	s.Start()
	check("adopted by a restarted server", sb.ID)
}

// cgroupCPUQuota returns "quota period" of runtime rid's cgroup.
func cgroupCPUQuota(t *testing.T, rid string) string {
	t.Helper()
	v1 := filepath.Join("/sys/fs/cgroup/cpu/warren", rid)
	if q, err := os.ReadFile(filepath.Join(v1, "cpu.cfs_quota_us")); err == nil {
		p, _ := os.ReadFile(filepath.Join(v1, "cpu.cfs_period_us"))
		return strings.TrimSpace(string(q)) + " " + strings.TrimSpace(string(p))
	}
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/warren", rid, "cpu.max"))
	if err != nil {
		t.Fatalf("reading the CPU limit of %s: %v", rid, err)
	}
	return strings.TrimSpace(string(b))
}

// TestPauseResumeCycles pauses and resumes one sandbox many times, with a
// command after each resume and gaps of varied length. Freezing the cgroup
// (how Warren once paused) lost the sandbox within 100 such cycles on
// systrap; runsc pause never did.
func TestPauseResumeCycles(t *testing.T) {
	s := StartServer(t)
	ctx := ctxT(t)
	c := s.Client
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	gaps := []time.Duration{0, time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond}
	for i := range 150 {
		if _, err := c.PauseSandbox(ctx, sb.ID); err != nil {
			t.Fatalf("cycle %d: pause: %v\n%s", i, err, s.Log())
		}
		time.Sleep(gaps[i%len(gaps)])
		if _, err := c.ResumeSandbox(ctx, sb.ID); err != nil {
			t.Fatalf("cycle %d: resume: %v\n%s", i, err, s.Log())
		}
		for range 1 + i%2 {
			if res, err := c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}}); err != nil || res.ExitCode != 0 {
				t.Fatalf("cycle %d: exec after a resume: %+v, %v\n%s", i, res, err, s.Log())
			}
		}
		time.Sleep(gaps[(i/len(gaps))%len(gaps)])
	}
}
