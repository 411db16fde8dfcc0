package image

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/warrenhq/warren/api"
)

func TestImportFormats(t *testing.T) {
	RequiresRoot(t) // owners in the fixture
	img := testImage(t, fixtureLayers...)
	want := configDigest(t, img)
	docker := dockerArchive(t, img, "example.com/test/img:v1")
	layoutDir := ociLayout(t, img, "example.com/test/img:v1")
	ociArchive := tarDir(t, layoutDir)

	tests := []struct {
		name     string
		local    string // name given to the import
		doImport func(s *Store, local string) (api.Image, error)
	}{
		{"docker save", "", func(s *Store, n string) (api.Image, error) {
			return s.Import(t.Context(), bytes.NewReader(docker), n, nil)
		}},
		{"docker save gzipped", "other:v2", func(s *Store, n string) (api.Image, error) {
			return s.Import(t.Context(), bytes.NewReader(gzipBytes(t, docker)), n, nil)
		}},
		{"oci archive", "", func(s *Store, n string) (api.Image, error) {
			return s.Import(t.Context(), bytes.NewReader(ociArchive), n, nil)
		}},
		{"oci layout dir", "", func(s *Store, n string) (api.Image, error) {
			return s.ImportLayout(t.Context(), layoutDir, n, nil)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openStore(t)
			got, err := tt.doImport(s, tt.local)
			if err != nil {
				t.Fatalf("import: %v", err)
			}
			wantName := tt.local
			if wantName == "" {
				wantName = "example.com/test/img:v1"
			}
			if got.Name != wantName || got.ID != want || got.Source != SourceImport {
				t.Errorf("image: got %v %v %v, want %v %v %v", got.Name, got.ID, got.Source, wantName, want, SourceImport)
			}
			if got.SizeBytes != int64(len("#!tool127.0.0.1 localhost\nv2bnewx")) {
				t.Errorf("size: got %v, want %v", got.SizeBytes, len("#!tool127.0.0.1 localhost\nv2bnewx"))
			}
			im, err := s.Get(t.Context(), wantName)
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			if im.Rootfs != s.path("rootfs", strings.TrimPrefix(want, "sha256:")) {
				t.Errorf("rootfs: got %v, want under rootfs/ by digest", im.Rootfs)
			}
			wantCfg := ImageConfig{Env: []string{"PATH=/usr/bin:/bin", "A=b"}, Cmd: []string{"/bin/tool", "-x"}, WorkingDir: "/keep", User: "1000:1000"}
			if !slices.Equal(im.Config.Env, wantCfg.Env) || !slices.Equal(im.Config.Cmd, wantCfg.Cmd) || im.Config.WorkingDir != wantCfg.WorkingDir || im.Config.User != wantCfg.User {
				t.Errorf("config: got %+v, want %+v", im.Config, wantCfg)
			}
			checkFixtureTree(t, im.Rootfs)
			entries, _ := os.ReadDir(s.path("tmp"))
			if len(entries) != 0 {
				t.Errorf("tmp/: got %d entries, want none", len(entries))
			}
		})
	}
}

