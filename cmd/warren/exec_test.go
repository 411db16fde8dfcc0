package main

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/warrenhq/warren/api"
)

// execAPI answers exec like a sandbox whose commands print their argv to
// stdout, "err" to stderr, and exit with the number in WANT_EXIT.
func execAPI(t *testing.T, got *api.ExecRequest) string {
	return fakeAPI(t, map[string]http.HandlerFunc{
		"POST /v1/sandboxes/{id}/exec": func(w http.ResponseWriter, r *http.Request) {
			if id := r.PathValue("id"); id != "sb-1" {
				writeAPIError(w, 404, api.CodeNotFound, `sandbox "`+id+`": not found`)
				return
			}
			if err := json.NewDecoder(r.Body).Decode(got); err != nil {
				writeAPIError(w, 400, api.CodeInvalid, err.Error())
				return
			}
			code, _ := strconv.Atoi(got.Env["WANT_EXIT"])
			stdout := strings.Join(got.Cmd, "|") + "\n" + got.Stdin
			stderr := "err\n"
			if r.Header.Get("Accept") != "application/x-ndjson" {
				writeAPIJSON(w, 200, api.ExecResult{ExitCode: code, Stdout: stdout, Stderr: stderr})
				return
			}
			w.Header().Set("Content-Type", "application/x-ndjson")
			enc := json.NewEncoder(w)
			enc.Encode(api.ExecEvent{Stdout: &stdout})
			enc.Encode(api.ExecEvent{Stderr: &stderr})
			enc.Encode(api.ExecEvent{ExitCode: &code, TimedOut: code == 124})
		},
	})
}

func TestExecExitCode(t *testing.T) {
	var got api.ExecRequest
	url := execAPI(t, &got)
	tests := []struct {
		name     string
		args     []string
		stdin    string
		wantCode int
		wantArgv []string
		wantOut  string
		wantErr  string
	}{
		{"success", []string{"exec", "sb-1", "--", "true"}, "", 0, []string{"true"}, "true\n", "err\n"},
		{"exit 3", []string{"exec", "--env", "WANT_EXIT=3", "sb-1", "--", "sh", "-c", "exit 3"}, "", 3,
			[]string{"sh", "-c", "exit 3"}, "sh|-c|exit 3\n", "err\n"},
		{"flags after ID are the command's", []string{"exec", "sb-1", "ls", "-la", "--cwd", "/x"}, "", 0,
			[]string{"ls", "-la", "--cwd", "/x"}, "ls|-la|--cwd|/x\n", "err\n"},
		{"one word with spaces stays one argument", []string{"exec", "sb-1", "--", "echo hi; exit 2"}, "", 0,
			[]string{"echo hi; exit 2"}, "echo hi; exit 2\n", "err\n"},
		{"stdin", []string{"exec", "--stdin", "sb-1", "--", "cat"}, "data\n", 0, []string{"cat"}, "cat\ndata\n", "err\n"},
		{"timeout", []string{"exec", "--timeout", "1.5", "--env", "WANT_EXIT=124", "sb-1", "--", "sleep", "9"}, "", 124,
			[]string{"sleep", "9"}, "sleep|9\n", "err\nwarren: the command timed out after 1.5s and was killed\n"},
		{"out of range code", []string{"exec", "--env", "WANT_EXIT=-1", "sb-1", "--", "x"}, "", exitError,
			[]string{"x"}, "x\n", "err\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got = api.ExecRequest{}
			res := runCLI(t, url, tt.stdin, tt.args...)
			if res.code != tt.wantCode {
				t.Errorf("exit code: got %d, want %d (stderr %q)", res.code, tt.wantCode, res.stderr)
			}
			if !slices.Equal(got.Cmd, tt.wantArgv) {
				t.Errorf("argv: got %q, want %q", got.Cmd, tt.wantArgv)
			}
			if res.stdout != tt.wantOut || res.stderr != tt.wantErr {
				t.Errorf("got stdout %q, stderr %q; want %q, %q", res.stdout, res.stderr, tt.wantOut, tt.wantErr)
			}
		})
	}
	if got.TimeoutS != 0 || got.Cwd != "" {
		t.Errorf("request: got timeout %v cwd %q, want neither", got.TimeoutS, got.Cwd)
	}
}

func TestExecJSON(t *testing.T) {
	var got api.ExecRequest
	url := execAPI(t, &got)
	res := runCLI(t, url, "", "--json", "exec", "--cwd", "/work", "--env", "WANT_EXIT=7", "sb-1", "--", "make")
	if res.code != 7 {
		t.Errorf("exit code: got %d, want 7 (stderr %q)", res.code, res.stderr)
	}
	if got.Cwd != "/work" {
		t.Errorf("cwd: got %q, want /work", got.Cwd)
	}
	var er api.ExecResult
	if err := json.Unmarshal([]byte(res.stdout), &er); err != nil {
		t.Fatalf("stdout %q: %v", res.stdout, err)
	}
	if er.ExitCode != 7 || er.Stdout != "make\n" || er.Stderr != "err\n" {
		t.Errorf("result: got %+v, want exit 7, stdout make, stderr err", er)
	}
}

func TestExecNotFound(t *testing.T) {
	var got api.ExecRequest
	url := execAPI(t, &got)
	res := runCLI(t, url, "", "exec", "sb-nope", "--", "true")
	if res.code != exitError || !strings.Contains(res.stderr, "run `warren ls`") {
		t.Errorf("got exit %d, stderr %q; want 1 and a hint to run warren ls", res.code, res.stderr)
	}
}
