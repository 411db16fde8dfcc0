package server

// What runs inside a sandbox (named shells, background jobs, code contexts,
// the terminal, archives) is served by the sandbox's agent, as exec and
// files are: the daemon checks the caller and the sandbox's state and passes
// the request on with the /v1/sandboxes/{id} prefix taken off. Job output
// with follow=true streams through (the proxy flushes at once), and the
// terminal's WebSocket upgrade goes through httputil.ReverseProxy, which
// hands the connection over once the agent answers 101.
func (s *Server) insideRoutes() {
	s.handle("POST /v1/sandboxes/{id}/shells", s.proxyToAgent)
	s.handle("GET /v1/sandboxes/{id}/shells", s.proxyToAgent)
	s.handle("DELETE /v1/sandboxes/{id}/shells/{name}", s.proxyToAgent)

	s.handle("GET /v1/sandboxes/{id}/jobs", s.proxyToAgent)
	s.handle("GET /v1/sandboxes/{id}/jobs/{job}", s.proxyToAgent)
	s.handle("DELETE /v1/sandboxes/{id}/jobs/{job}", s.proxyToAgent)
	s.handle("GET /v1/sandboxes/{id}/jobs/{job}/output", s.proxyToAgent)
	s.handle("POST /v1/sandboxes/{id}/jobs/{job}/kill", s.proxyToAgent)
	s.handle("POST /v1/sandboxes/{id}/jobs/{job}/stdin", s.proxyToAgent)

	s.handle("POST /v1/sandboxes/{id}/code", s.proxyToAgent)
	s.handle("GET /v1/sandboxes/{id}/code/contexts", s.proxyToAgent)
	s.handle("POST /v1/sandboxes/{id}/code/contexts", s.proxyToAgent)
	s.handle("DELETE /v1/sandboxes/{id}/code/contexts/{name}", s.proxyToAgent)
	s.handle("POST /v1/sandboxes/{id}/code/contexts/{name}/restart", s.proxyToAgent)

	s.handle("GET /v1/sandboxes/{id}/pty", s.proxyToAgent)

	s.handle("GET /v1/sandboxes/{id}/files/archive", s.proxyToAgent)
	s.handle("PUT /v1/sandboxes/{id}/files/archive", s.proxyToAgent)
}
