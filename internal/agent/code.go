package agent

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/warrenhq/warren/api"
)

// Code contexts.
//
// A context is a python3 process, a child of the agent in a session of its
// own, running code_driver.py (embedded here, written to StateDir/code/ when
// a context starts). The agent sends it requests on one pipe and reads
// answers on another (see the driver for the protocol); its stdout and
// stderr are pipes read like a named shell's (see delimited). A timeout, or
// the client going away, sends SIGINT to the interpreter, which raises
// KeyboardInterrupt in the running code and keeps the context's state; an
// interpreter that has not answered CodeInterruptGrace later is killed, and
// the context starts afresh on its next call.

//go:embed code_driver.py
var codeDriver []byte

// codeContexts is the set of code contexts.
type codeContexts struct {
	mu     sync.Mutex
	byName map[string]*codeContext

	driverOnce sync.Once
	driverPath string
	driverErr  error
}

type codeContext struct {
	name     string
	language string
	cwd      string
	env      []string
	created  time.Time
	turn     chan struct{} // held by the call running in the context

	mu    sync.Mutex
	in    *interp // nil until started, and after it was lost
	count int
	gone  bool
}

// interp is one running interpreter of a context.
type interp struct {
	proc    *child
	req     *os.File
	answers chan codeAnswer // closed when the interpreter closes its end
	out     *delimited
	errs    *delimited
}

// codeAnswer is the driver's answer to one request.
type codeAnswer struct {
	Ready     bool           `json:"ready"`
	Result    string         `json:"result"`
	Error     *api.CodeError `json:"error"`
	Truncated bool           `json:"truncated"`
}

// interpReadyTimeout bounds the start of an interpreter.
const interpReadyTimeout = time.Minute

func (cc *codeContext) info() api.CodeContext {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	c := api.CodeContext{Name: cc.name, Language: cc.language, Cwd: cc.cwd, CreatedAt: cc.created, ExecutionCount: cc.count}
	if cc.in != nil {
		c.PID = cc.in.proc.pid
	}
	return c
}

func (in *interp) exited() bool {
	select {
	case <-in.proc.done:
		return true
	default:
		return false
	}
}

// stop kills the interpreter and what it started, and waits for it.
func (in *interp) stop(grace time.Duration) {
	_ = syscall.Kill(-in.proc.pid, syscall.SIGKILL)
	<-in.proc.done
	in.req.Close()
	in.out.waitEOF(grace)
	in.errs.waitEOF(grace)
	in.out.end()
	in.errs.end()
}

// checkLanguage returns the canonical name of a supported language.
func checkLanguage(lang string) (string, error) {
	switch strings.ToLower(lang) {
	case "", "python", "python3", "py":
		return "python", nil
	}
	return "", errorf(api.CodeInvalid, "language %q is not supported; use python", lang)
}

func (a *Agent) writeDriver() (string, error) {
	cs := &a.contexts
	cs.driverOnce.Do(func() {
		dir := filepath.Join(a.cfg.StateDir, "code")
		cs.driverPath = filepath.Join(dir, "driver.py")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			cs.driverErr = err
			return
		}
		tmp := cs.driverPath + ".tmp"
		if err := os.WriteFile(tmp, codeDriver, 0o600); err != nil {
			cs.driverErr = err
			return
		}
		cs.driverErr = os.Rename(tmp, cs.driverPath)
	})
	return cs.driverPath, cs.driverErr
}

