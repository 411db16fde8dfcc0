package mcpserver

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/client"
)

// fakeAPI is a Warren API of canned answers that records the calls made
// to it ("POST /v1/sandboxes/sb-1/exec?...").
type fakeAPI struct {
	mu    sync.Mutex
	calls []string
	mux   *http.ServeMux
}

func newFakeAPI() *fakeAPI {
	f := &fakeAPI{mux: http.NewServeMux()}
	return f
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	call := r.Method + " " + r.URL.Path
	if r.URL.RawQuery != "" {
		call += "?" + r.URL.RawQuery
	}
	f.calls = append(f.calls, call)
	f.mu.Unlock()
	f.mux.ServeHTTP(w, r)
}

func (f *fakeAPI) called() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func answer(status int, v any) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(v)
	}
}

func apiError(status int, code, msg string) http.HandlerFunc {
	return answer(status, api.ErrorBody{Error: api.ErrorDetail{Code: code, Message: msg}})
}

// session starts an MCP server on f and returns a client session of it.
func session(t *testing.T, f *fakeAPI, opts Options) *mcp.ClientSession {
	t.Helper()
	hs := httptest.NewServer(f)
	t.Cleanup(hs.Close)
	srv := New(client.New(hs.URL, "key"), opts)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, nil).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) (string, bool) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	if out != nil && !res.IsError {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: structured content %s: %v", name, b, err)
		}
	}
	return strings.Join(parts, "\n"), res.IsError
}

func TestToolsDescribeThemselves(t *testing.T) {
	cs := session(t, newFakeAPI(), Options{})
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tools) < 15 {
		t.Errorf("got %d tools, want every tool registered", len(res.Tools))
	}
	for _, tool := range res.Tools {
		if len(tool.Description) < 40 || tool.OutputSchema == nil || tool.Annotations == nil && tool.Name != "exec" && tool.Name != "run_code" {
			t.Errorf("tool %s: description %q, output schema %v, annotations %v", tool.Name, tool.Description, tool.OutputSchema, tool.Annotations)
		}
	}
}

func TestExec(t *testing.T) {
	f := newFakeAPI()
	long := strings.Repeat("a", 30) + "é" + "0123456789"
	f.mux.HandleFunc("POST /v1/sandboxes/sb-1/exec", func(w http.ResponseWriter, r *http.Request) {
		var req api.ExecRequest
		json.NewDecoder(r.Body).Decode(&req)
		if req.Background {
			answer(202, api.Job{ID: "job-1", Command: req.Command, State: api.JobRunning})(w, r)
			return
		}
		if req.TimeoutS != defaultExecTimeoutS {
			apiError(400, api.CodeInvalid, "want the default timeout")(w, r)
			return
		}
		answer(200, api.ExecResult{ExitCode: 2, Stdout: long, Stderr: "bad\n", DurationMS: 5})(w, r)
	})
	f.mux.HandleFunc("POST /v1/sandboxes/sb-1/shells", apiError(409, api.CodeConflict, "shell \"dev\" already exists"))
	f.mux.HandleFunc("POST /v1/sandboxes/sb-gone/exec", apiError(404, api.CodeNotFound, `sandbox "sb-gone": not found`))
	cs := session(t, f, Options{MaxOutputBytes: 11})

	var out execOutput
	txt, isErr := callTool(t, cs, "exec", map[string]any{"sandbox_id": "sb-1", "command": "x"}, &out)
	// The last 11 bytes start inside "é": the cut moves to the next whole character.
	if isErr || *out.ExitCode != 2 || out.Stdout != "0123456789" || !out.Truncated || out.Stderr != "bad\n" {
		t.Errorf("exec: got %+v (error %v), want exit 2, the last whole characters, truncated", out, isErr)
	}
	for _, want := range []string{"exit code 2", "--- stdout ---\n0123456789", "--- stderr ---\nbad", "output cut"} {
		if !strings.Contains(txt, want) {
			t.Errorf("exec text %q: no %q", txt, want)
		}
	}

	// A named shell is started first; one that exists is fine.
	callTool(t, cs, "exec", map[string]any{"sandbox_id": "sb-1", "command": "x", "shell": "dev"}, &out)
	calls := f.called()
	if got := calls[len(calls)-2:]; got[0] != "POST /v1/sandboxes/sb-1/shells" || got[1] != "POST /v1/sandboxes/sb-1/exec" {
		t.Errorf("exec in a shell: got calls %v, want the shell made, then the exec", got)
	}

	callTool(t, cs, "exec", map[string]any{"sandbox_id": "sb-1", "command": "sleep 9", "background": true}, &out)
	if out.Job == nil || out.Job.ID != "job-1" {
		t.Errorf("exec background: got %+v, want job-1", out)
	}

	for _, tc := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"sandbox_id": "sb-gone", "command": "x"}, `sandbox "sb-gone": not found`},
		{map[string]any{"sandbox_id": "sb-1"}, "command"},
		{map[string]any{"sandbox_id": "sb-1", "command": "x", "argv": []string{"y"}}, "one of the two"},
		{map[string]any{"command": "x"}, "sandbox_id"},
	} {
		if txt, isErr := callTool(t, cs, "exec", tc.args, nil); !isErr || !strings.Contains(txt, tc.want) {
			t.Errorf("exec %v: got %q (error %v), want a tool error saying %q", tc.args, txt, isErr, tc.want)
		}
	}
}

