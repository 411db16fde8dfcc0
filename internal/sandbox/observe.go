package sandbox

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/store"
)

// Observers and admission: how metering, events and metrics learn of
// lifecycle changes, and how quotas refuse an operation before it makes
// anything. The Manager calls them at each transition (one call each in
// the lifecycle code); it knows nothing of what they do.

// Observer is told of every lifecycle change of a sandbox, and of every
// operation that failed. SandboxEvent is called on the goroutine of the
// operation, after the change is recorded in the store: it must return
// quickly (queue the work) and never call back into the Manager.
type Observer interface {
	SandboxEvent(ctx context.Context, ev Event)
}

// Event is one lifecycle change of a sandbox, or an operation that failed.
type Event struct {
	// Kind is one of api.Event*: created, paused, resumed, snapshotted,
	// forked, reverted, deleted, idle-paused, stored, restored; error (an
	// operation failed, or the sandbox became error); quota-refused.
	Kind string
	// Op is the operation an error or quota-refused event is about:
	// create, pause, resume, snapshot, fork, revert, delete, store,
	// restore, recover.
	Op         string
	TeamID     string
	SandboxID  string
	SnapshotID string
	// State is the sandbox's state after the change: "" when it was
	// deleted, or when a failed operation left it as it was.
	State    string
	Stored   bool
	Pool     string
	CPUs     float64
	MemoryMB int64
	// Error says why an operation failed or the sandbox became error;
	// Code is its API error code.
	Error    string
	Code     string
	Duration time.Duration
	At       time.Time
}

// Failed reports whether ev is an operation that failed, rather than a
// change of state.
func (ev Event) Failed() bool { return ev.Kind == api.EventError && ev.State != api.StateError }

// Admission decides whether a team may have more running sandboxes,
// memory, creates or storage. Admit either refuses (an error wrapping
// api.ErrQuota) or reserves what r asks for until release is called, so
// that operations running side by side cannot together exceed a quota.
type Admission interface {
	Admit(ctx context.Context, r AdmitRequest) (release func(), err error)
}

// AdmitRequest is what an operation is about to add for a team.
type AdmitRequest struct {
	// Op is the operation: create, resume, fork, revert, snapshot.
	Op        string
	TeamID    string
	SandboxID string
	// Sandboxes will be running once the operation succeeds, with
	// MemoryMB of memory between them.
	Sandboxes int64
	MemoryMB  int64
	// Creates counts sandboxes the operation creates (forks included).
	Creates int64
	// Snapshot is set when the operation stores a snapshot.
	Snapshot bool
	// DryRun only checks: nothing is reserved or counted, and release
	// is a no-op.
	DryRun bool
}

// accounting is what the Manager holds of its observers and admission.
// The admission is set before Recover; observers may be added later (the
// E2B facade subscribes once the server is built), so the list is swapped
// whole, copy on write, and read without a lock.
type accounting struct {
	mu        sync.Mutex
	list      atomic.Pointer[[]Observer]
	admission Admission
}

// Observe adds observers of lifecycle changes.
func (m *Manager) Observe(o ...Observer) {
	m.acct.mu.Lock()
	defer m.acct.mu.Unlock()
	next := append(append([]Observer{}, m.observers()...), o...)
	m.acct.list.Store(&next)
}

// observers is the current list of observers.
func (m *Manager) observers() []Observer {
	if p := m.acct.list.Load(); p != nil {
		return *p
	}
	return nil
}

// SetAdmission sets the quota check of operations that add running
// sandboxes, creates or storage. Call it before Recover.
func (m *Manager) SetAdmission(a Admission) { m.acct.admission = a }

func (m *Manager) emit(ctx context.Context, ev Event) {
	if len(m.observers()) == 0 {
		return
	}
	if ev.At.IsZero() {
		ev.At = time.Now().UTC()
	}
	for _, o := range m.observers() {
		o.SandboxEvent(ctx, ev)
	}
}

// sandboxEvent is the event of kind for sandbox row sb.
func sandboxEvent(kind string, sb store.Sandbox) Event {
	return Event{Kind: kind, TeamID: sb.TeamID, SandboxID: sb.ID, State: sb.State, Stored: sb.Stored,
		Pool: sb.Pool, CPUs: sb.CPUs, MemoryMB: sb.MemoryMB}
}

