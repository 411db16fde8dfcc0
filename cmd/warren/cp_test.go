package main

import (
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/warrenhq/warren/api"
)

func TestParseCopy(t *testing.T) {
	tests := []struct {
		src, dst string
		want     copySpec
		wantErr  string
	}{
		{src: "sb-1:/etc/hosts", dst: "hosts", want: copySpec{id: "sb-1", remote: "/etc/hosts", local: "hosts"}},
		{src: "./main.py", dst: "sb-1:/work/main.py", want: copySpec{upload: true, id: "sb-1", remote: "/work/main.py", local: "./main.py"}},
		{src: "-", dst: "sb-1:/tmp/in", want: copySpec{upload: true, id: "sb-1", remote: "/tmp/in", local: "-"}},
		{src: "sb-1:/tmp/out", dst: "-", want: copySpec{id: "sb-1", remote: "/tmp/out", local: "-"}},
		{src: "dir/a:b", dst: "sb-1:/x", want: copySpec{upload: true, id: "sb-1", remote: "/x", local: "dir/a:b"}},
		{src: "/abs/local", dst: "sb-1:/x:y", want: copySpec{upload: true, id: "sb-1", remote: "/x:y", local: "/abs/local"}},
		{src: "sb-1:relative", dst: "x", wantErr: "must be absolute"},
		{src: "sb-1:", dst: "x", wantErr: "must be absolute"},
		{src: ":/etc/hosts", dst: "x", wantErr: "no sandbox id"},
		{src: "sb-1:/a", dst: "sb-2:/b", wantErr: "between sandboxes"},
		{src: "a", dst: "b", wantErr: "one side must be ID:/path"},
		{src: "-", dst: "-", wantErr: "one side must be ID:/path"},
		{src: "", dst: "sb-1:/x", wantErr: "empty path"},
	}
	for _, tt := range tests {
		got, err := parseCopy(tt.src, tt.dst)
		switch {
		case tt.wantErr != "":
			var ue *usageError
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &ue) {
				t.Errorf("parseCopy(%q, %q): got error %v, want a usage error with %q", tt.src, tt.dst, err, tt.wantErr)
			}
		case err != nil:
			t.Errorf("parseCopy(%q, %q): got error %v", tt.src, tt.dst, err)
		case got != tt.want:
			t.Errorf("parseCopy(%q, %q): got %+v, want %+v", tt.src, tt.dst, got, tt.want)
		}
	}
}

type fakeFile struct {
	data string
	mode string
	dir  bool
}

// filesAPI is a sandbox sb-1 with the files in fs, served like the agent does.
func filesAPI(t *testing.T, files map[string]*fakeFile) string {
	var mu sync.Mutex
	lookup := func(w http.ResponseWriter, r *http.Request) (*fakeFile, string, bool) {
		if r.PathValue("id") != "sb-1" {
			writeAPIError(w, 404, api.CodeNotFound, `sandbox "`+r.PathValue("id")+`": not found`)
			return nil, "", false
		}
		p := r.URL.Query().Get("path")
		return files[p], p, true
	}
	return fakeAPI(t, map[string]http.HandlerFunc{
		"GET /v1/sandboxes/{id}/files": func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			f, p, ok := lookup(w, r)
			switch {
			case !ok:
			case f == nil:
				writeAPIError(w, 404, api.CodeNotFound, "no such file: "+p)
			case f.dir:
				writeAPIError(w, 400, api.CodeInvalid, p+" is a directory; use /files/list")
			default:
				io.WriteString(w, f.data)
			}
		},
		"GET /v1/sandboxes/{id}/files/stat": func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			f, p, ok := lookup(w, r)
			switch {
			case !ok:
			case f == nil:
				writeAPIError(w, 404, api.CodeNotFound, "no such file: "+p)
			case f.dir:
				writeAPIJSON(w, 200, api.FileEntry{Path: p, Type: "dir"})
			default:
				writeAPIJSON(w, 200, api.FileEntry{Path: p, Type: "file", Size: int64(len(f.data)), Mode: f.mode})
			}
		},
		"PUT /v1/sandboxes/{id}/files": func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			_, p, ok := lookup(w, r)
			if !ok {
				return
			}
			b, _ := io.ReadAll(r.Body)
			mode := r.URL.Query().Get("mode")
			if mode == "" {
				mode = "0644"
			}
			files[p] = &fakeFile{data: string(b), mode: mode}
			writeAPIJSON(w, 200, api.FileEntry{Path: p, Type: "file", Size: int64(len(b)), Mode: mode})
		},
	})
}

