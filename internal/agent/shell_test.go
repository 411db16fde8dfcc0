package agent

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warrenhq/warren/api"
)

func newShell(t *testing.T, c *Client, name string) {
	t.Helper()
	if _, err := c.CreateShell(t.Context(), api.CreateShellRequest{Name: name}); err != nil {
		t.Fatalf("CreateShell %s: %v", name, err)
	}
}

func shellExec(t *testing.T, c *Client, shell, command string) api.ExecResult {
	t.Helper()
	res, err := c.Exec(t.Context(), api.ExecRequest{Shell: shell, Command: command})
	if err != nil {
		t.Fatalf("exec %q in shell %s: %v", command, shell, err)
	}
	return res
}

func TestShellStatePersists(t *testing.T) {
	c := startAgent(t, Config{})
	newShell(t, c, "main")
	dir := t.TempDir()
	steps := []struct {
		command        string
		wantExit       int
		wantOut        string
		wantErrContain string
	}{
		{"cd " + dir + " && export GREETING=hello && greet() { echo \"$GREETING $1\"; } && alias ll='echo aliased'", 0, "", ""},
		{"pwd; greet world; ll; (sleep 0.3; echo from-background) & echo started", 0, dir + "\nhello world\naliased\nstarted\n", ""},
		{"false", 1, "", ""},
		{"echo $?; cd /; exit_code_of_cd=$?; (exit 42)", 42, "0\n", ""},
		{"pwd; sleep 0.5", 0, "/\n", ""}, // the background job's output comes with the next call
		{"echo \"unterminated", 2, "", "unexpected EOF"},
		{"echo still here; printf 'no newline'", 0, "still here\nno newline", ""},
		{"nosuchcommand-warren", 127, "", "command not found"},
		{"echo err >&2; echo out", 0, "out\n", "err\n"},
		{"read x; echo \"read [$x]\"", 0, "read []\n", ""}, // stdin is /dev/null, not the shell's input
	}
	// The background job's line comes with whichever call runs when it is
	// written (or the next one): once, never lost.
	strays := 0
	for i, st := range steps {
		res := shellExec(t, c, "main", st.command)
		out, found := strings.CutPrefix(res.Stdout, "from-background\n")
		if !found {
			out = strings.Replace(res.Stdout, "from-background\n", "", 1)
			found = out != res.Stdout
		}
		if found {
			strays++
		}
		if res.ExitCode != st.wantExit || out != st.wantOut || !strings.Contains(res.Stderr, st.wantErrContain) {
			t.Errorf("step %d %q: got exit %d stdout %q stderr %q, want exit %d stdout %q stderr containing %q",
				i, st.command, res.ExitCode, res.Stdout, res.Stderr, st.wantExit, st.wantOut, st.wantErrContain)
		}
	}
	if strays != 1 {
		t.Errorf("the background job's output came %d times, want once", strays)
	}
	// No job numbers, no file names in messages: what a script would print.
	if res := shellExec(t, c, "main", "sleep 0.1 & nosuch-warren-cmd"); res.Stderr != "bash: nosuch-warren-cmd: command not found\n" {
		t.Errorf("stderr: got %q", res.Stderr)
	}
	if _, err := c.Exec(t.Context(), api.ExecRequest{Shell: "main", Command: "echo \x00"}); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("a NUL in the command: got %v, want invalid", err)
	}
}

func TestShellPerCallOptions(t *testing.T) {
	c := startAgent(t, Config{})
	newShell(t, c, "s")
	dir := t.TempDir()
	res, err := c.Exec(t.Context(), api.ExecRequest{Shell: "s", Command: `pwd; echo "[$ONCE]"; cat`, Cwd: dir,
		Env: map[string]string{"ONCE": "it's \"quoted\"\n$x"}, Stdin: "in\x00put"})
	if err != nil {
		t.Fatal(err)
	}
	want := dir + "\n[it's \"quoted\"\n$x]\nin\x00put"
	if res.Stdout != want || res.ExitCode != 0 {
		t.Errorf("got %q exit %d, want %q exit 0", res.Stdout, res.ExitCode, want)
	}
	// The cwd stays; the variable doesn't.
	if res := shellExec(t, c, "s", `pwd; echo "[${ONCE-unset}]"`); res.Stdout != dir+"\n[unset]\n" {
		t.Errorf("after: got %q, want %q", res.Stdout, dir+"\n[unset]\n")
	}
	// An argv is quoted into a command line.
	res, err = c.Exec(t.Context(), api.ExecRequest{Shell: "s", Cmd: []string{"printf", "%s|", "a b", "it's", "$HOME"}})
	if err != nil || res.Stdout != "a b|it's|$HOME|" {
		t.Errorf("argv: got %q, %v; want %q", res.Stdout, err, "a b|it's|$HOME|")
	}
}

