package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/accounts"
	"github.com/warrenhq/warren/internal/events"
	"github.com/warrenhq/warren/internal/metrics"
	"github.com/warrenhq/warren/internal/sandbox"
	"github.com/warrenhq/warren/internal/usage"
)

// accountsServer is a test server with accounts, metering, events and
// metrics, and an admin key "admin-key".
func accountsServer(t *testing.T) (*Server, *events.Hub) {
	t.Helper()
	s, st := testServer(t)
	addKey(t, st, "admin-key", "admin", true)
	hub := events.New(st, events.Config{}, discardLog())
	ctx, cancel := context.WithCancel(context.Background())
	if err := hub.Start(ctx); err != nil {
		t.Fatal(err)
	}
	meter := usage.New(st, nil, usage.Config{FlushInterval: time.Hour, Prices: usage.DefaultPrices()}, discardLog())
	if err := meter.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-hub.Done(); <-meter.Done() })
	s.SetAccounts(Accounts{Accounts: accounts.New(st, accounts.Limits{RunningSandboxes: 4}), Meter: meter, Events: hub,
		Metrics: metrics.New(st, t.TempDir())})
	return s, hub
}

func call(t *testing.T, s *Server, method, target, key, body string, out any) int {
	t.Helper()
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	if key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	if out != nil && w.Code < 300 {
		if err := json.Unmarshal(w.Body.Bytes(), out); err != nil {
			t.Fatalf("%s %s: decoding %q: %v", method, target, w.Body, err)
		}
	}
	return w.Code
}

func TestKeysAPI(t *testing.T) {
	s, _ := accountsServer(t)
	var k api.NewKey
	if code := call(t, s, "POST", "/v1/keys", "admin-key", `{"team":"acme","name":"ci"}`, &k); code != http.StatusCreated {
		t.Fatalf("create: status %d", code)
	}
	if k.Secret == "" || k.Team != "acme" || k.ID == "" {
		t.Fatalf("create: got %+v", k)
	}
	// The new key works, and is not the admin's.
	var list api.SandboxList
	if code := call(t, s, "GET", "/v1/quota", k.Secret, "", nil); code != http.StatusOK {
		t.Errorf("the new key: status %d", code)
	}
	for _, c := range []struct{ method, target, body string }{
		{"POST", "/v1/keys", `{"team":"evil"}`},
		{"GET", "/v1/keys", ""},
		{"DELETE", "/v1/keys/" + k.ID, ""},
		{"GET", "/v1/teams", ""},
		{"PUT", "/v1/teams/acme/quota", `{"running_sandboxes": 100}`},
	} {
		if code := call(t, s, c.method, c.target, k.Secret, c.body, nil); code != http.StatusForbidden {
			t.Errorf("%s %s with a team key: status %d, want 403", c.method, c.target, code)
		}
	}
	// Another team's quota is not found; its own is there.
	call(t, s, "POST", "/v1/keys", "admin-key", `{"team":"other"}`, nil)
	if code := call(t, s, "GET", "/v1/teams/other/quota", k.Secret, "", nil); code != http.StatusNotFound {
		t.Errorf("another team's quota: status %d, want 404", code)
	}
	var q api.Quota
	if code := call(t, s, "PUT", "/v1/teams/acme/quota", "admin-key", `{"running_sandboxes": 2, "storage_mb": null}`, &q); code != http.StatusOK {
		t.Fatalf("set quota: status %d", code)
	}
	if *q.Limits.RunningSandboxes != 2 || *q.Limits.StorageMB != 0 || q.Overrides.StorageMB != nil {
		t.Errorf("quota: got limits %+v overrides %+v", q.Limits, q.Overrides)
	}
	if code := call(t, s, "GET", "/v1/teams/acme/quota", k.Secret, "", &q); code != http.StatusOK || *q.Limits.RunningSandboxes != 2 {
		t.Errorf("own quota: status %d, %+v", code, q.Limits)
	}
	if code := call(t, s, "PUT", "/v1/teams/acme/quota", "admin-key", `{"running_sandboxes": -1}`, nil); code != http.StatusBadRequest {
		t.Errorf("negative: status %d, want 400", code)
	}
	if code := call(t, s, "PUT", "/v1/teams/acme/quota", "admin-key", `{"running": 1}`, nil); code != http.StatusBadRequest {
		t.Errorf("unknown field: status %d, want 400", code)
	}
	var keys api.KeyList
	call(t, s, "GET", "/v1/keys?team=acme", "admin-key", "", &keys)
	if len(keys.Keys) != 1 || keys.Keys[0].Prefix != k.Secret[:11] {
		t.Errorf("keys: got %+v", keys)
	}
	// Revoked: 401 at once.
	if code := call(t, s, "DELETE", "/v1/keys/"+k.ID, "admin-key", "", nil); code != http.StatusNoContent {
		t.Fatalf("revoke: status %d", code)
	}
	if code := call(t, s, "GET", "/v1/sandboxes", k.Secret, "", &list); code != http.StatusUnauthorized {
		t.Errorf("a revoked key: status %d, want 401", code)
	}
}

