package agent

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/warrenhq/warren/api"
)

// Background jobs.
//
// A job is a command started in a session of its own (setsid), whose stdout
// and stderr the agent copies into files under StateDir/jobs/ID/, inside the
// sandbox's root filesystem: so a job's output, like the job itself, is part
// of every checkpoint, snapshot and fork, and it outlives the client that
// started it. meta.json there holds the job's record (api.Job), written when
// it starts and when it ends.
//
// Each stream is kept as numbered segment files (stdout.0, stdout.1, ...) of
// JobOutputCap/2 bytes each; segment N holds stream offsets [N*seg, (N+1)*seg).
// Only the last two segments are kept, so a chatty job keeps between half of
// JobOutputCap and JobOutputCap of its latest output per stream on disk, and
// what is older is dropped (api.Job's StdoutDropped says how much). Offsets
// count from the stream's start, dropped bytes included, so an offset read
// earlier stays valid.
//
// A job's state turns from running to exited or killed only once its output
// is complete, so a client that sees the state change reads all of it.

const (
	// DefaultJobOutputCap bounds the output kept on disk per job stream.
	DefaultJobOutputCap = 64 << 20
	// maxEndedJobs is how many ended jobs are kept; older ones are removed
	// with their output.
	maxEndedJobs = 64
	jobIDChars   = "abcdefghijklmnopqrstuvwxyz0123456789"
	jobIDLen     = 8
	outputChunk  = 64 << 10
)

// jobs is the set of background jobs.
type jobs struct {
	mu   sync.Mutex
	byID map[string]*job
}

type job struct {
	id  string
	dir string

	mu    sync.Mutex
	info  api.Job
	proc  *child // nil when the job never started, or was loaded from disk
	ended chan struct{}

	stdinMu sync.Mutex
	stdin   *os.File // nil once closed

	out, errs *jobStream
}

// snapshot returns the job's record as the API shows it.
func (j *job) snapshot() api.Job {
	j.mu.Lock()
	info := j.info
	j.mu.Unlock()
	info.StdoutBytes, info.StdoutDropped = j.out.counts()
	info.StderrBytes, info.StderrDropped = j.errs.counts()
	return info
}

func (j *job) running() bool {
	select {
	case <-j.ended:
		return false
	default:
		return true
	}
}

// saveMeta writes the job's record to meta.json (atomically; no fsync, as
// for every write of the agent: checkpoints make the disk durable).
func (j *job) saveMeta() error { return j.saveRecord(j.snapshot()) }

// saveRecord writes rec as the job's record.
func (j *job) saveRecord(rec api.Job) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(j.dir, ".meta.json.tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(j.dir, "meta.json"))
}

func (js *jobs) newID() string {
	for {
		var b [jobIDLen]byte
		_, _ = rand.Read(b[:])
		for i := range b {
			b[i] = jobIDChars[int(b[i])%len(jobIDChars)]
		}
		id := "job-" + string(b[:])
		js.mu.Lock()
		_, taken := js.byID[id]
		js.mu.Unlock()
		if !taken {
			return id
		}
	}
}

func (js *jobs) get(id string) (*job, error) {
	js.mu.Lock()
	defer js.mu.Unlock()
	j := js.byID[id]
	if j == nil {
		return nil, errorf(api.CodeNotFound, "no job %q; list the jobs with GET .../jobs, or warren jobs ID", id)
	}
	return j, nil
}

// startJob starts spec as a background job and returns its record at once.
func (a *Agent) startJob(req api.ExecRequest, spec *execSpec) (api.Job, error) {
	id := a.jobs.newID()
	dir := filepath.Join(a.cfg.StateDir, "jobs", id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return api.Job{}, fmt.Errorf("creating %s: %w", dir, err)
	}
	command := req.Command
	if command == "" {
		command = quoteArgv(req.Cmd)
	}
	j := &job{
		id:  id,
		dir: dir,
		info: api.Job{
			ID: id, Command: command, Cmd: req.Cmd, Cwd: req.Cwd,
			State: api.JobRunning, StartedAt: time.Now().UTC(),
		},
		ended: make(chan struct{}),
		out:   newJobStream(dir, "stdout", a.cfg.JobOutputCap/2),
		errs:  newJobStream(dir, "stderr", a.cfg.JobOutputCap/2),
	}
	p, err := a.startProcess(spec, true)
	var se *startError
	switch {
	case errors.As(err, &se):
		// Like exec: the call succeeds, and the job has already ended
		// the way a shell would have.
		j.errs.write([]byte(se.msg))
		a.addJob(j)
		a.endJob(j, se.code, "", false, time.Now().UTC())
		return j.snapshot(), nil
	case err != nil:
		os.RemoveAll(dir)
		return api.Job{}, err
	}
	j.proc = p.child
	j.info.PID = p.child.pid
	if spec.stdin != "" {
		go func() {
			_, _ = io.WriteString(p.stdin, spec.stdin)
			p.stdin.Close()
		}()
	} else {
		j.stdin = p.stdin
		j.info.StdinOpen = true
	}
	a.addJob(j)
	if err := j.saveMeta(); err != nil {
		a.log.Warn("writing job record", "job", id, "err", err)
	}
	go a.runJob(j, p, spec.timeout)
	a.log.Debug("job started", "job", id, "pid", j.info.PID, "argv", spec.argv)
	return j.snapshot(), nil
}

