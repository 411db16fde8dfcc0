package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/client"
)

// tools holds the tool handlers: each is one or two SDK calls.
type tools struct {
	c   *client.Client
	max int
}

// Defaults and bounds of tool arguments.
const (
	defaultExecTimeoutS = 300
	maxWaitS            = 300
	maxListEntries      = 1000
)

func (t *tools) register(s *mcp.Server) {
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true}
	additive := &mcp.ToolAnnotations{DestructiveHint: ptr(false)}
	destructive := &mcp.ToolAnnotations{DestructiveHint: ptr(true)}
	idempotent := &mcp.ToolAnnotations{DestructiveHint: ptr(false), IdempotentHint: true}

	mcp.AddTool(s, &mcp.Tool{Name: "create_sandbox", Annotations: additive, Description: `Create a new sandbox: an isolated Linux machine (gVisor; Debian with bash and python3 unless you name another image or a template) and wait until it runs, about 1 second (faster from a template). It keeps its files, processes and memory until deleted; after 10 minutes without calls it is paused (not lost). Each running sandbox holds its memory (512 MB by default) and CPU on the host. Returns its sandbox_id, which the other tools take.`}, t.createSandbox)
	mcp.AddTool(s, &mcp.Tool{Name: "list_sandboxes", Annotations: readOnly, Description: `List your sandboxes with their state (running, paused, creating, error), optionally only those in one state or with given metadata. Cheap.`}, t.listSandboxes)
	mcp.AddTool(s, &mcp.Tool{Name: "get_sandbox", Annotations: readOnly, Description: `Describe one sandbox: state, image, resources, metadata, idle policy. Cheap.`}, t.getSandbox)
	mcp.AddTool(s, &mcp.Tool{Name: "pause_sandbox", Annotations: idempotent, Description: `Pause a sandbox: every process freezes where it is and it uses no CPU; its memory is kept (and written to disk after a while, freeing it). Resume takes ~20 ms from memory, under a second once stored. Nothing is lost. Commands to a paused sandbox fail until it is resumed.`}, t.pauseSandbox)
	mcp.AddTool(s, &mcp.Tool{Name: "resume_sandbox", Annotations: idempotent, Description: `Resume a paused sandbox: every process carries on exactly where it stopped. ~100 ms from memory.`}, t.resumeSandbox)
	mcp.AddTool(s, &mcp.Tool{Name: "delete_sandbox", Annotations: destructive, Description: `Delete a sandbox for good: its files, processes and memory are gone and cannot be recovered (volumes stay). Prefer pause_sandbox if you may come back to it.`}, t.deleteSandbox)

	mcp.AddTool(s, &mcp.Tool{Name: "exec", Description: `Run a command in a sandbox and return its exit code, stdout and stderr. command is a shell line (sh -c; pipes, &&, redirects work); or give argv. With shell: NAME it runs in a persistent named bash (created on first use): cd, exported variables and functions carry over to the next exec with the same shell. With background: true it starts a job and returns at once (use get_job to read its output and wait for it, kill_job to stop it); use that for anything longer than a few minutes, servers and watchers. Foreground commands are killed after timeout_s (default 300 s; exit code 124). Output over 50 KB per stream keeps its last 50 KB: redirect to a file and read_file for more.`}, t.exec)
	mcp.AddTool(s, &mcp.Tool{Name: "get_job", Annotations: readOnly, Description: `Show a background job: its state (running, exited, killed), exit code and output. Without offsets you get the last 50 KB of stdout and stderr; stdout_offset/stderr_offset read from a byte offset (the answer says where the next read starts). wait_s waits up to that many seconds (at most 300) for the job to end first. A job survives pause, resume and the end of this session.`}, t.getJob)
	mcp.AddTool(s, &mcp.Tool{Name: "list_jobs", Annotations: readOnly, Description: `List a sandbox's background jobs, oldest first, with state and exit code. Cheap.`}, t.listJobs)
	mcp.AddTool(s, &mcp.Tool{Name: "kill_job", Annotations: destructive, Description: `Send a signal to a background job and everything it started: TERM by default, KILL to force. Its output stays readable.`}, t.killJob)

	mcp.AddTool(s, &mcp.Tool{Name: "run_code", Description: `Run Python code in a sandbox in a persistent interpreter, like a notebook cell: variables, imports and functions persist between calls in the same context ("default" unless named). Returns printed output, the value of the last expression (result) and, if it raised, the exception with its traceback. timeout_s interrupts the code (KeyboardInterrupt) and keeps the context's state.`}, t.runCode)

	mcp.AddTool(s, &mcp.Tool{Name: "read_file", Annotations: readOnly, Description: `Read a file of a sandbox. Text comes back as is; binary content as base64 (encoding says which). At most max_bytes (default 50 KB) from offset: the answer says if there is more.`}, t.readFile)
	mcp.AddTool(s, &mcp.Tool{Name: "write_file", Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true}, Description: `Write a file in a sandbox, replacing it if it exists and creating parent directories. content is text, or base64 with encoding: "base64". mode sets permissions ("0755" to make a script executable).`}, t.writeFile)
	mcp.AddTool(s, &mcp.Tool{Name: "list_files", Annotations: readOnly, Description: `List a directory of a sandbox: name, type (file, dir, symlink), size and mode of each entry, depth levels down (default 1). Cheap.`}, t.listFiles)

	mcp.AddTool(s, &mcp.Tool{Name: "snapshot_sandbox", Annotations: additive, Description: `Save a sandbox's memory, running processes and disk as a snapshot while it keeps running. Takes about a second plus time proportional to its memory, and disk space on the host. Take one before a risky change: revert_sandbox returns to it, fork_sandbox or create_sandbox(snapshot) start copies of it.`}, t.snapshotSandbox)
	mcp.AddTool(s, &mcp.Tool{Name: "list_snapshots", Annotations: readOnly, Description: `List snapshots, of one sandbox when sandbox_id is given: manual ones and periodic checkpoints. Cheap.`}, t.listSnapshots)
	mcp.AddTool(s, &mcp.Tool{Name: "revert_sandbox", Annotations: destructive, Description: `Return a sandbox to one of its snapshots: memory, processes and files exactly as they were then, same sandbox_id. Everything since the snapshot is lost. Takes about a second.`}, t.revertSandbox)
	mcp.AddTool(s, &mcp.Tool{Name: "fork_sandbox", Annotations: additive, Description: `Copy a running sandbox: snapshot it now and start count (default 1) new sandboxes from it, each with the same memory, processes and files, independent from then on. Each copy is a full sandbox holding its own memory and CPU: delete or pause the ones you are done with. Takes a second or two per copy.`}, t.forkSandbox)
	mcp.AddTool(s, &mcp.Tool{Name: "delete_snapshot", Annotations: destructive, Description: `Delete a snapshot, freeing its disk space. Sandboxes made from it are not affected.`}, t.deleteSnapshot)
}