// startInterp starts the interpreter of cc.
func (a *Agent) startInterp(cc *codeContext) (*interp, error) {
	driver, err := a.writeDriver()
	if err != nil {
		return nil, fmt.Errorf("writing the code driver: %w", err)
	}
	python, err := lookPath("python3", envValue(cc.env, "PATH"), cc.cwd)
	if err != nil {
		return nil, errorf(api.CodeInvalid, "python3 is not installed in this sandbox (not in PATH); install it, or use an image that has it")
	}
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	pipe := func() (r, w *os.File, err error) {
		if r, w, err = os.Pipe(); err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	reqR, reqW, err := pipe()
	if err != nil {
		return nil, err
	}
	ansR, ansW, err := pipe()
	if err != nil {
		closeAll()
		return nil, err
	}
	outR, outW, err := pipe()
	if err != nil {
		closeAll()
		return nil, err
	}
	errR, errW, err := pipe()
	if err != nil {
		closeAll()
		return nil, err
	}
	attr := &syscall.ProcAttr{
		Dir:   cc.cwd,
		Env:   cc.env,
		Files: []uintptr{a.devNull.Fd(), outW.Fd(), errW.Fd(), reqR.Fd(), ansW.Fd()},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	}
	proc, err := a.reaper.start(python, []string{"python3", driver}, attr)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("starting python3: %w", err)
	}
	for _, f := range []*os.File{reqR, ansW, outW, errW} {
		f.Close()
	}
	in := &interp{
		proc:    proc,
		req:     reqW,
		answers: make(chan codeAnswer, 1),
		out:     newDelimited(outR),
		errs:    newDelimited(errR),
	}
	go func() {
		defer close(in.answers)
		defer ansR.Close()
		br := bufio.NewReaderSize(ansR, 64<<10)
		for {
			line, err := br.ReadBytes('\n')
			if err != nil {
				return
			}
			var ans codeAnswer
			if err := json.Unmarshal(line, &ans); err != nil {
				ans = codeAnswer{Error: &api.CodeError{Name: "AgentError", Value: fmt.Sprintf("undecodable answer from the code driver: %v", err)}}
			}
			in.answers <- ans
		}
	}()
	// Wait until the driver is ready: before, a SIGINT (a timeout) would
	// end it rather than interrupt the code.
	t := time.NewTimer(interpReadyTimeout)
	defer t.Stop()
	select {
	case ans, ok := <-in.answers:
		if !ok || !ans.Ready {
			in.stop(a.cfg.DrainGrace)
			return nil, fmt.Errorf("python3 failed to start (%s): %s", describeStatus(proc.status), strings.TrimSpace(string(in.errs.takePending())))
		}
	case <-t.C:
		in.stop(a.cfg.DrainGrace)
		return nil, errorf(api.CodeUnavailable, "python3 did not start within %v", interpReadyTimeout)
	}
	a.log.Debug("code context started", "context", cc.name, "pid", proc.pid)
	return in, nil
}

