package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warrenhq/warren/api"
)

func TestExec(t *testing.T) {
	c := startAgent(t, Config{})
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "warren-hello"), []byte("#!/bin/sh\necho hello from $0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "not-exec"), []byte("echo no\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		req        api.ExecRequest
		wantExit   int
		wantStdout string
		wantStderr string // a substring
	}{
		{"argv", api.ExecRequest{Cmd: []string{"echo", "hello", "world"}}, 0, "hello world\n", ""},
		{"shell", api.ExecRequest{Command: "echo $((1+2)) | tr 3 x"}, 0, "x\n", ""},
		{"stderr", api.ExecRequest{Command: "echo oops >&2"}, 0, "", "oops\n"},
		{"exit 3 argv", api.ExecRequest{Cmd: []string{"sh", "-c", "exit 3"}}, 3, "", ""},
		{"exit 3 shell", api.ExecRequest{Command: "exit 3"}, 3, "", ""},
		{"argv not found", api.ExecRequest{Cmd: []string{"warren-no-such-cmd"}}, 127, "", "warren-no-such-cmd"},
		{"path not found", api.ExecRequest{Cmd: []string{"/nonexistent/warren"}}, 127, "", "/nonexistent/warren"},
		{"shell not found", api.ExecRequest{Command: "warren-no-such-cmd"}, 127, "", "warren-no-such-cmd"},
		{"not executable", api.ExecRequest{Cmd: []string{filepath.Join(dir, "not-exec")}}, 126, "", "permission denied"},
		{"killed by TERM", api.ExecRequest{Command: "kill -TERM $$"}, 128 + 15, "", ""},
		{"killed by KILL", api.ExecRequest{Cmd: []string{"sh", "-c", "kill -KILL $$"}}, 128 + 9, "", ""},
		{"cwd", api.ExecRequest{Cmd: []string{"pwd"}, Cwd: dir}, 0, dir + "\n", ""},
		{"relative argv in cwd", api.ExecRequest{Cmd: []string{"./warren-hello"}, Cwd: dir}, 0, "hello from ./warren-hello\n", ""},
		{"env added", api.ExecRequest{Command: "echo $WARREN_FOO", Env: map[string]string{"WARREN_FOO": "bar baz"}}, 0, "bar baz\n", ""},
		{"env overrides", api.ExecRequest{Command: "echo $HOME", Env: map[string]string{"HOME": "/elsewhere"}}, 0, "/elsewhere\n", ""},
		{"env inherited", api.ExecRequest{Command: "test -n \"$PATH\" && echo ok"}, 0, "ok\n", ""},
		{"argv resolved with env PATH", api.ExecRequest{Cmd: []string{"warren-hello"}, Env: map[string]string{"PATH": dir + ":/bin:/usr/bin"}}, 0, "hello from " + filepath.Join(dir, "warren-hello") + "\n", ""},
		{"stdin", api.ExecRequest{Cmd: []string{"cat"}, Stdin: "line one\nline two"}, 0, "line one\nline two", ""},
		{"no stdin is /dev/null", api.ExecRequest{Cmd: []string{"cat"}}, 0, "", ""},
		{"stdin not read", api.ExecRequest{Cmd: []string{"true"}, Stdin: strings.Repeat("x", 1<<20)}, 0, "", ""},
		{"big stdin", api.ExecRequest{Command: "wc -c | tr -d ' '", Stdin: strings.Repeat("x", 1<<20)}, 0, "1048576\n", ""},
		{"invalid UTF-8 replaced", api.ExecRequest{Command: `printf 'a\377b'`}, 0, "a\uFFFDb", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := c.Exec(t.Context(), tt.req)
			if err != nil {
				t.Fatalf("Exec: %v", err)
			}
			if res.ExitCode != tt.wantExit || res.Stdout != tt.wantStdout || !strings.Contains(res.Stderr, tt.wantStderr) {
				t.Errorf("got exit %d stdout %q stderr %q, want exit %d stdout %q stderr containing %q",
					res.ExitCode, res.Stdout, res.Stderr, tt.wantExit, tt.wantStdout, tt.wantStderr)
			}
			if res.TimedOut || res.Truncated {
				t.Errorf("got timed_out %v truncated %v, want false, false", res.TimedOut, res.Truncated)
			}
		})
	}
}

