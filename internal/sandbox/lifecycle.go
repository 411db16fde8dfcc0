package sandbox

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/snapshot"
	"github.com/warrenhq/warren/internal/store"
)

// Pause, resume, snapshot, revert and fork. Each holds the sandbox's lock,
// so operations on one sandbox are serialised; the store's compare-and-set
// refuses a transition from a state that changed under it.
//
//	running ──pause──> paused (resident: held, memory kept)
//	                     │ StoreAfter, or host short of memory
//	                     v
//	                   paused (stored: checkpointed to disk, processes gone)
//	resume: either paused ──> running (stored ones are restored)
//	revert: any state ──> running, from a snapshot, same id
//	snapshot: running ──> running (checkpoint --leave-running)

// pauseImageID names the checkpoint image of a stored pause.
func pauseImageID(sandboxID string) string { return "ps-" + sandboxID[3:] }

// NewSnapshotID returns a fresh snapshot id.
func NewSnapshotID() string { return "sn-" + NewID()[3:] }

// Pause holds a running sandbox of team in memory (runsc pause). Pausing a
// paused sandbox is a no-op.
func (m *Manager) Pause(ctx context.Context, team, id string) (res store.Sandbox, err error) {
	defer m.track(ctx, api.EventPaused, team, id).done(&res, &err)
	if _, err := m.Get(ctx, team, id); err != nil {
		return store.Sandbox{}, err
	}
	unlock := m.lock(id)
	defer unlock()
	sb, err := m.store.GetSandbox(ctx, team, id)
	if err != nil {
		return sb, err
	}
	if sb.State == api.StatePaused {
		return sb, nil
	}
	if sb.State != api.StateRunning {
		return sb, fmt.Errorf("sandbox %s is %s; only a running sandbox can be paused%s: %w", id, sb.State, stateHint(sb), api.ErrConflict)
	}
	start := time.Now()
	in, err := m.instanceOf(sb)
	if err != nil || in == nil {
		return sb, fmt.Errorf("sandbox %s has no runtime instance: %v: %w", id, err, api.ErrConflict)
	}
	if err := m.freeze(ctx, in); err != nil {
		return sb, fmt.Errorf("pausing sandbox %s: %w", id, err)
	}
	now := time.Now().UTC()
	f := false
	sb, err = m.store.UpdateSandbox(ctx, id, store.Update{From: []string{api.StateRunning}, State: api.StatePaused, Stored: &f, PausedAt: &now})
	if err != nil {
		m.thaw(context.WithoutCancel(ctx), in)
		return sb, err
	}
	if in.agent != nil {
		in.agent.CloseIdle()
	}
	m.log.Info("sandbox paused", "sandbox_id", id, "took", time.Since(start).Round(time.Millisecond))
	return sb, nil
}

// Resume brings a paused sandbox of team back to running, from memory or
// from its stored image. Resuming a running sandbox is a no-op.
func (m *Manager) Resume(ctx context.Context, team, id string) (res store.Sandbox, err error) {
	defer m.track(ctx, api.EventResumed, team, id).done(&res, &err)
	if _, err := m.Get(ctx, team, id); err != nil {
		return store.Sandbox{}, err
	}
	unlock := m.lock(id)
	defer unlock()
	return m.resumeLocked(ctx, team, id)
}