func ptr[T any](v T) *T { return &v }

// -- sandboxes --------------------------------------------------------

type sandboxArg struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id (sb-...)"`
}

type createInput struct {
	Image        string            `json:"image,omitempty" jsonschema:"image to boot (an image name the server has, like debian:bookworm); the server's default when empty"`
	Template     string            `json:"template,omitempty" jsonschema:"start from this template: its setup already done"`
	Snapshot     string            `json:"snapshot,omitempty" jsonschema:"start from this snapshot id"`
	Name         string            `json:"name,omitempty" jsonschema:"a name for people; unique among your sandboxes"`
	CPUs         float64           `json:"cpus,omitempty" jsonschema:"vCPUs (server default: 1)"`
	MemoryMB     int64             `json:"memory_mb,omitempty" jsonschema:"memory in MB (server default: 512)"`
	DiskMB       int64             `json:"disk_mb,omitempty" jsonschema:"disk in MB (server default: 4096)"`
	Env          map[string]string `json:"env,omitempty" jsonschema:"environment variables of every command"`
	Metadata     map[string]string `json:"metadata,omitempty" jsonschema:"labels to find the sandbox by"`
	IdleTimeoutS int               `json:"idle_timeout_s,omitempty" jsonschema:"seconds without calls before idle_action happens (default 600)"`
	IdleAction   string            `json:"idle_action,omitempty" jsonschema:"pause (the default) or delete"`
}

func (t *tools) createSandbox(ctx context.Context, _ *mcp.CallToolRequest, in createInput) (*mcp.CallToolResult, api.Sandbox, error) {
	req := api.CreateSandboxRequest{Image: in.Image, Template: in.Template, Snapshot: in.Snapshot, Name: in.Name,
		Env: in.Env, Metadata: in.Metadata}
	if in.CPUs != 0 {
		req.CPUs = &in.CPUs
	}
	if in.MemoryMB != 0 {
		req.MemoryMB = &in.MemoryMB
	}
	if in.DiskMB != 0 {
		req.DiskMB = &in.DiskMB
	}
	if in.IdleTimeoutS != 0 || in.IdleAction != "" {
		req.Idle = &api.IdlePolicy{TimeoutS: in.IdleTimeoutS, Action: in.IdleAction}
		if req.Idle.TimeoutS == 0 {
			req.Idle.TimeoutS = 600
		}
		if req.Idle.Action == "" {
			req.Idle.Action = "pause"
		}
	}
	sb, err := t.c.CreateSandbox(ctx, req)
	if err != nil {
		return nil, api.Sandbox{}, err
	}
	return sandboxResult("created ", sb)
}