func TestCpUpload(t *testing.T) {
	files := map[string]*fakeFile{"/work": {dir: true}}
	url := filesAPI(t, files)
	local := filepath.Join(t.TempDir(), "run.sh")
	if err := os.WriteFile(local, []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(local, 0o751); err != nil { // beyond the umask
		t.Fatal(err)
	}

	tests := []struct {
		name      string
		args      []string
		stdin     string
		wantPath  string
		wantMode  string
		wantData  string
		wantCode  int
		wantInErr string
	}{
		{"keeps the mode", []string{"cp", local, "sb-1:/work/x.sh"}, "", "/work/x.sh", "0751", "#!/bin/sh\necho hi\n", 0, ""},
		{"into a directory", []string{"cp", local, "sb-1:/work"}, "", "/work/run.sh", "0751", "#!/bin/sh\necho hi\n", 0, ""},
		{"into a new directory", []string{"cp", local, "sb-1:/new/"}, "", "/new/run.sh", "0751", "#!/bin/sh\necho hi\n", 0, ""},
		{"stdin", []string{"cp", "-", "sb-1:/tmp/in.txt"}, "from stdin", "/tmp/in.txt", "0644", "from stdin", 0, ""},
		{"stdin into a directory", []string{"cp", "-", "sb-1:/work"}, "x", "", "", "", exitUsage, "name the file"},
		{"a local directory", []string{"cp", filepath.Dir(local), "sb-1:/work"}, "", "", "", "", exitUsage, "is a directory; copy it with -r"},
		{"no such sandbox", []string{"cp", local, "sb-2:/x"}, "", "", "", "", exitError, "run `warren ls`"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runCLI(t, url, tt.stdin, tt.args...)
			if res.code != tt.wantCode || !strings.Contains(res.stderr, tt.wantInErr) {
				t.Fatalf("got exit %d, stderr %q; want %d, %q", res.code, res.stderr, tt.wantCode, tt.wantInErr)
			}
			if tt.wantPath == "" {
				return
			}
			f := files[tt.wantPath]
			if f == nil || f.data != tt.wantData || f.mode != tt.wantMode {
				t.Errorf("%s: got %+v, want %q mode %s", tt.wantPath, f, tt.wantData, tt.wantMode)
			}
		})
	}
}

func TestCpDownload(t *testing.T) {
	files := map[string]*fakeFile{
		"/work/out.csv": {data: "a,b\n1,2\n", mode: "0600"},
		"/work":         {dir: true},
	}
	url := filesAPI(t, files)
	dir := t.TempDir()

	res := runCLI(t, url, "", "cp", "sb-1:/work/out.csv", dir)
	if res.code != 0 {
		t.Fatalf("exit code: got %d, want 0 (stderr %q)", res.code, res.stderr)
	}
	b, err := os.ReadFile(filepath.Join(dir, "out.csv"))
	if err != nil || string(b) != "a,b\n1,2\n" {
		t.Errorf("downloaded into a directory: got %q, %v; want the file", b, err)
	}

	res = runCLI(t, url, "", "cp", "sb-1:/work/out.csv", filepath.Join(dir, "renamed.csv"))
	if b, err := os.ReadFile(filepath.Join(dir, "renamed.csv")); res.code != 0 || string(b) != "a,b\n1,2\n" {
		t.Errorf("downloaded to a path: got exit %d, %q, %v (stderr %q)", res.code, b, err, res.stderr)
	}

	res = runCLI(t, url, "", "cp", "sb-1:/work/out.csv", "-")
	if res.code != 0 || res.stdout != "a,b\n1,2\n" {
		t.Errorf("to stdout: got exit %d, stdout %q", res.code, res.stdout)
	}

	res = runCLI(t, url, "", "cp", "sb-1:/work", dir)
	if res.code != exitUsage || !strings.Contains(res.stderr, "sb-1:/work is a directory; copy it with -r") {
		t.Errorf("a directory: got exit %d, stderr %q", res.code, res.stderr)
	}

	res = runCLI(t, url, "", "cp", "sb-1:/nope", dir)
	if res.code != exitError || res.stderr != "warren: no such file: /nope\n" {
		t.Errorf("a missing file: got exit %d, stderr %q", res.code, res.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "nope")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed download left %s behind: %v", filepath.Join(dir, "nope"), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("dir holds %d entries, want out.csv and renamed.csv only", len(entries))
	}
}
