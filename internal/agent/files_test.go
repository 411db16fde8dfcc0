package agent

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warrenhq/warren/api"
)

func readAll(t *testing.T, c *Client, path string) ([]byte, error) {
	t.Helper()
	rc, err := c.ReadFile(t.Context(), path)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func TestFilesRoundTrip(t *testing.T) {
	c := startAgent(t, Config{})
	root := t.TempDir()
	ctx := t.Context()

	var binary []byte
	for i := range 256 {
		binary = append(binary, byte(i))
	}
	tests := []struct {
		name     string
		path     string
		data     []byte
		mode     os.FileMode
		wantMode string
	}{
		{"parents created", filepath.Join(root, "a/b/c.txt"), []byte("hello\n"), 0, "0644"},
		{"mode", filepath.Join(root, "secret"), []byte("s"), 0o600, "0600"},
		{"setuid bits", filepath.Join(root, "suid"), []byte("s"), os.ModeSetuid | 0o755, "4755"},
		{"empty", filepath.Join(root, "empty"), nil, 0, "0644"},
		{"binary", filepath.Join(root, "bin"), binary, 0, "0644"},
		{"big", filepath.Join(root, "big"), bytes.Repeat([]byte("0123456789"), 300000), 0, "0644"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := c.WriteFile(ctx, tt.path, bytes.NewReader(tt.data), tt.mode)
			if err != nil {
				t.Fatalf("WriteFile: %v", err)
			}
			if e.Path != tt.path || e.Name != filepath.Base(tt.path) || e.Type != "file" || e.Size != int64(len(tt.data)) || e.Mode != tt.wantMode {
				t.Errorf("WriteFile: got %+v, want a %d-byte file %s with mode %s", e, len(tt.data), tt.path, tt.wantMode)
			}
			got, err := readAll(t, c, tt.path)
			if err != nil {
				t.Fatalf("ReadFile: %v", err)
			}
			if !bytes.Equal(got, tt.data) {
				t.Errorf("ReadFile: got %d bytes, want %d bytes written", len(got), len(tt.data))
			}
			st, err := c.Stat(ctx, tt.path)
			if err != nil {
				t.Fatalf("Stat: %v", err)
			}
			if st != e {
				t.Errorf("Stat: got %+v, want %+v", st, e)
			}
		})
	}

	// Overwriting keeps the mode unless one is given, and leaves no
	// temporary file behind.
	p := filepath.Join(root, "secret")
	if e, err := c.WriteFile(ctx, p, strings.NewReader("new"), 0); err != nil || e.Mode != "0600" || e.Size != 3 {
		t.Errorf("overwrite: got %+v, %v, want mode 0600 size 3", e, err)
	}
	ents, _ := os.ReadDir(root)
	for _, de := range ents {
		if strings.Contains(de.Name(), ".warren-") {
			t.Errorf("temporary file %s left behind", de.Name())
		}
	}
}