func (m *Manager) resumeLocked(ctx context.Context, team, id string) (store.Sandbox, error) {
	sb, err := m.store.GetSandbox(ctx, team, id)
	if err != nil {
		return sb, err
	}
	switch {
	case sb.State == api.StateRunning:
		return sb, nil
	case sb.State != api.StatePaused:
		return sb, fmt.Errorf("sandbox %s is %s; only a paused sandbox can be resumed%s: %w", id, sb.State, stateHint(sb), api.ErrConflict)
	}
	release, err := m.admit(ctx, AdmitRequest{Op: "resume", TeamID: sb.TeamID, SandboxID: id, Sandboxes: 1, MemoryMB: sb.MemoryMB})
	if err != nil {
		return sb, err
	}
	defer release()
	start := time.Now()
	zero := time.Time{}
	if !sb.Stored {
		in, err := m.instanceOf(sb)
		if err != nil || in == nil {
			return sb, fmt.Errorf("sandbox %s has no runtime instance: %v: %w", id, err, api.ErrConflict)
		}
		if err := m.thaw(ctx, in); err != nil {
			return sb, fmt.Errorf("resuming sandbox %s: %w", id, err)
		}
		sb, err = m.store.UpdateSandbox(ctx, id, store.Update{From: []string{api.StatePaused}, State: api.StateRunning, PausedAt: &zero})
		if err != nil {
			return sb, err
		}
		m.Touch(id)
		m.log.Info("sandbox resumed", "sandbox_id", id, "from", "memory", "took", time.Since(start).Round(time.Millisecond))
		return sb, nil
	}
	imageID := pauseImageID(id)
	if !m.snaps.Exists(imageID) {
		// A sandbox recovered after a crash resumes from its latest
		// checkpoint.
		latest, err := m.latestCheckpoint(ctx, id)
		if err != nil {
			return sb, err
		}
		imageID = latest
	}
	sb, err = m.restoreInPlace(ctx, sb, imageID, []string{api.StatePaused})
	if err != nil {
		return sb, err
	}
	if err := m.snaps.DeleteLater(pauseImageID(id)); err != nil {
		m.log.Warn("removing the pause image of a resumed sandbox", "sandbox_id", id, "err", err)
	}
	m.log.Info("sandbox resumed", "sandbox_id", id, "from", "disk", "image", imageID, "took", time.Since(start).Round(time.Millisecond))
	return sb, nil
}

func (m *Manager) latestCheckpoint(ctx context.Context, id string) (string, error) {
	snaps, err := m.store.ListSnapshots(ctx, store.SnapshotFilter{SandboxID: id, Kind: "checkpoint"})
	if err != nil {
		return "", err
	}
	for i := len(snaps) - 1; i >= 0; i-- {
		if m.snaps.Exists(snaps[i].ID) {
			return snaps[i].ID, nil
		}
	}
	return "", fmt.Errorf("sandbox %s has no stored image or checkpoint to resume from; delete it: %w", id, api.ErrConflict)
}

// restoreInPlace starts a new instance of sb from image imageID beside the
// current one, then swaps it in; the old instance is removed only once the
// new one answers and the swap is recorded. If anything fails, sb is left
// as it was.
func (m *Manager) restoreInPlace(ctx context.Context, sb store.Sandbox, imageID string, from []string) (store.Sandbox, error) {
	start := time.Now()
	if _, err := m.snaps.Check(imageID, m.rt.BuildID(), m.cfg.Platform, false); err != nil {
		return sb, fmt.Errorf("sandbox %s: %w", sb.ID, err)
	}
	old, _ := m.instanceOf(sb)
	in, err := m.startInstance(ctx, sb.ID, startOpts{imageDir: m.snaps.Path(imageID), diskMB: sb.DiskMB})
	if err != nil {
		return sb, fmt.Errorf("restoring sandbox %s from %s (the sandbox is unchanged): %w", sb.ID, imageID, err)
	}
	f, zero := false, time.Time{}
	updated, err := m.store.UpdateSandbox(ctx, sb.ID, store.Update{From: from, State: api.StateRunning,
		Runtime: &store.Runtime{ID: in.id, NetIndex: in.netIndex}, Stored: &f, PausedAt: &zero})
	if err != nil {
		m.stopInstance(context.WithoutCancel(ctx), in)
		return sb, err
	}
	m.setLive(sb.ID, in)
	if old != nil {
		if err := m.stopInstance(context.WithoutCancel(ctx), old); err != nil {
			m.log.Warn("removing a replaced instance", "sandbox_id", sb.ID, "runtime_id", old.id, "err", err)
		}
	}
	m.log.Info("sandbox restored", "sandbox_id", sb.ID, "runtime_id", in.id, "image", imageID)
	m.emitState(ctx, api.EventRestored, updated, start)
	return updated, nil
}