type listSandboxesInput struct {
	State    string            `json:"state,omitempty" jsonschema:"only sandboxes in this state: running, paused, creating or error"`
	Metadata map[string]string `json:"metadata,omitempty" jsonschema:"only sandboxes with all these metadata labels"`
}

type sandboxList struct {
	Sandboxes []api.Sandbox `json:"sandboxes"`
}

func (t *tools) listSandboxes(ctx context.Context, _ *mcp.CallToolRequest, in listSandboxesInput) (*mcp.CallToolResult, sandboxList, error) {
	sbs, err := t.c.ListSandboxes(ctx, client.ListOptions{State: in.State, Metadata: in.Metadata})
	if err != nil {
		return nil, sandboxList{}, err
	}
	return sandboxesResult(sbs, "no sandboxes")
}

func (t *tools) getSandbox(ctx context.Context, _ *mcp.CallToolRequest, in sandboxArg) (*mcp.CallToolResult, api.Sandbox, error) {
	sb, err := t.c.GetSandbox(ctx, in.SandboxID)
	if err != nil {
		return nil, api.Sandbox{}, err
	}
	return sandboxResult("", sb)
}

func (t *tools) pauseSandbox(ctx context.Context, _ *mcp.CallToolRequest, in sandboxArg) (*mcp.CallToolResult, api.Sandbox, error) {
	sb, err := t.c.PauseSandbox(ctx, in.SandboxID)
	if err != nil {
		return nil, api.Sandbox{}, err
	}
	return sandboxResult("", sb)
}

func (t *tools) resumeSandbox(ctx context.Context, _ *mcp.CallToolRequest, in sandboxArg) (*mcp.CallToolResult, api.Sandbox, error) {
	sb, err := t.c.ResumeSandbox(ctx, in.SandboxID)
	if err != nil {
		return nil, api.Sandbox{}, err
	}
	return sandboxResult("", sb)
}

type deleted struct {
	Deleted string `json:"deleted" jsonschema:"the id of what was deleted"`
}

func (t *tools) deleteSandbox(ctx context.Context, _ *mcp.CallToolRequest, in sandboxArg) (*mcp.CallToolResult, deleted, error) {
	if err := t.c.DeleteSandbox(ctx, in.SandboxID); err != nil {
		return nil, deleted{}, err
	}
	return text("deleted sandbox " + in.SandboxID), deleted{Deleted: in.SandboxID}, nil
}

// -- commands and jobs ------------------------------------------------

type execInput struct {
	SandboxID  string            `json:"sandbox_id" jsonschema:"the sandbox's id (sb-...)"`
	Command    string            `json:"command,omitempty" jsonschema:"a shell command line, run by sh -c (by the named shell's bash with shell)"`
	Argv       []string          `json:"argv,omitempty" jsonschema:"the command as an argument vector, instead of command"`
	Cwd        string            `json:"cwd,omitempty" jsonschema:"working directory (with shell: cd there first)"`
	Env        map[string]string `json:"env,omitempty" jsonschema:"extra environment variables for this command"`
	Stdin      string            `json:"stdin,omitempty" jsonschema:"text given to the command on stdin"`
	TimeoutS   float64           `json:"timeout_s,omitempty" jsonschema:"kill the command after this many seconds (foreground default 300; a job has none unless given)"`
	Shell      string            `json:"shell,omitempty" jsonschema:"run in this persistent named shell, created on first use; state carries over between calls"`
	Background bool              `json:"background,omitempty" jsonschema:"start as a background job and return at once; read it with get_job"`
}

type execOutput struct {
	ExitCode   *int     `json:"exit_code,omitempty" jsonschema:"the exit status; 124 after a timeout, 127 for a command not found, 128+N when killed by signal N"`
	Stdout     string   `json:"stdout,omitempty"`
	Stderr     string   `json:"stderr,omitempty"`
	DurationMS int64    `json:"duration_ms,omitempty"`
	TimedOut   bool     `json:"timed_out,omitempty"`
	Truncated  bool     `json:"truncated,omitempty" jsonschema:"output was cut: only its last bytes are here"`
	Job        *api.Job `json:"job,omitempty" jsonschema:"the job started, with background"`
}

