package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warrenhq/warren/api"
)

// waitJob polls a job until it has ended.
func waitJob(t *testing.T, c *Client, id string) api.Job {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		j, err := c.Job(t.Context(), id)
		if err != nil {
			t.Fatalf("Job %s: %v", id, err)
		}
		if j.State != api.JobRunning {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still running: %+v", id, j)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func readOutput(t *testing.T, c *Client, id, stream string, offset int64, follow bool) (string, int64) {
	t.Helper()
	rc, from, err := c.JobOutput(t.Context(), id, stream, offset, follow)
	if err != nil {
		t.Fatalf("JobOutput %s %s@%d: %v", id, stream, offset, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading output: %v", err)
	}
	return string(b), from
}

func TestJobLifecycle(t *testing.T) {
	c := startAgent(t, Config{})
	j, err := c.StartJob(t.Context(), api.ExecRequest{Command: "echo one; echo oops >&2; sleep 0.3; printf 'two\\377\\000'; exit 3"})
	if err != nil {
		t.Fatal(err)
	}
	if len(j.ID) != len("job-")+jobIDLen || !strings.HasPrefix(j.ID, "job-") || j.State != api.JobRunning || j.PID == 0 || j.ExitCode != nil {
		t.Errorf("got %+v, want a running job-XXXXXXXX with a pid and no exit code", j)
	}
	// Follow from the start: everything, until it ends.
	out, from := readOutput(t, c, j.ID, "stdout", 0, true)
	if want := "one\ntwo\xff\x00"; out != want || from != 0 {
		t.Errorf("follow: got %q from %d, want %q from 0 (binary intact)", out, from, want)
	}
	j = waitJob(t, c, j.ID)
	if j.State != api.JobExited || j.ExitCode == nil || *j.ExitCode != 3 || j.EndedAt == nil || j.StdoutBytes != 9 || j.StderrBytes != 5 {
		t.Errorf("ended: got %+v, want exited with 3, 9 bytes of stdout, 5 of stderr", j)
	}
	if out, from := readOutput(t, c, j.ID, "stdout", 4, false); out != "two\xff\x00" || from != 4 {
		t.Errorf("from offset 4: got %q from %d", out, from)
	}
	if out, _ := readOutput(t, c, j.ID, "stderr", 0, false); out != "oops\n" {
		t.Errorf("stderr: got %q", out)
	}
	if out, from := readOutput(t, c, j.ID, "stdout", 100, false); out != "" || from != 100 {
		t.Errorf("past the end: got %q from %d, want nothing", out, from)
	}
	// The record is on disk too.
	list, err := c.Jobs(t.Context())
	if err != nil || len(list) != 1 || list[0].ID != j.ID {
		t.Errorf("Jobs: got %+v, %v", list, err)
	}
	if err := c.DeleteJob(t.Context(), j.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Job(t.Context(), j.ID); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("after delete: got %v, want %v", err, api.ErrNotFound)
	}
}

func TestJobOutlivesClient(t *testing.T) {
	c := startAgent(t, Config{})
	ctx, cancel := context.WithCancel(t.Context())
	j, err := c.StartJob(ctx, api.ExecRequest{Command: "sleep 0.3; echo done"})
	if err != nil {
		t.Fatal(err)
	}
	// A follower that goes away doesn't end the job either.
	rc, _, err := c.JobOutput(ctx, j.ID, "stdout", 0, true)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	rc.Close()
	c.CloseIdle()
	j = waitJob(t, c, j.ID)
	if out, _ := readOutput(t, c, j.ID, "stdout", 0, false); out != "done\n" || *j.ExitCode != 0 {
		t.Errorf("got %q, exit %v; want the job to finish on its own", out, *j.ExitCode)
	}
}

func TestJobKillAndStdin(t *testing.T) {
	c := startAgent(t, Config{})
	// stdin stays open until closed.
	j, err := c.StartJob(t.Context(), api.ExecRequest{Command: "while read line; do echo \"got $line\"; done; echo eof"})
	if err != nil {
		t.Fatal(err)
	}
	if !j.StdinOpen {
		t.Errorf("got %+v, want stdin open", j)
	}
	if _, err := c.WriteJobStdin(t.Context(), j.ID, strings.NewReader("a\nb\n"), false); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteJobStdin(t.Context(), j.ID, strings.NewReader("c\n"), true); err != nil {
		t.Fatal(err)
	}
	j = waitJob(t, c, j.ID)
	if out, _ := readOutput(t, c, j.ID, "stdout", 0, false); out != "got a\ngot b\ngot c\neof\n" {
		t.Errorf("stdin: got %q", out)
	}
	if _, err := c.WriteJobStdin(t.Context(), j.ID, strings.NewReader("late"), false); !errors.Is(err, api.ErrConflict) {
		t.Errorf("stdin of an ended job: got %v, want %v", err, api.ErrConflict)
	}

	// Stdin given at start is written and closed.
	j, err = c.StartJob(t.Context(), api.ExecRequest{Cmd: []string{"wc", "-c"}, Stdin: "12345"})
	if err != nil {
		t.Fatal(err)
	}
	j = waitJob(t, c, j.ID)
	if out, _ := readOutput(t, c, j.ID, "stdout", 0, false); strings.TrimSpace(out) != "5" {
		t.Errorf("stdin at start: got %q", out)
	}

	// Kill reaches the job's children too.
	pidFile := filepath.Join(t.TempDir(), "pid")
	j, err = c.StartJob(t.Context(), api.ExecRequest{Command: "sleep 60 & echo $! > " + pidFile + "; wait"})
	if err != nil {
		t.Fatal(err)
	}
	var childPid int
	for range 200 {
		if b, err := os.ReadFile(pidFile); err == nil && len(bytes.TrimSpace(b)) > 0 {
			childPid = atoiOrZero(string(bytes.TrimSpace(b)))
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := c.KillJob(t.Context(), j.ID, "KILL"); err != nil {
		t.Fatal(err)
	}
	j = waitJob(t, c, j.ID)
	if j.State != api.JobKilled || j.Signal != "SIGKILL" || *j.ExitCode != 128+9 {
		t.Errorf("killed: got %+v, want killed by SIGKILL, exit 137", j)
	}
	if childPid == 0 || !waitGone(childPid, 5*time.Second) {
		t.Errorf("the job's child %d outlived the kill", childPid)
	}
	if _, err := c.KillJob(t.Context(), j.ID, ""); !errors.Is(err, api.ErrConflict) {
		t.Errorf("kill an ended job: got %v, want %v", err, api.ErrConflict)
	}

	// Timeout.
	j, err = c.StartJob(t.Context(), api.ExecRequest{Command: "sleep 60", TimeoutS: 0.2})
	if err != nil {
		t.Fatal(err)
	}
	if j = waitJob(t, c, j.ID); !j.TimedOut || j.State != api.JobKilled {
		t.Errorf("timeout: got %+v", j)
	}

	// A command that can't run is a job that ended at once, like exec.
	j, err = c.StartJob(t.Context(), api.ExecRequest{Cmd: []string{"warren-no-such-cmd"}})
	if err != nil {
		t.Fatal(err)
	}
	if j.State != api.JobExited || *j.ExitCode != 127 {
		t.Errorf("not found: got %+v, want exited 127", j)
	}
}

func atoiOrZero(s string) int {
	n := 0
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0
		}
		n = n*10 + int(r-'0')
	}
	return n
}

// TestJobOutputCap checks a chatty job keeps its last output, within the
// cap, with offsets that still count from the start.
func TestJobOutputCap(t *testing.T) {
	stateDir := t.TempDir()
	c := startAgent(t, Config{JobOutputCap: 64 << 10, StateDir: stateDir})
	// 1000 lines of 100 bytes: 100000 bytes, numbered.
	j, err := c.StartJob(t.Context(), api.ExecRequest{Command: `for i in $(seq -w 0 999); do printf '%099d\n' $i; done`})
	if err != nil {
		t.Fatal(err)
	}
	j = waitJob(t, c, j.ID)
	if j.StdoutBytes != 100000 || j.StdoutDropped == 0 || j.StdoutDropped%(32<<10) != 0 {
		t.Fatalf("got %+v, want 100000 bytes with a whole number of 32 KiB segments dropped", j)
	}
	out, from := readOutput(t, c, j.ID, "stdout", 0, false)
	if from != j.StdoutDropped || int64(len(out)) != 100000-from {
		t.Errorf("read from 0: got %d bytes from %d, want %d from %d", len(out), from, 100000-j.StdoutDropped, j.StdoutDropped)
	}
	if !strings.HasSuffix(out, strings.Repeat("0", 96)+"999\n") {
		t.Errorf("the last line is missing: ...%q", out[max(0, len(out)-120):])
	}
	// An offset still kept reads exactly there.
	off := int64(99900)
	if out, from := readOutput(t, c, j.ID, "stdout", off, false); from != off || out != strings.Repeat("0", 96)+"999\n" {
		t.Errorf("from %d: got %q from %d", off, out, from)
	}
	// On disk: at most the cap.
	var size int64
	ents, _ := os.ReadDir(filepath.Join(stateDir, "jobs", j.ID))
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "stdout.") {
			fi, _ := e.Info()
			size += fi.Size()
		}
	}
	if size != 100000-j.StdoutDropped || size > 64<<10 {
		t.Errorf("on disk: %d bytes of stdout, want %d, at most %d", size, 100000-j.StdoutDropped, 64<<10)
	}
}

