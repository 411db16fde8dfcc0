package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/warrenhq/warren/api"
)

const (
	// maxExecBody bounds an exec request (its stdin included).
	maxExecBody = 64 << 20
	// readChunk is the size of one read from an output pipe, so also the
	// most data one NDJSON line carries (plus up to 3 bytes of a UTF-8
	// sequence held over from the previous read).
	readChunk = 32 << 10
	// maxFinalDrain bounds what is read from a pipe after the cut-off, when
	// a background process may still be writing to it.
	maxFinalDrain = 1 << 20
	// Exit codes a shell would give.
	exitTimedOut     = 124
	exitCannotRun    = 126
	exitNotFound     = 127
	exitSignalOffset = 128
	ndjson           = "application/x-ndjson"
)

// execSpec is a validated exec request.
type execSpec struct {
	path    string // resolved argv[0]; empty when not found
	argv    []string
	dir     string // "" is the agent's own working directory
	env     []string
	stdin   string
	timeout time.Duration // 0 is none
	// cannotRun, when set, is why the command can't be started; the
	// request still succeeds, with an exit code like a shell's.
	cannotRun *startError
}

// startError is a command that could not be started: it exits with code
// and prints msg on stderr, as a shell would.
type startError struct {
	code int
	msg  string
}

func (a *Agent) handleExec(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxExecBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeErr(w, errorf(api.CodeInvalid, "exec request is larger than %d bytes; pass big inputs as files", tooBig.Limit))
			return
		}
		writeErr(w, errorf(api.CodeInvalid, "reading exec request: %v", err))
		return
	}
	var req api.ExecRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeErr(w, errorf(api.CodeInvalid, "invalid JSON body: %v", err))
		return
	}
	if req.Shell != "" {
		if req.Background {
			writeErr(w, errShellAndBackground)
			return
		}
		a.handleShellExec(w, r, req)
		return
	}
	spec, err := a.prepare(req)
	if err != nil {
		writeErr(w, err)
		return
	}
	if req.Background {
		job, err := a.startJob(req, spec)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusAccepted, job)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()

	if acceptsNDJSON(r) {
		a.execStream(ctx, cancel, w, spec)
		return
	}
	res, err := a.execBuffered(ctx, spec)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func acceptsNDJSON(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			mt, _, _ := strings.Cut(part, ";")
			if strings.EqualFold(strings.TrimSpace(mt), ndjson) {
				return true
			}
		}
	}
	return false
}

// checkExecRequest checks what every exec needs: a command, and a sane
// timeout.
func checkExecRequest(req api.ExecRequest) error {
	switch {
	case len(req.Cmd) > 0 && req.Command != "":
		return errorf(api.CodeInvalid, "both cmd and command are set; set cmd (an argv) or command (a /bin/sh -c string), not both")
	case len(req.Cmd) == 0 && req.Command == "":
		return errorf(api.CodeInvalid, "neither cmd nor command is set; set cmd (an argv) or command (a /bin/sh -c string)")
	case math.IsNaN(req.TimeoutS) || req.TimeoutS < 0:
		return errorf(api.CodeInvalid, "timeout_s must be 0 (none) or a positive number of seconds, not %v", req.TimeoutS)
	}
	return nil
}

// timeoutOf turns timeout_s into a duration; 0 is none.
func timeoutOf(s float64) time.Duration {
	if s <= 0 {
		return 0
	}
	return time.Duration(min(s, 1e9) * float64(time.Second)) // 1e9 s: 31 years
}

// prepare validates req and resolves what it runs.
func (a *Agent) prepare(req api.ExecRequest) (*execSpec, error) {
	if err := checkExecRequest(req); err != nil {
		return nil, err
	}
	spec := &execSpec{argv: req.Cmd, dir: req.Cwd, stdin: req.Stdin}
	if req.Command != "" {
		spec.argv = []string{"/bin/sh", "-c", req.Command}
	}
	if spec.argv[0] == "" {
		return nil, errorf(api.CodeInvalid, "cmd[0] is empty; it must name the program to run")
	}
	for i, arg := range spec.argv {
		if strings.IndexByte(arg, 0) >= 0 {
			return nil, errorf(api.CodeInvalid, "cmd[%d] contains a NUL byte", i)
		}
	}
	spec.timeout = timeoutOf(req.TimeoutS)
	if spec.dir != "" {
		if err := checkDir(spec.dir); err != nil {
			return nil, err
		}
	}
	env, err := mergeEnv(a.cfg.Env, req.Env)
	if err != nil {
		return nil, err
	}
	spec.env = env
	path, err := lookPath(spec.argv[0], envValue(env, "PATH"), spec.dir)
	if err != nil {
		spec.cannotRun = &startError{code: exitNotFound, msg: fmt.Sprintf("warren-agent: %s: %v\n", spec.argv[0], err)}
	}
	spec.path = path
	return spec, nil
}

