package e2b

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/warrenhq/warren/api"
)

// filesystem.Filesystem is served with the agent's file calls, and exec
// for what they lack (mkdir, mv).

// entryInfo is an EntryInfo in proto3 JSON: int64 as a string, enums by
// name, the timestamp in RFC 3339.
type entryInfo struct {
	Name          string    `json:"name"`
	Type          string    `json:"type"`
	Path          string    `json:"path"`
	Size          string    `json:"size"`
	Mode          uint32    `json:"mode"`
	Permissions   string    `json:"permissions"`
	Owner         string    `json:"owner"`
	Group         string    `json:"group"`
	ModifiedTime  time.Time `json:"modifiedTime"`
	SymlinkTarget *string   `json:"symlinkTarget,omitempty"`
}

func toEntry(e api.FileEntry) entryInfo {
	perm, _ := strconv.ParseUint(e.Mode, 8, 32)
	mode := fs.FileMode(perm) & fs.ModePerm
	typ := "FILE_TYPE_UNSPECIFIED"
	switch e.Type {
	case "file":
		typ = "FILE_TYPE_FILE"
	case "dir":
		typ = "FILE_TYPE_DIRECTORY"
		mode |= fs.ModeDir
	case "symlink":
		typ = "FILE_TYPE_SYMLINK"
		mode |= fs.ModeSymlink
	}
	out := entryInfo{Name: e.Name, Type: typ, Path: e.Path, Size: strconv.FormatInt(e.Size, 10),
		Mode: uint32(perm), Permissions: mode.String(), ModifiedTime: e.ModTime.UTC()}
	if e.Target != "" {
		t := e.Target
		out.SymlinkTarget = &t
	}
	return out
}

type entryMessage struct {
	Entry entryInfo `json:"entry"`
}

func (h *Handler) serveFilesystem(w http.ResponseWriter, r *http.Request, c *sandboxCall, method string) {
	var err error
	switch method {
	case "Stat":
		err = h.stat(w, r, c)
	case "ListDir":
		err = h.listDir(w, r, c)
	case "MakeDir":
		err = h.makeDir(w, r, c)
	case "Move":
		err = h.move(w, r, c)
	case "Remove":
		err = h.remove(w, r, c)
	case "WatchDir":
		h.watchDir(w, r, c)
		return
	default:
		err = errUnimplemented("filesystem.Filesystem/%s is not served by Warren", method)
	}
	if err != nil {
		writeUnaryError(w, err)
	}
}

type pathRequest struct {
	Path  string `json:"path"`
	Depth uint32 `json:"depth"`
}

// readPath reads a request naming one path and resolves the path against
// the sandbox's working directory.
func (h *Handler) readPath(r *http.Request, c *sandboxCall) (pathRequest, error) {
	var req pathRequest
	if err := readUnary(r, &req); err != nil {
		return req, err
	}
	var err error
	req.Path, err = h.abs(r.Context(), c, req.Path)
	return req, err
}

// writeEntry answers with the entry of path p.
func writeEntry(w http.ResponseWriter, r *http.Request, c *sandboxCall, p string) error {
	e, err := c.agent.Stat(r.Context(), p)
	if err != nil {
		return err
	}
	writeUnary(w, entryMessage{Entry: toEntry(e)})
	return nil
}

func (h *Handler) stat(w http.ResponseWriter, r *http.Request, c *sandboxCall) error {
	req, err := h.readPath(r, c)
	if err != nil {
		return err
	}
	return writeEntry(w, r, c, req.Path)
}

func (h *Handler) listDir(w http.ResponseWriter, r *http.Request, c *sandboxCall) error {
	req, err := h.readPath(r, c)
	if err != nil {
		return err
	}
	depth := int(req.Depth)
	if depth < 1 {
		depth = 1
	}
	entries, err := c.agent.List(r.Context(), req.Path, depth)
	if err != nil {
		return err
	}
	out := struct {
		Entries []entryInfo `json:"entries"`
	}{Entries: make([]entryInfo, 0, len(entries))}
	for _, e := range entries {
		out.Entries = append(out.Entries, toEntry(e))
	}
	writeUnary(w, out)
	return nil
}

// run runs argv in the sandbox and turns a failure into an error carrying
// its stderr.
func run(ctx context.Context, c *sandboxCall, argv ...string) error {
	res, err := c.agent.Exec(ctx, api.ExecRequest{Cmd: argv, TimeoutS: 60})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("%s: %s: %w", argv[0], strings.TrimSpace(res.Stderr), api.ErrInvalid)
	}
	return nil
}

func (h *Handler) makeDir(w http.ResponseWriter, r *http.Request, c *sandboxCall) error {
	req, err := h.readPath(r, c)
	if err != nil {
		return err
	}
	if _, err := c.agent.Stat(r.Context(), req.Path); err == nil {
		return &connectError{Code: "already_exists", Message: fmt.Sprintf("%s already exists", req.Path)}
	} else if !errors.Is(err, api.ErrNotFound) {
		return err
	}
	if err := run(r.Context(), c, "mkdir", "-p", "--", req.Path); err != nil {
		return err
	}
	return writeEntry(w, r, c, req.Path)
}

func (h *Handler) move(w http.ResponseWriter, r *http.Request, c *sandboxCall) error {
	var req struct {
		Source      string `json:"source"`
		Destination string `json:"destination"`
	}
	if err := readUnary(r, &req); err != nil {
		return err
	}
	var err error
	if req.Source, err = h.abs(r.Context(), c, req.Source); err != nil {
		return err
	}
	if req.Destination, err = h.abs(r.Context(), c, req.Destination); err != nil {
		return err
	}
	if _, err := c.agent.Stat(r.Context(), req.Source); err != nil {
		return err
	}
	if err := run(r.Context(), c, "mkdir", "-p", "--", path.Dir(req.Destination)); err != nil {
		return err
	}
	if err := run(r.Context(), c, "mv", "-T", "--", req.Source, req.Destination); err != nil {
		return err
	}
	return writeEntry(w, r, c, req.Destination)
}

func (h *Handler) remove(w http.ResponseWriter, r *http.Request, c *sandboxCall) error {
	req, err := h.readPath(r, c)
	if err != nil {
		return err
	}
	if err := c.agent.Remove(r.Context(), req.Path, true); err != nil {
		return err
	}
	writeUnary(w, struct{}{})
	return nil
}

// abs resolves a relative path against the sandbox's working directory
// (where commands start), as envd resolves one against the user's home.
func (h *Handler) abs(ctx context.Context, c *sandboxCall, p string) (string, error) {
	if p == "" || path.IsAbs(p) {
		return p, nil
	}
	if dir, ok := h.workdirs.Load(c.id); ok {
		return path.Join(dir.(string), p), nil
	}
	res, err := c.agent.Exec(ctx, api.ExecRequest{Cmd: []string{"pwd"}, TimeoutS: 10})
	if err != nil {
		return "", err
	}
	dir := strings.TrimSpace(res.Stdout)
	if res.ExitCode != 0 || !path.IsAbs(dir) {
		return "", fmt.Errorf("finding the working directory to resolve %q against: %s: %w", p, strings.TrimSpace(res.Stderr), api.ErrUnavailable)
	}
	h.workdirs.Store(c.id, dir)
	return path.Join(dir, p), nil
}
