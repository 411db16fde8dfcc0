package agent

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warrenhq/warren/api"
)

func runCode(t *testing.T, c *Client, req api.CodeRequest) api.CodeResult {
	t.Helper()
	res, err := c.RunCode(t.Context(), req)
	if err != nil {
		t.Fatalf("RunCode %q: %v", req.Code, err)
	}
	return res
}

func TestCodeContext(t *testing.T) {
	c := startAgent(t, Config{})
	tests := []struct {
		name       string
		code       string
		wantOut    string
		wantErr    string // a substring
		wantResult string
		wantError  string // the exception's name
		wantTB     string // a substring of the traceback
	}{
		{"assign", "x = 41\nimport math", "", "", "", "", ""},
		{"last expression", "x + 1", "", "", "42", "", ""},
		{"print and result", "print('hi'); x * 2", "hi\n", "", "82", "", ""},
		{"None is no result", "None", "", "", "", "", ""},
		{"statement last", "y = x\nfor i in range(2): print(i)", "0\n1\n", "", "", "", ""},
		{"repr", "'a\\nb'", "", "", "'a\\nb'", "", ""},
		{"stderr", "import sys; print('warn', file=sys.stderr)", "", "warn\n", "", "", ""},
		{"subprocess output", "import os; rc = os.system('echo from-shell')", "from-shell\n", "", "", "", ""},
		{"function", "def f(n):\n    return n / 0", "", "", "", "", ""},
		{"exception", "print('before'); f(1)", "before\n", "", "", "ZeroDivisionError", "in f"},
		{"state survives", "x, math.pi > 3", "", "", "(41, True)", "", ""},
		{"underscore", "_[0]", "", "", "41", "", ""},
		{"syntax error", "def (:", "", "", "", "SyntaxError", "<code"},
		{"indentation error", "  x = 1", "", "", "", "IndentationError", ""},
		{"system exit", "raise SystemExit(3)", "", "", "", "SystemExit", ""},
		{"input is empty", "input()", "", "", "", "EOFError", ""},
		{"open file persists", "import tempfile; fh = tempfile.TemporaryFile(); fh.write(b'abc')", "", "", "3", "", ""},
		{"open file read", "fh.seek(0); fh.read()", "", "", "b'abc'", "", ""},
		{"top-level await", "import asyncio\nawait asyncio.sleep(0.01)\n7", "", "", "7", "", ""},
	}
	defer func() {
		res := runCode(t, c, api.CodeRequest{Code: "'x' * (5 << 20)"})
		if !res.Truncated || len(res.Result) != 4<<20 {
			t.Errorf("a huge result: got %d characters, truncated %v; want 4 MiB, truncated", len(res.Result), res.Truncated)
		}
	}()
	for i, tt := range tests {
		res := runCode(t, c, api.CodeRequest{Code: tt.code})
		errName, tb := "", ""
		if res.Error != nil {
			errName, tb = res.Error.Name, res.Error.Traceback
		}
		if res.Stdout != tt.wantOut || !strings.Contains(res.Stderr, tt.wantErr) || res.Result != tt.wantResult ||
			errName != tt.wantError || !strings.Contains(tb, tt.wantTB) || res.ExecutionCount != i+1 {
			t.Errorf("%s: got %+v (error %+v), want stdout %q stderr ~%q result %q error %q traceback ~%q count %d",
				tt.name, res, res.Error, tt.wantOut, tt.wantErr, tt.wantResult, tt.wantError, tt.wantTB, i+1)
		}
		if strings.Contains(tb, "driver.py") {
			t.Errorf("%s: the traceback shows the driver:\n%s", tt.name, tb)
		}
	}
}

func TestCodeTimeoutKeepsState(t *testing.T) {
	c := startAgent(t, Config{})
	runCode(t, c, api.CodeRequest{Code: "kept = 'yes'; n = 0"})
	for _, code := range []string{"while True:\n    n += 1", "import time; time.sleep(30)"} {
		start := time.Now()
		res := runCode(t, c, api.CodeRequest{Code: code, TimeoutS: 0.3})
		if !res.TimedOut || res.Error == nil || res.Error.Name != "KeyboardInterrupt" {
			t.Errorf("%q: got %+v, want a KeyboardInterrupt at the timeout", code, res)
		}
		if d := time.Since(start); d > 15*time.Second {
			t.Errorf("%q took %v", code, d)
		}
	}
	if res := runCode(t, c, api.CodeRequest{Code: "kept, n > 0"}); res.Result != "('yes', True)" {
		t.Errorf("after timeouts: got %+v, want the state kept", res)
	}
}

