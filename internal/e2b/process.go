package e2b

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/warrenhq/warren/api"
)

// process.Process is served with Warren's background jobs: a process is a
// job, its pid the job's pid. So a process outlives the stream that started
// it, as in envd, and its output is kept inside the sandbox.

type processConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args"`
	Envs map[string]string `json:"envs"`
	Cwd  *string           `json:"cwd,omitempty"`
}

type ptyJSON struct {
	Size *struct {
		Cols uint32 `json:"cols"`
		Rows uint32 `json:"rows"`
	} `json:"size"`
}

type startRequest struct {
	Process processConfig `json:"process"`
	PTY     *ptyJSON      `json:"pty"`
	Tag     *string       `json:"tag"`
	Stdin   *bool         `json:"stdin"`
}

type processSelector struct {
	PID *uint32 `json:"pid"`
	Tag *string `json:"tag"`
}

type processInfo struct {
	Config processConfig `json:"config"`
	PID    uint32        `json:"pid"`
	Tag    *string       `json:"tag,omitempty"`
}

// processEvent is a ProcessEvent: one of its fields is set.
type processEvent struct {
	Start     *startEvent `json:"start,omitempty"`
	Data      *dataEvent  `json:"data,omitempty"`
	End       *endEvent   `json:"end,omitempty"`
	Keepalive *struct{}   `json:"keepalive,omitempty"`
}

type startEvent struct {
	PID uint32 `json:"pid"`
}

// dataEvent carries bytes, which encoding/json writes as base64, as proto3
// JSON wants.
type dataEvent struct {
	Stdout []byte `json:"stdout,omitempty"`
	Stderr []byte `json:"stderr,omitempty"`
	PTY    []byte `json:"pty,omitempty"`
}

type endEvent struct {
	ExitCode int32   `json:"exitCode"`
	Exited   bool    `json:"exited"`
	Status   string  `json:"status"`
	Error    *string `json:"error,omitempty"`
}

type eventMessage struct {
	Event processEvent `json:"event"`
}

// keepaliveEvery is how often an idle stream carries a keepalive event.
const keepaliveEvery = 30 * time.Second

func (h *Handler) serveProcess(w http.ResponseWriter, r *http.Request, c *sandboxCall, method string) {
	var err error
	switch method {
	case "Start":
		h.start(w, r, c)
		return
	case "Connect":
		h.connectProcess(w, r, c)
		return
	case "List":
		err = h.listProcesses(w, r, c)
	case "SendSignal":
		err = h.sendSignal(w, r, c)
	case "SendInput":
		err = h.sendInput(w, r, c)
	case "CloseStdin":
		err = h.closeStdin(w, r, c)
	case "Update":
		err = h.update(w, r, c)
	default:
		err = errUnimplemented("process.Process/%s is not served by Warren", method)
	}
	if err != nil {
		writeUnaryError(w, err)
	}
}

func (h *Handler) start(w http.ResponseWriter, r *http.Request, c *sandboxCall) {
	var req startRequest
	if err := readEnvelope(r, &req); err != nil {
		streamError(w, err)
		return
	}
	if req.PTY != nil {
		h.startPty(w, r, c, req)
		return
	}
	if req.Process.Cmd == "" {
		streamError(w, &connectError{Code: "invalid_argument", Message: "process.cmd is required"})
		return
	}
	env := map[string]string{}
	for k, v := range h.m.ExtraEnv(c.id) {
		env[k] = v
	}
	for k, v := range req.Process.Envs {
		env[k] = v
	}
	ex := api.ExecRequest{Cmd: append([]string{req.Process.Cmd}, req.Process.Args...), Env: env}
	if req.Process.Cwd != nil {
		ex.Cwd = *req.Process.Cwd
	}
	// In envd the call's deadline bounds the process's life.
	if ms, err := strconv.ParseInt(r.Header.Get("Connect-Timeout-Ms"), 10, 64); err == nil && ms > 0 {
		ex.TimeoutS = float64(ms) / 1000
	}
	ctx := context.WithoutCancel(r.Context())
	job, err := c.agent.StartJob(ctx, ex)
	if err != nil {
		streamError(w, err)
		return
	}
	if req.Stdin == nil || !*req.Stdin {
		if _, err := c.agent.WriteJobStdin(ctx, job.ID, bytes.NewReader(nil), true); err != nil && job.StdinOpen {
			h.log.Debug("closing a process's stdin", "sandbox_id", c.id, "job", job.ID, "err", err)
		}
	}
	if req.Tag != nil {
		h.tags.Store(c.id+"/"+*req.Tag, uint32(job.PID))
	}
	h.follow(w, r, c, job, 0, 0)
}

