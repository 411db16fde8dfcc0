package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/store"
)

// Background policies, run every PolicyInterval:
//   - idle: a running sandbox with an idle timeout that had no activity for
//     that long is paused (or deleted, if its policy says so). Activity is
//     any API call on the sandbox (exec, files, snapshot, ...), a request
//     still in flight (a streaming exec, a terminal), or a background job
//     still running inside it.
//   - store: a sandbox paused in memory for StoreAfter is checkpointed to
//     disk and its memory freed; when the host's available memory falls
//     below MinAvailableMB, paused sandboxes are stored at once, oldest
//     first.
//   - checkpoints: a running sandbox with checkpoint_interval_s takes a
//     checkpoint on that interval, keeping the last KeepCheckpoints.
type policyState struct {
	stopped  atomic.Bool
	stop     context.CancelFunc
	done     chan struct{}
	inflight sync.Map // sandbox id -> *int64 count of requests in flight
	once     sync.Once
}

func (m *Manager) startPolicies() {
	if m.cfg.PolicyInterval <= 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.policies.stop = cancel
	m.policies.done = make(chan struct{})
	go func() {
		defer close(m.policies.done)
		t := time.NewTicker(m.cfg.PolicyInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				m.runPolicies(ctx)
			}
		}
	}()
}

func (m *Manager) stopping() bool { return m.policies.stopped.Load() }

func (m *Manager) stopPolicies() {
	m.policies.stopped.Store(true)
	m.policies.once.Do(func() {
		if m.policies.stop != nil {
			m.policies.stop()
			<-m.policies.done
		}
	})
}

// Begin marks a request on sandbox id in flight; the returned func ends it.
// A sandbox with requests in flight is never idle.
func (m *Manager) Begin(id string) func() {
	v, _ := m.policies.inflight.LoadOrStore(id, new(int64))
	n := v.(*int64)
	m.mu.Lock()
	*n++
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		*n--
		m.mu.Unlock()
		m.Touch(id)
	}
}

func (m *Manager) busy(id string) bool {
	v, ok := m.policies.inflight.Load(id)
	if !ok {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return *v.(*int64) > 0
}

func (m *Manager) runPolicies(ctx context.Context) {
	all, err := m.store.ListSandboxes(ctx, store.Filter{})
	if err != nil {
		m.log.Warn("policies: listing sandboxes", "err", err)
		return
	}
	now := time.Now()
	var paused []store.Sandbox
	for _, sb := range all {
		if ctx.Err() != nil {
			return
		}
		switch sb.State {
		case api.StateRunning:
			m.idlePolicy(ctx, sb, now)
			m.checkpointPolicy(ctx, sb, now)
		case api.StatePaused:
			if !sb.Stored {
				paused = append(paused, sb)
			}
		}
	}
	m.kickRefill()
	sort.Slice(paused, func(i, j int) bool { return pausedAt(paused[i]).Before(pausedAt(paused[j])) })
	short := m.cfg.MinAvailableMB > 0 && availableMB() < m.cfg.MinAvailableMB
	for _, sb := range paused {
		if ctx.Err() != nil {
			return
		}
		// Pooled sandboxes wait in memory, to be claimed fast, unless
		// the host runs short.
		if !short && (sb.Pool != "" || now.Sub(pausedAt(sb)) < m.cfg.StoreAfter) {
			continue
		}
		if err := m.storePaused(ctx, sb.ID); err != nil {
			m.log.Warn("storing a paused sandbox", "sandbox_id", sb.ID, "err", err)
		}
		short = m.cfg.MinAvailableMB > 0 && availableMB() < m.cfg.MinAvailableMB
	}
}

func pausedAt(sb store.Sandbox) time.Time {
	if sb.PausedAt != nil {
		return *sb.PausedAt
	}
	return sb.UpdatedAt
}

func (m *Manager) idlePolicy(ctx context.Context, sb store.Sandbox, now time.Time) {
	if sb.Idle.TimeoutS <= 0 {
		return
	}
	m.mu.Lock()
	l := m.live[sb.ID]
	var last time.Time
	if l != nil {
		last = l.lastActive
	}
	m.mu.Unlock()
	if l == nil || now.Sub(last) < time.Duration(sb.Idle.TimeoutS)*time.Second || m.busy(sb.ID) {
		return
	}
	if m.jobsRunning(ctx, l.in) {
		m.Touch(sb.ID)
		return
	}
	log := m.log.With("sandbox_id", sb.ID, "idle_for", now.Sub(last).Round(time.Second))
	if sb.Idle.Action == "delete" {
		log.Info("deleting an idle sandbox, as its idle policy says")
		if err := m.Delete(ctx, sb.TeamID, sb.ID); err != nil {
			log.Warn("deleting an idle sandbox", "err", err)
		}
		return
	}
	log.Info("pausing an idle sandbox")
	if _, err := m.Pause(withCause(ctx, api.EventIdlePaused), sb.TeamID, sb.ID); err != nil {
		log.Warn("pausing an idle sandbox", "err", err)
	}
}

// jobsRunning asks the agent whether a background job is still running.
func (m *Manager) jobsRunning(ctx context.Context, in *instance) bool {
	if in == nil || in.agent == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, in.agent.BaseURL()+"/jobs", nil)
	if err != nil {
		return false
	}
	resp, err := in.agent.Transport().RoundTrip(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false
	}
	var body struct {
		Jobs []struct {
			State string `json:"state"`
		} `json:"jobs"`
	}
	if json.NewDecoder(resp.Body).Decode(&body) != nil {
		return false
	}
	for _, j := range body.Jobs {
		if j.State == "running" {
			return true
		}
	}
	return false
}

func (m *Manager) checkpointPolicy(ctx context.Context, sb store.Sandbox, now time.Time) {
	if sb.CheckpointIntervalS <= 0 {
		return
	}
	last := sb.CreatedAt
	if sb.LastCheckpointAt != nil {
		last = *sb.LastCheckpointAt
	}
	if now.Sub(last) < time.Duration(sb.CheckpointIntervalS)*time.Second {
		return
	}
	if err := m.Checkpoint(ctx, sb.ID); err != nil {
		m.log.Warn("periodic checkpoint", "sandbox_id", sb.ID, "err", err)
	}
}

// Checkpoint takes a periodic checkpoint of sandbox id now and prunes the
// older ones beyond KeepCheckpoints.
func (m *Manager) Checkpoint(ctx context.Context, id string) error {
	unlock := m.lock(id)
	defer unlock()
	sn, err := m.snapshotLocked(ctx, "", id, "", "checkpoint")
	if err != nil {
		return err
	}
	at := sn.CreatedAt
	if _, err := m.store.UpdateSandbox(ctx, id, store.Update{From: []string{api.StateRunning}, LastCheckpointAt: &at}); err != nil {
		return err
	}
	ckpts, err := m.store.ListSnapshots(ctx, store.SnapshotFilter{SandboxID: id, Kind: "checkpoint"})
	if err != nil {
		return err
	}
	keep := max(1, m.cfg.KeepCheckpoints)
	for i := 0; i < len(ckpts)-keep; i++ {
		if err := m.store.DeleteSnapshot(ctx, ckpts[i].ID); err == nil {
			m.snaps.Delete(ckpts[i].ID)
		}
	}
	return nil
}

// availableMB reads MemAvailable from /proc/meminfo.
func availableMB() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 1 << 40
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemAvailable:" {
			kb, _ := strconv.ParseInt(fields[1], 10, 64)
			return kb / 1024
		}
	}
	return 1 << 40
}
