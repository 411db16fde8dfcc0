package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/store"
)

// Templates: an image booted once, set up, let settle, and snapshotted, so
// that sandboxes start from a warm machine. A sandbox made from a template
// (or from any snapshot) is a restore of that snapshot, personalised with
// its own id, name, metadata, idle policy and environment. What gVisor
// fixes at boot stays as the snapshot has it: memory size, CPU limit and
// disk size (a create that asks for others is refused, saying so), and the
// environment of processes already running (the environment a create adds
// applies to every command run through the API from then on).

var templateNamePattern = namePattern

// MaxPoolSize bounds a template's warm pool.
const MaxPoolSize = 64

// MaxSetupSteps bounds a template's setup commands.
const MaxSetupSteps = 100

// settle bounds how long a build waits for the machine to go idle.
const settle = 15 * time.Second

// BuildTemplate boots req.Image, runs req.Setup, waits until the machine
// is idle and snapshots it as template req.Name of team, replacing a
// previous build only once the new one is complete. progress (never nil)
// gets the setup commands' output as it comes.
func (m *Manager) BuildTemplate(ctx context.Context, team string, req api.CreateTemplateRequest, progress func(api.TemplateEvent)) (store.Template, error) {
	if !templateNamePattern.MatchString(req.Name) {
		return store.Template{}, invalid("template name %q: use 1-63 letters, digits, '_', '.', '-', starting with a letter or digit", req.Name)
	}
	if len(req.Setup) > MaxSetupSteps {
		return store.Template{}, invalid("setup has %d commands; at most %d (join them with && or put them in a script)", len(req.Setup), MaxSetupSteps)
	}
	for i, c := range req.Setup {
		if strings.TrimSpace(c) == "" {
			return store.Template{}, invalid("setup[%d] is empty", i)
		}
	}
	if req.Pool != nil && (*req.Pool < 0 || *req.Pool > MaxPoolSize) {
		return store.Template{}, invalid("pool %d: keep between 0 and %d sandboxes warm", *req.Pool, MaxPoolSize)
	}
	if req.SetupTimeoutS < 0 {
		return store.Template{}, invalid("setup_timeout_s %d: must not be negative", req.SetupTimeoutS)
	}
	timeout := time.Duration(req.SetupTimeoutS) * time.Second
	if timeout == 0 {
		timeout = 30 * time.Minute
	}
	start := time.Now()
	progress(api.TemplateEvent{Phase: "boot", Message: "booting " + orDefault(req.Image, m.cfg.DefaultImage)})
	sb, err := m.Create(ctx, team, api.CreateSandboxRequest{
		Image: req.Image, Env: req.Env, CPUs: req.CPUs, MemoryMB: req.MemoryMB, DiskMB: req.DiskMB,
		Metadata: map[string]string{"warren.template-build": req.Name},
		Idle:     &api.IdlePolicy{TimeoutS: 0, Action: "pause"},
	})
	if err != nil {
		return store.Template{}, fmt.Errorf("template %q: booting %s: %w", req.Name, orDefault(req.Image, m.cfg.DefaultImage), err)
	}
	defer func() {
		if err := m.Delete(context.WithoutCancel(ctx), team, sb.ID); err != nil {
			m.log.Warn("removing a template's build sandbox", "sandbox_id", sb.ID, "err", err)
		}
	}()
	var buildLog strings.Builder
	for i, cmd := range req.Setup {
		progress(api.TemplateEvent{Phase: "setup", Step: i, Command: cmd})
		fmt.Fprintf(&buildLog, "$ %s\n", cmd)
		client, err := m.Agent(ctx, team, sb.ID)
		if err != nil {
			return store.Template{}, err
		}
		code := -1
		err = client.ExecStream(ctx, api.ExecRequest{Cmd: []string{"/bin/sh", "-c", cmd}, TimeoutS: timeout.Seconds()},
			func(ev api.ExecEvent) error {
				switch {
				case ev.Stdout != nil:
					buildLog.WriteString(*ev.Stdout)
					progress(api.TemplateEvent{Phase: "setup", Step: i, Stdout: ev.Stdout})
				case ev.Stderr != nil:
					buildLog.WriteString(*ev.Stderr)
					progress(api.TemplateEvent{Phase: "setup", Step: i, Stderr: ev.Stderr})
				case ev.ExitCode != nil:
					code = *ev.ExitCode
				}
				return nil
			})
		if err != nil {
			return store.Template{}, fmt.Errorf("template %q: setup[%d] %q: %w", req.Name, i, cmd, err)
		}
		if code != 0 {
			return store.Template{}, fmt.Errorf("template %q: setup[%d] %q exited with %d; its output ends:\n%s: %w",
				req.Name, i, cmd, code, tail(buildLog.String(), 2000), api.ErrInvalid)
		}
	}
	progress(api.TemplateEvent{Phase: "settle", Message: "waiting until the machine is idle"})
	cur, err := m.store.GetSandbox(ctx, team, sb.ID)
	if err != nil {
		return store.Template{}, err
	}
	m.waitIdle(ctx, cur.RuntimeID)

	progress(api.TemplateEvent{Phase: "snapshot", Message: "snapshotting"})
	sn, err := m.Snapshot(ctx, team, sb.ID, req.Name, "template")
	if err != nil {
		return store.Template{}, fmt.Errorf("template %q: %w", req.Name, err)
	}
	poolSize := m.cfg.DefaultPoolSize
	if req.Pool != nil {
		poolSize = *req.Pool
	}
	t := store.Template{
		TeamID: team, Name: req.Name, SnapshotID: sn.ID, Image: sb.Image, Setup: req.Setup, Env: req.Env, PoolSize: poolSize,
		CPUs: sb.CPUs, MemoryMB: sb.MemoryMB, DiskMB: sb.DiskMB, BuildLog: tail(buildLog.String(), 1<<20),
		UpdatedAt: time.Now().UTC(),
	}
	old, err := m.store.PutTemplate(ctx, t)
	if err != nil {
		m.DeleteSnapshot(context.WithoutCancel(ctx), team, sn.ID)
		return store.Template{}, err
	}
	if old != "" && old != sn.ID {
		// Sandboxes made from the old build are restores: they don't need
		// its files any more.
		if err := m.DeleteSnapshot(context.WithoutCancel(ctx), team, old); err != nil && !errors.Is(err, api.ErrNotFound) {
			m.log.Warn("removing a template's previous snapshot", "template", req.Name, "snapshot_id", old, "err", err)
		}
	}
	m.kickRefill()
	m.log.Info("template built", "template", req.Name, "snapshot_id", sn.ID, "steps", len(req.Setup),
		"took", time.Since(start).Round(time.Millisecond))
	return m.store.GetTemplate(ctx, team, req.Name)
}

