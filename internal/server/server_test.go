package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/store"
)

func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestWriteError(t *testing.T) {
	tests := []struct {
		err    error
		status int
		code   string
	}{
		{api.ErrInvalid, http.StatusBadRequest, api.CodeInvalid},
		{api.ErrUnauthorized, http.StatusUnauthorized, api.CodeUnauthorized},
		{api.ErrForbidden, http.StatusForbidden, api.CodeForbidden},
		{api.ErrNotFound, http.StatusNotFound, api.CodeNotFound},
		{api.ErrConflict, http.StatusConflict, api.CodeConflict},
		{api.ErrQuota, http.StatusTooManyRequests, api.CodeQuota},
		{api.ErrUnavailable, http.StatusServiceUnavailable, api.CodeUnavailable},
		{api.ErrInternal, http.StatusInternalServerError, api.CodeInternal},
		{errors.New("disk on fire"), http.StatusInternalServerError, api.CodeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			err := fmt.Errorf("sandbox sb-x: what to do: %w", tt.err)
			w := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodGet, "/v1/sandboxes/sb-x", nil)
			writeError(w, r, discardLog(), err)
			if w.Code != tt.status {
				t.Errorf("status: got %v, want %v", w.Code, tt.status)
			}
			if got := w.Header().Get("Content-Type"); got != "application/json" {
				t.Errorf("Content-Type: got %v, want application/json", got)
			}
			var body api.ErrorBody
			dec := json.NewDecoder(w.Body)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&body); err != nil {
				t.Fatalf("decoding %q: %v", w.Body.String(), err)
			}
			want := api.ErrorBody{Error: api.ErrorDetail{Code: tt.code, Message: err.Error()}}
			if body != want {
				t.Errorf("body: got %+v, want %+v", body, want)
			}
		})
	}
}

// Every code the api package knows has a status, so none falls to 0.
func TestCodeStatusComplete(t *testing.T) {
	for _, code := range []string{api.CodeInvalid, api.CodeUnauthorized, api.CodeForbidden, api.CodeNotFound,
		api.CodeConflict, api.CodeQuota, api.CodeUnavailable, api.CodeInternal} {
		if codeStatus[code] == 0 {
			t.Errorf("code %s: no status", code)
		}
	}
}

func TestWriteErrorKeepsHTML(t *testing.T) {
	w := httptest.NewRecorder()
	writeError(w, httptest.NewRequest(http.MethodGet, "/", nil), discardLog(),
		fmt.Errorf("send Authorization: Bearer <key> & retry: %w", api.ErrUnauthorized))
	if !strings.Contains(w.Body.String(), "Bearer <key> & retry") {
		t.Errorf("got %s, want the message unescaped", w.Body.String())
	}
}

type testBody struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
}