func TestJobBadInput(t *testing.T) {
	c := startAgent(t, Config{})
	j, err := c.StartJob(t.Context(), api.ExecRequest{Command: "sleep 30"})
	if err != nil {
		t.Fatal(err)
	}
	// Kill the job and wait for its record before the test's directories
	// are removed: an ending job still writes there.
	t.Cleanup(func() {
		ctx := context.Background() // t.Context() is done by now
		_, _ = c.KillJob(ctx, j.ID, "KILL")
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if got, err := c.Job(ctx, j.ID); err != nil || got.State != api.JobRunning {
				return
			}
		}
	})
	tests := []struct {
		name string
		do   func() error
		want error
	}{
		{"unknown job", func() error { _, err := c.Job(t.Context(), "job-nope0000"); return err }, api.ErrNotFound},
		{"unknown job output", func() error { _, _, err := c.JobOutput(t.Context(), "job-nope0000", "stdout", 0, false); return err }, api.ErrNotFound},
		{"unknown job kill", func() error { _, err := c.KillJob(t.Context(), "job-nope0000", ""); return err }, api.ErrNotFound},
		{"bad stream", func() error { _, _, err := c.JobOutput(t.Context(), j.ID, "stdin", 0, false); return err }, api.ErrInvalid},
		{"bad offset", func() error { _, _, err := c.JobOutput(t.Context(), j.ID, "stdout", -1, false); return err }, api.ErrInvalid},
		{"bad signal", func() error { _, err := c.KillJob(t.Context(), j.ID, "NOPE"); return err }, api.ErrInvalid},
		{"delete running", func() error { return c.DeleteJob(t.Context(), j.ID) }, api.ErrConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.do(); !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
}

// TestJobsReloaded checks an agent finds the jobs of the one before it on
// the same disk.
func TestJobsReloaded(t *testing.T) {
	dir := t.TempDir()
	c := startAgent(t, Config{StateDir: dir})
	done, err := c.StartJob(t.Context(), api.ExecRequest{Command: "echo kept"})
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, c, done.ID)
	c2 := startAgent(t, Config{StateDir: dir})
	j, err := c2.Job(t.Context(), done.ID)
	if err != nil || j.State != api.JobExited || *j.ExitCode != 0 {
		t.Fatalf("got %+v, %v; want the ended job", j, err)
	}
	if out, _ := readOutput(t, c2, done.ID, "stdout", 0, false); out != "kept\n" {
		t.Errorf("output: got %q", out)
	}
}

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]string{"": "SIGTERM", "KILL": "SIGKILL", "sigint": "SIGINT", "SIGHUP": "SIGHUP", "9": "SIGKILL", "15": "SIGTERM"} {
		sig, err := parseSignal(in)
		if err != nil || signalName(sig) != want {
			t.Errorf("parseSignal(%q): got %v, %v; want %s", in, signalName(sig), err, want)
		}
	}
	for _, in := range []string{"0", "65", "BOGUS", "-1"} {
		if _, err := parseSignal(in); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("parseSignal(%q): got %v, want invalid", in, err)
		}
	}
}
