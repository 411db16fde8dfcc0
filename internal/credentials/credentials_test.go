package credentials

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/store"
)

func newManager(t *testing.T) (*Manager, *store.Store, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(t.Context(), filepath.Join(dir, "warren.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for _, team := range []string{"t1", "t2"} {
		if _, err := st.EnsureTeam(t.Context(), team, team); err != nil {
			t.Fatal(err)
		}
	}
	key := filepath.Join(dir, "credentials.key")
	m, err := Open(key, st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return m, st, key
}

func TestNormalizeURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://github.com/":        "https://github.com/",
		"https://github.com":         "https://github.com/",
		"HTTPS://GitHub.com/Org":     "https://github.com/Org/",
		"http://127.0.0.1:8123/git/": "http://127.0.0.1:8123/git/",
	} {
		if got, err := NormalizeURL(in); err != nil || got != want {
			t.Errorf("NormalizeURL(%q): got %q, %v, want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "github.com", "ftp://x/", "https://user:pw@github.com/", "https:///x",
		"https://github.com/?a=b", "https://github.com/#x", "https://h/a/../b", "file:///etc/passwd", "mailto:a@b"} {
		if _, err := NormalizeURL(in); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("NormalizeURL(%q): got %v, want ErrInvalid", in, err)
		}
	}
}

func TestSealed(t *testing.T) {
	m, st, key := newManager(t)
	ctx := t.Context()
	if fi, err := os.Stat(key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v, %v; want mode 0600", fi, err)
	}
	secret := "s3cr3t-token-value"
	c, err := m.Create(ctx, "t1", api.CreateCredentialRequest{Name: "gh", URL: "https://github.com", Username: "x", Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	if c.URL != "https://github.com/" {
		t.Errorf("URL: got %q", c.URL)
	}
	stored, _ := st.GetCredential(ctx, "t1", "gh")
	if bytes.Contains(stored.Secret, []byte(secret)) {
		t.Errorf("the secret is stored in the clear")
	}
	db, _ := os.ReadFile(filepath.Join(filepath.Dir(key), "warren.db"))
	wal, _ := os.ReadFile(filepath.Join(filepath.Dir(key), "warren.db-wal"))
	if bytes.Contains(db, []byte(secret)) || bytes.Contains(wal, []byte(secret)) {
		t.Errorf("the secret is in the database files in the clear")
	}
	if got, err := m.open(stored); err != nil || string(got) != secret {
		t.Errorf("open: got %q, %v", got, err)
	}
	// Sealed for t1/gh, it does not open as another row.
	moved := stored
	moved.Name = "other"
	if _, err := m.open(moved); err == nil {
		t.Errorf("a sealed secret opened under another name")
	}
	// Reopening with the same key file opens it.
	m2, err := Open(key, st, m.log)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := m2.open(stored); err != nil || string(got) != secret {
		t.Errorf("open after reopening: got %q, %v", got, err)
	}
	if l := ToAPI(c); strings.Contains(l.Name+l.URL+l.Username, secret) {
		t.Errorf("ToAPI shows the secret")
	}
}

func TestCreateInvalid(t *testing.T) {
	m, _, _ := newManager(t)
	ok := api.CreateCredentialRequest{Name: "gh", URL: "https://github.com/", Username: "x", Secret: "s"}
	for _, mod := range []func(*api.CreateCredentialRequest){
		func(r *api.CreateCredentialRequest) { r.Name = "" },
		func(r *api.CreateCredentialRequest) { r.Name = "a/b" },
		func(r *api.CreateCredentialRequest) { r.URL = "github.com" },
		func(r *api.CreateCredentialRequest) { r.Secret = "" },
		func(r *api.CreateCredentialRequest) { r.Secret = "a\nb" },
		func(r *api.CreateCredentialRequest) { r.Username = "a:b" },
		func(r *api.CreateCredentialRequest) { r.Secret = strings.Repeat("s", MaxSecret+1) },
	} {
		req := ok
		mod(&req)
		if _, err := m.Create(t.Context(), "t1", req); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("Create(%+v): got %v, want ErrInvalid", req, err)
		}
	}
	if l, _ := m.List(t.Context(), "t1"); len(l) != 0 {
		t.Errorf("invalid creates stored %d credentials", len(l))
	}
}

func TestGitConfig(t *testing.T) {
	creds := []store.Credential{{Name: "gh", URL: "https://github.com/"}, {Name: "lab", URL: "http://127.0.0.1:8123/"}}
	got := GitConfig("[user]\n\tname = me\n", creds)
	want := "[user]\n\tname = me\n" + GitConfigBegin + "\n" +
		"[url \"http://169.254.64.1/gh/\"]\n\tinsteadOf = https://github.com/\n" +
		"[url \"http://169.254.64.1/lab/\"]\n\tinsteadOf = http://127.0.0.1:8123/\n" + GitConfigEnd + "\n"
	if got != want {
		t.Errorf("GitConfig:\ngot  %q\nwant %q", got, want)
	}
	// Rewriting replaces the block; none removes it.
	if again := GitConfig(got, creds); again != want {
		t.Errorf("GitConfig twice:\ngot  %q\nwant %q", again, want)
	}
	if none := GitConfig(got, nil); none != "[user]\n\tname = me\n" {
		t.Errorf("GitConfig without credentials: got %q", none)
	}
	if empty := GitConfig("", nil); empty != "" {
		t.Errorf("GitConfig of nothing: got %q", empty)
	}
}

func TestProxy(t *testing.T) {
	m, st, _ := newManager(t)
	ctx := t.Context()
	var seen *http.Request
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = r
		if r.URL.Path == "/git/redirect" {
			http.Redirect(w, r, "http://"+r.Host+"/git/elsewhere", http.StatusFound)
			return
		}
		io.WriteString(w, "upstream "+r.URL.Path+"?"+r.URL.RawQuery)
	}))
	defer upstream.Close()
	if _, err := m.Create(ctx, "t1", api.CreateCredentialRequest{Name: "lab", URL: upstream.URL + "/git/", Username: "alice", Secret: "pw-123"}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, "t1", api.CreateCredentialRequest{Name: "other", URL: upstream.URL + "/other/", Username: "bob", Secret: "pw-456"}); err != nil {
		t.Fatal(err)
	}
	sb := &store.Sandbox{ID: "sb-aaaaaaaaaaaa", TeamID: "t1", State: api.StateRunning, CPUs: 1, MemoryMB: 64, DiskMB: 64,
		Network: api.Network{Egress: "none", GitCredentials: []string{"lab"}}}
	if err := st.CreateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	h := m.Proxy(sb.ID)
	get := func(path string, hdr http.Header) *httptest.ResponseRecorder {
		seen = nil
		r := httptest.NewRequest("GET", path, nil)
		for k, v := range hdr {
			r.Header[k] = v
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}

	w := get("/lab/repo.git/info/refs?service=git-upload-pack", http.Header{"Authorization": {"Bearer from-inside"}})
	if w.Code != 200 || w.Body.String() != "upstream /git/repo.git/info/refs?service=git-upload-pack" {
		t.Fatalf("granted: got %d %q", w.Code, w.Body.String())
	}
	if u, p, ok := seen.BasicAuth(); !ok || u != "alice" || p != "pw-123" {
		t.Errorf("upstream saw authorization %q, want alice's basic auth", seen.Header.Get("Authorization"))
	}
	if w := get("/lab/redirect", nil); w.Code != http.StatusFound || w.Header().Get("Location") != ProxyURL("lab")+"elsewhere" {
		t.Errorf("redirect: got %d Location %q, want it back on the proxy", w.Code, w.Header().Get("Location"))
	}
	for path, code := range map[string]int{
		"/other/x":         http.StatusForbidden, // not granted to this sandbox
		"/lab/../other/x":  http.StatusBadRequest,
		"/lab/a/%2e%2e/b":  http.StatusBadRequest,
		"/lab":             http.StatusBadRequest,
		"/":                http.StatusBadRequest,
		"/no%20such/x":     http.StatusBadRequest,
		"/unknown-cred/x/": http.StatusForbidden,
	} {
		if w := get(path, nil); w.Code != code {
			t.Errorf("GET %s: got %d %q, want %d", path, w.Code, w.Body.String(), code)
		} else if seen != nil {
			t.Errorf("GET %s reached upstream", path)
		}
	}

	// Revoked: refused at once.
	if err := m.Delete(ctx, "t1", "lab"); err != nil {
		t.Fatal(err)
	}
	if w := get("/lab/repo.git/info/refs", nil); w.Code != http.StatusNotFound || seen != nil {
		t.Errorf("after revoke: got %d, reached upstream %v", w.Code, seen != nil)
	}
	// A deleted sandbox's proxy serves nothing.
	st.DeleteSandbox(ctx, sb.ID)
	if w := get("/other/x", nil); w.Code != http.StatusForbidden {
		t.Errorf("a deleted sandbox: got %d", w.Code)
	}
}
