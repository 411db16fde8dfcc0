// Package agent is warren-agent, the process that runs as PID 1 of every
// sandbox, and the client the daemon uses to reach it.
//
// The agent serves plain HTTP/1.1 on api.AgentPort. Its API has exactly the
// semantics and error bodies of the public calls the daemon proxies to it
// (/v1/sandboxes/{id}/exec -> /exec, /v1/sandboxes/{id}/files... -> /files...):
//
//	GET    /health                      api.AgentHealth
//	POST   /exec                        api.ExecRequest -> api.ExecResult, or NDJSON api.ExecEvent lines
//	GET    /files?path=/abs             the file's bytes
//	PUT    /files?path=/abs[&mode=0644] body -> api.FileEntry (parents created, atomic rename)
//	DELETE /files?path=/abs[&recursive=true]
//	GET    /files/list?path=/abs&depth=1 api.FileList
//	GET    /files/stat?path=/abs        api.FileEntry
//	GET    /files/archive?path=/abs     a tar of the directory (package archive)
//	PUT    /files/archive?path=/abs     tar body -> api.ArchiveResult (extracted into the directory)
//
//	POST   /exec with shell: NAME        runs in the named shell (shell.go)
//	POST   /exec with background: true   202 api.Job (jobs.go)
//	POST   /shells                      api.CreateShellRequest -> 201 api.Shell
//	GET    /shells                      api.ShellList
//	DELETE /shells/{name}
//	GET    /jobs                        api.JobList
//	GET    /jobs/{job}                  api.Job
//	DELETE /jobs/{job}                  (an ended job and its output)
//	GET    /jobs/{job}/output?stream=stdout|stderr&offset=N&follow=true   raw bytes
//	POST   /jobs/{job}/kill             api.KillRequest -> api.Job
//	POST   /jobs/{job}/stdin[?close=true]   body bytes -> api.Job
//	POST   /code                        api.CodeRequest -> api.CodeResult (code.go)
//	GET    /code/contexts               api.ContextList
//	POST   /code/contexts               api.CreateContextRequest -> 201 api.CodeContext
//	DELETE /code/contexts/{name}
//	POST   /code/contexts/{name}/restart   api.CodeContext
//	GET    /pty?cols=&rows=             WebSocket terminal (pty.go)
//
// Everything these keep lives inside the sandbox: shells, jobs and code
// contexts are child processes of the agent, and job output is in files
// under StateDir, so all of it is part of every checkpoint, snapshot and fork.
//
// As PID 1 the agent also reaps every zombie of the sandbox. One goroutine owns
// all waiting (see reaper.go): commands are started with syscall.ForkExec and
// registered by pid under the reaper's lock, so the reaper never discards the
// status of a command the agent is waiting for, and nothing else calls wait.
//
// Output of a command is returned as JSON strings, so it must be UTF-8: invalid
// bytes are replaced by U+FFFD (encoding/json does this). Binary output belongs
// in a file read through /files, or in a background job, whose output is
// served as raw bytes.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/warrenhq/warren/api"
)

// Defaults of Config.
const (
	DefaultMaxOutput       = 16 << 20
	DefaultDrainGrace      = 100 * time.Millisecond
	DefaultShutdownTimeout = 5 * time.Second
	DefaultStateDir        = "/var/lib/warren-agent"
	DefaultInterruptGrace  = 2 * time.Second

	defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	defaultHome = "/root"
)

// Config configures an Agent. The zero value is usable.
type Config struct {
	// Version is reported by GET /health.
	Version string
	// Logger receives brief logs; slog.Default() when nil.
	Logger *slog.Logger
	// Env is the environment commands start from (a request's env is added
	// on top). When nil, the agent's own environment, with PATH and HOME set
	// to sane defaults when they are missing.
	Env []string
	// MaxOutput is how many bytes of each of stdout and stderr a
	// non-streamed exec keeps; the rest is drained and dropped, and the
	// result says truncated. DefaultMaxOutput when 0.
	MaxOutput int
	// DrainGrace is how long, once a command has exited, the agent keeps
	// reading its output pipes while some other process (a background job
	// the command started) still holds them open. DefaultDrainGrace when 0.
	DrainGrace time.Duration
	// ShutdownTimeout bounds the graceful part of Serve's shutdown; then
	// open connections are closed and their commands killed.
	// DefaultShutdownTimeout when 0.
	ShutdownTimeout time.Duration
	// StateDir holds what the agent keeps on the sandbox's disk: job
	// output and records, shells' command files, the code driver.
	// DefaultStateDir when empty.
	StateDir string
	// JobOutputCap bounds what is kept on disk of each output stream of a
	// background job: its last bytes, between half of this and all of
	// it. DefaultJobOutputCap when 0.
	JobOutputCap int64
	// ShellInterruptGrace is how long a named shell's command has to stop
	// after SIGINT (at its timeout) before the shell is killed.
	// DefaultInterruptGrace when 0.
	ShellInterruptGrace time.Duration
	// CodeInterruptGrace is how long code has to stop after
	// KeyboardInterrupt before its interpreter is killed.
	// DefaultInterruptGrace when 0.
	CodeInterruptGrace time.Duration
}

