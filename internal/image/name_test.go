package image

import (
	"errors"
	"strings"
	"testing"

	"github.com/warrenhq/warren/api"
)

func TestNormalizeName(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"debian:bookworm", "debian:bookworm"},
		{"python:3.12", "python:3.12"},
		{"python", "python:latest"},
		{"localhost:5000/foo/bar:v1", "localhost:5000/foo/bar:v1"},
		{"localhost:5000/foo/bar", "localhost:5000/foo/bar:latest"},
		{"127.0.0.1:5000/foo:V1.0_rc-1", "127.0.0.1:5000/foo:V1.0_rc-1"},
		{"docker.io/library/python:3.12", "python:3.12"},
		{"index.docker.io/library/python", "python:latest"},
		{"docker.io/someone/tool:1", "someone/tool:1"},
		{"ghcr.io/org/a.b_c--d/e:1", "ghcr.io/org/a.b_c--d/e:1"},
		{"foo@sha256:" + strings.Repeat("a", 64), "foo@sha256:" + strings.Repeat("a", 64)},
		{"foo:v1@sha256:" + strings.Repeat("a", 64), "foo:v1@sha256:" + strings.Repeat("a", 64)},
	}
	for _, tt := range tests {
		got, err := NormalizeName(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("NormalizeName(%q): got %q %v, want %q", tt.in, got, err, tt.want)
		}
	}
	bad := []string{
		"", "Python:3", "foo:", "foo:-x", "../etc/passwd", "foo/../bar", "/foo", "foo/", "a//b",
		"foo bar", "foo:a/b", "foo@sha256:abc", "foo@md5:" + strings.Repeat("a", 32), "bad_host:5000/x",
		"-foo", ".foo", strings.Repeat("a", 201), "localhost:99999999/x", "foo\x00",
	}
	for _, in := range bad {
		if got, err := NormalizeName(in); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("NormalizeName(%q): got %q %v, want %v", in, got, err, api.ErrInvalid)
		}
	}
}

func TestEscapeName(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"debian:bookworm", "debian%3Abookworm"},
		{"localhost:5000/foo/bar:v1", "localhost%3A5000%2Ffoo%2Fbar%3Av1"},
		{"a.b_c-d:V1", "a.b_c-d%3AV1"},
		{"foo@sha256:ab", "foo%40sha256%3Aab"},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		got := escapeName(tt.in)
		if got != tt.want {
			t.Errorf("escapeName(%q): got %q, want %q", tt.in, got, tt.want)
		}
		if strings.ContainsAny(got, "/\x00") || got == "." || got == ".." {
			t.Errorf("escapeName(%q): got %q, want a plain file name", tt.in, got)
		}
		if other, ok := seen[got]; ok {
			t.Errorf("escapeName: %q and %q both give %q", tt.in, other, got)
		}
		seen[got] = tt.in
	}
}