// TestExecBackgroundJob checks a command that leaves a job running with its
// output pipes open answers once it exits, without waiting for the job.
func TestExecBackgroundJob(t *testing.T) {
	c := startAgent(t, Config{})
	pidFile := filepath.Join(t.TempDir(), "pid")
	res, err := c.Exec(t.Context(), api.ExecRequest{Command: "sleep 10 & echo $! > " + pidFile + "; echo done"})
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if res.ExitCode != 0 || res.Stdout != "done\n" || res.DurationMS > 5000 {
		t.Errorf("got exit %d stdout %q after %d ms, want 0 %q well before the 10 s job ends", res.ExitCode, res.Stdout, res.DurationMS, "done\n")
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	if _, _, ok := procState(pid); !ok {
		t.Errorf("background job %d is gone, want it left running", pid)
	}
	syscall.Kill(pid, syscall.SIGKILL)
}

func TestExecInvalid(t *testing.T) {
	c := startAgent(t, Config{})
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		req     api.ExecRequest
		wantMsg string
	}{
		{"both", api.ExecRequest{Cmd: []string{"true"}, Command: "true"}, "not both"},
		{"neither", api.ExecRequest{}, "set cmd"},
		{"shell and background", api.ExecRequest{Command: "true", Shell: "main", Background: true}, "don't go together"},
		{"bad shell name", api.ExecRequest{Command: "true", Shell: "a b"}, "shell name"},
		{"background without command", api.ExecRequest{Background: true}, "set cmd"},
		{"negative timeout", api.ExecRequest{Command: "true", TimeoutS: -1}, "timeout_s"},
		{"missing cwd", api.ExecRequest{Command: "true", Cwd: "/nonexistent/warren-cwd"}, "/nonexistent/warren-cwd"},
		{"cwd is a file", api.ExecRequest{Command: "true", Cwd: file}, "not a directory"},
		{"empty argv0", api.ExecRequest{Cmd: []string{""}}, "cmd[0]"},
		{"bad env name", api.ExecRequest{Command: "true", Env: map[string]string{"A=B": "x"}}, "A=B"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Exec(t.Context(), tt.req)
			if !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("got %v, want %v with %q", err, api.ErrInvalid, tt.wantMsg)
			}
			err = c.ExecStream(t.Context(), tt.req, func(api.ExecEvent) error { return nil })
			if !errors.Is(err, api.ErrInvalid) {
				t.Errorf("stream: got %v, want %v", err, api.ErrInvalid)
			}
		})
	}
}

// TestExecTimeout checks a timeout kills the whole process group, a
// background grandchild that holds the output pipes included.
func TestExecTimeout(t *testing.T) {
	c := startAgent(t, Config{})
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "pid")
			req := api.ExecRequest{Command: "sleep 100 & echo $! > " + pidFile + "; sleep 100", TimeoutS: 0.3}
			start := time.Now()
			var exit int
			var timedOut bool
			if stream {
				err := c.ExecStream(t.Context(), req, func(ev api.ExecEvent) error {
					if ev.ExitCode != nil {
						exit, timedOut = *ev.ExitCode, ev.TimedOut
					}
					return nil
				})
				if err != nil {
					t.Fatalf("ExecStream: %v", err)
				}
			} else {
				res, err := c.Exec(t.Context(), req)
				if err != nil {
					t.Fatalf("Exec: %v", err)
				}
				exit, timedOut = res.ExitCode, res.TimedOut
			}
			if exit != 124 || !timedOut {
				t.Errorf("got exit %d timed_out %v, want 124 true", exit, timedOut)
			}
			if d := time.Since(start); d > 20*time.Second {
				t.Errorf("took %v, want the command killed at its 0.3s timeout", d)
			}
			data, err := os.ReadFile(pidFile)
			if err != nil {
				t.Fatal(err)
			}
			pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
			if !waitGone(pid, 5*time.Second) {
				t.Errorf("grandchild %d still exists after the timeout, want it killed with its group", pid)
			}
		})
	}
}

