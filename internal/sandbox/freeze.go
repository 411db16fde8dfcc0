package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/warrenhq/warren/internal/backend/runsc"
)

// Pausing in memory is runsc pause: the Sentry stops every task of the
// sandbox and holds them; memory stays resident and no CPU is used.
//
// Warren used to freeze the sandbox's cgroup instead (a file write, ~4 ms,
// against ~16 ms for runsc pause's process spawn and RPC). That is unsafe
// under systrap: the freezer interrupts a stub thread's syscall while the
// Sentry waits on its seccomp notification, the Sentry reads that as a dead
// stub and kills the sandbox ("systrap corrupted memory: subprocess died"
// in its log). A stress of random pause, resume and exec lost a sandbox in
// fewer than 100 cycles on a v1 freezer; with runsc pause, none in 600.
//
// The freezer code stays for instances a Warren of before froze: they are
// thawed (unfreeze) before anything needs their processes, and a frozen
// cgroup counts as paused.

// freezerFile returns the file that freezes the instance's cgroup and the
// values that freeze and thaw it, or "" where there is none.
func (m *Manager) freezerFile(in *instance) (path, frozen, thawed string) {
	rel := filepath.Join(m.cfg.CgroupParent, in.id)
	if p := filepath.Join("/sys/fs/cgroup/freezer", rel, "freezer.state"); fileExists(p) {
		return p, "FROZEN", "THAWED"
	}
	if p := filepath.Join("/sys/fs/cgroup", rel, "cgroup.freeze"); fileExists(p) {
		return p, "1", "0"
	}
	return "", "", ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// freeze pauses an instance in memory (runsc pause).
func (m *Manager) freeze(ctx context.Context, in *instance) error {
	return m.rt.Pause(ctx, in.id)
}

// thaw resumes an instance paused in memory: runsc resume, or a thaw of
// its cgroup if a Warren of before froze it.
func (m *Manager) thaw(ctx context.Context, in *instance) error {
	if m.frozen(in) {
		return m.unfreeze(ctx, in)
	}
	return m.rt.Resume(ctx, in.id)
}

// setFreezer writes want and waits until the cgroup reports it (a v1
// freezer passes through FREEZING).
func setFreezer(ctx context.Context, path, want string) error {
	if err := os.WriteFile(path, []byte(want), 0); err != nil {
		return fmt.Errorf("writing %s to %s: %w", want, path, err)
	}
	if !strings.HasSuffix(path, "freezer.state") {
		return nil // cgroup v2: cgroup.events says when it is done; the write is enough for us
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(b)) == want {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return errors.Join(fmt.Errorf("%s did not reach %s (it says %s)", path, want, strings.TrimSpace(string(b))), ctx.Err())
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// frozen reports whether the instance's cgroup is frozen.
func (m *Manager) frozen(in *instance) bool {
	p, frozen, _ := m.freezerFile(in)
	if p == "" {
		return false
	}
	b, err := os.ReadFile(p)
	return err == nil && strings.TrimSpace(string(b)) == frozen
}

// instanceStatus is runsc's status of an instance ("running", "paused",
// "stopped", "gone"), with a frozen cgroup counted as paused.
func (m *Manager) instanceStatus(ctx context.Context, in *instance) string {
	if in == nil {
		return "gone"
	}
	// runsc state asks the sandbox itself, which a frozen sandbox can't
	// answer: read the freezer first.
	if m.frozen(in) {
		if procs, err := os.ReadFile(filepath.Join(filepath.Dir(mustFreezerPath(m, in)), "cgroup.procs")); err == nil && len(strings.TrimSpace(string(procs))) > 0 {
			return "paused"
		}
		return "stopped"
	}
	st, err := m.rt.State(ctx, in.id)
	switch {
	case runsc.IsNotFound(err):
		return "gone"
	case err != nil:
		return "unknown"
	}
	return st.Status
}

// unfreeze thaws a frozen instance so that its processes can act: a
// checkpoint needs the sandbox to answer, and a kill is held pending on a
// frozen process. The sandbox runs for the moment between the thaw and
// what follows (a checkpoint pauses it again first thing).
func (m *Manager) unfreeze(ctx context.Context, in *instance) error {
	if !m.frozen(in) {
		return nil
	}
	p, _, thawed := m.freezerFile(in)
	return setFreezer(ctx, p, thawed)
}

func mustFreezerPath(m *Manager, in *instance) string {
	p, _, _ := m.freezerFile(in)
	return p
}