// mergeEnv returns base with over's variables added or replaced; new ones
// come last, sorted.
func mergeEnv(base []string, over map[string]string) ([]string, error) {
	if len(over) == 0 {
		return base, nil
	}
	for k, v := range over {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return nil, errorf(api.CodeInvalid, "env %q: names must be non-empty without '=' or NUL, values without NUL", k)
		}
	}
	out := make([]string, 0, len(base)+len(over))
	seen := make(map[string]bool, len(over))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if v, ok := over[k]; ok {
			if !seen[k] {
				out = append(out, k+"="+v)
				seen[k] = true
			}
			continue
		}
		out = append(out, kv)
	}
	var added []string
	for k, v := range over {
		if !seen[k] {
			added = append(added, k+"="+v)
		}
	}
	slices.Sort(added)
	return append(out, added...), nil
}

func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

var errNotInPath = errors.New("command not found")

// lookPath resolves file like a shell does, with pathEnv as PATH; a name
// with a slash is used as it is (relative to dir). Relative PATH entries are
// relative to dir.
func lookPath(file, pathEnv, dir string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, file)
		if !filepath.IsAbs(p) && dir != "" {
			p = filepath.Join(dir, p)
		}
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errNotInPath
}

// process is a started command and the parent's ends of its pipes.
type process struct {
	child          *child
	stdout, stderr *os.File
	stdin          *os.File // nil when the command reads /dev/null
}

// start starts spec in its own process group. A command that can't be
// executed is a *startError; anything else is an internal failure.
func (a *Agent) start(spec *execSpec) (*process, error) { return a.startProcess(spec, false) }

// startProcess starts spec. A job is a session of its own whose stdin is
// always a pipe; anything else is a process group of its own whose stdin is
// a pipe only when spec has stdin to give it.
func (a *Agent) startProcess(spec *execSpec, job bool) (*process, error) {
	if spec.cannotRun != nil {
		return nil, spec.cannotRun
	}
	p := &process{}
	var closeOnErr []*os.File
	fail := func(err error) (*process, error) {
		for _, f := range closeOnErr {
			f.Close()
		}
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return fail(fmt.Errorf("creating stdout pipe: %w", err))
	}
	closeOnErr = append(closeOnErr, outR, outW)
	errR, errW, err := os.Pipe()
	if err != nil {
		return fail(fmt.Errorf("creating stderr pipe: %w", err))
	}
	closeOnErr = append(closeOnErr, errR, errW)
	stdinFd := a.devNull.Fd()
	var inR, inW *os.File
	if spec.stdin != "" || job {
		if inR, inW, err = os.Pipe(); err != nil {
			return fail(fmt.Errorf("creating stdin pipe: %w", err))
		}
		closeOnErr = append(closeOnErr, inR, inW)
		stdinFd = inR.Fd()
	}
	// Fd puts the child's ends in blocking mode, which is what it expects;
	// the parent's ends stay non-blocking, under the runtime poller.
	attr := &syscall.ProcAttr{
		Dir:   spec.dir,
		Env:   spec.env,
		Files: []uintptr{stdinFd, outW.Fd(), errW.Fd()},
		Sys:   &syscall.SysProcAttr{Setpgid: !job, Setsid: job},
	}
	c, err := a.reaper.start(spec.path, spec.argv, attr)
	if err != nil {
		var errno syscall.Errno
		if errors.As(err, &errno) {
			switch errno {
			case syscall.ENOENT, syscall.ENOTDIR, syscall.ELOOP, syscall.ENAMETOOLONG:
				return fail(&startError{code: exitNotFound, msg: fmt.Sprintf("warren-agent: %s: %v\n", spec.argv[0], err)})
			case syscall.EACCES, syscall.EPERM, syscall.ENOEXEC, syscall.EISDIR, syscall.ETXTBSY:
				return fail(&startError{code: exitCannotRun, msg: fmt.Sprintf("warren-agent: %s: %v\n", spec.argv[0], err)})
			}
		}
		return fail(fmt.Errorf("starting %s: %w", spec.argv[0], err))
	}
	outW.Close()
	errW.Close()
	if inR != nil {
		inR.Close()
	}
	p.child, p.stdout, p.stderr, p.stdin = c, outR, errR, inW
	return p, nil
}

func (e *startError) Error() string { return strings.TrimSpace(e.msg) }

// sink receives a command's output, from one goroutine per stream.
type sink interface {
	write(b []byte)
	// flush sends what write held back; called once, at the end.
	flush()
}

// outcome is how a command ended.
type outcome struct {
	exitCode int
	timedOut bool
	err      error // reading its output failed
	duration time.Duration
}

