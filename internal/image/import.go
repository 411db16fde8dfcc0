package image

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/warrenhq/warren/api"
)

// Annotations that name an image in an OCI index.
const (
	annotationRefName       = "org.opencontainers.image.ref.name"
	annotationContainerName = "io.containerd.image.name"
)

// Sources recorded in api.Image.Source.
const (
	SourceBuiltin = "builtin"
	SourceImport  = "import"
	SourcePull    = "pull"
)

// Import adds the image in r, a `docker save` tarball or an OCI image
// layout tarball (oci-archive), either optionally gzip-compressed, under
// name. With name "", the archive's own name is used: its repo tag
// (docker) or its name annotation (OCI). Progress has phase "read" while
// the archive is read and "unpack" per layer.
func (s *Store) Import(ctx context.Context, r io.Reader, name string, progress func(api.Progress)) (api.Image, error) {
	progress = orNop(progress)
	if name != "" {
		var err error
		if name, err = NormalizeName(name); err != nil {
			return api.Image{}, err
		}
	}
	work, release, err := s.tempDir(ctx)
	if err != nil {
		return api.Image{}, fmt.Errorf("importing image: %w", err)
	}
	defer release()
	archive := filepath.Join(work, "archive.tar")
	if err := spool(ctx, r, archive, progress); err != nil {
		return api.Image{}, fmt.Errorf("importing image: %w", err)
	}
	index, err := indexTar(archive)
	if err != nil {
		return api.Image{}, err
	}
	switch {
	case index["manifest.json"] != nil:
		return s.importDocker(ctx, archive, index, name, progress)
	case index["index.json"] != nil:
		dir := filepath.Join(work, "layout")
		if err := extractLayout(archive, dir); err != nil {
			return api.Image{}, err
		}
		return s.importLayout(ctx, dir, name, progress)
	default:
		return api.Image{}, fmt.Errorf("importing image: the archive has neither manifest.json (docker save) nor index.json (OCI image layout); give the output of docker save or an oci-archive: %w", api.ErrInvalid)
	}
}

// ImportLayout adds the image in dir, an OCI image layout directory, under
// name; with name "", under the name annotated in the layout's index.
func (s *Store) ImportLayout(ctx context.Context, dir string, name string, progress func(api.Progress)) (api.Image, error) {
	if name != "" {
		var err error
		if name, err = NormalizeName(name); err != nil {
			return api.Image{}, err
		}
	}
	return s.importLayout(ctx, dir, name, orNop(progress))
}

// PullOptions tune Pull.
type PullOptions struct {
	// Insecure allows plain HTTP (and unverified TLS) to the registry.
	// Registries on localhost and private addresses speak HTTP anyway.
	Insecure bool
	// Platform picks the image of a multi-platform index, as "os/arch[/variant]";
	// linux and the host's architecture when empty.
	Platform string
}

// Pull fetches ref from its registry and adds it under name (ref's
// normalized form when name is ""). An image whose config is already cached
// is not downloaded again. Progress has phase "pull", with the bytes
// fetched per layer; layers are unpacked as they stream in.
func (s *Store) Pull(ctx context.Context, ref, localName string, opts PullOptions, progress func(api.Progress)) (api.Image, error) {
	progress = orNop(progress)
	var nameOpts []name.Option
	if opts.Insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	r, err := name.ParseReference(ref, nameOpts...)
	if err != nil {
		return api.Image{}, fmt.Errorf("pulling %q: not an image reference (want e.g. python:3.12 or localhost:5000/team/tool:v1): %w", ref, api.ErrInvalid)
	}
	if localName == "" {
		localName = ref
	}
	if localName, err = NormalizeName(localName); err != nil {
		return api.Image{}, err
	}
	platform, err := parsePlatform(opts.Platform)
	if err != nil {
		return api.Image{}, err
	}
	remoteOpts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	progress(api.Progress{Phase: SourcePull, Message: "resolving " + r.String()})
	desc, err := remote.Get(r, remoteOpts...)
	if err != nil {
		return api.Image{}, pullError(ref, err)
	}
	var img v1.Image
	if desc.MediaType.IsIndex() {
		idx, err := desc.ImageIndex()
		if err != nil {
			return api.Image{}, pullError(ref, err)
		}
		img, err = imageForPlatform(idx, platform)
		if err != nil {
			return api.Image{}, pullError(ref, err)
		}
	} else if img, err = desc.Image(); err != nil {
		return api.Image{}, pullError(ref, err)
	}
	out, err := s.importImage(ctx, img, refRecord{Image: api.Image{Name: localName, Source: SourcePull}, Origin: r.Name()}, SourcePull, progress)
	if err != nil {
		return api.Image{}, pullError(ref, err)
	}
	return out, nil
}

