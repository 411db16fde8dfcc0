// Package events records the lifecycle changes of sandboxes and delivers
// them to their team: as Server-Sent Events (GET /v1/events) and to
// webhooks.
//
// Every change is stored with an id that increases across the server and
// is never reused, before it is delivered, so a stream that drops resumes
// exactly after the last id it saw (Last-Event-ID), and a webhook resumes
// after a restart from the last event it delivered. Events are kept for
// the retention period (default 7 days), then pruned; a stream resuming
// from before that gets what is left. Failed operations are recorded only
// when they are the server's fault (internal, unavailable): an answer the
// caller already got (invalid, not found, conflict) is not an event.
// Quota refusals are.
package events

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/sandbox"
	"github.com/warrenhq/warren/internal/store"
)

// Config configures a Hub.
type Config struct {
	// Retention is how long events are kept.
	Retention time.Duration
	// WebhookAttempts bounds the deliveries of one event to one webhook.
	WebhookAttempts int
	// WebhookBackoff is the wait before the first retry; it doubles at
	// each retry, up to WebhookMaxBackoff.
	WebhookBackoff    time.Duration
	WebhookMaxBackoff time.Duration
	// WebhookTimeout bounds one delivery.
	WebhookTimeout time.Duration
}

// DefaultConfig is a week of events and webhook retries over about 4
// minutes (1 s, 2 s, ... 2 min between 8 attempts).
func DefaultConfig() Config {
	return Config{Retention: 7 * 24 * time.Hour, WebhookAttempts: 8, WebhookBackoff: time.Second,
		WebhookMaxBackoff: 2 * time.Minute, WebhookTimeout: 10 * time.Second}
}

// Hub stores events and delivers them. It is a sandbox.Observer.
type Hub struct {
	st  *store.Store
	cfg Config
	log *slog.Logger

	qmu   sync.Mutex
	queue []sandbox.Event
	wake  chan struct{}

	mu     sync.Mutex
	subs   map[string]map[*sub]struct{} // by team id
	hooks  map[string]*hookWorker       // by webhook id
	ctx    context.Context
	closed chan struct{}
	done   chan struct{}
}

var _ sandbox.Observer = (*Hub)(nil)

// New returns a Hub; Start it to record and deliver.
func New(st *store.Store, cfg Config, log *slog.Logger) *Hub {
	d := DefaultConfig()
	if cfg.Retention <= 0 {
		cfg.Retention = d.Retention
	}
	if cfg.WebhookAttempts <= 0 {
		cfg.WebhookAttempts = d.WebhookAttempts
	}
	if cfg.WebhookBackoff <= 0 {
		cfg.WebhookBackoff = d.WebhookBackoff
	}
	if cfg.WebhookMaxBackoff <= 0 {
		cfg.WebhookMaxBackoff = d.WebhookMaxBackoff
	}
	if cfg.WebhookTimeout <= 0 {
		cfg.WebhookTimeout = d.WebhookTimeout
	}
	return &Hub{st: st, cfg: cfg, log: log, wake: make(chan struct{}, 1),
		subs: map[string]map[*sub]struct{}{}, hooks: map[string]*hookWorker{}, closed: make(chan struct{})}
}

// userErrors are failures whose answer the caller already has.
var userErrors = map[string]bool{api.CodeInvalid: true, api.CodeNotFound: true, api.CodeConflict: true,
	api.CodeUnauthorized: true, api.CodeForbidden: true}

// recorded reports whether ev is an event a team is told of.
func recorded(ev sandbox.Event) bool {
	if ev.TeamID == "" || ev.Pool != "" {
		return false
	}
	return !(ev.Failed() && userErrors[ev.Code])
}

// ToAPI is the wire form of ev.
func ToAPI(ev sandbox.Event) api.Event {
	return api.Event{Kind: ev.Kind, SandboxID: ev.SandboxID, SnapshotID: ev.SnapshotID, State: ev.State,
		Op: ev.Op, Error: ev.Error, DurationMS: ev.Duration.Milliseconds(), At: ev.At.UTC()}
}

