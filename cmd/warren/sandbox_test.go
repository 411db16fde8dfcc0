package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/warrenhq/warren/api"
)

func TestCreatePrintsOnlyTheID(t *testing.T) {
	var got api.CreateSandboxRequest
	url := fakeAPI(t, map[string]http.HandlerFunc{
		"POST /v1/sandboxes": func(w http.ResponseWriter, r *http.Request) {
			if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
				writeAPIError(w, 400, api.CodeInvalid, err.Error())
				return
			}
			writeAPIJSON(w, http.StatusCreated, api.Sandbox{ID: "sb-123", State: api.StateRunning, Image: got.Image})
		},
	})

	res := runCLI(t, url, "", "create", "--image", "python:3.12", "--cpus", "2", "--memory", "1024",
		"--env", "A=1", "--env", "B=x,y", "--metadata", "owner=me")
	if res.code != 0 {
		t.Fatalf("exit code: got %d, want 0 (stderr %q)", res.code, res.stderr)
	}
	if res.stdout != "sb-123\n" {
		t.Errorf("stdout: got %q, want %q", res.stdout, "sb-123\n")
	}
	if got.Image != "python:3.12" || got.CPUs == nil || *got.CPUs != 2 || got.MemoryMB == nil || *got.MemoryMB != 1024 {
		t.Errorf("request: got %+v, want image python:3.12, 2 cpus, 1024 MB", got)
	}
	if got.DiskMB != nil {
		t.Errorf("request disk_mb: got %v, want unset (the server's default)", *got.DiskMB)
	}
	if got.Env["A"] != "1" || got.Env["B"] != "x,y" || got.Metadata["owner"] != "me" {
		t.Errorf("request env %v metadata %v: want A=1 B=x,y and owner=me", got.Env, got.Metadata)
	}

	res = runCLI(t, url, "", "--json", "create")
	var sb api.Sandbox
	if err := json.Unmarshal([]byte(res.stdout), &sb); err != nil || sb.ID != "sb-123" {
		t.Errorf("--json stdout: got %q (%v), want the sandbox sb-123", res.stdout, err)
	}
}

func sandboxListAPI(t *testing.T, sbs []api.Sandbox, gotQuery *string) string {
	return fakeAPI(t, map[string]http.HandlerFunc{
		"GET /v1/sandboxes": func(w http.ResponseWriter, r *http.Request) {
			*gotQuery = r.URL.RawQuery
			writeAPIJSON(w, 200, api.SandboxList{Sandboxes: sbs})
		},
	})
}

func TestLs(t *testing.T) {
	now := time.Now()
	sbs := []api.Sandbox{
		{ID: "sb-aaa", Name: "web", State: api.StateRunning, Image: "debian:bookworm", CPUs: 1.5, MemoryMB: 512, CreatedAt: now.Add(-3 * time.Minute)},
		{ID: "sb-bbb", State: api.StatePaused, Template: "py", CPUs: 2, MemoryMB: 2048, CreatedAt: now.Add(-50 * time.Hour)},
	}
	var query string
	url := sandboxListAPI(t, sbs, &query)

	res := runCLI(t, url, "", "ls", "--state", "running", "--metadata", "owner=me")
	if res.code != 0 {
		t.Fatalf("exit code: got %d, want 0 (stderr %q)", res.code, res.stderr)
	}
	if query != "metadata.owner=me&state=running" {
		t.Errorf("query: got %q, want %q", query, "metadata.owner=me&state=running")
	}
	lines := strings.Split(strings.TrimSuffix(res.stdout, "\n"), "\n")
	want := [][]string{
		{"ID", "NAME", "STATE", "IMAGE", "CPUS", "MEMORY", "CREATED"},
		{"sb-aaa", "web", "running", "debian:bookworm", "1.5", "512", "MB", "3m", "ago"},
		{"sb-bbb", "-", "paused", "template:py", "2", "2048", "MB", "2d", "ago"},
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), res.stdout)
	}
	for i, line := range lines {
		if got := strings.Fields(line); strings.Join(got, " ") != strings.Join(want[i], " ") {
			t.Errorf("line %d: got %q, want %q", i, got, want[i])
		}
	}
	// The columns line up: every row's STATE starts where the header's does.
	col := strings.Index(lines[0], "STATE")
	for _, line := range lines[1:] {
		if line[col-1] != ' ' || line[col] == ' ' {
			t.Errorf("row %q is not aligned with header %q", line, lines[0])
		}
	}

	res = runCLI(t, url, "", "ls", "--json")
	var got []api.Sandbox
	if err := json.Unmarshal([]byte(res.stdout), &got); err != nil {
		t.Fatalf("--json stdout %q: %v", res.stdout, err)
	}
	if len(got) != 2 || got[0].ID != "sb-aaa" || got[1].Template != "py" {
		t.Errorf("--json: got %+v, want the two sandboxes", got)
	}
}

