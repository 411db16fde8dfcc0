package server

import (
	"net/http"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/sandbox"
)

func (s *Server) networkRoutes() {
	s.handle("PATCH /v1/sandboxes/{id}/network", s.patchNetwork)
}

// patchNetwork changes a sandbox's egress policy or git credentials.
func (s *Server) patchNetwork(w http.ResponseWriter, r *http.Request) error {
	var req api.NetworkPatch
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	sb, err := s.sandboxes.SetNetwork(r.Context(), callerOf(r.Context()).team, r.PathValue("id"), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sandbox.ToAPI(sb))
	return nil
}
