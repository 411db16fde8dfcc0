package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/warrenhq/warren/api"
)

func TestExecShellAndBackground(t *testing.T) {
	var got api.ExecRequest
	url := fakeAPI(t, map[string]http.HandlerFunc{
		"POST /v1/sandboxes/{id}/exec": func(w http.ResponseWriter, r *http.Request) {
			got = api.ExecRequest{}
			json.NewDecoder(r.Body).Decode(&got)
			if got.Background {
				code := 0
				writeAPIJSON(w, http.StatusAccepted, api.Job{ID: "job-abcd1234", State: api.JobRunning, ExitCode: &code})
				return
			}
			w.Header().Set("Content-Type", "application/x-ndjson")
			out, code := "ran: "+got.Command+"\n", 3
			enc := json.NewEncoder(w)
			enc.Encode(api.ExecEvent{Stdout: &out})
			enc.Encode(api.ExecEvent{ExitCode: &code})
		},
	})
	res := runCLI(t, url, "", "exec", "--shell", "main", "sb-1", "--", "cd", "/tmp", "&&", "false")
	if res.code != 3 || res.stdout != "ran: cd /tmp && false\n" || got.Shell != "main" || got.Cmd != nil {
		t.Errorf("--shell: got exit %d stdout %q request %+v", res.code, res.stdout, got)
	}
	res = runCLI(t, url, "", "exec", "--background", "sb-1", "--", "sleep", "9")
	if res.code != 0 || res.stdout != "job-abcd1234\n" || !got.Background || strings.Join(got.Cmd, " ") != "sleep 9" {
		t.Errorf("--background: got exit %d stdout %q request %+v", res.code, res.stdout, got)
	}
	res = runCLI(t, url, "", "exec", "--background", "--shell", "s", "sb-1", "--", "x")
	if res.code != exitUsage {
		t.Errorf("--shell with --background: got exit %d, want %d", res.code, exitUsage)
	}
}

func TestJobsLogsKill(t *testing.T) {
	code := 0
	started := time.Now().Add(-time.Minute)
	job := api.Job{ID: "job-abcd1234", Command: "make all", State: api.JobExited, ExitCode: &code, StartedAt: started, StdoutBytes: 2048}
	var gotQuery, gotSignal string
	url := fakeAPI(t, map[string]http.HandlerFunc{
		"GET /v1/sandboxes/{id}/jobs": func(w http.ResponseWriter, r *http.Request) {
			writeAPIJSON(w, 200, api.JobList{Jobs: []api.Job{job}})
		},
		"GET /v1/sandboxes/{id}/jobs/{job}": func(w http.ResponseWriter, r *http.Request) {
			if r.PathValue("job") != job.ID {
				writeAPIError(w, 404, api.CodeNotFound, "no job "+r.PathValue("job"))
				return
			}
			writeAPIJSON(w, 200, job)
		},
		"GET /v1/sandboxes/{id}/jobs/{job}/output": func(w http.ResponseWriter, r *http.Request) {
			gotQuery = r.URL.RawQuery
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write([]byte("bin\x00\xffary"))
		},
		"POST /v1/sandboxes/{id}/jobs/{job}/kill": func(w http.ResponseWriter, r *http.Request) {
			var req api.KillRequest
			json.NewDecoder(r.Body).Decode(&req)
			gotSignal = req.Signal
			writeAPIJSON(w, 200, job)
		},
	})
	res := runCLI(t, url, "", "jobs", "sb-1")
	if res.code != 0 || !strings.Contains(res.stdout, "job-abcd1234") || !strings.Contains(res.stdout, "2.0 KiB") || !strings.Contains(res.stdout, "make all") {
		t.Errorf("jobs: got exit %d stdout %q", res.code, res.stdout)
	}
	res = runCLI(t, url, "", "--json", "jobs", "sb-1", "job-abcd1234")
	var j api.Job
	if res.code != 0 || json.Unmarshal([]byte(res.stdout), &j) != nil || j.ID != job.ID {
		t.Errorf("jobs one --json: got exit %d stdout %q", res.code, res.stdout)
	}
	res = runCLI(t, url, "", "jobs", "sb-1", "job-nope")
	if res.code != exitError || !strings.Contains(res.stderr, "no job") {
		t.Errorf("unknown job: got exit %d stderr %q", res.code, res.stderr)
	}
	res = runCLI(t, url, "", "logs", "-f", "--stderr", "--offset", "5", "sb-1", "job-abcd1234")
	if res.code != 0 || res.stdout != "bin\x00\xffary" || gotQuery != "follow=true&offset=5&stream=stderr" {
		t.Errorf("logs: got exit %d stdout %q query %q", res.code, res.stdout, gotQuery)
	}
	res = runCLI(t, url, "", "kill", "-s", "KILL", "sb-1", "job-abcd1234")
	if res.code != 0 || gotSignal != "KILL" {
		t.Errorf("kill: got exit %d signal %q", res.code, gotSignal)
	}
}