// Agent serves the agent's HTTP API. Make one with New.
type Agent struct {
	cfg     Config
	log     *slog.Logger
	reaper  *reaper
	devNull *os.File
	mux     *http.ServeMux

	shells   shells
	jobs     jobs
	contexts codeContexts
}

// New returns an Agent, starting the process-wide reaper if it is not
// running yet. It makes the calling process a child subreaper, so orphans of
// its commands are reaped by it even when it is not PID 1.
func New(cfg Config) (*Agent, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Env == nil {
		cfg.Env = DefaultEnv(os.Environ())
	}
	if cfg.MaxOutput <= 0 {
		cfg.MaxOutput = DefaultMaxOutput
	}
	if cfg.DrainGrace <= 0 {
		cfg.DrainGrace = DefaultDrainGrace
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if cfg.StateDir == "" {
		cfg.StateDir = DefaultStateDir
	}
	if cfg.JobOutputCap <= 0 {
		cfg.JobOutputCap = DefaultJobOutputCap
	}
	if cfg.ShellInterruptGrace <= 0 {
		cfg.ShellInterruptGrace = DefaultInterruptGrace
	}
	if cfg.CodeInterruptGrace <= 0 {
		cfg.CodeInterruptGrace = DefaultInterruptGrace
	}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, fmt.Errorf("opening %s for commands' stdin: %w", os.DevNull, err)
	}
	a := &Agent{
		cfg:     cfg,
		log:     cfg.Logger,
		reaper:  startReaper(cfg.Logger),
		devNull: devNull,
		mux:     http.NewServeMux(),
	}
	a.shells.byName = make(map[string]*shell)
	a.jobs.byID = make(map[string]*job)
	a.contexts.byName = make(map[string]*codeContext)
	a.loadJobs()
	a.mux.HandleFunc("GET /health", a.handleHealth)
	a.mux.HandleFunc("POST /exec", a.handleExec)
	a.mux.HandleFunc("GET /files", a.handleFileGet)
	a.mux.HandleFunc("PUT /files", a.handleFilePut)
	a.mux.HandleFunc("DELETE /files", a.handleFileDelete)
	a.mux.HandleFunc("GET /files/list", a.handleFileList)
	a.mux.HandleFunc("GET /files/stat", a.handleFileStat)
	a.mux.HandleFunc("GET /files/archive", a.handleArchiveGet)
	a.mux.HandleFunc("PUT /files/archive", a.handleArchivePut)
	a.mux.HandleFunc("POST /shells", a.handleShellCreate)
	a.mux.HandleFunc("GET /shells", a.handleShellList)
	a.mux.HandleFunc("DELETE /shells/{name}", a.handleShellDelete)
	a.mux.HandleFunc("GET /jobs", a.handleJobList)
	a.mux.HandleFunc("GET /jobs/{job}", a.handleJobGet)
	a.mux.HandleFunc("DELETE /jobs/{job}", a.handleJobDelete)
	a.mux.HandleFunc("GET /jobs/{job}/output", a.handleJobOutput)
	a.mux.HandleFunc("POST /jobs/{job}/kill", a.handleJobKill)
	a.mux.HandleFunc("POST /jobs/{job}/stdin", a.handleJobStdin)
	a.mux.HandleFunc("POST /code", a.handleCode)
	a.mux.HandleFunc("GET /code/contexts", a.handleContextList)
	a.mux.HandleFunc("POST /code/contexts", a.handleContextCreate)
	a.mux.HandleFunc("DELETE /code/contexts/{name}", a.handleContextDelete)
	a.mux.HandleFunc("POST /code/contexts/{name}/restart", a.handleContextRestart)
	a.mux.HandleFunc("GET /pty", a.handlePty)
	a.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, errorf(api.CodeNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	return a, nil
}

// DefaultEnv returns env with PATH and HOME added when they are missing.
func DefaultEnv(env []string) []string {
	out := append([]string(nil), env...)
	has := func(key string) bool {
		for _, kv := range env {
			if k, _, _ := strings.Cut(kv, "="); k == key {
				return true
			}
		}
		return false
	}
	if !has("PATH") {
		out = append(out, "PATH="+defaultPath)
	}
	if !has("HOME") {
		out = append(out, "HOME="+defaultHome)
	}
	return out
}

// Handler returns the agent's HTTP handler.
func (a *Agent) Handler() http.Handler { return a.mux }

// Serve serves the agent's API on ln until ctx ends, then shuts down: it
// stops accepting, waits up to ShutdownTimeout for requests in flight, then
// closes the remaining connections, which kills their commands. It returns
// nil after a shutdown caused by ctx.
func (a *Agent) Serve(ctx context.Context, ln net.Listener) error {
	base, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	srv := &http.Server{
		Handler:           a.mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       10 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return base },
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	a.log.Info("agent listening", "addr", ln.Addr().String(), "version", a.cfg.Version, "pid", os.Getpid())

	select {
	case err := <-errc:
		return fmt.Errorf("serving agent API: %w", err)
	case <-ctx.Done():
	}
	a.log.Info("agent shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), a.cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		a.log.Warn("graceful shutdown incomplete; closing connections", "err", err)
		cancelBase()
		srv.Close()
	}
	<-errc
	a.killAll()
	return nil
}

// killAll ends the shells, code contexts and jobs of the agent, at its
// shutdown: they are its children, and would otherwise outlive it.
func (a *Agent) killAll() {
	var procs []*child
	a.shells.mu.Lock()
	for _, sh := range a.shells.byName {
		if sh != nil {
			procs = append(procs, sh.proc)
		}
	}
	a.shells.mu.Unlock()
	a.contexts.mu.Lock()
	for _, cc := range a.contexts.byName {
		cc.mu.Lock()
		if cc.in != nil {
			procs = append(procs, cc.in.proc)
		}
		cc.mu.Unlock()
	}
	a.contexts.mu.Unlock()
	a.jobs.mu.Lock()
	for _, j := range a.jobs.byID {
		if j.proc != nil && j.running() {
			procs = append(procs, j.proc)
		}
	}
	a.jobs.mu.Unlock()
	for _, p := range procs {
		p.killGroup()
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(time.Second):
		}
	}
}

