package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/daemon"
)

// progressLines answers a long image call as NDJSON: events, then img.
func progressLines(w http.ResponseWriter, events []api.Progress, img api.Image) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	for _, ev := range events {
		enc.Encode(ev)
	}
	enc.Encode(api.Progress{Done: &img})
}

func TestImagePull(t *testing.T) {
	var gotReq api.PullRequest
	var gotQuery string
	url := fakeAPI(t, map[string]http.HandlerFunc{
		"POST /v1/images/pull": func(w http.ResponseWriter, r *http.Request) {
			json.NewDecoder(r.Body).Decode(&gotReq)
			gotQuery = r.URL.RawQuery
			if gotReq.Ref == "nope:1" {
				writeAPIError(w, 404, api.CodeNotFound, "pulling nope:1: the registry has no such image, or it needs credentials (docker login)")
				return
			}
			progressLines(w, []api.Progress{
				{Phase: "pull", Message: "resolving docker.io/library/python:3.12"},
				{Phase: "pull", Message: "layer 1/2", Current: 1 << 20, Total: 4 << 20},
				{Phase: "pull", Message: "layer 1/2", Current: 4 << 20, Total: 4 << 20},
				{Phase: "pull", Message: "layer 2/2", Current: 1, Total: 2},
			}, api.Image{Name: "py", ID: "sha256:0123456789abcdef0123", SizeBytes: 3 << 20})
		},
	})

	res := runCLI(t, url, "", "image", "pull", "--name", "py", "--insecure", "python:3.12")
	if res.code != 0 {
		t.Fatalf("exit code: got %d, want 0 (stderr %q)", res.code, res.stderr)
	}
	if gotReq.Ref != "python:3.12" || gotReq.Name != "py" || gotQuery != "insecure=true" {
		t.Errorf("request: got %+v ?%s, want ref python:3.12, name py, insecure", gotReq, gotQuery)
	}
	if res.stdout != "py\n" {
		t.Errorf("stdout: got %q, want the image's name", res.stdout)
	}
	// Not a terminal: each message once, as a plain line, and no bar.
	wantErr := "pull: resolving docker.io/library/python:3.12\npull: layer 1/2\npull: layer 2/2\npy: 0123456789ab, 3.0 MiB\n"
	if res.stderr != wantErr {
		t.Errorf("stderr: got %q, want %q", res.stderr, wantErr)
	}

	res = runCLI(t, url, "", "image", "pull", "nope:1")
	if res.code != exitError || !strings.Contains(res.stderr, "no such image") || strings.Contains(res.stderr, "warren image ls") {
		t.Errorf("a missing image: got exit %d, stderr %q", res.code, res.stderr)
	}
}

func TestImageImport(t *testing.T) {
	archive := filepath.Join(t.TempDir(), "img.tar")
	data := strings.Repeat("layer", 100000)
	if err := os.WriteFile(archive, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	var got string
	var gotName string
	url := fakeAPI(t, map[string]http.HandlerFunc{
		"POST /v1/images/import": func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			got, gotName = string(b), r.URL.Query().Get("name")
			progressLines(w, []api.Progress{{Phase: "unpack", Message: "unpacking 1 layer", Current: 10, Total: 10}},
				api.Image{Name: gotName, ID: "sha256:feedfacefeedface"})
		},
	})
	for _, src := range []string{archive, "-"} {
		res := runCLI(t, url, data, "image", "import", "--name", "mine", src)
		if res.code != 0 {
			t.Fatalf("import %s: exit code %d (stderr %q)", src, res.code, res.stderr)
		}
		if got != data || gotName != "mine" {
			t.Errorf("import %s: server got %d bytes named %q, want %d named mine", src, len(got), gotName, len(data))
		}
		for _, want := range []string{"upload: sent 488.3 KiB\n", "unpack: unpacking 1 layer\n"} {
			if !strings.Contains(res.stderr, want) {
				t.Errorf("import %s: stderr %q lacks %q", src, res.stderr, want)
			}
		}
	}
}

func TestImageLs(t *testing.T) {
	url := fakeAPI(t, map[string]http.HandlerFunc{
		"GET /v1/images": func(w http.ResponseWriter, r *http.Request) {
			writeAPIJSON(w, 200, api.ImageList{Images: []api.Image{
				{Name: "debian:bookworm", ID: "sha256:aabbccddeeff00112233", SizeBytes: 150 << 20, Source: "builtin",
					CreatedAt: time.Now().Add(-2 * time.Hour)},
			}})
		},
	})
	res := runCLI(t, url, "", "image", "ls")
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	want := []string{"NAME ID SIZE SOURCE CREATED", "debian:bookworm aabbccddeeff 150.0 MiB builtin 2h ago"}
	if len(lines) != 2 {
		t.Fatalf("stdout: got %q, want a header and one row", res.stdout)
	}
	for i := range want {
		if got := strings.Join(strings.Fields(lines[i]), " "); got != want[i] {
			t.Errorf("line %d: got %q, want %q", i, got, want[i])
		}
	}
}

func TestImageRmNotFound(t *testing.T) {
	var gotPath string
	url := fakeAPI(t, map[string]http.HandlerFunc{
		"DELETE /v1/images/{name...}": func(w http.ResponseWriter, r *http.Request) {
			gotPath = r.PathValue("name")
			writeAPIError(w, 404, api.CodeNotFound, "no image "+gotPath)
		},
	})
	res := runCLI(t, url, "", "image", "rm", "python:3.12")
	if gotPath != "python:3.12" {
		t.Errorf("deleted %q, want python:3.12", gotPath)
	}
	want := "warren: no image python:3.12; run `warren image ls` to see the images\n"
	if res.code != exitError || res.stderr != want {
		t.Errorf("got exit %d, stderr %q; want 1, %q", res.code, res.stderr, want)
	}
}

func TestVersion(t *testing.T) {
	url := fakeAPI(t, map[string]http.HandlerFunc{
		"GET /healthz": func(w http.ResponseWriter, r *http.Request) {
			writeAPIJSON(w, 200, api.Health{Status: "ok", Version: "1.2.3", Runsc: "release-2025"})
		},
	})
	res := runCLI(t, url, "", "version")
	want := "client: " + daemon.Version + "\nserver: 1.2.3 (ok) at " + url + ", runsc release-2025\n"
	if res.code != 0 || res.stdout != want {
		t.Errorf("got exit %d, stdout %q; want 0, %q", res.code, res.stdout, want)
	}

	res = runCLI(t, "http://127.0.0.1:1", "", "version")
	if res.code != exitError || !strings.HasPrefix(res.stdout, "client: ") || !strings.Contains(res.stderr, "is `warren server` running?") {
		t.Errorf("no server: got exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
}

func TestHumanSize(t *testing.T) {
	tests := []struct {
		n    int64
		want string
	}{
		{0, "0 B"}, {1023, "1023 B"}, {1024, "1.0 KiB"}, {1536, "1.5 KiB"}, {5 << 30, "5.0 GiB"},
	}
	for _, tt := range tests {
		if got := humanSize(tt.n); got != tt.want {
			t.Errorf("humanSize(%d): got %q, want %q", tt.n, got, tt.want)
		}
	}
}