func TestHashKeysAgree(t *testing.T) {
	if HashKey("wk_x") != accounts.HashKey("wk_x") {
		t.Error("the server and accounts hash keys differently")
	}
}

func TestQuotaErrorBody(t *testing.T) {
	w := httptest.NewRecorder()
	err := fmt.Errorf("creating: %w", &api.QuotaError{Team: "acme", Op: "create",
		QuotaExceeded: api.QuotaExceeded{Limit: "running_sandboxes", Max: 2, Used: 2, Requested: 1}})
	writeError(w, httptest.NewRequest("POST", "/v1/sandboxes", nil), discardLog(), err)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("status: got %d, want 429", w.Code)
	}
	var body api.QuotaErrorBody
	json.Unmarshal(w.Body.Bytes(), &body)
	if body.Error.Code != api.CodeQuota || body.Error.Quota == nil || body.Error.Quota.Limit != "running_sandboxes" || body.Error.Quota.Used != 2 {
		t.Errorf("body: got %s", w.Body)
	}
}

func TestUsageAPI(t *testing.T) {
	s, _ := accountsServer(t)
	var u api.Usage
	if code := call(t, s, "GET", "/v1/usage", "admin-key", "", &u); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	if u.Team != "admin" || u.Prices.StorageGBMonth != 0.05 || u.Prices.StorageFreeGB != 10 || u.Sandboxes == nil {
		t.Errorf("usage: got %+v", u)
	}
	if u.From.Day() != 1 || !u.To.After(u.From) {
		t.Errorf("default window: got %v to %v", u.From, u.To)
	}
	if code := call(t, s, "GET", "/v1/usage?from=2026-03-01&to=2026-03-02T00:00:00Z", "admin-key", "", &u); code != http.StatusOK ||
		!u.From.Equal(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("window: status %d, from %v", code, u.From)
	}
	for _, q := range []string{"from=yesterday", "to=2026-13-01", "from=2026-03-02&to=2026-03-01", "color=red"} {
		if code := call(t, s, "GET", "/v1/usage?"+q, "admin-key", "", nil); code != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400", q, code)
		}
	}
	var k api.NewKey
	call(t, s, "POST", "/v1/keys", "admin-key", `{"team":"acme"}`, &k)
	if code := call(t, s, "GET", "/v1/usage?team=admin", k.Secret, "", nil); code != http.StatusNotFound {
		t.Errorf("another team's usage: status %d, want 404", code)
	}
	if code := call(t, s, "GET", "/v1/usage?team=acme", "admin-key", "", &u); code != http.StatusOK || u.Team != "acme" {
		t.Errorf("the admin reading a team's: status %d, team %q", code, u.Team)
	}
}