func (t *tools) exec(ctx context.Context, _ *mcp.CallToolRequest, in execInput) (*mcp.CallToolResult, execOutput, error) {
	if (in.Command == "") == (len(in.Argv) == 0) {
		return nil, execOutput{}, errors.New("give the command as command (a shell line) or argv, one of the two")
	}
	req := api.ExecRequest{Command: in.Command, Cmd: in.Argv, Cwd: in.Cwd, Env: in.Env, Stdin: in.Stdin,
		TimeoutS: in.TimeoutS, Shell: in.Shell}
	if in.Background {
		job, err := t.c.StartJob(ctx, in.SandboxID, req)
		if err != nil {
			return nil, execOutput{}, err
		}
		return text(fmt.Sprintf("started job %s (pid %d): %s\nread its output and wait for it with get_job", job.ID, job.PID, job.Command)),
			execOutput{Job: &job}, nil
	}
	if req.TimeoutS == 0 {
		req.TimeoutS = defaultExecTimeoutS
	}
	if in.Shell != "" {
		// Start the shell on first use; one that exists already is fine.
		if _, err := t.c.CreateShell(ctx, in.SandboxID, api.CreateShellRequest{Name: in.Shell}); err != nil && !errors.Is(err, client.ErrConflict) {
			return nil, execOutput{}, err
		}
	}
	res, err := t.c.Exec(ctx, in.SandboxID, req)
	if err != nil {
		return nil, execOutput{}, err
	}
	out := execOutput{ExitCode: &res.ExitCode, DurationMS: res.DurationMS, TimedOut: res.TimedOut, Truncated: res.Truncated}
	var cut1, cut2 bool
	out.Stdout, cut1 = lastBytes(res.Stdout, t.max)
	out.Stderr, cut2 = lastBytes(res.Stderr, t.max)
	out.Truncated = out.Truncated || cut1 || cut2

	var b strings.Builder
	fmt.Fprintf(&b, "exit code %d (%s)", res.ExitCode, time.Duration(res.DurationMS)*time.Millisecond)
	if res.TimedOut {
		fmt.Fprintf(&b, ", killed at its timeout of %gs", req.TimeoutS)
	}
	writeStreams(&b, out.Stdout, out.Stderr, out.Truncated)
	return text(b.String()), out, nil
}

type jobArg struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id (sb-...)"`
	JobID     string `json:"job_id" jsonschema:"the job's id (job-...)"`
}

type getJobInput struct {
	SandboxID    string `json:"sandbox_id" jsonschema:"the sandbox's id (sb-...)"`
	JobID        string `json:"job_id" jsonschema:"the job's id (job-...)"`
	WaitS        int    `json:"wait_s,omitempty" jsonschema:"wait up to this many seconds (at most 300) for the job to end"`
	StdoutOffset *int64 `json:"stdout_offset,omitempty" jsonschema:"read stdout from this byte offset (default: its last 50 KB)"`
	StderrOffset *int64 `json:"stderr_offset,omitempty" jsonschema:"read stderr from this byte offset (default: its last 50 KB)"`
}

type jobOutput struct {
	Job        api.Job `json:"job"`
	Stdout     string  `json:"stdout"`
	Stderr     string  `json:"stderr"`
	StdoutFrom int64   `json:"stdout_from" jsonschema:"the byte offset in the job's stdout where stdout starts"`
	StderrFrom int64   `json:"stderr_from" jsonschema:"the byte offset in the job's stderr where stderr starts"`
	NextStdout int64   `json:"next_stdout_offset" jsonschema:"where to read stdout from next"`
	NextStderr int64   `json:"next_stderr_offset" jsonschema:"where to read stderr from next"`
}

