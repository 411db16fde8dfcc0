package image

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/warrenhq/warren/api"
)

// RequiresRoot skips a test that needs root (chown, mknod, debootstrap).
func RequiresRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}

var builtin struct {
	once     sync.Once
	dir, dig string
	err      error
}

// builtinImage builds the built-in Debian image in the real cache
// (DefaultCacheDir), once per test binary and, through the cache, once per
// machine and recipe version.
func builtinImage(t *testing.T) (dir, digest string) {
	t.Helper()
	RequiresRoot(t)
	if _, err := exec.LookPath("debootstrap"); err != nil {
		t.Skip("debootstrap is not installed (apt-get install debootstrap)")
	}
	builtin.once.Do(func() {
		builtin.dir, builtin.dig, builtin.err = BuildDebian(t.Context(), DefaultCacheDir, func(p api.Progress) {
			t.Logf("%s: %s", p.Phase, p.Message)
		})
	})
	if builtin.err != nil {
		t.Fatalf("BuildDebian: %v", builtin.err)
	}
	return builtin.dir, builtin.dig
}

func TestBuildDebian(t *testing.T) {
	dir, digest := builtinImage(t)
	if want := filepath.Join(DefaultCacheDir, "debian-bookworm-"+RecipeVersion, "rootfs"); dir != want {
		t.Errorf("dir: got %v, want %v", dir, want)
	}
	if digest != (Debian{}).Digest() {
		t.Errorf("digest: got %v, want %v", digest, Debian{}.Digest())
	}
	for _, p := range []string{"usr/bin/python3", "bin/bash", "usr/bin/git", "usr/bin/curl", "bin/ps", "etc/ssl/certs/ca-certificates.crt", "etc/debian_version"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	debs, _ := filepath.Glob(filepath.Join(dir, "var/cache/apt/archives/*.deb"))
	lists, _ := filepath.Glob(filepath.Join(dir, "var/lib/apt/lists/*"))
	if len(debs)+len(lists) != 0 {
		t.Errorf("apt caches left: got %d .deb and %d lists, want none", len(debs), len(lists))
	}
	version, err := os.ReadFile(filepath.Join(dir, "etc/debian_version"))
	if err != nil || !strings.HasPrefix(string(version), "12.") {
		t.Errorf("debian_version: got %q (%v), want 12.x", version, err)
	}

	// A second build returns at once with the same answer.
	dir2, digest2, err := BuildDebian(t.Context(), DefaultCacheDir, nil)
	if err != nil || dir2 != dir || digest2 != digest {
		t.Errorf("second build: got %v %v %v, want %v %v <nil>", dir2, digest2, err, dir, digest)
	}
}

func TestDebianDigestFollowsRecipe(t *testing.T) {
	d := Debian{}
	before := d.Digest()
	if !strings.HasPrefix(before, "sha256:") || len(before) != len("sha256:")+64 {
		t.Fatalf("digest: got %v, want sha256:<64 hex>", before)
	}
	if got := (Debian{Mirror: "http://example.invalid/debian"}).Digest(); got != before {
		t.Errorf("digest with another mirror: got %v, want %v", got, before)
	}
	saved := slices.Clone(debianPackages)
	t.Cleanup(func() { debianPackages = saved })
	debianPackages = append(debianPackages, "vim")
	if got := d.Digest(); got == before {
		t.Errorf("digest after adding a package: got %v, want a different one", got)
	}
}

func TestSystemMirror(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"none", nil, DefaultMirror},
		{"one-line", map[string]string{
			"sources.list": "# comment\ndeb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian/ bookworm main\n",
		}, "http://mirror.example/debian"},
		{"one-line security only", map[string]string{
			"sources.list": "deb http://security.debian.org/debian-security bookworm-security main\n",
		}, DefaultMirror},
		{"deb822", map[string]string{
			"sources.list.d/debian.sources": "Types: deb\nURIs: http://deb.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\n" +
				"Types: deb\nURIs: http://deb.example/debian-security\nSuites: bookworm-security\nComponents: main\n",
		}, "http://deb.example/debian"},
		{"third party ignored", map[string]string{
			"sources.list.d/node.sources": "Types: deb\nURIs: https://deb.nodesource.example/node_20.x\nSuites: nodistro\nComponents: main\n",
			"sources.list.d/gcloud.list":  "deb https://packages.example/apt cloud-sdk-bookworm main\n",
		}, DefaultMirror},
		{"disabled stanza", map[string]string{
			"sources.list.d/debian.sources": "Types: deb\nEnabled: no\nURIs: http://deb.example/debian\nSuites: bookworm\n",
		}, DefaultMirror},
		{"deb-src only", map[string]string{
			"sources.list": "deb-src http://deb.example/debian bookworm main\n",
		}, DefaultMirror},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			os.MkdirAll(filepath.Join(dir, "sources.list.d"), 0o755)
			for name, text := range tt.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got := systemMirror(dir); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}