// storePaused checkpoints a paused-resident sandbox to disk and ends its
// processes, freeing its memory. It holds the sandbox's lock.
func (m *Manager) storePaused(ctx context.Context, id string) error {
	unlock := m.lock(id)
	defer unlock()
	sb, err := m.store.GetSandbox(ctx, "", id)
	if err != nil {
		return err
	}
	if sb.State != api.StatePaused || sb.Stored {
		return nil
	}
	in, err := m.instanceOf(sb)
	if err != nil || in == nil {
		return fmt.Errorf("sandbox %s: no runtime instance to store: %v", id, err)
	}
	start := time.Now()
	if err := m.unfreeze(ctx, in); err != nil {
		return fmt.Errorf("storing paused sandbox %s: %w", id, err)
	}
	imageID := pauseImageID(id)
	m.snaps.Delete(imageID)
	_, _, err = m.writeImage(ctx, sb, in, imageID, false)
	if err != nil {
		// The checkpoint may have ended the container; if it did, the
		// sandbox can only come back from a periodic checkpoint.
		if st := m.instanceStatus(ctx, in); st != "paused" && st != "running" {
			if bad, uerr := m.store.UpdateSandbox(ctx, id, store.Update{State: api.StateError,
				Error: "storing the paused sandbox to disk failed and ended it: " + err.Error()}); uerr == nil {
				m.emitState(ctx, api.EventError, bad, time.Time{})
			}
		}
		return fmt.Errorf("storing paused sandbox %s: %w", id, err)
	}
	t := true
	if _, err := m.store.UpdateSandbox(ctx, id, store.Update{From: []string{api.StatePaused}, Stored: &t,
		Runtime: &store.Runtime{ID: "", NetIndex: -1}}); err != nil {
		return err
	}
	m.dropLive(id)
	if err := m.stopInstance(context.WithoutCancel(ctx), in); err != nil {
		m.log.Warn("removing a stored sandbox's instance", "sandbox_id", id, "err", err)
	}
	m.log.Info("paused sandbox stored to disk", "sandbox_id", id, "took", time.Since(start).Round(time.Millisecond))
	m.emitState(ctx, api.EventStored, sb, start)
	return nil
}

// writeImage checkpoints instance in of sb into image imageID, with the
// spec it runs under beside it, and returns the image's manifest and how
// long the checkpoint itself took (the app is paused at most that long).
// With leaveRunning the sandbox goes on running; without, it ends.
func (m *Manager) writeImage(ctx context.Context, sb store.Sandbox, in *instance, imageID string, leaveRunning bool) (snapshot.Manifest, time.Duration, error) {
	var took time.Duration
	man := snapshot.Manifest{SandboxID: sb.ID, CreatedAt: time.Now().UTC(), RunscBuild: m.rt.BuildID(), Platform: m.cfg.Platform}
	man, err := m.snaps.Create(ctx, imageID, man, func(dir string) error {
		if err := snapshot.CopyFile(filepath.Join(in.bundle(), "config.json"), filepath.Join(dir, snapshot.SpecName)); err != nil {
			return err
		}
		return m.withCPUUnlimited(in, func() error {
			start := time.Now()
			err := m.rt.Checkpoint(ctx, in.id, dir, in.options(sb.DiskMB), leaveRunning)
			took = time.Since(start)
			return err
		})
	})
	return man, took, err
}

// Snapshot saves a running sandbox of team (memory, processes and
// writable layer) while it keeps running.
func (m *Manager) Snapshot(ctx context.Context, team, id, name, kind string) (sn store.Snapshot, err error) {
	defer m.track(ctx, api.EventSnapshotted, team, id).doneSnapshot(&sn, &err)
	if len(name) > 128 {
		return store.Snapshot{}, fmt.Errorf("snapshot name: at most 128 bytes: %w", api.ErrInvalid)
	}
	if _, err := m.Get(ctx, team, id); err != nil {
		return store.Snapshot{}, err
	}
	release, err := m.admit(ctx, AdmitRequest{Op: "snapshot", TeamID: team, SandboxID: id, Snapshot: true})
	if err != nil {
		return store.Snapshot{}, err
	}
	defer release()
	unlock := m.lock(id)
	defer unlock()
	return m.snapshotLocked(ctx, team, id, name, kind)
}