func checkFixtureTree(t *testing.T, root string) {
	t.Helper()
	if d := diffLines(describeTree(t, root), fixtureTree); d != "" {
		t.Errorf("tree differs:%s", d)
	}
	var a, b syscall.Stat_t
	if err := syscall.Stat(filepath.Join(root, "etc/hosts"), &a); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(filepath.Join(root, "etc/hosts2"), &b); err != nil {
		t.Fatal(err)
	}
	if a.Ino != b.Ino || a.Nlink != 2 {
		t.Errorf("hard link: got inodes %v and %v (nlink %v), want one inode with 2 links", a.Ino, b.Ino, a.Nlink)
	}
	for _, p := range []string{"etc/hosts", "opq", "keep", "usr/bin/hosts", "bin/tool"} {
		fi, err := os.Lstat(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		if !fi.ModTime().Equal(testTime) {
			t.Errorf("%s mtime: got %v, want %v", p, fi.ModTime().UTC(), testTime)
		}
	}
}

func TestImportTwiceReusesTree(t *testing.T) {
	s := openStore(t)
	img := testImage(t, []entry{file("a", "a")})
	archive := dockerArchive(t, img, "one:v1")
	first, err := s.Import(t.Context(), bytes.NewReader(archive), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(filepath.Join(s.rootfsPath(first.ID), "a"))
	if err != nil {
		t.Fatal(err)
	}
	var phases []api.Progress
	second, err := s.Import(t.Context(), bytes.NewReader(archive), "two:v1", func(p api.Progress) { phases = append(phases, p) })
	if err != nil {
		t.Fatal(err)
	}
	if second.ID != first.ID {
		t.Errorf("id: got %v, want %v", second.ID, first.ID)
	}
	after, err := os.Stat(filepath.Join(s.rootfsPath(first.ID), "a"))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Errorf("tree: got a new unpack, want the cached tree reused")
	}
	if slices.ContainsFunc(phases, func(p api.Progress) bool { return p.Phase == "unpack" && p.Total > 0 }) {
		t.Errorf("progress: got layer unpacking %v, want none", phases)
	}
	list, err := s.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, im := range list {
		names = append(names, im.Name)
	}
	if !slices.Equal(names, []string{"one:v1", "two:v1"}) {
		t.Errorf("List: got %v, want [one:v1 two:v1]", names)
	}
}

func TestImportProgress(t *testing.T) {
	s := openStore(t)
	random := make([]byte, 3<<20)
	rand.NewChaCha8([32]byte{}).Read(random) // incompressible
	big := string(random)
	img := testImage(t, []entry{file("big", big)}, []entry{file("small", "s")})
	var got []api.Progress
	if _, err := s.Import(t.Context(), bytes.NewReader(dockerArchive(t, img, "p:1")), "", func(p api.Progress) { got = append(got, p) }); err != nil {
		t.Fatal(err)
	}
	for _, layer := range []string{"layer 1/2", "layer 2/2"} {
		var last api.Progress
		for _, p := range got {
			if p.Phase == "unpack" && strings.HasPrefix(p.Message, layer) {
				last = p
			}
		}
		if last.Total == 0 || last.Current != last.Total {
			t.Errorf("%s: got last progress %+v, want current == total > 0", layer, last)
		}
	}
	var steps int
	for _, p := range got {
		if strings.HasPrefix(p.Message, "layer 1/2") {
			steps++
		}
	}
	if steps < 3 {
		t.Errorf("layer 1 progress lines: got %d, want at least 3 for a 3 MiB layer", steps)
	}
}

func TestConcurrentImports(t *testing.T) {
	s := openStore(t)
	img := testImage(t, []entry{dir("d/"), file("d/f", "content")}, []entry{file("d/g", "more")})
	archive := dockerArchive(t, img, "same:v1")
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Go(func() {
			// Half the callers use another Store on the same root, as a
			// second process would.
			st := s
			if i%2 == 1 {
				var err error
				if st, err = Open(s.Root()); err != nil {
					errs[i] = err
					return
				}
			}
			_, errs[i] = st.Import(t.Context(), bytes.NewReader(archive), "", nil)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("import %d: got %v, want nil", i, err)
		}
	}
	im, err := s.Get(t.Context(), "same:v1")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{". dir 0755 0:0", "d dir 0755 0:0", `d/f file 0644 0:0 "content"`, `d/g file 0644 0:0 "more"`}
	if os.Geteuid() == 0 {
		if d := diffLines(describeTree(t, im.Rootfs), want); d != "" {
			t.Errorf("tree differs:%s", d)
		}
	}
	for _, d := range []string{"rootfs", "tmp"} {
		entries, _ := os.ReadDir(s.path(d))
		if wantN := map[string]int{"rootfs": 1, "tmp": 0}[d]; len(entries) != wantN {
			t.Errorf("%s/: got %d entries, want %d", d, len(entries), wantN)
		}
	}
}

func TestPull(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	img := testImage(t, fixtureLayers...)
	ref, err := name.ParseReference(host + "/test/img:v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}

	// A multi-platform index: the host's platform is picked.
	other := testImage(t, []entry{file("other-arch", "x")})
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: other, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "s390x"}}},
		mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}}},
	)
	multi, err := name.ParseReference(host + "/test/multi:v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(multi, idx); err != nil {
		t.Fatal(err)
	}

	s := openStore(t)
	imported, err := s.Import(t.Context(), bytes.NewReader(dockerArchive(t, img, "local/img:v1")), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, ref, local, wantName string
		opts                       PullOptions
	}{
		{"image", host + "/test/img:v1", "", host + "/test/img:v1", PullOptions{}},
		{"renamed", host + "/test/img:v1", "mine:1", "mine:1", PullOptions{Insecure: true}},
		{"index", host + "/test/multi:v1", "", host + "/test/multi:v1", PullOptions{}},
		{"index explicit platform", host + "/test/multi:v1", "multi:host", "multi:host", PullOptions{Platform: "linux/" + runtime.GOARCH}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var phases []string
			got, err := s.Pull(t.Context(), tt.ref, tt.local, tt.opts, func(p api.Progress) { phases = append(phases, p.Phase) })
			if err != nil {
				t.Fatalf("Pull: %v", err)
			}
			if got.Name != tt.wantName || got.ID != imported.ID || got.Source != SourcePull {
				t.Errorf("got %v %v %v, want %v %v %v", got.Name, got.ID, got.Source, tt.wantName, imported.ID, SourcePull)
			}
			if !slices.Contains(phases, SourcePull) {
				t.Errorf("progress phases: got %v, want %q among them", phases, SourcePull)
			}
		})
	}
	entries, _ := os.ReadDir(s.path("rootfs"))
	if len(entries) != 1 {
		t.Errorf("rootfs/: got %d trees, want 1 shared by import and pulls", len(entries))
	}

	// Pulled first, the tree is the fixture's.
	fresh := openStore(t)
	if _, err := fresh.Pull(t.Context(), host+"/test/img:v1", "", PullOptions{}, nil); err != nil {
		t.Fatal(err)
	}
	im, err := fresh.Get(t.Context(), host+"/test/img:v1")
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		checkFixtureTree(t, im.Rootfs)
	}

	errTests := []struct {
		name, ref string
		opts      PullOptions
		want      error
		msg       string
	}{
		{"unknown repository", host + "/test/nothing:v1", PullOptions{}, api.ErrNotFound, "no such image"},
		{"unknown tag", host + "/test/img:v9", PullOptions{}, api.ErrNotFound, "no such image"},
		{"no such platform", host + "/test/multi:v1", PullOptions{Platform: "linux/riscv64"}, api.ErrNotFound, "linux/s390x"},
		{"bad platform", host + "/test/multi:v1", PullOptions{Platform: "amd64"}, api.ErrInvalid, "os/arch"},
		{"bad reference", "Not A Ref!", PullOptions{}, api.ErrInvalid, "not an image reference"},
		{"unreachable", "127.0.0.1:1/test/img:v1", PullOptions{}, api.ErrUnavailable, "cannot reach"},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			s := openStore(t)
			_, err := s.Pull(t.Context(), tt.ref, "", tt.opts, nil)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("got %v, want %v saying %q", err, tt.want, tt.msg)
			}
			assertEmptyStore(t, s)
		})
	}
}