func eventString(ev api.ExecEvent) string {
	switch {
	case ev.Stdout != nil:
		return "stdout:" + *ev.Stdout
	case ev.Stderr != nil:
		return "stderr:" + *ev.Stderr
	case ev.ExitCode != nil && ev.Error != "":
		return fmt.Sprintf("error:%d", *ev.ExitCode)
	case ev.ExitCode != nil:
		return fmt.Sprintf("exit:%d", *ev.ExitCode)
	}
	return "empty"
}

func TestExecStream(t *testing.T) {
	c := startAgent(t, Config{})
	tests := []struct {
		name string
		req  api.ExecRequest
		want []string
	}{
		{"order", api.ExecRequest{Command: "echo a; sleep 0.1; echo b >&2; sleep 0.1; echo c; exit 5"},
			[]string{"stdout:a\n", "stderr:b\n", "stdout:c\n", "exit:5"}},
		{"no output", api.ExecRequest{Cmd: []string{"true"}}, []string{"exit:0"}},
		{"not found", api.ExecRequest{Cmd: []string{"warren-no-such-cmd"}},
			[]string{"stderr:warren-agent: warren-no-such-cmd: command not found\n", "exit:127"}},
		{"stdin", api.ExecRequest{Cmd: []string{"cat"}, Stdin: "in"}, []string{"stdout:in", "exit:0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			err := c.ExecStream(t.Context(), tt.req, func(ev api.ExecEvent) error {
				got = append(got, eventString(ev))
				return nil
			})
			if err != nil {
				t.Fatalf("ExecStream: %v", err)
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestExecStreamUTF8 checks multi-byte characters split across reads reach
// the client intact.
func TestExecStreamUTF8(t *testing.T) {
	c := startAgent(t, Config{})
	want := strings.Repeat("€", 100000) // 3 bytes each: reads split them
	file := filepath.Join(t.TempDir(), "euro")
	if err := os.WriteFile(file, []byte(want), 0o644); err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	err := c.ExecStream(t.Context(), api.ExecRequest{Cmd: []string{"cat", file}}, func(ev api.ExecEvent) error {
		if ev.Stdout != nil {
			got.WriteString(*ev.Stdout)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("ExecStream: %v", err)
	}
	if got.String() != want {
		t.Errorf("got %d bytes with %d U+FFFD, want %d bytes of €", got.Len(), strings.Count(got.String(), "\uFFFD"), len(want))
	}
}

func TestCompleteUTF8(t *testing.T) {
	euro := []byte("€") // e2 82 ac
	tests := []struct {
		in   []byte
		want int
	}{
		{nil, 0},
		{[]byte("abc"), 3},
		{euro, 3},
		{euro[:1], 0},
		{euro[:2], 0},
		{append([]byte("ab"), euro[:2]...), 2},
		{append([]byte("ab"), euro...), 5},
		{[]byte{'a', 0xff}, 2},       // invalid, not incomplete
		{[]byte{'a', 0x82, 0xac}, 3}, // stray continuation bytes
		{[]byte("\xf0\x9f\x98"), 0},  // 3 of a 4-byte emoji
	}
	for _, tt := range tests {
		if got := completeUTF8(tt.in); got != tt.want {
			t.Errorf("completeUTF8(%x): got %d, want %d", tt.in, got, tt.want)
		}
	}
}

func TestExecFloodBuffered(t *testing.T) {
	t.Run("default limit", func(t *testing.T) {
		c := startAgent(t, Config{})
		res, err := c.Exec(t.Context(), api.ExecRequest{Command: "yes | head -c 20000000; echo done >&2"})
		if err != nil {
			t.Fatalf("Exec: %v", err)
		}
		if len(res.Stdout) != DefaultMaxOutput || !res.Truncated || res.ExitCode != 0 || res.Stderr != "done\n" {
			t.Errorf("got %d bytes truncated %v exit %d stderr %q, want %d true 0 %q",
				len(res.Stdout), res.Truncated, res.ExitCode, res.Stderr, DefaultMaxOutput, "done\n")
		}
	})

	const limit = 1 << 20
	const maxGrowth = 64 << 20
	c := startAgent(t, Config{MaxOutput: limit})
	tests := []struct {
		name     string
		req      api.ExecRequest
		wantExit int
	}{
		{"100 MB", api.ExecRequest{Command: "yes | head -c 100000000"}, 0},
		{"unbounded with timeout", api.ExecRequest{Cmd: []string{"yes"}, TimeoutS: 1}, 124},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var res api.ExecResult
			var err error
			growth := peakHeap(func() { res, err = c.Exec(t.Context(), tt.req) })
			if err != nil {
				t.Fatalf("Exec: %v", err)
			}
			if len(res.Stdout) != limit || !res.Truncated || res.ExitCode != tt.wantExit {
				t.Errorf("got %d bytes truncated %v exit %d, want %d true %d", len(res.Stdout), res.Truncated, res.ExitCode, limit, tt.wantExit)
			}
			if growth > maxGrowth {
				t.Errorf("heap grew by %d MiB, want at most %d MiB", growth>>20, maxGrowth>>20)
			}
		})
	}
}

func TestExecFloodStream(t *testing.T) {
	c := startAgent(t, Config{})
	const total = 100000000
	const maxGrowth = 64 << 20
	var n, maxLine int
	var last api.ExecEvent
	var err error
	growth := peakHeap(func() {
		err = c.ExecStream(t.Context(), api.ExecRequest{Command: fmt.Sprintf("yes | head -c %d", total)}, func(ev api.ExecEvent) error {
			if ev.Stdout != nil {
				n += len(*ev.Stdout)
				maxLine = max(maxLine, len(*ev.Stdout))
			}
			last = ev
			return nil
		})
	})
	if err != nil {
		t.Fatalf("ExecStream: %v", err)
	}
	if n != total || last.ExitCode == nil || *last.ExitCode != 0 {
		t.Errorf("got %d bytes, last event %s, want %d bytes, exit:0", n, eventString(last), total)
	}
	if maxLine > 64<<10 {
		t.Errorf("got a line with %d bytes of data, want at most %d", maxLine, 64<<10)
	}
	if growth > maxGrowth {
		t.Errorf("heap grew by %d MiB, want at most %d MiB", growth>>20, maxGrowth>>20)
	}
}

// TestExecStreamBackpressure checks a client that stops reading makes the
// command block on its pipe instead of the agent buffering its output.
func TestExecStreamBackpressure(t *testing.T) {
	c := startAgent(t, Config{})
	const maxGrowth = 64 << 20
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stall := errors.New("stall")
	growth := peakHeap(func() {
		err := c.ExecStream(ctx, api.ExecRequest{Cmd: []string{"yes"}}, func(ev api.ExecEvent) error {
			time.Sleep(time.Second) // yes could write gigabytes meanwhile
			return stall
		})
		if !errors.Is(err, stall) {
			t.Errorf("got %v, want %v", err, stall)
		}
	})
	if growth > maxGrowth {
		t.Errorf("heap grew by %d MiB, want at most %d MiB", growth>>20, maxGrowth>>20)
	}
}

// TestExecClientGone checks a client that goes away gets its command's
// process group killed.
func TestExecClientGone(t *testing.T) {
	c := startAgent(t, Config{})
	stop := errors.New("stop")
	tests := []struct {
		name string
		run  func(pidFile string) error
	}{
		{"buffered, context cancelled", func(pidFile string) error {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			go func() {
				for {
					if data, _ := os.ReadFile(pidFile); len(data) > 0 && data[len(data)-1] == '\n' {
						cancel()
						return
					}
					time.Sleep(10 * time.Millisecond)
				}
			}()
			_, err := c.Exec(ctx, api.ExecRequest{Command: "echo $$ > " + pidFile + "; exec sleep 100"})
			return err
		}},
		{"stream, context cancelled", func(pidFile string) error {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			return c.ExecStream(ctx, api.ExecRequest{Command: "echo $$ > " + pidFile + "; echo started; exec sleep 100"}, func(api.ExecEvent) error {
				cancel()
				return nil
			})
		}},
		{"stream, callback stops", func(pidFile string) error {
			return c.ExecStream(t.Context(), api.ExecRequest{Command: "echo $$ > " + pidFile + "; echo started; exec sleep 100"}, func(api.ExecEvent) error {
				return stop
			})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "pid")
			done := make(chan error, 1)
			go func() { done <- tt.run(pidFile) }()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) && !errors.Is(err, stop) {
					t.Errorf("got %v, want %v or %v", err, context.Canceled, stop)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("exec did not return after the client went away")
			}
			data, err := os.ReadFile(pidFile)
			if err != nil {
				t.Fatal(err)
			}
			pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
			if !waitGone(pid, 5*time.Second) {
				t.Errorf("command %d still exists after its client went away, want it killed", pid)
			}
		})
	}
}

// TestReapOrphans checks an orphan a command leaves behind is re-parented
// to the agent's process (a child subreaper) and reaped when it ends.
func TestReapOrphans(t *testing.T) {
	c := startAgent(t, Config{})
	res, err := c.Exec(t.Context(), api.ExecRequest{Command: "sleep 0.3 >/dev/null 2>&1 & echo $!"})
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(res.Stdout))
	if err != nil {
		t.Fatalf("orphan pid: %v", err)
	}
	if _, ppid, ok := procState(pid); ok && ppid != os.Getpid() {
		t.Errorf("orphan's parent: got %d, want %d (the agent, a subreaper)", ppid, os.Getpid())
	}
	if !waitGone(pid, 5*time.Second) {
		state, _, _ := procState(pid)
		t.Errorf("orphan %d still there in state %q after it ended, want it reaped", pid, state)
	}
	// Nothing the agent started, command or orphan, is left a zombie.
	deadline := time.Now().Add(5 * time.Second)
	for z := zombieChildren(); len(z) > 0; z = zombieChildren() {
		if time.Now().After(deadline) {
			t.Fatalf("got zombie children %v, want none", z)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestExecConcurrent runs commands in parallel, so starts, exits and reaps
// interleave.
func TestExecConcurrent(t *testing.T) {
	c := startAgent(t, Config{})
	errc := make(chan error, 40)
	for i := range 40 {
		go func() {
			res, err := c.Exec(t.Context(), api.ExecRequest{Cmd: []string{"sh", "-c", "exit $1", "sh", strconv.Itoa(i % 7)}})
			switch {
			case err != nil:
				errc <- err
			case res.ExitCode != i%7:
				errc <- fmt.Errorf("command %d: got exit %d, want %d", i, res.ExitCode, i%7)
			default:
				errc <- nil
			}
		}()
	}
	for range 40 {
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}
}

func BenchmarkExecTrue(b *testing.B) {
	c := startAgent(b, Config{})
	for b.Loop() {
		if _, err := c.Exec(b.Context(), api.ExecRequest{Cmd: []string{"true"}}); err != nil {
			b.Fatal(err)
		}
	}
}