// pullError turns registry and network errors into ones that say what to do.
func pullError(ref string, err error) error {
	if errors.Is(err, api.ErrInvalid) || errors.Is(err, api.ErrNotFound) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("pulling %s: %w", ref, err)
	}
	var terr *transport.Error
	if errors.As(err, &terr) {
		switch terr.StatusCode {
		case 401, 403, 404:
			return fmt.Errorf("pulling %s: the registry has no such image, or it needs credentials (docker login): %v: %w", ref, err, api.ErrNotFound)
		}
		for _, d := range terr.Errors {
			switch d.Code {
			case transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode, transport.UnauthorizedErrorCode, transport.DeniedErrorCode:
				return fmt.Errorf("pulling %s: the registry has no such image, or it needs credentials: %v: %w", ref, err, api.ErrNotFound)
			}
		}
	}
	var nerr net.Error
	if errors.As(err, &nerr) {
		return fmt.Errorf("pulling %s: cannot reach the registry (%v); check the address, or use warren image import with a saved image: %w", ref, err, api.ErrUnavailable)
	}
	return fmt.Errorf("pulling %s: %w", ref, err)
}

func parsePlatform(s string) (v1.Platform, error) {
	if s == "" {
		return v1.Platform{OS: "linux", Architecture: runtime.GOARCH}, nil
	}
	p, err := v1.ParsePlatform(s)
	if err != nil || p.OS == "" || p.Architecture == "" {
		return v1.Platform{}, fmt.Errorf("platform %q: want os/arch such as linux/amd64: %w", s, api.ErrInvalid)
	}
	return *p, nil
}

// imageForPlatform picks the image for platform out of a multi-platform index.
func imageForPlatform(idx v1.ImageIndex, platform v1.Platform) (v1.Image, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var have []string
	for _, d := range im.Manifests {
		if d.Platform == nil {
			continue
		}
		if d.Platform.Satisfies(platform) {
			if d.MediaType.IsIndex() {
				child, err := idx.ImageIndex(d.Digest)
				if err != nil {
					return nil, err
				}
				return imageForPlatform(child, platform)
			}
			return idx.Image(d.Digest)
		}
		have = append(have, d.Platform.String())
	}
	return nil, fmt.Errorf("no image for %s in the index (it has %s): %w", platform.String(), strings.Join(have, ", "), api.ErrNotFound)
}

