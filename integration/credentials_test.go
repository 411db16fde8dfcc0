package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/client"
)

// gitServer serves the bare repositories under a fresh directory over
// HTTP on loopback, through git http-backend, to user with secret only.
// It returns its URL and the directory.
func gitServer(t *testing.T, user, secret string) (string, string) {
	t.Helper()
	backend, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Skipf("git: %v", err)
	}
	root := t.TempDir()
	h := &cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(backend)), "git-http-backend"),
		Root: "/",
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"},
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != secret {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "who are you?", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String() + "/", root
}

// git runs git on the host.
func hostGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t",
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_SYSTEM=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// findIn reports the files under root whose bytes contain needle.
func findIn(t *testing.T, root string, needle []byte) []string {
	t.Helper()
	var hits []string
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil || !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return nil
		}
		defer f.Close()
		// Read in chunks that overlap by len(needle), so a needle across
		// two chunks is found.
		buf := make([]byte, 4<<20)
		var carry []byte
		for {
			n, err := f.Read(buf)
			chunk := append(carry, buf[:n]...)
			if bytes.Contains(chunk, needle) {
				hits = append(hits, p)
				return nil
			}
			if len(chunk) >= len(needle) {
				carry = append([]byte(nil), chunk[len(chunk)-len(needle)+1:]...)
			}
			if err != nil {
				return nil
			}
		}
	})
	return hits
}

// sandboxFiles lists the regular files the gVisor process of sandbox id
// holds open, as /proc/PID/fd/N paths.
func sandboxFiles(t *testing.T, s *Server, id string) []string {
	t.Helper()
	out, err := exec.Command(s.Runsc, "--root", s.RunscRoot(), "state", s.RuntimeID(id)).Output()
	if err != nil {
		t.Fatalf("runsc state: %v", err)
	}
	var st struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal(out, &st); err != nil || st.Pid <= 0 {
		t.Fatalf("runsc state: %v %s", err, out)
	}
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", st.Pid))
	var files []string
	for _, fd := range fds {
		if fi, err := os.Stat(fd); err == nil && fi.Mode().IsRegular() && fi.Size() > 0 {
			files = append(files, fd)
		}
	}
	return files
}

// findInFiles reports which of files contain needle, reading only their
// data (not the holes of sparse files).
func findInFiles(files []string, needle []byte) []string {
	var hits []string
	for _, p := range files {
		if fileContains(p, needle) {
			hits = append(hits, p)
		}
	}
	return hits
}

func fileContains(p string, needle []byte) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	const chunk = 4 << 20
	buf := make([]byte, chunk+len(needle))
	for off := int64(0); off < fi.Size(); {
		data, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
		if err != nil {
			return false // no data past off
		}
		hole, err := unix.Seek(int(f.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			hole = fi.Size()
		}
		for pos := data; pos < hole; pos += chunk {
			n, _ := f.ReadAt(buf[:min(int64(len(buf)), hole-pos)], pos)
			if bytes.Contains(buf[:n], needle) {
				return true
			}
		}
		off = hole
	}
	return false
}

