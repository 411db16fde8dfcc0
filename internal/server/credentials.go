package server

import (
	"net/http"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/credentials"
)

func (s *Server) credentialRoutes() {
	s.handle("POST /v1/credentials", s.createCredential)
	s.handle("GET /v1/credentials", s.listCredentials)
	s.handle("GET /v1/credentials/{name}", s.getCredential)
	s.handle("DELETE /v1/credentials/{name}", s.deleteCredential)
}

func (s *Server) createCredential(w http.ResponseWriter, r *http.Request) error {
	n, err := s.networking()
	if err != nil {
		return err
	}
	var req api.CreateCredentialRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	c, err := n.credentials.Create(r.Context(), callerOf(r.Context()).team, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, credentials.ToAPI(c))
	return nil
}

func (s *Server) listCredentials(w http.ResponseWriter, r *http.Request) error {
	n, err := s.networking()
	if err != nil {
		return err
	}
	cs, err := n.credentials.List(r.Context(), callerOf(r.Context()).team)
	if err != nil {
		return err
	}
	out := api.CredentialList{Credentials: make([]api.Credential, 0, len(cs))}
	for _, c := range cs {
		out.Credentials = append(out.Credentials, credentials.ToAPI(c))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getCredential(w http.ResponseWriter, r *http.Request) error {
	n, err := s.networking()
	if err != nil {
		return err
	}
	c, err := n.credentials.Get(r.Context(), callerOf(r.Context()).team, r.PathValue("name"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, credentials.ToAPI(c))
	return nil
}

func (s *Server) deleteCredential(w http.ResponseWriter, r *http.Request) error {
	n, err := s.networking()
	if err != nil {
		return err
	}
	if err := n.credentials.Delete(r.Context(), callerOf(r.Context()).team, r.PathValue("name")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
