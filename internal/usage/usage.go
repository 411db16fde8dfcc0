// Package usage meters what every sandbox uses and prices it.
//
// Usage is recorded as segments (store.Segment): intervals [start, end)
// over which one sandbox held constant resources.
//
//   - compute: opened when a sandbox starts running (create, resume, fork,
//     revert, restore), with its vCPUs and memory; closed when it stops
//     (pause, delete, error). Paused time has no compute segment, so it
//     costs no compute.
//   - storage: what the sandbox holds on disk (writable layer, stored
//     pause, snapshots), measured at every flush; a new segment starts
//     when the figure changes.
//
// Transitions are written as they happen (a queue drained by one
// goroutine, so lifecycle calls never wait for the meter). Every flush
// interval the meter moves the end of every open segment to now, and
// reconciles with the store (a running sandbox without an open segment
// gets one; a segment of a sandbox no longer running is closed). A server
// that stops or crashes loses at most the time since the last flush: on
// start, every segment still open is closed where it was last flushed, and
// new ones start from then on. Segments of one sandbox and kind never
// overlap, so nothing is ever counted twice. The time the server is down
// is not billed.
package usage

import (
	"context"
	"log/slog"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/sandbox"
	"github.com/warrenhq/warren/internal/store"
)

// Prices is the price table, in US dollars.
type Prices struct {
	VCPUSecond     float64 `json:"vcpu_second"`
	MemoryGBSecond float64 `json:"memory_gb_second"`
	StorageGBMonth float64 `json:"storage_gb_month"`
	// StorageFreeGB is how much storage a team holds free at any moment.
	StorageFreeGB float64 `json:"storage_free_gb"`
}

// DefaultPrices are seed prices, to be replaced by the operator's: about
// $0.05 per vCPU-hour and $0.016 per GB-hour of memory (per second, while
// running), and storage at $0.05 per GB-month with the first 10 GB free.
func DefaultPrices() Prices {
	return Prices{VCPUSecond: 0.000014, MemoryGBSecond: 0.0000045, StorageGBMonth: 0.05, StorageFreeGB: 10}
}

// HoursPerMonth turns GB-hours into GB-months.
const HoursPerMonth = 730

const gib = 1 << 30

// Sizer measures what every sandbox holds on disk (sandbox.Manager).
type Sizer interface {
	StorageUse(ctx context.Context) ([]sandbox.StorageUse, error)
}

// Config configures a Meter.
type Config struct {
	// FlushInterval is how often open segments are written: the most
	// usage a crash can lose.
	FlushInterval time.Duration
	Prices        Prices
}

type segKey struct{ sandbox, kind string }

// Meter records usage. It is a sandbox.Observer.
type Meter struct {
	st    *store.Store
	sizer Sizer
	cfg   Config
	log   *slog.Logger
	now   func() time.Time

	qmu   sync.Mutex
	queue []sandbox.Event
	wake  chan struct{}

	mu      sync.Mutex // held while segments change
	open    map[segKey]*store.Segment
	started bool
	done    chan struct{}
}

var _ sandbox.Observer = (*Meter)(nil)

// New returns a Meter; Start it once the sandboxes are recovered.
func New(st *store.Store, sizer Sizer, cfg Config, log *slog.Logger) *Meter {
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = 10 * time.Second
	}
	return &Meter{st: st, sizer: sizer, cfg: cfg, log: log, now: time.Now,
		wake: make(chan struct{}, 1), open: map[segKey]*store.Segment{}}
}

// SandboxEvent queues a lifecycle change; it never blocks.
func (m *Meter) SandboxEvent(_ context.Context, ev sandbox.Event) {
	m.qmu.Lock()
	m.queue = append(m.queue, ev)
	m.qmu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Start closes the segments a previous run left open (where they were
// last flushed), opens segments for what runs and is stored now, and
// flushes every FlushInterval until ctx ends, with a last flush then.
func (m *Meter) Start(ctx context.Context) error {
	m.mu.Lock()
	n, err := m.st.CloseOpenSegments(ctx)
	if err != nil {
		m.mu.Unlock()
		return err
	}
	if n > 0 {
		m.log.Info("usage: closed the segments the last run left open, at their last flush", "segments", n)
	}
	m.started = true
	m.mu.Unlock()
	if err := m.Flush(ctx); err != nil {
		return err
	}
	m.done = make(chan struct{})
	go m.loop(ctx)
	return nil
}

// Done is closed once the meter has stopped, after its last flush.
func (m *Meter) Done() <-chan struct{} { return m.done }

func (m *Meter) loop(ctx context.Context) {
	defer close(m.done)
	t := time.NewTicker(m.cfg.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if err := m.Flush(context.WithoutCancel(ctx)); err != nil {
				m.log.Warn("usage: the last flush failed", "err", err)
			}
			return
		case <-m.wake:
			m.applyPending(ctx)
		case <-t.C:
			if err := m.Flush(ctx); err != nil {
				m.log.Warn("usage: flush failed; retrying at the next interval", "err", err)
			}
		}
	}
}

// applyPending records the queued lifecycle changes.
func (m *Meter) applyPending(ctx context.Context) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.started {
		return // Start reconciles first
	}
	m.qmu.Lock()
	q := m.queue
	m.queue = nil
	m.qmu.Unlock()
	for _, ev := range q {
		if err := m.applyEvent(ctx, ev); err != nil {
			m.log.Warn("usage: recording a transition; the next flush reconciles", "sandbox_id", ev.SandboxID, "kind", ev.Kind, "err", err)
		}
	}
}