func (m *Manager) snapshotLocked(ctx context.Context, team, id, name, kind string) (store.Snapshot, error) {
	sb, err := m.store.GetSandbox(ctx, team, id)
	if err != nil {
		return store.Snapshot{}, err
	}
	if sb.State != api.StateRunning {
		return store.Snapshot{}, fmt.Errorf("sandbox %s is %s; only a running sandbox can be snapshotted%s: %w", id, sb.State, stateHint(sb), api.ErrConflict)
	}
	in, err := m.instanceOf(sb)
	if err != nil || in == nil {
		return store.Snapshot{}, fmt.Errorf("sandbox %s has no runtime instance: %v: %w", id, err, api.ErrConflict)
	}
	start := time.Now()
	snapID := NewSnapshotID()
	man, pause, err := m.writeImage(ctx, sb, in, snapID, true)
	if err != nil {
		return store.Snapshot{}, fmt.Errorf("snapshotting sandbox %s (it keeps running; earlier snapshots are intact): %w", id, err)
	}
	parent := sb.FromSnapshot
	if prev, err := m.store.ListSnapshots(ctx, store.SnapshotFilter{SandboxID: id}); err == nil && len(prev) > 0 {
		parent = prev[len(prev)-1].ID
	}
	sn := store.Snapshot{
		ID: snapID, TeamID: sb.TeamID, SandboxID: id, ParentID: parent, Name: name, Kind: kind,
		CreatedAt: man.CreatedAt, SizeBytes: man.SizeBytes, RunscBuild: man.RunscBuild,
		Image: sb.Image, ImageID: sb.ImageID,
		Config: store.SnapshotConfig{CPUs: sb.CPUs, MemoryMB: sb.MemoryMB, DiskMB: sb.DiskMB, Env: sb.Env, Network: sb.Network, Idle: sb.Idle},
	}
	if err := m.store.CreateSnapshot(ctx, sn); err != nil {
		m.snaps.Delete(snapID)
		return store.Snapshot{}, err
	}
	m.Touch(id)
	m.log.Info("sandbox snapshotted", "sandbox_id", id, "snapshot_id", snapID, "kind", kind, "size_bytes", man.SizeBytes,
		"checkpoint", pause.Round(time.Millisecond), "took", time.Since(start).Round(time.Millisecond))
	return sn, nil
}

// GetSnapshot returns a snapshot of team.
func (m *Manager) GetSnapshot(ctx context.Context, team, id string) (store.Snapshot, error) {
	return m.store.GetSnapshot(ctx, team, id)
}

// ListSnapshots lists a team's snapshots.
func (m *Manager) ListSnapshots(ctx context.Context, f store.SnapshotFilter) ([]store.Snapshot, error) {
	return m.store.ListSnapshots(ctx, f)
}

// DeleteSnapshot removes a snapshot of team: its row first (so it is no
// longer listed), then its files.
func (m *Manager) DeleteSnapshot(ctx context.Context, team, id string) error {
	if _, err := m.store.GetSnapshot(ctx, team, id); err != nil {
		return err
	}
	if err := m.store.DeleteSnapshot(ctx, id); err != nil {
		return err
	}
	if err := m.snaps.Delete(id); err != nil {
		m.log.Warn("removing a deleted snapshot's files", "snapshot_id", id, "err", err)
	}
	return nil
}

// Revert returns sandbox id of team to snapshot snapID: same id, memory and
// disk as of the snapshot. The snapshot is restored beside the sandbox
// before it is swapped in, so a failed revert leaves the sandbox as it was.
func (m *Manager) Revert(ctx context.Context, team, id, snapID string) (res store.Sandbox, err error) {
	defer m.track(ctx, api.EventReverted, team, id).done(&res, &err)
	if snapID == "" {
		return store.Sandbox{}, fmt.Errorf("snapshot is required, like {\"snapshot\": \"sn-...\"}: %w", api.ErrInvalid)
	}
	if _, err := m.Get(ctx, team, id); err != nil {
		return store.Sandbox{}, err
	}
	sn, err := m.store.GetSnapshot(ctx, team, snapID)
	if err != nil {
		return store.Sandbox{}, err
	}
	unlock := m.lock(id)
	defer unlock()
	sb, err := m.store.GetSandbox(ctx, team, id)
	if err != nil {
		return sb, err
	}
	if sb.State == api.StateCreating {
		return sb, fmt.Errorf("sandbox %s is being created: %w", id, api.ErrConflict)
	}
	if sb.State != api.StateRunning {
		release, err := m.admit(ctx, AdmitRequest{Op: "revert", TeamID: sb.TeamID, SandboxID: id, Sandboxes: 1, MemoryMB: sn.Config.MemoryMB})
		if err != nil {
			return sb, err
		}
		defer release()
	}
	start := time.Now()
	sb, err = m.restoreInPlace(ctx, sb, sn.ID, []string{sb.State})
	if err != nil {
		return sb, err
	}
	if err := m.snaps.DeleteLater(pauseImageID(id)); err != nil {
		m.log.Warn("removing the pause image of a reverted sandbox", "sandbox_id", id, "err", err)
	}
	m.log.Info("sandbox reverted", "sandbox_id", id, "snapshot_id", sn.ID, "took", time.Since(start).Round(time.Millisecond))
	return sb, nil
}

