// Package snapshot keeps checkpoint images on disk: gVisor's memory and
// process image of a sandbox (which holds its overlay writable layer too),
// with the OCI spec it ran under and a manifest of sizes and checksums.
//
// An image is written under root/.tmp/<id>, every file fsynced and hashed,
// the manifest written last, then the directory renamed to root/<id>. So a
// directory under root/ is always complete, and an interrupted write leaves
// only a temporary directory that Open removes. Images are addressed by id,
// never by path, so the local directory can later give way to an object
// store.
package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/fsutil"
)

// ManifestName is the manifest's file name inside an image directory.
const ManifestName = "manifest.json"

// SpecName is the OCI spec the sandbox ran with, kept beside its image.
const SpecName = "config.json"

// Manifest describes a complete image.
type Manifest struct {
	ID        string    `json:"id"`
	SandboxID string    `json:"sandbox_id"`
	CreatedAt time.Time `json:"created_at"`
	// RunscBuild is the runsc build that wrote the image; only that build
	// can restore it.
	RunscBuild string `json:"runsc_build"`
	// Platform is runsc's platform (systrap, kvm): an image restores only
	// on the platform that wrote it.
	Platform  string `json:"platform"`
	Files     []File `json:"files"`
	SizeBytes int64  `json:"size_bytes"`
}

// File is one file of an image.
type File struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Store keeps images under a root directory.
type Store struct {
	root string
}

var idPattern = regexp.MustCompile(`^[a-z]{2}-[a-z0-9-]{1,64}$`)

// Open opens the store at root, removing what interrupted writes left.
func Open(root string) (*Store, error) {
	if err := os.MkdirAll(filepath.Join(root, ".tmp"), 0o700); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(filepath.Join(root, ".tmp"))
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		os.RemoveAll(filepath.Join(root, ".tmp", e.Name()))
	}
	return &Store{root: root}, nil
}

// Path is the directory of image id (for runsc restore).
func (s *Store) Path(id string) string { return filepath.Join(s.root, id) }

// Exists reports whether a complete image id is there.
func (s *Store) Exists(id string) bool {
	_, err := os.Stat(filepath.Join(s.Path(id), ManifestName))
	return err == nil
}

// IDs lists the complete images.
func (s *Store) IDs() ([]string, error) {
	entries, err := os.ReadDir(s.root)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if e.IsDir() && e.Name() != ".tmp" {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// Create writes image id: write fills the directory it is given (runsc
// checkpoint writes there, and the spec is copied in); then every file is
// fsynced and hashed, the manifest written, and the directory moved into
// place. On any error nothing is left.
func (s *Store) Create(ctx context.Context, id string, m Manifest, write func(dir string) error) (Manifest, error) {
	if !idPattern.MatchString(id) {
		return Manifest{}, fmt.Errorf("image id %q: %w", id, api.ErrInvalid)
	}
	if s.Exists(id) {
		return Manifest{}, fmt.Errorf("image %s already exists: %w", id, api.ErrConflict)
	}
	tmp := filepath.Join(s.root, ".tmp", id)
	if err := os.RemoveAll(tmp); err != nil {
		return Manifest{}, err
	}
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return Manifest{}, err
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	if err := write(tmp); err != nil {
		return Manifest{}, err
	}
	if err := ctx.Err(); err != nil {
		return Manifest{}, err
	}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return Manifest{}, err
	}
	m.ID = id
	m.Files = nil
	m.SizeBytes = 0
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		f, err := hashAndSync(filepath.Join(tmp, e.Name()))
		if err != nil {
			return Manifest{}, fmt.Errorf("image %s: %w", id, err)
		}
		m.Files = append(m.Files, f)
		m.SizeBytes += f.Size
	}
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Name < m.Files[j].Name })
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return Manifest{}, err
	}
	if err := writeSynced(filepath.Join(tmp, ManifestName), b); err != nil {
		return Manifest{}, fmt.Errorf("image %s: writing its manifest: %w", id, err)
	}
	if err := fsutil.SyncDir(tmp); err != nil {
		return Manifest{}, err
	}
	if err := os.Rename(tmp, s.Path(id)); err != nil {
		return Manifest{}, fmt.Errorf("image %s: moving it into place: %w", id, err)
	}
	ok = true
	if err := fsutil.SyncDir(s.root); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// Manifest reads image id's manifest.
func (s *Store) Manifest(id string) (Manifest, error) {
	b, err := os.ReadFile(filepath.Join(s.Path(id), ManifestName))
	if errors.Is(err, os.ErrNotExist) {
		return Manifest{}, fmt.Errorf("image %s: %w", id, api.ErrNotFound)
	}
	if err != nil {
		return Manifest{}, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, fmt.Errorf("image %s: damaged manifest: %w", id, err)
	}
	return m, nil
}

// Check confirms image id can be restored by runscBuild on platform, and
// that its files are all there with their recorded sizes. With full, the
// checksums are verified too (reading the whole image).
func (s *Store) Check(id, runscBuild, platform string, full bool) (Manifest, error) {
	m, err := s.Manifest(id)
	if err != nil {
		return m, err
	}
	if m.RunscBuild != runscBuild || m.Platform != platform {
		return m, fmt.Errorf("image %s was written by runsc %s on %s; this server runs %s on %s, which cannot restore it: %w",
			id, m.RunscBuild, m.Platform, runscBuild, platform, api.ErrConflict)
	}
	for _, f := range m.Files {
		p := filepath.Join(s.Path(id), f.Name)
		fi, err := os.Stat(p)
		if err != nil || fi.Size() != f.Size {
			return m, fmt.Errorf("image %s is damaged: %s is missing or not %d bytes: %w", id, f.Name, f.Size, api.ErrConflict)
		}
		if full {
			got, err := hashFile(p)
			if err != nil {
				return m, err
			}
			if got != f.SHA256 {
				return m, fmt.Errorf("image %s is damaged: %s does not match its checksum: %w", id, f.Name, api.ErrConflict)
			}
		}
	}
	return m, nil
}

// Delete removes image id; a missing image is fine.
func (s *Store) Delete(id string) error {
	// Rename first, so a crash mid-delete never leaves a half image
	// looking complete.
	tmp, err := s.unlink(id)
	if err != nil || tmp == "" {
		return err
	}
	return os.RemoveAll(tmp)
}

// DeleteLater removes image id from the store now and frees its disk in
// the background: for paths that answer a user (a resume drops its pause
// image), where removing a large image's files took ~60 ms per 256 MB. What
// a crash leaves behind is swept from .tmp at the next Open.
func (s *Store) DeleteLater(id string) error {
	tmp, err := s.unlink(id)
	if err != nil || tmp == "" {
		return err
	}
	go os.RemoveAll(tmp)
	return nil
}

// unlink moves image id out of the store, into .tmp, and returns where it
// went ("" when there was no such image).
func (s *Store) unlink(id string) (string, error) {
	if !idPattern.MatchString(id) {
		return "", fmt.Errorf("image id %q: %w", id, api.ErrInvalid)
	}
	tmp := filepath.Join(s.root, ".tmp", id+"-deleting-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	if err := os.Rename(s.Path(id), tmp); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", nil
		}
		return "", err
	}
	return tmp, nil
}

func hashAndSync(path string) (File, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return File{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return File{}, fmt.Errorf("hashing %s: %w", filepath.Base(path), err)
	}
	if err := f.Sync(); err != nil {
		return File{}, fmt.Errorf("syncing %s: %w", filepath.Base(path), err)
	}
	return File{Name: filepath.Base(path), Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

func hashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// CopyFile copies src to dst (used to keep the spec beside an image).
func CopyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o600)
}
