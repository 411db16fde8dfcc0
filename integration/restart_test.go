package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warrenhq/warren/api"
)

// TestRestartAdopts restarts the server (gracefully, then with SIGKILL):
// sandboxes still running are adopted with their processes and files; one
// whose processes died meanwhile is reported as error, with the reason.
func TestRestartAdopts(t *testing.T) {
	s := StartServer(t)
	ctx := ctxT(t)
	keep, err := s.Client.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "keep"})
	if err != nil {
		t.Fatal(err)
	}
	doomed, err := s.Client.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "doomed"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client.Exec(ctx, keep.ID, api.ExecRequest{Command: "echo kept > /root/state.txt; sleep 1000 > /dev/null 2>&1 &"}); err != nil {
		t.Fatal(err)
	}

	s.Stop()
	// While the server is down, the second sandbox's processes die.
	if out, err := exec.Command(s.Runsc, "--root", s.RunscRoot(), "kill", "--all", s.RuntimeID(doomed.ID), "KILL").CombinedOutput(); err != nil {
		t.Fatalf("killing %s: %v: %s", doomed.ID, err, out)
	}
	s.Start()

	check := func(when string) {
		t.Helper()
		res, err := s.Client.Exec(ctx, keep.ID, api.ExecRequest{Command: "cat /root/state.txt; pgrep -c sleep"})
		if err != nil {
			t.Fatalf("%s: exec in the adopted sandbox: %v\n%s", when, err, s.Log())
		}
		if res.Stdout != "kept\n1\n" {
			t.Errorf("%s: got %q, want the file and the background process as they were", when, res.Stdout)
		}
		sb, err := s.Client.GetSandbox(ctx, keep.ID)
		if err != nil || sb.State != api.StateRunning {
			t.Errorf("%s: got %+v, %v; want running", when, sb.State, err)
		}
	}
	check("after a graceful restart")
	sb, err := s.Client.GetSandbox(ctx, doomed.ID)
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != api.StateError || !strings.Contains(sb.Error, "ended while the server was down") {
		t.Errorf("dead sandbox: got state %q error %q, want error saying its processes ended", sb.State, sb.Error)
	}
	if _, err := s.Client.Exec(ctx, doomed.ID, api.ExecRequest{Cmd: []string{"true"}}); err == nil || !strings.Contains(err.Error(), "error") {
		t.Errorf("exec in a dead sandbox: got %v, want a conflict naming its error state", err)
	}

	s.Kill()
	s.Start()
	check("after a crash of the server")
}

// TestUpgradeKeepsRestores restarts the server with another build of the
// agent, as an upgrade of Warren does: a snapshot and a stored pause taken
// before it still restore, because each keeps the agent binary it was
// taken with; new sandboxes get the new build.
func TestUpgradeKeepsRestores(t *testing.T) {
	s := StartServerWith(t, map[string]any{"store_after_s": 1, "policy_interval_ms": 100})
	ctx := ctxT(t)
	c := s.Client
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{MemoryMB: ptr(int64(256))})
	if err != nil {
		t.Fatal(err)
	}
	startHolder(t, c, sb.ID, "before the upgrade")
	token, _, _ := probe(t, c, sb.ID)
	snap, err := c.SnapshotSandbox(ctx, sb.ID, "before upgrade")
	if err != nil {
		t.Fatal(err)
	}
	rid := s.RuntimeID(sb.ID)
	if _, err := c.PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	s.WaitStored(rid)

	s.Stop()
	s.Agent = filepath.Join(t.TempDir(), "warren-agent")
	build := exec.Command("go", "build", "-o", s.Agent,
		"-ldflags", "-X main.version=upgrade-test", "./cmd/warren-agent")
	build.Dir = repoRoot
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building a second agent: %v\n%s", err, out)
	}
	s.Start()
	c = s.Client

	if _, err := c.ResumeSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("resuming a sandbox stored before the upgrade: %v\n%s", err, s.Log())
	}
	if tok, n, file := probe(t, c, sb.ID); tok != token || n != "2" || file != "before the upgrade" {
		t.Errorf("resumed: got %s %s %q, want %s 2 %q", tok, n, file, token, "before the upgrade")
	}
	forks, err := c.ForkSnapshot(ctx, snap.ID, 1)
	if err != nil {
		t.Fatalf("forking a snapshot taken before the upgrade: %v\n%s", err, s.Log())
	}
	if tok, n, file := probe(t, c, forks[0].ID); tok != token || n != "2" || file != "before the upgrade" {
		t.Errorf("fork: got %s %s %q, want %s 2 %q", tok, n, file, token, "before the upgrade")
	}
	fresh, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := c.Exec(ctx, fresh.ID, api.ExecRequest{Cmd: []string{"echo", "new"}}); err != nil || res.Stdout != "new\n" {
		t.Errorf("a sandbox made after the upgrade: got %+v, %v", res, err)
	}
	builds, _ := filepath.Glob(filepath.Join(s.StateDir, "agents", "*", "warren-agent"))
	if len(builds) != 2 {
		t.Errorf("agent builds kept: %v, want the old and the new", builds)
	}
}