// The stream sends the team's events as SSE and resumes after
// Last-Event-ID.
func TestEventStream(t *testing.T) {
	s, hub := accountsServer(t)
	srv := httptest.NewServer(s)
	defer srv.Close()
	open := func(lastID string) (*bufio.Reader, func()) {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/events", nil)
		req.Header.Set("Authorization", "Bearer admin-key")
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("status %d, %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		return bufio.NewReader(resp.Body), func() { resp.Body.Close() }
	}
	type sse struct{ id, event, data string }
	read := func(r *bufio.Reader) sse {
		var e sse
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("reading the stream: %v", err)
			}
			line = strings.TrimRight(line, "\n")
			switch {
			case line == "" && e.data != "":
				return e
			case line == "":
				e = sse{} // an id alone sets the position
			case strings.HasPrefix(line, "id: "):
				e.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				e.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				e.data = line[6:]
			}
		}
	}
	r, stop := open("")
	for _, k := range []string{api.EventCreated, api.EventPaused, api.EventResumed} {
		hub.SandboxEvent(t.Context(), sandbox.Event{Kind: k, TeamID: "team-admin", SandboxID: "sb-aaaaaaaaaaaa", State: "x", At: time.Now()})
		hub.SandboxEvent(t.Context(), sandbox.Event{Kind: k, TeamID: "team-other", SandboxID: "sb-bbbbbbbbbbbb", At: time.Now()})
	}
	var got []sse
	for range 3 {
		got = append(got, read(r))
	}
	stop()
	for i, k := range []string{api.EventCreated, api.EventPaused, api.EventResumed} {
		var ev api.Event
		json.Unmarshal([]byte(got[i].data), &ev)
		if got[i].event != k || ev.Kind != k || ev.SandboxID != "sb-aaaaaaaaaaaa" || fmt.Sprint(ev.ID) != got[i].id {
			t.Errorf("event %d: got %+v", i, got[i])
		}
	}
	r2, stop2 := open(got[0].id)
	defer stop2()
	for i := 1; i < 3; i++ {
		if e := read(r2); e.id != got[i].id {
			t.Errorf("resumed: got id %s, want %s", e.id, got[i].id)
		}
	}
	if code := call(t, s, "GET", "/v1/events?after=x", "admin-key", "", nil); code != http.StatusBadRequest {
		t.Errorf("after=x: status %d, want 400", code)
	}
}

func TestMetricsAuth(t *testing.T) {
	s, _ := accountsServer(t)
	var k api.NewKey
	call(t, s, "POST", "/v1/keys", "admin-key", `{"team":"acme"}`, &k)
	get := func(key string) (int, string) {
		r := httptest.NewRequest("GET", "/metrics", nil)
		if key != "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		b, _ := io.ReadAll(w.Body)
		return w.Code, string(b)
	}
	if code, _ := get(""); code != http.StatusUnauthorized {
		t.Errorf("no key: status %d, want 401", code)
	}
	if code, _ := get(k.Secret); code != http.StatusForbidden {
		t.Errorf("a team key: status %d, want 403", code)
	}
	if code, body := get("admin-key"); code != http.StatusOK || !strings.Contains(body, "warren_sandboxes{") {
		t.Errorf("admin: status %d, body %.200s", code, body)
	}
	s.acct.PublicMetrics = true
	if code, _ := get(""); code != http.StatusOK {
		t.Errorf("public: status %d, want 200", code)
	}
}

func TestAccountsUnavailable(t *testing.T) {
	s, st := testServer(t)
	addKey(t, st, "admin-key", "admin", true)
	for _, target := range []string{"/v1/keys", "/v1/usage", "/v1/events", "/v1/webhooks", "/metrics"} {
		if code := call(t, s, "GET", target, "admin-key", "", nil); code != http.StatusServiceUnavailable {
			t.Errorf("GET %s without accounts: status %d, want 503", target, code)
		}
	}
}