func TestDecodeJSON(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		want    testBody
		wantErr string // substring of the error; "" for none
	}{
		{name: "empty", body: "", want: testBody{}},
		{name: "whitespace", body: " \n", want: testBody{}},
		{name: "empty object", body: "{}", want: testBody{}},
		{name: "fields", body: `{"name": "a", "count": 2}`, want: testBody{Name: "a", Count: 2}},
		{name: "trailing newline", body: "{\"name\": \"a\"}\n", want: testBody{Name: "a"}},
		{name: "unknown field", body: `{"name": "a", "colour": "red"}`, wantErr: `unknown field "colour"`},
		{name: "wrong type", body: `{"count": "two"}`, wantErr: "count"},
		{name: "not JSON", body: `name=a`, wantErr: "not valid JSON"},
		{name: "truncated", body: `{"name": `, wantErr: "not valid JSON"},
		{name: "trailing object", body: `{} {}`, wantErr: "data after the JSON object"},
		{name: "trailing brace", body: `{}}`, wantErr: "data after the JSON object"},
		{name: "trailing bracket", body: `{"name": "a"}]`, wantErr: "data after the JSON object"},
		{name: "trailing text", body: `{} x`, wantErr: "data after the JSON object"},
		{name: "oversize", body: `{"name": "` + strings.Repeat("a", maxJSONBody) + `"}`, wantErr: "larger than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/v1/sandboxes", strings.NewReader(tt.body))
			var got testBody
			err := decodeJSON(r, &got)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				if got != tt.want {
					t.Errorf("got %+v, want %+v", got, tt.want)
				}
				return
			}
			if !errors.Is(err, api.ErrInvalid) {
				t.Fatalf("got %v, want %v", err, api.ErrInvalid)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("got %q, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

// testServer is a Server with a real store and nothing else: enough for
// authentication, routing and health, which touch no sandbox.
func testServer(t *testing.T) (*Server, *store.Store) {
	t.Helper()
	st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), "warren.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s := &Server{store: st, log: discardLog(), version: "test", runsc: "runsc-test", mux: http.NewServeMux()}
	s.routes()
	return s, st
}

func addKey(t *testing.T, st *store.Store, key, team string, admin bool) {
	t.Helper()
	tm, err := st.EnsureTeam(t.Context(), "team-"+team, team)
	if err != nil {
		t.Fatal(err)
	}
	err = st.CreateKey(t.Context(), store.Key{ID: "key-" + key, TeamID: tm.ID, Hash: HashKey(key), Admin: admin, CreatedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
}

func TestAuthenticateRejects(t *testing.T) {
	s, st := testServer(t)
	addKey(t, st, "good-key", "alpha", false)
	tests := []struct {
		name string
		auth []string
	}{
		{"no header", nil},
		{"empty", []string{""}},
		{"no scheme", []string{"good-key"}},
		{"basic", []string{"Basic Z29vZC1rZXk6"}},
		{"empty bearer", []string{"Bearer "}},
		{"wrong key", []string{"Bearer bad-key"}},
		{"key prefix", []string{"Bearer good"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, target := range []string{"/v1/sandboxes", "/v1/sandboxes/sb-aaaaaaaaaaaa", "/v1/images"} {
				r := httptest.NewRequest(http.MethodGet, target, nil)
				for _, a := range tt.auth {
					r.Header.Add("Authorization", a)
				}
				w := httptest.NewRecorder()
				s.ServeHTTP(w, r)
				if w.Code != http.StatusUnauthorized {
					t.Fatalf("GET %s: status got %v, want %v (%s)", target, w.Code, http.StatusUnauthorized, w.Body)
				}
				var body api.ErrorBody
				if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
					t.Fatal(err)
				}
				if body.Error.Code != api.CodeUnauthorized || body.Error.Message == "" {
					t.Errorf("GET %s: body got %+v, want code %s and a message", target, body, api.CodeUnauthorized)
				}
			}
		})
	}
}

func TestAuthenticateAccepts(t *testing.T) {
	s, st := testServer(t)
	addKey(t, st, "admin-key", "admin", true)
	addKey(t, st, "team-key", "alpha", false)
	tests := []struct {
		header string
		want   caller
	}{
		{"Bearer admin-key", caller{team: "team-admin", admin: true}},
		{"Bearer team-key", caller{team: "team-alpha", admin: false}},
		{"Bearer team-key\t", caller{team: "team-alpha", admin: false}}, // as read from a file with a newline
	}
	for _, tt := range tests {
		r := httptest.NewRequest(http.MethodGet, "/v1/sandboxes", nil)
		r.Header.Set("Authorization", tt.header)
		got, err := s.authenticate(r)
		if err != nil {
			t.Errorf("%q: got %v, want nil", tt.header, err)
			continue
		}
		if got != tt.want {
			t.Errorf("%q: got %+v, want %+v", tt.header, got, tt.want)
		}
	}
}

func TestHealthNeedsNoKey(t *testing.T) {
	s, _ := testServer(t)
	w := httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if w.Code != http.StatusOK {
		t.Fatalf("status: got %v, want %v", w.Code, http.StatusOK)
	}
	var h api.Health
	if err := json.Unmarshal(w.Body.Bytes(), &h); err != nil {
		t.Fatal(err)
	}
	if want := (api.Health{Status: "ok", Version: "test", Runsc: "runsc-test"}); h != want {
		t.Errorf("got %+v, want %+v", h, want)
	}
}

func TestUnknownEndpoint(t *testing.T) {
	s, _ := testServer(t)
	for _, tt := range []struct{ method, target string }{
		{http.MethodGet, "/v2/sandboxes"},
		{http.MethodGet, "/nothing"},
		{http.MethodPatch, "/healthz"},
	} {
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest(tt.method, tt.target, nil))
		if w.Code != http.StatusNotFound {
			t.Errorf("%s %s: status got %v, want %v", tt.method, tt.target, w.Code, http.StatusNotFound)
			continue
		}
		var body api.ErrorBody
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s %s: %v", tt.method, tt.target, err)
		}
		if body.Error.Code != api.CodeNotFound || !strings.Contains(body.Error.Message, tt.target) {
			t.Errorf("%s %s: body got %+v, want not_found naming the path", tt.method, tt.target, body)
		}
	}
}

func TestWantsNDJSON(t *testing.T) {
	tests := []struct {
		accept string
		want   bool
	}{
		{"", false},
		{"application/json", false},
		{"application/x-ndjson", true},
		{"application/json, application/x-ndjson;q=0.9", true},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(http.MethodPost, "/v1/images/pull", nil)
		if tt.accept != "" {
			r.Header.Set("Accept", tt.accept)
		}
		if got := wantsNDJSON(r); got != tt.want {
			t.Errorf("Accept %q: got %v, want %v", tt.accept, got, tt.want)
		}
	}
}

func TestProgressStream(t *testing.T) {
	w := httptest.NewRecorder()
	ps := newProgressStream(w)
	ps.send(api.Progress{Phase: "pull", Message: "resolving"})
	ps.send(api.Progress{Phase: "pull", Current: 1, Total: 10}) // a counter soon after: dropped
	ps.send(api.Progress{Done: &api.Image{Name: "x"}})          // final: always sent
	if got := w.Header().Get("Content-Type"); got != "application/x-ndjson" {
		t.Errorf("Content-Type: got %v, want application/x-ndjson", got)
	}
	var lines []api.Progress
	dec := json.NewDecoder(w.Body)
	for {
		var p api.Progress
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, p)
	}
	if len(lines) != 2 || lines[0].Message != "resolving" || lines[1].Done == nil {
		t.Errorf("got %+v, want the message and the final line", lines)
	}
}
