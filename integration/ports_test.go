package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/client"
)

// startPortServer builds testdata/portserver, puts it in sandbox id and
// starts it listening on :8001.
func startPortServer(t *testing.T, c *client.Client, id string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "portserver")
	cmd := exec.Command("go", "build", "-o", bin, "./integration/testdata/portserver")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building portserver: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if _, err := c.WriteFile(ctx, id, "/usr/local/bin/portserver", bytes.NewReader(b), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartJob(ctx, id, api.ExecRequest{Cmd: []string{"/usr/local/bin/portserver", "-listen", ":8001"}}); err != nil {
		t.Fatal(err)
	}
	if !waitFor(30*time.Second, func() bool {
		return sh(t, c, id, "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 8001), 1)'").ExitCode == 0
	}) {
		t.Fatal("portserver did not start listening")
	}
}

// portGet sends a request through the ports proxy with the API key.
func portGet(t *testing.T, s *Server, method, url string) (int, map[string]string, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctxT(t), method, url, nil)
	key, _ := os.ReadFile(filepath.Join(s.StateDir, "admin.key"))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(key)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var got map[string]string
	json.Unmarshal(body, &got)
	return resp.StatusCode, got, string(body)
}

// TestPortsProxy reaches a server inside a sandbox through the daemon,
// over HTTP and WebSocket, also once the sandbox was paused (in memory,
// then stored to disk and restored at a new address).
func TestPortsProxy(t *testing.T) {
	s := StartServerWith(t, map[string]any{"store_after_s": 1, "policy_interval_ms": 100})
	ctx := ctxT(t)
	c := s.Client
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatalf("create: %v\n%s", err, s.Log())
	}
	startPortServer(t, c, sb.ID)
	base := c.PortURL(sb.ID, 8001)
	if want := "http://" + s.Addr + "/v1/sandboxes/" + sb.ID + "/ports/8001/"; base != want {
		t.Errorf("PortURL: got %s, want %s", base, want)
	}

	check := func(label string) {
		t.Helper()
		code, got, body := portGet(t, s, "POST", base+"some/path%2Fx?a=1&b=two")
		if code != 200 || got["path"] != "/some/path/x" || got["query"] != "a=1&b=two" || got["method"] != "POST" {
			t.Errorf("%s: got %d %s", label, code, body)
		}
		if got["authorization"] != "" {
			t.Errorf("%s: the server inside saw the API key's Authorization header", label)
		}
		if got["prefix"] != "/v1/sandboxes/"+sb.ID+"/ports/8001" {
			t.Errorf("%s: X-Forwarded-Prefix %q", label, got["prefix"])
		}
		key, _ := os.ReadFile(filepath.Join(s.StateDir, "admin.key"))
		wsURL := "ws" + strings.TrimPrefix(base, "http") + "ws"
		conn, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{
			HTTPHeader: http.Header{"Authorization": {"Bearer " + strings.TrimSpace(string(key))}}})
		if err != nil {
			t.Errorf("%s: websocket: %v", label, err)
			return
		}
		defer conn.CloseNow()
		for _, msg := range []string{"one", "two"} {
			if err := conn.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
				t.Fatalf("%s: websocket write: %v", label, err)
			}
			_, b, err := conn.Read(ctx)
			if err != nil || string(b) != "echo: "+msg {
				t.Errorf("%s: websocket read: got %q, %v", label, b, err)
			}
		}
		conn.Close(websocket.StatusNormalClosure, "")
	}
	check("running")

	if _, err := c.PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	check("paused in memory")
	if got, _ := c.GetSandbox(ctx, sb.ID); got.State != api.StateRunning {
		t.Errorf("after a request: state %s, want running (resumed)", got.State)
	}

	if _, err := c.PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if !waitFor(30*time.Second, func() bool { return strings.Contains(s.Log(), "paused sandbox stored to disk") }) {
		t.Fatalf("the paused sandbox was not stored:\n%s", s.Log())
	}
	check("paused on disk")

	t.Run("bad input", func(t *testing.T) {
		for _, u := range []string{
			c.BaseURL() + "/v1/sandboxes/" + sb.ID + "/ports/0/",
			c.BaseURL() + "/v1/sandboxes/" + sb.ID + "/ports/65536/",
			c.BaseURL() + "/v1/sandboxes/" + sb.ID + "/ports/http/",
			c.BaseURL() + "/v1/sandboxes/" + sb.ID + "/ports/49982/",
		} {
			if code, _, body := portGet(t, s, "GET", u); code != http.StatusBadRequest {
				t.Errorf("GET %s: got %d %s, want 400", u, code, body)
			}
		}
		if code, _, body := portGet(t, s, "GET", c.PortURL("sb-nonexistent0", 8001)); code != http.StatusNotFound {
			t.Errorf("a missing sandbox: got %d %s, want 404", code, body)
		}
		if code, _, body := portGet(t, s, "GET", c.PortURL(sb.ID, 8002)); code != http.StatusServiceUnavailable || !strings.Contains(body, "nothing answers on port 8002") {
			t.Errorf("a port nothing listens on: got %d %s, want 503", code, body)
		}
		// Without a key: 401, nothing reaches the sandbox.
		resp, err := http.Get(base)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("without a key: got %d, want 401", resp.StatusCode)
		}
	})

	t.Run("cli", func(t *testing.T) {
		key, _ := os.ReadFile(filepath.Join(s.StateDir, "admin.key"))
		out, err := exec.Command(filepath.Join(binDir, "warren"), "--url", "http://"+s.Addr, "--key", strings.TrimSpace(string(key)),
			"port", sb.ID, "8001").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != base {
			t.Errorf("warren port: got %q, %v, want %s", out, err, base)
		}
		out, err = exec.Command(filepath.Join(binDir, "warren"), "--url", "http://"+s.Addr, "--key", strings.TrimSpace(string(key)),
			"port", "sb-nonexistent0", "8001").CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "not found") {
			t.Errorf("warren port of a missing sandbox: got %q, %v, want exit 1 saying not found", out, err)
		}
	})
}