func (t *tools) getJob(ctx context.Context, _ *mcp.CallToolRequest, in getJobInput) (*mcp.CallToolResult, jobOutput, error) {
	job, err := t.c.GetJob(ctx, in.SandboxID, in.JobID)
	if err != nil {
		return nil, jobOutput{}, err
	}
	if wait := time.Duration(min(in.WaitS, maxWaitS)) * time.Second; wait > 0 && job.State == api.JobRunning {
		deadline := time.Now().Add(wait)
		for delay := 50 * time.Millisecond; job.State == api.JobRunning && time.Now().Before(deadline); delay = min(delay*2, time.Second) {
			select {
			case <-ctx.Done():
				return nil, jobOutput{}, ctx.Err()
			case <-time.After(min(delay, time.Until(deadline))):
			}
			if job, err = t.c.GetJob(ctx, in.SandboxID, in.JobID); err != nil {
				return nil, jobOutput{}, err
			}
		}
	}
	out := jobOutput{Job: job}
	if out.Stdout, out.StdoutFrom, out.NextStdout, err = t.jobStream(ctx, in.SandboxID, job, "stdout", in.StdoutOffset, job.StdoutBytes); err != nil {
		return nil, jobOutput{}, err
	}
	if out.Stderr, out.StderrFrom, out.NextStderr, err = t.jobStream(ctx, in.SandboxID, job, "stderr", in.StderrOffset, job.StderrBytes); err != nil {
		return nil, jobOutput{}, err
	}
	var b strings.Builder
	b.WriteString(jobLine(job))
	more := out.NextStdout < job.StdoutBytes || out.NextStderr < job.StderrBytes || out.StdoutFrom > 0 || out.StderrFrom > 0
	writeStreams(&b, out.Stdout, out.Stderr, false)
	if more {
		fmt.Fprintf(&b, "\n(stdout bytes %d-%d of %d, stderr bytes %d-%d of %d)", out.StdoutFrom, out.NextStdout, job.StdoutBytes,
			out.StderrFrom, out.NextStderr, job.StderrBytes)
	}
	return text(b.String()), out, nil
}

// jobStream reads at most t.max bytes of one stream of a job: from offset,
// or the last t.max bytes of its total when offset is nil. It returns the
// text, where it starts and where the next read would start.
func (t *tools) jobStream(ctx context.Context, id string, job api.Job, stream string, offset *int64, total int64) (string, int64, int64, error) {
	from := max(total-int64(t.max), 0)
	if offset != nil {
		from = max(*offset, 0)
	}
	if from >= total {
		return "", from, from, nil
	}
	rc, start, err := t.c.JobOutput(ctx, id, job.ID, client.OutputOptions{Stream: stream, Offset: from})
	if err != nil {
		return "", 0, 0, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, int64(t.max)))
	if err != nil {
		return "", 0, 0, fmt.Errorf("reading the %s of job %s: %w", stream, job.ID, err)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD"), start, start + int64(len(b)), nil
}

type jobList struct {
	Jobs []api.Job `json:"jobs"`
}

func (t *tools) listJobs(ctx context.Context, _ *mcp.CallToolRequest, in sandboxArg) (*mcp.CallToolResult, jobList, error) {
	jobs, err := t.c.ListJobs(ctx, in.SandboxID)
	if err != nil {
		return nil, jobList{}, err
	}
	if jobs == nil {
		jobs = []api.Job{}
	}
	if len(jobs) == 0 {
		return text("no jobs"), jobList{Jobs: jobs}, nil
	}
	lines := make([]string, len(jobs))
	for i, j := range jobs {
		lines[i] = jobLine(j)
	}
	return text(strings.Join(lines, "\n")), jobList{Jobs: jobs}, nil
}

type killInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id (sb-...)"`
	JobID     string `json:"job_id" jsonschema:"the job's id (job-...)"`
	Signal    string `json:"signal,omitempty" jsonschema:"TERM (the default), KILL, INT, HUP or a number"`
}

func (t *tools) killJob(ctx context.Context, _ *mcp.CallToolRequest, in killInput) (*mcp.CallToolResult, api.Job, error) {
	job, err := t.c.KillJob(ctx, in.SandboxID, in.JobID, in.Signal)
	if err != nil {
		return nil, api.Job{}, err
	}
	return text("signalled: " + jobLine(job)), job, nil
}

func jobLine(j api.Job) string {
	s := fmt.Sprintf("job %s %s", j.ID, j.State)
	if j.ExitCode != nil {
		s += fmt.Sprintf(" (exit code %d", *j.ExitCode)
		if j.Signal != "" {
			s += ", " + j.Signal
		}
		if j.TimedOut {
			s += ", timed out"
		}
		s += ")"
	}
	return s + ": " + j.Command
}

// -- code -------------------------------------------------------------

type codeInput struct {
	SandboxID string  `json:"sandbox_id" jsonschema:"the sandbox's id (sb-...)"`
	Code      string  `json:"code" jsonschema:"Python source; the value of a final expression is returned as result"`
	Context   string  `json:"context,omitempty" jsonschema:"the interpreter to run in; default unless named (each context has its own variables)"`
	TimeoutS  float64 `json:"timeout_s,omitempty" jsonschema:"interrupt the code after this many seconds; the context keeps its state"`
}