func TestReadFile(t *testing.T) {
	f := newFakeAPI()
	files := map[string]string{"/text": "héllo", "/bin": "\x00\x01\xff"}
	f.mux.HandleFunc("GET /v1/sandboxes/sb-1/files/stat", func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Query().Get("path")
		answer(200, api.FileEntry{Path: p, Type: "file", Size: int64(len(files[p]))})(w, r)
	})
	f.mux.HandleFunc("GET /v1/sandboxes/sb-1/files", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(files[r.URL.Query().Get("path")]))
	})
	cs := session(t, f, Options{})
	next := func(n int64) *int64 { return &n }
	for _, tc := range []struct {
		args map[string]any
		want fileContent
	}{
		{map[string]any{"path": "/text"}, fileContent{Path: "/text", Content: "héllo", Encoding: "utf-8", Bytes: 6, Size: 6}},
		// Two bytes end inside "é": the answer ends before it.
		{map[string]any{"path": "/text", "max_bytes": 2}, fileContent{Path: "/text", Content: "h", Encoding: "utf-8", Bytes: 1, Size: 6, NextOffset: next(1)}},
		{map[string]any{"path": "/text", "offset": 1, "max_bytes": 2}, fileContent{Path: "/text", Content: "é", Encoding: "utf-8", Offset: 1, Bytes: 2, Size: 6, NextOffset: next(3)}},
		{map[string]any{"path": "/bin"}, fileContent{Path: "/bin", Content: "AAH/", Encoding: "base64", Bytes: 3, Size: 3}},
	} {
		tc.args["sandbox_id"] = "sb-1"
		var got fileContent
		if txt, isErr := callTool(t, cs, "read_file", tc.args, &got); isErr {
			t.Errorf("read_file %v: %s", tc.args, txt)
			continue
		}
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(tc.want)
		if string(gb) != string(wb) {
			t.Errorf("read_file %v: got %s, want %s", tc.args, gb, wb)
		}
	}
}

func TestGetJobReadsTheTail(t *testing.T) {
	f := newFakeAPI()
	f.mux.HandleFunc("GET /v1/sandboxes/sb-1/jobs/job-1", answer(200, api.Job{ID: "job-1", State: api.JobExited,
		ExitCode: new(int), StdoutBytes: 100}))
	f.mux.HandleFunc("GET /v1/sandboxes/sb-1/jobs/job-1/output", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(api.HeaderOffset, r.URL.Query().Get("offset"))
		w.Write([]byte(strings.Repeat("x", 10)))
	})
	cs := session(t, f, Options{MaxOutputBytes: 10})
	var out jobOutput
	callTool(t, cs, "get_job", map[string]any{"sandbox_id": "sb-1", "job_id": "job-1"}, &out)
	if out.StdoutFrom != 90 || out.NextStdout != 100 || out.Stdout != strings.Repeat("x", 10) {
		t.Errorf("get_job: got %+v, want the last 10 bytes, from 90", out)
	}
	calls := f.called()
	if !strings.Contains(strings.Join(calls, "\n"), "output?offset=90&stream=stdout") {
		t.Errorf("get_job: calls %v, want stdout read from offset 90", calls)
	}
	for _, c := range calls {
		if strings.Contains(c, "stream=stderr") {
			t.Errorf("get_job: read an empty stderr: %s", c)
		}
	}
}

func TestLastBytes(t *testing.T) {
	for _, tc := range []struct {
		in      string
		n       int
		want    string
		wantCut bool
	}{
		{"abc", 3, "abc", false},
		{"abc", 2, "bc", true},
		{"aé", 2, "é", true},
		{"aé", 1, "", true},
		{"", 0, "", false},
	} {
		if got, cut := lastBytes(tc.in, tc.n); got != tc.want || cut != tc.wantCut {
			t.Errorf("lastBytes(%q, %d): got %q, %v, want %q, %v", tc.in, tc.n, got, cut, tc.want, tc.wantCut)
		}
	}
}