// waitIdle waits until the runtime instance's cgroup uses under 2% of a CPU
// over a quarter second, or settle passes.
func (m *Manager) waitIdle(ctx context.Context, runtimeID string) {
	usage := func() (time.Duration, bool) {
		for _, p := range []string{
			filepath.Join("/sys/fs/cgroup/cpuacct", m.cfg.CgroupParent, runtimeID, "cpuacct.usage"),
			filepath.Join("/sys/fs/cgroup/cpu,cpuacct", m.cfg.CgroupParent, runtimeID, "cpuacct.usage"),
		} {
			if b, err := os.ReadFile(p); err == nil {
				ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
				return time.Duration(ns), err == nil
			}
		}
		return 0, false
	}
	deadline := time.Now().Add(settle)
	const window = 250 * time.Millisecond
	for time.Now().Before(deadline) && ctx.Err() == nil {
		before, ok := usage()
		if !ok {
			time.Sleep(time.Second) // no cgroup to read: a fixed pause
			return
		}
		time.Sleep(window)
		after, _ := usage()
		if after-before < window/50 {
			return
		}
	}
}

// GetTemplate returns a team's template.
func (m *Manager) GetTemplate(ctx context.Context, team, name string) (store.Template, error) {
	return m.store.GetTemplate(ctx, team, name)
}

// PoolReady counts the sandboxes of a template waiting, paused in memory,
// to be claimed.
func (m *Manager) PoolReady(ctx context.Context, t store.Template) int {
	members, err := m.store.PoolMembers(ctx, t.TeamID, t.Name)
	if err != nil {
		return 0
	}
	n := 0
	for _, sb := range members {
		if sb.State == api.StatePaused && !sb.Stored && sb.FromSnapshot == t.SnapshotID {
			n++
		}
	}
	return n
}

// ListTemplates lists a team's templates.
func (m *Manager) ListTemplates(ctx context.Context, team string) ([]store.Template, error) {
	return m.store.ListTemplates(ctx, team)
}

// DeleteTemplate removes a team's template and its snapshot. Sandboxes made
// from it are not affected.
func (m *Manager) DeleteTemplate(ctx context.Context, team, name string) error {
	snap, err := m.store.DeleteTemplate(ctx, team, name)
	if err != nil {
		return err
	}
	members, err := m.store.PoolMembers(ctx, team, name)
	if err != nil {
		return err
	}
	for _, sb := range members {
		if err := m.destroyPooled(ctx, sb.ID); err != nil {
			return fmt.Errorf("template %q: removing its warm pool: %w", name, err)
		}
	}
	if err := m.DeleteSnapshot(ctx, team, snap); err != nil && !errors.Is(err, api.ErrNotFound) {
		return err
	}
	return nil
}

