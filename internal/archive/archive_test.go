package archive

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tree describes a directory: path -> "file:MODE:content", "dir:MODE",
// "link:TARGET".
type tree map[string]string

func makeTree(t *testing.T, dir string, tr tree) {
	t.Helper()
	// Parents first: sorted paths put a directory before its entries.
	for _, p := range sortedKeys(tr) {
		kind, rest, _ := strings.Cut(tr[p], ":")
		full := filepath.Join(dir, p)
		switch kind {
		case "dir":
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
		case "file":
			mode, content, _ := strings.Cut(rest, ":")
			if err := os.WriteFile(full, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(full, parseOctal(mode)); err != nil {
				t.Fatal(err)
			}
		case "link":
			if err := os.Symlink(rest, full); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, p := range sortedKeys(tr) { // directory modes last
		if kind, rest, _ := strings.Cut(tr[p], ":"); kind == "dir" {
			os.Chmod(filepath.Join(dir, p), parseOctal(rest))
		}
	}
}

func parseOctal(s string) fs.FileMode {
	var bits uint32
	for _, c := range s {
		bits = bits*8 + uint32(c-'0')
	}
	m := fs.FileMode(bits & 0o777)
	if bits&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if bits&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}

func sortedKeys(tr tree) []string {
	var keys []string
	for k := range tr {
		keys = append(keys, k)
	}
	for i := range keys {
		for j := i + 1; j < len(keys); j++ {
			if keys[j] < keys[i] {
				keys[i], keys[j] = keys[j], keys[i]
			}
		}
	}
	return keys
}

// describe reads a directory back in makeTree's terms.
func describe(t *testing.T, dir string) tree {
	t.Helper()
	out := tree{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[rel] = "link:" + target
		case fi.IsDir():
			out[rel] = "dir:" + octal(fi.Mode())
		default:
			b, _ := os.ReadFile(p)
			out[rel] = "file:" + octal(fi.Mode()) + ":" + string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func octal(m fs.FileMode) string {
	bits := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		bits |= 0o4000
	}
	if m&fs.ModeSticky != 0 {
		bits |= 0o1000
	}
	s := ""
	for bits > 0 {
		s = string(rune('0'+bits%8)) + s
		bits /= 8
	}
	return s
}

func TestRoundTrip(t *testing.T) {
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "out")
	in := tree{
		"a.txt":            "file:644:hello",
		"run.sh":           "file:755:#!/bin/sh\necho hi\n",
		"secret":           "file:600:",
		"setuid":           "file:4755:x",
		"sub":              "dir:750",
		"sub/deeper":       "dir:755",
		"sub/deeper/b.bin": "file:644:\x00\x01\xff",
		"sub/link":         "link:../a.txt",
		"abs-link":         "link:/etc/hostname",
		"dangling":         "link:nowhere",
		"sticky":           "dir:1777",
		"empty":            "dir:755",
	}
	makeTree(t, src, in)
	os.Chmod(src, 0o711)
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	os.Chtimes(filepath.Join(src, "a.txt"), old, old)
	os.Chtimes(filepath.Join(src, "sub"), old, old)

	var buf bytes.Buffer
	if err := Write(&buf, src); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	st, err := Extract(bytes.NewReader(buf.Bytes()), dst)
	if err != nil {
		t.Fatal(err)
	}
	if st.Entries != len(in)+1 || st.Bytes != int64(len("hello")+len("#!/bin/sh\necho hi\n")+1+3) {
		t.Errorf("stats: got %+v, want %d entries", st, len(in)+1)
	}
	got := describe(t, dst)
	for k, v := range in {
		if got[k] != v {
			t.Errorf("%s: got %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(in) {
		t.Errorf("got %d entries, want %d: %v", len(got), len(in), got)
	}
	for _, p := range []string{"a.txt", "sub"} {
		if fi, _ := os.Lstat(filepath.Join(dst, p)); !fi.ModTime().Equal(old) {
			t.Errorf("%s: mtime %v, want %v", p, fi.ModTime(), old)
		}
	}
	if fi, _ := os.Stat(dst); fi.Mode().Perm() != 0o711 {
		t.Errorf("the directory itself: mode %v, want 0711", fi.Mode())
	}
	// Extracting again over it replaces files.
	os.WriteFile(filepath.Join(src, "a.txt"), []byte("changed"), 0o644)
	buf.Reset()
	if err := Write(&buf, src); err != nil {
		t.Fatal(err)
	}
	if _, err := Extract(&buf, dst); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "a.txt")); string(b) != "changed" {
		t.Errorf("second extract: got %q", b)
	}
}

func TestHardLinks(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(src, "one"), []byte("same"), 0o644)
	if err := os.Link(filepath.Join(src, "one"), filepath.Join(src, "two")); err != nil {
		t.Skip("no hard links here:", err)
	}
	var buf bytes.Buffer
	if err := Write(&buf, src); err != nil {
		t.Fatal(err)
	}
	if _, err := Extract(&buf, dst); err != nil {
		t.Fatal(err)
	}
	a, _ := os.Stat(filepath.Join(dst, "one"))
	b, _ := os.Stat(filepath.Join(dst, "two"))
	if !os.SameFile(a, b) {
		t.Errorf("one and two are no longer the same file")
	}
}

func TestExtractRefusesEscapes(t *testing.T) {
	tests := []struct {
		name    string
		entries []tar.Header
	}{
		{"dot-dot", []tar.Header{{Name: "../evil", Typeflag: tar.TypeReg, Mode: 0o644}}},
		{"absolute", []tar.Header{{Name: "/etc/evil", Typeflag: tar.TypeReg, Mode: 0o644}}},
		{"through a link", []tar.Header{
			{Name: "out", Typeflag: tar.TypeSymlink, Linkname: "/tmp"},
			{Name: "out/evil", Typeflag: tar.TypeReg, Mode: 0o644},
		}},
		{"hard link out", []tar.Header{{Name: "h", Typeflag: tar.TypeLink, Linkname: "../../etc/passwd"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			for _, h := range tt.entries {
				tw.WriteHeader(&h)
			}
			tw.Close()
			parent := t.TempDir()
			dst := filepath.Join(parent, "dst")
			os.Mkdir(dst, 0o755)
			if _, err := Extract(&buf, dst); err == nil {
				t.Errorf("got no error, want the archive refused")
			}
			if _, err := os.Lstat(filepath.Join(parent, "evil")); err == nil {
				t.Errorf("a file was written outside the directory")
			}
			if _, err := os.Lstat("/tmp/evil"); err == nil {
				t.Errorf("/tmp/evil was written")
			}
		})
	}
}

func TestExtractGarbage(t *testing.T) {
	_, err := Extract(strings.NewReader(strings.Repeat("not a tar ", 100)), t.TempDir())
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("got %v, want %v", err, ErrInvalid)
	}
}