func (a *Agent) addJob(j *job) {
	a.jobs.mu.Lock()
	a.jobs.byID[j.id] = j
	a.jobs.mu.Unlock()
}

// runJob copies the job's output to its files until it ends.
func (a *Agent) runJob(j *job, p *process, timeout time.Duration) {
	pumps := [2]*pump{{f: p.stdout, sink: j.out}, {f: p.stderr, sink: j.errs}}
	var wg sync.WaitGroup
	for _, pm := range pumps {
		wg.Go(pm.run)
	}
	pumped := make(chan struct{})
	go func() { wg.Wait(); close(pumped) }()

	timedOut := false
	if timeout > 0 {
		t := time.NewTimer(timeout)
		select {
		case <-p.child.done:
		case <-t.C:
			timedOut = true
			p.child.killGroup()
			<-p.child.done
		}
		t.Stop()
	} else {
		<-p.child.done
	}
	endedAt := time.Now().UTC()
	// As for exec: what the job left running may hold its pipes; take
	// what is there and stop.
	grace := time.NewTimer(a.cfg.DrainGrace)
	select {
	case <-pumped:
	case <-grace.C:
		pumps[0].cut()
		pumps[1].cut()
		<-pumped
	}
	grace.Stop()
	p.stdout.Close()
	p.stderr.Close()
	for _, pm := range pumps {
		if pm.err != nil {
			a.log.Warn("reading job output", "job", j.id, "err", pm.err)
		}
	}
	ws := p.child.status
	code, sig := 0, ""
	switch {
	case ws.Exited():
		code = ws.ExitStatus()
	case ws.Signaled():
		code, sig = exitSignalOffset+int(ws.Signal()), signalName(ws.Signal())
	default:
		code = -1
	}
	a.endJob(j, code, sig, timedOut, endedAt)
}

// endJob records how j ended, once its output is complete.
func (a *Agent) endJob(j *job, code int, sig string, timedOut bool, endedAt time.Time) {
	j.out.close()
	j.errs.close()
	j.stdinMu.Lock()
	if j.stdin != nil {
		j.stdin.Close()
		j.stdin = nil
	}
	j.stdinMu.Unlock()
	// The record reaches the disk before the API shows the job ended, so
	// an agent that starts over on this disk (a restore) never finds
	// running a job a client already saw end.
	rec := j.snapshot()
	rec.ExitCode = &code
	rec.Signal = sig
	rec.TimedOut = timedOut
	rec.EndedAt = &endedAt
	rec.StdinOpen = false
	rec.State = api.JobExited
	if sig != "" {
		rec.State = api.JobKilled
	}
	if err := j.saveRecord(rec); err != nil {
		a.log.Warn("writing job record", "job", j.id, "err", err)
	}
	j.mu.Lock()
	j.info.ExitCode, j.info.Signal, j.info.TimedOut = rec.ExitCode, rec.Signal, rec.TimedOut
	j.info.EndedAt, j.info.StdinOpen, j.info.State = rec.EndedAt, rec.StdinOpen, rec.State
	j.mu.Unlock()
	close(j.ended)
	a.log.Debug("job ended", "job", j.id, "exit_code", code, "signal", sig)
	a.pruneJobs()
}

// pruneJobs removes the oldest ended jobs beyond maxEndedJobs.
func (a *Agent) pruneJobs() {
	a.jobs.mu.Lock()
	var ended []*job
	for _, j := range a.jobs.byID {
		if !j.running() {
			ended = append(ended, j)
		}
	}
	if len(ended) <= maxEndedJobs {
		a.jobs.mu.Unlock()
		return
	}
	slices.SortFunc(ended, func(x, y *job) int { return x.info.StartedAt.Compare(y.info.StartedAt) })
	drop := ended[:len(ended)-maxEndedJobs]
	for _, j := range drop {
		delete(a.jobs.byID, j.id)
	}
	a.jobs.mu.Unlock()
	for _, j := range drop {
		os.RemoveAll(j.dir)
	}
}

