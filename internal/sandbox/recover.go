package sandbox

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/store"
)

// Recover brings the daemon's view back in line with the host after a
// restart or a crash, before any request is served:
//   - running sandboxes whose instance still runs and answers are adopted;
//     those whose processes died are restored from their latest periodic
//     checkpoint, or become error when they have none;
//   - paused sandboxes still held in memory are adopted; one whose
//     processes died is marked stored if a stored image or checkpoint
//     exists (resume restores from it), else error;
//   - a sandbox caught while being created (never acknowledged) is removed;
//   - a pause or resume interrupted between runsc and the store is undone
//     (pause) or finished (resume);
//   - instances of interrupted restores, and image directories no row
//     refers to, are removed.
func (m *Manager) Recover(ctx context.Context) error {
	all, err := m.store.ListSandboxes(ctx, store.Filter{})
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(2, runtime.NumCPU()))
	for _, sb := range all {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			m.recoverOne(ctx, sb)
		}()
	}
	wg.Wait()
	if err := m.removeOrphans(ctx); err != nil {
		m.log.Warn("removing leftovers of interrupted operations", "err", err)
	}
	m.reattach(ctx)
	m.startPolicies()
	return nil
}

func (m *Manager) recoverOne(ctx context.Context, sb store.Sandbox) {
	log := m.log.With("sandbox_id", sb.ID)
	fail := func(reason string) {
		if bad, err := m.store.UpdateSandbox(ctx, sb.ID, store.Update{From: []string{sb.State}, State: api.StateError, Error: reason}); err != nil {
			log.Error("recording a failed recovery", "err", err)
		} else {
			m.emitState(ctx, api.EventError, bad, time.Time{})
		}
		log.Warn("sandbox not recovered", "reason", reason)
	}
	in, err := m.instanceOf(sb)
	if err != nil {
		fail(err.Error())
		return
	}
	status := m.instanceStatus(ctx, in)
	if status == "running" || status == "paused" {
		// A checkpoint cut off by the crash may have left it unthrottled.
		limit, err := instanceCPULimit(in)
		if err == nil {
			err = setCPULimit(m.cgroupOf(in), limit)
		}
		if err != nil {
			log.Warn("setting the CPU limit of a sandbox found running", "runtime_id", in.id, "err", err)
		}
	}
	switch sb.State {
	case api.StateCreating:
		// Never acknowledged: remove it, as a failed create does.
		if err := m.destroy(ctx, sb); err != nil {
			log.Error("removing a sandbox caught being created", "err", err)
			return
		}
		log.Info("removed a sandbox whose create the server did not finish")

	case api.StateRunning:
		if status == "paused" {
			// A pause the server did not get to record: undo it.
			if err := m.thaw(ctx, in); err != nil {
				fail("it was left paused by an interrupted pause and could not be resumed: " + err.Error())
				return
			}
			status = "running"
		}
		if status == "running" {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := in.agent.WaitReady(rctx, 10*time.Millisecond)
			cancel()
			if err == nil {
				m.setLive(sb.ID, in)
				log.Info("sandbox adopted", "runtime_id", in.id)
				return
			}
			if m.instanceStatus(ctx, in) == "running" {
				fail("its agent does not answer after a server restart (see " + filepath.Join(in.dir, "agent.log") + "): " + err.Error())
				return
			}
			status = "stopped"
		}
		ckpt, err := m.latestCheckpoint(ctx, sb.ID)
		if err != nil {
			if in != nil {
				m.stopInstance(ctx, in)
			}
			fail(fmt.Sprintf("its gVisor processes ended while the server was down (runsc says %s) and it has no checkpoint to restore from; delete it and create another (set checkpoint_interval_s to survive this)", status))
			return
		}
		if _, err := m.restoreInPlace(ctx, sb, ckpt, []string{api.StateRunning}); err != nil {
			fail(fmt.Sprintf("its processes ended while the server was down and restoring checkpoint %s failed: %v", ckpt, err))
			return
		}
		log.Info("sandbox restored from its latest checkpoint after its processes ended", "snapshot_id", ckpt)

	case api.StatePaused:
		if sb.Stored {
			if in != nil && status != "gone" {
				m.stopInstance(ctx, in)
			}
			return
		}
		if status == "paused" {
			m.setLive(sb.ID, in)
			log.Info("paused sandbox adopted", "runtime_id", in.id)
			return
		}
		if status == "running" {
			// A resume the server did not get to record: finish it.
			zero := time.Time{}
			if _, err := m.store.UpdateSandbox(ctx, sb.ID, store.Update{From: []string{api.StatePaused}, State: api.StateRunning, PausedAt: &zero}); err != nil {
				log.Error("recording an interrupted resume", "err", err)
				return
			}
			m.setLive(sb.ID, in)
			log.Info("sandbox adopted after an interrupted resume", "runtime_id", in.id)
			return
		}
		if m.snaps.Exists(pauseImageID(sb.ID)) || m.hasCheckpoint(ctx, sb.ID) {
			if in != nil {
				m.stopInstance(ctx, in)
			}
			t := true
			if _, err := m.store.UpdateSandbox(ctx, sb.ID, store.Update{From: []string{api.StatePaused}, Stored: &t}); err != nil {
				log.Error("marking a paused sandbox stored", "err", err)
			}
			log.Info("paused sandbox's processes are gone; it will resume from disk")
			return
		}
		if in != nil {
			m.stopInstance(ctx, in)
		}
		fail(fmt.Sprintf("its paused gVisor processes ended while the server was down (runsc says %s) and it has nothing on disk to resume from; delete it", status))
	}
}

