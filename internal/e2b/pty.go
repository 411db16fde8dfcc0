package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/warrenhq/warren/api"
)

// A PTY process (Start with pty) is the agent's terminal: a WebSocket to
// its /pty, which runs bash -l on a fresh pseudo-terminal. The agent does
// not tell the shell's pid, so the process gets one of its own above any
// Linux pid (pid_max is at most 2^22); input, resize and kill name it.
// The terminal lives as long as the Start stream (and at most its
// Connect-Timeout-Ms): when the stream ends, the agent hangs the shell up.

var ptyPIDs atomic.Uint32

func init() { ptyPIDs.Store(1 << 22) }

type ptySession struct {
	pid  uint32
	conn *websocket.Conn
	mu   sync.Mutex // one writer at a time
	kill context.CancelFunc
}

func (p *ptySession) write(ctx context.Context, typ websocket.MessageType, b []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conn.Write(ctx, typ, b)
}

func ptyKey(sandboxID string, pid uint32) string {
	return sandboxID + "/" + strconv.FormatUint(uint64(pid), 10)
}

func (h *Handler) ptyOf(c *sandboxCall, sel processSelector) *ptySession {
	if sel.PID == nil {
		return nil
	}
	if v, ok := h.ptys.Load(ptyKey(c.id, *sel.PID)); ok {
		return v.(*ptySession)
	}
	return nil
}

func (h *Handler) startPty(w http.ResponseWriter, r *http.Request, c *sandboxCall, req startRequest) {
	cols, rows := uint32(80), uint32(24)
	if req.PTY.Size != nil && req.PTY.Size.Cols > 0 && req.PTY.Size.Rows > 0 {
		cols, rows = req.PTY.Size.Cols, req.PTY.Size.Rows
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if ms, err := strconv.ParseInt(r.Header.Get("Connect-Timeout-Ms"), 10, 64); err == nil && ms > 0 {
		ctx, cancel = context.WithTimeout(ctx, time.Duration(ms)*time.Millisecond)
		defer cancel()
	}
	u := strings.Replace(c.agent.BaseURL(), "http://", "ws://", 1) + fmt.Sprintf("/pty?cols=%d&rows=%d", cols, rows)
	conn, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: &http.Client{Transport: c.agent.Transport()}})
	if err != nil {
		streamError(w, fmt.Errorf("opening a terminal in sandbox %s: %v: %w", c.id, err, api.ErrUnavailable))
		return
	}
	conn.SetReadLimit(1 << 20)
	defer conn.CloseNow()
	sess := &ptySession{pid: ptyPIDs.Add(1), conn: conn, kill: cancel}
	key := ptyKey(c.id, sess.pid)
	h.ptys.Store(key, sess)
	defer h.ptys.Delete(key)
	if req.Tag != nil {
		h.tags.Store(c.id+"/"+*req.Tag, sess.pid)
	}

	s := newStream(w)
	if err := s.send(eventMessage{Event: processEvent{Start: &startEvent{PID: sess.pid}}}); err != nil {
		return
	}
	stop := h.keepalive(s)
	defer stop()
	for {
		typ, b, err := conn.Read(ctx)
		if err != nil {
			if serr := stoppedErr(r.Context(), c.id); serr != nil {
				s.end(serr)
				return
			}
			if r.Context().Err() != nil {
				return // the client went away: the terminal hangs up
			}
			// Killed (SendSignal), timed out, or the sandbox went away.
			e := &endEvent{ExitCode: -1, Status: "signal: killed"}
			if ctx.Err() == nil || errors.Is(ctx.Err(), context.DeadlineExceeded) {
				msg := err.Error()
				e.Error = &msg
			}
			_ = s.send(eventMessage{Event: processEvent{End: e}})
			s.end(nil)
			return
		}
		if typ == websocket.MessageBinary {
			if s.send(eventMessage{Event: processEvent{Data: &dataEvent{PTY: b}}}) != nil {
				return
			}
			continue
		}
		var m api.TerminalMessage
		if json.Unmarshal(b, &m) == nil && m.ExitCode != nil {
			_ = s.send(eventMessage{Event: processEvent{End: &endEvent{ExitCode: int32(*m.ExitCode), Exited: true,
				Status: "exit status " + strconv.Itoa(*m.ExitCode)}}})
			s.end(nil)
			conn.Close(websocket.StatusNormalClosure, "")
			return
		}
	}
}

// keepalive sends keepalive events on s until the returned func is called.
func (h *Handler) keepalive(s *stream) func() {
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(keepaliveEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				_ = s.send(eventMessage{Event: processEvent{Keepalive: &struct{}{}}})
			}
		}
	}()
	return func() { close(stop) }
}

// update serves Update: a terminal's new size.
func (h *Handler) update(w http.ResponseWriter, r *http.Request, c *sandboxCall) error {
	var req struct {
		Process processSelector `json:"process"`
		PTY     *ptyJSON        `json:"pty"`
	}
	if err := readUnary(r, &req); err != nil {
		return err
	}
	p := h.ptyOf(c, h.resolveTag(c, req.Process))
	if p == nil {
		return &connectError{Code: "not_found", Message: "no PTY process with that pid"}
	}
	if req.PTY != nil && req.PTY.Size != nil {
		b, _ := json.Marshal(api.TerminalMessage{Resize: &api.TerminalSize{Cols: int(req.PTY.Size.Cols), Rows: int(req.PTY.Size.Rows)}})
		if err := p.write(r.Context(), websocket.MessageText, b); err != nil {
			return fmt.Errorf("resizing the terminal: %v: %w", err, api.ErrUnavailable)
		}
	}
	writeUnary(w, struct{}{})
	return nil
}

// resolveTag turns a tag selector into a pid one, where the tag is known.
func (h *Handler) resolveTag(c *sandboxCall, sel processSelector) processSelector {
	if sel.PID == nil && sel.Tag != nil {
		if v, ok := h.tags.Load(c.id + "/" + *sel.Tag); ok {
			pid := v.(uint32)
			sel.PID = &pid
		}
	}
	return sel
}

// listPtys lists the open terminals of a sandbox.
func (h *Handler) listPtys(c *sandboxCall) []processInfo {
	var out []processInfo
	h.ptys.Range(func(k, v any) bool {
		if strings.HasPrefix(k.(string), c.id+"/") {
			out = append(out, processInfo{PID: v.(*ptySession).pid,
				Config: processConfig{Cmd: "/bin/bash", Args: []string{"-i", "-l"}, Envs: map[string]string{}}})
		}
		return true
	})
	return out
}
