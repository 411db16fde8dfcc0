package agent

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/warrenhq/warren/api"
)

// Named shells.
//
// A shell is one bash process, a child of the agent in a session of its own,
// started interactive (bash --norc --noprofile --noediting -i) with three
// pipes: its stdin carries commands from the agent, its stdout and stderr
// come back to it. Interactive, because that is the bash that survives a
// SIGINT: it drops the command line it was running and reads the next, as at
// a terminal's ^C, while a non-interactive bash would exit.
//
// A call sends bash one line, the command quoted in it:
//
//	__warren_mark=MARK; __warren_cmd=$'COMMAND'; [cd DIR &&] [VAR=value ...] . RUN </dev/null; __warren_done
//
// RUN is a file written once per shell that holds `eval "$__warren_cmd"`.
// Sourcing it runs the command in the shell itself (so cd, export,
// functions and aliases persist) but not as interactive input (so bash
// prints no job numbers for `&`), and eval keeps any syntax error of the
// command to the command. No file is written per call: under gVisor,
// creating one costs more than the rest of the call.
// __warren_done prints a marker with the exit status to saved copies of the
// shell's stdout and stderr pipes; it also runs as PROMPT_COMMAND, so that a
// line cut short by SIGINT still ends with a marker (status 130). The agent
// reads each pipe up to the call's marker (see delimited).
//
// A timeout, or the client going away, sends SIGINT to the shell's process
// group: the foreground command gets it and bash returns to its prompt;
// background jobs started with & ignore it, as they do without job control.
// A shell that is still busy ShellInterruptGrace later is killed.

// shellInit is the first line a new shell runs. Its marker says the shell is
// ready; what it printed before (bash's warnings about job control) is
// dropped.
const shellInit = `PS1=''; PS2=''; PS0=''; PS4='+ '; unset HISTFILE MAILCHECK MAIL PROMPT_COMMAND; ` +
	`set +o history +H; shopt -s expand_aliases; exec 61>&1 62>&2; ` +
	`__warren_done() { local s=$?; [ -n "$__warren_mark" ] || return $s; ` +
	`printf '\036W:%s:%d\036' "$__warren_mark" "$s" >&61; printf '\036W:%s\036' "$__warren_mark" >&62; ` +
	`__warren_mark=; unset __warren_cmd; return $s; }; PROMPT_COMMAND=__warren_done; __warren_mark=`

// shellRun is the file a call sources; see above.
const shellRun = "eval \"$__warren_cmd\"\n"

// shellReadyTimeout bounds the start of a shell.
const shellReadyTimeout = 20 * time.Second

var (
	nameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
	envRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

func checkName(kind, name string) error {
	if !nameRE.MatchString(name) || name == "." || name == ".." {
		return errorf(api.CodeInvalid, "%s name %q: use 1 to 64 of A-Z a-z 0-9 . _ -", kind, name)
	}
	return nil
}

// shells is the set of named shells.
type shells struct {
	mu     sync.Mutex
	byName map[string]*shell
}

// shell is one named shell.
type shell struct {
	name    string
	dir     string // its files: run, stdin
	created time.Time
	proc    *child
	cmds    *os.File // bash's stdin
	out     *delimited
	errs    *delimited
	// turn is held by the call running in the shell; calls queue on it.
	turn chan struct{}

	mu    sync.Mutex
	calls int
	busy  bool
	gone  bool // exited or deleted
}

func (sh *shell) info() api.Shell {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return api.Shell{Name: sh.name, PID: sh.proc.pid, CreatedAt: sh.created, Calls: sh.calls, Busy: sh.busy}
}

// exited reports whether bash has exited.
func (sh *shell) exited() bool {
	select {
	case <-sh.proc.done:
		return true
	default:
		return false
	}
}

// kill ends the shell and everything in its process group.
func (sh *shell) kill() {
	_ = syscall.Kill(-sh.proc.pid, syscall.SIGKILL)
}

func (a *Agent) handleShellCreate(w http.ResponseWriter, r *http.Request) {
	var req api.CreateShellRequest
	if err := readJSON(w, r, &req); err != nil {
		writeErr(w, err)
		return
	}
	sh, err := a.createShell(r.Context(), req)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, sh.info())
}

