package events

import (
	"context"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/sandbox"
	"github.com/warrenhq/warren/internal/store"
)

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), "warren.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	st.EnsureTeam(t.Context(), "team-a", "a")
	st.EnsureTeam(t.Context(), "team-b", "b")
	return st
}

func startHub(t *testing.T, st *store.Store, cfg Config) *Hub {
	t.Helper()
	h := New(st, cfg, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-h.Done() })
	return h
}

func ev(team, kind, id string) sandbox.Event {
	return sandbox.Event{Kind: kind, TeamID: team, SandboxID: id, State: api.StateRunning, At: time.Now().UTC()}
}

// collect subscribes and returns a channel of what arrives.
func collect(t *testing.T, h *Hub, team string, after int64) (<-chan api.Event, context.CancelFunc) {
	t.Helper()
	ch := make(chan api.Event, 100)
	ctx, cancel := context.WithCancel(t.Context())
	go h.Subscribe(ctx, team, after, func(e api.Event) error { ch <- e; return nil }, func() error { return nil })
	return ch, cancel
}

func next(t *testing.T, ch <-chan api.Event) api.Event {
	t.Helper()
	select {
	case e := <-ch:
		return e
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s")
		return api.Event{}
	}
}

func TestEventsInOrderAndResume(t *testing.T) {
	st := openStore(t)
	h := startHub(t, st, Config{})
	ch, cancel := collect(t, h, "team-a", 0)
	kinds := []string{api.EventCreated, api.EventPaused, api.EventResumed, api.EventSnapshotted, api.EventDeleted}
	for _, k := range kinds {
		h.SandboxEvent(t.Context(), ev("team-a", k, "sb-a"))
		h.SandboxEvent(t.Context(), ev("team-b", k, "sb-b")) // another team's
	}
	var got []api.Event
	for range kinds {
		got = append(got, next(t, ch))
	}
	cancel()
	for i, e := range got {
		if e.Kind != kinds[i] || e.SandboxID != "sb-a" {
			t.Errorf("event %d: got %s %s, want %s sb-a", i, e.Kind, e.SandboxID, kinds[i])
		}
		if i > 0 && e.ID <= got[i-1].ID {
			t.Errorf("ids not increasing: %d then %d", got[i-1].ID, e.ID)
		}
	}
	// Resuming after the second gives the third on.
	ch2, cancel2 := collect(t, h, "team-a", got[1].ID)
	defer cancel2()
	for i := 2; i < len(kinds); i++ {
		if e := next(t, ch2); e.ID != got[i].ID || e.Kind != kinds[i] {
			t.Errorf("resumed event: got %d %s, want %d %s", e.ID, e.Kind, got[i].ID, kinds[i])
		}
	}
	// And live ones after that.
	h.SandboxEvent(t.Context(), ev("team-a", api.EventCreated, "sb-a2"))
	if e := next(t, ch2); e.SandboxID != "sb-a2" || e.ID <= got[len(got)-1].ID {
		t.Errorf("live after resuming: got %+v", e)
	}
}

func TestEventsFiltered(t *testing.T) {
	for _, tt := range []struct {
		ev   sandbox.Event
		want bool
	}{
		{sandbox.Event{Kind: api.EventPaused, TeamID: "t", State: api.StatePaused}, true},
		{sandbox.Event{Kind: api.EventError, TeamID: "t", Op: "pause", Code: api.CodeNotFound}, false},
		{sandbox.Event{Kind: api.EventError, TeamID: "t", Op: "pause", Code: api.CodeInternal}, true},
		{sandbox.Event{Kind: api.EventError, TeamID: "t", State: api.StateError, Code: api.CodeInternal}, true},
		{sandbox.Event{Kind: api.EventQuotaRefused, TeamID: "t", Code: api.CodeQuota}, true},
		{sandbox.Event{Kind: api.EventCreated, TeamID: "t", Pool: "tpl"}, false},
		{sandbox.Event{Kind: api.EventCreated}, false},
	} {
		if got := recorded(tt.ev); got != tt.want {
			t.Errorf("recorded(%+v): got %v, want %v", tt.ev, got, tt.want)
		}
	}
}

// A subscriber that cannot keep up catches up from the store, in order,
// missing nothing.
func TestSlowSubscriber(t *testing.T) {
	st := openStore(t)
	h := startHub(t, st, Config{})
	release := make(chan struct{})
	var mu sync.Mutex
	var got []int64
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go h.Subscribe(ctx, "team-a", 0, func(e api.Event) error {
		<-release
		mu.Lock()
		got = append(got, e.ID)
		mu.Unlock()
		return nil
	}, func() error { return nil })
	time.Sleep(50 * time.Millisecond)
	const n = 600
	for i := range n {
		h.SandboxEvent(t.Context(), ev("team-a", api.EventCreated, fmt.Sprint("sb-", i)))
		if i%50 == 0 {
			h.Flush(t.Context())
		}
	}
	h.Flush(t.Context())
	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		k := len(got)
		mu.Unlock()
		if k >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != n {
		t.Fatalf("got %d events, want %d", len(got), n)
	}
	for i := 1; i < len(got); i++ {
		if got[i] != got[i-1]+1 {
			t.Fatalf("event %d: id %d after %d", i, got[i], got[i-1])
		}
	}
}