// importLayout imports from an OCI image layout directory; name is
// normalized or "".
func (s *Store) importLayout(ctx context.Context, dir, name string, progress func(api.Progress)) (api.Image, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return api.Image{}, fmt.Errorf("importing %s: not an OCI image layout (no readable index.json): %v: %w", dir, err, api.ErrInvalid)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return api.Image{}, fmt.Errorf("importing %s: %v: %w", dir, err, api.ErrInvalid)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return api.Image{}, fmt.Errorf("importing %s: reading index.json: %v: %w", dir, err, api.ErrInvalid)
	}
	descs := im.Manifests
	if len(descs) == 0 {
		return api.Image{}, fmt.Errorf("importing %s: the layout's index.json lists no image: %w", dir, api.ErrInvalid)
	}
	desc, name, err := pickLayoutImage(descs, name)
	if err != nil {
		return api.Image{}, fmt.Errorf("importing %s: %w", dir, err)
	}
	var img v1.Image
	if desc.MediaType.IsIndex() {
		child, err := idx.ImageIndex(desc.Digest)
		if err == nil {
			platform, _ := parsePlatform("")
			img, err = imageForPlatform(child, platform)
		}
		if err != nil {
			return api.Image{}, fmt.Errorf("importing %s: %w", dir, invalid(err))
		}
	} else if desc.MediaType.IsImage() {
		if img, err = idx.Image(desc.Digest); err != nil {
			return api.Image{}, fmt.Errorf("importing %s: %v: %w", dir, err, api.ErrInvalid)
		}
	} else {
		return api.Image{}, fmt.Errorf("importing %s: %s is a %s, not an image: %w", dir, desc.Digest, desc.MediaType, api.ErrInvalid)
	}
	out, err := s.importImage(ctx, img, refRecord{Image: api.Image{Name: name, Source: SourceImport}}, "unpack", progress)
	if err != nil {
		return api.Image{}, fmt.Errorf("importing %s: %w", name, err)
	}
	return out, nil
}

// invalid marks errors that come from reading the input as api.ErrInvalid,
// leaving those that already say what they are.
func invalid(err error) error {
	if errors.Is(err, api.ErrInvalid) || errors.Is(err, api.ErrNotFound) {
		return err
	}
	return fmt.Errorf("%v: %w", err, api.ErrInvalid)
}

// layoutName is the name an OCI index entry gives its image, or "".
// An org.opencontainers.image.ref.name that is only a tag ("latest") is no
// name.
func layoutName(d v1.Descriptor) string {
	for _, key := range []string{annotationContainerName, annotationRefName} {
		v := d.Annotations[key]
		if !strings.Contains(v, ":") && !strings.Contains(v, "@") {
			continue
		}
		if n, err := NormalizeName(v); err == nil {
			return n
		}
	}
	return ""
}

func pickLayoutImage(descs []v1.Descriptor, name string) (v1.Descriptor, string, error) {
	var names []string
	for _, d := range descs {
		n := layoutName(d)
		if name != "" && n == name {
			return d, n, nil
		}
		if n == "" {
			n = d.Digest.String()
		}
		names = append(names, n)
	}
	switch {
	case len(descs) > 1:
		return v1.Descriptor{}, "", fmt.Errorf("the archive holds %d images (%s); name the one to import: %w", len(descs), strings.Join(names, ", "), api.ErrInvalid)
	case name != "":
		return descs[0], name, nil
	case layoutName(descs[0]) != "":
		return descs[0], layoutName(descs[0]), nil
	}
	return v1.Descriptor{}, "", fmt.Errorf("the image has no name (no %s annotation); give it one: %w", annotationRefName, api.ErrInvalid)
}

// importImage unpacks img (unless its config digest is cached already) and
// records it as rec.
func (s *Store) importImage(ctx context.Context, img v1.Image, rec refRecord, phase string, progress func(api.Progress)) (api.Image, error) {
	digest, err := img.ConfigName()
	if err != nil {
		return api.Image{}, invalid(fmt.Errorf("reading the image config: %w", err))
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return api.Image{}, invalid(fmt.Errorf("reading the image config: %w", err))
	}
	layers, err := img.Layers()
	if err != nil {
		return api.Image{}, invalid(fmt.Errorf("reading the image manifest: %w", err))
	}
	if len(layers) != len(cfg.RootFS.DiffIDs) {
		return api.Image{}, fmt.Errorf("the manifest has %d layers but the config %d: %w", len(layers), len(cfg.RootFS.DiffIDs), api.ErrInvalid)
	}
	sources := make([]layerSource, len(layers))
	for i, l := range layers {
		size, err := l.Size()
		if err != nil {
			return api.Image{}, invalid(fmt.Errorf("layer %d: %w", i+1, err))
		}
		sources[i] = layerSource{open: l.Compressed, size: size, diffID: cfg.RootFS.DiffIDs[i].String()}
	}
	return s.add(ctx, rec, digest.String(), cfg, sources, phase, progress)
}