func (a *Agent) createShell(ctx context.Context, req api.CreateShellRequest) (*shell, error) {
	if err := checkName("shell", req.Name); err != nil {
		return nil, err
	}
	if req.Cwd != "" {
		if err := checkDir(req.Cwd); err != nil {
			return nil, err
		}
	}
	env, err := mergeEnv(a.cfg.Env, req.Env)
	if err != nil {
		return nil, err
	}
	bash, err := lookPath("bash", envValue(env, "PATH"), req.Cwd)
	if err != nil {
		return nil, errorf(api.CodeInvalid, "named shells need bash, which is not installed in this sandbox (no bash in PATH)")
	}

	a.shells.mu.Lock()
	if _, ok := a.shells.byName[req.Name]; ok {
		a.shells.mu.Unlock()
		return nil, errorf(api.CodeConflict, "shell %q already exists; run commands in it with exec shell: %q, or delete it first", req.Name, req.Name)
	}
	// Reserve the name while bash starts.
	a.shells.byName[req.Name] = nil
	a.shells.mu.Unlock()
	sh, err := a.startShell(ctx, req.Name, bash, req.Cwd, env)
	a.shells.mu.Lock()
	if err != nil {
		delete(a.shells.byName, req.Name)
	} else {
		a.shells.byName[req.Name] = sh
	}
	a.shells.mu.Unlock()
	return sh, err
}

