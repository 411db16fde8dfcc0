package server

import (
	"fmt"
	"net/http"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/credentials"
	"github.com/warrenhq/warren/internal/store"
	"github.com/warrenhq/warren/internal/volume"
)

// networking is what the volume, credential and network calls need.
type networking struct {
	volumes     *volume.Manager
	credentials *credentials.Manager
}

// SetNetworking gives s the volumes and credentials it serves; without,
// those calls answer unavailable.
func (s *Server) SetNetworking(v *volume.Manager, c *credentials.Manager) {
	s.netw = &networking{volumes: v, credentials: c}
}

func (s *Server) networking() (*networking, error) {
	if s.netw == nil {
		return nil, fmt.Errorf("volumes and credentials are not available on this server: %w", api.ErrUnavailable)
	}
	return s.netw, nil
}

func (s *Server) volumeRoutes() {
	s.handle("POST /v1/volumes", s.createVolume)
	s.handle("GET /v1/volumes", s.listVolumes)
	s.handle("GET /v1/volumes/{name}", s.getVolume)
	s.handle("DELETE /v1/volumes/{name}", s.deleteVolume)
}

// volumeToAPI is the API's view of v, with its usage and users.
func (s *Server) volumeToAPI(r *http.Request, n *networking, v store.Volume) (api.Volume, error) {
	out := api.Volume{Name: v.Name, SizeMB: v.SizeMB, CreatedAt: v.CreatedAt, UsedBy: []string{}}
	u, err := n.volumes.Usage(v.ID)
	if err != nil {
		return out, err
	}
	out.UsedBytes, out.AvailableBytes = u.UsedBytes, u.AvailableBytes
	users, err := n.volumes.Users(r.Context(), v.TeamID, v.Name)
	if err != nil {
		return out, err
	}
	if users != nil {
		out.UsedBy = users
	}
	return out, nil
}

func (s *Server) createVolume(w http.ResponseWriter, r *http.Request) error {
	n, err := s.networking()
	if err != nil {
		return err
	}
	var req api.CreateVolumeRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	v, err := n.volumes.Create(r.Context(), callerOf(r.Context()).team, req)
	if err != nil {
		return err
	}
	out, err := s.volumeToAPI(r, n, v)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request) error {
	n, err := s.networking()
	if err != nil {
		return err
	}
	vols, err := n.volumes.List(r.Context(), callerOf(r.Context()).team)
	if err != nil {
		return err
	}
	out := api.VolumeList{Volumes: make([]api.Volume, 0, len(vols))}
	for _, v := range vols {
		av, err := s.volumeToAPI(r, n, v)
		if err != nil {
			return err
		}
		out.Volumes = append(out.Volumes, av)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getVolume(w http.ResponseWriter, r *http.Request) error {
	n, err := s.networking()
	if err != nil {
		return err
	}
	v, err := n.volumes.Get(r.Context(), callerOf(r.Context()).team, r.PathValue("name"))
	if err != nil {
		return err
	}
	out, err := s.volumeToAPI(r, n, v)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) deleteVolume(w http.ResponseWriter, r *http.Request) error {
	n, err := s.networking()
	if err != nil {
		return err
	}
	if err := n.volumes.Delete(r.Context(), callerOf(r.Context()).team, r.PathValue("name")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
