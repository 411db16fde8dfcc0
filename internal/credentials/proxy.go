package credentials

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/warrenhq/warren/api"
)

// transport carries proxied requests: straight to the credential's host
// (never through a proxy the daemon's environment names, which would see
// the secret).
var transport = &http.Transport{
	Proxy:                 nil,
	ForceAttemptHTTP2:     true,
	MaxIdleConns:          64,
	IdleConnTimeout:       90 * time.Second,
	TLSHandshakeTimeout:   10 * time.Second,
	ExpectContinueTimeout: time.Second,
}

// Proxy returns the credential proxy of sandbox sandboxID: a request for
// /<name>/<rest> goes to <url of credential name><rest>, with the
// credential as basic authorization, if the sandbox may use it. Every
// request looks the sandbox and the credential up again.
func (m *Manager) Proxy(sandboxID string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := m.proxy(w, r, sandboxID); err != nil {
			status := http.StatusBadGateway
			switch {
			case errors.Is(err, api.ErrInvalid):
				status = http.StatusBadRequest
			case errors.Is(err, api.ErrForbidden):
				status = http.StatusForbidden
			case errors.Is(err, api.ErrNotFound):
				status = http.StatusNotFound
			}
			m.log.Debug("credential proxy refused a request", "sandbox_id", sandboxID, "path", r.URL.Path, "err", err)
			http.Error(w, "warren credential proxy: "+err.Error(), status)
		}
	})
}

func (m *Manager) proxy(w http.ResponseWriter, r *http.Request, sandboxID string) error {
	name, rest, ok := strings.Cut(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
	if !ok || !ValidName(name) {
		return fmt.Errorf("want /<credential>/<path>, like %s<path>: %w", ProxyURL("NAME"), api.ErrInvalid)
	}
	for _, seg := range strings.Split(rest, "/") {
		if s, err := url.PathUnescape(seg); err != nil || s == "." || s == ".." {
			return fmt.Errorf("path segments . and .. are not allowed: %w", api.ErrInvalid)
		}
	}
	ctx := r.Context()
	sb, err := m.store.GetSandbox(ctx, "", sandboxID)
	if err != nil {
		return fmt.Errorf("this sandbox is gone: %w", api.ErrForbidden)
	}
	if !slices.Contains(sb.Network.GitCredentials, name) {
		return fmt.Errorf("credential %q is not granted to this sandbox (its network.git_credentials): %w", name, api.ErrForbidden)
	}
	c, err := m.store.GetCredential(ctx, sb.TeamID, name)
	if err != nil {
		return fmt.Errorf("credential %q was revoked: %w", name, api.ErrNotFound)
	}
	secret, err := m.open(c)
	if err != nil {
		return err
	}
	target, err := url.Parse(c.URL + rest)
	if err != nil || !strings.HasPrefix(target.String(), c.URL) {
		return fmt.Errorf("path %q: %w", rest, api.ErrInvalid)
	}
	target.RawQuery = r.URL.RawQuery
	local := ProxyURL(name)
	start := time.Now()
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = target
			pr.Out.Host = target.Host
			pr.Out.Header.Del("Authorization")
			pr.Out.Header.Del("Proxy-Authorization")
			pr.Out.SetBasicAuth(c.Username, string(secret))
		},
		Transport:     transport,
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			// A redirect within the prefix stays on the proxy.
			if loc := resp.Header.Get("Location"); strings.HasPrefix(loc, c.URL) {
				resp.Header.Set("Location", local+strings.TrimPrefix(loc, c.URL))
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			m.log.Warn("credential proxy: upstream failed", "sandbox_id", sandboxID, "credential", name, "url", c.URL, "err", err)
			http.Error(w, fmt.Sprintf("warren credential proxy: %s did not answer: %v", target.Host, err), http.StatusBadGateway)
		},
	}
	rp.ServeHTTP(w, r)
	m.log.Debug("credential proxy request", "sandbox_id", sandboxID, "credential", name, "method", r.Method,
		"path", target.Path, "took", time.Since(start).Round(time.Millisecond))
	return nil
}
