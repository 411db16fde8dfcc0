package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

var testTime = time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)

// entry is one tar entry of a test layer. Zero mode means 0644 for files
// and 0755 for directories.
type entry struct {
	name     string
	typ      byte
	mode     int64
	body     string
	link     string
	uid, gid int
}

func file(name, body string) entry      { return entry{name: name, typ: tar.TypeReg, body: body} }
func dir(name string) entry             { return entry{name: name, typ: tar.TypeDir} }
func symlink(name, target string) entry { return entry{name: name, typ: tar.TypeSymlink, link: target} }
func hardlink(name, target string) entry {
	return entry{name: name, typ: tar.TypeLink, link: target}
}

func tarBytes(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		mode := e.mode
		if mode == 0 {
			mode = 0o644
			if e.typ == tar.TypeDir {
				mode = 0o755
			}
		}
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: mode, Linkname: e.link, Uid: e.uid, Gid: e.gid, ModTime: testTime, Format: tar.FormatPAX}
		if e.typ == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func testLayer(t testing.TB, entries ...entry) v1.Layer {
	t.Helper()
	b := tarBytes(t, entries...)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func testImage(t testing.TB, layers ...[]entry) v1.Image {
	t.Helper()
	var ls []v1.Layer
	for _, es := range layers {
		ls = append(ls, testLayer(t, es...))
	}
	img, err := mutate.AppendLayers(empty.Image, ls...)
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.Config(img, v1.Config{Env: []string{"PATH=/usr/bin:/bin", "A=b"}, Cmd: []string{"/bin/tool", "-x"}, WorkingDir: "/keep", User: "1000:1000"})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// fixtureLayers exercise the unpacker: files, directories, a symlink, a
// hard link, set-user-ID and sticky modes, owners, a fifo, a device (skipped),
// whiteouts of a lower file and directory, an opaque directory (its marker
// after an entry of the same layer), and a whiteout of an entry of its own
// layer (ignored).
var fixtureLayers = [][]entry{
	{
		dir("bin/"),
		{name: "bin/tool", typ: tar.TypeReg, mode: 0o4755, uid: 1000, gid: 1000, body: "#!tool"},
		dir("etc/"),
		file("etc/hosts", "127.0.0.1 localhost\n"),
		hardlink("etc/hosts2", "etc/hosts"),
		{name: "etc/gone", typ: tar.TypeReg, mode: 0o600, body: "bye"},
		dir("opq/"),
		file("opq/old", "old"),
		dir("opq/sub/"),
		file("opq/sub/deep", "deep"),
		{name: "keep/", typ: tar.TypeDir, mode: 0o1777},
		{name: "keep/a", typ: tar.TypeReg, mode: 0o640, gid: 42, body: "v1"},
		symlink("usr/bin/hosts", "/etc/hosts"),
		dir("gonedir/"),
		file("gonedir/f", "f"),
	},
	{
		file("etc/.wh.gone", ""),
		file(".wh.gonedir", ""),
		{name: "opq/", typ: tar.TypeDir, mode: 0o750},
		file("opq/new", "new"),
		file("opq/.wh..wh..opq", ""),
		dir("opq/sub/"),
		file("opq/sub/x", "x"),
		file("keep/a", "v2"),
		file("keep/b", "b"),
		file("keep/.wh.b", ""),
		{name: "run/fifo", typ: tar.TypeFifo, mode: 0o600},
		{name: "dev/null", typ: tar.TypeChar, mode: 0o666},
	},
}

// fixtureTree is what fixtureLayers unpack to, as describeTree puts it.
var fixtureTree = []string{
	". dir 0755 0:0",
	"bin dir 0755 0:0",
	"bin/tool file 4755 1000:1000 \"#!tool\"",
	"dev dir 0755 0:0",
	"etc dir 0755 0:0",
	"etc/hosts file 0644 0:0 \"127.0.0.1 localhost\\n\"",
	"etc/hosts2 file 0644 0:0 \"127.0.0.1 localhost\\n\"",
	"keep dir 1777 0:0",
	"keep/a file 0644 0:0 \"v2\"",
	"keep/b file 0644 0:0 \"b\"",
	"opq dir 0750 0:0",
	"opq/new file 0644 0:0 \"new\"",
	"opq/sub dir 0755 0:0",
	"opq/sub/x file 0644 0:0 \"x\"",
	"run dir 0755 0:0",
	"run/fifo fifo 0600 0:0",
	"usr dir 0755 0:0",
	"usr/bin dir 0755 0:0",
	"usr/bin/hosts symlink -> /etc/hosts",
}

// describeTree lists every entry under root: path, type, mode, owner and
// content or target.
func describeTree(t testing.TB, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		meta := fmt.Sprintf("%04o %d:%d", st.Mode&0o7777, st.Uid, st.Gid)
		switch m := fi.Mode(); {
		case m.IsDir():
			out = append(out, rel+" dir "+meta)
		case m.IsRegular():
			b, _ := os.ReadFile(p)
			out = append(out, fmt.Sprintf("%s file %s %q", rel, meta, b))
		case m&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out = append(out, rel+" symlink -> "+target)
		case m&fs.ModeNamedPipe != 0:
			out = append(out, rel+" fifo "+meta)
		default:
			out = append(out, rel+" other "+meta)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func diffLines(got, want []string) string {
	var b strings.Builder
	for _, g := range got {
		if !slices.Contains(want, g) {
			fmt.Fprintf(&b, "\n  unexpected: %s", g)
		}
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			fmt.Fprintf(&b, "\n  missing:    %s", w)
		}
	}
	return b.String()
}

func dockerArchive(t testing.TB, img v1.Image, tag string) []byte {
	t.Helper()
	var buf bytes.Buffer
	var ref name.Reference
	if tag != "" {
		tg, err := name.NewTag(tag)
		if err != nil {
			t.Fatal(err)
		}
		ref = tg
	} else {
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		ref, err = name.NewDigest("untagged/img@" + d.String())
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := tarball.MultiRefWrite(map[name.Reference]v1.Image{ref: img}, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gzipBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// ociLayout writes img as an OCI image layout in a new directory, with
// refName as its org.opencontainers.image.ref.name unless empty.
func ociLayout(t testing.TB, img v1.Image, refName string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	var opts []layout.Option
	if refName != "" {
		opts = append(opts, layout.WithAnnotations(map[string]string{annotationRefName: refName}))
	}
	if err := p.AppendImage(img, opts...); err != nil {
		t.Fatal(err)
	}
	return dir
}

// tarDir makes a tar of the files under dir, named relative to it.
func tarDir(t testing.TB, dir string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		hdr, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			tw.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func openStore(t testing.TB) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "images"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// assertEmptyStore checks that nothing is left under the store: no trees,
// refs or temporary files.
func assertEmptyStore(t testing.TB, s *Store) {
	t.Helper()
	for _, d := range []string{"rootfs", "refs", "tmp"} {
		entries, err := os.ReadDir(s.path(d))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		if len(names) != 0 {
			t.Errorf("%s/: got %v, want nothing", d, names)
		}
	}
}

func configDigest(t testing.TB, img v1.Image) string {
	t.Helper()
	h, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}