func TestCode(t *testing.T) {
	var got api.CodeRequest
	url := fakeAPI(t, map[string]http.HandlerFunc{
		"POST /v1/sandboxes/{id}/code": func(w http.ResponseWriter, r *http.Request) {
			got = api.CodeRequest{}
			json.NewDecoder(r.Body).Decode(&got)
			res := api.CodeResult{Stdout: "printed\n", Result: "42", ExecutionCount: 1}
			if strings.Contains(got.Code, "raise") {
				res = api.CodeResult{Stderr: "warn\n", Error: &api.CodeError{Name: "ValueError", Value: "bad",
					Traceback: "Traceback (most recent call last):\nValueError: bad\n"}}
			}
			writeAPIJSON(w, 200, res)
		},
	})
	res := runCLI(t, url, "", "code", "--context", "c1", "--timeout", "5", "sb-1", "x = 6 * 7\nx")
	if res.code != 0 || res.stdout != "printed\n42\n" || got.Context != "c1" || got.TimeoutS != 5 || got.Code != "x = 6 * 7\nx" {
		t.Errorf("code: got exit %d stdout %q request %+v", res.code, res.stdout, got)
	}
	res = runCLI(t, url, "raise ValueError('bad')", "code", "sb-1")
	if res.code != exitError || res.stderr != "warn\nTraceback (most recent call last):\nValueError: bad\n" || got.Code != "raise ValueError('bad')" {
		t.Errorf("exception from stdin: got exit %d stderr %q request %+v", res.code, res.stderr, got)
	}
	file := filepath.Join(t.TempDir(), "a.py")
	os.WriteFile(file, []byte("from file"), 0o644)
	if res := runCLI(t, url, "", "code", "-f", file, "sb-1"); res.code != 0 || got.Code != "from file" {
		t.Errorf("-f: got exit %d request %+v", res.code, got)
	}
}

