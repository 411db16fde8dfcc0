package server

import (
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/metrics"
)

func (s *Server) metricsRoutes() {
	s.mux.HandleFunc("GET /metrics", s.serveMetrics)
	s.handle("GET /v1/sandboxes/{id}/metrics", s.sandboxMetrics)
}

// serveMetrics serves the Prometheus metrics: host-wide figures, so only
// to the admin key unless the server is configured with public metrics.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if s.acct.Metrics == nil {
		writeError(w, r, s.log, fmt.Errorf("metrics are not set up on this server: %w", api.ErrUnavailable))
		return
	}
	if !s.acct.PublicMetrics {
		c, err := s.authenticate(r)
		if err == nil && !c.admin {
			err = fmt.Errorf("metrics are host-wide and need the admin key (or metrics_public in the server's config): %w", api.ErrForbidden)
		}
		if err != nil {
			writeError(w, r, s.log, err)
			return
		}
	}
	s.acct.Metrics.Handler().ServeHTTP(w, r)
}

// sandboxMetrics answers what a sandbox's current runtime instance uses,
// from its cgroup. A sandbox with no processes (stored, error) uses
// nothing.
func (s *Server) sandboxMetrics(w http.ResponseWriter, r *http.Request) error {
	sb, err := s.sandboxes.Get(r.Context(), callerOf(r.Context()).team, r.PathValue("id"))
	if err != nil {
		return err
	}
	out := api.SandboxMetrics{SandboxID: sb.ID, State: sb.State, CPUs: sb.CPUs, At: time.Now().UTC(),
		MemoryLimitBytes: sb.MemoryMB << 20}
	if sb.RuntimeID != "" && !sb.Stored && (sb.State == api.StateRunning || sb.State == api.StatePaused) {
		parent := s.acct.CgroupParent
		if parent == "" {
			parent = "/warren"
		}
		st, err := metrics.ReadCgroup(filepath.Join(parent, sb.RuntimeID))
		switch {
		case err == nil:
			out.CPUSeconds, out.MemoryBytes = st.CPUSeconds, st.MemoryBytes
			if st.MemoryLimitBytes > 0 {
				out.MemoryLimitBytes = st.MemoryLimitBytes
			}
		case !errors.Is(err, api.ErrNotFound):
			return err
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
