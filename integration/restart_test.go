package integration

import (
	"os/exec"
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