// createFromSnapshot makes a sandbox of team from a template or a snapshot
// (req.Template or req.Snapshot), personalised by req. sb holds the
// validated request with the server's defaults.
func (m *Manager) createFromSnapshot(ctx context.Context, team string, req api.CreateSandboxRequest, sb store.Sandbox) (store.Sandbox, error) {
	if req.Template != "" && req.Snapshot != "" {
		return sb, invalid("give template or snapshot, not both")
	}
	if req.Image != "" {
		return sb, invalid("give image, template or snapshot, not several: a template or snapshot brings its own image")
	}
	snapID := req.Snapshot
	if req.Template != "" {
		t, err := m.store.GetTemplate(ctx, team, req.Template)
		if err != nil {
			return sb, err
		}
		snapID = t.SnapshotID
	}
	sn, err := m.store.GetSnapshot(ctx, team, snapID)
	if err != nil {
		return sb, err
	}
	from := "snapshot " + sn.ID
	if req.Template != "" {
		from = "template " + req.Template
	}
	if req.MemoryMB != nil && *req.MemoryMB != sn.Config.MemoryMB {
		return sb, invalid("memory_mb %d: %s has %d MB, fixed when it booted; omit memory_mb or build a template with the size you need", *req.MemoryMB, from, sn.Config.MemoryMB)
	}
	if req.CPUs != nil && *req.CPUs != sn.Config.CPUs {
		return sb, invalid("cpus %v: %s has %v, fixed when it booted; omit cpus or build a template with the CPUs you need", *req.CPUs, from, sn.Config.CPUs)
	}
	if req.DiskMB != nil && *req.DiskMB != sn.Config.DiskMB {
		return sb, invalid("disk_mb %d: %s has %d MB; omit disk_mb or build a template with the size you need", *req.DiskMB, from, sn.Config.DiskMB)
	}
	release, err := m.admit(ctx, AdmitRequest{Op: "create", TeamID: team, Sandboxes: 1, MemoryMB: sn.Config.MemoryMB, Creates: 1})
	if err != nil {
		return sb, err
	}
	defer release()
	env := map[string]string{}
	for k, v := range sn.Config.Env {
		env[k] = v
	}
	for k, v := range req.Env {
		env[k] = v
	}
	idle := sn.Config.Idle
	if req.Idle != nil {
		idle = sb.Idle
	}
	if req.Template != "" {
		t, err := m.store.GetTemplate(ctx, team, req.Template)
		if err != nil {
			return sb, err
		}
		claimed, ok, err := m.claim(ctx, team, t, store.Claim{Name: sb.Name, Metadata: sb.Metadata, Env: env,
			ExtraEnv: req.Env, Idle: idle, CheckpointIntervalS: sb.CheckpointIntervalS})
		if err != nil || ok {
			return claimed, err
		}
	}
	row := store.Sandbox{
		ID: NewID(), TeamID: team, Name: sb.Name, State: api.StateCreating, Image: sn.Image, ImageID: sn.ImageID,
		Template: req.Template, FromSnapshot: sn.ID, CPUs: sn.Config.CPUs, MemoryMB: sn.Config.MemoryMB,
		DiskMB: sn.Config.DiskMB, Env: env, Metadata: sb.Metadata, Network: sn.Config.Network, Idle: idle,
		CheckpointIntervalS: sb.CheckpointIntervalS, OwnerNode: m.cfg.Node, OwnerEpoch: 1,
	}
	return m.restoreNew(ctx, row, sn, req.Env)
}

// restoreNew records sandbox row and starts it from snapshot sn. extraEnv
// is added to every command run through the API. On failure nothing is
// left.
func (m *Manager) restoreNew(ctx context.Context, row store.Sandbox, sn store.Snapshot, extraEnv map[string]string) (store.Sandbox, error) {
	if _, err := m.snaps.Check(sn.ID, m.rt.BuildID(), m.cfg.Platform, false); err != nil {
		return store.Sandbox{}, err
	}
	if row.Metadata == nil {
		row.Metadata = map[string]string{}
	}
	start := time.Now()
	if err := m.store.CreateSandbox(ctx, &row); err != nil {
		return row, err
	}
	fail := func(err error) (store.Sandbox, error) {
		m.store.DeleteSandbox(context.WithoutCancel(ctx), row.ID)
		os.RemoveAll(m.dir(row.ID))
		return store.Sandbox{}, err
	}
	if len(extraEnv) > 0 {
		if err := m.store.SetExtraEnv(ctx, row.ID, extraEnv); err != nil {
			return fail(err)
		}
	}
	in, err := m.startInstance(ctx, row.ID, startOpts{imageDir: m.snaps.Path(sn.ID), diskMB: row.DiskMB})
	if err != nil {
		return fail(err)
	}
	sb, err := m.store.UpdateSandbox(ctx, row.ID, store.Update{From: []string{api.StateCreating}, State: api.StateRunning,
		Runtime: &store.Runtime{ID: in.id, NetIndex: in.netIndex}})
	if err != nil {
		m.stopInstance(context.WithoutCancel(ctx), in)
		return fail(err)
	}
	m.setLive(sb.ID, in)
	m.log.Info("sandbox created from a snapshot", "sandbox_id", sb.ID, "runtime_id", in.id, "snapshot_id", sn.ID,
		"template", sb.Template, "took", time.Since(start).Round(time.Millisecond))
	return sb, nil
}

// ExtraEnv is the environment sandbox id adds to every command run through
// the API: what a create from a snapshot or template asked for beyond the
// snapshot's own environment.
func (m *Manager) ExtraEnv(id string) map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.live[id]; l != nil {
		return l.extraEnv
	}
	return nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