func (a *Agent) startShell(ctx context.Context, name, bash, cwd string, env []string) (*shell, error) {
	dir := filepath.Join(a.cfg.StateDir, "shells", name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "run"), []byte(shellRun), 0o600); err != nil {
		return nil, fmt.Errorf("writing %s: %w", filepath.Join(dir, "run"), err)
	}
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	cmdR, cmdW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	files = append(files, cmdR, cmdW)
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll()
		return nil, err
	}
	files = append(files, outR, outW)
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll()
		return nil, err
	}
	files = append(files, errR, errW)
	attr := &syscall.ProcAttr{
		Dir:   cwd,
		Env:   env,
		Files: []uintptr{cmdR.Fd(), outW.Fd(), errW.Fd()},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	}
	proc, err := a.reaper.start(bash, []string{"bash", "--norc", "--noprofile", "--noediting", "-i"}, attr)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("starting bash: %w", err)
	}
	cmdR.Close()
	outW.Close()
	errW.Close()
	sh := &shell{
		name:    name,
		dir:     dir,
		created: time.Now().UTC(),
		proc:    proc,
		cmds:    cmdW,
		out:     newDelimited(outR),
		errs:    newDelimited(errR),
		turn:    make(chan struct{}, 1),
	}
	mark := newMark()
	outFound, _ := sh.out.begin(mark, discardSink{})
	errFound, _ := sh.errs.begin(mark, discardSink{})
	fail := func(err error) (*shell, error) {
		sh.kill()
		<-proc.done
		sh.out.end()
		sh.errs.end()
		cmdW.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	if _, err := cmdW.WriteString(shellInit + mark + "\n"); err != nil {
		return fail(fmt.Errorf("starting bash: %w", err))
	}
	t := time.NewTimer(shellReadyTimeout)
	defer t.Stop()
	for outFound != nil || errFound != nil {
		select {
		case <-outFound:
			outFound = nil
		case <-errFound:
			errFound = nil
		case <-proc.done:
			return fail(fmt.Errorf("bash exited as it started (%s)", describeStatus(proc.status)))
		case <-t.C:
			return fail(errorf(api.CodeUnavailable, "bash did not start within %v", shellReadyTimeout))
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}
	a.log.Debug("shell started", "name", name, "pid", proc.pid)
	return sh, nil
}

func describeStatus(ws syscall.WaitStatus) string {
	switch {
	case ws.Exited():
		return fmt.Sprintf("exit status %d", ws.ExitStatus())
	case ws.Signaled():
		return "killed by " + signalName(ws.Signal())
	}
	return "status " + strconv.Itoa(int(ws))
}

func (a *Agent) handleShellList(w http.ResponseWriter, r *http.Request) {
	a.shells.mu.Lock()
	list := api.ShellList{Shells: []api.Shell{}}
	var gone []string
	for name, sh := range a.shells.byName {
		if sh == nil {
			continue
		}
		if sh.exited() && !sh.info().Busy {
			gone = append(gone, name)
			continue
		}
		list.Shells = append(list.Shells, sh.info())
	}
	a.shells.mu.Unlock()
	for _, name := range gone {
		a.removeShell(name)
	}
	slices.SortFunc(list.Shells, func(x, y api.Shell) int { return strings.Compare(x.Name, y.Name) })
	writeJSON(w, http.StatusOK, list)
}

func (a *Agent) handleShellDelete(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	a.shells.mu.Lock()
	sh := a.shells.byName[name]
	a.shells.mu.Unlock()
	if sh == nil {
		writeErr(w, errNoShell(name))
		return
	}
	sh.kill()
	select {
	case <-sh.proc.done:
	case <-time.After(5 * time.Second):
		a.log.Warn("shell did not end after SIGKILL", "name", name, "pid", sh.proc.pid)
	}
	a.removeShell(name)
	w.WriteHeader(http.StatusNoContent)
}

// removeShell forgets a shell whose bash has ended and frees its files.
func (a *Agent) removeShell(name string) {
	a.shells.mu.Lock()
	sh := a.shells.byName[name]
	if sh != nil {
		delete(a.shells.byName, name)
	}
	a.shells.mu.Unlock()
	if sh == nil {
		return
	}
	sh.mu.Lock()
	sh.gone = true
	sh.mu.Unlock()
	sh.cmds.Close()
	// The pipes end once bash and what it left running are gone; a
	// background job that still holds them is not waited for.
	go func() {
		sh.out.waitEOF(time.Second)
		sh.errs.waitEOF(time.Second)
	}()
	os.RemoveAll(sh.dir)
}

func errNoShell(name string) error {
	return errorf(api.CodeNotFound, "no shell named %q; create it first: POST .../shells {\"name\": %q}, or warren shells create ID %s", name, name, name)
}

// shellCall is a validated exec in a named shell.
type shellCall struct {
	line    string // what bash is sent, without the mark
	command string
	stdin   string
	timeout time.Duration
}

// prepareShellCall validates an exec with shell set and builds its line.
func (a *Agent) prepareShellCall(req api.ExecRequest) (*shellCall, error) {
	if err := checkExecRequest(req); err != nil {
		return nil, err
	}
	if err := checkName("shell", req.Shell); err != nil {
		return nil, err
	}
	c := &shellCall{command: req.Command, stdin: req.Stdin, timeout: timeoutOf(req.TimeoutS)}
	if len(req.Cmd) > 0 {
		c.command = quoteArgv(req.Cmd)
	}
	if strings.IndexByte(c.command, 0) >= 0 {
		return nil, errorf(api.CodeInvalid, "the command contains a NUL byte")
	}
	var line strings.Builder
	if req.Cwd != "" {
		if err := checkDir(req.Cwd); err != nil {
			return nil, err
		}
		fmt.Fprintf(&line, "cd -- %s && ", bashQuote(req.Cwd))
	}
	keys := make([]string, 0, len(req.Env))
	for k, v := range req.Env {
		if !envRE.MatchString(k) || strings.IndexByte(v, 0) >= 0 {
			return nil, errorf(api.CodeInvalid, "env %q: in a shell, names must be shell identifiers ([A-Za-z_][A-Za-z0-9_]*) and values without NUL", k)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&line, "%s=%s ", k, bashQuote(req.Env[k]))
	}
	c.line = line.String()
	return c, nil
}

// execInShell runs a call in its named shell, waiting for the shell's turn.
func (a *Agent) execInShell(ctx context.Context, name string, c *shellCall, stdout, stderr sink) (outcome, bool, error) {
	a.shells.mu.Lock()
	sh := a.shells.byName[name]
	a.shells.mu.Unlock()
	if sh == nil {
		return outcome{}, false, errNoShell(name)
	}
	select {
	case sh.turn <- struct{}{}:
	case <-ctx.Done():
		return outcome{}, false, ctx.Err()
	}
	defer func() { <-sh.turn }()
	sh.mu.Lock()
	if sh.gone {
		sh.mu.Unlock()
		return outcome{}, false, errNoShell(name)
	}
	if sh.exited() {
		sh.mu.Unlock()
		a.removeShell(name)
		return outcome{}, false, errorf(api.CodeNotFound, "shell %q has exited (%s); create it again", name, describeStatus(sh.proc.status))
	}
	sh.busy = true
	sh.calls++
	sh.mu.Unlock()
	defer func() {
		sh.mu.Lock()
		sh.busy = false
		sh.mu.Unlock()
	}()

	o, truncated, err := a.runInShell(ctx, sh, c, stdout, stderr)
	if sh.exited() {
		a.removeShell(name)
	}
	return o, truncated, err
}

func (a *Agent) runInShell(ctx context.Context, sh *shell, c *shellCall, stdout, stderr sink) (outcome, bool, error) {
	start := time.Now()
	redirect := "</dev/null"
	if c.stdin != "" {
		stdinFile := filepath.Join(sh.dir, "stdin")
		if err := os.WriteFile(stdinFile, []byte(c.stdin), 0o600); err != nil {
			return outcome{}, false, fmt.Errorf("writing stdin for shell %s: %w", sh.name, err)
		}
		defer os.Remove(stdinFile)
		redirect = "<" + bashQuote(stdinFile)
	}
	mark := newMark()
	outFound, drop1 := sh.out.begin(mark, stdout)
	errFound, drop2 := sh.errs.begin(mark, stderr)
	line := "__warren_mark=" + mark + "; __warren_cmd=" + bashQuote(c.command) + "; " + c.line +
		". " + bashQuote(filepath.Join(sh.dir, "run")) + " " + redirect + "; __warren_done\n"
	var o outcome
	if _, err := sh.cmds.WriteString(line); err != nil {
		// bash is gone; what it said goes to the call.
		<-sh.proc.done
		return a.shellEnded(sh, start, stdout, stderr), drop1 || drop2, nil
	}

	var timeout <-chan time.Time
	if c.timeout > 0 {
		t := time.NewTimer(c.timeout)
		defer t.Stop()
		timeout = t.C
	}
	var (
		grace      <-chan time.Time
		graceTimer *time.Timer
	)
	defer func() {
		if graceTimer != nil {
			graceTimer.Stop()
		}
	}()
	interrupt := func() {
		if graceTimer != nil {
			return
		}
		_ = syscall.Kill(-sh.proc.pid, syscall.SIGINT)
		graceTimer = time.NewTimer(a.cfg.ShellInterruptGrace)
		grace = graceTimer.C
	}
	done := ctx.Done()
	status := ""
	for outFound != nil || errFound != nil {
		select {
		case status = <-outFound:
			outFound = nil
		case <-errFound:
			errFound = nil
		case <-timeout:
			o.timedOut = true
			timeout = nil
			interrupt()
		case <-done:
			done = nil
			interrupt()
		case <-grace:
			a.log.Warn("shell did not stop at SIGINT; killing it", "name", sh.name, "pid", sh.proc.pid)
			stderr.write([]byte(fmt.Sprintf("warren-agent: the command did not stop at SIGINT within %v; shell %q was killed\n", a.cfg.ShellInterruptGrace, sh.name)))
			sh.kill()
			<-sh.proc.done
			o2 := a.shellEnded(sh, start, stdout, stderr)
			o2.timedOut = o.timedOut
			if o2.timedOut {
				o2.exitCode = exitTimedOut
			}
			return o2, drop1 || drop2, nil
		case <-sh.proc.done:
			o2 := a.shellEnded(sh, start, stdout, stderr)
			o2.timedOut = o.timedOut
			return o2, drop1 || drop2, nil
		}
	}
	stdout.flush()
	stderr.flush()
	o.exitCode, _ = strconv.Atoi(strings.TrimPrefix(status, ":"))
	if o.timedOut {
		o.exitCode = exitTimedOut
	}
	o.duration = time.Since(start)
	return o, drop1 || drop2, nil
}

// shellEnded finishes a call whose bash exited (`exit`, a kill): what was
// left in its pipes goes to the call, and its exit status is the call's.
func (a *Agent) shellEnded(sh *shell, start time.Time, stdout, stderr sink) outcome {
	sh.out.waitEOF(a.cfg.DrainGrace)
	sh.errs.waitEOF(a.cfg.DrainGrace)
	sh.out.end()
	sh.errs.end()
	stdout.flush()
	stderr.flush()
	ws := sh.proc.status
	o := outcome{duration: time.Since(start)}
	switch {
	case ws.Exited():
		o.exitCode = ws.ExitStatus()
	case ws.Signaled():
		o.exitCode = exitSignalOffset + int(ws.Signal())
	default:
		o.exitCode = -1
	}
	return o
}

// bashQuote quotes s as one bash word: $'...' with backslashes, quotes and
// control characters escaped, so the result is a single line.
func bashQuote(s string) string {
	var b strings.Builder
	b.Grow(len(s) + len(s)/8 + 3)
	b.WriteString("$'")
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' || c == '\'':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\n':
			b.WriteString("\\n")
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, "\\x%02x", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// quoteArgv turns an argv into a shell command line that runs it.
func quoteArgv(argv []string) string {
	words := make([]string, len(argv))
	for i, arg := range argv {
		words[i] = shellWord(arg)
	}
	return strings.Join(words, " ")
}

// shellWord quotes s for a POSIX shell, leaving plain words alone.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// checkDir checks that dir is an existing directory.
func checkDir(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case err != nil:
		return errorf(api.CodeInvalid, "cwd %q: no such directory", dir)
	case !fi.IsDir():
		return errorf(api.CodeInvalid, "cwd %q is not a directory", dir)
	}
	return nil
}

var errShellAndBackground = errorf(api.CodeInvalid, "shell and background don't go together: a background job runs on its own; to leave a command running in a named shell, end it with &")

func (a *Agent) handleShellExec(w http.ResponseWriter, r *http.Request, req api.ExecRequest) {
	c, err := a.prepareShellCall(req)
	if err != nil {
		writeErr(w, err)
		return
	}
	a.shells.mu.Lock()
	sh := a.shells.byName[req.Shell]
	a.shells.mu.Unlock()
	if sh == nil {
		writeErr(w, errNoShell(req.Shell))
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if !acceptsNDJSON(r) {
		stdout := &bufferSink{limit: a.cfg.MaxOutput}
		stderr := &bufferSink{limit: a.cfg.MaxOutput}
		o, dropped, err := a.execInShell(ctx, req.Shell, c, stdout, stderr)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, api.ExecResult{
			ExitCode:   o.exitCode,
			Stdout:     string(stdout.buf),
			Stderr:     string(stderr.buf),
			DurationMS: o.duration.Milliseconds(),
			TimedOut:   o.timedOut,
			Truncated:  dropped || stdout.truncated || stderr.truncated,
		})
		return
	}
	w.Header().Set("Content-Type", ndjson)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	sw := newStreamWriter(w, cancel)
	_ = sw.rc.Flush()
	o, _, err := a.execInShell(ctx, req.Shell, c, &streamSink{sw: sw}, &streamSink{sw: sw, stderr: true})
	if err != nil {
		code := -1
		sw.send(api.ExecEvent{Error: err.Error(), ExitCode: &code})
		return
	}
	sw.send(api.ExecEvent{ExitCode: &o.exitCode, TimedOut: o.timedOut})
}