func (t *tools) runCode(ctx context.Context, _ *mcp.CallToolRequest, in codeInput) (*mcp.CallToolResult, api.CodeResult, error) {
	res, err := t.c.RunCode(ctx, in.SandboxID, api.CodeRequest{Code: in.Code, Context: in.Context, TimeoutS: in.TimeoutS})
	if err != nil {
		return nil, api.CodeResult{}, err
	}
	var cut1, cut2 bool
	res.Stdout, cut1 = lastBytes(res.Stdout, t.max)
	res.Stderr, cut2 = lastBytes(res.Stderr, t.max)
	res.Truncated = res.Truncated || cut1 || cut2
	var b strings.Builder
	switch {
	case res.Error != nil:
		fmt.Fprintf(&b, "raised %s: %s", res.Error.Name, res.Error.Value)
	case res.Result != "":
		b.WriteString("result: " + res.Result)
	default:
		b.WriteString("ok")
	}
	if res.TimedOut {
		b.WriteString(" (interrupted at its timeout)")
	}
	writeStreams(&b, res.Stdout, res.Stderr, res.Truncated)
	if res.Error != nil && res.Error.Traceback != "" {
		b.WriteString("\n--- traceback ---\n" + strings.TrimRight(res.Error.Traceback, "\n"))
	}
	return text(b.String()), res, nil
}

// -- files ------------------------------------------------------------

type readInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id (sb-...)"`
	Path      string `json:"path" jsonschema:"absolute path of the file"`
	Offset    int64  `json:"offset,omitempty" jsonschema:"start at this byte"`
	MaxBytes  int    `json:"max_bytes,omitempty" jsonschema:"read at most this many bytes (default and most: 50 KB)"`
}

type fileContent struct {
	Path       string `json:"path"`
	Content    string `json:"content"`
	Encoding   string `json:"encoding" jsonschema:"utf-8 for text, base64 for binary content"`
	Offset     int64  `json:"offset" jsonschema:"the byte of the file content starts at"`
	Bytes      int    `json:"bytes" jsonschema:"how many bytes of the file content holds"`
	Size       int64  `json:"size" jsonschema:"the file's size"`
	NextOffset *int64 `json:"next_offset,omitempty" jsonschema:"where the rest starts, when there is more"`
}

func (t *tools) readFile(ctx context.Context, _ *mcp.CallToolRequest, in readInput) (*mcp.CallToolResult, fileContent, error) {
	limit := t.max
	if in.MaxBytes > 0 {
		limit = min(in.MaxBytes, t.max)
	}
	fe, err := t.c.StatFile(ctx, in.SandboxID, in.Path)
	if err != nil {
		return nil, fileContent{}, err
	}
	if fe.Type == "dir" {
		return nil, fileContent{}, fmt.Errorf("%s is a directory: use list_files", in.Path)
	}
	rc, err := t.c.ReadFile(ctx, in.SandboxID, in.Path)
	if err != nil {
		return nil, fileContent{}, err
	}
	defer rc.Close()
	if in.Offset > 0 {
		if _, err := io.CopyN(io.Discard, rc, in.Offset); err != nil && err != io.EOF {
			return nil, fileContent{}, err
		}
	}
	data, err := io.ReadAll(io.LimitReader(rc, int64(limit)))
	if err != nil {
		return nil, fileContent{}, fmt.Errorf("reading %s: %w", in.Path, err)
	}
	out := fileContent{Path: in.Path, Offset: in.Offset, Size: max(fe.Size, in.Offset+int64(len(data)))}
	if end := in.Offset + int64(len(data)); end < out.Size {
		// The cut may split a character of a text: end before it.
		if !utf8.Valid(data) {
			for n := 1; n < utf8.UTFMax && n < len(data); n++ {
				if utf8.Valid(data[:len(data)-n]) {
					data = data[:len(data)-n]
					break
				}
			}
		}
		out.NextOffset = ptr(in.Offset + int64(len(data)))
	}
	out.Bytes = len(data)
	if utf8.Valid(data) && !bytes.ContainsRune(data, 0) {
		out.Encoding, out.Content = "utf-8", string(data)
	} else {
		out.Encoding, out.Content = "base64", base64.StdEncoding.EncodeToString(data)
	}
	msg := out.Content
	if out.Encoding == "base64" {
		msg = fmt.Sprintf("binary content of %s, %d bytes from byte %d, base64:\n%s", in.Path, out.Bytes, out.Offset, out.Content)
	}
	if out.NextOffset != nil {
		msg += fmt.Sprintf("\n(bytes %d-%d of %d; read on with offset %d)", out.Offset, *out.NextOffset, out.Size, *out.NextOffset)
	}
	return text(msg), out, nil
}

type writeInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id (sb-...)"`
	Path      string `json:"path" jsonschema:"absolute path of the file"`
	Content   string `json:"content" jsonschema:"the file's new content"`
	Encoding  string `json:"encoding,omitempty" jsonschema:"utf-8 (the default) or base64"`
	Mode      string `json:"mode,omitempty" jsonschema:"octal permissions, like 0644 or 0755; an existing file keeps its own otherwise"`
}

