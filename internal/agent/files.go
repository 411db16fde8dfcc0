package agent

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/warrenhq/warren/api"
)

const (
	maxListDepth    = 32
	defaultFileMode = 0o644
)

// pathParam returns the cleaned absolute path of the request's ?path=.
func pathParam(r *http.Request) (string, error) {
	p := r.URL.Query().Get("path")
	switch {
	case p == "":
		return "", errorf(api.CodeInvalid, "missing path; pass ?path=/absolute/path")
	case !filepath.IsAbs(p):
		return "", errorf(api.CodeInvalid, "path %q is not absolute; pass an absolute path", p)
	case strings.IndexByte(p, 0) >= 0:
		return "", errorf(api.CodeInvalid, "path %q contains a NUL byte", p)
	}
	return filepath.Clean(p), nil
}

// fileError turns an error about path p into an answer.
func fileError(p string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return errorf(api.CodeNotFound, "no such file: %s", p)
	case errors.Is(err, fs.ErrPermission):
		return errorf(api.CodeForbidden, "permission denied: %s", p)
	}
	return fmt.Errorf("%s: %w", p, err)
}

// modeString is the octal permission bits of m, with setuid, setgid and
// sticky: "0644", "4755".
func modeString(m fs.FileMode) string {
	bits := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		bits |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		bits |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		bits |= 0o1000
	}
	return fmt.Sprintf("%04o", bits)
}

// parseMode parses octal permission bits as modeString writes them.
func parseMode(s string) (fs.FileMode, error) {
	bits, err := strconv.ParseUint(s, 8, 32)
	if err != nil || bits > 0o7777 {
		return 0, errorf(api.CodeInvalid, "mode %q is not octal permission bits like 0644", s)
	}
	m := fs.FileMode(bits & 0o777)
	if bits&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if bits&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if bits&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m, nil
}

// entry describes the file at p; fi comes from Lstat, so a symlink is
// reported as one, with its target.
func entry(p string, fi fs.FileInfo) api.FileEntry {
	e := api.FileEntry{
		Name:    filepath.Base(p),
		Path:    p,
		Size:    fi.Size(),
		Mode:    modeString(fi.Mode()),
		ModTime: fi.ModTime().UTC(),
	}
	switch m := fi.Mode(); {
	case m.IsRegular():
		e.Type = "file"
	case m.IsDir():
		e.Type = "dir"
	case m&fs.ModeSymlink != 0:
		e.Type = "symlink"
		e.Target, _ = os.Readlink(p)
	default:
		e.Type = "other"
	}
	return e
}

func (a *Agent) handleFileGet(w http.ResponseWriter, r *http.Request) {
	p, err := pathParam(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	f, err := os.Open(p)
	if err != nil {
		writeErr(w, fileError(p, err))
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		writeErr(w, fileError(p, err))
		return
	}
	switch {
	case fi.IsDir():
		writeErr(w, errorf(api.CodeInvalid, "%s is a directory; use /files/list", p))
		return
	case !fi.Mode().IsRegular():
		writeErr(w, errorf(api.CodeInvalid, "%s is not a regular file", p))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	if size := fi.Size(); size > 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		w.WriteHeader(http.StatusOK)
		_, _ = io.CopyN(w, f, size) // a file that shrank ends the connection early
		return
	}
	// Size 0 may be a file that is empty or one whose size the kernel
	// doesn't know (/proc): send what reading gives.
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, f)
}

func (a *Agent) handleFilePut(w http.ResponseWriter, r *http.Request) {
	p, err := pathParam(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	mode := fs.FileMode(defaultFileMode)
	modeGiven := r.URL.Query().Has("mode")
	if modeGiven {
		if mode, err = parseMode(r.URL.Query().Get("mode")); err != nil {
			writeErr(w, err)
			return
		}
	}
	e, err := writeFile(p, r.Body, mode, modeGiven)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, e)
}