// loadJobs reads the records of jobs an earlier agent of this sandbox
// started. A job that was still running when that agent ended is gone.
func (a *Agent) loadJobs() {
	root := filepath.Join(a.cfg.StateDir, "jobs")
	ents, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range ents {
		dir := filepath.Join(root, e.Name())
		b, err := os.ReadFile(filepath.Join(dir, "meta.json"))
		if err != nil {
			continue
		}
		var info api.Job
		if err := json.Unmarshal(b, &info); err != nil || info.ID != e.Name() {
			continue
		}
		if info.State == api.JobRunning {
			info.State = api.JobKilled
			info.StdinOpen = false
			info.Error = "the sandbox restarted while the job ran; how it ended is unknown"
		}
		j := &job{id: info.ID, dir: dir, info: info, ended: make(chan struct{}),
			out:  loadJobStream(dir, "stdout", a.cfg.JobOutputCap/2),
			errs: loadJobStream(dir, "stderr", a.cfg.JobOutputCap/2)}
		close(j.ended)
		a.jobs.byID[j.id] = j
	}
}

func (a *Agent) handleJobList(w http.ResponseWriter, r *http.Request) {
	a.jobs.mu.Lock()
	all := make([]*job, 0, len(a.jobs.byID))
	for _, j := range a.jobs.byID {
		all = append(all, j)
	}
	a.jobs.mu.Unlock()
	list := api.JobList{Jobs: make([]api.Job, 0, len(all))}
	for _, j := range all {
		list.Jobs = append(list.Jobs, j.snapshot())
	}
	slices.SortFunc(list.Jobs, func(x, y api.Job) int {
		if c := x.StartedAt.Compare(y.StartedAt); c != 0 {
			return c
		}
		return strings.Compare(x.ID, y.ID)
	})
	writeJSON(w, http.StatusOK, list)
}

func (a *Agent) handleJobGet(w http.ResponseWriter, r *http.Request) {
	j, err := a.jobs.get(r.PathValue("job"))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, j.snapshot())
}

func (a *Agent) handleJobDelete(w http.ResponseWriter, r *http.Request) {
	j, err := a.jobs.get(r.PathValue("job"))
	if err != nil {
		writeErr(w, err)
		return
	}
	if j.running() {
		writeErr(w, errorf(api.CodeConflict, "job %s is still running; kill it first", j.id))
		return
	}
	a.jobs.mu.Lock()
	delete(a.jobs.byID, j.id)
	a.jobs.mu.Unlock()
	os.RemoveAll(j.dir)
	w.WriteHeader(http.StatusNoContent)
}

func (a *Agent) handleJobOutput(w http.ResponseWriter, r *http.Request) {
	j, err := a.jobs.get(r.PathValue("job"))
	if err != nil {
		writeErr(w, err)
		return
	}
	q := r.URL.Query()
	var s *jobStream
	switch q.Get("stream") {
	case "", "stdout":
		s = j.out
	case "stderr":
		s = j.errs
	default:
		writeErr(w, errorf(api.CodeInvalid, "stream=%q: use stdout or stderr", q.Get("stream")))
		return
	}
	var off int64
	if v := q.Get("offset"); v != "" {
		if off, err = strconv.ParseInt(v, 10, 64); err != nil || off < 0 {
			writeErr(w, errorf(api.CodeInvalid, "offset=%q: want a byte offset, 0 or more", v))
			return
		}
	}
	follow := false
	if v := q.Get("follow"); v != "" {
		if follow, err = strconv.ParseBool(v); err != nil {
			writeErr(w, errorf(api.CodeInvalid, "follow=%q is not true or false", v))
			return
		}
	}
	total, first, _, _ := s.state()
	off = max(off, first)
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	h.Set(api.HeaderOffset, strconv.FormatInt(off, 10))
	h.Set(api.HeaderJobState, j.snapshot().State)
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	limit := int64(-1)
	if !follow {
		limit = total
	}
	if err := s.copyTo(r.Context(), w, func() { _ = rc.Flush() }, off, limit); err != nil && r.Context().Err() == nil {
		a.log.Warn("reading job output", "job", j.id, "err", err)
		panic(http.ErrAbortHandler) // the answer is cut short; the client sees that
	}
}

