package server

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"

	"github.com/warrenhq/warren/api"
)

// The ports proxy: /v1/sandboxes/{id}/ports/{port}/{path...} is served by
// whatever listens on port inside the sandbox (HTTP and WebSocket), which
// the host reaches at the sandbox's address. A paused sandbox is resumed
// first. The caller's API key is not passed on.

func (s *Server) portRoutes() {
	s.handle("GET /v1/sandboxes/{id}/ports/{port}/{path...}", s.portProxy)
	s.handle("POST /v1/sandboxes/{id}/ports/{port}/{path...}", s.portProxy)
	s.handle("PUT /v1/sandboxes/{id}/ports/{port}/{path...}", s.portProxy)
	s.handle("PATCH /v1/sandboxes/{id}/ports/{port}/{path...}", s.portProxy)
	s.handle("DELETE /v1/sandboxes/{id}/ports/{port}/{path...}", s.portProxy)
	s.handle("OPTIONS /v1/sandboxes/{id}/ports/{port}/{path...}", s.portProxy)
}

// portTransport reaches sandboxes directly, never through a proxy the
// daemon's environment names.
var portTransport = &http.Transport{
	Proxy:                 nil,
	DialContext:           (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	MaxIdleConnsPerHost:   16,
	IdleConnTimeout:       30 * time.Second,
	ExpectContinueTimeout: time.Second,
}

func (s *Server) portProxy(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	team := callerOf(ctx).team
	id, portText := r.PathValue("id"), r.PathValue("port")
	port, err := strconv.Atoi(portText)
	if err != nil || port < 1 || port > 65535 || strconv.Itoa(port) != portText {
		return fmt.Errorf("port %q: want a TCP port, 1 to 65535: %w", portText, api.ErrInvalid)
	}
	if port == api.AgentPort {
		return fmt.Errorf("port %d is Warren's agent; reach it through the API's exec, files and shells calls: %w", port, api.ErrInvalid)
	}
	sb, err := s.sandboxes.Get(ctx, team, id)
	if err != nil {
		return err
	}
	if sb.State == api.StatePaused {
		if _, err := s.sandboxes.Resume(ctx, team, id); err != nil {
			return err
		}
	}
	addr, err := s.sandboxes.Addr(ctx, team, id)
	if err != nil {
		return err
	}
	defer s.sandboxes.Begin(id)()
	prefix := "/v1/sandboxes/" + id + "/ports/" + portText
	target := net.JoinHostPort(addr.String(), portText)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = target
			pr.Out.URL.Path = "/" + strings.TrimPrefix(strings.TrimPrefix(pr.In.URL.Path, prefix), "/")
			pr.Out.URL.RawPath = ""
			if raw := pr.In.URL.RawPath; raw != "" {
				pr.Out.URL.RawPath = "/" + strings.TrimPrefix(strings.TrimPrefix(raw, prefix), "/")
			}
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Del("Authorization")
			pr.SetXForwarded()
			pr.Out.Header.Set("X-Forwarded-Prefix", prefix)
		},
		Transport:     portTransport,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			if req.Context().Err() != nil {
				return // the client went away
			}
			writeError(w, r, s.log, fmt.Errorf("sandbox %s: nothing answers on port %d (%v); start a server listening on 0.0.0.0:%d inside: %w",
				id, port, err, port, api.ErrUnavailable))
		},
	}
	rp.ServeHTTP(w, r)
	return nil
}
