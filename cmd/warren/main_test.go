package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warrenhq/warren/api"
)

const testKey = "test-key"

// fakeAPI serves the few endpoints of the HTTP API a test needs, behind
// the same bearer-key check as the real server.
func fakeAPI(t *testing.T, routes map[string]http.HandlerFunc) string {
	t.Helper()
	mux := http.NewServeMux()
	for pattern, h := range routes {
		mux.HandleFunc(pattern, h)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" && r.Header.Get("Authorization") != "Bearer "+testKey {
			writeAPIError(w, http.StatusUnauthorized, api.CodeUnauthorized, "missing API key")
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func writeAPIError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(api.ErrorBody{Error: api.ErrorDetail{Code: code, Message: msg}})
}

func writeAPIJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// result is what one run of the CLI did.
type result struct {
	stdout, stderr string
	code           int
}

// runCLI runs warren with args against the server at url.
func runCLI(t *testing.T, url, stdin string, args ...string) result {
	t.Helper()
	for _, env := range []string{"WARREN_API_URL", "WARREN_API_KEY", "WARREN_KEY_FILE"} {
		t.Setenv(env, "")
	}
	var stdout, stderr bytes.Buffer
	all := append([]string{"--url", url, "--key", testKey}, args...)
	code := run(t.Context(), all, strings.NewReader(stdin), &stdout, &stderr)
	return result{stdout.String(), stderr.String(), code}
}

func TestUsageErrorsExit2(t *testing.T) {
	url := fakeAPI(t, nil)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, "unknown command"},
		{[]string{"get"}, "accepts 1 arg"},
		{[]string{"create", "--cpus", "many"}, "invalid argument"},
		{[]string{"create", "--env", "NOVALUE"}, `--env "NOVALUE": want KEY=VALUE`},
		{[]string{"create", "--metadata", "=v"}, `--metadata "=v": want KEY=VALUE`},
		{[]string{"ls", "--metadata", "owner"}, `--metadata "owner": want KEY=VALUE`},
		{[]string{"exec", "sb-1"}, "want a sandbox ID and a command"},
		{[]string{"exec", "sb-1", "--"}, "want a sandbox ID and a command"},
		{[]string{"cp", "a", "b"}, "one side must be ID:/path"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			res := runCLI(t, url, "", tt.args...)
			if res.code != exitUsage {
				t.Errorf("exit code: got %d, want %d (stderr %q)", res.code, exitUsage, res.stderr)
			}
			if !strings.HasPrefix(res.stderr, "warren: ") || !strings.Contains(res.stderr, tt.want) {
				t.Errorf("stderr: got %q, want warren: ... %q", res.stderr, tt.want)
			}
		})
	}
}

func TestParseKV(t *testing.T) {
	tests := []struct {
		in      []string
		want    map[string]string
		wantErr bool
	}{
		{in: nil, want: nil},
		{in: []string{"A=1", "B=x=y", "C="}, want: map[string]string{"A": "1", "B": "x=y", "C": ""}},
		{in: []string{"A=1", "A=2"}, want: map[string]string{"A": "2"}},
		{in: []string{"A"}, wantErr: true},
		{in: []string{"=1"}, wantErr: true},
		{in: []string{"A=1", ""}, wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseKV("--env", tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseKV(%q): got error %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if len(got) != len(tt.want) {
			t.Errorf("parseKV(%q): got %v, want %v", tt.in, got, tt.want)
		}
		for k, v := range tt.want {
			if got[k] != v {
				t.Errorf("parseKV(%q)[%q]: got %q, want %q", tt.in, k, got[k], v)
			}
		}
	}
}

func TestKeyFile(t *testing.T) {
	url := fakeAPI(t, map[string]http.HandlerFunc{
		"GET /v1/sandboxes": func(w http.ResponseWriter, r *http.Request) {
			writeAPIJSON(w, 200, api.SandboxList{})
		},
	})
	keyFile := filepath.Join(t.TempDir(), "admin.key")
	if err := os.WriteFile(keyFile, []byte(testKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("WARREN_API_KEY", "")
	t.Setenv("WARREN_API_URL", url)

	t.Run("flag", func(t *testing.T) {
		var out, errOut bytes.Buffer
		if code := run(t.Context(), []string{"--key-file", keyFile, "ls"}, nil, &out, &errOut); code != 0 {
			t.Errorf("exit code: got %d, want 0 (stderr %q)", code, errOut.String())
		}
	})
	t.Run("env", func(t *testing.T) {
		t.Setenv("WARREN_KEY_FILE", keyFile)
		var out, errOut bytes.Buffer
		if code := run(t.Context(), []string{"ls"}, nil, &out, &errOut); code != 0 {
			t.Errorf("exit code: got %d, want 0 (stderr %q)", code, errOut.String())
		}
	})
	t.Run("missing", func(t *testing.T) {
		var out, errOut bytes.Buffer
		missing := filepath.Join(t.TempDir(), "nope.key")
		code := run(t.Context(), []string{"--key-file", missing, "ls"}, nil, &out, &errOut)
		if code != exitError || !strings.Contains(errOut.String(), "reading the API key") {
			t.Errorf("got exit %d, stderr %q; want 1 and a message about the key", code, errOut.String())
		}
	})
}
