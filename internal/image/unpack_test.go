package image

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/warrenhq/warren/api"
)

func rawLayers(t *testing.T, layers ...[]entry) []layerSource {
	var out []layerSource
	for _, es := range layers {
		b := tarBytes(t, es...)
		out = append(out, layerSource{open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }, size: int64(len(b))})
	}
	return out
}

// TestMaliciousLayers unpacks layers that try to write outside the tree:
// each is refused or kept inside, and the files beside the tree are untouched.
func TestMaliciousLayers(t *testing.T) {
	tests := []struct {
		name   string
		layers func(outside string) [][]entry
		want   error  // nil or the sentinel
		inside string // a path that must exist in the tree; "outside/pwned" is outside's path in the tree
	}{
		{"dot-dot", func(string) [][]entry { return [][]entry{{file("../escape", "x")}} }, api.ErrInvalid, ""},
		{"dot-dot inside a path", func(string) [][]entry { return [][]entry{{file("a/../../escape", "x")}} }, api.ErrInvalid, ""},
		{"absolute path", func(string) [][]entry { return [][]entry{{file("/abs/file", "x")}} }, nil, "abs/file"},
		{"file through absolute symlink", func(o string) [][]entry {
			return [][]entry{{symlink("evil", o), file("evil/pwned", "x")}}
		}, nil, "outside/pwned"},
		// Were these to escape, they would write into outside, not into
		// the host's own directories.
		{"file through relative symlink", func(o string) [][]entry {
			return [][]entry{{symlink("up", strings.Repeat("../", 40))}, {file("up"+o+"/pwned", "x")}}
		}, nil, "outside/pwned"},
		{"symlink to root in a lower layer", func(o string) [][]entry {
			return [][]entry{{symlink("l", "/")}, {file("l"+o+"/pwned", "x")}}
		}, nil, "outside/pwned"},
		{"hard link with dot-dot", func(string) [][]entry {
			return [][]entry{{hardlink("h", "../outside/victim")}}
		}, api.ErrInvalid, ""},
		{"hard link to an absolute host path", func(o string) [][]entry {
			return [][]entry{{hardlink("h", filepath.Join(o, "victim"))}}
		}, api.ErrInvalid, ""},
		{"hard link through a symlink", func(o string) [][]entry {
			return [][]entry{{symlink("evil", o), hardlink("h", "evil/victim")}}
		}, api.ErrInvalid, ""},
		{"whiteout through a symlink", func(o string) [][]entry {
			return [][]entry{{symlink("evil", o)}, {file("evil/.wh.victim", "")}}
		}, nil, "evil"},
		{"opaque through a symlink", func(o string) [][]entry {
			return [][]entry{{symlink("evil", o)}, {file("evil/.wh..wh..opq", "")}}
		}, nil, "evil"},
		{"directory over a symlink", func(o string) [][]entry {
			return [][]entry{{symlink("evil", o)}, {dir("evil/"), file("evil/victim", "x")}}
		}, nil, "evil/victim"},
		{"file over a symlink", func(o string) [][]entry {
			return [][]entry{{symlink("evil", filepath.Join(o, "victim"))}, {file("evil", "overwritten")}}
		}, nil, "evil"},
		{"symlink loop", func(string) [][]entry {
			return [][]entry{{symlink("a", "b"), symlink("b", "a"), file("a/x", "x")}}
		}, api.ErrInvalid, ""},
		{"file as a parent", func(string) [][]entry {
			return [][]entry{{file("f", "x"), file("f/x", "x")}}
		}, api.ErrInvalid, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := t.TempDir()
			root := filepath.Join(base, "root")
			outside := filepath.Join(base, "outside")
			for _, d := range []string{root, outside} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			victim := filepath.Join(outside, "victim")
			if err := os.WriteFile(victim, []byte("safe"), 0o644); err != nil {
				t.Fatal(err)
			}
			err := unpackLayers(t.Context(), root, rawLayers(t, tt.layers(outside)...), "unpack", nil)
			switch {
			case tt.want == nil && err != nil:
				t.Errorf("got %v, want the layers contained", err)
			case tt.want != nil && !errors.Is(err, tt.want):
				t.Errorf("got %v, want %v", err, tt.want)
			}
			if tt.inside != "" {
				p := filepath.Join(root, tt.inside)
				if tt.inside == "outside/pwned" {
					p = filepath.Join(root, outside, "pwned")
				}
				if _, err := os.Lstat(p); err != nil {
					t.Errorf("inside the tree: got %v, want %s", err, tt.inside)
				}
			}
			// Beside the tree, nothing changed.
			entries, _ := os.ReadDir(base)
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			if !slices.Equal(names, []string{"outside", "root"}) {
				t.Errorf("beside the tree: got %v, want [outside root]", names)
			}
			entries, _ = os.ReadDir(outside)
			if len(entries) != 1 {
				t.Errorf("outside: got %d entries, want only victim", len(entries))
			}
			var st syscall.Stat_t
			b, err := os.ReadFile(victim)
			if err != nil || string(b) != "safe" || syscall.Stat(victim, &st) != nil || st.Nlink != 1 {
				t.Errorf("victim: got %q %v (nlink %d), want \"safe\" with 1 link", b, err, st.Nlink)
			}
		})
	}
}

// TestMaliciousImport runs one escaping layer through Import: refused, and
// nothing is left in the store.
func TestMaliciousImport(t *testing.T) {
	img := testImage(t, []entry{file("../../../escape", "x")})
	s := openStore(t)
	_, err := s.Import(t.Context(), bytes.NewReader(dockerArchive(t, img, "evil:1")), "", nil)
	if !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "leaves the image root") {
		t.Errorf("got %v, want %v saying the path leaves the root", err, api.ErrInvalid)
	}
	assertEmptyStore(t, s)
	if _, err := os.Stat(filepath.Join(filepath.Dir(s.Root()), "escape")); err == nil {
		t.Errorf("escape: got written beside the store, want refused")
	}
}

func TestCleanName(t *testing.T) {
	tests := []struct {
		in, want string
		err      bool
	}{
		{"a/b", "a/b", false},
		{"./a/b/", "a/b", false},
		{"/etc/passwd", "etc/passwd", false},
		{"a//b/./c", "a/b/c", false},
		{"./", "", false},
		{"../x", "", true},
		{"a/../b", "", true},
		{"..", "", true},
		{"a/..", "", true},
		{"a\x00b", "", true},
	}
	for _, tt := range tests {
		got, err := cleanName(tt.in)
		if got != tt.want || (err != nil) != tt.err {
			t.Errorf("cleanName(%q): got %q %v, want %q (error %v)", tt.in, got, err, tt.want, tt.err)
		}
	}
}