func TestBadInput(t *testing.T) {
	img := testImage(t, []entry{file("a", "a")})
	twoImages := func() []byte {
		other := testImage(t, []entry{file("b", "b")})
		t1, _ := name.NewTag("one:v1")
		t2, _ := name.NewTag("two:v1")
		var buf bytes.Buffer
		if err := tarball.MultiWrite(map[name.Tag]v1.Image{t1: img, t2: other}, &buf); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}()
	tests := []struct {
		name  string
		input []byte
		local string
		want  error
		msg   string
	}{
		{"not a tar", []byte(strings.Repeat("hello, world\n", 100)), "x:1", api.ErrInvalid, "not a tar archive"},
		{"empty", nil, "x:1", api.ErrInvalid, "empty"},
		{"truncated gzip", gzipBytes(t, dockerArchive(t, img, "a:1"))[:100], "x:1", api.ErrInvalid, "reading"},
		{"tar without manifest", tarBytes(t, file("hello.txt", "hi")), "x:1", api.ErrInvalid, "neither manifest.json"},
		{"docker without tag", dockerArchive(t, img, ""), "", api.ErrInvalid, "give it a name"},
		{"oci without name", tarDir(t, ociLayout(t, img, "")), "", api.ErrInvalid, "give it one"},
		{"oci with a bare tag", tarDir(t, ociLayout(t, img, "latest")), "", api.ErrInvalid, "give it one"},
		{"two images, no name", twoImages, "", api.ErrInvalid, "one:v1, two:v1"},
		{"two images, other name", twoImages, "three:v1", api.ErrInvalid, "name the one"},
		{"bad name", dockerArchive(t, img, "a:1"), "Upper/Case", api.ErrInvalid, "lower-case"},
		{"broken manifest", tarBytes(t, file("manifest.json", "{not json")), "", api.ErrInvalid, "manifest.json"},
		{"missing layer", tarBytes(t, file("manifest.json", `[{"Config":"c.json","RepoTags":["a:1"],"Layers":["l.tar"]}]`), file("c.json", `{"rootfs":{"type":"layers","diff_ids":["sha256:`+strings.Repeat("0", 64)+`"]}}`)), "", api.ErrInvalid, "no layer l.tar"},
		{"corrupt layer", tarBytes(t, file("manifest.json", `[{"Config":"c.json","RepoTags":["a:1"],"Layers":["l.tar"]}]`), file("c.json", `{"rootfs":{"type":"layers","diff_ids":["sha256:`+strings.Repeat("0", 64)+`"]}}`), file("l.tar", string(tarBytes(t, file("f", "f"))))), "", api.ErrInvalid, "corrupt"},
		{"layer not a tar", tarBytes(t, file("manifest.json", `[{"Config":"c.json","RepoTags":["a:1"],"Layers":["l.tar"]}]`), file("c.json", `{"rootfs":{"type":"layers","diff_ids":["sha256:`+strings.Repeat("0", 64)+`"]}}`), file("l.tar", strings.Repeat("junk", 300))), "", api.ErrInvalid, "tar stream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openStore(t)
			_, err := s.Import(t.Context(), bytes.NewReader(tt.input), tt.local, nil)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("got %v, want %v saying %q", err, tt.want, tt.msg)
			}
			assertEmptyStore(t, s)
		})
	}

	t.Run("not a layout", func(t *testing.T) {
		s := openStore(t)
		_, err := s.ImportLayout(t.Context(), t.TempDir(), "x:1", nil)
		if !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "not an OCI image layout") {
			t.Errorf("got %v, want %v saying it is not a layout", err, api.ErrInvalid)
		}
		assertEmptyStore(t, s)
	})

	t.Run("corrupt layout blob", func(t *testing.T) {
		dir := ociLayout(t, testImage(t, []entry{file("a", "a")}), "c:1")
		layers, _ := img.Layers()
		d, _ := layers[0].Digest()
		// Replace the layer with another valid gzipped tar.
		blob := filepath.Join(dir, "blobs", "sha256", d.Hex)
		if err := os.WriteFile(blob, gzipBytes(t, tarBytes(t, file("evil", "x"))), 0o644); err != nil {
			t.Fatal(err)
		}
		s := openStore(t)
		_, err := s.ImportLayout(t.Context(), dir, "", nil)
		if !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "corrupt") {
			t.Errorf("got %v, want %v saying the image is corrupt", err, api.ErrInvalid)
		}
		assertEmptyStore(t, s)
	})

	t.Run("unknown image", func(t *testing.T) {
		s := openStore(t)
		_, err := s.Get(t.Context(), "python:3.12")
		want := `image "python:3.12" not found locally; run warren image pull python:3.12 or warren image import FILE`
		if !errors.Is(err, api.ErrNotFound) || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want %v saying %q", err, api.ErrNotFound, want)
		}
		if err := s.Delete(t.Context(), "python:3.12"); !errors.Is(err, api.ErrNotFound) {
			t.Errorf("Delete: got %v, want %v", err, api.ErrNotFound)
		}
		if _, err := s.Get(t.Context(), "../../etc/passwd"); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("Get of a bad name: got %v, want %v", err, api.ErrInvalid)
		}
	})
}