func (a *Agent) newContext(req api.CreateContextRequest) (*codeContext, error) {
	if err := checkName("context", req.Name); err != nil {
		return nil, err
	}
	lang, err := checkLanguage(req.Language)
	if err != nil {
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
	return &codeContext{name: req.Name, language: lang, cwd: req.Cwd, env: env,
		created: time.Now().UTC(), turn: make(chan struct{}, 1)}, nil
}

func errNoContext(name string) error {
	return errorf(api.CodeNotFound, "no code context %q; create it first: POST .../code/contexts {\"name\": %q}, or warren contexts create ID %s", name, name, name)
}

func (a *Agent) handleCode(w http.ResponseWriter, r *http.Request) {
	var req api.CodeRequest
	if err := readJSON(w, r, &req); err != nil {
		writeErr(w, err)
		return
	}
	lang, err := checkLanguage(req.Language)
	if err != nil {
		writeErr(w, err)
		return
	}
	if math.IsNaN(req.TimeoutS) || req.TimeoutS < 0 {
		writeErr(w, errorf(api.CodeInvalid, "timeout_s must be 0 (none) or a positive number of seconds, not %v", req.TimeoutS))
		return
	}
	name := req.Context
	if name == "" {
		name = api.DefaultContext
	}
	a.contexts.mu.Lock()
	cc := a.contexts.byName[name]
	if cc == nil && name == api.DefaultContext {
		cc, err = a.newContext(api.CreateContextRequest{Name: name, Language: lang})
		if err != nil {
			a.contexts.mu.Unlock()
			writeErr(w, err)
			return
		}
		a.contexts.byName[name] = cc
	}
	a.contexts.mu.Unlock()
	if cc == nil {
		writeErr(w, errNoContext(name))
		return
	}
	if cc.language != lang {
		writeErr(w, errorf(api.CodeInvalid, "context %q runs %s, not %s", name, cc.language, lang))
		return
	}
	res, err := a.runCode(r.Context(), cc, req.Code, timeoutOf(req.TimeoutS))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// runCode runs code in cc, waiting for the context's turn.
func (a *Agent) runCode(ctx context.Context, cc *codeContext, code string, timeout time.Duration) (api.CodeResult, error) {
	if strings.IndexByte(code, 0) >= 0 {
		return api.CodeResult{}, errorf(api.CodeInvalid, "code contains a NUL byte")
	}
	select {
	case cc.turn <- struct{}{}:
	case <-ctx.Done():
		return api.CodeResult{}, ctx.Err()
	}
	defer func() { <-cc.turn }()
	start := time.Now()
	cc.mu.Lock()
	if cc.gone {
		cc.mu.Unlock()
		return api.CodeResult{}, errNoContext(cc.name)
	}
	in := cc.in
	cc.mu.Unlock()
	if in != nil && in.exited() {
		in.stop(a.cfg.DrainGrace)
		in = nil
	}
	if in == nil {
		var err error
		if in, err = a.startInterp(cc); err != nil {
			return api.CodeResult{}, err
		}
	}
	cc.mu.Lock()
	if cc.gone { // deleted while the interpreter started
		cc.mu.Unlock()
		in.stop(a.cfg.DrainGrace)
		return api.CodeResult{}, errNoContext(cc.name)
	}
	cc.in = in
	cc.count++
	count := cc.count
	cc.mu.Unlock()

	stdout := &bufferSink{limit: a.cfg.MaxOutput}
	stderr := &bufferSink{limit: a.cfg.MaxOutput}
	mark := newMark()
	outFound, drop1 := in.out.begin(mark, stdout)
	errFound, drop2 := in.errs.begin(mark, stderr)
	res := api.CodeResult{ExecutionCount: count}
	resultCut := false
	finish := func() api.CodeResult {
		res.Stdout, res.Stderr = string(stdout.buf), string(stderr.buf)
		res.Truncated = drop1 || drop2 || stdout.truncated || stderr.truncated || resultCut
		res.DurationMS = time.Since(start).Milliseconds()
		return res
	}
	// lost ends a call whose interpreter died or had to be killed.
	lost := func(why string) (api.CodeResult, error) {
		in.stop(a.cfg.DrainGrace)
		cc.mu.Lock()
		if cc.in == in {
			cc.in = nil
		}
		cc.mu.Unlock()
		res.Error = &api.CodeError{Name: api.CodeErrorContextLost,
			Value: why + "; the context's state is lost, and it starts afresh on the next call"}
		return finish(), nil
	}

	body, _ := json.Marshal(map[string]string{"code": code, "mark": mark})
	if _, err := in.req.Write(append(body, '\n')); err != nil {
		<-in.proc.done
		return lost("the interpreter exited (" + describeStatus(in.proc.status) + ")")
	}
	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
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
		_ = syscall.Kill(in.proc.pid, syscall.SIGINT)
		graceTimer = time.NewTimer(a.cfg.CodeInterruptGrace)
		grace = graceTimer.C
	}
	done := ctx.Done()
	answers := in.answers
	for answers != nil || outFound != nil || errFound != nil {
		select {
		case ans, ok := <-answers:
			if !ok {
				<-in.proc.done
				return lost("the interpreter exited (" + describeStatus(in.proc.status) + ")")
			}
			res.Result, res.Error = ans.Result, ans.Error
			resultCut = ans.Truncated
			answers = nil
		case <-outFound:
			outFound = nil
		case <-errFound:
			errFound = nil
		case <-timer:
			res.TimedOut = true
			timer = nil
			interrupt()
		case <-done:
			done = nil
			interrupt()
		case <-grace:
			a.log.Warn("code did not stop at SIGINT; killing its interpreter", "context", cc.name, "pid", in.proc.pid)
			return lost(fmt.Sprintf("the code did not stop within %v of KeyboardInterrupt, so its interpreter was killed", a.cfg.CodeInterruptGrace))
		case <-in.proc.done:
			return lost("the interpreter exited (" + describeStatus(in.proc.status) + ")")
		}
	}
	return finish(), nil
}

func (a *Agent) handleContextCreate(w http.ResponseWriter, r *http.Request) {
	var req api.CreateContextRequest
	if err := readJSON(w, r, &req); err != nil {
		writeErr(w, err)
		return
	}
	cc, err := a.newContext(req)
	if err != nil {
		writeErr(w, err)
		return
	}
	a.contexts.mu.Lock()
	if _, ok := a.contexts.byName[req.Name]; ok {
		a.contexts.mu.Unlock()
		writeErr(w, errorf(api.CodeConflict, "code context %q already exists; run code in it, restart it or delete it", req.Name))
		return
	}
	a.contexts.byName[req.Name] = cc
	a.contexts.mu.Unlock()
	// Start the interpreter now, so that the first call finds it warm.
	in, err := a.startInterp(cc)
	if err != nil {
		a.contexts.mu.Lock()
		delete(a.contexts.byName, req.Name)
		a.contexts.mu.Unlock()
		writeErr(w, err)
		return
	}
	cc.mu.Lock()
	cc.in = in
	cc.mu.Unlock()
	writeJSON(w, http.StatusCreated, cc.info())
}

func (a *Agent) handleContextList(w http.ResponseWriter, r *http.Request) {
	a.contexts.mu.Lock()
	list := api.ContextList{Contexts: make([]api.CodeContext, 0, len(a.contexts.byName))}
	for _, cc := range a.contexts.byName {
		list.Contexts = append(list.Contexts, cc.info())
	}
	a.contexts.mu.Unlock()
	slices.SortFunc(list.Contexts, func(x, y api.CodeContext) int { return strings.Compare(x.Name, y.Name) })
	writeJSON(w, http.StatusOK, list)
}

func (a *Agent) context(name string) (*codeContext, error) {
	a.contexts.mu.Lock()
	defer a.contexts.mu.Unlock()
	cc := a.contexts.byName[name]
	if cc == nil {
		return nil, errNoContext(name)
	}
	return cc, nil
}

func (a *Agent) handleContextDelete(w http.ResponseWriter, r *http.Request) {
	cc, err := a.context(r.PathValue("name"))
	if err != nil {
		writeErr(w, err)
		return
	}
	a.contexts.mu.Lock()
	delete(a.contexts.byName, cc.name)
	a.contexts.mu.Unlock()
	cc.mu.Lock()
	cc.gone = true
	in := cc.in
	cc.in = nil
	cc.mu.Unlock()
	if in != nil {
		in.stop(a.cfg.DrainGrace) // a call running in it ends as lost
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleContextRestart replaces a context's interpreter by a fresh one; a
// call running in it ends first, as lost.
func (a *Agent) handleContextRestart(w http.ResponseWriter, r *http.Request) {
	cc, err := a.context(r.PathValue("name"))
	if err != nil {
		writeErr(w, err)
		return
	}
	cc.mu.Lock()
	in := cc.in
	cc.in = nil
	cc.mu.Unlock()
	if in != nil {
		in.stop(a.cfg.DrainGrace)
	}
	select {
	case cc.turn <- struct{}{}:
	case <-r.Context().Done():
		return
	}
	defer func() { <-cc.turn }()
	fresh, err := a.startInterp(cc)
	if err != nil {
		writeErr(w, err)
		return
	}
	cc.mu.Lock()
	if cc.in != nil { // a call started one meanwhile
		cc.in.stop(a.cfg.DrainGrace)
	}
	cc.in, cc.count = fresh, 0
	cc.mu.Unlock()
	writeJSON(w, http.StatusOK, cc.info())
}
