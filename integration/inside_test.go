package integration

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/client"
)

// What runs inside a sandbox, end to end: named shells, background jobs,
// code contexts, the terminal and archives, through the real daemon to the
// agent in a real gVisor sandbox, and across pause, resume, fork and a
// restart of the daemon.

func newSandbox(t *testing.T, s *Server) api.Sandbox {
	t.Helper()
	sb, err := s.Client.CreateSandbox(ctxT(t), api.CreateSandboxRequest{MemoryMB: ptr(int64(512))})
	if err != nil {
		t.Fatalf("create: %v\n%s", err, s.Log())
	}
	return sb
}

func inShell(t *testing.T, c *client.Client, id, shell, command string) api.ExecResult {
	t.Helper()
	res, err := c.Exec(ctxT(t), id, api.ExecRequest{Shell: shell, Command: command})
	if err != nil {
		t.Fatalf("exec %q in shell %s of %s: %v", command, shell, id, err)
	}
	return res
}

func TestInsideShell(t *testing.T) {
	s := StartServer(t)
	c := s.Client
	ctx := ctxT(t)
	sb := newSandbox(t, s)
	if _, err := c.CreateShell(ctx, sb.ID, api.CreateShellRequest{Name: "main", Env: map[string]string{"WHO": "main"}}); err != nil {
		t.Fatal(err)
	}
	// Three calls: cwd, exported variable, function and a background job
	// carry over; each call has its own exit code.
	steps := []struct {
		command  string
		wantExit int
		wantOut  string
	}{
		{"cd /tmp; export A=1; f() { echo fn-$1; }; sleep 300 & echo started; cd /srv; false", 1, "started\n"},
		{"pwd; echo $A $WHO; f x; jobs | grep -c 'sleep 300'", 0, "/srv\n1 main\nfn-x\n1\n"},
		{"cd /nonexistent", 1, ""},
	}
	for i, st := range steps {
		if res := inShell(t, c, sb.ID, "main", st.command); res.ExitCode != st.wantExit || res.Stdout != st.wantOut {
			t.Errorf("call %d %q: got exit %d stdout %q stderr %q, want exit %d stdout %q",
				i+1, st.command, res.ExitCode, res.Stdout, res.Stderr, st.wantExit, st.wantOut)
		}
	}
	inShell(t, c, sb.ID, "main", "cd /tmp")

	// A timeout interrupts the command, not the shell.
	start := time.Now()
	res, err := c.Exec(ctx, sb.ID, api.ExecRequest{Shell: "main", Command: "while true; do sleep 1; done", TimeoutS: 0.5})
	if err != nil || !res.TimedOut || res.ExitCode != 124 {
		t.Errorf("timeout: got %+v, %v; want timed out, 124", res, err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("timeout took %v", d)
	}
	if res := inShell(t, c, sb.ID, "main", "pwd; echo $A; f y"); res.Stdout != "/tmp\n1\nfn-y\n" {
		t.Errorf("after the timeout: got %q, want the shell's state kept", res.Stdout)
	}

	// Streaming through the daemon.
	var out strings.Builder
	code, err := c.ExecStream(ctx, sb.ID, api.ExecRequest{Shell: "main", Command: "echo one; sleep 0.2; echo two; (exit 4)"},
		func(ev api.ExecEvent) error {
			if ev.Stdout != nil {
				out.WriteString(*ev.Stdout)
			}
			return nil
		})
	if err != nil || code != 4 || out.String() != "one\ntwo\n" {
		t.Errorf("stream: got %d %q %v", code, out.String(), err)
	}

	// Across pause and resume.
	if _, err := c.PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ResumeSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if res := inShell(t, c, sb.ID, "main", "pwd; echo $A; f z; jobs | grep -c 'sleep 300'"); res.Stdout != "/tmp\n1\nfn-z\n1\n" {
		t.Errorf("after pause and resume: got %q (stderr %q)", res.Stdout, res.Stderr)
	}

	// In a fork: the same shell, its own from then on.
	forks, err := c.ForkSandbox(ctx, sb.ID, 1)
	if err != nil {
		t.Fatalf("fork: %v\n%s", err, s.Log())
	}
	fork := forks[0].ID
	if res := inShell(t, c, fork, "main", "pwd; echo $A; f fork; export A=changed-in-fork"); res.Stdout != "/tmp\n1\nfn-fork\n" {
		t.Errorf("in the fork: got %q (stderr %q)", res.Stdout, res.Stderr)
	}
	if res := inShell(t, c, sb.ID, "main", "echo $A"); res.Stdout != "1\n" {
		t.Errorf("the parent after the fork changed its copy: got %q", res.Stdout)
	}

	// Several shells; listing; deleting; bad input.
	if _, err := c.CreateShell(ctx, sb.ID, api.CreateShellRequest{Name: "other", Cwd: "/etc"}); err != nil {
		t.Fatal(err)
	}
	if res := inShell(t, c, sb.ID, "other", "pwd; echo ${A-unset}"); res.Stdout != "/etc\nunset\n" {
		t.Errorf("other shell: got %q", res.Stdout)
	}
	shells, err := c.ListShells(ctx, sb.ID)
	if err != nil || len(shells) != 2 || shells[0].Name != "main" || shells[1].Name != "other" {
		t.Errorf("list: got %+v, %v", shells, err)
	}
	if err := c.DeleteShell(ctx, sb.ID, "other"); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"exec in a deleted shell": func() error {
			_, err := c.Exec(ctx, sb.ID, api.ExecRequest{Shell: "other", Command: "true"})
			return err
		}(),
		"delete an unknown shell": c.DeleteShell(ctx, sb.ID, "nope"),
	} {
		if !errors.Is(err, client.ErrNotFound) {
			t.Errorf("%s: got %v, want not found", name, err)
		}
	}
	if _, err := c.CreateShell(ctx, sb.ID, api.CreateShellRequest{Name: "main"}); !errors.Is(err, client.ErrConflict) {
		t.Errorf("a second shell named main: got %v, want conflict", err)
	}
}

