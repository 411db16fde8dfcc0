package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/sandbox"
	"github.com/warrenhq/warren/internal/store"
)

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) error {
	var req api.CreateSandboxRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	sb, err := s.sandboxes.Create(r.Context(), callerOf(r.Context()).team, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, sandbox.ToAPI(sb))
	return nil
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) error {
	sb, err := s.sandboxes.Get(r.Context(), callerOf(r.Context()).team, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sandbox.ToAPI(sb))
	return nil
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) error {
	f := store.Filter{Team: callerOf(r.Context()).team, Metadata: map[string]string{}}
	for k, vs := range r.URL.Query() {
		switch {
		case k == "state":
			f.State = vs[0]
			switch f.State {
			case api.StateCreating, api.StateRunning, api.StatePaused, api.StateError:
			default:
				return fmt.Errorf("state %q: use creating, running, paused or error: %w", f.State, api.ErrInvalid)
			}
		case strings.HasPrefix(k, "metadata."):
			f.Metadata[strings.TrimPrefix(k, "metadata.")] = vs[0]
		default:
			return fmt.Errorf("unknown query parameter %q: filter with state= or metadata.KEY=VALUE: %w", k, api.ErrInvalid)
		}
	}
	sbs, err := s.sandboxes.List(r.Context(), f)
	if err != nil {
		return err
	}
	out := api.SandboxList{Sandboxes: make([]api.Sandbox, 0, len(sbs))}
	for _, sb := range sbs {
		out.Sandboxes = append(out.Sandboxes, sandbox.ToAPI(sb))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request) error {
	if err := s.sandboxes.Delete(r.Context(), callerOf(r.Context()).team, r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// exec and files are served by the sandbox's agent, whose API has the same
// semantics with the /v1/sandboxes/{id} prefix taken off; the daemon checks
// the caller and the sandbox's state and passes the request on.
func (s *Server) exec(w http.ResponseWriter, r *http.Request) error { return s.proxyToAgent(w, r) }

func (s *Server) files(w http.ResponseWriter, r *http.Request) error { return s.proxyToAgent(w, r) }

func (s *Server) proxyToAgent(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	client, err := s.sandboxes.Agent(r.Context(), callerOf(r.Context()).team, id)
	if err != nil {
		return err
	}
	defer s.sandboxes.Begin(id)()
	target, err := url.Parse(client.BaseURL())
	if err != nil {
		return err
	}
	prefix := "/v1/sandboxes/" + id
	if err := s.injectEnv(r, id, strings.TrimPrefix(r.URL.Path, prefix)); err != nil {
		return err
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = target.Scheme
			pr.Out.URL.Host = target.Host
			pr.Out.URL.Path = strings.TrimPrefix(pr.In.URL.Path, prefix)
			pr.Out.URL.RawPath = ""
			pr.Out.Host = target.Host
			pr.Out.Header.Del("Authorization")
		},
		Transport:     client.Transport(),
		FlushInterval: -1, // NDJSON lines go out as the command writes them
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			if req.Context().Err() != nil {
				return // the client went away
			}
			writeError(w, r, s.log, fmt.Errorf("sandbox %s: its agent did not answer (%v); if this persists, check `warren get %s` and the sandbox's agent.log: %w", id, err, id, api.ErrUnavailable))
		},
	}
	rp.ServeHTTP(w, r)
	return nil
}

// maxExecBody bounds an exec or shell body the daemon rewrites (stdin is
// carried in it).
const maxExecBody = 64 << 20

// injectEnv adds the environment a sandbox made from a snapshot or template
// asked for at create to the body of calls that start commands (exec, new
// shells), under what the call itself sets. The processes a snapshot
// restores keep the environment they had; this is how the rest see the
// new one.
func (s *Server) injectEnv(r *http.Request, id, path string) error {
	extra := s.sandboxes.ExtraEnv(id)
	if len(extra) == 0 || r.Method != http.MethodPost || (path != "/exec" && path != "/shells") {
		return nil
	}
	b, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxExecBody))
	if err != nil {
		return fmt.Errorf("reading the request body (at most %d bytes): %v: %w", maxExecBody, err, api.ErrInvalid)
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	var body map[string]json.RawMessage
	if err := json.Unmarshal(b, &body); err != nil {
		return fmt.Errorf("request body is not a JSON object: %v: %w", err, api.ErrInvalid)
	}
	// A call in a named shell runs with the shell's own environment (the
	// shell got the extra environment when it was made, and what it has
	// exported since must win).
	if raw, ok := body["shell"]; ok && path == "/exec" {
		var shell string
		if json.Unmarshal(raw, &shell) == nil && shell != "" {
			return nil
		}
	}
	env := map[string]string{}
	for k, v := range extra {
		env[k] = v
	}
	if raw, ok := body["env"]; ok {
		var own map[string]string
		if err := json.Unmarshal(raw, &own); err != nil {
			return fmt.Errorf("env: want an object of strings: %v: %w", err, api.ErrInvalid)
		}
		for k, v := range own {
			env[k] = v
		}
	}
	body["env"], _ = json.Marshal(env)
	out, _ := json.Marshal(body)
	r.Body = io.NopCloser(bytes.NewReader(out))
	r.ContentLength = int64(len(out))
	r.Header.Set("Content-Length", strconv.Itoa(len(out)))
	return nil
}

func writeLine(w io.Writer, v any) {
	b, _ := json.Marshal(v)
	w.Write(append(b, '\n'))
}