func TestShellTimeoutKeepsShell(t *testing.T) {
	c := startAgent(t, Config{})
	newShell(t, c, "t")
	shellExec(t, c, "t", "X=kept; cd /tmp")
	for _, cmd := range []string{"sleep 30; echo not-reached", "while true; do :; done", "while true; do sleep 1; done"} {
		start := time.Now()
		res, err := c.Exec(t.Context(), api.ExecRequest{Shell: "t", Command: cmd, TimeoutS: 0.3})
		if err != nil {
			t.Fatal(err)
		}
		if !res.TimedOut || res.ExitCode != exitTimedOut || strings.Contains(res.Stdout, "not-reached") {
			t.Errorf("%q: got %+v, want timed out with exit %d", cmd, res, exitTimedOut)
		}
		if d := time.Since(start); d > 15*time.Second {
			t.Errorf("%q: took %v to time out", cmd, d)
		}
	}
	if res := shellExec(t, c, "t", "echo $X; pwd"); res.Stdout != "kept\n/tmp\n" {
		t.Errorf("after timeouts: got %q, want the shell's state kept", res.Stdout)
	}
}

func TestShellInterruptIgnoredKillsShell(t *testing.T) {
	c := startAgent(t, Config{ShellInterruptGrace: 200 * time.Millisecond})
	newShell(t, c, "stubborn")
	res, err := c.Exec(t.Context(), api.ExecRequest{Shell: "stubborn", Command: "trap '' INT; sleep 30", TimeoutS: 0.2})
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || res.ExitCode != exitTimedOut || !strings.Contains(res.Stderr, "was killed") {
		t.Errorf("got %+v, want timed out, saying the shell was killed", res)
	}
	_, err = c.Exec(t.Context(), api.ExecRequest{Shell: "stubborn", Command: "true"})
	if !errors.Is(err, api.ErrNotFound) {
		t.Errorf("after the kill: got %v, want %v", err, api.ErrNotFound)
	}
}

func TestShellExit(t *testing.T) {
	c := startAgent(t, Config{})
	newShell(t, c, "x")
	res := shellExec(t, c, "x", "echo bye; exit 3")
	if res.ExitCode != 3 || res.Stdout != "bye\n" {
		t.Errorf("got exit %d stdout %q, want 3, %q", res.ExitCode, res.Stdout, "bye\n")
	}
	_, err := c.Exec(t.Context(), api.ExecRequest{Shell: "x", Command: "true"})
	if !errors.Is(err, api.ErrNotFound) {
		t.Errorf("after exit: got %v, want %v", err, api.ErrNotFound)
	}
	// The name is free again.
	newShell(t, c, "x")
}