func (t *tools) writeFile(ctx context.Context, _ *mcp.CallToolRequest, in writeInput) (*mcp.CallToolResult, api.FileEntry, error) {
	data := []byte(in.Content)
	switch in.Encoding {
	case "", "utf-8", "utf8", "text":
	case "base64":
		var err error
		if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return nil, api.FileEntry{}, fmt.Errorf("content is not valid base64: %v", err)
		}
	default:
		return nil, api.FileEntry{}, fmt.Errorf("encoding %q: want utf-8 or base64", in.Encoding)
	}
	var mode os.FileMode
	if in.Mode != "" {
		m, err := strconv.ParseUint(in.Mode, 8, 32)
		if err != nil || m > 0o7777 {
			return nil, api.FileEntry{}, fmt.Errorf("mode %q: want octal permissions like 0644", in.Mode)
		}
		mode = os.FileMode(m)
	}
	fe, err := t.c.WriteFile(ctx, in.SandboxID, in.Path, bytes.NewReader(data), mode)
	if err != nil {
		return nil, api.FileEntry{}, err
	}
	return text(fmt.Sprintf("wrote %s: %d bytes, mode %s", fe.Path, fe.Size, fe.Mode)), fe, nil
}

type listFilesInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id (sb-...)"`
	Path      string `json:"path" jsonschema:"absolute path of the directory"`
	Depth     int    `json:"depth,omitempty" jsonschema:"how many levels down to list (default 1)"`
}

type fileList struct {
	Entries   []api.FileEntry `json:"entries"`
	Truncated bool            `json:"truncated,omitempty" jsonschema:"only the first 1000 entries are here"`
}

func (t *tools) listFiles(ctx context.Context, _ *mcp.CallToolRequest, in listFilesInput) (*mcp.CallToolResult, fileList, error) {
	entries, err := t.c.ListFiles(ctx, in.SandboxID, in.Path, max(in.Depth, 1))
	if err != nil {
		return nil, fileList{}, err
	}
	out := fileList{Entries: entries}
	if out.Entries == nil {
		out.Entries = []api.FileEntry{}
	}
	if len(out.Entries) > maxListEntries {
		out.Entries, out.Truncated = out.Entries[:maxListEntries], true
	}
	var b strings.Builder
	if len(out.Entries) == 0 {
		fmt.Fprintf(&b, "%s is empty", in.Path)
	}
	for _, e := range out.Entries {
		switch e.Type {
		case "dir":
			fmt.Fprintf(&b, "%s/\n", e.Path)
		case "symlink":
			fmt.Fprintf(&b, "%s -> %s\n", e.Path, e.Target)
		default:
			fmt.Fprintf(&b, "%s  %d bytes  %s\n", e.Path, e.Size, e.Mode)
		}
	}
	if out.Truncated {
		fmt.Fprintf(&b, "(first %d of %d entries)", maxListEntries, len(entries))
	}
	return text(strings.TrimRight(b.String(), "\n")), out, nil
}

// -- snapshots --------------------------------------------------------

type snapshotInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id (sb-...)"`
	Name      string `json:"name,omitempty" jsonschema:"a name to remember it by"`
}

func (t *tools) snapshotSandbox(ctx context.Context, _ *mcp.CallToolRequest, in snapshotInput) (*mcp.CallToolResult, api.Snapshot, error) {
	sn, err := t.c.SnapshotSandbox(ctx, in.SandboxID, in.Name)
	if err != nil {
		return nil, api.Snapshot{}, err
	}
	return text(fmt.Sprintf("snapshot %s of %s saved (%s)", sn.ID, sn.SandboxID, humanBytes(sn.SizeBytes))), sn, nil
}