// add unpacks layers as the image digest unless it is cached, and records
// rec under its name.
func (s *Store) add(ctx context.Context, rec refRecord, digest string, cfg *v1.ConfigFile, layers []layerSource, phase string, progress func(api.Progress)) (api.Image, error) {
	if !digestRe.MatchString(digest) {
		return api.Image{}, fmt.Errorf("image digest %q is not sha256: %w", digest, api.ErrInvalid)
	}
	rec.ID = digest
	rec.CreatedAt = time.Now().UTC()
	if cfg != nil {
		c := cfg.Config
		rec.Config = ImageConfig{Env: c.Env, WorkingDir: c.WorkingDir, Entrypoint: c.Entrypoint, Cmd: c.Cmd, User: c.User}
	}
	if _, err := os.Stat(s.rootfsPath(digest)); err == nil {
		progress(api.Progress{Phase: phase, Message: "already unpacked as " + shortDigest(digest)})
	}
	return s.install(ctx, rec, func(dir string) error {
		return unpackLayers(ctx, dir, layers, phase, progress)
	})
}

func orNop(progress func(api.Progress)) func(api.Progress) {
	if progress == nil {
		return func(api.Progress) {}
	}
	return progress
}

// spool copies r to the file at dst, ungzipping it if it is gzip.
func spool(ctx context.Context, r io.Reader, dst string, progress func(api.Progress)) error {
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	counted := &progressReader{ctx: ctx, r: r, phase: "read", message: "reading the archive", progress: progress}
	br := bufio.NewReaderSize(counted, 1<<20)
	var src io.Reader = br
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("reading gzip: %v: %w", err, api.ErrInvalid)
		}
		defer zr.Close()
		src = zr
	}
	if _, err := io.Copy(f, src); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, gzip.ErrChecksum) || errors.Is(err, gzip.ErrHeader) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("reading the archive: %v: %w", err, api.ErrInvalid)
		}
		return err
	}
	counted.done()
	return f.Close()
}

// indexTar reads the headers of the tar at p, by cleaned name.
func indexTar(p string) (map[string]*tar.Header, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	index := map[string]*tar.Header{}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("importing image: the input is not a tar archive (%v); give the output of docker save or an oci-archive: %w", err, api.ErrInvalid)
		}
		index[path.Clean(strings.TrimLeft(hdr.Name, "/"))] = hdr
	}
	if len(index) == 0 {
		return nil, fmt.Errorf("importing image: the archive is empty; give the output of docker save or an oci-archive: %w", api.ErrInvalid)
	}
	return index, nil
}

// openInTar opens the file called name inside the tar at archive,
// following symlinks within the archive.
func openInTar(archive string, index map[string]*tar.Header, name string) (io.ReadCloser, error) {
	name = path.Clean(strings.TrimLeft(name, "/"))
	for range 16 {
		hdr := index[name]
		if hdr == nil {
			return nil, fmt.Errorf("the archive has no %s: %w", name, api.ErrInvalid)
		}
		switch hdr.Typeflag {
		case tar.TypeSymlink:
			name = path.Clean(path.Join(path.Dir(name), hdr.Linkname))
			continue
		case tar.TypeLink:
			name = path.Clean(strings.TrimLeft(hdr.Linkname, "/"))
			continue
		case tar.TypeReg:
		default:
			return nil, fmt.Errorf("%s in the archive is not a file: %w", name, api.ErrInvalid)
		}
		f, err := os.Open(archive)
		if err != nil {
			return nil, err
		}
		tr := tar.NewReader(f)
		for {
			h, err := tr.Next()
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("finding %s in the archive: %w", name, err)
			}
			if h.Typeflag == tar.TypeReg && path.Clean(strings.TrimLeft(h.Name, "/")) == name {
				return struct {
					io.Reader
					io.Closer
				}{tr, f}, nil
			}
		}
	}
	return nil, fmt.Errorf("too many links to %s in the archive: %w", name, api.ErrInvalid)
}