func TestShellsSideBySide(t *testing.T) {
	c := startAgent(t, Config{})
	newShell(t, c, "a")
	newShell(t, c, "b")
	shellExec(t, c, "a", "V=in-a")
	shellExec(t, c, "b", "V=in-b")
	var wg sync.WaitGroup
	results := make([]string, 2)
	for i, name := range []string{"a", "b"} {
		wg.Go(func() { results[i] = shellExec(t, c, name, "sleep 0.2; echo $V").Stdout })
	}
	wg.Wait()
	if results[0] != "in-a\n" || results[1] != "in-b\n" {
		t.Errorf("got %q, want in-a and in-b", results)
	}
	// Calls to one shell queue.
	for i := range 3 {
		wg.Go(func() {
			if res := shellExec(t, c, "a", "echo $((N+=1))"); res.ExitCode != 0 {
				t.Errorf("call %d: %+v", i, res)
			}
		})
	}
	wg.Wait()
	if res := shellExec(t, c, "a", "echo $N"); res.Stdout != "3\n" {
		t.Errorf("after 3 queued calls: N=%q, want 3", res.Stdout)
	}
	list, err := c.Shells(t.Context())
	if err != nil || len(list) != 2 || list[0].Name != "a" || list[1].Name != "b" || list[0].Calls != 6 {
		t.Errorf("Shells: got %+v, %v; want a (6 calls) and b", list, err)
	}
	if err := c.DeleteShell(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteShell(t.Context(), "a"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("second delete: got %v, want %v", err, api.ErrNotFound)
	}
	if list, _ := c.Shells(t.Context()); len(list) != 1 {
		t.Errorf("after delete: got %+v, want only b", list)
	}
}

func TestShellStream(t *testing.T) {
	c := startAgent(t, Config{})
	newShell(t, c, "s")
	var out bytes.Buffer
	var n int
	err := c.ExecStream(t.Context(), api.ExecRequest{Shell: "s", Command: "echo one; sleep 0.2; echo two; exit_code=5; (exit 5)"},
		func(ev api.ExecEvent) error {
			n++
			if ev.Stdout != nil {
				out.WriteString(*ev.Stdout)
			}
			if ev.ExitCode != nil && *ev.ExitCode != 5 {
				t.Errorf("exit code: got %d, want 5", *ev.ExitCode)
			}
			return nil
		})
	if err != nil || out.String() != "one\ntwo\n" || n < 3 {
		t.Errorf("got %q in %d events, %v; want one, two in separate events", out.String(), n, err)
	}
}

func TestShellBadInput(t *testing.T) {
	c := startAgent(t, Config{})
	newShell(t, c, "ok")
	tests := []struct {
		name string
		do   func() error
		want error
	}{
		{"unknown shell", func() error {
			_, err := c.Exec(t.Context(), api.ExecRequest{Shell: "nope", Command: "true"})
			return err
		}, api.ErrNotFound},
		{"bad name", func() error {
			_, err := c.CreateShell(t.Context(), api.CreateShellRequest{Name: "a/b"})
			return err
		}, api.ErrInvalid},
		{"duplicate", func() error {
			_, err := c.CreateShell(t.Context(), api.CreateShellRequest{Name: "ok"})
			return err
		}, api.ErrConflict},
		{"missing cwd", func() error {
			_, err := c.CreateShell(t.Context(), api.CreateShellRequest{Name: "c", Cwd: "/nonexistent/warren"})
			return err
		}, api.ErrInvalid},
		{"shell and background", func() error {
			_, err := c.Exec(t.Context(), api.ExecRequest{Shell: "ok", Command: "true", Background: true})
			return err
		}, api.ErrInvalid},
		{"bad env name", func() error {
			_, err := c.Exec(t.Context(), api.ExecRequest{Shell: "ok", Command: "true", Env: map[string]string{"A-B": "x"}})
			return err
		}, api.ErrInvalid},
		{"delete unknown", func() error { return c.DeleteShell(t.Context(), "nope") }, api.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.do(); !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
}

func TestPartialPrefix(t *testing.T) {
	prefix := []byte(markerStart + "abcd")
	tests := []struct {
		data string
		want int
	}{
		{"hello", 0},
		{"hello\x1e", 1},
		{"hello\x1eW:ab", 5},
		{"hello\x1eW:abcd", 0}, // whole: found by Index, not held back
		{"hello\x1eX", 0},
		{"\x1e\x1eW", 2},
	}
	for _, tt := range tests {
		if got := partialPrefix([]byte(tt.data), prefix); got != tt.want {
			t.Errorf("partialPrefix(%q): got %d, want %d", tt.data, got, tt.want)
		}
	}
}

func TestBashQuote(t *testing.T) {
	c := startAgent(t, Config{})
	newShell(t, c, "q")
	for _, s := range []string{"plain", "it's", `back\slash`, "new\nline", "tab\t$HOME `x` \"q\"", "\x01\x7f", "ünïcödé"} {
		res := shellExec(t, c, "q", "printf %s "+bashQuote(s))
		if res.Stdout != s {
			t.Errorf("bashQuote(%q): the shell read back %q", s, res.Stdout)
		}
	}
}