// writeFile writes body to p atomically: into a temporary file in the same
// directory, renamed over p, so a reader sees the old file or the new one.
// Missing parents are created. A symlink at p is followed. Without a given
// mode an existing file keeps its mode. Nothing is fsynced: the sandbox's
// disk is gVisor's overlay, made durable by checkpoints, not by fsync.
func writeFile(p string, body io.Reader, mode fs.FileMode, modeGiven bool) (api.FileEntry, error) {
	target := p
	if fi, err := os.Lstat(p); err == nil {
		if fi.Mode()&fs.ModeSymlink != 0 {
			if t, err := filepath.EvalSymlinks(p); err == nil {
				target = t
				fi, err = os.Stat(t)
				if err != nil {
					return api.FileEntry{}, fileError(p, err)
				}
			}
		}
		switch {
		case fi.IsDir():
			return api.FileEntry{}, errorf(api.CodeInvalid, "%s is a directory; write to a path inside it", p)
		case fi.Mode().IsRegular() && !modeGiven:
			mode = fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
		}
	}
	dir := filepath.Dir(target)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, fs.ErrExist) {
			return api.FileEntry{}, errorf(api.CodeConflict, "cannot create %s: a parent of it is not a directory", p)
		}
		return api.FileEntry{}, fileError(dir, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(target)+".warren-*")
	if err != nil {
		return api.FileEntry{}, fileError(p, err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := io.Copy(tmp, body); err != nil {
		return api.FileEntry{}, fmt.Errorf("writing %s: %w", p, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		return api.FileEntry{}, fmt.Errorf("writing %s: %w", p, err)
	}
	if err := tmp.Close(); err != nil {
		return api.FileEntry{}, fmt.Errorf("writing %s: %w", p, err)
	}
	if err := os.Rename(tmp.Name(), target); err != nil {
		return api.FileEntry{}, fileError(p, err)
	}
	done = true
	fi, err := os.Lstat(target)
	if err != nil {
		return api.FileEntry{}, fileError(p, err)
	}
	e := entry(target, fi)
	e.Name, e.Path = filepath.Base(p), p
	return e, nil
}

func (a *Agent) handleFileDelete(w http.ResponseWriter, r *http.Request) {
	p, err := pathParam(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	recursive := false
	if v := r.URL.Query().Get("recursive"); v != "" {
		if recursive, err = strconv.ParseBool(v); err != nil {
			writeErr(w, errorf(api.CodeInvalid, "recursive=%q is not true or false", v))
			return
		}
	}
	if p == "/" {
		writeErr(w, errorf(api.CodeInvalid, "refusing to delete /"))
		return
	}
	fi, err := os.Lstat(p)
	if err != nil {
		writeErr(w, fileError(p, err))
		return
	}
	if fi.IsDir() && recursive {
		err = os.RemoveAll(p)
	} else {
		err = os.Remove(p)
	}
	switch {
	case errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST):
		writeErr(w, errorf(api.CodeConflict, "directory %s is not empty; pass recursive=true to delete it and everything in it", p))
	case err != nil:
		writeErr(w, fileError(p, err))
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

func (a *Agent) handleFileList(w http.ResponseWriter, r *http.Request) {
	p, err := pathParam(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	depth := 1
	if v := r.URL.Query().Get("depth"); v != "" {
		depth, err = strconv.Atoi(v)
		if err != nil || depth < 1 || depth > maxListDepth {
			writeErr(w, errorf(api.CodeInvalid, "depth=%q must be a whole number from 1 to %d", v, maxListDepth))
			return
		}
	}
	fi, err := os.Stat(p)
	if err != nil {
		writeErr(w, fileError(p, err))
		return
	}
	if !fi.IsDir() {
		writeErr(w, errorf(api.CodeInvalid, "%s is not a directory; use /files/stat", p))
		return
	}
	entries := []api.FileEntry{}
	if err := listDir(p, depth, &entries); err != nil {
		writeErr(w, fileError(p, err))
		return
	}
	slices.SortFunc(entries, func(x, y api.FileEntry) int { return strings.Compare(x.Path, y.Path) })
	writeJSON(w, http.StatusOK, api.FileList{Entries: entries})
}

// listDir appends the entries of dir, and of its subdirectories down to
// depth levels. Symlinks are not followed. Only an error reading dir itself
// is returned; unreadable subdirectories are listed without their entries.
func listDir(dir string, depth int, out *[]api.FileEntry) error {
	des, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, de := range des {
		fi, err := de.Info()
		if err != nil {
			continue // removed since ReadDir
		}
		p := filepath.Join(dir, de.Name())
		*out = append(*out, entry(p, fi))
		if fi.IsDir() && depth > 1 {
			_ = listDir(p, depth-1, out)
		}
	}
	return nil
}

func (a *Agent) handleFileStat(w http.ResponseWriter, r *http.Request) {
	p, err := pathParam(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	fi, err := os.Lstat(p)
	if err != nil {
		writeErr(w, fileError(p, err))
		return
	}
	writeJSON(w, http.StatusOK, entry(p, fi))
}
