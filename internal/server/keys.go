package server

import (
	"fmt"
	"net/http"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/accounts"
	"github.com/warrenhq/warren/internal/events"
	"github.com/warrenhq/warren/internal/metrics"
	"github.com/warrenhq/warren/internal/usage"
)

// Accounts are what serves teams, keys, quotas, usage, events and
// metrics. A server without them answers those calls unavailable.
type Accounts struct {
	Accounts *accounts.Accounts
	Meter    *usage.Meter
	Events   *events.Hub
	Metrics  *metrics.Metrics
	// CgroupParent is the cgroup sandboxes' runtime instances sit under
	// ("/warren").
	CgroupParent string
	// PublicMetrics serves GET /metrics without a key; otherwise it
	// needs the admin key.
	PublicMetrics bool
}

// SetAccounts gives the server what serves accounts; call it before
// serving.
func (s *Server) SetAccounts(a Accounts) { s.acct = a }

func (s *Server) keyRoutes() {
	s.handle("POST /v1/keys", s.createKey)
	s.handle("GET /v1/keys", s.listKeys)
	s.handle("DELETE /v1/keys/{id}", s.revokeKey)
	s.handle("GET /v1/teams", s.listTeams)
	s.handle("GET /v1/teams/{team}/quota", s.getQuota)
	s.handle("PUT /v1/teams/{team}/quota", s.setQuota)
	s.handle("GET /v1/quota", s.getOwnQuota)
}

func (s *Server) accounts() (*accounts.Accounts, error) {
	if s.acct.Accounts == nil {
		return nil, fmt.Errorf("accounts are not set up on this server: %w", api.ErrUnavailable)
	}
	return s.acct.Accounts, nil
}

func requireAdminKey(r *http.Request, what string) error {
	if !callerOf(r.Context()).admin {
		return fmt.Errorf("%s needs the admin key (the server's state directory's admin.key): %w", what, api.ErrForbidden)
	}
	return nil
}

func (s *Server) createKey(w http.ResponseWriter, r *http.Request) error {
	if err := requireAdminKey(r, "creating keys"); err != nil {
		return err
	}
	a, err := s.accounts()
	if err != nil {
		return err
	}
	var req api.CreateKeyRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if req.Team == "" {
		return fmt.Errorf("team is required, like {\"team\": \"acme\"}: %w", api.ErrInvalid)
	}
	k, err := a.CreateKey(r.Context(), req.Team, req.Name)
	if err != nil {
		return err
	}
	s.log.Info("key created", "key_id", k.ID, "team", k.Team)
	writeJSON(w, http.StatusCreated, k)
	return nil
}

func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) error {
	if err := requireAdminKey(r, "listing keys"); err != nil {
		return err
	}
	a, err := s.accounts()
	if err != nil {
		return err
	}
	team := ""
	for k, vs := range r.URL.Query() {
		if k != "team" {
			return fmt.Errorf("unknown query parameter %q: filter with team=NAME: %w", k, api.ErrInvalid)
		}
		team = vs[0]
	}
	keys, err := a.ListKeys(r.Context(), team)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.KeyList{Keys: keys})
	return nil
}

func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request) error {
	if err := requireAdminKey(r, "revoking keys"); err != nil {
		return err
	}
	a, err := s.accounts()
	if err != nil {
		return err
	}
	if err := a.RevokeKey(r.Context(), r.PathValue("id")); err != nil {
		return err
	}
	s.log.Info("key revoked", "key_id", r.PathValue("id"))
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) listTeams(w http.ResponseWriter, r *http.Request) error {
	if err := requireAdminKey(r, "listing teams"); err != nil {
		return err
	}
	a, err := s.accounts()
	if err != nil {
		return err
	}
	teams, err := a.Teams(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.TeamList{Teams: teams})
	return nil
}

// teamVisible checks that the caller may see team: its own, or any with
// the admin key. Another team's is not_found, as if it did not exist.
func teamVisible(r *http.Request, team string) error {
	c := callerOf(r.Context())
	if c.admin || accounts.TeamID(team) == c.team {
		return nil
	}
	return fmt.Errorf("team %q: %w", team, api.ErrNotFound)
}

func (s *Server) getQuota(w http.ResponseWriter, r *http.Request) error {
	a, err := s.accounts()
	if err != nil {
		return err
	}
	team := r.PathValue("team")
	if err := teamVisible(r, team); err != nil {
		return err
	}
	q, err := a.Quota(r.Context(), team)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, q)
	return nil
}

func (s *Server) getOwnQuota(w http.ResponseWriter, r *http.Request) error {
	a, err := s.accounts()
	if err != nil {
		return err
	}
	t, err := s.store.TeamByID(r.Context(), callerOf(r.Context()).team)
	if err != nil {
		return err
	}
	q, err := a.Quota(r.Context(), t.Name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, q)
	return nil
}

func (s *Server) setQuota(w http.ResponseWriter, r *http.Request) error {
	if err := requireAdminKey(r, "setting quotas"); err != nil {
		return err
	}
	a, err := s.accounts()
	if err != nil {
		return err
	}
	var req api.Limits
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	q, err := a.SetQuota(r.Context(), r.PathValue("team"), req)
	if err != nil {
		return err
	}
	s.log.Info("quota set", "team", q.Team)
	writeJSON(w, http.StatusOK, q)
	return nil
}