// run waits for p: it writes stdin, pumps stdout and stderr into the sinks,
// kills the process group at the timeout or when ctx ends, and returns once
// the command has exited and its output is read.
//
// After the command exits, its pipes reach EOF unless a process it left
// behind (a background job) still holds them; the agent then keeps reading
// for DrainGrace, takes what is already buffered in the pipes, and stops.
func (a *Agent) run(ctx context.Context, spec *execSpec, p *process, stdout, stderr sink) outcome {
	start := time.Now()
	pumps := [2]*pump{{f: p.stdout, sink: stdout}, {f: p.stderr, sink: stderr}}
	var wg sync.WaitGroup
	for _, pm := range pumps {
		wg.Go(pm.run)
	}
	pumped := make(chan struct{})
	go func() { wg.Wait(); close(pumped) }()
	if p.stdin != nil {
		go func() {
			_, _ = io.WriteString(p.stdin, spec.stdin) // EPIPE when the command doesn't read it all
			p.stdin.Close()
		}()
	}

	var o outcome
	var timeout <-chan time.Time
	if spec.timeout > 0 {
		t := time.NewTimer(spec.timeout)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-p.child.done:
	case <-ctx.Done():
		p.child.killGroup()
		<-p.child.done
	case <-timeout:
		o.timedOut = true
		p.child.killGroup()
		<-p.child.done
	}

	grace := time.NewTimer(a.cfg.DrainGrace)
	select {
	case <-pumped:
	case <-grace.C:
		pumps[0].cut()
		pumps[1].cut()
		<-pumped
	case <-ctx.Done():
		p.child.killGroup() // what the command left running in its group
		pumps[0].cut()
		pumps[1].cut()
		<-pumped
	}
	grace.Stop()
	p.stdout.Close()
	p.stderr.Close()
	if p.stdin != nil {
		p.stdin.Close() // unblocks a writer the command never read from
	}
	stdout.flush()
	stderr.flush()

	ws := p.child.status
	switch {
	case o.timedOut:
		o.exitCode = exitTimedOut
	case ws.Exited():
		o.exitCode = ws.ExitStatus()
	case ws.Signaled():
		o.exitCode = exitSignalOffset + int(ws.Signal())
	default:
		o.exitCode = -1
	}
	o.err = errors.Join(pumps[0].err, pumps[1].err)
	o.duration = time.Since(start)
	return o
}

// pump copies one output pipe into a sink.
type pump struct {
	f    *os.File
	sink sink
	err  error
}

func (pm *pump) run() {
	buf := make([]byte, readChunk)
	for {
		n, err := pm.f.Read(buf)
		if n > 0 {
			pm.sink.write(buf[:n])
		}
		switch {
		case err == nil:
		case err == io.EOF:
			return
		case errors.Is(err, os.ErrDeadlineExceeded):
			pm.finalDrain(buf)
			return
		default:
			pm.err = fmt.Errorf("reading output: %w", err)
			return
		}
	}
}

// cut makes the pump stop once the pipe is empty, even without EOF.
func (pm *pump) cut() { _ = pm.f.SetReadDeadline(time.Now()) }

// finalDrain takes what is already in the pipe without waiting for more.
func (pm *pump) finalDrain(buf []byte) {
	if pm.f.SetReadDeadline(time.Time{}) != nil {
		return
	}
	rc, err := pm.f.SyscallConn()
	if err != nil {
		return
	}
	for total := 0; total < maxFinalDrain; {
		var n int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			n, rerr = syscall.Read(int(fd), buf)
			return true // never wait
		})
		if err != nil {
			return
		}
		if rerr == syscall.EINTR {
			continue
		}
		if rerr != nil || n <= 0 { // EAGAIN: empty; 0: EOF
			return
		}
		pm.sink.write(buf[:n])
		total += n
	}
}

// bufferSink keeps up to limit bytes and drops the rest.
type bufferSink struct {
	limit     int
	buf       []byte
	truncated bool
}

func (s *bufferSink) write(b []byte) {
	if room := s.limit - len(s.buf); len(b) > room {
		b = b[:room]
		s.truncated = true
	}
	if len(s.buf)+len(b) > cap(s.buf) {
		// Grow by doubling, but never past the limit.
		nc := min(max(2*cap(s.buf), len(s.buf)+len(b), 4096), s.limit)
		nb := make([]byte, len(s.buf), nc)
		copy(nb, s.buf)
		s.buf = nb
	}
	s.buf = append(s.buf, b...)
}

func (s *bufferSink) flush() {}

