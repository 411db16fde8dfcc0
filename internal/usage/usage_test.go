package usage

import (
	"context"
	"log/slog"
	"math"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/sandbox"
	"github.com/warrenhq/warren/internal/store"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t0.Add(d)
}

type fakeSizer struct {
	mu   sync.Mutex
	uses []sandbox.StorageUse
}

func (f *fakeSizer) StorageUse(context.Context) ([]sandbox.StorageUse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]sandbox.StorageUse(nil), f.uses...), nil
}

func openStore(t *testing.T) (*store.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "warren.db")
	st, err := store.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	st.EnsureTeam(t.Context(), "team-a", "a")
	return st, path
}

func newMeter(st *store.Store, c *clock, sizer Sizer) *Meter {
	m := New(st, sizer, Config{FlushInterval: time.Hour, Prices: DefaultPrices()}, slog.New(slog.DiscardHandler))
	m.now = c.now
	return m
}

// start runs Start's first part (close what the last run left, flush)
// without the background loop, so tests drive every flush.
func start(t *testing.T, m *Meter) {
	t.Helper()
	m.mu.Lock()
	if _, err := m.st.CloseOpenSegments(t.Context()); err != nil {
		t.Fatal(err)
	}
	m.started = true
	m.mu.Unlock()
	if err := m.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func setState(t *testing.T, st *store.Store, id, state string) store.Sandbox {
	t.Helper()
	sb, err := st.UpdateSandbox(t.Context(), id, store.Update{State: state})
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

func event(kind string, sb store.Sandbox, at time.Duration) sandbox.Event {
	return sandbox.Event{Kind: kind, TeamID: sb.TeamID, SandboxID: sb.ID, State: sb.State, CPUs: sb.CPUs, MemoryMB: sb.MemoryMB, At: t0.Add(at)}
}

func near(got, want float64) bool { return math.Abs(got-want) < 1e-6 }

func usageOf(t *testing.T, m *Meter) api.UsageFigures {
	t.Helper()
	u, err := m.Usage(t.Context(), "team-a", "a", t0.Add(-time.Hour), t0.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return u.Total
}

// A sandbox runs 30 s, pauses, is resumed; the server crashes 15 s later,
// 5 s after its last flush, and starts again: the paused time costs
// nothing, the crash loses the 5 s since the flush, and nothing counts
// twice.
func TestMeterRunPauseCrash(t *testing.T) {
	st, _ := openStore(t)
	c := &clock{t: t0}
	sb := &store.Sandbox{ID: "sb-aaaaaaaaaaaa", TeamID: "team-a", State: api.StateCreating, CPUs: 2, MemoryMB: 1024, DiskMB: 1024}
	if err := st.CreateSandbox(t.Context(), sb); err != nil {
		t.Fatal(err)
	}
	m := newMeter(st, c, nil)
	start(t, m)

	c.set(10 * time.Second)
	m.SandboxEvent(t.Context(), event(api.EventCreated, setState(t, st, sb.ID, api.StateRunning), 10*time.Second))
	c.set(20 * time.Second)
	if err := m.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	// While it runs, usage counts up to now.
	c.set(25 * time.Second)
	if got := usageOf(t, m).RunningSeconds; !near(got, 15) {
		t.Errorf("running, mid-way: got %v s, want 15", got)
	}
	c.set(40 * time.Second)
	m.SandboxEvent(t.Context(), event(api.EventPaused, setState(t, st, sb.ID, api.StatePaused), 40*time.Second))
	c.set(100 * time.Second)
	m.Flush(t.Context())
	got := usageOf(t, m)
	if !near(got.RunningSeconds, 30) || !near(got.VCPUSeconds, 60) || !near(got.MemoryGBSeconds, 30) {
		t.Fatalf("after a pause: got %+v, want 30 s running, 60 vCPU-s, 30 GB-s", got)
	}

	// A restart while paused changes nothing.
	m2 := newMeter(st, c, nil)
	c.set(200 * time.Second)
	start(t, m2)
	if got := usageOf(t, m2); !near(got.RunningSeconds, 30) {
		t.Errorf("after a restart: got %v s, want 30", got.RunningSeconds)
	}

	// Resume at 300 s, flush at 310 s, crash at 315 s.
	c.set(300 * time.Second)
	m2.SandboxEvent(t.Context(), event(api.EventResumed, setState(t, st, sb.ID, api.StateRunning), 300*time.Second))
	c.set(310 * time.Second)
	m2.Flush(t.Context())
	c.set(315 * time.Second)

	// The next run starts at 400 s: the sandbox still runs.
	c.set(400 * time.Second)
	m3 := newMeter(st, c, nil)
	start(t, m3)
	c.set(410 * time.Second)
	if got := usageOf(t, m3); !near(got.RunningSeconds, 30+10+10) {
		t.Errorf("after a crash: got %v s, want 50 (30 + 10 flushed before the crash + 10 since the restart)", got.RunningSeconds)
	}
	// A window sees only its part.
	u, _ := m3.Usage(t.Context(), "team-a", "a", t0.Add(35*time.Second), t0.Add(305*time.Second))
	if !near(u.Total.RunningSeconds, 5+5) {
		t.Errorf("window [35 s, 305 s): got %v s, want 10", u.Total.RunningSeconds)
	}
	if len(u.Sandboxes) != 1 || u.Sandboxes[0].SandboxID != sb.ID {
		t.Errorf("per sandbox: got %+v", u.Sandboxes)
	}
	// Another team sees nothing.
	if u, _ := m3.Usage(t.Context(), "team-b", "b", t0, t0.Add(time.Hour)); len(u.Sandboxes) != 0 || u.Total.RunningSeconds != 0 {
		t.Errorf("another team: got %+v", u)
	}
}

// A transition the meter was not told of is caught at the next flush.
func TestMeterReconciles(t *testing.T) {
	st, _ := openStore(t)
	c := &clock{t: t0}
	sb := &store.Sandbox{ID: "sb-bbbbbbbbbbbb", TeamID: "team-a", State: api.StateRunning, CPUs: 1, MemoryMB: 512, DiskMB: 1024}
	st.CreateSandbox(t.Context(), sb)
	pooled := &store.Sandbox{ID: "sb-pppppppppppp", TeamID: "team-a", State: api.StateRunning, CPUs: 1, MemoryMB: 512, DiskMB: 1024, Pool: "tpl"}
	st.CreateSandbox(t.Context(), pooled)
	m := newMeter(st, c, nil)
	start(t, m) // opens at t0: it runs
	c.set(10 * time.Second)
	m.Flush(t.Context())
	st.DeleteSandbox(t.Context(), sb.ID) // no event
	c.set(20 * time.Second)
	m.Flush(t.Context())
	c.set(30 * time.Second)
	if got := usageOf(t, m).RunningSeconds; !near(got, 10) {
		t.Errorf("got %v s, want 10 (to the last flush before it vanished; a pooled sandbox is nobody's)", got)
	}
}

func TestMeterStorage(t *testing.T) {
	st, _ := openStore(t)
	c := &clock{t: t0}
	sz := &fakeSizer{uses: []sandbox.StorageUse{{TeamID: "team-a", SandboxID: "sb-1", Bytes: 2 * gib}}}
	m := newMeter(st, c, sz)
	start(t, m)
	c.set(time.Hour)
	m.Flush(t.Context())
	sz.uses[0].Bytes = 4 * gib
	c.set(2 * time.Hour)
	m.Flush(t.Context()) // 2 GB held for 2 h; now 4 GB
	c.set(3 * time.Hour)
	m.SandboxEvent(t.Context(), sandbox.Event{Kind: api.EventDeleted, TeamID: "team-a", SandboxID: "sb-1", At: t0.Add(3 * time.Hour)})
	sz.uses = nil
	c.set(5 * time.Hour)
	m.Flush(t.Context())
	if got := usageOf(t, m).StorageGBHours; !near(got, 2*2+4*1) {
		t.Errorf("storage: got %v GB-h, want 8", got)
	}
}

func TestPriceFreeTier(t *testing.T) {
	p := Prices{VCPUSecond: 0.01, MemoryGBSecond: 0.001, StorageGBMonth: 0.05, StorageFreeGB: 10}
	segs := []store.Segment{
		{SandboxID: "sb-1", Kind: store.SegmentStorage, Start: t0, End: t0.Add(10 * time.Hour), Bytes: 6 * gib},
		{SandboxID: "sb-2", Kind: store.SegmentStorage, Start: t0.Add(5 * time.Hour), End: t0.Add(20 * time.Hour), Bytes: 6 * gib},
		{SandboxID: "sb-2", Kind: store.SegmentCompute, Start: t0, End: t0.Add(100 * time.Second), CPUs: 2, MemoryMB: 2048},
	}
	u := Price("a", t0, t0.Add(48*time.Hour), t0.Add(72*time.Hour), segs, p)
	if len(u.Sandboxes) != 2 {
		t.Fatalf("sandboxes: got %+v", u.Sandboxes)
	}
	// 12 GB are held for 5 h: 2 GB over the allowance, 10 GB-h billed.
	wantStorage := round(10.0 / HoursPerMonth * 0.05)
	if u.Total.Cost.Storage != wantStorage {
		t.Errorf("storage cost: got %v, want %v", u.Total.Cost.Storage, wantStorage)
	}
	if !near(u.Total.StorageGBHours, 6*10+6*15) {
		t.Errorf("storage: got %v GB-h, want 150", u.Total.StorageGBHours)
	}
	if u.Total.Cost.VCPU != 2 || u.Total.Cost.Memory != round(200*0.001) {
		t.Errorf("compute cost: got %+v, want vcpu 2, memory 0.2", u.Total.Cost)
	}
	if want := round(2 + 0.2 + wantStorage); u.Total.Cost.Total != want {
		t.Errorf("total: got %v, want %v", u.Total.Cost.Total, want)
	}
	if u.Total.Cost.StorageFree <= 0 {
		t.Errorf("storage_free: got %v, want the allowance's worth", u.Total.Cost.StorageFree)
	}
	// Under the allowance, storage is free.
	small := Price("a", t0, t0.Add(48*time.Hour), t0.Add(72*time.Hour), segs[:1], p)
	if small.Total.Cost.Storage != 0 || small.Sandboxes[0].Cost.Storage == 0 {
		t.Errorf("under the allowance: total %v (want 0), per sandbox %v (want list price)", small.Total.Cost.Storage, small.Sandboxes[0].Cost.Storage)
	}
}

// The background loop flushes on its interval and once more when stopped.
func TestMeterLoop(t *testing.T) {
	st, _ := openStore(t)
	sb := &store.Sandbox{ID: "sb-cccccccccccc", TeamID: "team-a", State: api.StateRunning, CPUs: 1, MemoryMB: 512, DiskMB: 1024}
	st.CreateSandbox(t.Context(), sb)
	m := New(st, nil, Config{FlushInterval: 20 * time.Millisecond}, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(t.Context())
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	cancel()
	<-m.Done()
	segs, _ := st.Segments(t.Context(), "team-a", t0, time.Now().Add(time.Hour))
	if len(segs) != 1 || segs[0].End.Sub(segs[0].Start) < 80*time.Millisecond {
		t.Errorf("segments after the loop: got %+v, want one of about 100 ms", segs)
	}
}
