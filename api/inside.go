package api

import "time"

// This file holds the wire types of what runs inside a sandbox: named shells,
// background jobs, code contexts, the terminal and archives. The sandbox's
// agent serves them; the daemon passes the calls on (see openapi.yaml).

// Job states. A job that ended by a signal (a kill, or a timeout) is killed;
// one that exited by itself is exited.
const (
	JobRunning = "running"
	JobExited  = "exited"
	JobKilled  = "killed"
)

// Job is a background execution, started by an exec with background: true.
// Its output is kept inside the sandbox, so a job and its output survive the
// client that started it, pause and resume, and are copied into forks.
type Job struct {
	// ID is "job-" and 8 characters.
	ID string `json:"id"`
	// Command is the command line: the request's command, or its cmd
	// quoted as a shell would need it.
	Command string   `json:"command"`
	Cmd     []string `json:"cmd,omitempty"`
	Cwd     string   `json:"cwd,omitempty"`
	// PID is the job's process id inside the sandbox; the job is a session
	// and process group of its own.
	PID   int    `json:"pid"`
	State string `json:"state"`
	// ExitCode is set once the job has ended: its exit status, or 128 plus
	// the signal that ended it.
	ExitCode *int `json:"exit_code"`
	// Signal names the signal that ended a killed job ("SIGTERM").
	Signal    string     `json:"signal,omitempty"`
	TimedOut  bool       `json:"timed_out,omitempty"`
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	// StdoutBytes and StderrBytes count everything the job wrote. Only the
	// last bytes of a chatty stream are kept (see the agent's JobOutputCap):
	// StdoutDropped and StderrDropped count the bytes at the start of each
	// stream that are gone, so output is readable from that offset on.
	StdoutBytes   int64 `json:"stdout_bytes"`
	StderrBytes   int64 `json:"stderr_bytes"`
	StdoutDropped int64 `json:"stdout_dropped,omitempty"`
	StderrDropped int64 `json:"stderr_dropped,omitempty"`
	// StdinOpen says the job's stdin can still be written to.
	StdinOpen bool `json:"stdin_open"`
	// Error says why a job's record is incomplete (the sandbox restarted
	// while it ran).
	Error string `json:"error,omitempty"`
}

// JobList is the answer of GET .../jobs.
type JobList struct {
	Jobs []Job `json:"jobs"`
}

// KillRequest is the body of POST .../jobs/{job}/kill. Signal is a name
// ("TERM", "SIGKILL") or a number ("9"); SIGTERM when empty.
type KillRequest struct {
	Signal string `json:"signal,omitempty"`
}

// Headers of GET .../jobs/{job}/output.
const (
	// HeaderOffset is the stream offset of the first byte of the answer:
	// the offset asked for, or the first byte still kept when older output
	// was dropped.
	HeaderOffset = "X-Warren-Offset"
	// HeaderJobState is the job's state when the answer started.
	HeaderJobState = "X-Warren-Job-State"
)

// CreateShellRequest is the body of POST .../shells.
type CreateShellRequest struct {
	// Name is 1 to 64 of A-Z a-z 0-9 . _ -.
	Name string `json:"name"`
	// Cwd is where the shell starts; the agent's working directory when
	// empty.
	Cwd string `json:"cwd,omitempty"`
	// Env is exported in the shell, on top of the sandbox's environment.
	Env map[string]string `json:"env,omitempty"`
}

// Shell is a named, long-lived bash inside a sandbox. An exec with shell:
// NAME runs in it, so cwd, variables, functions, aliases and background
// jobs persist from one call to the next.
type Shell struct {
	Name      string    `json:"name"`
	PID       int       `json:"pid"`
	CreatedAt time.Time `json:"created_at"`
	// Calls counts the commands run in the shell.
	Calls int `json:"calls"`
	// Busy is true while a command runs in it; calls to a busy shell wait
	// their turn.
	Busy bool `json:"busy"`
}

// ShellList is the answer of GET .../shells.
type ShellList struct {
	Shells []Shell `json:"shells"`
}

// DefaultContext is the code context used when a request names none; it is
// created on first use.
const DefaultContext = "default"

// CodeRequest is the body of POST .../code.
type CodeRequest struct {
	Code string `json:"code"`
	// Language is "python" (the default).
	Language string `json:"language,omitempty"`
	// Context is the interpreter to run in; DefaultContext when empty.
	Context string `json:"context,omitempty"`
	// TimeoutS interrupts the code (KeyboardInterrupt) after this many
	// seconds; the context keeps its state. 0 is none.
	TimeoutS float64 `json:"timeout_s,omitempty"`
}

// CodeResult is the answer of POST .../code. A failure of the code itself
// (a syntax error, an exception, an interrupt) is an Error here, not an
// error status.
type CodeResult struct {
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	// Result is repr() of the value of the code's last expression; empty
	// when the code does not end with an expression or its value is None.
	Result string     `json:"result"`
	Error  *CodeError `json:"error"`
	// ExecutionCount numbers the calls of the context, from 1.
	ExecutionCount int   `json:"execution_count"`
	DurationMS     int64 `json:"duration_ms"`
	TimedOut       bool  `json:"timed_out,omitempty"`
	// Truncated is true when output beyond the agent's limit was dropped.
	Truncated bool `json:"truncated,omitempty"`
}

// CodeError is an exception raised by the code.
type CodeError struct {
	Name      string `json:"name"`  // "ZeroDivisionError"
	Value     string `json:"value"` // "division by zero"
	Traceback string `json:"traceback"`
}

// Error names of a CodeError the agent itself reports.
const (
	// CodeErrorContextLost: the interpreter died or had to be killed; the
	// context's state is gone and it starts afresh on the next call.
	CodeErrorContextLost = "ContextLost"
)

// CreateContextRequest is the body of POST .../code/contexts.
type CreateContextRequest struct {
	// Name is 1 to 64 of A-Z a-z 0-9 . _ -.
	Name     string            `json:"name"`
	Language string            `json:"language,omitempty"`
	Cwd      string            `json:"cwd,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
}

// CodeContext is a persistent interpreter: variables, imports, functions
// and open files persist between its calls.
type CodeContext struct {
	Name           string    `json:"name"`
	Language       string    `json:"language"`
	Cwd            string    `json:"cwd,omitempty"`
	PID            int       `json:"pid"` // 0 when its interpreter is not running
	CreatedAt      time.Time `json:"created_at"`
	ExecutionCount int       `json:"execution_count"`
}

// ContextList is the answer of GET .../code/contexts.
type ContextList struct {
	Contexts []CodeContext `json:"contexts"`
}

// ArchiveResult is the answer of PUT .../files/archive.
type ArchiveResult struct {
	Path    string `json:"path"`
	Entries int    `json:"entries"`
	Bytes   int64  `json:"bytes"`
}

// TerminalMessage is a text frame of the terminal WebSocket
// (GET .../pty?cols=&rows=). Binary frames carry the terminal's bytes both
// ways; text frames carry one of these, as JSON: Resize from the client,
// ExitCode from the server just before it closes the connection.
type TerminalMessage struct {
	Resize   *TerminalSize `json:"resize,omitempty"`
	ExitCode *int          `json:"exit_code,omitempty"`
}

// TerminalSize is a terminal's size in character cells.
type TerminalSize struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}
