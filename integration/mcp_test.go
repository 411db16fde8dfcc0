package integration

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/warrenhq/warren/api"
)

// TestMCP drives `warren mcp` as an MCP client would: the Go MCP SDK's
// client spawns the built binary and talks to it over stdio, and the tools
// act on a real server.
func TestMCP(t *testing.T) {
	s := StartServer(t)
	ctx := ctxT(t)
	key, err := os.ReadFile(filepath.Join(s.StateDir, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, "warren"), "mcp")
	cmd.Env = append(os.Environ(), "WARREN_API_URL=http://"+s.Addr, "WARREN_API_KEY="+strings.TrimSpace(string(key)))
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	cl := mcp.NewClient(&mcp.Implementation{Name: "warren-test", Version: "0"}, nil)
	cs, err := cl.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connecting to warren mcp: %v\n%s", err, stderr.String())
	}
	defer cs.Close()

	init := cs.InitializeResult()
	if init.ServerInfo.Name != "warren" || init.Instructions == "" {
		t.Errorf("initialize: got server %+v, instructions %q; want warren with instructions", init.ServerInfo, init.Instructions)
	}
	tl, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tl.Tools {
		names = append(names, tool.Name)
		if len(tool.Description) < 40 || tool.InputSchema == nil || tool.OutputSchema == nil {
			t.Errorf("tool %s: want a description, an input schema and an output schema; got %q, %v, %v",
				tool.Name, tool.Description, tool.InputSchema, tool.OutputSchema)
		}
	}
	for _, want := range []string{"create_sandbox", "list_sandboxes", "get_sandbox", "pause_sandbox", "resume_sandbox",
		"delete_sandbox", "exec", "get_job", "list_jobs", "kill_job", "run_code", "read_file", "write_file", "list_files",
		"snapshot_sandbox", "list_snapshots", "revert_sandbox", "fork_sandbox", "delete_snapshot"} {
		if !slices.Contains(names, want) {
			t.Errorf("tools: no %s in %v", want, names)
		}
	}

	// call calls a tool that must succeed, decodes its structured content
	// into out (when not nil) and returns its text.
	call := func(name string, args map[string]any, out any) string {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, stderr.String())
		}
		txt := resultText(res)
		if res.IsError {
			t.Fatalf("%s %v: tool error: %s", name, args, txt)
		}
		if out != nil {
			b, _ := json.Marshal(res.StructuredContent)
			if err := json.Unmarshal(b, out); err != nil {
				t.Fatalf("%s: structured content %s: %v", name, b, err)
			}
		}
		return txt
	}
	// callErr calls a tool that must fail and returns its error text.
	callErr := func(name string, args map[string]any) string {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !res.IsError {
			t.Fatalf("%s %v: got success %q, want a tool error", name, args, resultText(res))
		}
		return resultText(res)
	}

	var sb api.Sandbox
	txt := call("create_sandbox", map[string]any{"memory_mb": 512, "name": "mcp-test", "metadata": map[string]any{"by": "mcp"}}, &sb)
	if !strings.HasPrefix(sb.ID, "sb-") || sb.State != api.StateRunning || !strings.Contains(txt, sb.ID) {
		t.Fatalf("create_sandbox: got %+v, text %q", sb, txt)
	}
	id := sb.ID
	var list struct{ Sandboxes []api.Sandbox }
	call("list_sandboxes", map[string]any{"metadata": map[string]any{"by": "mcp"}}, &list)
	if len(list.Sandboxes) != 1 || list.Sandboxes[0].ID != id {
		t.Errorf("list_sandboxes: got %+v, want just %s", list.Sandboxes, id)
	}

	// exec: foreground, argv, a named shell, background jobs.
	var ex struct {
		ExitCode *int   `json:"exit_code"`
		Stdout   string `json:"stdout"`
		Stderr   string `json:"stderr"`
		Job      *api.Job
	}
	txt = call("exec", map[string]any{"sandbox_id": id, "command": "echo hi; echo err >&2; exit 3"}, &ex)
	if ex.ExitCode == nil || *ex.ExitCode != 3 || ex.Stdout != "hi\n" || ex.Stderr != "err\n" || !strings.Contains(txt, "exit code 3") {
		t.Errorf("exec: got %+v, text %q", ex, txt)
	}
	call("exec", map[string]any{"sandbox_id": id, "argv": []string{"printf", "%s", "a b"}}, &ex)
	if ex.Stdout != "a b" {
		t.Errorf("exec argv: got stdout %q, want %q", ex.Stdout, "a b")
	}
	call("exec", map[string]any{"sandbox_id": id, "shell": "dev", "command": "cd /tmp; export A=1"}, nil)
	call("exec", map[string]any{"sandbox_id": id, "shell": "dev", "command": "pwd; echo $A"}, &ex)
	if ex.Stdout != "/tmp\n1\n" {
		t.Errorf("exec in a named shell: got %q, want the shell's cwd and variable kept", ex.Stdout)
	}
	ex.Job = nil
	call("exec", map[string]any{"sandbox_id": id, "command": "echo bg; sleep 0.5; echo done >&2", "background": true}, &ex)
	if ex.Job == nil || !strings.HasPrefix(ex.Job.ID, "job-") {
		t.Fatalf("exec background: got %+v, want a job", ex)
	}
	var job struct {
		Job    api.Job
		Stdout string
		Stderr string
	}
	call("get_job", map[string]any{"sandbox_id": id, "job_id": ex.Job.ID, "wait_s": 60}, &job)
	if job.Job.State != api.JobExited || job.Stdout != "bg\n" || job.Stderr != "done\n" {
		t.Errorf("get_job: got %+v, want exited with its output", job)
	}
	call("exec", map[string]any{"sandbox_id": id, "command": "sleep 300", "background": true}, &ex)
	call("kill_job", map[string]any{"sandbox_id": id, "job_id": ex.Job.ID, "signal": "KILL"}, nil)
	call("get_job", map[string]any{"sandbox_id": id, "job_id": ex.Job.ID, "wait_s": 60}, &job)
	if job.Job.State != api.JobKilled {
		t.Errorf("kill_job: got %+v, want killed", job.Job)
	}
	var jobs struct{ Jobs []api.Job }
	call("list_jobs", map[string]any{"sandbox_id": id}, &jobs)
	if len(jobs.Jobs) != 2 {
		t.Errorf("list_jobs: got %d jobs, want 2", len(jobs.Jobs))
	}

	// Files.
	var fe api.FileEntry
	call("write_file", map[string]any{"sandbox_id": id, "path": "/work/hello.txt", "content": "hello mcp"}, &fe)
	if fe.Size != 9 {
		t.Errorf("write_file: got %+v, want 9 bytes", fe)
	}
	var fc struct {
		Content, Encoding string
		NextOffset        *int64 `json:"next_offset"`
	}
	if txt := call("read_file", map[string]any{"sandbox_id": id, "path": "/work/hello.txt"}, &fc); fc.Content != "hello mcp" || fc.Encoding != "utf-8" || txt != "hello mcp" {
		t.Errorf("read_file: got %+v, text %q", fc, txt)
	}
	call("read_file", map[string]any{"sandbox_id": id, "path": "/work/hello.txt", "max_bytes": 5}, &fc)
	if fc.Content != "hello" || fc.NextOffset == nil || *fc.NextOffset != 5 {
		t.Errorf("read_file max_bytes 5: got %+v, want hello and next offset 5", fc)
	}
	blob := []byte{0, 1, 2, 255, 254}
	call("write_file", map[string]any{"sandbox_id": id, "path": "/work/bin", "content": base64.StdEncoding.EncodeToString(blob),
		"encoding": "base64", "mode": "0755"}, &fe)
	call("read_file", map[string]any{"sandbox_id": id, "path": "/work/bin"}, &fc)
	if got, _ := base64.StdEncoding.DecodeString(fc.Content); fc.Encoding != "base64" || !bytes.Equal(got, blob) || fe.Mode != "0755" {
		t.Errorf("binary file: got %+v (mode %s), want base64 of %v, 0755", fc, fe.Mode, blob)
	}
	var fl struct{ Entries []api.FileEntry }
	call("list_files", map[string]any{"sandbox_id": id, "path": "/work"}, &fl)
	var got []string
	for _, e := range fl.Entries {
		got = append(got, e.Name)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"bin", "hello.txt"}) {
		t.Errorf("list_files: got %v, want bin and hello.txt", got)
	}
	if msg := callErr("read_file", map[string]any{"sandbox_id": id, "path": "/work/nope"}); !strings.Contains(msg, "/work/nope") {
		t.Errorf("read_file of a missing file: got %q, want it named", msg)
	}

	// Code.
	var cr api.CodeResult
	if txt := call("run_code", map[string]any{"sandbox_id": id, "code": "x = 20\nprint('side')\nx * 2 + 2"}, &cr); cr.Result != "42" || cr.Stdout != "side\n" || !strings.Contains(txt, "42") {
		t.Errorf("run_code: got %+v, text %q", cr, txt)
	}
	call("run_code", map[string]any{"sandbox_id": id, "code": "x / 0"}, &cr)
	if cr.Error == nil || cr.Error.Name != "ZeroDivisionError" {
		t.Errorf("run_code raising: got %+v, want a ZeroDivisionError", cr)
	}

	// Snapshot, revert, fork.
	var sn api.Snapshot
	call("snapshot_sandbox", map[string]any{"sandbox_id": id, "name": "before"}, &sn)
	if !strings.HasPrefix(sn.ID, "sn-") || sn.SandboxID != id || sn.Name != "before" {
		t.Fatalf("snapshot_sandbox: got %+v", sn)
	}
	var sns struct{ Snapshots []api.Snapshot }
	call("list_snapshots", map[string]any{"sandbox_id": id}, &sns)
	if !slices.ContainsFunc(sns.Snapshots, func(x api.Snapshot) bool { return x.ID == sn.ID }) {
		t.Errorf("list_snapshots: %s not in %+v", sn.ID, sns.Snapshots)
	}
	call("write_file", map[string]any{"sandbox_id": id, "path": "/work/hello.txt", "content": "changed"}, nil)
	call("revert_sandbox", map[string]any{"sandbox_id": id, "snapshot_id": sn.ID}, &sb)
	if call("read_file", map[string]any{"sandbox_id": id, "path": "/work/hello.txt"}, nil) != "hello mcp" || sb.ID != id {
		t.Errorf("revert_sandbox: the file did not come back")
	}
	var forks struct{ Sandboxes []api.Sandbox }
	call("fork_sandbox", map[string]any{"sandbox_id": id, "count": 2}, &forks)
	if len(forks.Sandboxes) != 2 {
		t.Fatalf("fork_sandbox: got %+v, want 2 sandboxes", forks)
	}
	for _, f := range forks.Sandboxes {
		if txt := call("read_file", map[string]any{"sandbox_id": f.ID, "path": "/work/hello.txt"}, nil); txt != "hello mcp" {
			t.Errorf("fork %s: got %q, want the parent's file", f.ID, txt)
		}
		call("delete_sandbox", map[string]any{"sandbox_id": f.ID}, nil)
	}

	// Pause and resume; errors are tool errors that say what to do.
	call("pause_sandbox", map[string]any{"sandbox_id": id}, &sb)
	if sb.State != api.StatePaused {
		t.Errorf("pause_sandbox: got state %s", sb.State)
	}
	if msg := callErr("exec", map[string]any{"sandbox_id": id, "command": "true"}); !strings.Contains(msg, "paused") {
		t.Errorf("exec in a paused sandbox: got %q, want it to say the sandbox is paused", msg)
	}
	call("resume_sandbox", map[string]any{"sandbox_id": id}, &sb)
	if call("exec", map[string]any{"sandbox_id": id, "shell": "dev", "command": "echo $A"}, &ex); sb.State != api.StateRunning || ex.Stdout != "1\n" {
		t.Errorf("resume_sandbox: got state %s, shell output %q; want running, the shell's variable kept", sb.State, ex.Stdout)
	}
	callErr("exec", map[string]any{"sandbox_id": id})
	callErr("exec", map[string]any{"command": "true"}) // sandbox_id is required

	call("delete_sandbox", map[string]any{"sandbox_id": id}, nil)
	if msg := callErr("get_sandbox", map[string]any{"sandbox_id": id}); !strings.Contains(msg, "not found") {
		t.Errorf("get_sandbox after delete: got %q, want not found", msg)
	}
	call("delete_snapshot", map[string]any{"snapshot_id": sn.ID}, nil)
	call("list_sandboxes", nil, &list)
	if len(list.Sandboxes) != 0 {
		t.Errorf("list_sandboxes after deleting all: got %+v", list.Sandboxes)
	}
}

func resultText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// lockedBuffer is a bytes.Buffer safe to write from a process's output
// copier while a test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