// applyEvent records one change. m.mu is held.
func (m *Meter) applyEvent(ctx context.Context, ev sandbox.Event) error {
	if ev.SandboxID == "" || ev.Pool != "" || ev.Kind == api.EventQuotaRefused || ev.Kind == api.EventSnapshotted || ev.Failed() {
		return nil
	}
	var ch store.SegmentChange
	k := segKey{ev.SandboxID, store.SegmentCompute}
	cur := m.open[k]
	if ev.State == api.StateRunning {
		if cur != nil && cur.CPUs == ev.CPUs && cur.MemoryMB == ev.MemoryMB {
			return nil
		}
		if cur != nil {
			ch.Close = map[int64]time.Time{cur.ID: ev.At}
		}
		ch.Open = append(ch.Open, &store.Segment{TeamID: ev.TeamID, SandboxID: ev.SandboxID, Kind: store.SegmentCompute,
			Start: ev.At, End: ev.At, CPUs: ev.CPUs, MemoryMB: ev.MemoryMB})
	} else if cur != nil {
		ch.Close = map[int64]time.Time{cur.ID: ev.At}
	}
	if s := m.open[segKey{ev.SandboxID, store.SegmentStorage}]; s != nil && ev.Kind == api.EventDeleted {
		// Its files are gone; the next flush measures its snapshots.
		if ch.Close == nil {
			ch.Close = map[int64]time.Time{}
		}
		ch.Close[s.ID] = ev.At
	}
	if len(ch.Open) == 0 && len(ch.Close) == 0 {
		return nil
	}
	if err := m.st.ApplySegments(ctx, ch); err != nil {
		return err
	}
	m.commit(ch)
	return nil
}

// commit mirrors an applied change in m.open. m.mu is held.
func (m *Meter) commit(ch store.SegmentChange) {
	for id := range ch.Close {
		for k, s := range m.open {
			if s.ID == id {
				delete(m.open, k)
			}
		}
	}
	for _, s := range ch.Open {
		m.open[segKey{s.SandboxID, s.Kind}] = s
	}
}

