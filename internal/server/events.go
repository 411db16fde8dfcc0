package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/events"
)

func (s *Server) eventRoutes() {
	s.handle("GET /v1/events", s.streamEvents)
	s.handle("POST /v1/webhooks", s.createWebhook)
	s.handle("GET /v1/webhooks", s.listWebhooks)
	s.handle("DELETE /v1/webhooks/{id}", s.deleteWebhook)
}

func (s *Server) hub() (*events.Hub, error) {
	if s.acct.Events == nil {
		return nil, fmt.Errorf("events are not set up on this server: %w", api.ErrUnavailable)
	}
	return s.acct.Events, nil
}

// streamEvents streams the caller's team's events as Server-Sent Events:
// each is "id: N", "event: KIND", "data: JSON". It starts after the id in
// the Last-Event-ID header (or ?after=N), else with what happens from now.
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request) error {
	h, err := s.hub()
	if err != nil {
		return err
	}
	after := int64(-1)
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		if after, err = strconv.ParseInt(v, 10, 64); err != nil || after < 0 {
			return fmt.Errorf("Last-Event-ID %q: want the id of an event: %w", v, api.ErrInvalid)
		}
	}
	for k, vs := range r.URL.Query() {
		if k != "after" {
			return fmt.Errorf("unknown query parameter %q: resume with after=ID or the Last-Event-ID header: %w", k, api.ErrInvalid)
		}
		if after, err = strconv.ParseInt(vs[0], 10, 64); err != nil || after < 0 {
			return fmt.Errorf("after %q: want the id of an event (0 for all that are kept): %w", vs[0], api.ErrInvalid)
		}
	}
	if after < 0 {
		if after, err = s.store.LastEventID(r.Context()); err != nil {
			return err
		}
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// An id without data sets the stream's position (per the SSE spec,
	// it dispatches nothing), so a client that reconnects before any
	// event came resumes from here, not from its own "now".
	fmt.Fprintf(w, "retry: 2000\nid: %d\n\n", after)
	rc.Flush()
	team := callerOf(r.Context()).team
	err = h.Subscribe(r.Context(), team, after, func(ev api.Event) error {
		data, _ := json.Marshal(ev)
		if _, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", ev.ID, ev.Kind, data); err != nil {
			return err
		}
		return rc.Flush()
	}, func() error {
		if _, err := fmt.Fprint(w, ": ping\n\n"); err != nil {
			return err
		}
		return rc.Flush()
	})
	if err != nil && r.Context().Err() == nil {
		s.log.Warn("event stream ended", "err", err)
	}
	return nil
}

func (s *Server) createWebhook(w http.ResponseWriter, r *http.Request) error {
	h, err := s.hub()
	if err != nil {
		return err
	}
	var req api.CreateWebhookRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	wh, err := h.CreateWebhook(r.Context(), callerOf(r.Context()).team, req.URL)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, wh)
	return nil
}

func (s *Server) listWebhooks(w http.ResponseWriter, r *http.Request) error {
	h, err := s.hub()
	if err != nil {
		return err
	}
	ws, err := h.ListWebhooks(r.Context(), callerOf(r.Context()).team)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.WebhookList{Webhooks: ws})
	return nil
}

func (s *Server) deleteWebhook(w http.ResponseWriter, r *http.Request) error {
	h, err := s.hub()
	if err != nil {
		return err
	}
	if err := h.DeleteWebhook(r.Context(), callerOf(r.Context()).team, r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