func TestFilesList(t *testing.T) {
	c := startAgent(t, Config{})
	root := t.TempDir()
	for _, p := range []string{"b/x", "b/sub/y", "a", "b/sub/deep/z", "target/inside"} {
		if _, err := c.WriteFile(t.Context(), filepath.Join(root, p), strings.NewReader(p), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(root, "target"), filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		depth int
		want  []string // relative path:type
	}{
		{1, []string{"a:file", "b:dir", "link:symlink", "target:dir"}},
		{2, []string{"a:file", "b:dir", "b/sub:dir", "b/x:file", "link:symlink", "target:dir", "target/inside:file"}},
		{32, []string{"a:file", "b:dir", "b/sub:dir", "b/sub/deep:dir", "b/sub/deep/z:file", "b/sub/y:file", "b/x:file", "link:symlink", "target:dir", "target/inside:file"}},
	}
	for _, tt := range tests {
		ents, err := c.List(t.Context(), root, tt.depth)
		if err != nil {
			t.Fatalf("List depth %d: %v", tt.depth, err)
		}
		var got []string
		for _, e := range ents {
			got = append(got, strings.TrimPrefix(e.Path, root+"/")+":"+e.Type)
			if e.Type == "symlink" && e.Target != filepath.Join(root, "target") {
				t.Errorf("symlink target: got %q, want %q", e.Target, filepath.Join(root, "target"))
			}
			if e.Name != filepath.Base(e.Path) {
				t.Errorf("name: got %q, want %q", e.Name, filepath.Base(e.Path))
			}
		}
		if strings.Join(got, " ") != strings.Join(tt.want, " ") {
			t.Errorf("List depth %d: got %v, want %v", tt.depth, got, tt.want)
		}
	}
	st, err := c.Stat(t.Context(), filepath.Join(root, "link"))
	if err != nil || st.Type != "symlink" {
		t.Errorf("Stat of a symlink: got %+v, %v, want type symlink", st, err)
	}
	empty := filepath.Join(root, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	if ents, err := c.List(t.Context(), empty, 1); err != nil || ents == nil || len(ents) != 0 {
		t.Errorf("List of an empty dir: got %v, %v, want an empty list", ents, err)
	}
}

func TestFilesRemove(t *testing.T) {
	c := startAgent(t, Config{})
	root := t.TempDir()
	ctx := t.Context()
	for _, p := range []string{"f", "dir/f", "dir/sub/g"} {
		if _, err := c.WriteFile(ctx, filepath.Join(root, p), strings.NewReader("x"), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(root, "emptydir"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		path      string
		recursive bool
		want      error
	}{
		{"file", "f", false, nil},
		{"gone file", "f", false, api.ErrNotFound},
		{"non-empty dir", "dir", false, api.ErrConflict},
		{"empty dir", "emptydir", false, nil},
		{"recursive", "dir", true, nil},
		{"gone dir", "dir", true, api.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(root, tt.path)
			err := c.Remove(ctx, p, tt.recursive)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			if tt.want == api.ErrConflict && !strings.Contains(err.Error(), "recursive=true") {
				t.Errorf("got %q, want a message saying to pass recursive=true", err)
			}
			if _, err := os.Lstat(p); tt.want != api.ErrConflict && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("after Remove: got %v, want %v", err, os.ErrNotExist)
			}
		})
	}
}

func TestFilesErrors(t *testing.T) {
	c := startAgent(t, Config{})
	root := t.TempDir()
	ctx := t.Context()
	file := filepath.Join(root, "file")
	if _, err := c.WriteFile(ctx, file, strings.NewReader("x"), 0); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(root, "missing")
	tests := []struct {
		name    string
		call    func() error
		want    error
		wantMsg string
	}{
		{"read missing", func() error { _, err := readAll(t, c, missing); return err }, api.ErrNotFound, "no such file: " + missing},
		{"read dir", func() error { _, err := readAll(t, c, root); return err }, api.ErrInvalid, "is a directory; use /files/list"},
		{"read relative", func() error { _, err := readAll(t, c, "rel/path"); return err }, api.ErrInvalid, "not absolute"},
		{"read under a file", func() error { _, err := readAll(t, c, file+"/x"); return err }, api.ErrNotFound, "no such file"},
		{"stat missing", func() error { _, err := c.Stat(ctx, missing); return err }, api.ErrNotFound, missing},
		{"stat relative", func() error { _, err := c.Stat(ctx, "x"); return err }, api.ErrInvalid, "not absolute"},
		{"list missing", func() error { _, err := c.List(ctx, missing, 1); return err }, api.ErrNotFound, missing},
		{"list file", func() error { _, err := c.List(ctx, file, 1); return err }, api.ErrInvalid, "not a directory"},
		{"list depth 0", func() error { _, err := c.List(ctx, root, 0); return err }, api.ErrInvalid, "depth"},
		{"list depth 33", func() error { _, err := c.List(ctx, root, 33); return err }, api.ErrInvalid, "depth"},
		{"write relative", func() error { _, err := c.WriteFile(ctx, "rel", strings.NewReader(""), 0); return err }, api.ErrInvalid, "not absolute"},
		{"write over dir", func() error { _, err := c.WriteFile(ctx, root, strings.NewReader(""), 0); return err }, api.ErrInvalid, "is a directory"},
		{"write under a file", func() error { _, err := c.WriteFile(ctx, file+"/x/y", strings.NewReader(""), 0); return err }, api.ErrConflict, "not a directory"},
		{"delete missing", func() error { return c.Remove(ctx, missing, false) }, api.ErrNotFound, missing},
		{"delete relative", func() error { return c.Remove(ctx, "x", true) }, api.ErrInvalid, "not absolute"},
		{"delete root", func() error { return c.Remove(ctx, "/", true) }, api.ErrInvalid, "refusing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("got %v, want %v with %q", err, tt.want, tt.wantMsg)
			}
		})
	}
}

func TestParseMode(t *testing.T) {
	tests := []struct {
		in      string
		want    os.FileMode
		wantErr bool
	}{
		{"0644", 0o644, false},
		{"755", 0o755, false},
		{"4755", 0o755 | os.ModeSetuid, false},
		{"1777", 0o777 | os.ModeSticky, false},
		{"10000", 0, true},
		{"rw-", 0, true},
		{"", 0, true},
	}
	for _, tt := range tests {
		got, err := parseMode(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("parseMode(%q): got %v, %v, want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err == nil && modeString(got) != strings.Repeat("0", 4-len(tt.in))+tt.in {
			t.Errorf("modeString(%v): got %q, want %q", got, modeString(got), tt.in)
		}
	}
}
