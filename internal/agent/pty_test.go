package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/warrenhq/warren/api"
)

// dialPty opens the agent's terminal.
func dialPty(t *testing.T, c *Client, query string) *websocket.Conn {
	t.Helper()
	u := strings.Replace(c.BaseURL(), "http://", "ws://", 1) + "/pty" + query
	conn, _, err := websocket.Dial(t.Context(), u, nil)
	if err != nil {
		t.Fatalf("dialing %s: %v", u, err)
	}
	t.Cleanup(func() { conn.CloseNow() })
	return conn
}

// readTerminal reads until the exit code, returning the output.
func readTerminal(ctx context.Context, t *testing.T, conn *websocket.Conn) (string, int) {
	t.Helper()
	var out bytes.Buffer
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("reading the terminal: %v (output so far %q)", err, out.String())
		}
		if typ == websocket.MessageBinary {
			out.Write(data)
			continue
		}
		var m api.TerminalMessage
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatalf("bad control message %q: %v", data, err)
		}
		if m.ExitCode != nil {
			// Then a normal close.
			_, _, err := conn.Read(ctx)
			if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
				t.Errorf("after the exit code: got %v, want a normal close", err)
			}
			return out.String(), *m.ExitCode
		}
	}
}

func TestPty(t *testing.T) {
	c := startAgent(t, Config{})
	conn := dialPty(t, c, "?cols=100&rows=30")
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	resize, _ := json.Marshal(api.TerminalMessage{Resize: &api.TerminalSize{Cols: 123, Rows: 45}})
	if err := conn.Write(ctx, websocket.MessageText, resize); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the resize is applied before the next input is read
	cmd := "test -t 0 && echo is-a-tty; stty size; echo hi; exit 7\n"
	if err := conn.Write(ctx, websocket.MessageBinary, []byte(cmd)); err != nil {
		t.Fatal(err)
	}
	out, code := readTerminal(ctx, t, conn)
	if code != 7 {
		t.Errorf("exit code: got %d, want 7", code)
	}
	for _, want := range []string{"is-a-tty", "45 123", "hi"} {
		if !strings.Contains(out, want+"\r\n") {
			t.Errorf("output %q lacks %q", out, want)
		}
	}
}

func TestPtyHangup(t *testing.T) {
	c := startAgent(t, Config{})
	conn := dialPty(t, c, "")
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := conn.Write(ctx, websocket.MessageBinary, []byte("echo pid=$$.\n")); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	pid := 0
	re := regexp.MustCompile(`pid=([0-9]+)\.`)
	for pid == 0 {
		_, data, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("%v (output %q)", err, out.String())
		}
		out.Write(data)
		if m := re.FindStringSubmatch(out.String()); m != nil {
			pid = atoiOrZero(m[1])
		}
	}
	conn.CloseNow()
	if !waitGone(pid, 5*time.Second) {
		t.Errorf("the shell %d outlived its client", pid)
	}
}

func TestPtyBadSize(t *testing.T) {
	c := startAgent(t, Config{})
	_, resp, err := websocket.Dial(t.Context(), strings.Replace(c.BaseURL(), "http://", "ws://", 1)+"/pty?cols=0", nil)
	if err == nil || resp == nil || resp.StatusCode != 400 {
		t.Errorf("got %v, %v; want 400", resp, err)
	}
}
