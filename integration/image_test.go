package integration

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/client"
)

// busyboxImage makes a small image from the host's static busybox (Debian's
// busybox-static): /bin/busybox, applets as symlinks, and a second layer
// that whites out a file of the first.
func busyboxImage(t *testing.T) v1.Image {
	t.Helper()
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Skipf("needs a static /bin/busybox (apt-get install busybox-static; scripts/test.sh installs it): %v", err)
	}
	layer := func(write func(tw *tar.Writer)) v1.Layer {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		write(tw)
		tw.Close()
		b := buf.Bytes()
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	dir := func(tw *tar.Writer, p string) {
		tw.WriteHeader(&tar.Header{Name: p, Typeflag: tar.TypeDir, Mode: 0o755})
	}
	file := func(tw *tar.Writer, p string, data []byte, mode int64) {
		tw.WriteHeader(&tar.Header{Name: p, Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(data))})
		tw.Write(data)
	}
	base := layer(func(tw *tar.Writer) {
		for _, d := range []string{"bin/", "etc/", "root/", "tmp/"} {
			dir(tw, d)
		}
		file(tw, "bin/busybox", bb, 0o755)
		for _, applet := range []string{"sh", "ls", "cat", "echo", "true", "pwd", "env"} {
			tw.WriteHeader(&tar.Header{Name: "bin/" + applet, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777})
		}
		file(tw, "etc/motd", []byte("from layer one\n"), 0o644)
		file(tw, "etc/gone", []byte("whited out\n"), 0o644)
	})
	top := layer(func(tw *tar.Writer) {
		dir(tw, "etc/")
		file(tw, "etc/.wh.gone", nil, 0o644)
		file(tw, "etc/motd", []byte("from layer two\n"), 0o644)
	})
	img, err := mutate.AppendLayers(empty.Image, base, top)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := img.ConfigFile()
	cfg = cfg.DeepCopy()
	cfg.Config.Env = []string{"PATH=/bin", "FROM_IMAGE=yes"}
	cfg.Config.WorkingDir = "/tmp"
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestImageImportAndPull imports a `docker save` archive and pulls the same
// image from a registry (go-containerregistry's, in this process, on
// loopback), then runs sandboxes on it.
func TestImageImportAndPull(t *testing.T) {
	s := StartServer(t)
	ctx := ctxT(t)
	c := s.Client
	img := busyboxImage(t)

	var archive bytes.Buffer
	tag, _ := name.NewTag("test/busybox:1")
	if err := tarball.Write(tag, img, &archive); err != nil {
		t.Fatal(err)
	}
	var phases []string
	imported, err := c.ImportImage(ctx, bytes.NewReader(archive.Bytes()), "", func(p api.Progress) { phases = append(phases, p.Phase) })
	if err != nil {
		t.Fatalf("import: %v\n%s", err, s.Log())
	}
	if imported.Name != "test/busybox:1" || !strings.HasPrefix(imported.ID, "sha256:") {
		t.Errorf("import: got %+v, want test/busybox:1 with a sha256 id", imported)
	}

	check := func(image string) {
		t.Helper()
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Image: image})
		if err != nil {
			t.Fatalf("create from %s: %v\n%s", image, err, s.Log())
		}
		res, err := c.Exec(ctx, sb.ID, api.ExecRequest{Command: "cat /etc/motd; ls /etc/gone 2>/dev/null || echo whited-out; pwd; echo $FROM_IMAGE"})
		if err != nil {
			t.Fatal(err)
		}
		if want := "from layer two\nwhited-out\n/tmp\nyes\n"; res.Stdout != want {
			t.Errorf("sandbox on %s: got %q, want %q (layers applied, whiteout honoured, config used)", image, res.Stdout, want)
		}
		if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	check("test/busybox:1")

	reg := httptest.NewServer(registry.New())
	defer reg.Close()
	ref := strings.TrimPrefix(reg.URL, "http://") + "/team/busybox:2"
	pushRef, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(pushRef, img); err != nil {
		t.Fatalf("pushing to the test registry: %v", err)
	}
	pulled, err := c.PullImage(ctx, ref, client.PullOptions{Insecure: true}, nil)
	if err != nil {
		t.Fatalf("pull: %v\n%s", err, s.Log())
	}
	if pulled.ID != imported.ID {
		t.Errorf("pull: got id %s, want the imported image's %s (content-addressed)", pulled.ID, imported.ID)
	}
	check(ref)

	imgs, err := c.ListImages(ctx)
	if err != nil || len(imgs) != 3 {
		t.Errorf("list: got %d images, %v; want the built-in one, the import and the pull", len(imgs), err)
	}
	// Bad input changes nothing.
	if _, err := c.ImportImage(ctx, strings.NewReader("not a tar"), "x:1", nil); !errors.Is(err, client.ErrInvalid) && (err == nil || !strings.Contains(err.Error(), "tar")) {
		t.Errorf("import of garbage: got %v, want an error saying it is not an archive", err)
	}
	if _, err := c.PullImage(ctx, strings.TrimPrefix(reg.URL, "http://")+"/no/such:1", client.PullOptions{Insecure: true}, nil); err == nil {
		t.Errorf("pull of a missing image: got no error")
	}
	if imgs2, _ := c.ListImages(ctx); len(imgs2) != len(imgs) {
		t.Errorf("bad imports changed the image list: %d -> %d", len(imgs), len(imgs2))
	}
	if err := c.DeleteImage(ctx, "test/busybox:1"); err != nil {
		t.Errorf("delete image: %v", err)
	}
}
