package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"syscall"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/archive"
)

// GET /files/archive?path=/abs answers a tar of the directory (see package
// archive for its shape); an error after the first bytes cuts the answer
// short, so a client never takes a partial tree for a whole one.
func (a *Agent) handleArchiveGet(w http.ResponseWriter, r *http.Request) {
	p, err := pathParam(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	fi, err := os.Stat(p)
	if err != nil {
		writeErr(w, fileError(p, err))
		return
	}
	if !fi.IsDir() {
		writeErr(w, errorf(api.CodeInvalid, "%s is not a directory; read a file with GET /files", p))
		return
	}
	w.Header().Set("Content-Type", "application/x-tar")
	w.WriteHeader(http.StatusOK)
	if err := archive.Write(w, p); err != nil {
		if r.Context().Err() == nil {
			a.log.Warn("writing archive", "path", p, "err", err)
		}
		panic(http.ErrAbortHandler)
	}
}

// PUT /files/archive?path=/abs extracts the tar in the body into the
// directory, creating it (and its parents) when missing.
func (a *Agent) handleArchivePut(w http.ResponseWriter, r *http.Request) {
	p, err := pathParam(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	if err := os.MkdirAll(p, 0o755); err != nil {
		if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, fs.ErrExist) {
			writeErr(w, errorf(api.CodeConflict, "%s is not a directory; extract into a directory", p))
			return
		}
		writeErr(w, fileError(p, err))
		return
	}
	st, err := archive.Extract(r.Body, p)
	switch {
	case errors.Is(err, archive.ErrInvalid):
		writeErr(w, errorf(api.CodeInvalid, "extracting into %s: %v", p, err))
		return
	case err != nil:
		writeErr(w, fmt.Errorf("extracting into %s: %w", p, err))
		return
	}
	writeJSON(w, http.StatusOK, api.ArchiveResult{Path: p, Entries: st.Entries, Bytes: st.Bytes})
}