// importDocker imports from a `docker save` tarball; name is normalized or "".
func (s *Store) importDocker(ctx context.Context, archive string, index map[string]*tar.Header, name string, progress func(api.Progress)) (api.Image, error) {
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(archive) })
	if err != nil {
		return api.Image{}, fmt.Errorf("importing image: reading manifest.json: %v: %w", err, api.ErrInvalid)
	}
	if len(m) == 0 {
		return api.Image{}, fmt.Errorf("importing image: manifest.json lists no image: %w", api.ErrInvalid)
	}
	desc, name, err := pickDockerImage(m, name)
	if err != nil {
		return api.Image{}, fmt.Errorf("importing image: %w", err)
	}
	rc, err := openInTar(archive, index, desc.Config)
	if err != nil {
		return api.Image{}, fmt.Errorf("importing %s: %w", name, err)
	}
	raw, err := io.ReadAll(io.LimitReader(rc, 16<<20))
	rc.Close()
	if err != nil {
		return api.Image{}, fmt.Errorf("importing %s: reading the config: %w", name, err)
	}
	sum := sha256.Sum256(raw)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	cfg, err := v1.ParseConfigFile(bytes.NewReader(raw))
	if err != nil {
		return api.Image{}, fmt.Errorf("importing %s: the config is not an image config: %v: %w", name, err, api.ErrInvalid)
	}
	if len(desc.Layers) != len(cfg.RootFS.DiffIDs) {
		return api.Image{}, fmt.Errorf("importing %s: manifest.json lists %d layers but the config %d: %w", name, len(desc.Layers), len(cfg.RootFS.DiffIDs), api.ErrInvalid)
	}
	layers := make([]layerSource, len(desc.Layers))
	for i, p := range desc.Layers {
		hdr := index[path.Clean(strings.TrimLeft(p, "/"))]
		if hdr == nil {
			return api.Image{}, fmt.Errorf("importing %s: the archive has no layer %s: %w", name, p, api.ErrInvalid)
		}
		layers[i] = layerSource{
			open: func() (io.ReadCloser, error) {
				return openInTar(archive, index, p)
			},
			size:   hdr.Size,
			diffID: cfg.RootFS.DiffIDs[i].String(),
		}
	}
	out, err := s.add(ctx, refRecord{Image: api.Image{Name: name, Source: SourceImport}}, digest, cfg, layers, "unpack", progress)
	if err != nil {
		return api.Image{}, fmt.Errorf("importing %s: %w", name, err)
	}
	return out, nil
}

func pickDockerImage(m tarball.Manifest, name string) (tarball.Descriptor, string, error) {
	var all []string
	for _, d := range m {
		for _, t := range d.RepoTags {
			n, err := NormalizeName(t)
			if err != nil {
				continue
			}
			if name != "" && n == name {
				return d, n, nil
			}
			all = append(all, n)
		}
	}
	switch {
	case len(m) > 1:
		return tarball.Descriptor{}, "", fmt.Errorf("the archive holds %d images (%s); name the one to import: %w", len(m), strings.Join(all, ", "), api.ErrInvalid)
	case name != "":
		return m[0], name, nil
	case len(all) > 0:
		return m[0], all[0], nil
	}
	return tarball.Descriptor{}, "", fmt.Errorf("the image in the archive has no tag; give it a name: %w", api.ErrInvalid)
}

// layoutEntryRe matches the files of an OCI image layout.
var layoutEntryRe = regexp.MustCompile(`^(oci-layout|index\.json|blobs/[a-z0-9]+/[a-zA-Z0-9=_-]+)$`)

// extractLayout extracts the OCI image layout in the tar at archive into
// dir. It writes only the layout's own files (oci-layout, index.json and
// blobs/ALG/HEX, plain files), so nothing in the archive can point outside dir.
func extractLayout(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("importing image: reading the archive: %v: %w", err, api.ErrInvalid)
		}
		name := path.Clean(strings.TrimLeft(hdr.Name, "/"))
		if hdr.Typeflag != tar.TypeReg || !layoutEntryRe.MatchString(name) {
			continue
		}
		dst := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, tr)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
}
