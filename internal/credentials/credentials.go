// Package credentials keeps a team's credentials (git first) and serves
// them to sandboxes without ever letting them in.
//
// A credential is a secret for a URL prefix. The daemon keeps it sealed
// (AES-256-GCM, with a key in a file of the state directory, mode 0600)
// and opens it only to add it to a request: each sandbox has a proxy on
// the host side of its link, reached inside at
// http://<api.ServiceAddr>/<name>/, which adds the credential named in the
// path as HTTP basic authorization to requests under that credential's URL
// prefix only, and forwards them. git inside is configured (a block of
// /etc/gitconfig, `url.<proxy>.insteadOf <url>`) to go that way. So the
// secret is never in a sandbox's disk, environment or memory, nor in any
// snapshot, fork or stored pause; a sandbox uses only the credentials its
// network policy names (git_credentials), and each request looks both up
// afresh, so revoking a credential or taking it from a sandbox ends its use
// at once. Adding other kinds (a header for an HTTP API) is a change here
// only.
package credentials

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/store"
)

// Manager keeps credentials in the store, sealed.
type Manager struct {
	store *store.Store
	aead  cipher.AEAD
	log   *slog.Logger
}

// Open returns a Manager whose secrets are sealed with the key in keyPath,
// made (32 random bytes, mode 0600) when missing.
func Open(keyPath string, st *store.Store, log *slog.Logger) (*Manager, error) {
	key, err := os.ReadFile(keyPath)
	if errors.Is(err, os.ErrNotExist) {
		key = make([]byte, 32)
		rand.Read(key)
		if err := writeKey(keyPath, key); err != nil {
			return nil, fmt.Errorf("writing the credentials key %s: %w", keyPath, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("reading the credentials key: %w", err)
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("credentials key %s: %d bytes, want 32; the sealed secrets cannot be opened without the original", keyPath, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Manager{store: st, aead: aead, log: log}, nil
}

func writeKey(path string, key []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".credentials.key.tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(key); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// aad binds a sealed secret to its row: it opens only as team's name.
func aad(team, name string) []byte { return []byte(team + "\x00" + name) }

func (m *Manager) seal(team, name, secret string) []byte {
	nonce := make([]byte, m.aead.NonceSize())
	rand.Read(nonce)
	return m.aead.Seal(nonce, nonce, []byte(secret), aad(team, name))
}

func (m *Manager) open(c store.Credential) ([]byte, error) {
	n := m.aead.NonceSize()
	if len(c.Secret) < n {
		return nil, fmt.Errorf("credential %q: its sealed secret is damaged", c.Name)
	}
	plain, err := m.aead.Open(nil, c.Secret[:n], c.Secret[n:], aad(c.TeamID, c.Name))
	if err != nil {
		return nil, fmt.Errorf("credential %q: its secret does not open with this state directory's key: %w", c.Name, err)
	}
	return plain, nil
}

var namePattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$`)

// ValidName reports whether name can name a credential.
func ValidName(name string) bool { return namePattern.MatchString(name) }

// Limits of a credential's fields.
const (
	MaxSecret   = 8192
	MaxUsername = 256
	MaxURL      = 2048
)

func invalid(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, api.ErrInvalid)...)
}

// NormalizeURL checks a credential's URL prefix and returns it ending in
// "/", so that it matches whole path segments only (https://host/org/ is
// not a prefix of https://host/org-other/).
func NormalizeURL(raw string) (string, error) {
	if len(raw) > MaxURL {
		return "", invalid("url: at most %d bytes", MaxURL)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return "", invalid("url %q: want an http or https URL prefix, like https://github.com/", raw)
	}
	if u.User != nil {
		return "", invalid("url %q: put the user name and secret in username and secret, not in the URL", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(raw, "?") || strings.Contains(raw, "#") {
		return "", invalid("url %q: a prefix has no query or fragment", raw)
	}
	for _, seg := range strings.Split(u.Path, "/") {
		if seg == "." || seg == ".." {
			return "", invalid("url %q: no . or .. segments", raw)
		}
	}
	u.Scheme = strings.ToLower(u.Scheme)
	u.Host = strings.ToLower(u.Host)
	out := u.String()
	if !strings.HasSuffix(out, "/") {
		out += "/"
	}
	return out, nil
}

// Create stores a credential of team.
func (m *Manager) Create(ctx context.Context, team string, req api.CreateCredentialRequest) (store.Credential, error) {
	if !ValidName(req.Name) {
		return store.Credential{}, invalid("credential name %q: use 1-63 letters, digits, '_', '.', '-', starting with a letter or digit", req.Name)
	}
	u, err := NormalizeURL(req.URL)
	if err != nil {
		return store.Credential{}, err
	}
	if len(req.Username) > MaxUsername || strings.ContainsAny(req.Username, ":\r\n\x00") {
		return store.Credential{}, invalid("username: at most %d bytes, without ':' or control characters", MaxUsername)
	}
	if req.Secret == "" || len(req.Secret) > MaxSecret || strings.ContainsAny(req.Secret, "\r\n\x00") {
		return store.Credential{}, invalid("secret: 1 to %d bytes, without line breaks", MaxSecret)
	}
	c := store.Credential{TeamID: team, Name: req.Name, URL: u, Username: req.Username,
		Secret: m.seal(team, req.Name, req.Secret), CreatedAt: time.Now().UTC()}
	if err := m.store.CreateCredential(ctx, c); err != nil {
		return store.Credential{}, err
	}
	m.log.Info("credential created", "team", team, "credential", c.Name, "url", c.URL)
	return c, nil
}

// Get returns team's credential name (sealed).
func (m *Manager) Get(ctx context.Context, team, name string) (store.Credential, error) {
	return m.store.GetCredential(ctx, team, name)
}

// List lists team's credentials.
func (m *Manager) List(ctx context.Context, team string) ([]store.Credential, error) {
	return m.store.ListCredentials(ctx, team)
}

// Delete revokes team's credential name: the next request through any
// sandbox's proxy fails.
func (m *Manager) Delete(ctx context.Context, team, name string) error {
	if err := m.store.DeleteCredential(ctx, team, name); err != nil {
		return err
	}
	m.log.Info("credential deleted", "team", team, "credential", name)
	return nil
}

// ToAPI is the API's view of a credential: never its secret.
func ToAPI(c store.Credential) api.Credential {
	return api.Credential{Name: c.Name, URL: c.URL, Username: c.Username, CreatedAt: c.CreatedAt}
}

// ProxyURL is where git inside a sandbox reaches credential name.
func ProxyURL(name string) string { return "http://" + api.ServiceAddr + "/" + name + "/" }

// GitConfigBegin and GitConfigEnd delimit Warren's block of a sandbox's
// /etc/gitconfig.
const (
	GitConfigBegin = "# BEGIN warren credentials (written by the daemon; changes are lost)"
	GitConfigEnd   = "# END warren credentials"
)

// GitConfig returns existing (a gitconfig) with Warren's block replaced by
// one routing each credential's URL through the sandbox's proxy; with no
// credentials, without the block.
func GitConfig(existing string, creds []store.Credential) string {
	var kept []string
	skip := false
	for _, line := range strings.SplitAfter(existing, "\n") {
		switch strings.TrimSpace(line) {
		case GitConfigBegin:
			skip = true
			continue
		case GitConfigEnd:
			skip = false
			continue
		}
		if !skip && line != "" {
			kept = append(kept, line)
		}
	}
	out := strings.Join(kept, "")
	if out != "" && !strings.HasSuffix(out, "\n") {
		out += "\n"
	}
	if len(creds) == 0 {
		return out
	}
	var b strings.Builder
	b.WriteString(out)
	b.WriteString(GitConfigBegin + "\n")
	for _, c := range creds {
		fmt.Fprintf(&b, "[url %q]\n\tinsteadOf = %s\n", ProxyURL(c.Name), c.URL)
	}
	b.WriteString(GitConfigEnd + "\n")
	return b.String()
}
