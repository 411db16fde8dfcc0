package server

import (
	"context"
	"fmt"
	"net/http"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/image"
	"github.com/warrenhq/warren/internal/store"
)

func (s *Server) listImages(w http.ResponseWriter, r *http.Request) error {
	imgs, err := s.images.List(r.Context())
	if err != nil {
		return err
	}
	if imgs == nil {
		imgs = []api.Image{}
	}
	writeJSON(w, http.StatusOK, api.ImageList{Images: imgs})
	return nil
}

// longImageOp runs op, streaming its progress as NDJSON when the client
// asks for it, else answering the image (201) or the error once it ends.
func (s *Server) longImageOp(w http.ResponseWriter, r *http.Request, op func(ctx context.Context, progress func(api.Progress)) (api.Image, error)) error {
	if !wantsNDJSON(r) {
		img, err := op(r.Context(), func(api.Progress) {})
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, img)
		return nil
	}
	ps := newProgressStream(w)
	img, err := op(r.Context(), ps.send)
	if err != nil {
		if !ps.started {
			return err
		}
		ps.send(api.Progress{Error: err.Error()})
		return nil
	}
	ps.send(api.Progress{Done: &img})
	return nil
}

func (s *Server) requireAdmin(r *http.Request, what string) error {
	if !callerOf(r.Context()).admin {
		return fmt.Errorf("%s needs the admin key: images are shared by every team on this host: %w", what, api.ErrForbidden)
	}
	return nil
}

func (s *Server) pullImage(w http.ResponseWriter, r *http.Request) error {
	if err := s.requireAdmin(r, "pulling an image"); err != nil {
		return err
	}
	var req api.PullRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if req.Ref == "" {
		return fmt.Errorf("ref is required, like {\"ref\": \"registry.example:5000/team/app:v1\"}: %w", api.ErrInvalid)
	}
	opts := image.PullOptions{Insecure: r.URL.Query().Get("insecure") == "true"}
	return s.longImageOp(w, r, func(ctx context.Context, progress func(api.Progress)) (api.Image, error) {
		return s.images.Pull(ctx, req.Ref, req.Name, opts, progress)
	})
}

func (s *Server) importImage(w http.ResponseWriter, r *http.Request) error {
	if err := s.requireAdmin(r, "importing an image"); err != nil {
		return err
	}
	name := r.URL.Query().Get("name")
	// Progress lines go out while the archive is still coming in.
	if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
		s.log.Debug("full duplex unavailable; import progress is sent once the archive is read", "err", err)
	}
	return s.longImageOp(w, r, func(ctx context.Context, progress func(api.Progress)) (api.Image, error) {
		return s.images.Import(ctx, r.Body, name, progress)
	})
}

func (s *Server) buildImage(w http.ResponseWriter, r *http.Request) error {
	if err := s.requireAdmin(r, "building the built-in image"); err != nil {
		return err
	}
	return s.longImageOp(w, r, s.build)
}

func (s *Server) deleteImage(w http.ResponseWriter, r *http.Request) error {
	if err := s.requireAdmin(r, "deleting an image"); err != nil {
		return err
	}
	name := r.PathValue("name")
	img, err := s.images.Get(r.Context(), name)
	if err != nil {
		return err
	}
	users, err := s.store.ListSandboxes(r.Context(), store.Filter{})
	if err != nil {
		return err
	}
	for _, sb := range users {
		if sb.ImageID == img.ID {
			return fmt.Errorf("image %q is in use by sandbox %s; delete that sandbox first: %w", name, sb.ID, api.ErrConflict)
		}
	}
	if err := s.images.Delete(r.Context(), name); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
