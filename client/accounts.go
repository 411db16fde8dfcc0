package client

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/warrenhq/warren/api"
)

// Accounts: keys, teams, quotas, usage, events, webhooks and metrics.

// CreateKey makes an API key for team (created with its first key); admin
// key only. The key is in the answer's Secret, shown this once.
func (c *Client) CreateKey(ctx context.Context, team, name string) (api.NewKey, error) {
	var k api.NewKey
	err := c.doJSON(ctx, http.MethodPost, "/v1/keys", nil, api.CreateKeyRequest{Team: team, Name: name}, &k)
	return k, err
}

// ListKeys lists the API keys (admin key only); with team != "", that
// team's.
func (c *Client) ListKeys(ctx context.Context, team string) ([]api.Key, error) {
	q := url.Values{}
	if team != "" {
		q.Set("team", team)
	}
	var out api.KeyList
	err := c.doJSON(ctx, http.MethodGet, "/v1/keys", q, nil, &out)
	return out.Keys, err
}

// RevokeKey revokes a key by id (admin key only).
func (c *Client) RevokeKey(ctx context.Context, id string) error {
	return c.doJSON(ctx, http.MethodDelete, "/v1/keys/"+url.PathEscape(id), nil, nil, nil)
}

// ListTeams lists the teams (admin key only).
func (c *Client) ListTeams(ctx context.Context) ([]api.Team, error) {
	var out api.TeamList
	err := c.doJSON(ctx, http.MethodGet, "/v1/teams", nil, nil, &out)
	return out.Teams, err
}

// Quota returns a team's quota and what it uses; team "" is the caller's.
func (c *Client) Quota(ctx context.Context, team string) (api.Quota, error) {
	path := "/v1/quota"
	if team != "" {
		path = "/v1/teams/" + url.PathEscape(team) + "/quota"
	}
	var q api.Quota
	err := c.doJSON(ctx, http.MethodGet, path, nil, nil, &q)
	return q, err
}

// SetQuota replaces a team's quota overrides (admin key only): nil fields
// take the server's defaults, 0 is unlimited.
func (c *Client) SetQuota(ctx context.Context, team string, l api.Limits) (api.Quota, error) {
	var q api.Quota
	err := c.doJSON(ctx, http.MethodPut, "/v1/teams/"+url.PathEscape(team)+"/quota", nil, l, &q)
	return q, err
}

// UsageOptions select a usage report; zero fields take the server's
// defaults (this month until now, the caller's team).
type UsageOptions struct {
	From, To time.Time
	// Team is another team's name (admin key only).
	Team string
}

// Usage reports what the team's sandboxes used, and its cost.
func (c *Client) Usage(ctx context.Context, opts UsageOptions) (api.Usage, error) {
	q := url.Values{}
	if !opts.From.IsZero() {
		q.Set("from", opts.From.UTC().Format(time.RFC3339Nano))
	}
	if !opts.To.IsZero() {
		q.Set("to", opts.To.UTC().Format(time.RFC3339Nano))
	}
	if opts.Team != "" {
		q.Set("team", opts.Team)
	}
	var u api.Usage
	err := c.doJSON(ctx, http.MethodGet, "/v1/usage", q, nil, &u)
	return u, err
}

// FromNow asks Events for what happens from now on.
const FromNow = -1

