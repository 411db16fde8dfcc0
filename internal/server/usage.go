package server

import (
	"fmt"
	"net/http"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/accounts"
)

func (s *Server) usageRoutes() {
	s.handle("GET /v1/usage", s.getUsage)
}

// parseWhen reads a time given as RFC 3339 or as a date (midnight UTC).
func parseWhen(name, v string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.Parse("2006-01-02", v); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%s %q: give an RFC 3339 time (2026-03-01T00:00:00Z) or a date (2026-03-01): %w", name, v, api.ErrInvalid)
}

// getUsage answers what the caller's team (or, for the admin key, team=)
// used in [from, to): by default from the start of this month (UTC) to
// now.
func (s *Server) getUsage(w http.ResponseWriter, r *http.Request) error {
	if s.acct.Meter == nil {
		return fmt.Errorf("metering is not set up on this server: %w", api.ErrUnavailable)
	}
	now := time.Now().UTC()
	from := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	to := now
	c := callerOf(r.Context())
	teamID := c.team
	var err error
	for k, vs := range r.URL.Query() {
		switch k {
		case "from":
			from, err = parseWhen("from", vs[0])
		case "to":
			to, err = parseWhen("to", vs[0])
		case "team":
			if err = teamVisible(r, vs[0]); err == nil {
				teamID = accounts.TeamID(vs[0])
			}
		default:
			err = fmt.Errorf("unknown query parameter %q: use from=, to= (and team= with the admin key): %w", k, api.ErrInvalid)
		}
		if err != nil {
			return err
		}
	}
	if !from.Before(to) {
		return fmt.Errorf("from %s is not before to %s: %w", from.Format(time.RFC3339), to.Format(time.RFC3339), api.ErrInvalid)
	}
	t, err := s.store.TeamByID(r.Context(), teamID)
	if err != nil {
		return err
	}
	u, err := s.acct.Meter.Usage(r.Context(), t.ID, t.Name, from, to)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, u)
	return nil
}
