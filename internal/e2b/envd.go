package e2b

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strings"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/agent"
)

// sandboxCall is a request to one sandbox, authenticated.
type sandboxCall struct {
	id    string
	team  string
	agent *agent.Client
}

// serveEnvd serves what envd serves on port 49983.
func (h *Handler) serveEnvd(w http.ResponseWriter, r *http.Request, id string) {
	rpc := strings.HasPrefix(r.URL.Path, "/process.Process/") || strings.HasPrefix(r.URL.Path, "/filesystem.Filesystem/")
	fail := func(err error) {
		switch {
		case !rpc:
			h.writeError(w, r, err)
		case isStreaming(r.URL.Path):
			streamError(w, err)
		default:
			writeUnaryError(w, err)
		}
	}
	team, err := h.sandboxCaller(r.Context(), r, id)
	if err != nil {
		fail(err)
		return
	}
	if r.URL.Path == "/health" {
		h.health(w, r, team, id)
		return
	}
	c, err := h.m.Agent(r.Context(), team, id)
	if err != nil {
		if errors.Is(err, api.ErrConflict) && !rpc {
			// What E2B's proxy answers for a sandbox that is not running;
			// the SDK reads 502 as "timed out".
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		if errors.Is(err, api.ErrConflict) {
			err = &connectError{Code: "unavailable", Message: err.Error()}
		}
		fail(err)
		return
	}
	defer h.m.Begin(id)()
	if isStreaming(r.URL.Path) {
		var done func()
		r, done = h.trackStream(r, id)
		defer done()
	}
	call := &sandboxCall{id: id, team: team, agent: c}
	switch {
	case r.URL.Path == "/files" && r.Method == http.MethodGet:
		err = h.readFile(w, r, call)
	case r.URL.Path == "/files" && r.Method == http.MethodPost:
		err = h.writeFiles(w, r, call)
	case r.Method != http.MethodPost && rpc:
		err = &connectError{Code: "unimplemented", Message: "Connect calls are POSTs"}
	case strings.HasPrefix(r.URL.Path, "/process.Process/"):
		h.serveProcess(w, r, call, strings.TrimPrefix(r.URL.Path, "/process.Process/"))
		return
	case strings.HasPrefix(r.URL.Path, "/filesystem.Filesystem/"):
		h.serveFilesystem(w, r, call, strings.TrimPrefix(r.URL.Path, "/filesystem.Filesystem/"))
		return
	default:
		err = fmt.Errorf("Warren's envd does not serve %s %s: %w", r.Method, r.URL.Path, api.ErrNotFound)
	}
	if err != nil {
		fail(err)
	}
}

func isStreaming(p string) bool {
	switch p {
	case "/process.Process/Start", "/process.Process/Connect", "/filesystem.Filesystem/WatchDir":
		return true
	}
	return false
}

// health is 204 while the sandbox runs and its agent answers, 502
// otherwise (paused, gone).
func (h *Handler) health(w http.ResponseWriter, r *http.Request, team, id string) {
	c, err := h.m.Agent(r.Context(), team, id)
	if err == nil {
		_, err = c.Health(r.Context())
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// entryJSON is an item of POST /files' answer.
type entryJSON struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

func (h *Handler) readFile(w http.ResponseWriter, r *http.Request, c *sandboxCall) error {
	p, err := h.abs(r.Context(), c, r.URL.Query().Get("path"))
	if err != nil {
		return err
	}
	if p == "" {
		return fmt.Errorf("path is required: %w", api.ErrInvalid)
	}
	rc, err := c.agent.ReadFile(r.Context(), p)
	if err != nil {
		return err
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, rc)
	return nil
}

// writeFiles serves POST /files: multipart (a part named "file" per file,
// its filename the destination unless path is set) or a raw body for path.
func (h *Handler) writeFiles(w http.ResponseWriter, r *http.Request, c *sandboxCall) error {
	p, err := h.abs(r.Context(), c, r.URL.Query().Get("path"))
	if err != nil {
		return err
	}
	var body io.Reader = r.Body
	if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
		gz, err := gzip.NewReader(r.Body)
		if err != nil {
			return fmt.Errorf("body is not gzip: %v: %w", err, api.ErrInvalid)
		}
		defer gz.Close()
		body = gz
	}
	out := []entryJSON{}
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "multipart/form-data" {
		if p == "" {
			return fmt.Errorf("path is required for a raw upload: %w", api.ErrInvalid)
		}
		e, err := c.agent.WriteFile(r.Context(), p, body, 0)
		if err != nil {
			return err
		}
		out = append(out, entryJSON{Name: e.Name, Type: "file", Path: e.Path})
		writeJSON(w, http.StatusOK, out)
		return nil
	}
	mr := multipart.NewReader(body, params["boundary"])
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("reading the multipart body: %v: %w", err, api.ErrInvalid)
		}
		if part.FormName() != "file" {
			part.Close()
			continue
		}
		dest := p
		if dest == "" {
			// Not part.FileName(): it drops the directories.
			_, dp, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
			dest = dp["filename"]
		}
		if dest == "" {
			return fmt.Errorf("a file part has no filename and the call no path: %w", api.ErrInvalid)
		}
		if dest, err = h.abs(r.Context(), c, dest); err != nil {
			return err
		}
		e, err := c.agent.WriteFile(r.Context(), dest, part, 0)
		part.Close()
		if err != nil {
			return err
		}
		name := e.Name
		if name == "" {
			name = path.Base(dest)
		}
		out = append(out, entryJSON{Name: name, Type: "file", Path: orStr(e.Path, dest)})
	}
	if len(out) == 0 {
		return fmt.Errorf("the multipart body has no part named file: %w", api.ErrInvalid)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func orStr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
