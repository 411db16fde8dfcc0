package sandbox

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/store"
)

// The warm pool: for each template with a pool size N, the daemon keeps N
// sandboxes restored from the template's snapshot and paused in memory,
// owned by the template's team but hidden from it. A create from the
// template claims one in a single store statement (so no sandbox is ever
// handed out twice), personalises it — id (each pooled sandbox has its own
// from the start), name, metadata, environment for commands run through
// the API, idle policy, checkpoint interval — and resumes it. What a
// restore fixes (memory, CPUs, disk, the environment of processes already
// running) is the template's; a create that asks for other values is
// refused before the pool is looked at. When the pool is empty, the create
// restores from the snapshot as it would without a pool.
//
// Refills run in the background one at a time, and wait while creates are
// in flight, so the pool never slows the foreground down. Pooled sandboxes
// of a rebuilt or deleted template are removed.

type poolState struct {
	refilling atomic.Bool
	// foreground counts creates and restores in flight.
	foreground atomic.Int64
}

// claim takes a pooled sandbox of template t for a create.
func (m *Manager) claim(ctx context.Context, team string, t store.Template, c store.Claim) (store.Sandbox, bool, error) {
	sb, err := m.store.ClaimPooled(ctx, team, t.Name, t.SnapshotID, c)
	if errors.Is(err, api.ErrNotFound) {
		return sb, false, nil
	}
	if err != nil {
		return sb, false, err
	}
	start := time.Now()
	unlock := m.lock(sb.ID)
	defer unlock()
	in, err := m.instanceOf(sb)
	if err == nil && in != nil {
		err = m.thaw(ctx, in)
	}
	if err != nil || in == nil {
		m.log.Warn("a pooled sandbox did not resume; restoring a fresh one", "sandbox_id", sb.ID, "err", err)
		m.destroy(context.WithoutCancel(ctx), sb)
		return store.Sandbox{}, false, nil
	}
	zero := time.Time{}
	sb, err = m.store.UpdateSandbox(ctx, sb.ID, store.Update{From: []string{api.StatePaused}, State: api.StateRunning, PausedAt: &zero})
	if err != nil {
		return sb, false, err
	}
	m.setLive(sb.ID, in)
	m.log.Info("sandbox claimed from the warm pool", "sandbox_id", sb.ID, "runtime_id", in.id, "template", t.Name,
		"took", time.Since(start).Round(time.Microsecond))
	m.kickRefill()
	return sb, true, nil
}

// kickRefill starts a background refill unless one is running.
func (m *Manager) kickRefill() {
	if m.cfg.PolicyInterval <= 0 || !m.warm.refilling.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer m.warm.refilling.Store(false)
		m.refillPools(context.Background())
	}()
}

// refillPools removes pooled sandboxes whose template is gone or was
// rebuilt, and tops every template's pool up to its size, one sandbox at a
// time, yielding to creates in flight.
func (m *Manager) refillPools(ctx context.Context) {
	templates, err := m.store.ListTemplates(ctx, "")
	if err != nil {
		return
	}
	current := map[string]store.Template{}
	for _, t := range templates {
		current[t.TeamID+"/"+t.Name] = t
	}
	all, err := m.store.ListSandboxes(ctx, store.Filter{})
	if err != nil {
		return
	}
	have := map[string]int{}
	for _, sb := range all {
		if sb.Pool == "" {
			continue
		}
		t, ok := current[sb.TeamID+"/"+sb.Pool]
		if !ok || sb.FromSnapshot != t.SnapshotID || sb.State == api.StateError || sb.Stored || have[sb.TeamID+"/"+sb.Pool] >= t.PoolSize {
			m.log.Info("removing a pooled sandbox no longer wanted", "sandbox_id", sb.ID, "template", sb.Pool)
			m.destroyPooled(ctx, sb.ID)
			continue
		}
		have[sb.TeamID+"/"+sb.Pool]++
	}
	for _, t := range templates {
		for have[t.TeamID+"/"+t.Name] < t.PoolSize {
			// Yield to the foreground.
			for i := 0; m.warm.foreground.Load() > 0 && i < 100; i++ {
				time.Sleep(50 * time.Millisecond)
			}
			if ctx.Err() != nil || m.stopping() {
				return
			}
			if err := m.addToPool(ctx, t); err != nil {
				m.log.Warn("refilling a warm pool", "template", t.Name, "err", err)
				return
			}
			have[t.TeamID+"/"+t.Name]++
		}
	}
}

// addToPool restores one sandbox of template t and pauses it in its pool.
func (m *Manager) addToPool(ctx context.Context, t store.Template) error {
	sn, err := m.store.GetSnapshot(ctx, t.TeamID, t.SnapshotID)
	if err != nil {
		return err
	}
	sb, err := m.restoreNew(ctx, store.Sandbox{
		ID: NewID(), TeamID: t.TeamID, State: api.StateCreating, Image: sn.Image, ImageID: sn.ImageID,
		Template: t.Name, FromSnapshot: sn.ID, CPUs: sn.Config.CPUs, MemoryMB: sn.Config.MemoryMB,
		DiskMB: sn.Config.DiskMB, Env: sn.Config.Env, Network: sn.Config.Network, Idle: sn.Config.Idle,
		OwnerNode: m.cfg.Node, OwnerEpoch: 1, Pool: t.Name,
	}, sn, nil)
	if err != nil {
		return err
	}
	unlock := m.lock(sb.ID)
	defer unlock()
	// A template delete may have removed it meanwhile.
	if sb, err = m.store.GetSandbox(ctx, "", sb.ID); errors.Is(err, api.ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	in, err := m.instanceOf(sb)
	if err == nil && in != nil {
		err = m.freeze(ctx, in)
	}
	if err != nil || in == nil {
		m.destroy(context.WithoutCancel(ctx), sb)
		return errors.Join(errors.New("pausing a pooled sandbox"), err)
	}
	now := time.Now().UTC()
	f := false
	if _, err := m.store.UpdateSandbox(ctx, sb.ID, store.Update{From: []string{api.StateRunning}, State: api.StatePaused, Stored: &f, PausedAt: &now}); err != nil {
		m.destroy(context.WithoutCancel(ctx), sb)
		return err
	}
	m.log.Info("sandbox added to a warm pool", "sandbox_id", sb.ID, "template", t.Name)
	return nil
}

// foreground marks a create or restore in flight; refills wait for it.
func (m *Manager) foreground() func() {
	m.warm.foreground.Add(1)
	return func() { m.warm.foreground.Add(-1) }
}

// destroyPooled removes a pooled sandbox under its lock; one already gone
// (removed by a template delete, or claimed meanwhile) is left alone.
func (m *Manager) destroyPooled(ctx context.Context, id string) error {
	unlock := m.lock(id)
	defer unlock()
	sb, err := m.store.GetSandbox(ctx, "", id)
	if errors.Is(err, api.ErrNotFound) || (err == nil && sb.Pool == "") {
		return nil
	}
	if err != nil {
		return err
	}
	return m.destroy(context.WithoutCancel(ctx), sb)
}