// Events streams the team's lifecycle events to fn, in order, starting
// after event id after (0: every event the server keeps; FromNow: what
// happens from now). It reconnects when the stream drops, resuming after
// the last event it saw, until ctx ends or fn returns an error (which
// Events returns). A refused key or a bad request ends it at once.
func (c *Client) Events(ctx context.Context, after int64, fn func(api.Event) error) error {
	last := after
	for {
		err := c.eventsOnce(ctx, &last, fn)
		var fnErr *callbackError
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.As(err, &fnErr):
			return fnErr.err
		case errors.Is(err, ErrUnauthorized), errors.Is(err, ErrForbidden), errors.Is(err, ErrInvalid), errors.Is(err, ErrNotFound):
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

type callbackError struct{ err error }

func (e *callbackError) Error() string { return e.err.Error() }

// eventsOnce reads one connection of the stream, moving *last along.
func (c *Client) eventsOnce(ctx context.Context, last *int64, fn func(api.Event) error) error {
	hdr := http.Header{"Accept": {"text/event-stream"}}
	if *last >= 0 {
		hdr.Set("Last-Event-ID", strconv.FormatInt(*last, 10))
	}
	resp, err := c.request(ctx, http.MethodGet, "/v1/events", nil, nil, hdr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return readSSE(resp.Body, func(id, event, data string) error {
		if id != "" {
			if n, err := strconv.ParseInt(id, 10, 64); err == nil {
				*last = n
			}
		}
		if data == "" {
			return nil // an id alone sets the position
		}
		var ev api.Event
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return fmt.Errorf("decoding event %s: %w", id, err)
		}
		if err := fn(ev); err != nil {
			return &callbackError{err}
		}
		return nil
	})
}

// readSSE parses a text/event-stream, calling fn for each event (and for
// an id without data).
func readSSE(r io.Reader, fn func(id, event, data string) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var id, event string
	var data []string
	seen := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if seen {
				if err := fn(id, event, strings.Join(data, "\n")); err != nil {
					return err
				}
			}
			id, event, data, seen = "", "", nil, false
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			id, seen = value, true
		case "event":
			event, seen = value, true
		case "data":
			data, seen = append(data, value), true
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return io.ErrUnexpectedEOF
}

// CreateWebhook has the team's events POSTed to url from now on; the
// answer's Secret (shown once) verifies them (VerifyWebhook).
func (c *Client) CreateWebhook(ctx context.Context, rawURL string) (api.Webhook, error) {
	var w api.Webhook
	err := c.doJSON(ctx, http.MethodPost, "/v1/webhooks", nil, api.CreateWebhookRequest{URL: rawURL}, &w)
	return w, err
}

// ListWebhooks lists the team's webhooks.
func (c *Client) ListWebhooks(ctx context.Context) ([]api.Webhook, error) {
	var out api.WebhookList
	err := c.doJSON(ctx, http.MethodGet, "/v1/webhooks", nil, nil, &out)
	return out.Webhooks, err
}

// DeleteWebhook stops deliveries to a webhook.
func (c *Client) DeleteWebhook(ctx context.Context, id string) error {
	return c.doJSON(ctx, http.MethodDelete, "/v1/webhooks/"+url.PathEscape(id), nil, nil, nil)
}

// SandboxMetrics returns the CPU and memory a sandbox uses now.
func (c *Client) SandboxMetrics(ctx context.Context, id string) (api.SandboxMetrics, error) {
	var m api.SandboxMetrics
	err := c.doJSON(ctx, http.MethodGet, sbPath(id, "/metrics"), nil, nil, &m)
	return m, err
}

// ErrBadSignature is a webhook delivery that is not signed with the
// secret, or is too old.
var ErrBadSignature = errors.New("webhook signature does not match")

// VerifyWebhook checks a webhook delivery: its Warren-Signature must be
// the HMAC-SHA256 of its Warren-Timestamp and body with secret, and the
// timestamp at most maxAge old (0: not checked), which stops replays.
func VerifyWebhook(secret string, h http.Header, body []byte, maxAge time.Duration) error {
	ts := h.Get("Warren-Timestamp")
	sig := h.Get("Warren-Signature")
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	want := "v1=" + hex.EncodeToString(mac.Sum(nil))
	if ts == "" || !hmac.Equal([]byte(sig), []byte(want)) {
		return ErrBadSignature
	}
	if maxAge > 0 {
		sec, err := strconv.ParseInt(ts, 10, 64)
		if err != nil || time.Since(time.Unix(sec, 0)) > maxAge {
			return fmt.Errorf("timestamp %s is older than %s: %w", ts, maxAge, ErrBadSignature)
		}
	}
	return nil
}
