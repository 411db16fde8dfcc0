package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/sys/unix"

	"github.com/warrenhq/warren/api"
)

// The terminal.
//
// GET /pty?cols=&rows= upgrades to a WebSocket and runs an interactive login
// shell (bash -l, else sh -l) on a fresh pseudo-terminal, a session of its own
// with the terminal as its controlling one. Binary frames carry the
// terminal's bytes both ways. Text frames carry JSON (api.TerminalMessage):
// {"resize": {"cols": C, "rows": R}} from the client; {"exit_code": N} from
// the agent once the shell has exited and its output is sent, just before it
// closes the connection normally. A client that goes away hangs the terminal
// up: the shell gets SIGHUP, and SIGKILL a second later.

const (
	defaultCols   = 80
	defaultRows   = 24
	maxTermSize   = 10000
	ptyReadLimit  = 1 << 20
	ptyHangupWait = time.Second
)

func termSizeParam(r *http.Request, name string, def int) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxTermSize {
		return 0, errorf(api.CodeInvalid, "%s=%q: want a whole number from 1 to %d", name, v, maxTermSize)
	}
	return n, nil
}

// openPty returns a new pseudo-terminal's master and slave.
func openPty() (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	var n int
	err = control(master, func(fd int) error {
		if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
			return fmt.Errorf("unlocking the terminal: %w", err)
		}
		var err error
		n, err = unix.IoctlGetInt(fd, unix.TIOCGPTN)
		return err
	})
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	slave, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	return master, slave, nil
}

// control runs f on f's descriptor without taking it off the poller.
func control(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

func setWinsize(master *os.File, cols, rows int) error {
	return control(master, func(fd int) error {
		return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Col: uint16(cols), Row: uint16(rows)})
	})
}

func (a *Agent) handlePty(w http.ResponseWriter, r *http.Request) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		writeErr(w, errorf(api.CodeInvalid, "the terminal is a WebSocket: send an Upgrade: websocket request"))
		return
	}
	cols, err := termSizeParam(r, "cols", defaultCols)
	if err != nil {
		writeErr(w, err)
		return
	}
	rows, err := termSizeParam(r, "rows", defaultRows)
	if err != nil {
		writeErr(w, err)
		return
	}
	env := a.cfg.Env
	if envValue(env, "TERM") == "" {
		env = append(append([]string(nil), env...), "TERM=xterm-256color")
	}
	path, err := lookPath("bash", envValue(env, "PATH"), "")
	argv := []string{"-bash"}
	if err != nil {
		path, argv = "/bin/sh", []string{"-sh"}
	}
	master, slave, err := openPty()
	if err != nil {
		writeErr(w, fmt.Errorf("opening a terminal: %w", err))
		return
	}
	defer master.Close()
	if err := setWinsize(master, cols, rows); err != nil {
		slave.Close()
		writeErr(w, fmt.Errorf("sizing the terminal: %w", err))
		return
	}
	// argv[0] starting with '-' makes a login shell, as login(1) does.
	proc, err := a.reaper.start(path, argv, &syscall.ProcAttr{
		Env:   env,
		Files: []uintptr{slave.Fd(), slave.Fd(), slave.Fd()},
		Sys:   &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0},
	})
	slave.Close()
	if err != nil {
		writeErr(w, fmt.Errorf("starting %s: %w", path, err))
		return
	}
	hangup := func() {
		_ = syscall.Kill(-proc.pid, syscall.SIGHUP)
		select {
		case <-proc.done:
		case <-time.After(ptyHangupWait):
			_ = syscall.Kill(-proc.pid, syscall.SIGKILL)
			<-proc.done
		}
	}
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		// The daemon in front of the agent checks who calls.
		InsecureSkipVerify: true,
	})
	if err != nil {
		hangup()
		return // Accept has answered
	}
	conn.SetReadLimit(ptyReadLimit)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a.log.Debug("terminal opened", "pid", proc.pid, "cols", cols, "rows", rows)

	// Terminal output to the client.
	output := make(chan struct{})
	go func() {
		defer close(output)
		buf := make([]byte, readChunk)
		for {
			n, err := master.Read(buf)
			if n > 0 {
				if werr := conn.Write(ctx, websocket.MessageBinary, buf[:n]); werr != nil {
					return
				}
			}
			if err != nil { // EIO once the shell and its children have closed the terminal
				return
			}
		}
	}()
	// Client input to the terminal.
	clientGone := make(chan struct{})
	go func() {
		defer close(clientGone)
		for {
			typ, data, err := conn.Read(ctx)
			if err != nil {
				return
			}
			switch typ {
			case websocket.MessageBinary:
				if _, err := master.Write(data); err != nil {
					return
				}
			case websocket.MessageText:
				var m api.TerminalMessage
				if err := json.Unmarshal(data, &m); err != nil {
					continue // not ours to fail on
				}
				if m.Resize != nil && m.Resize.Cols > 0 && m.Resize.Rows > 0 &&
					m.Resize.Cols <= maxTermSize && m.Resize.Rows <= maxTermSize {
					_ = setWinsize(master, m.Resize.Cols, m.Resize.Rows)
				}
			}
		}
	}()

	select {
	case <-proc.done:
	case <-clientGone:
		hangup()
		conn.CloseNow()
		<-output
		a.log.Debug("terminal hung up by its client", "pid", proc.pid)
		return
	}
	// The shell has exited; send what it wrote last, unless something it
	// left running still holds the terminal.
	select {
	case <-output:
	case <-time.After(a.cfg.DrainGrace):
		_ = master.SetReadDeadline(time.Now())
		<-output
	}
	code := exitCodeOf(proc.status)
	b, _ := json.Marshal(api.TerminalMessage{ExitCode: &code})
	if err := conn.Write(ctx, websocket.MessageText, b); err == nil {
		_ = conn.Close(websocket.StatusNormalClosure, "")
	} else {
		conn.CloseNow()
	}
	// What the shell left in its session goes with the terminal.
	_ = syscall.Kill(-proc.pid, syscall.SIGHUP)
	a.log.Debug("terminal closed", "pid", proc.pid, "exit_code", code)
}

// exitCodeOf is a shell's exit code for a wait status.
func exitCodeOf(ws syscall.WaitStatus) int {
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		return exitSignalOffset + int(ws.Signal())
	}
	return -1
}