type listSnapshotsInput struct {
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"only snapshots of this sandbox"`
}

type snapshotList struct {
	Snapshots []api.Snapshot `json:"snapshots"`
}

func (t *tools) listSnapshots(ctx context.Context, _ *mcp.CallToolRequest, in listSnapshotsInput) (*mcp.CallToolResult, snapshotList, error) {
	sns, err := t.c.ListSnapshots(ctx, in.SandboxID)
	if err != nil {
		return nil, snapshotList{}, err
	}
	if sns == nil {
		sns = []api.Snapshot{}
	}
	if len(sns) == 0 {
		return text("no snapshots"), snapshotList{Snapshots: sns}, nil
	}
	lines := make([]string, len(sns))
	for i, sn := range sns {
		lines[i] = fmt.Sprintf("%s %s of %s at %s, %s", sn.ID, sn.Kind, sn.SandboxID, sn.CreatedAt.UTC().Format(time.RFC3339), humanBytes(sn.SizeBytes))
		if sn.Name != "" {
			lines[i] += " (" + sn.Name + ")"
		}
	}
	return text(strings.Join(lines, "\n")), snapshotList{Snapshots: sns}, nil
}

type revertInput struct {
	SandboxID  string `json:"sandbox_id" jsonschema:"the sandbox's id (sb-...)"`
	SnapshotID string `json:"snapshot_id" jsonschema:"a snapshot of this sandbox (sn-...)"`
}

func (t *tools) revertSandbox(ctx context.Context, _ *mcp.CallToolRequest, in revertInput) (*mcp.CallToolResult, api.Sandbox, error) {
	sb, err := t.c.RevertSandbox(ctx, in.SandboxID, in.SnapshotID)
	if err != nil {
		return nil, api.Sandbox{}, err
	}
	return sandboxResult("reverted to "+in.SnapshotID+": ", sb)
}

type forkInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id (sb-...)"`
	Count     int    `json:"count,omitempty" jsonschema:"how many copies (default 1)"`
}

func (t *tools) forkSandbox(ctx context.Context, _ *mcp.CallToolRequest, in forkInput) (*mcp.CallToolResult, sandboxList, error) {
	sbs, err := t.c.ForkSandbox(ctx, in.SandboxID, max(in.Count, 1))
	if err != nil {
		return nil, sandboxList{}, err
	}
	return sandboxesResult(sbs, "no copies")
}

type snapshotArg struct {
	SnapshotID string `json:"snapshot_id" jsonschema:"the snapshot's id (sn-...)"`
}

func (t *tools) deleteSnapshot(ctx context.Context, _ *mcp.CallToolRequest, in snapshotArg) (*mcp.CallToolResult, deleted, error) {
	if err := t.c.DeleteSnapshot(ctx, in.SnapshotID); err != nil {
		return nil, deleted{}, err
	}
	return text("deleted snapshot " + in.SnapshotID), deleted{Deleted: in.SnapshotID}, nil
}

// -- results ----------------------------------------------------------

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// normalize fills what the output schema says is an object or array, so a
// nil map or slice is not sent as null.
func normalize(sb api.Sandbox) api.Sandbox {
	if sb.Metadata == nil {
		sb.Metadata = map[string]string{}
	}
	return sb
}

func sandboxLine(sb api.Sandbox) string {
	s := fmt.Sprintf("sandbox %s", sb.ID)
	if sb.Name != "" {
		s += " (" + sb.Name + ")"
	}
	s += " " + sb.State
	if sb.Error != "" {
		s += ": " + sb.Error
	}
	from := sb.Image
	switch {
	case sb.Template != "":
		from = "template " + sb.Template
	case sb.FromSnapshot != "":
		from = "snapshot " + sb.FromSnapshot
	}
	return s + fmt.Sprintf(", %g CPU, %d MB, from %s", sb.CPUs, sb.MemoryMB, from)
}

func sandboxResult(prefix string, sb api.Sandbox) (*mcp.CallToolResult, api.Sandbox, error) {
	return text(prefix + sandboxLine(sb)), normalize(sb), nil
}

func sandboxesResult(sbs []api.Sandbox, none string) (*mcp.CallToolResult, sandboxList, error) {
	out := sandboxList{Sandboxes: make([]api.Sandbox, len(sbs))}
	lines := make([]string, len(sbs))
	for i, sb := range sbs {
		out.Sandboxes[i] = normalize(sb)
		lines[i] = sandboxLine(sb)
	}
	if len(sbs) == 0 {
		return text(none), out, nil
	}
	return text(strings.Join(lines, "\n")), out, nil
}

// writeStreams appends a command's output to b, each stream under a
// heading, empty ones left out.
func writeStreams(b *strings.Builder, stdout, stderr string, truncated bool) {
	for _, s := range []struct{ name, text string }{{"stdout", stdout}, {"stderr", stderr}} {
		if s.text == "" {
			continue
		}
		fmt.Fprintf(b, "\n--- %s ---\n%s", s.name, strings.TrimRight(s.text, "\n"))
	}
	if truncated {
		b.WriteString("\n(output cut to its last bytes; redirect to a file and read_file for all of it)")
	}
}

// lastBytes returns the last n bytes of s, starting at a whole
// character, and whether it cut.
func lastBytes(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	cut := len(s) - n
	for cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut++
	}
	return s[cut:], true
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