// waitJobEnd polls a job until it ends.
func waitJobEnd(t *testing.T, c *client.Client, id, job string, within time.Duration) api.Job {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		j, err := c.GetJob(ctxT(t), id, job)
		if err != nil {
			t.Fatalf("job %s: %v", job, err)
		}
		if j.State != api.JobRunning {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still running after %v: %+v", job, within, j)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func jobOutput(t *testing.T, c *client.Client, id, job string, opts client.OutputOptions) (string, int64) {
	t.Helper()
	rc, from, err := c.JobOutput(ctxT(t), id, job, opts)
	if err != nil {
		t.Fatalf("output of %s: %v", job, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading the output of %s: %v", job, err)
	}
	return string(b), from
}

func TestInsideJobs(t *testing.T) {
	s := StartServer(t)
	c := s.Client
	ctx := ctxT(t)
	sb := newSandbox(t, s)

	// A job outlives the client that started it: a client that goes away
	// at once.
	gone := client.New(c.BaseURL(), adminKey(t, s))
	j, err := gone.StartJob(ctx, sb.ID, api.ExecRequest{Command: "for i in 1 2 3; do echo line $i; sleep 0.3; done; printf 'bin\\000\\377'; echo oops >&2; exit 3"})
	if err != nil {
		t.Fatal(err)
	}
	if j.State != api.JobRunning || !strings.HasPrefix(j.ID, "job-") || len(j.ID) != 12 {
		t.Errorf("started: got %+v", j)
	}
	// Follow from the start, then the exit status.
	out, _ := jobOutput(t, c, sb.ID, j.ID, client.OutputOptions{Follow: true})
	if want := "line 1\nline 2\nline 3\nbin\x00\xff"; out != want {
		t.Errorf("follow: got %q, want %q (bytes intact)", out, want)
	}
	j = waitJobEnd(t, c, sb.ID, j.ID, 30*time.Second)
	if j.State != api.JobExited || j.ExitCode == nil || *j.ExitCode != 3 || j.StdoutBytes != 26 {
		t.Errorf("ended: got %+v, want exited 3 with 26 bytes of stdout", j)
	}
	if out, from := jobOutput(t, c, sb.ID, j.ID, client.OutputOptions{Offset: 7}); out != "line 2\nline 3\nbin\x00\xff" || from != 7 {
		t.Errorf("from offset 7: got %q from %d", out, from)
	}
	if out, _ := jobOutput(t, c, sb.ID, j.ID, client.OutputOptions{Stream: "stderr"}); out != "oops\n" {
		t.Errorf("stderr: got %q", out)
	}

	// stdin, then kill.
	cat, err := c.StartJob(ctx, sb.ID, api.ExecRequest{Cmd: []string{"cat"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteJobStdin(ctx, sb.ID, cat.ID, strings.NewReader("to cat\n"), true); err != nil {
		t.Fatal(err)
	}
	if cat = waitJobEnd(t, c, sb.ID, cat.ID, 30*time.Second); *cat.ExitCode != 0 {
		t.Errorf("cat: got %+v", cat)
	}
	if out, _ := jobOutput(t, c, sb.ID, cat.ID, client.OutputOptions{}); out != "to cat\n" {
		t.Errorf("cat's output: got %q", out)
	}
	sleeper, err := c.StartJob(ctx, sb.ID, api.ExecRequest{Command: "sleep 1000"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.KillJob(ctx, sb.ID, sleeper.ID, "KILL"); err != nil {
		t.Fatal(err)
	}
	if sleeper = waitJobEnd(t, c, sb.ID, sleeper.ID, 30*time.Second); sleeper.State != api.JobKilled || sleeper.Signal != "SIGKILL" {
		t.Errorf("killed: got %+v", sleeper)
	}

	// 100 MB of output: the agent stays up, and the job keeps its last bytes.
	flood, err := c.StartJob(ctx, sb.ID, api.ExecRequest{Command: "yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c 100000000; echo; echo the-end"})
	if err != nil {
		t.Fatal(err)
	}
	flood = waitJobEnd(t, c, sb.ID, flood.ID, 3*time.Minute)
	if flood.StdoutBytes != 100000009 || flood.StdoutDropped == 0 || *flood.ExitCode != 0 {
		t.Errorf("flood: got %+v, want 100000009 bytes, the first ones dropped", flood)
	}
	tail, from := jobOutput(t, c, sb.ID, flood.ID, client.OutputOptions{Offset: flood.StdoutBytes - 8})
	if tail != "the-end\n" || from != flood.StdoutBytes-8 {
		t.Errorf("the flood's last bytes: got %q from %d", tail, from)
	}
	if res, err := c.Exec(ctx, sb.ID, api.ExecRequest{Command: "du -sm /var/lib/warren-agent/jobs/" + flood.ID + " | cut -f1"}); err != nil || res.ExitCode != 0 {
		t.Errorf("after the flood the agent does not answer: %+v, %v", res, err)
	} else if mb, _ := strconv.Atoi(strings.TrimSpace(res.Stdout)); mb < 32 || mb > 65 {
		t.Errorf("the flood keeps %s MB on disk, want 32 to 64", strings.TrimSpace(res.Stdout))
	}

	// A job started before a pause, a resume and a restart of the daemon
	// finishes, and its output and status are read after.
	later, err := c.StartJob(ctx, sb.ID, api.ExecRequest{Command: "echo before; sleep 4; echo after; exit 7"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ResumeSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	s.Start()
	c = s.Client
	later = waitJobEnd(t, c, sb.ID, later.ID, time.Minute)
	if *later.ExitCode != 7 {
		t.Errorf("after the restart: got %+v, want exit 7", later)
	}
	if out, _ := jobOutput(t, c, sb.ID, later.ID, client.OutputOptions{}); out != "before\nafter\n" {
		t.Errorf("after the restart: got %q", out)
	}
	list, err := c.ListJobs(ctx, sb.ID)
	if err != nil || len(list) != 5 {
		t.Errorf("list: got %d jobs, %v; want 5", len(list), err)
	}

	for name, err := range map[string]error{
		"get":    func() error { _, err := c.GetJob(ctx, sb.ID, "job-nosuch00"); return err }(),
		"output": func() error { _, _, err := c.JobOutput(ctx, sb.ID, "job-nosuch00", client.OutputOptions{}); return err }(),
		"kill":   func() error { _, err := c.KillJob(ctx, sb.ID, "job-nosuch00", ""); return err }(),
		"stdin":  func() error { _, err := c.WriteJobStdin(ctx, sb.ID, "job-nosuch00", nil, true); return err }(),
	} {
		if !errors.Is(err, client.ErrNotFound) {
			t.Errorf("unknown job, %s: got %v, want not found", name, err)
		}
	}
}

func runCode(t *testing.T, c *client.Client, id string, req api.CodeRequest) api.CodeResult {
	t.Helper()
	res, err := c.RunCode(ctxT(t), id, req)
	if err != nil {
		t.Fatalf("code %q in %s: %v", req.Code, id, err)
	}
	return res
}

func TestInsideCode(t *testing.T) {
	s := StartServer(t)
	c := s.Client
	ctx := ctxT(t)
	sb := newSandbox(t, s)

	if res := runCode(t, c, sb.ID, api.CodeRequest{Code: "import os\nx = 41\nprint('set')"}); res.Stdout != "set\n" || res.Error != nil {
		t.Errorf("set: got %+v", res)
	}
	if res := runCode(t, c, sb.ID, api.CodeRequest{Code: "x + 1"}); res.Result != "42" {
		t.Errorf("last expression: got %+v", res)
	}
	res := runCode(t, c, sb.ID, api.CodeRequest{Code: "def f():\n    return 1 / 0\nf()"})
	if res.Error == nil || res.Error.Name != "ZeroDivisionError" || !strings.Contains(res.Error.Traceback, "in f") {
		t.Errorf("exception: got %+v", res)
	}
	res = runCode(t, c, sb.ID, api.CodeRequest{Code: "def (:"})
	if res.Error == nil || res.Error.Name != "SyntaxError" {
		t.Errorf("syntax error: got %+v, want an error result", res)
	}
	res = runCode(t, c, sb.ID, api.CodeRequest{Code: "n = 0\nwhile True:\n    n += 1", TimeoutS: 1})
	if !res.TimedOut || res.Error == nil || res.Error.Name != "KeyboardInterrupt" {
		t.Errorf("timeout: got %+v", res)
	}
	if res := runCode(t, c, sb.ID, api.CodeRequest{Code: "x, n > 0"}); res.Result != "(41, True)" {
		t.Errorf("after the exception and the interrupt: got %+v, want the variables kept", res)
	}

	// Across pause and resume, and into a fork that then goes its own way.
	if _, err := c.PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ResumeSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if res := runCode(t, c, sb.ID, api.CodeRequest{Code: "x"}); res.Result != "41" {
		t.Errorf("after pause and resume: got %+v", res)
	}
	forks, err := c.ForkSandbox(ctx, sb.ID, 1)
	if err != nil {
		t.Fatalf("fork: %v\n%s", err, s.Log())
	}
	if res := runCode(t, c, forks[0].ID, api.CodeRequest{Code: "x += 100\nx"}); res.Result != "141" {
		t.Errorf("in the fork: got %+v", res)
	}
	if res := runCode(t, c, sb.ID, api.CodeRequest{Code: "x"}); res.Result != "41" {
		t.Errorf("the parent after the fork changed its copy: got %+v", res)
	}

	// Contexts.
	if _, err := c.CreateContext(ctx, sb.ID, api.CreateContextRequest{Name: "other"}); err != nil {
		t.Fatal(err)
	}
	if res := runCode(t, c, sb.ID, api.CodeRequest{Code: "'x' in dir()", Context: "other"}); res.Result != "False" {
		t.Errorf("other context: got %+v", res)
	}
	if _, err := c.RestartContext(ctx, sb.ID, "default"); err != nil {
		t.Fatal(err)
	}
	if res := runCode(t, c, sb.ID, api.CodeRequest{Code: "'x' in dir()"}); res.Result != "False" {
		t.Errorf("after restart: got %+v", res)
	}
	ccs, err := c.ListContexts(ctx, sb.ID)
	if err != nil || len(ccs) != 2 {
		t.Errorf("list: got %+v, %v", ccs, err)
	}
	if err := c.DeleteContext(ctx, sb.ID, "other"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RunCode(ctx, sb.ID, api.CodeRequest{Code: "1", Context: "other"}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("deleted context: got %v, want not found", err)
	}
	if _, err := c.RunCode(ctx, sb.ID, api.CodeRequest{Code: "1", Language: "ruby"}); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("ruby: got %v, want invalid", err)
	}
}

func TestInsideTerminal(t *testing.T) {
	s := StartServer(t)
	c := s.Client
	sb := newSandbox(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	term, err := c.OpenTerminal(ctx, sb.ID, 100, 30)
	if err != nil {
		t.Fatalf("open: %v\n%s", err, s.Log())
	}
	if _, err := term.Write([]byte("stty size; tty; echo hi; exit 7\n")); err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(term)
	if err != nil {
		t.Fatalf("reading: %v (got %q)", err, out)
	}
	code, ok := term.ExitCode()
	if !ok || code != 7 {
		t.Errorf("exit code: got %d, %v; want 7", code, ok)
	}
	for _, want := range []string{"30 100\r\n", "/dev/pts/", "hi\r\n"} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("output %q lacks %q", out, want)
		}
	}

	// The CLI: stdin piped in, the shell's exit code out.
	cmd := exec.Command(filepath.Join(binDir, "warren"), "--url", c.BaseURL(), "--key", adminKey(t, s), "shell", sb.ID)
	cmd.Stdin = strings.NewReader("echo from-cli; exit 5\n")
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 5 || !strings.Contains(stdout.String(), "from-cli") {
		t.Errorf("warren shell: got %v, output %q; want exit 5 and the echo", err, stdout.String())
	}
	// A hung-up terminal leaves no shell behind.
	term, err = c.OpenTerminal(ctx, sb.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	term.Write([]byte("sleep 1000 &\n"))
	time.Sleep(500 * time.Millisecond)
	term.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := c.Exec(ctx, sb.ID, api.ExecRequest{Command: "ps -eo args | grep -c '^sleep 1000' || true"})
		if err == nil && strings.TrimSpace(res.Stdout) == "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("after a hang-up: %+v, %v; want the terminal's processes gone", res, err)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestInsideArchive(t *testing.T) {
	s := StartServer(t)
	c := s.Client
	ctx := ctxT(t)
	sb := newSandbox(t, s)

	src := filepath.Join(t.TempDir(), "proj")
	for p, content := range map[string]string{"a.txt": "alpha", "sub/b.txt": "beta", "sub/deeper/c.bin": "\x00\x01\xff"} {
		os.MkdirAll(filepath.Join(src, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(src, p), []byte(content), 0o644)
	}
	os.Chmod(filepath.Join(src, "a.txt"), 0o600)
	os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\necho ran\n"), 0o755)
	os.Symlink("sub/b.txt", filepath.Join(src, "link"))
	os.Chmod(filepath.Join(src, "sub"), 0o750)

	res, err := c.UploadDir(ctx, sb.ID, src, "/work/proj")
	if err != nil {
		t.Fatalf("upload: %v", err)
	}
	if res.Entries != 8 {
		t.Errorf("upload: got %+v, want 8 entries", res)
	}
	run, err := c.Exec(ctx, sb.ID, api.ExecRequest{Command: "cd /work/proj && ./run.sh && cat link && stat -c '%a %n' a.txt sub"})
	if err != nil || run.Stdout != "ran\nbeta600 a.txt\n750 sub\n" {
		t.Errorf("inside: got %+v, %v", run, err)
	}
	entries, err := c.ListFiles(ctx, sb.ID, "/work/proj", 3)
	if err != nil || len(entries) != 7 {
		t.Errorf("recursive list: got %d entries, %v; want 7", len(entries), err)
	}
	// Change something inside, and bring it back with the CLI.
	if _, err := c.Exec(ctx, sb.ID, api.ExecRequest{Command: "echo made-inside > /work/proj/sub/new.txt"}); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "back")
	cmd := exec.Command(filepath.Join(binDir, "warren"), "--url", c.BaseURL(), "--key", adminKey(t, s), "cp", "-r", sb.ID+":/work/proj", dst)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("warren cp -r: %v\n%s", err, out)
	}
	for p, want := range map[string]string{"a.txt": "alpha", "sub/deeper/c.bin": "\x00\x01\xff", "sub/new.txt": "made-inside\n", "link": "beta"} {
		if b, err := os.ReadFile(filepath.Join(dst, p)); err != nil || string(b) != want {
			t.Errorf("%s: got %q, %v; want %q", p, b, err, want)
		}
	}
	if target, err := os.Readlink(filepath.Join(dst, "link")); err != nil || target != "sub/b.txt" {
		t.Errorf("link: got %q, %v", target, err)
	}
	for p, want := range map[string]os.FileMode{"a.txt": 0o600, "run.sh": 0o755, "sub": 0o750} {
		if fi, err := os.Stat(filepath.Join(dst, p)); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: got mode %v, %v; want %v", p, fi.Mode().Perm(), err, want)
		}
	}
	if _, err := c.ReadArchive(ctx, sb.ID, "/work/proj/a.txt"); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("archive of a file: got %v, want invalid", err)
	}
	if _, err := c.ReadArchive(ctx, sb.ID, "/nonexistent"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("archive of nothing: got %v, want not found", err)
	}
}

// TestInsideStoredPause checks a shell, a code context and a job survive a
// pause long enough to be stored: checkpointed to disk, the processes gone,
// then restored.
func TestInsideStoredPause(t *testing.T) {
	s := StartServerWith(t, map[string]any{"store_after_s": 1, "policy_interval_ms": 200})
	c := s.Client
	ctx := ctxT(t)
	sb := newSandbox(t, s)
	if _, err := c.CreateShell(ctx, sb.ID, api.CreateShellRequest{Name: "main"}); err != nil {
		t.Fatal(err)
	}
	inShell(t, c, sb.ID, "main", "cd /etc; export KEPT=yes")
	runCode(t, c, sb.ID, api.CodeRequest{Code: "kept = [1, 2, 3]"})
	job, err := c.StartJob(ctx, sb.ID, api.ExecRequest{Command: "echo started; sleep 3; echo finished"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for len(s.Containers()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("paused sandbox still in memory after 60s\n%s", s.Log())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := c.ResumeSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("resume from disk: %v\n%s", err, s.Log())
	}
	if res := inShell(t, c, sb.ID, "main", "pwd; echo $KEPT"); res.Stdout != "/etc\nyes\n" {
		t.Errorf("shell after a stored pause: got %q (stderr %q)", res.Stdout, res.Stderr)
	}
	if res := runCode(t, c, sb.ID, api.CodeRequest{Code: "sum(kept)"}); res.Result != "6" {
		t.Errorf("code after a stored pause: got %+v", res)
	}
	job = waitJobEnd(t, c, sb.ID, job.ID, time.Minute)
	if out, _ := jobOutput(t, c, sb.ID, job.ID, client.OutputOptions{}); out != "started\nfinished\n" || *job.ExitCode != 0 {
		t.Errorf("job after a stored pause: got %q, %+v", out, job)
	}
}
