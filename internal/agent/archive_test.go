package agent

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/archive"
)

func TestArchiveEndpoints(t *testing.T) {
	c := startAgent(t, Config{})
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "sub", "deep"), 0o755)
	os.WriteFile(filepath.Join(src, "sub", "deep", "f.txt"), []byte("deep"), 0o640)
	os.WriteFile(filepath.Join(src, "x.sh"), []byte("#!/bin/sh"), 0o755)
	os.Symlink("sub/deep/f.txt", filepath.Join(src, "ln"))
	var buf bytes.Buffer
	if err := archive.Write(&buf, src); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "new", "dir") // parents made
	res, err := c.WriteArchive(t.Context(), dst, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if res.Path != dst || res.Entries != 6 || res.Bytes != 13 {
		t.Errorf("got %+v, want 6 entries, 13 bytes into %s", res, dst)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "ln")); string(b) != "deep" {
		t.Errorf("through the link: got %q", b)
	}
	if fi, _ := os.Stat(filepath.Join(dst, "x.sh")); fi.Mode().Perm() != 0o755 {
		t.Errorf("x.sh mode %v", fi.Mode())
	}
	// Recursive listing sees it all.
	entries, err := c.List(t.Context(), dst, 3)
	if err != nil || len(entries) != 5 {
		t.Errorf("List depth 3: got %d entries, %v; want 5", len(entries), err)
	}
	// And back out.
	rc, err := c.ReadArchive(t.Context(), dst)
	if err != nil {
		t.Fatal(err)
	}
	back := t.TempDir()
	if _, err := archive.Extract(rc, back); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if b, _ := os.ReadFile(filepath.Join(back, "sub", "deep", "f.txt")); string(b) != "deep" {
		t.Errorf("out again: got %q", b)
	}

	file := filepath.Join(src, "x.sh")
	tests := []struct {
		name string
		do   func() error
		want error
	}{
		{"read a file", func() error { _, err := c.ReadArchive(t.Context(), file); return err }, api.ErrInvalid},
		{"read missing", func() error { _, err := c.ReadArchive(t.Context(), "/nonexistent/warren"); return err }, api.ErrNotFound},
		{"read relative", func() error { _, err := c.ReadArchive(t.Context(), "rel"); return err }, api.ErrInvalid},
		{"write into a file", func() error {
			_, err := c.WriteArchive(t.Context(), file, strings.NewReader(""))
			return err
		}, api.ErrConflict},
		{"write garbage", func() error {
			_, err := c.WriteArchive(t.Context(), t.TempDir(), strings.NewReader(strings.Repeat("garbage!", 200)))
			return err
		}, api.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.do(); !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
}