func TestLsJSONEmptyIsAList(t *testing.T) {
	var query string
	url := sandboxListAPI(t, nil, &query)
	res := runCLI(t, url, "", "--json", "ls")
	if strings.TrimSpace(res.stdout) != "[]" {
		t.Errorf("stdout: got %q, want []", res.stdout)
	}
}

func TestNotFoundSuggestsLs(t *testing.T) {
	url := fakeAPI(t, map[string]http.HandlerFunc{
		"GET /v1/sandboxes/{id}": func(w http.ResponseWriter, r *http.Request) {
			writeAPIError(w, 404, api.CodeNotFound, `sandbox "`+r.PathValue("id")+`": not found`)
		},
	})
	res := runCLI(t, url, "", "get", "sb-nope")
	want := "warren: sandbox \"sb-nope\": not found; run `warren ls` to see your sandboxes\n"
	if res.code != exitError || res.stderr != want {
		t.Errorf("got exit %d, stderr %q; want exit 1, stderr %q", res.code, res.stderr, want)
	}
}

func TestGet(t *testing.T) {
	url := fakeAPI(t, map[string]http.HandlerFunc{
		"GET /v1/sandboxes/{id}": func(w http.ResponseWriter, r *http.Request) {
			writeAPIJSON(w, 200, api.Sandbox{ID: "sb-1", State: api.StateError, Error: "agent did not start",
				Image: "debian:bookworm", CPUs: 1, MemoryMB: 512, DiskMB: 4096,
				Network:  api.Network{Egress: []string{"10.0.0.0/8", "example.com"}},
				Metadata: map[string]string{"owner": "me"}})
		},
	})
	res := runCLI(t, url, "", "get", "sb-1")
	for _, want := range []string{"id:", "sb-1", "error:", "agent did not start", "egress:", "10.0.0.0/8, example.com", "metadata:", "owner=me"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, res.stdout)
		}
	}
}

func TestRm(t *testing.T) {
	url := fakeAPI(t, map[string]http.HandlerFunc{
		"DELETE /v1/sandboxes/{id}": func(w http.ResponseWriter, r *http.Request) {
			switch id := r.PathValue("id"); id {
			case "sb-gone":
				writeAPIError(w, 404, api.CodeNotFound, `sandbox "sb-gone": not found`)
			case "sb-busy":
				writeAPIError(w, 409, api.CodeConflict, "sandbox sb-busy is being created; retry")
			default:
				w.WriteHeader(http.StatusNoContent)
			}
		},
	})
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantOut    string
		wantErrHas []string
	}{
		{"all deleted", []string{"rm", "sb-1", "sb-2"}, 0, "sb-1\nsb-2\n", nil},
		{"one missing", []string{"rm", "sb-1", "sb-gone"}, exitError, "sb-1\n",
			[]string{"rm sb-gone: sandbox \"sb-gone\": not found; run `warren ls`", "1 of 2 sandboxes not deleted"}},
		{"force ignores missing", []string{"rm", "--force", "sb-gone", "sb-1"}, 0, "sb-gone\nsb-1\n", nil},
		{"force keeps other errors", []string{"rm", "-f", "sb-busy"}, exitError, "",
			[]string{"rm sb-busy: sandbox sb-busy is being created; retry"}},
		{"no ids", []string{"rm"}, exitUsage, "", []string{"requires at least 1 arg"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runCLI(t, url, "", tt.args...)
			if res.code != tt.wantCode || res.stdout != tt.wantOut {
				t.Errorf("got exit %d, stdout %q; want %d, %q (stderr %q)", res.code, res.stdout, tt.wantCode, tt.wantOut, res.stderr)
			}
			for _, want := range tt.wantErrHas {
				if !strings.Contains(res.stderr, want) {
					t.Errorf("stderr %q lacks %q", res.stderr, want)
				}
			}
		})
	}
}

func TestAge(t *testing.T) {
	now := time.Date(2025, 1, 10, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		ago  time.Duration
		want string
	}{
		{0, "just now"},
		{-time.Minute, "just now"},
		{12 * time.Second, "12s ago"},
		{3*time.Minute + 59*time.Second, "3m ago"},
		{5 * time.Hour, "5h ago"},
		{47 * time.Hour, "47h ago"},
		{72 * time.Hour, "3d ago"},
	}
	for _, tt := range tests {
		if got := age(now.Add(-tt.ago), now); got != tt.want {
			t.Errorf("age(%v ago): got %q, want %q", tt.ago, got, tt.want)
		}
	}
	if got := age(time.Time{}, now); got != "-" {
		t.Errorf("age(zero): got %q, want -", got)
	}
}