type received struct {
	id, ts, sig string
	body        []byte
}

// Webhooks get every event, in order, signed, with retries.
func TestWebhookDelivery(t *testing.T) {
	st := openStore(t)
	var mu sync.Mutex
	var got []received
	fails := 2 // the first two attempts fail
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if fails > 0 {
			fails--
			http.Error(w, "not now", http.StatusServiceUnavailable)
			return
		}
		got = append(got, received{r.Header.Get(HeaderEventID), r.Header.Get(HeaderTimestamp), r.Header.Get(HeaderSignature), body})
	}))
	defer srv.Close()

	// An event before the webhook exists is not sent to it.
	h := startHub(t, st, Config{WebhookBackoff: 10 * time.Millisecond})
	h.SandboxEvent(t.Context(), ev("team-a", api.EventCreated, "sb-before"))
	h.Flush(t.Context())
	wh, err := h.CreateWebhook(t.Context(), "team-a", srv.URL+"/hook")
	if err != nil {
		t.Fatal(err)
	}
	if wh.Secret == "" {
		t.Fatal("no secret")
	}
	for _, k := range []string{api.EventCreated, api.EventPaused, api.EventResumed} {
		h.SandboxEvent(t.Context(), ev("team-a", k, "sb-1"))
		h.SandboxEvent(t.Context(), ev("team-b", k, "sb-2"))
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // nothing more comes
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("deliveries: got %d, want 3", len(got))
	}
	var last int64
	for i, r := range got {
		var e api.Event
		if err := json.Unmarshal(r.body, &e); err != nil {
			t.Fatalf("delivery %d: %v", i, err)
		}
		if e.SandboxID != "sb-1" || strconv.FormatInt(e.ID, 10) != r.id || e.ID <= last {
			t.Errorf("delivery %d: got %+v (id header %s)", i, e, r.id)
		}
		last = e.ID
		if want := Sign(wh.Secret, r.ts, r.body); !hmac.Equal([]byte(r.sig), []byte(want)) {
			t.Errorf("delivery %d: signature %s, want %s", i, r.sig, want)
		}
		if Sign("another secret", r.ts, r.body) == r.sig {
			t.Errorf("a signature that any secret matches")
		}
	}
	ws, _ := h.ListWebhooks(t.Context(), "team-a")
	if len(ws) != 1 || ws[0].Secret != "" {
		t.Errorf("listed: got %+v, want one without its secret", ws)
	}
	if other, _ := h.ListWebhooks(t.Context(), "team-b"); len(other) != 0 {
		t.Errorf("team b sees %+v", other)
	}
}

// After a restart, a webhook resumes after the last event it delivered;
// an event given up on is recorded and skipped.
func TestWebhookGivesUpAndResumes(t *testing.T) {
	st := openStore(t)
	var mu sync.Mutex
	var ids []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		ids = append(ids, r.Header.Get(HeaderEventID))
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	h := New(st, Config{WebhookAttempts: 3, WebhookBackoff: time.Millisecond}, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	h.Start(ctx)
	wh, err := h.CreateWebhook(t.Context(), "team-a", srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	h.SandboxEvent(t.Context(), ev("team-a", api.EventCreated, "sb-1"))
	deadline := time.Now().Add(5 * time.Second)
	for {
		ws, _ := st.ListWebhooks(t.Context(), "team-a")
		if ws[0].Cursor > 0 || time.Now().After(deadline) {
			if ws[0].LastStatus != 500 || ws[0].LastError == "" {
				t.Errorf("after giving up: got %+v", ws[0])
			}
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	if len(ids) != 3 {
		t.Errorf("attempts: got %d, want 3", len(ids))
	}
	mu.Unlock()
	cancel()
	<-h.Done()

	// A new hub on the same store sends only what came after.
	h2 := New(st, Config{WebhookAttempts: 1}, slog.New(slog.DiscardHandler))
	h2.SandboxEvent(t.Context(), ev("team-a", api.EventPaused, "sb-1"))
	h2.Flush(t.Context()) // recorded before the hub starts
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer func() { cancel2(); <-h2.Done() }()
	h2.Start(ctx2)
	deadline = time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(ids)
		mu.Unlock()
		if n >= 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ids) != 4 || ids[3] == ids[0] {
		t.Errorf("after a restart: deliveries %v, want one more, of a new event", ids)
	}
	if err := h2.DeleteWebhook(t.Context(), "team-b", wh.ID); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("another team deleting it: got %v, want not found", err)
	}
}

func TestCreateWebhookInvalid(t *testing.T) {
	st := openStore(t)
	h := New(st, Config{}, slog.New(slog.DiscardHandler))
	for _, u := range []string{"", "ftp://x/y", "http://", "not a url"} {
		if _, err := h.CreateWebhook(t.Context(), "team-a", u); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("url %q: got %v, want invalid", u, err)
		}
	}
}
