package integration

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/client"
)

func ptr[T any](v T) *T { return &v }

// TestLifecycle creates a sandbox, runs commands, moves files and deletes
// it, leaving nothing behind.
func TestLifecycle(t *testing.T) {
	s := StartServer(t)
	ctx := ctxT(t)
	c := s.Client

	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{
		Name: "life", CPUs: ptr(1.0), MemoryMB: ptr(int64(256)),
		Env: map[string]string{"GREETING": "hello"}, Metadata: map[string]string{"owner": "test"},
	})
	if err != nil {
		t.Fatalf("create: %v\n%s", err, s.Log())
	}
	if sb.State != api.StateRunning || len(sb.ID) != 15 || sb.Image != "debian:bookworm" {
		t.Fatalf("create: got %+v, want a running debian:bookworm sandbox with a 15-char id", sb)
	}

	t.Run("exec", func(t *testing.T) {
		for _, tc := range []struct {
			name      string
			req       api.ExecRequest
			code      int
			stdout    string
			stderrHas string
		}{
			{"argv", api.ExecRequest{Cmd: []string{"echo", "a b"}}, 0, "a b\n", ""},
			{"shell", api.ExecRequest{Command: "echo $GREETING; exit 3"}, 3, "hello\n", ""},
			{"env", api.ExecRequest{Command: "echo $X", Env: map[string]string{"X": "y"}}, 0, "y\n", ""},
			{"cwd", api.ExecRequest{Cmd: []string{"pwd"}, Cwd: "/tmp"}, 0, "/tmp\n", ""},
			{"stdin", api.ExecRequest{Cmd: []string{"cat"}, Stdin: "piped"}, 0, "piped", ""},
			{"stderr", api.ExecRequest{Command: "echo oops >&2"}, 0, "", "oops"},
			{"python", api.ExecRequest{Cmd: []string{"python3", "-c", "print(6*7)"}}, 0, "42\n", ""},
			{"missing binary", api.ExecRequest{Cmd: []string{"no-such-cmd"}}, 127, "", "no-such-cmd"},
			{"timeout", api.ExecRequest{Command: "sleep 30", TimeoutS: 0.5}, 124, "", ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				res, err := c.Exec(ctx, sb.ID, tc.req)
				if err != nil {
					t.Fatalf("exec: %v", err)
				}
				if res.ExitCode != tc.code || res.Stdout != tc.stdout || !strings.Contains(res.Stderr, tc.stderrHas) {
					t.Errorf("got code %d stdout %q stderr %q, want code %d stdout %q stderr containing %q",
						res.ExitCode, res.Stdout, res.Stderr, tc.code, tc.stdout, tc.stderrHas)
				}
			})
		}
	})

	t.Run("isolated", func(t *testing.T) {
		// The sandbox runs gVisor's kernel, not the host's.
		res, err := c.Exec(ctx, sb.ID, api.ExecRequest{Command: "dmesg 2>/dev/null | head -1; cat /proc/1/cmdline | tr '\\0' ' '"})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(res.Stdout, "gVisor") || !strings.Contains(res.Stdout, "warren-agent") {
			t.Errorf("got %q, want gVisor's dmesg and warren-agent as PID 1", res.Stdout)
		}
	})

	t.Run("stream", func(t *testing.T) {
		var events []api.ExecEvent
		code, err := c.ExecStream(ctx, sb.ID, api.ExecRequest{Command: "echo one; sleep 0.2; echo two >&2; echo three; exit 5"},
			func(ev api.ExecEvent) error { events = append(events, ev); return nil })
		if err != nil {
			t.Fatal(err)
		}
		var out, errOut strings.Builder
		for _, ev := range events {
			if ev.Stdout != nil {
				out.WriteString(*ev.Stdout)
			}
			if ev.Stderr != nil {
				errOut.WriteString(*ev.Stderr)
			}
		}
		if code != 5 || out.String() != "one\nthree\n" || errOut.String() != "two\n" {
			t.Errorf("got code %d stdout %q stderr %q, want 5, %q, %q", code, out.String(), errOut.String(), "one\nthree\n", "two\n")
		}
		if len(events) < 3 || events[len(events)-1].ExitCode == nil {
			t.Errorf("got %d events, the last %+v; want separate lines ending with the exit code", len(events), events[len(events)-1])
		}
	})

	t.Run("flood", func(t *testing.T) {
		res, err := c.Exec(ctx, sb.ID, api.ExecRequest{Command: "head -c 50000000 /dev/zero | tr '\\0' x", TimeoutS: 60})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Truncated || len(res.Stdout) > 20<<20 {
			t.Errorf("got truncated=%v and %d bytes, want truncated output of at most 20 MiB", res.Truncated, len(res.Stdout))
		}
		res, err = c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}})
		if err != nil || res.ExitCode != 0 {
			t.Errorf("after a flood: got %+v, %v; want the agent still answering", res, err)
		}
	})

	t.Run("zombies reaped", func(t *testing.T) {
		for i := 0; i < 5; i++ {
			if _, err := c.Exec(ctx, sb.ID, api.ExecRequest{Command: "sleep 0.1 & exit 0"}); err != nil {
				t.Fatal(err)
			}
		}
		res, err := c.Exec(ctx, sb.ID, api.ExecRequest{Command: "sleep 0.5; ps -eo stat= | grep -c '^Z' || true"})
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(res.Stdout) != "0" {
			t.Errorf("got %q zombies, want 0", res.Stdout)
		}
	})

	t.Run("files", func(t *testing.T) {
		content := bytes.Repeat([]byte{0, 1, 2, 255}, 300000) // binary, 1.2 MB
		if _, err := c.WriteFile(ctx, sb.ID, "/work/deep/dir/blob.bin", bytes.NewReader(content), 0o640); err != nil {
			t.Fatal(err)
		}
		rc, err := c.ReadFile(ctx, sb.ID, "/work/deep/dir/blob.bin")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if !bytes.Equal(got, content) {
			t.Errorf("read back %d bytes, want the %d written", len(got), len(content))
		}
		res, _ := c.Exec(ctx, sb.ID, api.ExecRequest{Command: "stat -c %a /work/deep/dir/blob.bin; sha256sum < /work/deep/dir/blob.bin | cut -c1-8"})
		if !strings.HasPrefix(res.Stdout, "640\n") {
			t.Errorf("mode inside: got %q, want 640", res.Stdout)
		}
		entries, err := c.ListFiles(ctx, sb.ID, "/work", 3)
		if err != nil {
			t.Fatal(err)
		}
		var paths []string
		for _, e := range entries {
			paths = append(paths, e.Path+":"+e.Type)
		}
		want := "/work/deep:dir /work/deep/dir:dir /work/deep/dir/blob.bin:file"
		if strings.Join(paths, " ") != want {
			t.Errorf("list: got %v, want %s", paths, want)
		}
		if err := c.RemoveFile(ctx, sb.ID, "/work", false); !errors.Is(err, client.ErrConflict) {
			t.Errorf("removing a non-empty dir without recursive: got %v, want conflict", err)
		}
		if err := c.RemoveFile(ctx, sb.ID, "/work", true); err != nil {
			t.Fatal(err)
		}
		if _, err := c.ReadFile(ctx, sb.ID, "/work/deep/dir/blob.bin"); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("reading a deleted file: got %v, want not found", err)
		}
	})

	t.Run("get and list", func(t *testing.T) {
		got, err := c.GetSandbox(ctx, sb.ID)
		if err != nil || got.Name != "life" || got.Metadata["owner"] != "test" || got.MemoryMB != 256 {
			t.Fatalf("get: got %+v, %v", got, err)
		}
		list, err := c.ListSandboxes(ctx, client.ListOptions{Metadata: map[string]string{"owner": "test"}})
		if err != nil || len(list) != 1 || list[0].ID != sb.ID {
			t.Errorf("list by metadata: got %v, %v; want just %s", list, err, sb.ID)
		}
		list, err = c.ListSandboxes(ctx, client.ListOptions{Metadata: map[string]string{"owner": "nobody"}})
		if err != nil || len(list) != 0 {
			t.Errorf("list by other metadata: got %v, %v; want none", list, err)
		}
	})

	t.Run("memory limit", func(t *testing.T) {
		res, err := c.Exec(ctx, sb.ID, api.ExecRequest{Command: "free -m | awk '/Mem:/ {print $2}'"})
		if err != nil {
			t.Fatal(err)
		}
		var mb int
		fmt.Sscan(res.Stdout, &mb)
		if mb <= 0 || mb > 300 {
			t.Errorf("total memory inside: got %q MB, want about 256", res.Stdout)
		}
	})

	if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSandbox(ctx, sb.ID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("get after delete: got %v, want not found", err)
	}
	if out, _ := exec.Command(s.Runsc, "--root", s.RunscRoot(), "list", "-quiet").Output(); strings.TrimSpace(string(out)) != "" {
		t.Errorf("runsc still lists %q after delete", out)
	}
}