func (a *Agent) handleJobKill(w http.ResponseWriter, r *http.Request) {
	j, err := a.jobs.get(r.PathValue("job"))
	if err != nil {
		writeErr(w, err)
		return
	}
	var req api.KillRequest
	if err := readJSON(w, r, &req); err != nil {
		writeErr(w, err)
		return
	}
	sig, err := parseSignal(req.Signal)
	if err != nil {
		writeErr(w, err)
		return
	}
	if !j.running() || j.proc == nil {
		writeErr(w, errorf(api.CodeConflict, "job %s has already ended", j.id))
		return
	}
	// The whole session: what the job started goes too.
	if err := syscall.Kill(-j.proc.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		writeErr(w, fmt.Errorf("signalling job %s: %w", j.id, err))
		return
	}
	writeJSON(w, http.StatusOK, j.snapshot())
}

func (a *Agent) handleJobStdin(w http.ResponseWriter, r *http.Request) {
	j, err := a.jobs.get(r.PathValue("job"))
	if err != nil {
		writeErr(w, err)
		return
	}
	closeIt := false
	if v := r.URL.Query().Get("close"); v != "" {
		if closeIt, err = strconv.ParseBool(v); err != nil {
			writeErr(w, errorf(api.CodeInvalid, "close=%q is not true or false", v))
			return
		}
	}
	j.stdinMu.Lock()
	defer j.stdinMu.Unlock()
	if j.stdin == nil {
		if !j.running() {
			writeErr(w, errorf(api.CodeConflict, "job %s has ended; its stdin is closed", j.id))
		} else {
			writeErr(w, errorf(api.CodeConflict, "the stdin of job %s is closed", j.id))
		}
		return
	}
	// A job that does not read blocks the write once the pipe is full;
	// the client going away ends the wait.
	_ = j.stdin.SetWriteDeadline(time.Time{}) // what an abandoned write may have left
	stop := context.AfterFunc(r.Context(), func() { _ = j.stdin.SetWriteDeadline(time.Now()) })
	_, err = io.Copy(j.stdin, r.Body)
	stop()
	_ = j.stdin.SetWriteDeadline(time.Time{})
	switch {
	case errors.Is(err, syscall.EPIPE):
		writeErr(w, errorf(api.CodeConflict, "job %s no longer reads its stdin", j.id))
		return
	case err != nil && r.Context().Err() != nil:
		return
	case err != nil:
		writeErr(w, errorf(api.CodeInvalid, "writing to the stdin of job %s: %v", j.id, err))
		return
	}
	if closeIt {
		j.stdin.Close()
		j.stdin = nil
		j.mu.Lock()
		j.info.StdinOpen = false
		j.mu.Unlock()
	}
	writeJSON(w, http.StatusOK, j.snapshot())
}

// jobStream is one output stream of a job, kept in segment files.
type jobStream struct {
	dir, name string
	segSize   int64

	mu      sync.Mutex
	total   int64    // bytes written
	first   int64    // first offset still on disk
	f       *os.File // the segment being written
	closed  bool     // no more writes
	changed chan struct{}
	werr    error // a write failed; later output is dropped
}

func newJobStream(dir, name string, segSize int64) *jobStream {
	return &jobStream{dir: dir, name: name, segSize: max(segSize, 1), changed: make(chan struct{})}
}

// loadJobStream describes a stream written by an earlier agent.
func loadJobStream(dir, name string, segSize int64) *jobStream {
	s := newJobStream(dir, name, segSize)
	s.closed = true
	ents, _ := os.ReadDir(dir)
	lo, hi := int64(-1), int64(-1)
	for _, e := range ents {
		n, ok := strings.CutPrefix(e.Name(), name+".")
		if !ok {
			continue
		}
		i, err := strconv.ParseInt(n, 10, 64)
		if err != nil || i < 0 {
			continue
		}
		if lo < 0 || i < lo {
			lo = i
		}
		hi = max(hi, i)
	}
	if hi < 0 {
		return s
	}
	fi, err := os.Stat(s.segPath(hi))
	if err != nil {
		return s
	}
	// Segments are named by their offset in units of the size they were
	// written with; a different cap now would misplace them.
	if fi.Size() > s.segSize {
		return s
	}
	s.first, s.total = lo*s.segSize, hi*s.segSize+fi.Size()
	return s
}

func (s *jobStream) segPath(i int64) string {
	return filepath.Join(s.dir, s.name+"."+strconv.FormatInt(i, 10))
}

