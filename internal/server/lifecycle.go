package server

import (
	"fmt"
	"net/http"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/sandbox"
	"github.com/warrenhq/warren/internal/store"
)

func (s *Server) lifecycleRoutes() {
	s.handle("POST /v1/sandboxes/{id}/pause", s.pauseSandbox)
	s.handle("POST /v1/sandboxes/{id}/resume", s.resumeSandbox)
	s.handle("POST /v1/sandboxes/{id}/snapshots", s.snapshotSandbox)
	s.handle("POST /v1/sandboxes/{id}/revert", s.revertSandbox)
	s.handle("POST /v1/sandboxes/{id}/fork", s.forkSandbox)
	s.handle("GET /v1/snapshots", s.listSnapshots)
	s.handle("GET /v1/snapshots/{id}", s.getSnapshot)
	s.handle("DELETE /v1/snapshots/{id}", s.deleteSnapshot)
	s.handle("POST /v1/snapshots/{id}/fork", s.forkSnapshot)
}

func (s *Server) pauseSandbox(w http.ResponseWriter, r *http.Request) error {
	sb, err := s.sandboxes.Pause(r.Context(), callerOf(r.Context()).team, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sandbox.ToAPI(sb))
	return nil
}

func (s *Server) resumeSandbox(w http.ResponseWriter, r *http.Request) error {
	sb, err := s.sandboxes.Resume(r.Context(), callerOf(r.Context()).team, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sandbox.ToAPI(sb))
	return nil
}

func (s *Server) snapshotSandbox(w http.ResponseWriter, r *http.Request) error {
	var req api.SnapshotRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	sn, err := s.sandboxes.Snapshot(r.Context(), callerOf(r.Context()).team, r.PathValue("id"), req.Name, "manual")
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, snapshotToAPI(sn))
	return nil
}

func (s *Server) revertSandbox(w http.ResponseWriter, r *http.Request) error {
	var req api.RevertRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	sb, err := s.sandboxes.Revert(r.Context(), callerOf(r.Context()).team, r.PathValue("id"), req.Snapshot)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sandbox.ToAPI(sb))
	return nil
}

func decodeFork(r *http.Request) (int, error) {
	var req api.ForkRequest
	if err := decodeJSON(r, &req); err != nil {
		return 0, err
	}
	if req.Count == 0 {
		return 0, fmt.Errorf("count is required, like {\"count\": 3}: %w", api.ErrInvalid)
	}
	return req.Count, nil
}

func writeSandboxes(w http.ResponseWriter, status int, sbs []store.Sandbox) {
	out := api.SandboxList{Sandboxes: make([]api.Sandbox, 0, len(sbs))}
	for _, sb := range sbs {
		out.Sandboxes = append(out.Sandboxes, sandbox.ToAPI(sb))
	}
	writeJSON(w, status, out)
}

func (s *Server) forkSandbox(w http.ResponseWriter, r *http.Request) error {
	n, err := decodeFork(r)
	if err != nil {
		return err
	}
	sbs, err := s.sandboxes.ForkSandbox(r.Context(), callerOf(r.Context()).team, r.PathValue("id"), n)
	if err != nil {
		return err
	}
	writeSandboxes(w, http.StatusCreated, sbs)
	return nil
}

func (s *Server) forkSnapshot(w http.ResponseWriter, r *http.Request) error {
	n, err := decodeFork(r)
	if err != nil {
		return err
	}
	sbs, err := s.sandboxes.Fork(r.Context(), callerOf(r.Context()).team, r.PathValue("id"), n)
	if err != nil {
		return err
	}
	writeSandboxes(w, http.StatusCreated, sbs)
	return nil
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) error {
	f := store.SnapshotFilter{Team: callerOf(r.Context()).team}
	for k, vs := range r.URL.Query() {
		switch k {
		case "sandbox":
			f.SandboxID = vs[0]
		case "kind":
			f.Kind = vs[0]
		default:
			return fmt.Errorf("unknown query parameter %q: filter with sandbox=ID or kind=manual|checkpoint|template: %w", k, api.ErrInvalid)
		}
	}
	sns, err := s.sandboxes.ListSnapshots(r.Context(), f)
	if err != nil {
		return err
	}
	out := api.SnapshotList{Snapshots: make([]api.Snapshot, 0, len(sns))}
	for _, sn := range sns {
		out.Snapshots = append(out.Snapshots, snapshotToAPI(sn))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) error {
	sn, err := s.sandboxes.GetSnapshot(r.Context(), callerOf(r.Context()).team, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, snapshotToAPI(sn))
	return nil
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) error {
	if err := s.sandboxes.DeleteSnapshot(r.Context(), callerOf(r.Context()).team, r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func snapshotToAPI(sn store.Snapshot) api.Snapshot {
	return api.Snapshot{ID: sn.ID, Name: sn.Name, SandboxID: sn.SandboxID, ParentID: sn.ParentID, Kind: sn.Kind,
		CreatedAt: sn.CreatedAt, SizeBytes: sn.SizeBytes, Image: sn.Image}
}
