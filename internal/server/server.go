// Package server serves Warren's HTTP API (api/openapi.yaml). Handlers are
// one file per resource; errors.go maps sentinel errors to status codes.
package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/e2b"
	"github.com/warrenhq/warren/internal/image"
	"github.com/warrenhq/warren/internal/sandbox"
	"github.com/warrenhq/warren/internal/store"
)

// Builder builds the built-in image, reporting progress.
type Builder func(ctx context.Context, progress func(api.Progress)) (api.Image, error)

// Server is the HTTP API.
type Server struct {
	sandboxes *sandbox.Manager
	images    *image.Store
	store     *store.Store
	build     Builder
	log       *slog.Logger
	version   string
	runsc     string
	mux       *http.ServeMux
	netw      *networking // volumes and credentials (volumes.go)
	acct      Accounts
	e2b       *e2b.Handler // E2B's SDKs (internal/e2b)
}

// New returns the API server.
func New(m *sandbox.Manager, images *image.Store, st *store.Store, build Builder, log *slog.Logger, version, runscBuild string) *Server {
	s := &Server{sandboxes: m, images: images, store: st, build: build, log: log,
		version: version, runsc: runscBuild, mux: http.NewServeMux(), e2b: e2b.New(m, st, log)}
	s.routes()
	return s
}

func (s *Server) routes() {
	s.mux.HandleFunc("GET /healthz", s.handleHealth)

	s.handle("POST /v1/sandboxes", s.createSandbox)
	s.handle("GET /v1/sandboxes", s.listSandboxes)
	s.handle("GET /v1/sandboxes/{id}", s.getSandbox)
	s.handle("DELETE /v1/sandboxes/{id}", s.deleteSandbox)
	s.handle("POST /v1/sandboxes/{id}/exec", s.exec)
	s.handle("GET /v1/sandboxes/{id}/files", s.files)
	s.handle("PUT /v1/sandboxes/{id}/files", s.files)
	s.handle("DELETE /v1/sandboxes/{id}/files", s.files)
	s.handle("GET /v1/sandboxes/{id}/files/list", s.files)
	s.handle("GET /v1/sandboxes/{id}/files/stat", s.files)

	s.lifecycleRoutes()
	s.templateRoutes()
	s.insideRoutes()

	s.handle("GET /v1/images", s.listImages)
	s.handle("POST /v1/images/pull", s.pullImage)
	s.handle("POST /v1/images/import", s.importImage)
	s.handle("POST /v1/images/build", s.buildImage)
	s.handle("DELETE /v1/images/{name...}", s.deleteImage)

	s.keyRoutes()
	s.usageRoutes()
	s.eventRoutes()
	s.metricsRoutes()

	s.volumeRoutes()
	s.networkRoutes()
	s.portRoutes()
	s.credentialRoutes()

	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, s.log, fmt.Errorf("no such endpoint: %s %s; see api/openapi.yaml: %w", r.Method, r.URL.Path, api.ErrNotFound))
	})
}

// ServeHTTP implements http.Handler. Requests of E2B's SDKs go to the E2B
// facade (internal/e2b), the rest to Warren's API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if e2b.Wants(r) {
		s.e2b.ServeHTTP(w, r)
		return
	}
	s.mux.ServeHTTP(w, r)
}

type ctxKey struct{}

// caller is who made a request.
type caller struct {
	team  string
	admin bool
}

func callerOf(ctx context.Context) caller {
	c, _ := ctx.Value(ctxKey{}).(caller)
	return c
}

// handlerFunc is a handler that returns its error instead of writing it.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// handle registers h behind authentication and error mapping.
func (s *Server) handle(pattern string, h handlerFunc) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		c, err := s.authenticate(r)
		if err != nil {
			writeError(w, r, s.log, err)
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, c))
		if err := h(w, r); err != nil {
			writeError(w, r, s.log, err)
		}
	})
}

// HashKey is how API keys are stored: keys are 32 random bytes, so a plain
// SHA-256 is enough.
func HashKey(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

func (s *Server) authenticate(r *http.Request) (caller, error) {
	auth := r.Header.Get("Authorization")
	key, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok || key == "" {
		return caller{}, fmt.Errorf("missing API key: send Authorization: Bearer <key> (the admin key is in the state directory's admin.key): %w", api.ErrUnauthorized)
	}
	k, err := s.store.KeyByHash(r.Context(), HashKey(strings.TrimSpace(key)))
	if err != nil {
		return caller{}, fmt.Errorf("API key not recognised or revoked: %w", api.ErrUnauthorized)
	}
	return caller{team: k.TeamID, admin: k.Admin}, nil
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, api.Health{Status: "ok", Version: s.version, Runsc: s.runsc})
}

// wantsNDJSON reports whether the client asked for a stream of JSON lines.
func wantsNDJSON(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "application/x-ndjson")
}

// progressStream writes api.Progress lines to an NDJSON response.
type progressStream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	last    time.Time
	started bool
}

func newProgressStream(w http.ResponseWriter) *progressStream {
	return &progressStream{w: w, rc: http.NewResponseController(w)}
}

func (p *progressStream) send(ev api.Progress) {
	if !p.started {
		p.w.Header().Set("Content-Type", "application/x-ndjson")
		p.w.WriteHeader(http.StatusOK)
		p.started = true
	}
	// Byte counters can fire thousands of times a second; a line every
	// 100 ms is plenty for a progress bar.
	final := ev.Done != nil || ev.Error != ""
	if !final && ev.Message == "" && time.Since(p.last) < 100*time.Millisecond {
		return
	}
	p.last = time.Now()
	writeLine(p.w, ev)
	p.rc.Flush()
}