// Flush records the queued changes, reconciles with the store and the
// disk, and moves the end of every open segment to now.
func (m *Meter) Flush(ctx context.Context) error {
	m.applyPending(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.started {
		return nil // Start closes what the last run left open first
	}
	now := m.now().UTC()
	sbs, err := m.st.ListSandboxes(ctx, store.Filter{})
	if err != nil {
		return err
	}
	ch := store.SegmentChange{Close: map[int64]time.Time{}, At: now}
	byID := map[string]store.Sandbox{}
	for _, sb := range sbs {
		byID[sb.ID] = sb
		if sb.Pool != "" || sb.State != api.StateRunning {
			continue
		}
		cur := m.open[segKey{sb.ID, store.SegmentCompute}]
		if cur != nil && cur.CPUs == sb.CPUs && cur.MemoryMB == sb.MemoryMB {
			continue
		}
		if cur != nil {
			ch.Close[cur.ID] = now
		}
		ch.Open = append(ch.Open, &store.Segment{TeamID: sb.TeamID, SandboxID: sb.ID, Kind: store.SegmentCompute,
			Start: now, End: now, CPUs: sb.CPUs, MemoryMB: sb.MemoryMB})
	}
	for k, s := range m.open {
		if k.kind != store.SegmentCompute {
			continue
		}
		sb, ok := byID[k.sandbox]
		switch {
		case !ok:
			ch.Close[s.ID] = s.End // gone: count to the last flush
		case sb.State != api.StateRunning:
			// It stopped without telling us; its row changed then.
			ch.Close[s.ID] = clamp(sb.UpdatedAt, s.Start, now)
		}
	}
	if m.sizer != nil {
		uses, err := m.sizer.StorageUse(ctx)
		if err != nil {
			m.log.Warn("usage: measuring storage", "err", err)
		} else {
			seen := map[string]bool{}
			for _, u := range uses {
				if u.Bytes <= 0 {
					continue
				}
				seen[u.SandboxID] = true
				cur := m.open[segKey{u.SandboxID, store.SegmentStorage}]
				if cur != nil && cur.Bytes == u.Bytes {
					continue
				}
				if cur != nil {
					ch.Close[cur.ID] = now
				}
				ch.Open = append(ch.Open, &store.Segment{TeamID: u.TeamID, SandboxID: u.SandboxID, Kind: store.SegmentStorage,
					Start: now, End: now, Bytes: u.Bytes})
			}
			for k, s := range m.open {
				if k.kind == store.SegmentStorage && !seen[k.sandbox] {
					ch.Close[s.ID] = now
				}
			}
		}
	}
	for _, s := range m.open {
		if _, closing := ch.Close[s.ID]; !closing {
			ch.Extend = append(ch.Extend, s.ID)
		}
	}
	if err := m.st.ApplySegments(ctx, ch); err != nil {
		return err
	}
	for _, s := range m.open {
		if _, closing := ch.Close[s.ID]; !closing {
			s.End = now
		}
	}
	m.commit(ch)
	return nil
}

func clamp(t, lo, hi time.Time) time.Time {
	if t.Before(lo) {
		return lo
	}
	if t.After(hi) {
		return hi
	}
	return t
}

// Usage returns what team's sandboxes used in [from, to), priced. Open
// segments count up to now.
func (m *Meter) Usage(ctx context.Context, teamID, teamName string, from, to time.Time) (api.Usage, error) {
	m.applyPending(ctx)
	now := m.now().UTC()
	segs, err := m.st.Segments(ctx, teamID, from, to)
	if err != nil {
		return api.Usage{}, err
	}
	m.mu.Lock()
	live := map[int64]bool{}
	seen := map[int64]bool{}
	for _, s := range segs {
		seen[s.ID] = true
	}
	for _, s := range m.open {
		live[s.ID] = true
		if !seen[s.ID] && s.TeamID == teamID && s.Start.Before(to) {
			segs = append(segs, *s)
		}
	}
	m.mu.Unlock()
	for i := range segs {
		if live[segs[i].ID] && segs[i].End.Before(now) {
			segs[i].End = now
		}
	}
	return Price(teamName, from, to, now, segs, m.cfg.Prices), nil
}

// Price sums segments over [from, min(to, now)) per sandbox and prices
// them. The storage allowance is applied to the team's storage at each
// moment: only what is above StorageFreeGB then is billed.
func Price(team string, from, to, now time.Time, segs []store.Segment, p Prices) api.Usage {
	end := to
	if now.Before(end) {
		end = now
	}
	out := api.Usage{Team: team, From: from, To: to, Sandboxes: []api.SandboxUsage{}, Prices: api.Prices(p)}
	per := map[string]*api.SandboxUsage{}
	type point struct {
		t     time.Time
		bytes int64
	}
	var points []point
	for _, s := range segs {
		a, b := s.Start, s.End
		if a.Before(from) {
			a = from
		}
		if b.After(end) {
			b = end
		}
		if !b.After(a) {
			continue
		}
		secs := b.Sub(a).Seconds()
		u := per[s.SandboxID]
		if u == nil {
			u = &api.SandboxUsage{SandboxID: s.SandboxID}
			per[s.SandboxID] = u
		}
		switch s.Kind {
		case store.SegmentCompute:
			u.RunningSeconds += secs
			u.VCPUSeconds += secs * s.CPUs
			u.MemoryGBSeconds += secs * float64(s.MemoryMB) / 1024
		case store.SegmentStorage:
			u.StorageGBHours += secs / 3600 * float64(s.Bytes) / gib
			points = append(points, point{a, s.Bytes}, point{b, -s.Bytes})
		}
	}
	for _, u := range per {
		u.Cost = cost(u.UsageFigures, p)
		out.Sandboxes = append(out.Sandboxes, *u)
		t := &out.Total
		t.RunningSeconds += u.RunningSeconds
		t.VCPUSeconds += u.VCPUSeconds
		t.MemoryGBSeconds += u.MemoryGBSeconds
		t.StorageGBHours += u.StorageGBHours
	}
	sort.Slice(out.Sandboxes, func(i, j int) bool { return out.Sandboxes[i].SandboxID < out.Sandboxes[j].SandboxID })
	// The team's storage over time, above the allowance.
	sort.Slice(points, func(i, j int) bool { return points[i].t.Before(points[j].t) })
	var held int64
	billable := 0.0 // GB-hours above the allowance
	for i, pt := range points {
		if i > 0 {
			over := float64(held)/gib - p.StorageFreeGB
			if over > 0 {
				billable += over * pt.t.Sub(points[i-1].t).Hours()
			}
		}
		held += pt.bytes
	}
	out.Total.Cost = cost(out.Total, p)
	gross := out.Total.Cost.Storage
	out.Total.Cost.Storage = round(billable / HoursPerMonth * p.StorageGBMonth)
	out.Total.Cost.StorageFree = round(gross - out.Total.Cost.Storage)
	out.Total.Cost.Total = round(out.Total.Cost.VCPU + out.Total.Cost.Memory + out.Total.Cost.Storage)
	return out
}

func cost(f api.UsageFigures, p Prices) api.Cost {
	c := api.Cost{
		VCPU:    round(f.VCPUSeconds * p.VCPUSecond),
		Memory:  round(f.MemoryGBSeconds * p.MemoryGBSecond),
		Storage: round(f.StorageGBHours / HoursPerMonth * p.StorageGBMonth),
	}
	c.Total = round(c.VCPU + c.Memory + c.Storage)
	return c
}

// round keeps costs to a millionth of a dollar.
func round(v float64) float64 { return math.Round(v*1e6) / 1e6 }
