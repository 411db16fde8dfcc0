package server

import (
	"context"
	"net/http"
	"sync"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/store"
)

func (s *Server) templateRoutes() {
	s.handle("POST /v1/templates", s.buildTemplate)
	s.handle("GET /v1/templates", s.listTemplates)
	s.handle("GET /v1/templates/{name}", s.getTemplate)
	s.handle("DELETE /v1/templates/{name}", s.deleteTemplate)
}

func (s *Server) buildTemplate(w http.ResponseWriter, r *http.Request) error {
	var req api.CreateTemplateRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	team := callerOf(r.Context()).team
	if !wantsNDJSON(r) {
		t, err := s.sandboxes.BuildTemplate(r.Context(), team, req, func(api.TemplateEvent) {})
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, s.templateToAPI(r, t, false))
		return nil
	}
	// Stream the setup's output as it comes; the last line is the
	// template or the error.
	var mu sync.Mutex
	started := false
	rc := http.NewResponseController(w)
	send := func(ev api.TemplateEvent) {
		mu.Lock()
		defer mu.Unlock()
		if !started {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
			started = true
		}
		writeLine(w, ev)
		rc.Flush()
	}
	t, err := s.sandboxes.BuildTemplate(context.WithoutCancel(r.Context()), team, req, send)
	if err != nil {
		if !started {
			return err
		}
		send(api.TemplateEvent{Error: err.Error()})
		return nil
	}
	at := s.templateToAPI(r, t, false)
	send(api.TemplateEvent{Done: &at})
	return nil
}

func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) error {
	ts, err := s.sandboxes.ListTemplates(r.Context(), callerOf(r.Context()).team)
	if err != nil {
		return err
	}
	out := api.TemplateList{Templates: make([]api.Template, 0, len(ts))}
	for _, t := range ts {
		out.Templates = append(out.Templates, s.templateToAPI(r, t, false))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request) error {
	t, err := s.sandboxes.GetTemplate(r.Context(), callerOf(r.Context()).team, r.PathValue("name"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.templateToAPI(r, t, true))
	return nil
}

func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) error {
	if err := s.sandboxes.DeleteTemplate(r.Context(), callerOf(r.Context()).team, r.PathValue("name")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) templateToAPI(r *http.Request, t store.Template, withLog bool) api.Template {
	out := api.Template{Name: t.Name, Image: t.Image, Setup: t.Setup, Env: t.Env, CPUs: t.CPUs,
		MemoryMB: t.MemoryMB, DiskMB: t.DiskMB, SnapshotID: t.SnapshotID, PoolSize: t.PoolSize,
		CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt}
	if out.Setup == nil {
		out.Setup = []string{}
	}
	if withLog {
		out.BuildLog = t.BuildLog
	}
	out.PoolReady = s.sandboxes.PoolReady(r.Context(), t)
	return out
}