func (a *Agent) execBuffered(ctx context.Context, spec *execSpec) (api.ExecResult, error) {
	start := time.Now()
	p, err := a.start(spec)
	var se *startError
	if errors.As(err, &se) {
		return api.ExecResult{ExitCode: se.code, Stderr: se.msg, DurationMS: time.Since(start).Milliseconds()}, nil
	}
	if err != nil {
		return api.ExecResult{}, err
	}
	stdout := &bufferSink{limit: a.cfg.MaxOutput}
	stderr := &bufferSink{limit: a.cfg.MaxOutput}
	o := a.run(ctx, spec, p, stdout, stderr)
	a.log.Debug("exec", "argv", spec.argv, "exit_code", o.exitCode, "duration", o.duration)
	if o.err != nil {
		return api.ExecResult{}, fmt.Errorf("running %s: %w", spec.argv[0], o.err)
	}
	// Invalid UTF-8 becomes U+FFFD when the result is encoded.
	return api.ExecResult{
		ExitCode:   o.exitCode,
		Stdout:     string(stdout.buf),
		Stderr:     string(stderr.buf),
		DurationMS: o.duration.Milliseconds(),
		TimedOut:   o.timedOut,
		Truncated:  stdout.truncated || stderr.truncated,
	}, nil
}

// streamWriter writes NDJSON events to the client, one flushed line each.
// When a write fails (the client is gone) it calls onFail and drops the rest.
type streamWriter struct {
	mu     sync.Mutex
	w      http.ResponseWriter
	rc     *http.ResponseController
	buf    bytes.Buffer
	enc    *json.Encoder
	failed bool
	onFail func()
}

func newStreamWriter(w http.ResponseWriter, onFail func()) *streamWriter {
	sw := &streamWriter{w: w, rc: http.NewResponseController(w), onFail: onFail}
	sw.enc = json.NewEncoder(&sw.buf)
	sw.enc.SetEscapeHTML(false)
	return sw
}

func (sw *streamWriter) send(ev api.ExecEvent) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.failed {
		return
	}
	sw.buf.Reset()
	err := sw.enc.Encode(ev)
	if err == nil {
		_, err = sw.w.Write(sw.buf.Bytes())
	}
	if err == nil {
		err = sw.rc.Flush()
	}
	if err != nil {
		sw.failed = true
		sw.onFail()
	}
}

// streamSink turns one output stream into events. It holds back a UTF-8
// sequence split by a read until the next read completes it, so valid text
// is never mangled at a chunk boundary.
type streamSink struct {
	sw     *streamWriter
	stderr bool
	carry  []byte
	joined []byte
}

func (s *streamSink) write(b []byte) {
	if len(s.carry) > 0 {
		s.joined = append(append(s.joined[:0], s.carry...), b...)
		b = s.joined
		s.carry = s.carry[:0]
	}
	n := completeUTF8(b)
	s.carry = append(s.carry, b[n:]...)
	if n > 0 {
		s.send(b[:n])
	}
}

func (s *streamSink) flush() {
	if len(s.carry) > 0 {
		s.send(s.carry)
		s.carry = nil
	}
}

func (s *streamSink) send(b []byte) {
	str := string(b)
	if s.stderr {
		s.sw.send(api.ExecEvent{Stderr: &str})
	} else {
		s.sw.send(api.ExecEvent{Stdout: &str})
	}
}

// completeUTF8 returns the length of b without a trailing UTF-8 sequence
// that is incomplete (but may be completed by more bytes).
func completeUTF8(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-(utf8.UTFMax-1); i-- {
		c := b[i]
		if c < utf8.RuneSelf {
			return len(b)
		}
		if utf8.RuneStart(c) {
			if utf8.FullRune(b[i:]) {
				return len(b)
			}
			return i
		}
	}
	return len(b)
}

func (a *Agent) execStream(ctx context.Context, cancel context.CancelFunc, w http.ResponseWriter, spec *execSpec) {
	p, err := a.start(spec)
	var se *startError
	if err != nil && !errors.As(err, &se) {
		writeErr(w, err)
		return
	}
	w.Header().Set("Content-Type", ndjson)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	sw := newStreamWriter(w, cancel)
	if se != nil {
		msg, code := se.msg, se.code
		sw.send(api.ExecEvent{Stderr: &msg})
		sw.send(api.ExecEvent{ExitCode: &code})
		return
	}
	_ = sw.rc.Flush() // the client knows the command started
	o := a.run(ctx, spec, p, &streamSink{sw: sw}, &streamSink{sw: sw, stderr: true})
	a.log.Debug("exec stream", "argv", spec.argv, "exit_code", o.exitCode, "duration", o.duration)
	if o.err != nil {
		code := -1
		sw.send(api.ExecEvent{Error: o.err.Error(), ExitCode: &code})
		return
	}
	sw.send(api.ExecEvent{ExitCode: &o.exitCode, TimedOut: o.timedOut})
}
