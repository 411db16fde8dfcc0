package e2b

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/store"
)

// The control plane authenticates with X-API-KEY, a Warren API key. The
// sandbox surfaces authenticate with the access token create and connect
// return as envdAccessToken (and trafficAccessToken, which the code
// interpreter sends on every call): "<key id>.<mac>", where mac is an
// HMAC-SHA256 of the sandbox id keyed with the API key's stored hash. A
// token is thus bound to one sandbox and one key, survives daemon restarts,
// and dies with the key when it is revoked.

// tokenTTL bounds how long a verified token is trusted without looking its
// key up again, so a revocation takes effect within it.
const tokenTTL = 30 * time.Second

type tokenGrant struct {
	team    string
	expires time.Time
}

func hashKey(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

// apiCaller returns the team of the X-API-KEY of r.
func (h *Handler) apiCaller(r *http.Request) (store.Key, error) {
	key := strings.TrimSpace(r.Header.Get(headerAPIKey))
	if key == "" {
		return store.Key{}, fmt.Errorf("missing API key: set E2B_API_KEY to a Warren API key: %w", api.ErrUnauthorized)
	}
	k, err := h.keys.KeyByHash(r.Context(), hashKey(key))
	if err != nil {
		return store.Key{}, fmt.Errorf("API key not recognised or revoked: set E2B_API_KEY to a Warren API key: %w", api.ErrUnauthorized)
	}
	return k, nil
}

func tokenMAC(keyHash, sandboxID string) string {
	m := hmac.New(sha256.New, []byte(keyHash))
	m.Write([]byte("warren-e2b-envd\x00" + sandboxID))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// accessToken is the envd access token of sandbox id for key k.
func accessToken(k store.Key, sandboxID string) string {
	return k.ID + "." + tokenMAC(k.Hash, sandboxID)
}

// sandboxCaller returns the team a sandbox request's access token speaks
// for.
func (h *Handler) sandboxCaller(ctx context.Context, r *http.Request, sandboxID string) (string, error) {
	tok := r.Header.Get(headerAccessToken)
	if tok == "" {
		tok = r.Header.Get(headerTraffic)
	}
	if tok == "" {
		return "", fmt.Errorf("missing X-Access-Token: use the envdAccessToken Sandbox.create or Sandbox.connect returned: %w", api.ErrUnauthorized)
	}
	cacheKey := sandboxID + "\x00" + tok
	if g, ok := h.tokens.Load(cacheKey); ok && time.Now().Before(g.(tokenGrant).expires) {
		return g.(tokenGrant).team, nil
	}
	bad := fmt.Errorf("access token not valid for sandbox %s (or its API key was revoked); connect again with Sandbox.connect: %w", sandboxID, api.ErrUnauthorized)
	// The MAC is hex; the key id is everything before the last dot.
	i := strings.LastIndexByte(tok, '.')
	if i <= 0 {
		return "", bad
	}
	keyID, mac := tok[:i], tok[i+1:]
	k, err := h.keys.GetKey(ctx, keyID)
	if err != nil {
		if errors.Is(err, api.ErrNotFound) {
			return "", bad
		}
		return "", err
	}
	if k.RevokedAt != nil || !hmac.Equal([]byte(mac), []byte(tokenMAC(k.Hash, sandboxID))) {
		return "", bad
	}
	h.tokens.Store(cacheKey, tokenGrant{team: k.TeamID, expires: time.Now().Add(tokenTTL)})
	return k.TeamID, nil
}
