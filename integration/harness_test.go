// Package integration runs Warren end to end: a real `warren server`
// process, the real runsc and the real built-in Debian image. Nothing here is
// faked. The tests need root; they skip otherwise (scripts/test.sh runs them
// as root, as CI does).
package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/warrenhq/warren/client"
)

// RequiresRoot skips t unless it runs as root.
func RequiresRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: run scripts/test.sh (as root)")
	}
	if testing.Short() {
		t.Skip("integration test; -short given")
	}
}

var (
	repoRoot = func() string {
		_, file, _, _ := runtime.Caller(0)
		return filepath.Dir(filepath.Dir(file))
	}()
	binDir   string
	cacheDir = envOr("WARREN_CACHE_DIR", "/var/cache/warren")
	// subnetSeq gives every server of this test process its own /24, so
	// servers running side by side never hand out the same address.
	subnetSeq atomic.Int32
)

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func TestMain(m *testing.M) {
	code := func() int {
		if os.Geteuid() != 0 {
			return m.Run() // every test skips
		}
		binDir = os.Getenv("WARREN_BIN")
		if binDir == "" {
			dir, err := os.MkdirTemp("", "warren-bin-")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			defer os.RemoveAll(dir)
			binDir = dir
			if err := buildBinaries(dir); err != nil {
				fmt.Fprintln(os.Stderr, "building warren:", err)
				return 1
			}
		}
		return m.Run()
	}()
	os.Exit(code)
}

func buildBinaries(dir string) error {
	for _, b := range []struct{ pkg, out string }{
		{"./cmd/warren", "warren"}, {"./cmd/warren-agent", "warren-agent"},
	} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, b.out), b.pkg)
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v\n%s", b.pkg, err, out)
		}
	}
	return nil
}

func runscPath(t testing.TB) string {
	if p := os.Getenv("WARREN_RUNSC"); p != "" {
		return p
	}
	out, err := exec.Command(filepath.Join(repoRoot, "scripts", "build-runsc.sh")).Output()
	if err != nil {
		t.Fatalf("finding runsc: %v (run scripts/build-runsc.sh)", err)
	}
	return strings.TrimSpace(string(out))
}

// Server is a warren server process started by a test.
type Server struct {
	t        testing.TB
	StateDir string
	Addr     string
	Subnet   string
	Runsc    string
	// Agent is the warren-agent binary Start passes; the one built for
	// the tests unless a test sets another (an upgrade, say).
	Agent   string
	Client  *client.Client
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
}

// StartServer starts a warren server on a fresh state directory, and stops
// it (deleting every sandbox it made) when the test ends.
func StartServer(t testing.TB) *Server {
	t.Helper()
	return StartServerWith(t, nil)
}

// StartServerWith starts a server whose config file holds config (the
// daemon's JSON config fields, like "store_after_s").
func StartServerWith(t testing.TB, config map[string]any) *Server {
	t.Helper()
	RequiresRoot(t)
	stateDir, err := os.MkdirTemp("", "warren-state-")
	if err != nil {
		t.Fatal(err)
	}
	n := subnetSeq.Add(1)
	s := &Server{t: t, StateDir: stateDir, Runsc: runscPath(t), Agent: filepath.Join(binDir, "warren-agent"),
		Subnet: fmt.Sprintf("10.213.%d.0/24", (os.Getpid()*8+int(n))%250)}
	if config == nil {
		config = map[string]any{}
	}
	b, _ := json.Marshal(config)
	if err := os.WriteFile(filepath.Join(stateDir, "config.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() {
		s.deleteAll()
		s.Stop()
		s.assertNoLeftovers()
		os.RemoveAll(stateDir)
	})
	return s
}

// Start starts (or restarts) the server process on its state directory.
func (s *Server) Start() {
	t := s.t
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = ln.Addr().String()
	ln.Close()
	s.logPath = filepath.Join(s.StateDir, "server.log")
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	s.cmd = exec.Command(filepath.Join(binDir, "warren"), "server",
		"--state-dir", s.StateDir, "--listen", s.Addr, "--cache-dir", cacheDir,
		"--runsc", s.Runsc, "--agent", s.Agent,
		"--subnet", s.Subnet, "--log-level", "debug", "--config", filepath.Join(s.StateDir, "config.json"))
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.exited = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); close(done) }(s.cmd, s.exited)

	// The first start on a fresh machine builds the Debian image.
	deadline := time.Now().Add(15 * time.Minute)
	c := client.New("http://"+s.Addr, "")
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Health(ctx)
		cancel()
		if err == nil {
			break
		}
		select {
		case <-s.exited:
			t.Fatalf("warren server exited before it was ready:\n%s", s.Log())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("warren server not ready after 15m:\n%s", s.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	key, err := os.ReadFile(filepath.Join(s.StateDir, "admin.key"))
	if err != nil {
		t.Fatalf("reading the admin key: %v", err)
	}
	s.Client = client.New("http://"+s.Addr, strings.TrimSpace(string(key)))
}

// Stop stops the server gracefully (SIGTERM), as an operator would.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
		s.t.Errorf("warren server did not stop within 30s of SIGTERM")
	}
	s.cmd = nil
}

// Kill kills the server with SIGKILL, as a crash would.
func (s *Server) Kill() {
	s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// Log returns the server's log so far.
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.logPath)
	return string(b)
}