func (m *Manager) hasCheckpoint(ctx context.Context, id string) bool {
	_, err := m.latestCheckpoint(ctx, id)
	return err == nil
}

// removeOrphans removes instances that no sandbox row points at (a restore
// interrupted before its swap) and image directories without a snapshot
// row or a stored pause (a snapshot interrupted before it was recorded).
func (m *Manager) removeOrphans(ctx context.Context) error {
	all, err := m.store.ListSandboxes(ctx, store.Filter{})
	if err != nil {
		return err
	}
	current := map[string]bool{}
	pauseImages := map[string]bool{}
	for _, sb := range all {
		current[sb.RuntimeID] = true
		pauseImages[pauseImageID(sb.ID)] = true
	}
	leases, err := m.store.Leases(ctx)
	if err != nil {
		return err
	}
	leased := map[string]bool{}
	for _, l := range leases {
		leased[l.RuntimeID] = true
		if current[l.RuntimeID] {
			continue
		}
		in, err := m.instanceFor(l.SandboxID, l.RuntimeID, l.NetIndex)
		if err != nil {
			continue
		}
		m.log.Info("removing an instance left by an interrupted operation", "sandbox_id", l.SandboxID, "runtime_id", l.RuntimeID)
		m.stopInstance(ctx, in)
	}
	// Containers no row or lease knows (a daemon that died between runsc
	// and the store).
	if ids, err := m.rt.IDs(); err == nil {
		for _, id := range ids {
			if !current[id] && !leased[id] {
				m.log.Info("removing a runsc container no sandbox owns", "runtime_id", id)
				orphan := &instance{id: id}
				m.unfreeze(ctx, orphan)
				m.rt.Delete(ctx, id)
			}
		}
	}
	snaps, err := m.store.ListSnapshots(ctx, store.SnapshotFilter{})
	if err != nil {
		return err
	}
	recorded := map[string]bool{}
	for _, sn := range snaps {
		recorded[sn.ID] = true
	}
	ids, err := m.snaps.IDs()
	if err != nil {
		return err
	}
	for _, id := range ids {
		if recorded[id] || pauseImages[id] || strings.HasSuffix(id, "-deleting") {
			continue
		}
		m.log.Info("removing an unrecorded image left by an interrupted snapshot", "image", id)
		m.snaps.Delete(id)
	}
	return nil
}
