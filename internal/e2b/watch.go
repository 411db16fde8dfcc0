package e2b

import (
	"net/http"
	"strings"
	"time"

	"github.com/warrenhq/warren/api"
)

// WatchDir is served by polling the agent's listing of the directory, as
// the agent has no change notification: every watchEvery, the listing is
// compared with the last one. A file made and removed between two looks
// goes unseen, and a rename shows as a remove and a create.

const (
	watchEvery    = 200 * time.Millisecond
	watchMaxDepth = 32
)

type watchRequest struct {
	Path         string `json:"path"`
	Recursive    bool   `json:"recursive"`
	IncludeEntry bool   `json:"includeEntry"`
}

type fsEvent struct {
	Name  string     `json:"name"`
	Type  string     `json:"type"`
	Entry *entryInfo `json:"entry,omitempty"`
}

type watchMessage struct {
	Start      *struct{} `json:"start,omitempty"`
	Filesystem *fsEvent  `json:"filesystem,omitempty"`
	Keepalive  *struct{} `json:"keepalive,omitempty"`
}

func (h *Handler) watchDir(w http.ResponseWriter, r *http.Request, c *sandboxCall) {
	var req watchRequest
	if err := readEnvelope(r, &req); err != nil {
		streamError(w, err)
		return
	}
	var err error
	if req.Path, err = h.abs(r.Context(), c, req.Path); err != nil {
		streamError(w, err)
		return
	}
	depth := 1
	if req.Recursive {
		depth = watchMaxDepth
	}
	ctx := r.Context()
	look := func() (map[string]api.FileEntry, error) {
		entries, err := c.agent.List(ctx, req.Path, depth)
		if err != nil {
			return nil, err
		}
		m := make(map[string]api.FileEntry, len(entries))
		for _, e := range entries {
			m[e.Path] = e
		}
		return m, nil
	}
	st, err := c.agent.Stat(ctx, req.Path)
	if err == nil && st.Type != "dir" {
		err = &connectError{Code: "invalid_argument", Message: req.Path + " is not a directory"}
	}
	var last map[string]api.FileEntry
	if err == nil {
		last, err = look()
	}
	if err != nil {
		streamError(w, err)
		return
	}
	s := newStream(w)
	if s.send(watchMessage{Start: &struct{}{}}) != nil {
		return
	}
	base := strings.TrimSuffix(st.Path, "/") + "/"
	send := func(typ string, e api.FileEntry) error {
		ev := &fsEvent{Name: strings.TrimPrefix(e.Path, base), Type: typ}
		if req.IncludeEntry && typ != "EVENT_TYPE_REMOVE" {
			info := toEntry(e)
			ev.Entry = &info
		}
		return s.send(watchMessage{Filesystem: ev})
	}
	tick := time.NewTicker(watchEvery)
	defer tick.Stop()
	quiet := time.Now()
	for {
		select {
		case <-ctx.Done():
			if err := stoppedErr(ctx, c.id); err != nil {
				s.end(err)
			}
			return
		case <-tick.C:
		}
		now, err := look()
		if err != nil {
			if serr := stoppedErr(ctx, c.id); serr != nil {
				s.end(serr)
			} else if ctx.Err() == nil {
				s.end(err)
			}
			return
		}
		sent := false
		for p, e := range now {
			old, ok := last[p]
			switch {
			case !ok:
				err = send("EVENT_TYPE_CREATE", e)
			case old.Size != e.Size || !old.ModTime.Equal(e.ModTime):
				err = send("EVENT_TYPE_WRITE", e)
			case old.Mode != e.Mode:
				err = send("EVENT_TYPE_CHMOD", e)
			default:
				continue
			}
			sent = true
			if err != nil {
				return
			}
		}
		for p, e := range last {
			if _, ok := now[p]; !ok {
				if send("EVENT_TYPE_REMOVE", e) != nil {
					return
				}
				sent = true
			}
		}
		last = now
		if sent {
			quiet = time.Now()
		} else if time.Since(quiet) > keepaliveEvery {
			if s.send(watchMessage{Keepalive: &struct{}{}}) != nil {
				return
			}
			quiet = time.Now()
		}
	}
}