func (s *jobStream) counts() (total, dropped int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total, s.first
}

func (s *jobStream) state() (total, first int64, closed bool, changed <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total, s.first, s.closed, s.changed
}

// write appends b: the pump of the stream is its only writer.
func (s *jobStream) write(b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(b) > 0 && s.werr == nil && !s.closed {
		seg := s.total / s.segSize
		if s.f == nil {
			f, err := os.OpenFile(s.segPath(seg), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
			if err != nil {
				s.werr = err
				break
			}
			s.f = f
			if seg >= 2 {
				s.first = max(s.first, (seg-1)*s.segSize)
				os.Remove(s.segPath(seg - 2))
			}
		}
		n := min(int64(len(b)), s.segSize-s.total%s.segSize)
		if _, err := s.f.Write(b[:n]); err != nil {
			s.werr = err
			s.f.Close()
			s.f = nil
			break
		}
		s.total += n
		b = b[n:]
		if s.total%s.segSize == 0 {
			s.f.Close()
			s.f = nil
		}
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *jobStream) flush() {}

// close ends writing.
func (s *jobStream) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
	if !s.closed {
		s.closed = true
		close(s.changed)
		s.changed = make(chan struct{})
	}
}

// copyTo copies the stream from off to w. With limit >= 0 it stops there;
// otherwise it follows the stream until it is closed or ctx ends, calling
// flush whenever it has caught up. A reader that falls behind by more than
// what is kept skips what was dropped.
func (s *jobStream) copyTo(ctx context.Context, w io.Writer, flush func(), off, limit int64) error {
	buf := make([]byte, outputChunk)
	var (
		f    *os.File
		fseg int64 = -1
	)
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	for {
		total, first, closed, changed := s.state()
		if limit >= 0 {
			total = min(total, limit)
		}
		off = max(off, first)
		if off < total {
			seg := off / s.segSize
			if seg != fseg {
				if f != nil {
					f.Close()
					f = nil
				}
				var err error
				if f, err = os.Open(s.segPath(seg)); err != nil {
					if errors.Is(err, os.ErrNotExist) {
						if _, first2, _, _ := s.state(); first2 > off {
							continue // dropped meanwhile
						}
					}
					return err
				}
				fseg = seg
			}
			end := min(total, (seg+1)*s.segSize)
			n, err := f.ReadAt(buf[:min(end-off, int64(len(buf)))], off-seg*s.segSize)
			if n > 0 {
				if _, werr := w.Write(buf[:n]); werr != nil {
					return werr
				}
				off += int64(n)
			}
			if n == 0 && err != nil {
				return fmt.Errorf("reading %s at %d: %w", s.segPath(seg), off-seg*s.segSize, err)
			}
			continue
		}
		if limit >= 0 || closed {
			flush()
			return nil
		}
		flush()
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

var signalNames = map[string]syscall.Signal{
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "ABRT": syscall.SIGABRT,
	"KILL": syscall.SIGKILL, "USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "PIPE": syscall.SIGPIPE,
	"ALRM": syscall.SIGALRM, "TERM": syscall.SIGTERM, "CONT": syscall.SIGCONT, "STOP": syscall.SIGSTOP,
	"TSTP": syscall.SIGTSTP, "WINCH": syscall.SIGWINCH,
}

// parseSignal reads "TERM", "SIGTERM", "term" or "15"; SIGTERM when empty.
func parseSignal(s string) (syscall.Signal, error) {
	if s == "" {
		return syscall.SIGTERM, nil
	}
	if n, err := strconv.Atoi(s); err == nil {
		if n < 1 || n > 64 {
			return 0, errorf(api.CodeInvalid, "signal %d: want 1 to 64", n)
		}
		return syscall.Signal(n), nil
	}
	if sig, ok := signalNames[strings.TrimPrefix(strings.ToUpper(s), "SIG")]; ok {
		return sig, nil
	}
	return 0, errorf(api.CodeInvalid, "signal %q: use a name like TERM, KILL, INT, HUP or a number", s)
}

// signalName is "SIGTERM" for SIGTERM.
func signalName(sig syscall.Signal) string {
	for name, s := range signalNames {
		if s == sig {
			return "SIG" + name
		}
	}
	return "signal " + strconv.Itoa(int(sig))
}

// readJSON reads a small JSON body into v; an empty body is {}.
func readJSON(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return errorf(api.CodeInvalid, "invalid JSON body: %v", err)
	}
	return nil
}