// SandboxEvent queues ev to be recorded and delivered; it never blocks.
func (h *Hub) SandboxEvent(_ context.Context, ev sandbox.Event) {
	if !recorded(ev) {
		return
	}
	h.qmu.Lock()
	h.queue = append(h.queue, ev)
	h.qmu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// Start records and delivers events until ctx ends; then streams end
// (clients reconnect to the next server with Last-Event-ID).
func (h *Hub) Start(ctx context.Context) error {
	hooks, err := h.st.ListWebhooks(ctx, "")
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.ctx = ctx
	for _, w := range hooks {
		h.startHook(w)
	}
	h.mu.Unlock()
	h.done = make(chan struct{})
	go h.loop(ctx)
	return nil
}

// Done is closed once the hub has stopped.
func (h *Hub) Done() <-chan struct{} { return h.done }

func (h *Hub) loop(ctx context.Context) {
	defer close(h.done)
	prune := time.NewTicker(time.Hour)
	defer prune.Stop()
	h.prune(ctx)
	for {
		select {
		case <-ctx.Done():
			h.record(context.WithoutCancel(ctx)) // what was queued is kept
			h.mu.Lock()
			close(h.closed)
			h.mu.Unlock()
			return
		case <-h.wake:
			h.record(ctx)
		case <-prune.C:
			h.prune(ctx)
		}
	}
}

func (h *Hub) prune(ctx context.Context) {
	if n, err := h.st.PruneEvents(ctx, time.Now().Add(-h.cfg.Retention)); err != nil {
		if ctx.Err() == nil {
			h.log.Warn("events: pruning", "err", err)
		}
	} else if n > 0 {
		h.log.Debug("events: pruned", "events", n)
	}
}

// Flush records what is queued now; tests and shutdown use it.
func (h *Hub) Flush(ctx context.Context) { h.record(ctx) }

// record stores the queued events in order and delivers them.
func (h *Hub) record(ctx context.Context) {
	h.qmu.Lock()
	q := h.queue
	h.queue = nil
	h.qmu.Unlock()
	if len(q) == 0 {
		return
	}
	rows := make([]*store.EventRow, 0, len(q))
	for _, ev := range q {
		data, _ := json.Marshal(ToAPI(ev))
		rows = append(rows, &store.EventRow{TeamID: ev.TeamID, Kind: ev.Kind, SandboxID: ev.SandboxID, At: ev.At, Data: data})
	}
	if err := h.st.AppendEvents(ctx, rows); err != nil {
		h.log.Error("events: recording; these events are lost", "events", len(rows), "err", err)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range rows {
		ev := rowToAPI(*r)
		for s := range h.subs[r.TeamID] {
			select {
			case s.ch <- ev:
			default:
				// Too slow: it catches up from the store.
				s.lagged.Store(true)
				select {
				case s.poke <- struct{}{}:
				default:
				}
			}
		}
		for _, w := range h.hooks {
			if w.hook.TeamID == r.TeamID {
				w.poke()
			}
		}
	}
}

func rowToAPI(r store.EventRow) api.Event {
	var ev api.Event
	json.Unmarshal(r.Data, &ev)
	ev.ID = r.ID
	return ev
}

type sub struct {
	ch     chan api.Event
	poke   chan struct{}
	lagged atomic.Bool
}

// PingInterval is how often an idle stream sends a keep-alive.
var PingInterval = 15 * time.Second

// Subscribe sends teamID's events with ids above after to send, in order,
// then each new one as it is recorded, until ctx ends, the hub stops, or
// send fails. ping is called when nothing was sent for PingInterval.
func (h *Hub) Subscribe(ctx context.Context, teamID string, after int64, send func(api.Event) error, ping func() error) error {
	s := &sub{ch: make(chan api.Event, 256), poke: make(chan struct{}, 1)}
	h.mu.Lock()
	if h.subs[teamID] == nil {
		h.subs[teamID] = map[*sub]struct{}{}
	}
	h.subs[teamID][s] = struct{}{}
	closed := h.closed
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.subs[teamID], s)
		if len(h.subs[teamID]) == 0 {
			delete(h.subs, teamID)
		}
		h.mu.Unlock()
	}()
	last := after
	catchUp := func() error {
		for {
			rows, err := h.st.EventsAfter(ctx, teamID, last, 500)
			if err != nil {
				return err
			}
			for _, r := range rows {
				if err := send(rowToAPI(r)); err != nil {
					return err
				}
				last = r.ID
			}
			if len(rows) < 500 {
				return nil
			}
		}
	}
	if err := catchUp(); err != nil {
		return err
	}
	t := time.NewTicker(PingInterval)
	defer t.Stop()
	for {
		select {
		case ev := <-s.ch:
			// An event dropped before this one is caught up first, so
			// none is skipped or sent out of order.
			if s.lagged.Swap(false) {
				if err := catchUp(); err != nil {
					return err
				}
			}
			if ev.ID <= last {
				continue
			}
			if err := send(ev); err != nil {
				return err
			}
			last = ev.ID
			t.Reset(PingInterval)
		case <-s.poke:
			if s.lagged.Swap(false) {
				if err := catchUp(); err != nil {
					return err
				}
			}
		case <-t.C:
			if err := ping(); err != nil {
				return err
			}
		case <-ctx.Done():
			return nil
		case <-closed:
			return nil
		}
	}
}