// TestCpRecursive copies a directory into a fake sandbox that keeps the tar,
// and back out.
func TestCpRecursive(t *testing.T) {
	var (
		mu      sync.Mutex
		stored  = map[string][]byte{} // remote dir -> tar
		dirs    = map[string]bool{"/work": true}
		putPath string
	)
	url := fakeAPI(t, map[string]http.HandlerFunc{
		"GET /v1/sandboxes/{id}/files/stat": func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			p := r.URL.Query().Get("path")
			if dirs[p] || stored[p] != nil {
				writeAPIJSON(w, 200, api.FileEntry{Path: p, Type: "dir"})
				return
			}
			writeAPIError(w, 404, api.CodeNotFound, "no such file: "+p)
		},
		"PUT /v1/sandboxes/{id}/files/archive": func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			defer mu.Unlock()
			putPath = r.URL.Query().Get("path")
			stored[putPath] = b
			writeAPIJSON(w, 200, api.ArchiveResult{Path: putPath, Entries: 3})
		},
		"GET /v1/sandboxes/{id}/files/archive": func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			b := stored[r.URL.Query().Get("path")]
			if b == nil {
				writeAPIError(w, 404, api.CodeNotFound, "no such file")
				return
			}
			w.Write(b)
		},
	})
	src := filepath.Join(t.TempDir(), "proj")
	os.MkdirAll(filepath.Join(src, "sub"), 0o755)
	os.WriteFile(filepath.Join(src, "sub", "f.txt"), []byte("data"), 0o600)
	os.Symlink("sub/f.txt", filepath.Join(src, "link"))

	// Into an existing directory: under its own name.
	if res := runCLI(t, url, "", "cp", "-r", src, "sb-1:/work"); res.code != 0 || putPath != "/work/proj" {
		t.Fatalf("upload: got exit %d stderr %q path %q", res.code, res.stderr, putPath)
	}
	// Without -r: refused.
	if res := runCLI(t, url, "", "cp", src, "sb-1:/work"); res.code != exitUsage || !strings.Contains(res.stderr, "copy it with -r") {
		t.Errorf("without -r: got exit %d stderr %q", res.code, res.stderr)
	}
	// Out to a new local path: it becomes the copy.
	dst := filepath.Join(t.TempDir(), "back")
	if res := runCLI(t, url, "", "cp", "-r", "sb-1:/work/proj", dst); res.code != 0 {
		t.Fatalf("download: got exit %d stderr %q", res.code, res.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "link")); string(b) != "data" {
		t.Errorf("downloaded: got %q through the link", b)
	}
	if fi, _ := os.Stat(filepath.Join(dst, "sub", "f.txt")); fi == nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("downloaded mode: got %v", fi)
	}
	// Out to an existing directory: inside it.
	existing := t.TempDir()
	if res := runCLI(t, url, "", "cp", "-r", "sb-1:/work/proj", existing); res.code != 0 {
		t.Fatalf("download into a directory: got exit %d stderr %q", res.code, res.stderr)
	}
	if _, err := os.Stat(filepath.Join(existing, "proj", "sub", "f.txt")); err != nil {
		t.Errorf("download into a directory: %v", err)
	}
	// A tar to stdout.
	res := runCLI(t, url, "", "cp", "-r", "sb-1:/work/proj", "-")
	if res.code != 0 || !bytes.Equal([]byte(res.stdout), stored["/work/proj"]) {
		t.Errorf("to stdout: got exit %d, %d bytes", res.code, len(res.stdout))
	}
}

func TestShellCommand(t *testing.T) {
	var gotQuery string
	url := fakeAPI(t, map[string]http.HandlerFunc{
		"GET /v1/sandboxes/{id}/pty": func(w http.ResponseWriter, r *http.Request) {
			gotQuery = r.URL.RawQuery
			conn, err := websocket.Accept(w, r, nil)
			if err != nil {
				return
			}
			defer conn.CloseNow()
			var typed bytes.Buffer
			for {
				_, data, err := conn.Read(r.Context())
				if err != nil {
					return
				}
				typed.Write(data)
				if bytes.HasSuffix(data, []byte{4}) { // ^D: the shell ends
					break
				}
			}
			conn.Write(r.Context(), websocket.MessageBinary, []byte("typed: "+strings.TrimSuffix(typed.String(), "\x04")))
			code := 7
			b, _ := json.Marshal(api.TerminalMessage{ExitCode: &code})
			conn.Write(r.Context(), websocket.MessageText, b)
			conn.Close(websocket.StatusNormalClosure, "")
		},
	})
	res := runCLI(t, url, "echo hi\n", "shell", "sb-1")
	if res.code != 7 || res.stdout != "typed: echo hi\n" {
		t.Errorf("got exit %d stdout %q stderr %q, want 7 and the typed line", res.code, res.stdout, res.stderr)
	}
	if gotQuery != "" {
		t.Errorf("query: got %q, want no size when stdout is not a terminal", gotQuery)
	}
}
