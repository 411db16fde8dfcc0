package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/store"
)

type recorder struct {
	mu  sync.Mutex
	evs []Event
}

func (r *recorder) SandboxEvent(_ context.Context, ev Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, ev)
}

type refuseAll struct{ asked []AdmitRequest }

func (a *refuseAll) Admit(_ context.Context, r AdmitRequest) (func(), error) {
	a.asked = append(a.asked, r)
	return nil, &api.QuotaError{Team: r.TeamID, Op: r.Op, QuotaExceeded: api.QuotaExceeded{Limit: "running_sandboxes", Max: 1, Used: 1, Requested: 1}}
}

func TestTrackerReports(t *testing.T) {
	rec := &recorder{}
	m := &Manager{}
	m.Observe(rec)
	ctx := t.Context()

	op := func(kind string, sb store.Sandbox, err error) (res store.Sandbox, rerr error) {
		defer m.track(ctx, kind, "team-a", "sb-aaaaaaaaaaaa").done(&res, &rerr)
		return sb, err
	}
	op(api.EventPaused, store.Sandbox{ID: "sb-aaaaaaaaaaaa", TeamID: "team-a", State: api.StatePaused, CPUs: 2, MemoryMB: 256}, nil)
	op(api.EventResumed, store.Sandbox{}, fmt.Errorf("sandbox sb-aaaaaaaaaaaa is error: %w", api.ErrConflict))
	op(api.EventResumed, store.Sandbox{}, fmt.Errorf("resume refused: %w", &api.QuotaError{}))
	func() {
		defer m.track(withCause(ctx, api.EventIdlePaused), api.EventPaused, "team-a", "sb-aaaaaaaaaaaa").done(new(store.Sandbox), new(error))
	}()

	if len(rec.evs) != 3 {
		t.Fatalf("events: got %d (%+v), want 3 (a quota refusal is reported by admit, not the tracker)", len(rec.evs), rec.evs)
	}
	if got := rec.evs[0]; got.Kind != api.EventPaused || got.State != api.StatePaused || got.CPUs != 2 || got.MemoryMB != 256 || got.TeamID != "team-a" || got.At.IsZero() {
		t.Errorf("success: got %+v", got)
	}
	if got := rec.evs[1]; got.Kind != api.EventError || got.Op != "resume" || got.Code != api.CodeConflict || got.State != "" || !got.Failed() {
		t.Errorf("failure: got %+v", got)
	}
	if got := rec.evs[2]; got.Kind != api.EventIdlePaused {
		t.Errorf("idle pause: got kind %q, want %q", got.Kind, api.EventIdlePaused)
	}
}

func TestTrackerFork(t *testing.T) {
	rec := &recorder{}
	m := &Manager{}
	m.Observe(rec)
	func() (out []store.Sandbox, err error) {
		defer m.track(t.Context(), api.EventForked, "team-a", "sn-aaaaaaaaaaaa").doneFork(&out, &err)
		return []store.Sandbox{{ID: "sb-1", State: api.StateRunning}, {ID: "sb-2", State: api.StateRunning}}, nil
	}()
	if len(rec.evs) != 2 || rec.evs[0].SandboxID != "sb-1" || rec.evs[1].SnapshotID != "sn-aaaaaaaaaaaa" || rec.evs[1].Kind != api.EventForked {
		t.Errorf("fork events: got %+v", rec.evs)
	}
}

func TestAdmitRefusalIsReported(t *testing.T) {
	rec := &recorder{}
	m := &Manager{}
	m.Observe(rec)
	// Without an admission everything is admitted.
	release, err := m.admit(t.Context(), AdmitRequest{Op: "create", TeamID: "team-a", Sandboxes: 1})
	if err != nil || release == nil {
		t.Fatalf("no admission: got %v", err)
	}
	release()
	a := &refuseAll{}
	m.SetAdmission(a)
	_, err = m.admit(t.Context(), AdmitRequest{Op: "resume", TeamID: "team-a", SandboxID: "sb-aaaaaaaaaaaa", Sandboxes: 1})
	if !errors.Is(err, api.ErrQuota) {
		t.Fatalf("admit: got %v, want a quota error", err)
	}
	if len(rec.evs) != 1 || rec.evs[0].Kind != api.EventQuotaRefused || rec.evs[0].Op != "resume" || rec.evs[0].Code != api.CodeQuota {
		t.Errorf("events: got %+v, want one quota-refused", rec.evs)
	}
}

func TestNoObserversNoWork(t *testing.T) {
	m := &Manager{}
	err := errors.New("x")
	m.track(t.Context(), api.EventPaused, "t", "id").done(&store.Sandbox{}, &err) // must not panic
}