func (a *Agent) handleHealth(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, api.AgentHealth{Status: "ok", Version: a.cfg.Version, PID: os.Getpid()})
}

// Error is an error answer of the agent, on both sides of the wire: the
// handlers return it and the Client decodes it. It wraps the api sentinel of
// its code, so errors.Is(err, api.ErrNotFound) works.
type Error struct {
	Code    string // an api.Code* constant
	Message string // what was wrong and what to do
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the api sentinel error of e.Code.
func (e *Error) Unwrap() error { return api.ErrorForCode(e.Code) }

func errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

func statusForCode(code string) int {
	switch code {
	case api.CodeInvalid:
		return http.StatusBadRequest
	case api.CodeUnauthorized:
		return http.StatusUnauthorized
	case api.CodeForbidden:
		return http.StatusForbidden
	case api.CodeNotFound:
		return http.StatusNotFound
	case api.CodeConflict:
		return http.StatusConflict
	case api.CodeQuota:
		return http.StatusTooManyRequests
	case api.CodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func codeForStatus(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		return api.CodeInvalid
	case http.StatusUnauthorized:
		return api.CodeUnauthorized
	case http.StatusForbidden:
		return api.CodeForbidden
	case http.StatusNotFound, http.StatusMethodNotAllowed:
		return api.CodeNotFound
	case http.StatusConflict:
		return api.CodeConflict
	case http.StatusTooManyRequests:
		return api.CodeQuota
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		return api.CodeUnavailable
	}
	return api.CodeInternal
}

// writeErr answers err as an error body: an *Error keeps its code and
// message, anything else is internal.
func writeErr(w http.ResponseWriter, err error) {
	var ae *Error
	if !errors.As(err, &ae) {
		ae = &Error{Code: api.CodeInternal, Message: err.Error()}
	}
	writeJSON(w, statusForCode(ae.Code), api.ErrorBody{Error: api.ErrorDetail{Code: ae.Code, Message: ae.Message}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the client is gone; nothing to tell it
}
