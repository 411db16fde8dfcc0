package integration

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/client"
)

// TestTemplates builds a template whose setup writes a file and leaves a
// process running, creates sandboxes from it (warm: the process is there),
// personalises them, rebuilds it, and creates from a plain snapshot too.
func TestTemplates(t *testing.T) {
	s := StartServer(t)
	ctx := ctxT(t)
	c := s.Client
	var out strings.Builder
	tpl, err := c.BuildTemplate(ctx, api.CreateTemplateRequest{
		Name:     "py",
		MemoryMB: ptr(int64(256)),
		Env:      map[string]string{"STAGE": "template"},
		Setup: []string{
			"echo installing; echo v1 > /opt/version",
			"nohup python3 -c 'import time; time.sleep(10**9)' >/dev/null 2>&1 &",
		},
	}, func(ev api.TemplateEvent) {
		if ev.Stdout != nil {
			out.WriteString(*ev.Stdout)
		}
	})
	if err != nil {
		t.Fatalf("build: %v\n%s", err, s.Log())
	}
	if tpl.Name != "py" || tpl.SnapshotID == "" || tpl.MemoryMB != 256 || !strings.Contains(out.String(), "installing") {
		t.Errorf("build: got %+v with output %q", tpl, out.String())
	}
	// The build sandbox is gone; only the template's snapshot stays.
	if sbs, _ := c.ListSandboxes(ctx, client.ListOptions{}); len(sbs) != 0 {
		t.Errorf("after a build: %d sandboxes left, want none", len(sbs))
	}

	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "py", Name: "warm",
		Env: map[string]string{"MINE": "yes"}, Metadata: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatalf("create from template: %v\n%s", err, s.Log())
	}
	if sb.Template != "py" || sb.Name != "warm" || sb.MemoryMB != 256 || sb.Metadata["k"] != "v" {
		t.Errorf("create from template: got %+v", sb)
	}
	res, err := c.Exec(ctx, sb.ID, api.ExecRequest{Command: "cat /opt/version; pgrep -c python3; echo $STAGE $MINE"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stdout != "v1\n1\ntemplate yes\n" {
		t.Errorf("in a sandbox from the template: got %q, want the file, the running process and both environments", res.Stdout)
	}
	if _, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "py", MemoryMB: ptr(int64(1024))}); !errors.Is(err, client.ErrInvalid) || !strings.Contains(err.Error(), "256") {
		t.Errorf("create from a template with other memory: got %v, want invalid naming the template's 256 MB", err)
	}
	if _, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "nope"}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("create from an unknown template: got %v, want not found", err)
	}
	if _, err := c.BuildTemplate(ctx, api.CreateTemplateRequest{Name: "broken", Setup: []string{"echo oops; exit 3"}}, nil); err == nil || !strings.Contains(err.Error(), "exited with 3") {
		t.Errorf("a failing setup: got %v, want an error with its exit code", err)
	}

	// Rebuild: new sandboxes get the new version; the old one is untouched.
	if _, err := c.BuildTemplate(ctx, api.CreateTemplateRequest{Name: "py", MemoryMB: ptr(int64(256)),
		Setup: []string{"echo v2 > /opt/version"}}, nil); err != nil {
		t.Fatal(err)
	}
	sb2, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "py"})
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := c.Exec(ctx, sb2.ID, api.ExecRequest{Cmd: []string{"cat", "/opt/version"}}); res.Stdout != "v2\n" {
		t.Errorf("after a rebuild: got %q, want v2", res.Stdout)
	}
	if res, _ := c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"cat", "/opt/version"}}); res.Stdout != "v1\n" {
		t.Errorf("a sandbox made before the rebuild: got %q, want v1", res.Stdout)
	}
	if snaps, _ := c.ListSnapshots(ctx, ""); len(snaps) != 1 {
		t.Errorf("after a rebuild: %d snapshots, want just the new template's", len(snaps))
	}

	// Create from a plain snapshot.
	snap, err := c.SnapshotSandbox(ctx, sb2.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	sb3, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Snapshot: snap.ID, Name: "from-snap"})
	if err != nil {
		t.Fatal(err)
	}
	if sb3.FromSnapshot != snap.ID || sb3.Name != "from-snap" {
		t.Errorf("create from a snapshot: got %+v", sb3)
	}
	if list, _ := c.ListTemplates(ctx); len(list) != 1 || list[0].Name != "py" {
		t.Errorf("list: got %+v", list)
	}
	if err := c.DeleteTemplate(ctx, "py"); err != nil {
		t.Fatal(err)
	}
	if res, err := c.Exec(ctx, sb2.ID, api.ExecRequest{Cmd: []string{"true"}}); err != nil || res.ExitCode != 0 {
		t.Errorf("a sandbox after its template was deleted: %+v, %v", res, err)
	}
}