// TestBadInput checks that bad requests get a 4xx that says what to fix,
// and change nothing.
func TestBadInput(t *testing.T) {
	s := StartServer(t)
	ctx := ctxT(t)
	c := s.Client

	for _, tc := range []struct {
		name string
		req  api.CreateSandboxRequest
		want error
		says string
	}{
		{"unknown image", api.CreateSandboxRequest{Image: "nope:1"}, client.ErrNotFound, "warren image pull"},
		{"negative memory", api.CreateSandboxRequest{MemoryMB: ptr(int64(-5))}, client.ErrInvalid, "memory_mb"},
		{"zero cpus", api.CreateSandboxRequest{CPUs: ptr(0.0)}, client.ErrInvalid, "cpus"},
		{"too many cpus", api.CreateSandboxRequest{CPUs: ptr(1000.0)}, client.ErrInvalid, "cpus"},
		{"bad env key", api.CreateSandboxRequest{Env: map[string]string{"A=B": "c"}}, client.ErrInvalid, "env key"},
		{"bad name", api.CreateSandboxRequest{Name: "-x y"}, client.ErrInvalid, "name"},
		{"bad idle", api.CreateSandboxRequest{Idle: &api.IdlePolicy{TimeoutS: 5, Action: "explode"}}, client.ErrInvalid, "idle.action"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.CreateSandbox(ctx, tc.req)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("got %v, want %v saying %q", err, tc.want, tc.says)
			}
		})
	}
	if sbs, _ := c.ListSandboxes(ctx, client.ListOptions{}); len(sbs) != 0 {
		t.Errorf("bad creates left %d sandboxes", len(sbs))
	}

	raw := func(method, path, key, body string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, method, "http://"+s.Addr+path, strings.NewReader(body))
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	key := adminKey(t, s)
	for _, tc := range []struct {
		name, method, path, key, body string
		status                        int
		says                          string
	}{
		{"malformed json", "POST", "/v1/sandboxes", key, `{"image":`, 400, "not valid JSON"},
		{"unknown field", "POST", "/v1/sandboxes", key, `{"imagee":"x"}`, 400, "imagee"},
		{"no key", "GET", "/v1/sandboxes", "", "", 401, "Authorization"},
		{"wrong key", "GET", "/v1/sandboxes", "wk_nope", "", 401, "not recognised"},
		{"unknown sandbox", "GET", "/v1/sandboxes/sb-aaaaaaaaaaaa", key, "", 404, "not found"},
		{"malformed id", "DELETE", "/v1/sandboxes/x", key, "", 404, "not found"},
		{"exec on unknown", "POST", "/v1/sandboxes/sb-aaaaaaaaaaaa/exec", key, `{"cmd":["true"]}`, 404, "not found"},
		{"bad state filter", "GET", "/v1/sandboxes?state=happy", key, "", 400, "state"},
		{"unknown route", "GET", "/v1/nothing", key, "", 404, "no such endpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := raw(tc.method, tc.path, tc.key, tc.body)
			if status != tc.status || !strings.Contains(body, tc.says) || !strings.Contains(body, `"code"`) {
				t.Errorf("got %d %s, want %d with an error saying %q", status, body, tc.status, tc.says)
			}
		})
	}

	// Bad exec requests reach a running sandbox's agent and are refused
	// there, leaving the sandbox as it was.
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		req  api.ExecRequest
		says string
	}{
		{"neither cmd nor command", api.ExecRequest{}, "cmd"},
		{"both", api.ExecRequest{Cmd: []string{"true"}, Command: "true"}, "cmd"},
		{"missing cwd", api.ExecRequest{Cmd: []string{"true"}, Cwd: "/nope"}, "/nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Exec(ctx, sb.ID, tc.req)
			if !errors.Is(err, client.ErrInvalid) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("got %v, want invalid mentioning %q", err, tc.says)
			}
		})
	}
	if _, err := c.ReadFile(ctx, sb.ID, "relative/path"); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("relative path: got %v, want invalid", err)
	}
}

