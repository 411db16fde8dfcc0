package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warrenhq/warren/api"
)

func TestKeyCreate(t *testing.T) {
	t.Setenv("WARREN_CONFIG", filepath.Join(t.TempDir(), "none.json"))
	url := fakeAPI(t, map[string]http.HandlerFunc{
		"POST /v1/keys": func(w http.ResponseWriter, r *http.Request) {
			var req api.CreateKeyRequest
			json.NewDecoder(r.Body).Decode(&req)
			writeAPIJSON(w, http.StatusCreated, api.NewKey{Key: api.Key{ID: "key-1", Team: req.Team, Name: req.Name}, Secret: "wk_secret"})
		},
	})
	res := runCLI(t, url, "", "key", "create", "acme", "--name", "ci")
	if res.code != 0 || res.stdout != "wk_secret\n" || !strings.Contains(res.stderr, "key-1 for team acme") {
		t.Errorf("got %+v", res)
	}
}

func TestQuotaSet(t *testing.T) {
	t.Setenv("WARREN_CONFIG", filepath.Join(t.TempDir(), "none.json"))
	ten, five := int64(10), int64(5)
	var put api.Limits
	url := fakeAPI(t, map[string]http.HandlerFunc{
		"GET /v1/teams/acme/quota": func(w http.ResponseWriter, r *http.Request) {
			writeAPIJSON(w, 200, api.Quota{Team: "acme", Overrides: api.Limits{RunningSandboxes: &ten, StorageMB: &five}})
		},
		"PUT /v1/teams/acme/quota": func(w http.ResponseWriter, r *http.Request) {
			json.NewDecoder(r.Body).Decode(&put)
			writeAPIJSON(w, 200, api.Quota{Team: "acme", Limits: put, Overrides: put})
		},
	})
	res := runCLI(t, url, "", "quota", "set", "acme", "--running-memory-mb", "4096", "--storage-mb", "default")
	if res.code != 0 {
		t.Fatalf("got %+v", res)
	}
	// Unnamed quotas keep their override; "default" clears one.
	if put.RunningSandboxes == nil || *put.RunningSandboxes != 10 || put.RunningMemoryMB == nil || *put.RunningMemoryMB != 4096 ||
		put.StorageMB != nil || put.CreatesPerMinute != nil {
		t.Errorf("put: got %+v", put)
	}
	if !strings.Contains(res.stdout, "running_memory_mb") || !strings.Contains(res.stdout, "4096") {
		t.Errorf("output: %s", res.stdout)
	}
	for _, args := range [][]string{{"quota", "set", "acme"}, {"quota", "set", "acme", "--storage-mb", "lots"}} {
		if res := runCLI(t, url, "", args...); res.code != exitUsage {
			t.Errorf("%v: exit %d, want %d (%s)", args, res.code, exitUsage, res.stderr)
		}
	}
}

func TestUsageTable(t *testing.T) {
	u := api.Usage{Team: "acme", From: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC),
		Sandboxes: []api.SandboxUsage{{SandboxID: "sb-aaaaaaaaaaaa", UsageFigures: api.UsageFigures{RunningSeconds: 90, VCPUSeconds: 180,
			MemoryGBSeconds: 45, StorageGBHours: 0.5, Cost: api.Cost{Total: 0.0027}}}},
		Total:  api.UsageFigures{RunningSeconds: 90, VCPUSeconds: 180, MemoryGBSeconds: 45, StorageGBHours: 0.5, Cost: api.Cost{Total: 0.0027}},
		Prices: api.Prices{VCPUSecond: 0.000014, StorageGBMonth: 0.05, StorageFreeGB: 10},
	}
	var b bytes.Buffer
	if err := writeUsageTable(&b, u); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"SANDBOX", "sb-aaaaaaaaaaaa", "1m30s", "180.0", "TOTAL", "0.0027", "10 GB free"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// The config file gives the URL and key that flags and the environment
// do not.
func TestCLIConfigFile(t *testing.T) {
	url := fakeAPI(t, map[string]http.HandlerFunc{
		"GET /v1/quota": func(w http.ResponseWriter, r *http.Request) {
			writeAPIJSON(w, 200, api.Quota{Team: "acme"})
		},
	})
	path := filepath.Join(t.TempDir(), "config.json")
	os.WriteFile(path, []byte(`{"url": "`+url+`", "key": "`+testKey+`"}`), 0o600)
	t.Setenv("WARREN_CONFIG", path)
	for _, env := range []string{"WARREN_API_URL", "WARREN_API_KEY", "WARREN_KEY_FILE"} {
		t.Setenv(env, "")
	}
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"quota"}, strings.NewReader(""), &stdout, &stderr)
	if code != 0 || !strings.Contains(stdout.String(), "team acme") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	// The environment wins over the file.
	t.Setenv("WARREN_API_KEY", "another-key")
	stdout.Reset()
	stderr.Reset()
	if code := run(t.Context(), []string{"quota"}, strings.NewReader(""), &stdout, &stderr); code == 0 {
		t.Errorf("WARREN_API_KEY did not win over the file's key")
	}
	os.WriteFile(path, []byte(`{"url": `), 0o600)
	t.Setenv("WARREN_API_KEY", "")
	stderr.Reset()
	if code := run(t.Context(), []string{"quota"}, strings.NewReader(""), &stdout, &stderr); code == 0 || !strings.Contains(stderr.String(), "config file") {
		t.Errorf("a broken config file: exit %d, stderr %q", code, stderr.String())
	}
}
