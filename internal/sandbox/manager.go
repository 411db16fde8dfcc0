// Package sandbox owns the lifecycle of sandboxes.
//
// A sandbox moves through these states; every transition is written to the
// store (compare-and-set) before it is acknowledged:
//
//	create ──> creating ──agent answers──> running
//	              │                           │
//	              └──failure: cleaned up,     ├──processes died──> error
//	                 row removed              │
//	delete: any state ──> gone (processes, netns, veth, files, row)
//
// On start, the Manager adopts sandboxes whose runsc container still runs and
// whose agent answers; a sandbox that was running but whose processes died
// becomes error, with the reason; one caught in creating is cleaned up and
// becomes error too.
package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/agent"
	"github.com/warrenhq/warren/internal/backend/runsc"
	"github.com/warrenhq/warren/internal/image"
	"github.com/warrenhq/warren/internal/network"
	"github.com/warrenhq/warren/internal/snapshot"
	"github.com/warrenhq/warren/internal/store"
)

// Config holds the Manager's settings.
type Config struct {
	// StateDir holds sandboxes/<id>/ (bundle, writable layer, logs).
	StateDir string
	// AgentDir is the host directory with warren-agent, mounted read-only
	// in every sandbox.
	AgentDir string
	// CgroupParent is the cgroup under which sandboxes' cgroups are made.
	CgroupParent string
	// Node is this host's name, recorded as owner_node.
	Node string
	// Defaults and bounds of a sandbox's resources.
	DefaultCPUs     float64
	DefaultMemoryMB int64
	DefaultDiskMB   int64
	MaxCPUs         float64
	MaxMemoryMB     int64
	MaxDiskMB       int64
	// DefaultImage is used when a create names no image.
	DefaultImage string
	// DefaultIdle is the idle policy of a sandbox that sets none.
	DefaultIdle api.IdlePolicy
	// ReadyTimeout bounds the wait for a new sandbox's agent.
	ReadyTimeout time.Duration
	// Platform is runsc's platform, recorded in every image manifest.
	Platform string
	// StoreAfter is how long a sandbox stays paused in memory before it is
	// checkpointed to disk and its memory freed.
	StoreAfter time.Duration
	// MinAvailableMB: below this much available host memory, paused
	// sandboxes are stored at once, oldest first.
	MinAvailableMB int64
	// KeepCheckpoints is how many periodic checkpoints a sandbox keeps.
	KeepCheckpoints int
	// PolicyInterval is how often idle, store and checkpoint policies run.
	PolicyInterval time.Duration
	// MaxParallelRestores bounds concurrent restores (forks).
	MaxParallelRestores int
	// DefaultPoolSize is the warm pool of a template that sets none.
	DefaultPoolSize int
}

// Manager creates, tracks and deletes sandboxes.
type Manager struct {
	cfg    Config
	store  *store.Store
	images *image.Store
	rt     *runsc.Runsc
	snaps  *snapshot.Store
	pool   *network.Pool
	log    *slog.Logger

	policies policyState
	acct     accounting
	warm     poolState
	netw     *Networking // volumes, egress, credentials (network.go)

	mu    sync.Mutex
	live  map[string]*live
	locks map[string]*sync.Mutex
}

// live is what the Manager keeps in memory of a sandbox that runs.
type live struct {
	in         *instance
	lastActive time.Time
	// extraEnv is added to every command run through the API (see
	// ExtraEnv).
	extraEnv map[string]string
}

// NewManager returns a Manager. Call Recover before serving.
func NewManager(cfg Config, st *store.Store, images *image.Store, rt *runsc.Runsc, snaps *snapshot.Store, pool *network.Pool, log *slog.Logger) *Manager {
	return &Manager{cfg: cfg, store: st, images: images, rt: rt, snaps: snaps, pool: pool, log: log,
		live: map[string]*live{}, locks: map[string]*sync.Mutex{}}
}

// idAlphabet is lower-case base32 without padding.
var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// IDLen is the length of every sandbox id: "sb-" and 12 characters. Ids have
// one length so no id is a prefix of another (runsc matches by prefix).
const IDLen = 15

// NewID returns a fresh sandbox id.
func NewID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "sb-" + idEncoding.EncodeToString(b)[:12]
}

var idPattern = regexp.MustCompile(`^sb-[a-z2-7]{12}$`)