// RunscRoot is the runsc root directory of the server's sandboxes.
func (s *Server) RunscRoot() string { return filepath.Join(s.StateDir, "runsc") }

func (s *Server) deleteAll() {
	if s.cmd == nil {
		s.Start()
	}
	ctx := context.Background()
	// Deleting a template removes its warm pool.
	if ts, err := s.Client.ListTemplates(ctx); err == nil {
		for _, tpl := range ts {
			if err := s.Client.DeleteTemplate(ctx, tpl.Name); err != nil {
				s.t.Errorf("deleting template %s: %v", tpl.Name, err)
			}
		}
	}
	sbs, err := s.Client.ListSandboxes(ctx, client.ListOptions{})
	if err != nil {
		s.t.Errorf("listing sandboxes to clean up: %v", err)
		return
	}
	for _, sb := range sbs {
		if err := s.Client.DeleteSandbox(ctx, sb.ID); err != nil {
			s.t.Errorf("deleting sandbox %s: %v", sb.ID, err)
		}
	}
}

// assertNoLeftovers checks that no runsc process, network namespace, veth
// or cgroup of this server's sandboxes remains.
func (s *Server) assertNoLeftovers() {
	t := s.t
	t.Helper()
	// runsc processes of this server carry its root directory in argv.
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if strings.Contains(string(b), s.RunscRoot()) {
			t.Errorf("runsc process left behind: %s: %s", p, strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	if left := s.Containers(); len(left) != 0 {
		t.Errorf("runsc containers left behind: %v", left)
	}
	if b, _ := os.ReadFile("/proc/mounts"); strings.Contains(string(b), s.StateDir) {
		t.Errorf("mounts left behind under %s", s.StateDir)
	}
	entries, _ := os.ReadDir(filepath.Join(s.StateDir, "sandboxes"))
	for _, e := range entries {
		t.Errorf("sandbox directory left behind: %s", e.Name())
	}
	for _, id := range s.knownIDs() {
		for _, dir := range []string{"/run/warren/netns", "/var/run/netns"} {
			if _, err := os.Stat(filepath.Join(dir, "warren-"+id)); err == nil {
				t.Errorf("network namespace left behind: %s/warren-%s", dir, id)
			}
		}
		if _, err := net.InterfaceByName("wv-" + id[3:]); err == nil {
			t.Errorf("veth left behind: wv-%s", id[3:])
		}
		if dirs, _ := filepath.Glob("/sys/fs/cgroup/*/warren/" + id); len(dirs) > 0 {
			t.Errorf("cgroups left behind: %v", dirs)
		}
	}
}

// knownIDs reads every sandbox id the server ever logged.
func (s *Server) knownIDs() []string {
	f, err := os.Open(s.logPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	seen := map[string]bool{}
	var ids []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, key := range []string{"sandbox_id=", "runtime_id="} {
			if i := strings.Index(line, key); i >= 0 {
				id := line[i+len(key):]
				if len(id) >= 15 {
					id = id[:15]
					if !seen[id] {
						seen[id] = true
						ids = append(ids, id)
					}
				}
			}
		}
	}
	return ids
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func readFile(p string) ([]byte, error) { return os.ReadFile(p) }

// RuntimeID returns the runsc container id of sandbox id's current
// instance, as the server last logged it.
func (s *Server) RuntimeID(id string) string {
	rid := ""
	for _, line := range strings.Split(s.Log(), "\n") {
		if strings.Contains(line, "sandbox_id="+id) {
			if i := strings.Index(line, "runtime_id="); i >= 0 && len(line) >= i+len("runtime_id=")+15 {
				rid = line[i+len("runtime_id=") : i+len("runtime_id=")+15]
			}
		}
	}
	if rid == "" {
		s.t.Fatalf("no runtime id logged for sandbox %s", id)
	}
	return rid
}

// WaitStored waits until the runsc container of runtime rid is gone: its
// paused sandbox has been checkpointed to disk (store_after_s) and freed.
func (s *Server) WaitStored(rid string) {
	s.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, ok := s.Containers()[rid]; !ok {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("paused sandbox (runtime %s) still in memory after 2 minutes\n%s", rid, s.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Containers lists the runsc containers of this server with their status:
// "paused" for one frozen by the cgroup freezer (runsc can't be asked about
// those: it would wait for the sandbox to answer), else what runsc state
// says.
func (s *Server) Containers() map[string]string {
	files, _ := filepath.Glob(filepath.Join(s.RunscRoot(), "*_sandbox:*.state"))
	m := map[string]string{}
	for _, f := range files {
		_, id, ok := strings.Cut(strings.TrimSuffix(filepath.Base(f), ".state"), "_sandbox:")
		if !ok {
			continue
		}
		if b, err := os.ReadFile("/sys/fs/cgroup/freezer/warren/" + id + "/freezer.state"); err == nil && strings.TrimSpace(string(b)) == "FROZEN" {
			m[id] = "paused"
			continue
		}
		out, err := exec.Command(s.Runsc, "--root", s.RunscRoot(), "state", id).Output()
		if err != nil {
			continue // deleted meanwhile
		}
		var st struct {
			Status string `json:"status"`
		}
		json.Unmarshal(out, &st)
		m[id] = st.Status
	}
	return m
}
