// Package e2b serves the wire protocol of E2B's stock SDKs (npm `e2b` and
// `@e2b/code-interpreter`) on Warren's listener, so programs written for E2B
// run against Warren unchanged: point E2B_API_URL and E2B_SANDBOX_URL at
// `warren server` and set E2B_API_KEY to a Warren API key.
//
// One listener carries three surfaces, told apart by headers:
//
//	E2b-Sandbox-Id + E2b-Sandbox-Port 49983  envd: /health, /files, and the
//	                                         Connect services process.Process
//	                                         and filesystem.Filesystem
//	E2b-Sandbox-Id + E2b-Sandbox-Port 49999  code interpreter: /execute, /contexts
//	X-API-KEY                                control plane: /v2/sandboxes, /sandboxes/...
//
// Everything is done by calling the sandbox's Warren agent (jobs, files,
// code contexts); no E2B code runs. The control plane authenticates with
// the API key; the sandbox surfaces with the envdAccessToken that create
// and connect hand out (see token.go).
package e2b

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/warrenhq/warren/internal/sandbox"
	"github.com/warrenhq/warren/internal/store"
)

// Headers of the E2B protocol.
const (
	headerSandboxID   = "E2b-Sandbox-Id"
	headerSandboxPort = "E2b-Sandbox-Port"
	headerAPIKey      = "X-API-KEY"
	headerAccessToken = "X-Access-Token"
	headerTraffic     = "E2B-Traffic-Access-Token"
)

// Ports the SDKs name in E2b-Sandbox-Port.
const (
	portEnvd = "49983"
	portCode = "49999"
)

// EnvdVersion is the envd version Warren promises the SDK: multipart and
// octet-stream uploads, default-user resolution (see E2B-PROTOCOL.md 3.5).
const EnvdVersion = "0.5.7"

// Keys finds API keys; *store.Store is one.
type Keys interface {
	KeyByHash(ctx context.Context, hash string) (store.Key, error)
	GetKey(ctx context.Context, id string) (store.KeyInfo, error)
}

// Handler serves the E2B protocol.
type Handler struct {
	m    *sandbox.Manager
	keys Keys
	log  *slog.Logger
	mux  *http.ServeMux // control plane

	tokens sync.Map // verified access token -> tokenGrant
	tags   sync.Map // sandbox id + "/" + tag -> pid
	ptys   sync.Map // sandbox id + "/" + pid -> *ptySession

	followers followers // streams following each job (process.go)
	streams   streamSet // open streams by sandbox (streams.go)
	workdirs  sync.Map  // sandbox id -> its working directory (filesystem.go)
}

// New returns the E2B handler.
func New(m *sandbox.Manager, keys Keys, log *slog.Logger) *Handler {
	h := &Handler{m: m, keys: keys, log: log.With("surface", "e2b"), mux: http.NewServeMux()}
	h.controlRoutes()
	m.Observe(h)
	return h
}

// Wants reports whether r is an E2B request: one for a sandbox (it carries
// E2b-Sandbox-Id), or a control-plane call (it carries X-API-KEY and no
// Warren Authorization, on a path outside Warren's /v1).
func Wants(r *http.Request) bool {
	if r.Header.Get(headerSandboxID) != "" {
		return true
	}
	return r.Header.Get(headerAPIKey) != "" && r.Header.Get("Authorization") == "" &&
		!strings.HasPrefix(r.URL.Path, "/v1/") && r.URL.Path != "/healthz"
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if id := r.Header.Get(headerSandboxID); id != "" {
		switch r.Header.Get(headerSandboxPort) {
		case portCode:
			h.serveCode(w, r, id)
		case portEnvd, "":
			h.serveEnvd(w, r, id)
		default:
			http.Error(w, "Warren's E2B gateway serves ports 49983 (envd) and 49999 (code interpreter) only; "+
				"other ports are reached through Warren's port proxy", http.StatusBadGateway)
		}
		return
	}
	h.mux.ServeHTTP(w, r)
}