// TestCredentialsGit: git clone and push through the credential proxy
// with the credential, and not without it nor after it is revoked; then the
// secret is nowhere in the sandbox's disk, processes' environments or
// memory, nor in a snapshot; other teams cannot see or use it.
func TestCredentialsGit(t *testing.T) {
	RequiresRoot(t)
	keepForwarding(t) // a sandbox below has egress open
	secret := "wsecret-" + randHex(20)
	gitURL, root := gitServer(t, "alice", secret)
	s := StartServer(t)
	ctx := ctxT(t)
	c := s.Client

	// A repository with one commit.
	work := t.TempDir()
	hostGit(t, root, "init", "-q", "--bare", "-b", "main", "repo.git")
	hostGit(t, filepath.Join(root, "repo.git"), "config", "http.receivepack", "true")
	hostGit(t, work, "init", "-q", "-b", "main", ".")
	os.WriteFile(filepath.Join(work, "README"), []byte("hello from the host\n"), 0o644)
	hostGit(t, work, "add", "README")
	hostGit(t, work, "commit", "-q", "-m", "first")
	hostGit(t, work, "push", "-q", filepath.Join(root, "repo.git"), "main")
	repoURL := gitURL + "repo.git"

	cred, err := c.CreateCredential(ctx, api.CreateCredentialRequest{Name: "lab", URL: gitURL, Username: "alice", Secret: secret})
	if err != nil {
		t.Fatalf("create credential: %v\n%s", err, s.Log())
	}
	if cred.URL != gitURL || cred.Name != "lab" {
		t.Errorf("credential: got %+v", cred)
	}
	// No call returns the secret.
	key, _ := os.ReadFile(filepath.Join(s.StateDir, "admin.key"))
	for _, path := range []string{"/v1/credentials", "/v1/credentials/lab"} {
		req, _ := http.NewRequest("GET", "http://"+s.Addr+path, nil)
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(key)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || bytes.Contains(b, []byte(secret)) || !bytes.Contains(b, []byte(gitURL)) {
			t.Errorf("GET %s: got %d %s", path, resp.StatusCode, b)
		}
	}

	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{GitCredentials: []string{"lab"}})
	if err != nil {
		t.Fatalf("create with a credential: %v\n%s", err, s.Log())
	}
	if len(sb.Network.GitCredentials) != 1 || sb.Network.GitCredentials[0] != "lab" || sb.Network.Egress != "none" {
		t.Errorf("network: got %+v", sb.Network)
	}
	gitEnv := "export GIT_TERMINAL_PROMPT=0 GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@a GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@a; "
	mustSh(t, c, sb.ID, gitEnv+"git clone -q "+repoURL+" /root/repo")
	if got := mustSh(t, c, sb.ID, "cat /root/repo/README"); got != "hello from the host\n" {
		t.Errorf("cloned README: got %q", got)
	}
	mustSh(t, c, sb.ID, gitEnv+"cd /root/repo && echo from the sandbox > NEW && git add NEW && git commit -q -m second && git push -q origin main")
	if log := hostGit(t, filepath.Join(root, "repo.git"), "log", "--format=%s", "main"); log != "second\nfirst\n" {
		t.Errorf("the host repository's log after the push: got %q", log)
	}
	// The clone remembers the URL it was given, not the proxy's, and no
	// secret.
	if got := mustSh(t, c, sb.ID, "cd /root/repo && git config remote.origin.url"); strings.TrimSpace(got) != repoURL {
		t.Errorf("origin: got %q, want %s", got, repoURL)
	}

	// The search must find what is there: a marker in a file, in a
	// process's environment and in memory.
	marker := "wmarker-" + randHex(20)
	mustSh(t, c, sb.ID, "echo "+marker+" > /root/marker")
	if _, err := c.StartJob(ctx, sb.ID, api.ExecRequest{Command: "sleep 600", Env: map[string]string{"MARKER": marker}}); err != nil {
		t.Fatal(err)
	}

	sn, err := c.SnapshotSandbox(ctx, sb.ID, "")
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	t.Run("secret nowhere", func(t *testing.T) {
		envs := mustSh(t, c, sb.ID, "cat /proc/[0-9]*/environ | tr '\\0' '\\n'")
		if !strings.Contains(envs, marker) {
			t.Errorf("the environments read (%d bytes) lack the marker: the search is broken", len(envs))
		}
		if strings.Contains(envs, secret) {
			t.Errorf("the secret is in a process's environment")
		}
		snapDir := filepath.Join(s.StateDir, "snapshots", sn.ID)
		if hits := findIn(t, snapDir, []byte(marker)); len(hits) == 0 {
			t.Errorf("the snapshot's files lack the marker: the search is broken")
		}
		if hits := findIn(t, snapDir, []byte(secret)); len(hits) > 0 {
			t.Errorf("the secret is in the snapshot: %v", hits)
		}
		// The running sandbox: every file its gVisor process holds open,
		// which is its writable layer (an unlinked file) and its memory.
		// The image under the writable layer is read-only and shared.
		open := sandboxFiles(t, s, sb.ID)
		if hits := findInFiles(open, []byte(marker)); len(hits) < 2 {
			t.Errorf("the marker is in %v of the sandbox's open files %v; want its disk and memory: the search is broken", hits, open)
		}
		if hits := findInFiles(open, []byte(secret)); len(hits) > 0 {
			t.Errorf("the secret is in the running sandbox: %v", hits)
		}
		// And the sandbox's directory on the host.
		sbDir := filepath.Join(s.StateDir, "sandboxes", sb.ID)
		if hits := findIn(t, sbDir, []byte(secret)); len(hits) > 0 {
			t.Errorf("the secret is in the sandbox's directory: %v", hits)
		}
		if got := mustSh(t, c, sb.ID, "grep -c 169.254.64.1/lab/ /etc/gitconfig"); strings.TrimSpace(got) != "1" {
			t.Errorf("/etc/gitconfig does not route the credential's URL through the proxy")
		}
	})

	t.Run("without it", func(t *testing.T) {
		other, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Network: &api.Network{Egress: "open"}})
		if err != nil {
			t.Fatal(err)
		}
		if res := sh(t, c, other.ID, gitEnv+"git clone -q "+repoURL+" /root/repo"); res.ExitCode == 0 {
			t.Errorf("a sandbox without the credential cloned it")
		}
		// Straight at the proxy, naming a credential it was not given.
		if res := sh(t, c, other.ID, "curl -s -o /dev/null -w '%{http_code}' http://169.254.64.1/lab/repo.git/info/refs"); res.Stdout != "403" {
			t.Errorf("the proxy without a grant: got %q, want 403", res.Stdout)
		}
		// warren git clone --credential grants it and clones.
		out, err := exec.Command(filepath.Join(binDir, "warren"), "--url", "http://"+s.Addr, "--key", strings.TrimSpace(string(key)),
			"git", "clone", other.ID, repoURL, "/root/viacli", "--credential", "lab").CombinedOutput()
		if err != nil {
			t.Fatalf("warren git clone: %v\n%s", err, out)
		}
		if got := mustSh(t, c, other.ID, "cat /root/viacli/NEW"); got != "from the sandbox\n" {
			t.Errorf("cloned through the CLI: got %q", got)
		}
		// Taking it away ends its use.
		none := []string{}
		if _, err := c.SetNetwork(ctx, other.ID, api.NetworkPatch{GitCredentials: &none}); err != nil {
			t.Fatal(err)
		}
		if res := sh(t, c, other.ID, gitEnv+"cd /root/viacli && git fetch -q"); res.ExitCode == 0 {
			t.Errorf("fetch after the credential was taken away succeeded")
		}
	})

	t.Run("another team", func(t *testing.T) {
		k, err := c.CreateKey(ctx, "team-cred", "")
		if err != nil {
			t.Fatal(err)
		}
		other := client.New("http://"+s.Addr, k.Secret)
		if crs, err := other.ListCredentials(ctx); err != nil || len(crs) != 0 {
			t.Errorf("another team lists %v, %v; want none", crs, err)
		}
		if _, err := other.CreateSandbox(ctx, api.CreateSandboxRequest{GitCredentials: []string{"lab"}}); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("another team using it: got %v, want not_found", err)
		}
		if err := other.DeleteCredential(ctx, "lab"); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("another team deleting it: got %v, want not_found", err)
		}
		if sbs, _ := other.ListSandboxes(ctx, client.ListOptions{}); len(sbs) != 0 {
			t.Errorf("a refused create left %d sandboxes", len(sbs))
		}
	})

	t.Run("bad input", func(t *testing.T) {
		for _, req := range []api.CreateCredentialRequest{
			{Name: "x", URL: "ftp://h/", Secret: "s"}, {Name: "x", URL: gitURL}, {Name: "", URL: gitURL, Secret: "s"},
			{Name: "x", URL: "http://u:p@h/", Secret: "s"}, {Name: "lab", URL: gitURL, Secret: "s"},
		} {
			_, err := c.CreateCredential(ctx, req)
			var ce *client.Error
			if !errors.As(err, &ce) || ce.Status/100 != 4 {
				t.Errorf("create credential %+v: got %v, want a 4xx", req, err)
			}
		}
		if _, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{GitCredentials: []string{"nope"}}); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("create with a missing credential: got %v, want not_found", err)
		}
		bad := []string{"a/b"}
		if _, err := c.SetNetwork(ctx, sb.ID, api.NetworkPatch{GitCredentials: &bad}); !errors.Is(err, client.ErrInvalid) {
			t.Errorf("PATCH a bad credential name: got %v, want invalid", err)
		}
	})

	t.Run("revoked", func(t *testing.T) {
		if err := c.DeleteCredential(ctx, "lab"); err != nil {
			t.Fatal(err)
		}
		res := sh(t, c, sb.ID, gitEnv+"cd /root/repo && git fetch -q")
		if res.ExitCode == 0 {
			t.Errorf("fetch after the credential was revoked succeeded")
		}
		if crs, _ := c.ListCredentials(ctx); len(crs) != 0 {
			t.Errorf("credentials after revoke: %+v", crs)
		}
	})
}