func adminKey(t testing.TB, s *Server) string {
	t.Helper()
	b, err := readFile(s.StateDir + "/admin.key")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestConcurrentCreates creates sandboxes side by side: each gets its own
// address and they don't see each other.
func TestConcurrentCreates(t *testing.T) {
	s := StartServer(t)
	ctx := ctxT(t)
	const n = 4
	ids := make([]string, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := s.Client.CreateSandbox(ctx, api.CreateSandboxRequest{MemoryMB: ptr(int64(128))})
			ids[i], errs[i] = sb.ID, err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	for i, id := range ids {
		marker := fmt.Sprintf("/tmp/mine-%d", i)
		if _, err := s.Client.Exec(ctx, id, api.ExecRequest{Cmd: []string{"touch", marker}}); err != nil {
			t.Fatal(err)
		}
	}
	for i, id := range ids {
		res, err := s.Client.Exec(ctx, id, api.ExecRequest{Command: "ls /tmp | grep -c mine- || true"})
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(res.Stdout) != "1" {
			t.Errorf("sandbox %d sees %q markers, want only its own", i, res.Stdout)
		}
	}
	// A sandbox can reach neither another sandbox's agent nor a service on
	// the host, while the host reaches every agent.
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Write([]byte("HTTP/1.0 200 OK\r\n\r\nhost service\n"))
			conn.Close()
		}
	}()
	hostPort := ln.Addr().(*net.TCPAddr).Port
	ips := make([]netip.Addr, n)
	for i, id := range ids {
		res, err := s.Client.Exec(ctx, id, api.ExecRequest{Command: "hostname -I"})
		if err != nil {
			t.Fatal(err)
		}
		ips[i], err = netip.ParseAddr(strings.Fields(res.Stdout + " x")[0])
		if err != nil || !netip.MustParsePrefix(s.Subnet).Contains(ips[i]) {
			t.Fatalf("sandbox %d's address: got %q, want one in %s", i, res.Stdout, s.Subnet)
		}
	}
	var targets []string
	for i := 1; i < n; i++ {
		targets = append(targets, fmt.Sprintf("http://%s:%d/health", ips[i], api.AgentPort))
	}
	targets = append(targets, fmt.Sprintf("http://%s:%d/", ips[0].Prev(), hostPort))
	for _, u := range targets {
		res, err := s.Client.Exec(ctx, ids[0], api.ExecRequest{Cmd: []string{"curl", "-sS", "-m", "2", u}})
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode == 0 {
			t.Errorf("sandbox 0 reached %s (got %q); want it blocked", u, res.Stdout)
		}
	}
	// The host side, for contrast, reaches sandbox 1's agent directly.
	resp, err := http.Get(fmt.Sprintf("http://%s:%d/health", ips[1], api.AgentPort))
	if err != nil {
		t.Fatalf("host to agent: %v", err)
	}
	resp.Body.Close()
}
