package e2b

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/sandbox"
)

// Open streams (a process's output, a terminal, a watch) are ended when
// their sandbox is paused, reverted or deleted, however that happens (the
// E2B SDK, Warren's API, the idle policy): a paused sandbox's connections
// would otherwise hang, and the SDK's background handles with them. The
// Handler is a sandbox.Observer for this.

// errSandboxStopped is the cause of a stream's context ended that way.
var errSandboxStopped = errors.New("the sandbox was paused or deleted")

type streamSet struct {
	mu sync.Mutex
	m  map[string]map[*context.CancelCauseFunc]struct{}
}

// track returns a context for a stream of sandbox id that is cancelled
// with errSandboxStopped when the sandbox stops, and a func to call when
// the stream ends.
func (s *streamSet) track(ctx context.Context, id string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	s.mu.Lock()
	if s.m == nil {
		s.m = map[string]map[*context.CancelCauseFunc]struct{}{}
	}
	if s.m[id] == nil {
		s.m[id] = map[*context.CancelCauseFunc]struct{}{}
	}
	s.m[id][&cancel] = struct{}{}
	s.mu.Unlock()
	return ctx, func() {
		s.mu.Lock()
		delete(s.m[id], &cancel)
		if len(s.m[id]) == 0 {
			delete(s.m, id)
		}
		s.mu.Unlock()
		cancel(context.Canceled)
	}
}

// stop ends the streams of sandbox id.
func (s *streamSet) stop(id string) {
	s.mu.Lock()
	set := s.m[id]
	delete(s.m, id)
	s.mu.Unlock()
	for c := range set {
		(*c)(errSandboxStopped)
	}
}

// SandboxEvent implements sandbox.Observer.
func (h *Handler) SandboxEvent(_ context.Context, ev sandbox.Event) {
	switch ev.Kind {
	case api.EventPaused, api.EventIdlePaused, api.EventDeleted, api.EventReverted, api.EventStored:
		h.streams.stop(ev.SandboxID)
	}
	if ev.Kind == api.EventDeleted {
		h.workdirs.Delete(ev.SandboxID)
		h.tags.Range(func(k, _ any) bool {
			if strings.HasPrefix(k.(string), ev.SandboxID+"/") {
				h.tags.Delete(k)
			}
			return true
		})
	}
}

var _ sandbox.Observer = (*Handler)(nil)

// stoppedErr is the error to end a stream with when its context was ended
// because the sandbox stopped, or nil when the client went away (or the
// context is live).
func stoppedErr(ctx context.Context, id string) error {
	if errors.Is(context.Cause(ctx), errSandboxStopped) {
		return &connectError{Code: "unavailable", Message: fmt.Sprintf("sandbox %s was paused or deleted; connect to it again", id)}
	}
	return nil
}

// trackStream makes r's context one that ends when its sandbox stops.
func (h *Handler) trackStream(r *http.Request, id string) (*http.Request, func()) {
	ctx, done := h.streams.track(r.Context(), id)
	return r.WithContext(ctx), done
}