// emitState reports a change of sb (already recorded) as kind: stored,
// restored, or error (with sb.Error saying why).
func (m *Manager) emitState(ctx context.Context, kind string, sb store.Sandbox, start time.Time) {
	ev := sandboxEvent(kind, sb)
	if kind == api.EventError {
		ev.Error, ev.Code = sb.Error, api.CodeInternal
	}
	if !start.IsZero() {
		ev.Duration = time.Since(start)
	}
	m.emit(ctx, ev)
}

// admit asks the admission, if any, for what r adds; a refusal is told to
// the observers as quota-refused.
func (m *Manager) admit(ctx context.Context, r AdmitRequest) (func(), error) {
	if m.acct.admission == nil {
		return func() {}, nil
	}
	release, err := m.acct.admission.Admit(ctx, r)
	if err != nil {
		m.emit(ctx, Event{Kind: api.EventQuotaRefused, Op: r.Op, TeamID: r.TeamID, SandboxID: r.SandboxID,
			Error: err.Error(), Code: api.CodeForError(err)})
		return nil, err
	}
	if release == nil {
		release = func() {}
	}
	return release, nil
}

type causeKey struct{}

// withCause marks ctx so that the operation it carries is reported as kind
// (idle-paused rather than paused).
func withCause(ctx context.Context, kind string) context.Context {
	return context.WithValue(ctx, causeKey{}, kind)
}

// opNames names the operation of each kind, for error events.
var opNames = map[string]string{
	api.EventCreated: "create", api.EventPaused: "pause", api.EventIdlePaused: "pause", api.EventResumed: "resume",
	api.EventSnapshotted: "snapshot", api.EventForked: "fork", api.EventReverted: "revert", api.EventDeleted: "delete",
	api.EventStored: "store", api.EventRestored: "restore",
}

// tracker reports one operation when it returns: its change on success,
// an error event on failure. Use it as
//
//	defer m.track(ctx, api.EventPaused, team, id).done(&sb, &err)
type tracker struct {
	m              *Manager
	ctx            context.Context
	kind, team, id string
	start          time.Time
}

func (m *Manager) track(ctx context.Context, kind, team, id string) tracker {
	if cause, ok := ctx.Value(causeKey{}).(string); ok {
		kind = cause
	}
	return tracker{m: m, ctx: ctx, kind: kind, team: team, id: id, start: time.Now()}
}

// failed reports err as an error event; a quota refusal was reported by
// admit already.
func (t tracker) failed(err error, snapshotID string) {
	if errors.Is(err, api.ErrQuota) {
		return
	}
	t.m.emit(t.ctx, Event{Kind: api.EventError, Op: opNames[t.kind], TeamID: t.team, SandboxID: t.id,
		SnapshotID: snapshotID, Error: err.Error(), Code: api.CodeForError(err), Duration: time.Since(t.start)})
}

// done reports an operation that returns a sandbox.
func (t tracker) done(sb *store.Sandbox, err *error) {
	if len(t.m.observers()) == 0 {
		return
	}
	if *err != nil {
		t.failed(*err, "")
		return
	}
	ev := sandboxEvent(t.kind, *sb)
	ev.SnapshotID = sb.FromSnapshot
	ev.Duration = time.Since(t.start)
	t.m.emit(t.ctx, ev)
}

// doneSnapshot reports a snapshot.
func (t tracker) doneSnapshot(sn *store.Snapshot, err *error) {
	if len(t.m.observers()) == 0 {
		return
	}
	if *err != nil {
		t.failed(*err, "")
		return
	}
	t.m.emit(t.ctx, Event{Kind: t.kind, TeamID: sn.TeamID, SandboxID: sn.SandboxID, SnapshotID: sn.ID,
		State: api.StateRunning, Duration: time.Since(t.start)})
}

// doneFork reports a fork of snapshot t.id: one event per new sandbox,
// each with the time the whole fork took.
func (t tracker) doneFork(sbs *[]store.Sandbox, err *error) {
	if len(t.m.observers()) == 0 {
		return
	}
	if *err != nil {
		t.failed(*err, t.id)
		return
	}
	d := time.Since(t.start)
	for _, sb := range *sbs {
		ev := sandboxEvent(t.kind, sb)
		ev.SnapshotID, ev.Duration = t.id, d
		t.m.emit(t.ctx, ev)
	}
}

// doneDelete reports a delete.
func (t tracker) doneDelete(err *error) {
	if len(t.m.observers()) == 0 {
		return
	}
	if *err != nil {
		t.failed(*err, "")
		return
	}
	t.m.emit(t.ctx, Event{Kind: t.kind, TeamID: t.team, SandboxID: t.id, Duration: time.Since(t.start)})
}