func TestDeleteKeepsSharedTree(t *testing.T) {
	s := openStore(t)
	archive := dockerArchive(t, testImage(t, []entry{file("a", "a")}), "a:1")
	a, err := s.Import(t.Context(), bytes.NewReader(archive), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Import(t.Context(), bytes.NewReader(archive), "b:1", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(t.Context(), "a:1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(t.Context(), "a:1"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("Get a:1 after Delete: got %v, want %v", err, api.ErrNotFound)
	}
	b, err := s.Get(t.Context(), "b:1")
	if err != nil {
		t.Fatalf("Get b:1: got %v, want the image", err)
	}
	if b.ID != a.ID {
		t.Errorf("b:1 id: got %v, want %v", b.ID, a.ID)
	}
	if _, err := os.Stat(filepath.Join(b.Rootfs, "a")); err != nil {
		t.Errorf("shared tree after deleting a:1: got %v, want it kept", err)
	}
	// "b" and "b:latest" are other names; "docker.io/library/b:1" is the same.
	if err := s.Delete(t.Context(), "docker.io/library/b:1"); err != nil {
		t.Fatal(err)
	}
	assertEmptyStore(t, s)
}

func TestOpenRemovesStaleTemp(t *testing.T) {
	s := openStore(t)
	// What a crash leaves: a half-unpacked tree and its unlocked lock file.
	if err := os.MkdirAll(s.path("tmp", "crashed", "usr", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.path("tmp", "crashed.lock"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Work in progress of a live store: locked, so kept.
	live, release, err := s.tempDir(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if _, err := Open(s.Root()); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(s.path("tmp"))
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	want := []string{filepath.Base(live), filepath.Base(live) + ".lock"}
	if !slices.Equal(got, want) {
		t.Errorf("tmp/ after Open: got %v, want %v", got, want)
	}
}

func TestAddRootfs(t *testing.T) {
	RequiresRoot(t)
	src := t.TempDir()
	writeTree(t, src)
	digest := "sha256:" + strings.Repeat("ab", 32)
	s := openStore(t)
	got, err := s.AddRootfs(t.Context(), "tree:1", digest, src, "")
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != digest || got.Source != SourceBuiltin || got.Name != "tree:1" || got.SizeBytes != 5 {
		t.Errorf("got %+v, want id %v, source %v, name tree:1, 5 bytes", got, digest, SourceBuiltin)
	}
	im, err := s.Get(t.Context(), "tree:1")
	if err != nil {
		t.Fatal(err)
	}
	if d := diffLines(describeTree(t, im.Rootfs), describeTree(t, src)); d != "" {
		t.Errorf("tree differs:%s", d)
	}
	a, _ := os.Stat(filepath.Join(src, "dir", "f"))
	b, _ := os.Stat(filepath.Join(im.Rootfs, "dir", "f"))
	if !os.SameFile(a, b) {
		t.Errorf("dir/f: got a copy, want a hard link on the same filesystem")
	}
	again, err := s.AddRootfs(t.Context(), "tree:1", digest, src, "")
	if err != nil || again != got {
		t.Errorf("second AddRootfs: got %+v %v, want %+v <nil>", again, err, got)
	}

	bad := []struct {
		name, digest, dir string
		want              error
	}{
		{"tree:1", "md5:abc", src, api.ErrInvalid},
		{"tree:1", digest, filepath.Join(src, "missing"), api.ErrInvalid},
		{"", digest, src, api.ErrInvalid},
	}
	for _, tt := range bad {
		if _, err := s.AddRootfs(t.Context(), tt.name, tt.digest, tt.dir, ""); !errors.Is(err, tt.want) {
			t.Errorf("AddRootfs(%q, %q, %q): got %v, want %v", tt.name, tt.digest, tt.dir, err, tt.want)
		}
	}
}

// writeTree makes a small tree with a file, a hard link, a symlink, a fifo,
// a set-group-ID directory and an owned file.
func writeTree(t *testing.T, root string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(filepath.Join(root, "dir"), 0o755))
	must(os.WriteFile(filepath.Join(root, "dir", "f"), []byte("hello"), 0o640))
	must(os.Lchown(filepath.Join(root, "dir", "f"), 12, 34))
	must(os.Link(filepath.Join(root, "dir", "f"), filepath.Join(root, "dir", "g")))
	must(os.Symlink("../dir/f", filepath.Join(root, "dir", "link")))
	must(syscall.Mkfifo(filepath.Join(root, "fifo"), 0o600))
	must(os.Mkdir(filepath.Join(root, "sgid"), 0o755))
	must(os.Chmod(filepath.Join(root, "sgid"), 0o2775|os.ModeSetgid))
	must(os.Chmod(root, 0o755))
}

func TestCloneTreeCopy(t *testing.T) {
	RequiresRoot(t)
	src := t.TempDir()
	writeTree(t, src)
	dst := t.TempDir()
	c := &cloner{link: false, copied: map[[2]uint64]string{}}
	if err := cloneTreeWith(t.Context(), src, dst, c); err != nil {
		t.Fatal(err)
	}
	if d := diffLines(describeTree(t, dst), describeTree(t, src)); d != "" {
		t.Errorf("tree differs:%s", d)
	}
	a, _ := os.Stat(filepath.Join(src, "dir", "f"))
	f, _ := os.Stat(filepath.Join(dst, "dir", "f"))
	g, _ := os.Stat(filepath.Join(dst, "dir", "g"))
	if os.SameFile(a, f) {
		t.Errorf("dir/f: got a hard link to the source, want a copy")
	}
	if !os.SameFile(f, g) {
		t.Errorf("dir/f and dir/g: got two files, want the hard link kept in the copy")
	}
	if !f.ModTime().Equal(a.ModTime()) {
		t.Errorf("dir/f mtime: got %v, want %v", f.ModTime(), a.ModTime())
	}
}

func TestBuiltinImage(t *testing.T) {
	dir, digest := builtinImage(t)
	s := openStore(t)
	got, err := s.AddRootfs(t.Context(), BuiltinName, digest, dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != BuiltinName || got.ID != digest || got.SizeBytes < 50<<20 {
		t.Errorf("got %+v, want %s %s of more than 50 MB", got, BuiltinName, digest)
	}
	im, err := s.Get(t.Context(), BuiltinName)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"usr/bin/python3", "bin/bash", "usr/bin/git"} {
		if _, err := os.Stat(filepath.Join(im.Rootfs, p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

func TestImportCanceled(t *testing.T) {
	random := make([]byte, 3<<20)
	rand.NewChaCha8([32]byte{1}).Read(random)
	archive := dockerArchive(t, testImage(t, []entry{file("big", string(random))}), "big:1")
	for _, phase := range []string{"read", "unpack"} {
		t.Run(phase, func(t *testing.T) {
			s := openStore(t)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			_, err := s.Import(ctx, bytes.NewReader(archive), "", func(p api.Progress) {
				if p.Phase == phase && p.Current > 0 {
					cancel()
				}
			})
			if !errors.Is(err, context.Canceled) {
				t.Errorf("got %v, want %v", err, context.Canceled)
			}
			assertEmptyStore(t, s)
		})
	}
}