// ValidID reports whether id has the shape of a sandbox id.
func ValidID(id string) bool { return idPattern.MatchString(id) }

func (m *Manager) dir(id string) string { return filepath.Join(m.cfg.StateDir, "sandboxes", id) }

// lock serialises lifecycle operations on one sandbox.
func (m *Manager) lock(id string) func() {
	m.mu.Lock()
	l, ok := m.locks[id]
	if !ok {
		l = &sync.Mutex{}
		m.locks[id] = l
	}
	m.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// MinCheckpointIntervalS is the shortest periodic checkpoint interval.
const MinCheckpointIntervalS = 5

var namePattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$`)
var envKeyPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func invalid(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, api.ErrInvalid)...)
}

// validate checks a create request and fills in defaults. It changes
// nothing on the host.
func (m *Manager) validate(req *api.CreateSandboxRequest) (store.Sandbox, error) {
	sb := store.Sandbox{
		Name: req.Name, Env: req.Env, Metadata: req.Metadata,
		CPUs: m.cfg.DefaultCPUs, MemoryMB: m.cfg.DefaultMemoryMB, DiskMB: m.cfg.DefaultDiskMB,
		Idle: m.cfg.DefaultIdle, Network: api.Network{Egress: "none"}, OwnerNode: m.cfg.Node,
	}
	if req.Name != "" && !namePattern.MatchString(req.Name) {
		return sb, invalid("name %q: use 1-63 letters, digits, '_', '.', '-', starting with a letter or digit", req.Name)
	}
	if req.CPUs != nil {
		if *req.CPUs <= 0 || *req.CPUs > m.cfg.MaxCPUs {
			return sb, invalid("cpus %v: must be more than 0 and at most %v", *req.CPUs, m.cfg.MaxCPUs)
		}
		sb.CPUs = *req.CPUs
	}
	if req.MemoryMB != nil {
		if *req.MemoryMB < 64 || *req.MemoryMB > m.cfg.MaxMemoryMB {
			return sb, invalid("memory_mb %d: must be between 64 and %d", *req.MemoryMB, m.cfg.MaxMemoryMB)
		}
		sb.MemoryMB = *req.MemoryMB
	}
	if req.DiskMB != nil {
		if *req.DiskMB < 64 || *req.DiskMB > m.cfg.MaxDiskMB {
			return sb, invalid("disk_mb %d: must be between 64 and %d", *req.DiskMB, m.cfg.MaxDiskMB)
		}
		sb.DiskMB = *req.DiskMB
	}
	for k, v := range req.Env {
		if !envKeyPattern.MatchString(k) {
			return sb, invalid("env key %q: use letters, digits and '_', not starting with a digit", k)
		}
		if strings.ContainsRune(v, 0) {
			return sb, invalid("env %s: the value contains a NUL byte", k)
		}
	}
	if len(req.Metadata) > 64 {
		return sb, invalid("metadata has %d keys; at most 64", len(req.Metadata))
	}
	for k, v := range req.Metadata {
		if k == "" || len(k) > 128 || len(v) > 1024 {
			return sb, invalid("metadata %q: keys are 1-128 bytes and values at most 1024", k)
		}
	}
	if err := validateNetwork(req, &sb); err != nil {
		return sb, err
	}
	if req.Idle != nil {
		if req.Idle.TimeoutS < 0 {
			return sb, invalid("idle.timeout_s %d: must be 0 (never) or more", req.Idle.TimeoutS)
		}
		if req.Idle.Action != "pause" && req.Idle.Action != "delete" {
			return sb, invalid("idle.action %q: use \"pause\" or \"delete\"", req.Idle.Action)
		}
		sb.Idle = *req.Idle
	}
	if req.CheckpointIntervalS != nil {
		if v := *req.CheckpointIntervalS; v < 0 || (v > 0 && v < MinCheckpointIntervalS) {
			return sb, invalid("checkpoint_interval_s %d: use 0 (no periodic checkpoints) or at least %d", v, MinCheckpointIntervalS)
		}
		sb.CheckpointIntervalS = *req.CheckpointIntervalS
	}
	return sb, nil
}

// Create makes a sandbox for team and returns once its agent answers. On
// failure, everything it made is removed and the error says why.
func (m *Manager) Create(ctx context.Context, team string, req api.CreateSandboxRequest) (sb store.Sandbox, err error) {
	defer m.track(ctx, api.EventCreated, team, "").done(&sb, &err)
	sb, err = m.validate(&req)
	if err != nil {
		return sb, err
	}
	if err := m.checkAttachments(ctx, team, &req, sb); err != nil {
		return sb, err
	}
	defer m.foreground()()
	defer func() { sb, err = m.afterCreate(ctx, req, sb, err) }()
	if req.Template != "" || req.Snapshot != "" {
		return m.createFromSnapshot(ctx, team, req, sb)
	}
	imgName := req.Image
	if imgName == "" {
		imgName = m.cfg.DefaultImage
	}
	img, err := m.images.Get(ctx, imgName)
	if err != nil {
		return sb, err
	}
	release, err := m.admit(ctx, AdmitRequest{Op: "create", TeamID: team, Sandboxes: 1, MemoryMB: sb.MemoryMB, Creates: 1})
	if err != nil {
		return sb, err
	}
	defer release()
	sb.ID = NewID()
	sb.TeamID = team
	sb.State = api.StateCreating
	sb.Image = img.Name
	sb.ImageID = img.ID
	sb.OwnerEpoch = 1
	if err := m.store.CreateSandbox(ctx, &sb); err != nil {
		return sb, err
	}
	log := m.log.With("sandbox_id", sb.ID)
	start := time.Now()
	defer func() {
		if err != nil {
			uctx := context.WithoutCancel(ctx)
			if derr := m.store.DeleteSandbox(uctx, sb.ID); derr != nil {
				err = errors.Join(err, derr)
			}
			os.RemoveAll(m.dir(sb.ID))
			log.Error("create failed", "err", err)
		}
	}()

	hostname := sb.ID
	if sb.Name != "" && len(sb.Name) <= 63 && !strings.ContainsAny(sb.Name, "_.") {
		hostname = sb.Name
	}
	spec := Spec(SpecInput{
		ID: sb.ID, Hostname: hostname, Rootfs: img.Rootfs, AgentDir: m.cfg.AgentDir,
		Cwd: workdir(img), Env: BaseEnv(img.Config.Env, sb.Env),
		CPUs: sb.CPUs, MemoryMB: sb.MemoryMB, CgroupParent: m.cfg.CgroupParent,
	})
	in, err := m.startInstance(ctx, sb.ID, startOpts{spec: spec, diskMB: sb.DiskMB})
	if err != nil {
		return sb, err
	}
	sb, err = m.store.UpdateSandbox(ctx, sb.ID, store.Update{From: []string{api.StateCreating}, State: api.StateRunning,
		Runtime: &store.Runtime{ID: in.id, NetIndex: in.netIndex}})
	if err != nil {
		m.stopInstance(context.WithoutCancel(ctx), in)
		return sb, err
	}
	m.setLive(sb.ID, in)
	log.Info("sandbox created", "runtime_id", in.id, "image", sb.Image, "cpus", sb.CPUs, "memory_mb", sb.MemoryMB,
		"took", time.Since(start).Round(time.Millisecond))
	return sb, nil
}

func workdir(img image.Image) string {
	if img.Config.WorkingDir != "" {
		return img.Config.WorkingDir
	}
	if fi, err := os.Stat(filepath.Join(img.Rootfs, "root")); err == nil && fi.IsDir() {
		return "/root"
	}
	return "/"
}

// Get returns a sandbox of team.
func (m *Manager) Get(ctx context.Context, team, id string) (store.Sandbox, error) {
	if !ValidID(id) {
		return store.Sandbox{}, fmt.Errorf("sandbox %q: %w", id, api.ErrNotFound)
	}
	return m.store.GetSandbox(ctx, team, id)
}

// List lists a team's sandboxes.
func (m *Manager) List(ctx context.Context, f store.Filter) ([]store.Sandbox, error) {
	return m.store.ListSandboxes(ctx, f)
}

// Agent returns a client for the agent of a running sandbox of team, and
// records the call as activity.
func (m *Manager) Agent(ctx context.Context, team, id string) (*agent.Client, error) {
	sb, err := m.Get(ctx, team, id)
	if err != nil {
		return nil, err
	}
	if sb.State != api.StateRunning {
		return nil, fmt.Errorf("sandbox %s is %s, not running%s: %w", id, sb.State, stateHint(sb), api.ErrConflict)
	}
	in := m.liveInstance(id)
	if in == nil {
		return nil, fmt.Errorf("sandbox %s: not connected to its agent yet; retry: %w", id, api.ErrUnavailable)
	}
	m.Touch(id)
	return in.agent, nil
}

func stateHint(sb store.Sandbox) string {
	switch sb.State {
	case api.StateError:
		return " (" + sb.Error + "); delete it and create another"
	case api.StateCreating:
		return "; wait for its create to finish"
	case api.StatePaused:
		return "; resume it first"
	}
	return ""
}

func (m *Manager) setLive(id string, in *instance) {
	extra, err := m.store.ExtraEnv(context.Background(), id)
	if err != nil {
		m.log.Warn("reading a sandbox's extra environment", "sandbox_id", id, "err", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.live[id] = &live{in: in, lastActive: time.Now(), extraEnv: extra}
}

func (m *Manager) liveInstance(id string) *instance {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.live[id]; l != nil {
		return l.in
	}
	return nil
}

func (m *Manager) dropLive(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.live, id)
}

// Touch records activity on sandbox id, restarting its idle timer.
func (m *Manager) Touch(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.live[id]; l != nil {
		l.lastActive = time.Now()
	}
}

// instanceOf returns sb's current runtime instance (which may no longer
// run).
func (m *Manager) instanceOf(sb store.Sandbox) (*instance, error) {
	if in := m.liveInstance(sb.ID); in != nil && in.id == sb.RuntimeID {
		return in, nil
	}
	if sb.RuntimeID == "" || sb.NetIndex < 0 {
		return nil, nil
	}
	in, err := m.instanceFor(sb.ID, sb.RuntimeID, sb.NetIndex)
	if err != nil {
		return nil, err
	}
	in.agent = agent.NewClient(in.agentAddr())
	return in, nil
}

// Delete removes a sandbox of team and every trace of it.
func (m *Manager) Delete(ctx context.Context, team, id string) (err error) {
	defer m.track(ctx, api.EventDeleted, team, id).doneDelete(&err)
	if _, err := m.Get(ctx, team, id); err != nil {
		return err
	}
	unlock := m.lock(id)
	defer unlock()
	sb, err := m.Get(ctx, team, id)
	if err != nil {
		return err
	}
	if sb.State == api.StateCreating {
		return fmt.Errorf("sandbox %s is being created; delete it once the create has returned: %w", id, api.ErrConflict)
	}
	return m.destroy(context.WithoutCancel(ctx), sb)
}

// destroy removes the processes, network, files, pause image and row of
// sb. Its snapshots stay: they are the user's until deleted.
func (m *Manager) destroy(ctx context.Context, sb store.Sandbox) error {
	m.dropLive(sb.ID)
	var errs []error
	in, err := m.instanceOf(sb)
	if err != nil {
		errs = append(errs, err)
	}
	if in != nil {
		if err := m.stopInstance(ctx, in); err != nil {
			errs = append(errs, err)
		}
	}
	// Instances a crash left half-made (a restore that never swapped in).
	if leases, err := m.store.Leases(ctx); err == nil {
		for _, l := range leases {
			if l.SandboxID == sb.ID && (in == nil || l.RuntimeID != in.id) {
				if other, err := m.instanceFor(sb.ID, l.RuntimeID, l.NetIndex); err == nil {
					errs = append(errs, m.stopInstance(ctx, other))
				}
			}
		}
	}
	if err := m.snaps.Delete(pauseImageID(sb.ID)); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(m.dir(sb.ID)); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		// Keep the row, so the user can see it and delete it again.
		m.store.UpdateSandbox(ctx, sb.ID, store.Update{State: api.StateError, Error: "delete failed: " + err.Error()})
		return fmt.Errorf("deleting sandbox %s: %w", sb.ID, err)
	}
	if err := m.store.DeleteSandbox(ctx, sb.ID); err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.locks, sb.ID)
	m.mu.Unlock()
	m.log.Info("sandbox deleted", "sandbox_id", sb.ID)
	return nil
}

// Shutdown stops the background policies and closes agent connections;
// sandboxes keep running.
func (m *Manager) Shutdown() {
	m.stopPolicies()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, l := range m.live {
		if l.in.agent != nil {
			l.in.agent.CloseIdle()
		}
	}
}