// MaxFork bounds one fork call.
const MaxFork = 64

// Fork starts count new sandboxes from snapshot snapID of team, each with
// its own id, network namespace and writable layer. All start or none: on
// a failure the ones already made are removed.
func (m *Manager) Fork(ctx context.Context, team, snapID string, count int) (forked []store.Sandbox, err error) {
	defer m.track(ctx, api.EventForked, team, snapID).doneFork(&forked, &err)
	if count < 1 || count > MaxFork {
		return nil, fmt.Errorf("count %d: fork between 1 and %d sandboxes: %w", count, MaxFork, api.ErrInvalid)
	}
	sn, err := m.store.GetSnapshot(ctx, team, snapID)
	if err != nil {
		return nil, err
	}
	if _, err := m.snaps.Check(sn.ID, m.rt.BuildID(), m.cfg.Platform, false); err != nil {
		return nil, err
	}
	release, err := m.admit(ctx, AdmitRequest{Op: "fork", TeamID: team, Sandboxes: int64(count),
		MemoryMB: int64(count) * sn.Config.MemoryMB, Creates: int64(count)})
	if err != nil {
		return nil, err
	}
	defer release()
	start := time.Now()
	out := make([]store.Sandbox, count)
	errs := make([]error, count)
	sem := make(chan struct{}, max(1, m.cfg.MaxParallelRestores))
	var wg sync.WaitGroup
	for i := range count {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i], errs[i] = m.forkOne(ctx, team, sn)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for i, sb := range out {
			if errs[i] == nil && sb.ID != "" {
				m.destroy(context.WithoutCancel(ctx), sb)
			}
		}
		return nil, fmt.Errorf("forking snapshot %s: %w", snapID, err)
	}
	m.log.Info("snapshot forked", "snapshot_id", snapID, "count", count, "took", time.Since(start).Round(time.Millisecond))
	return out, nil
}

func (m *Manager) forkOne(ctx context.Context, team string, sn store.Snapshot) (store.Sandbox, error) {
	return m.restoreNew(ctx, store.Sandbox{
		ID: NewID(), TeamID: team, State: api.StateCreating, Image: sn.Image, ImageID: sn.ImageID,
		FromSnapshot: sn.ID, CPUs: sn.Config.CPUs, MemoryMB: sn.Config.MemoryMB, DiskMB: sn.Config.DiskMB,
		Env: sn.Config.Env, Network: sn.Config.Network, Idle: sn.Config.Idle, OwnerNode: m.cfg.Node, OwnerEpoch: 1,
	}, sn, nil)
}

// ForkSandbox snapshots sandbox id now and starts count copies of it.
func (m *Manager) ForkSandbox(ctx context.Context, team, id string, count int) ([]store.Sandbox, error) {
	if count < 1 || count > MaxFork {
		return nil, fmt.Errorf("count %d: fork between 1 and %d sandboxes: %w", count, MaxFork, api.ErrInvalid)
	}
	// Refuse over quota before taking the snapshot, so a refusal leaves
	// nothing behind.
	sb, err := m.Get(ctx, team, id)
	if err != nil {
		return nil, err
	}
	if _, err := m.admit(ctx, AdmitRequest{Op: "fork", TeamID: team, SandboxID: id, Sandboxes: int64(count),
		MemoryMB: int64(count) * sb.MemoryMB, Creates: int64(count), DryRun: true}); err != nil {
		return nil, err
	}
	sn, err := m.Snapshot(ctx, team, id, "fork", "manual")
	if err != nil {
		return nil, err
	}
	out, err := m.Fork(ctx, team, sn.ID, count)
	if errors.Is(err, api.ErrQuota) {
		m.DeleteSnapshot(context.WithoutCancel(ctx), team, sn.ID)
	}
	return out, err
}