// follow streams job's start event, its output from the given offsets,
// and its end, then the end of the stream.
func (h *Handler) follow(w http.ResponseWriter, r *http.Request, c *sandboxCall, job api.Job, outFrom, errFrom int64) {
	last := h.followers.add(c.id + "/" + job.ID)
	defer last()
	s := newStream(w)
	ctx := r.Context()
	if err := s.send(eventMessage{Event: processEvent{Start: &startEvent{PID: uint32(job.PID)}}}); err != nil {
		return
	}
	defer h.keepalive(s)()

	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, name := range []string{"stdout", "stderr"} {
		from := []int64{outFrom, errFrom}[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = h.pump(ctx, c, job.ID, name, from, s)
		}()
	}
	wg.Wait()
	if err := stoppedErr(ctx, c.id); err != nil {
		s.end(err)
		return
	}
	if ctx.Err() != nil {
		// The client went away; the process goes on, and is forgotten
		// once it ends unless someone follows it again.
		if last() {
			go h.forgetWhenEnded(c, job.ID)
		}
		return
	}
	for _, err := range errs {
		if err != nil {
			s.end(fmt.Errorf("following process %d: %w", job.PID, err))
			return
		}
	}
	// The output streams end when the job does; its record may trail by
	// a moment.
	var end api.Job
	for i := 0; ; i++ {
		var err error
		if end, err = c.agent.Job(ctx, job.ID); err != nil {
			s.end(err)
			return
		}
		if end.State != api.JobRunning || i == 200 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	_ = s.send(eventMessage{Event: processEvent{End: toEnd(end)}})
	s.end(nil)
	// envd forgets a process once it has ended; so does the agent, once
	// the last stream that follows it is done.
	if last() && end.State != api.JobRunning {
		if err := c.agent.DeleteJob(ctx, job.ID); err != nil {
			h.log.Debug("forgetting an ended process", "sandbox_id", c.id, "job", job.ID, "err", err)
		}
	}
}

func toEnd(j api.Job) *endEvent {
	e := &endEvent{Exited: j.State == api.JobExited}
	if j.ExitCode != nil {
		e.ExitCode = int32(*j.ExitCode)
	}
	switch {
	case j.State == api.JobKilled && j.Signal != "":
		e.Status = "signal: " + j.Signal
	case j.State == api.JobRunning:
		e.Status = "running"
	default:
		e.Status = "exit status " + strconv.Itoa(int(e.ExitCode))
	}
	if j.TimedOut {
		msg := "the process was killed at its timeout"
		e.Error = &msg
	}
	if j.Error != "" {
		e.Error = &j.Error
	}
	return e
}

// pump copies one output stream of a job into data events until the job
// ends.
func (h *Handler) pump(ctx context.Context, c *sandboxCall, jobID, name string, from int64, s *stream) error {
	rc, _, err := c.agent.JobOutput(ctx, jobID, name, from, true)
	if err != nil {
		return err
	}
	defer rc.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := rc.Read(buf)
		if n > 0 {
			d := &dataEvent{}
			chunk := bytes.Clone(buf[:n])
			if name == "stdout" {
				d.Stdout = chunk
			} else {
				d.Stderr = chunk
			}
			if serr := s.send(eventMessage{Event: processEvent{Data: d}}); serr != nil {
				return nil // the client went away
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// jobOf finds the running job a selector names.
func (h *Handler) jobOf(ctx context.Context, c *sandboxCall, sel processSelector) (api.Job, error) {
	if h.ptyOf(c, h.resolveTag(c, sel)) != nil {
		return api.Job{}, errUnimplemented("this is a PTY process: send it pty input, resize it or kill it")
	}
	var pid uint32
	switch {
	case sel.PID != nil:
		pid = *sel.PID
	case sel.Tag != nil:
		v, ok := h.tags.Load(c.id + "/" + *sel.Tag)
		if !ok {
			return api.Job{}, &connectError{Code: "not_found", Message: fmt.Sprintf("no process with tag %q", *sel.Tag)}
		}
		pid = v.(uint32)
	default:
		return api.Job{}, &connectError{Code: "invalid_argument", Message: "process: set pid or tag"}
	}
	jobs, err := c.agent.Jobs(ctx)
	if err != nil {
		return api.Job{}, err
	}
	for _, j := range jobs {
		if uint32(j.PID) == pid && j.State == api.JobRunning {
			return j, nil
		}
	}
	return api.Job{}, &connectError{Code: "not_found", Message: fmt.Sprintf("process with pid %d not found", pid)}
}

func (h *Handler) connectProcess(w http.ResponseWriter, r *http.Request, c *sandboxCall) {
	var req struct {
		Process processSelector `json:"process"`
	}
	if err := readEnvelope(r, &req); err != nil {
		streamError(w, err)
		return
	}
	j, err := h.jobOf(r.Context(), c, req.Process)
	if err != nil {
		streamError(w, err)
		return
	}
	// Like envd: what the process writes from now on.
	h.follow(w, r, c, j, j.StdoutBytes, j.StderrBytes)
}

func (h *Handler) listProcesses(w http.ResponseWriter, r *http.Request, c *sandboxCall) error {
	jobs, err := c.agent.Jobs(r.Context())
	if err != nil {
		return err
	}
	tags := map[uint32]string{}
	h.tags.Range(func(k, v any) bool {
		if key := k.(string); len(key) > len(c.id) && key[:len(c.id)+1] == c.id+"/" {
			tags[v.(uint32)] = key[len(c.id)+1:]
		}
		return true
	})
	out := struct {
		Processes []processInfo `json:"processes"`
	}{Processes: []processInfo{}}
	for _, j := range jobs {
		if j.State != api.JobRunning {
			continue
		}
		cfg := processConfig{Args: []string{}, Envs: map[string]string{}}
		if len(j.Cmd) > 0 {
			cfg.Cmd, cfg.Args = j.Cmd[0], append(cfg.Args, j.Cmd[1:]...)
		} else {
			cfg.Cmd, cfg.Args = "/bin/bash", []string{"-c", j.Command}
		}
		if j.Cwd != "" {
			cwd := j.Cwd
			cfg.Cwd = &cwd
		}
		info := processInfo{Config: cfg, PID: uint32(j.PID)}
		if t, ok := tags[uint32(j.PID)]; ok {
			info.Tag = &t
		}
		out.Processes = append(out.Processes, info)
	}
	out.Processes = append(out.Processes, h.listPtys(c)...)
	writeUnary(w, out)
	return nil
}

func (h *Handler) sendSignal(w http.ResponseWriter, r *http.Request, c *sandboxCall) error {
	var req struct {
		Process processSelector `json:"process"`
		Signal  string          `json:"signal"`
	}
	if err := readUnary(r, &req); err != nil {
		return err
	}
	sig := "SIGKILL"
	switch req.Signal {
	case "SIGNAL_SIGTERM", "15":
		sig = "SIGTERM"
	case "SIGNAL_SIGKILL", "9", "":
	default:
		return &connectError{Code: "invalid_argument", Message: fmt.Sprintf("signal %q: use SIGNAL_SIGTERM or SIGNAL_SIGKILL", req.Signal)}
	}
	if p := h.ptyOf(c, h.resolveTag(c, req.Process)); p != nil {
		p.kill() // the agent hangs the shell up
		writeUnary(w, struct{}{})
		return nil
	}
	j, err := h.jobOf(r.Context(), c, req.Process)
	if err != nil {
		return err
	}
	if _, err := c.agent.KillJob(r.Context(), j.ID, sig); err != nil {
		return err
	}
	writeUnary(w, struct{}{})
	return nil
}

func (h *Handler) sendInput(w http.ResponseWriter, r *http.Request, c *sandboxCall) error {
	var req struct {
		Process processSelector `json:"process"`
		Input   struct {
			Stdin []byte `json:"stdin"`
			PTY   []byte `json:"pty"`
		} `json:"input"`
	}
	if err := readUnary(r, &req); err != nil {
		return err
	}
	if p := h.ptyOf(c, h.resolveTag(c, req.Process)); p != nil {
		data := req.Input.PTY
		if data == nil {
			data = req.Input.Stdin
		}
		if err := p.write(r.Context(), websocket.MessageBinary, data); err != nil {
			return fmt.Errorf("writing to the terminal: %v: %w", err, api.ErrUnavailable)
		}
		writeUnary(w, struct{}{})
		return nil
	}
	if req.Input.PTY != nil {
		return &connectError{Code: "not_found", Message: "no PTY process with that pid"}
	}
	j, err := h.jobOf(r.Context(), c, req.Process)
	if err != nil {
		return err
	}
	if _, err := c.agent.WriteJobStdin(r.Context(), j.ID, bytes.NewReader(req.Input.Stdin), false); err != nil {
		return err
	}
	writeUnary(w, struct{}{})
	return nil
}

func (h *Handler) closeStdin(w http.ResponseWriter, r *http.Request, c *sandboxCall) error {
	var req struct {
		Process processSelector `json:"process"`
	}
	if err := readUnary(r, &req); err != nil {
		return err
	}
	j, err := h.jobOf(r.Context(), c, req.Process)
	if err != nil {
		return err
	}
	if _, err := c.agent.WriteJobStdin(r.Context(), j.ID, bytes.NewReader(nil), true); err != nil {
		return err
	}
	writeUnary(w, struct{}{})
	return nil
}

// forgetEvery is how often an unfollowed process is looked at, to forget
// it once it has ended.
const forgetEvery = 5 * time.Second

// forgetWhenEnded has the agent forget job once it has ended, if nobody
// follows it by then. It gives up when the agent stops answering (the
// sandbox paused or went away).
func (h *Handler) forgetWhenEnded(c *sandboxCall, jobID string) {
	ctx := context.Background()
	key := c.id + "/" + jobID
	for {
		time.Sleep(forgetEvery)
		j, err := c.agent.Job(ctx, jobID)
		if err != nil {
			return
		}
		if j.State == api.JobRunning {
			continue
		}
		if h.followers.count(key) == 0 {
			_ = c.agent.DeleteJob(ctx, jobID)
		}
		return
	}
}

// followers counts the streams following each job, so that the last one
// to finish, and only it, has the agent forget the job.
type followers struct {
	mu sync.Mutex
	n  map[string]int
}

// count is the number of streams following key.
func (f *followers) count(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n[key]
}

// add counts a follower of key; the returned func uncounts it (the first
// time it is called) and reports whether it was the last.
func (f *followers) add(key string) (last func() bool) {
	f.mu.Lock()
	if f.n == nil {
		f.n = map[string]int{}
	}
	f.n[key]++
	f.mu.Unlock()
	return sync.OnceValue(func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.n[key]--
		if f.n[key] > 0 {
			return false
		}
		delete(f.n, key)
		return true
	})
}