// TestWarmPool keeps a template's pool full, claims from it (never the same
// sandbox twice), personalises what is claimed, and replaces the pool when
// the template is rebuilt.
func TestWarmPool(t *testing.T) {
	s := StartServerWith(t, map[string]any{"policy_interval_ms": 100})
	ctx := ctxT(t)
	c := s.Client
	waitPool := func(want int) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			tpl, err := c.GetTemplate(ctx, "warm")
			if err == nil && tpl.PoolReady == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("pool: got %d ready (%v), want %d after 60s\n%s", tpl.PoolReady, err, want, s.Log())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if _, err := c.BuildTemplate(ctx, api.CreateTemplateRequest{Name: "warm", Pool: ptr(2),
		Setup: []string{"echo one > /opt/build"}}, nil); err != nil {
		t.Fatal(err)
	}
	waitPool(2)
	if sbs, _ := c.ListSandboxes(ctx, client.ListOptions{}); len(sbs) != 0 {
		t.Errorf("pooled sandboxes are listed: %d, want none until claimed", len(sbs))
	}

	// Two creates at once get two different sandboxes, both from the pool.
	type result struct {
		sb  api.Sandbox
		err error
	}
	results := make(chan result, 2)
	for i := range 2 {
		go func() {
			sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "warm", Name: fmt.Sprintf("claimed-%d", i),
				Env: map[string]string{"WHO": fmt.Sprint(i)}, Metadata: map[string]string{"n": fmt.Sprint(i)}})
			results <- result{sb, err}
		}()
	}
	seen := map[string]bool{}
	for range 2 {
		r := <-results
		if r.err != nil {
			t.Fatalf("claim: %v\n%s", r.err, s.Log())
		}
		if seen[r.sb.ID] {
			t.Fatalf("the pool handed out %s twice", r.sb.ID)
		}
		seen[r.sb.ID] = true
		if r.sb.State != api.StateRunning || !strings.HasPrefix(r.sb.Name, "claimed-") || r.sb.Metadata["n"] == "" {
			t.Errorf("claimed sandbox: got %+v", r.sb)
		}
		res, err := c.Exec(ctx, r.sb.ID, api.ExecRequest{Command: "cat /opt/build; echo $WHO"})
		if err != nil || res.Stdout != "one\n"+r.sb.Metadata["n"]+"\n" {
			t.Errorf("in claimed sandbox %s: got %q, %v", r.sb.ID, res.Stdout, err)
		}
	}
	if got := strings.Count(s.Log(), "claimed from the warm pool"); got != 2 {
		t.Errorf("creates served by the pool: got %d, want 2", got)
	}
	waitPool(2) // refilled in the background

	// A rebuild replaces the pool with sandboxes of the new build.
	if _, err := c.BuildTemplate(ctx, api.CreateTemplateRequest{Name: "warm", Pool: ptr(1),
		Setup: []string{"echo two > /opt/build"}}, nil); err != nil {
		t.Fatal(err)
	}
	waitPool(1)
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "warm"})
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"cat", "/opt/build"}}); res.Stdout != "two\n" {
		t.Errorf("after a rebuild, a claimed sandbox has %q, want two", res.Stdout)
	}
}
