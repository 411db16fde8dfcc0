package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/credentials"
)

func netCall(t *testing.T, s *Server, method, target, key, body string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+key)
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	return w
}

func TestNetworkingUnavailable(t *testing.T) {
	s, st := testServer(t)
	addKey(t, st, "k", "alpha", false)
	for _, target := range []string{"/v1/volumes", "/v1/credentials", "/v1/volumes/x", "/v1/credentials/x"} {
		if w := netCall(t, s, "GET", target, "k", ""); w.Code != http.StatusServiceUnavailable {
			t.Errorf("GET %s without networking: got %d %s, want 503", target, w.Code, w.Body)
		}
	}
}

func TestCredentialRoutes(t *testing.T) {
	s, st := testServer(t)
	addKey(t, st, "ka", "alpha", false)
	addKey(t, st, "kb", "beta", false)
	creds, err := credentials.Open(filepath.Join(t.TempDir(), "credentials.key"), st, discardLog())
	if err != nil {
		t.Fatal(err)
	}
	s.SetNetworking(nil, creds)
	const secret = "very-secret-token"
	w := netCall(t, s, "POST", "/v1/credentials", "ka", `{"name": "gh", "url": "https://github.com", "username": "x", "secret": "`+secret+`"}`)
	if w.Code != http.StatusCreated || strings.Contains(w.Body.String(), secret) {
		t.Fatalf("create: got %d %s", w.Code, w.Body)
	}
	var c api.Credential
	json.Unmarshal(w.Body.Bytes(), &c)
	if c.Name != "gh" || c.URL != "https://github.com/" || c.Username != "x" {
		t.Errorf("create: got %+v", c)
	}
	for _, target := range []string{"/v1/credentials", "/v1/credentials/gh"} {
		if w := netCall(t, s, "GET", target, "ka", ""); w.Code != 200 || strings.Contains(w.Body.String(), secret) || !strings.Contains(w.Body.String(), `"gh"`) {
			t.Errorf("GET %s: got %d %s", target, w.Code, w.Body)
		}
	}
	// Another team sees nothing and touches nothing.
	if w := netCall(t, s, "GET", "/v1/credentials", "kb", ""); w.Code != 200 || strings.Contains(w.Body.String(), "gh") {
		t.Errorf("another team's list: got %d %s", w.Code, w.Body)
	}
	for _, m := range []string{"GET", "DELETE"} {
		if w := netCall(t, s, m, "/v1/credentials/gh", "kb", ""); w.Code != http.StatusNotFound {
			t.Errorf("another team's %s: got %d, want 404", m, w.Code)
		}
	}
	for _, body := range []string{`{"name": "x", "url": "ftp://h/", "secret": "s"}`, `{"name": "x", "url": "https://h/"}`,
		`{"name": "gh", "url": "https://h/", "secret": "s"}`, `{"name": "x", "url": "https://h/", "secret": "s", "extra": 1}`} {
		if w := netCall(t, s, "POST", "/v1/credentials", "ka", body); w.Code/100 != 4 {
			t.Errorf("create %s: got %d, want a 4xx", body, w.Code)
		}
	}
	if w := netCall(t, s, "DELETE", "/v1/credentials/gh", "ka", ""); w.Code != http.StatusNoContent {
		t.Errorf("delete: got %d %s", w.Code, w.Body)
	}
	if w := netCall(t, s, "GET", "/v1/credentials/gh", "ka", ""); w.Code != http.StatusNotFound {
		t.Errorf("after delete: got %d, want 404", w.Code)
	}
}

func TestPortRoutesBadPort(t *testing.T) {
	s, st := testServer(t)
	addKey(t, st, "k", "alpha", false)
	for _, port := range []string{"0", "65536", "http", "080", "-1", "49982"} {
		for _, m := range []string{"GET", "POST", "DELETE"} {
			target := "/v1/sandboxes/sb-aaaaaaaaaaaa/ports/" + port + "/x"
			if w := netCall(t, s, m, target, "k", ""); w.Code != http.StatusBadRequest {
				t.Errorf("%s %s: got %d %s, want 400", m, target, w.Code, w.Body)
			}
		}
	}
}