func TestCodeStubbornOrDead(t *testing.T) {
	c := startAgent(t, Config{CodeInterruptGrace: 200 * time.Millisecond})
	runCode(t, c, api.CodeRequest{Code: "v = 1"})
	res := runCode(t, c, api.CodeRequest{Code: "import time\nwhile True:\n    try:\n        time.sleep(10)\n    except KeyboardInterrupt:\n        pass", TimeoutS: 0.2})
	if !res.TimedOut || res.Error == nil || res.Error.Name != api.CodeErrorContextLost {
		t.Errorf("stubborn: got %+v, want the context lost", res)
	}
	// Fresh, working, state gone.
	if res := runCode(t, c, api.CodeRequest{Code: "'v' in dir()"}); res.Result != "False" || res.ExecutionCount != 3 {
		t.Errorf("after the kill: got %+v, want a fresh interpreter", res)
	}
	res = runCode(t, c, api.CodeRequest{Code: "import os; print('bye', flush=True); os._exit(7)"})
	if res.Error == nil || res.Error.Name != api.CodeErrorContextLost || !strings.Contains(res.Error.Value, "exit status 7") || res.Stdout != "bye\n" {
		t.Errorf("os._exit: got %+v (%+v), want lost with status 7 and the output", res, res.Error)
	}
	if res := runCode(t, c, api.CodeRequest{Code: "1+1"}); res.Result != "2" {
		t.Errorf("after exit: got %+v", res)
	}
}

func TestCodeContexts(t *testing.T) {
	c := startAgent(t, Config{})
	dir := t.TempDir()
	cc, err := c.CreateContext(t.Context(), api.CreateContextRequest{Name: "other", Cwd: dir, Env: map[string]string{"WARREN_X": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	if cc.Name != "other" || cc.Language != "python" || cc.PID == 0 {
		t.Errorf("got %+v", cc)
	}
	runCode(t, c, api.CodeRequest{Code: "a = 'default'"})
	runCode(t, c, api.CodeRequest{Code: "a = 'other'", Context: "other"})
	if res := runCode(t, c, api.CodeRequest{Code: "import os; a, os.getcwd(), os.environ['WARREN_X']", Context: "other"}); res.Result != "('other', '"+dir+"', '1')" {
		t.Errorf("other: got %+v", res)
	}
	if res := runCode(t, c, api.CodeRequest{Code: "a"}); res.Result != "'default'" {
		t.Errorf("default: got %+v", res)
	}
	// Two contexts run side by side: each waits for the other to start.
	var wg sync.WaitGroup
	meet := t.TempDir()
	for _, pair := range [][2]string{{"default", "other"}, {"other", "default"}} {
		wg.Go(func() {
			code := "import os, time\nopen('" + meet + "/' + '" + pair[0] + "', 'w').close()\n" +
				"for _ in range(600):\n    if os.path.exists('" + meet + "/" + pair[1] + "'): break\n    time.sleep(0.05)\n" +
				"os.path.exists('" + meet + "/" + pair[1] + "')"
			if res := runCode(t, c, api.CodeRequest{Code: code, Context: pair[0]}); res.Result != "True" {
				t.Errorf("context %s did not see %s run meanwhile: %+v", pair[0], pair[1], res)
			}
		})
	}
	wg.Wait()
	list, err := c.Contexts(t.Context())
	if err != nil || len(list) != 2 || list[0].Name != "default" || list[1].Name != "other" {
		t.Errorf("Contexts: got %+v, %v", list, err)
	}
	restarted, err := c.RestartContext(t.Context(), "other")
	if err != nil || restarted.ExecutionCount != 0 || restarted.PID == cc.PID {
		t.Errorf("restart: got %+v, %v", restarted, err)
	}
	if res := runCode(t, c, api.CodeRequest{Code: "'a' in dir()", Context: "other"}); res.Result != "False" {
		t.Errorf("after restart: got %+v", res)
	}
	if err := c.DeleteContext(t.Context(), "other"); err != nil {
		t.Fatal(err)
	}
	if !waitGone(restarted.PID, 5*time.Second) {
		t.Errorf("the interpreter %d outlived its context", restarted.PID)
	}
	tests := []struct {
		name string
		do   func() error
		want error
	}{
		{"unknown context", func() error {
			_, err := c.RunCode(t.Context(), api.CodeRequest{Code: "1", Context: "other"})
			return err
		}, api.ErrNotFound},
		{"delete unknown", func() error { return c.DeleteContext(t.Context(), "other") }, api.ErrNotFound},
		{"restart unknown", func() error { _, err := c.RestartContext(t.Context(), "other"); return err }, api.ErrNotFound},
		{"bad language", func() error {
			_, err := c.RunCode(t.Context(), api.CodeRequest{Code: "1", Language: "cobol"})
			return err
		}, api.ErrInvalid},
		{"duplicate", func() error {
			_, err := c.CreateContext(t.Context(), api.CreateContextRequest{Name: "default"})
			return err
		}, api.ErrConflict},
		{"bad name", func() error {
			_, err := c.CreateContext(t.Context(), api.CreateContextRequest{Name: "no spaces"})
			return err
		}, api.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.do(); !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
}
