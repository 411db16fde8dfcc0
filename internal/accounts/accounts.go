// Package accounts holds teams, their API keys and their quotas.
//
// A team owns sandboxes, snapshots, templates and keys; every call made
// with a team's key sees only that team's (another team's are not_found).
// The admin key (the state directory's admin.key) belongs to team "admin"
// and alone may create teams and keys, revoke keys, set quotas and write
// images.
//
// Quotas are per team, with defaults from the daemon's config and
// overrides per team (PUT /v1/teams/{team}/quota):
//
//	running_sandboxes   sandboxes running at once (paused ones do not count)
//	running_memory_mb   memory of the running sandboxes, added up
//	storage_mb          snapshot and volume storage (a snapshot is refused at
//	                    or over it; creating a volume is not checked yet)
//	creates_per_minute  sandboxes created (forks count each) in any 60 s
//
// 0 is unlimited. Create, resume, fork and a revert that makes a paused
// sandbox run ask Admit before they make anything; Admit reserves what it
// grants until the operation ends, so operations side by side cannot
// together pass a limit. The window of creates is kept in memory: a
// restart forgets it.
package accounts

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/sandbox"
	"github.com/warrenhq/warren/internal/store"
)

// AdminTeam is the name of the admin key's team.
const AdminTeam = "admin"

// TeamID is the id of the team named name.
func TeamID(name string) string { return "team-" + name }

// Limits are quotas; 0 is unlimited.
type Limits struct {
	RunningSandboxes int64 `json:"running_sandboxes"`
	RunningMemoryMB  int64 `json:"running_memory_mb"`
	StorageMB        int64 `json:"storage_mb"`
	CreatesPerMinute int64 `json:"creates_per_minute"`
}

// Validate says what is wrong with l.
func (l Limits) Validate() error {
	if l.RunningSandboxes < 0 || l.RunningMemoryMB < 0 || l.StorageMB < 0 || l.CreatesPerMinute < 0 {
		return fmt.Errorf("quota limits must not be negative (0 is unlimited): %w", api.ErrInvalid)
	}
	return nil
}

// Accounts manages teams, keys and quotas.
type Accounts struct {
	st       *store.Store
	defaults Limits
	now      func() time.Time

	mu       sync.Mutex
	reserved map[string]*reservation // by team id
	creates  map[string][]time.Time  // by team id, the last minute's
}

type reservation struct{ sandboxes, memoryMB int64 }

var _ sandbox.Admission = (*Accounts)(nil)

// New returns Accounts on st with default limits.
func New(st *store.Store, defaults Limits) *Accounts {
	return &Accounts{st: st, defaults: defaults, now: time.Now,
		reserved: map[string]*reservation{}, creates: map[string][]time.Time{}}
}

var teamPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// HashKey is how API keys are stored: keys are 32 random bytes, so a
// plain SHA-256 is enough (the server hashes the same way).
func HashKey(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

func randomID(prefix string, n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// CreateKey makes an API key for team (created if new) and returns it:
// the only time the key itself is shown. Only its hash is stored.
func (a *Accounts) CreateKey(ctx context.Context, team, name string) (api.NewKey, error) {
	if !teamPattern.MatchString(team) {
		return api.NewKey{}, fmt.Errorf("team %q: use 1-63 lower-case letters, digits, '_', '.', '-', starting with a letter or digit: %w", team, api.ErrInvalid)
	}
	if team == AdminTeam {
		return api.NewKey{}, fmt.Errorf("team %q is the operator's; its key is the state directory's admin.key; pick another team: %w", team, api.ErrInvalid)
	}
	if len(name) > 128 {
		return api.NewKey{}, fmt.Errorf("key name: at most 128 bytes: %w", api.ErrInvalid)
	}
	t, err := a.st.EnsureTeam(ctx, TeamID(team), team)
	if err != nil {
		return api.NewKey{}, err
	}
	raw := make([]byte, 32)
	rand.Read(raw)
	secret := "wk_" + base64.RawURLEncoding.EncodeToString(raw)
	k := store.KeyInfo{
		Key:  store.Key{ID: randomID("key-", 6), TeamID: t.ID, Hash: HashKey(secret), CreatedAt: a.now().UTC()},
		Name: name, Prefix: secret[:11], Team: t.Name,
	}
	if err := a.st.AddKey(ctx, k); err != nil {
		return api.NewKey{}, err
	}
	return api.NewKey{Key: keyToAPI(k), Secret: secret}, nil
}

func keyToAPI(k store.KeyInfo) api.Key {
	return api.Key{ID: k.ID, Team: k.Team, Name: k.Name, Prefix: k.Prefix, Admin: k.Admin, CreatedAt: k.CreatedAt, RevokedAt: k.RevokedAt}
}

// ListKeys lists every key, revoked ones too; with team != "", that team's.
func (a *Accounts) ListKeys(ctx context.Context, team string) ([]api.Key, error) {
	teamID := ""
	if team != "" {
		t, err := a.st.TeamByName(ctx, team)
		if err != nil {
			return nil, err
		}
		teamID = t.ID
	}
	keys, err := a.st.ListKeys(ctx, teamID)
	if err != nil {
		return nil, err
	}
	out := make([]api.Key, 0, len(keys))
	for _, k := range keys {
		out = append(out, keyToAPI(k))
	}
	return out, nil
}

// RevokeKey revokes key id: every later call with it is unauthorized.
// The admin key is the state directory's admin.key and is not revoked
// here.
func (a *Accounts) RevokeKey(ctx context.Context, id string) error {
	k, err := a.st.GetKey(ctx, id)
	if err != nil {
		return err
	}
	if k.Admin {
		return fmt.Errorf("key %s is the admin key; to replace it, remove the state directory's admin.key and restart the server: %w", id, api.ErrConflict)
	}
	return a.st.RevokeKey(ctx, id, a.now().UTC())
}

// Teams lists the teams.
func (a *Accounts) Teams(ctx context.Context) ([]api.Team, error) {
	ts, err := a.st.ListTeams(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.Team, 0, len(ts))
	for _, t := range ts {
		out = append(out, api.Team{Name: t.Name, CreatedAt: t.CreatedAt})
	}
	return out, nil
}

// limits are the limits in force for a team: its overrides, else the
// defaults.
func (a *Accounts) limits(ctx context.Context, teamID string) (Limits, store.QuotaOverride, error) {
	o, err := a.st.TeamQuota(ctx, teamID)
	if err != nil {
		return Limits{}, o, err
	}
	l := a.defaults
	pick := func(dst *int64, v *int64) {
		if v != nil {
			*dst = *v
		}
	}
	pick(&l.RunningSandboxes, o.RunningSandboxes)
	pick(&l.RunningMemoryMB, o.RunningMemoryMB)
	pick(&l.StorageMB, o.StorageMB)
	pick(&l.CreatesPerMinute, o.CreatesPerMinute)
	return l, o, nil
}

// Quota returns the quota of the team named team: limits, overrides and
// what it uses now.
func (a *Accounts) Quota(ctx context.Context, team string) (api.Quota, error) {
	t, err := a.st.TeamByName(ctx, team)
	if err != nil {
		return api.Quota{}, err
	}
	l, o, err := a.limits(ctx, t.ID)
	if err != nil {
		return api.Quota{}, err
	}
	n, mem, err := a.st.TeamRunning(ctx, t.ID)
	if err != nil {
		return api.Quota{}, err
	}
	stored, err := a.storageBytes(ctx, t.ID)
	if err != nil {
		return api.Quota{}, err
	}
	a.mu.Lock()
	creates := int64(len(a.recentCreates(t.ID)))
	a.mu.Unlock()
	ptr := func(v int64) *int64 { return &v }
	return api.Quota{
		Team: t.Name,
		Limits: api.Limits{RunningSandboxes: ptr(l.RunningSandboxes), RunningMemoryMB: ptr(l.RunningMemoryMB),
			StorageMB: ptr(l.StorageMB), CreatesPerMinute: ptr(l.CreatesPerMinute)},
		Overrides: api.Limits{RunningSandboxes: o.RunningSandboxes, RunningMemoryMB: o.RunningMemoryMB,
			StorageMB: o.StorageMB, CreatesPerMinute: o.CreatesPerMinute},
		Used: api.QuotaUsage{RunningSandboxes: n, RunningMemoryMB: mem, StorageMB: mb(stored), CreatesPerMinute: creates},
	}, nil
}

// SetQuota replaces the overrides of the team named team (nil fields take
// the defaults) and returns its quota. Sandboxes already running stay;
// the limits apply to what comes next.
func (a *Accounts) SetQuota(ctx context.Context, team string, o api.Limits) (api.Quota, error) {
	for _, v := range []*int64{o.RunningSandboxes, o.RunningMemoryMB, o.StorageMB, o.CreatesPerMinute} {
		if v != nil && *v < 0 {
			return api.Quota{}, fmt.Errorf("quota limits must not be negative (0 is unlimited, null the default): %w", api.ErrInvalid)
		}
	}
	t, err := a.st.TeamByName(ctx, team)
	if err != nil {
		return api.Quota{}, fmt.Errorf("%w; teams are made with their first key (warren key create %s)", err, team)
	}
	if err := a.st.SetTeamQuota(ctx, t.ID, store.QuotaOverride{RunningSandboxes: o.RunningSandboxes,
		RunningMemoryMB: o.RunningMemoryMB, StorageMB: o.StorageMB, CreatesPerMinute: o.CreatesPerMinute}); err != nil {
		return api.Quota{}, err
	}
	return a.Quota(ctx, team)
}

// storageBytes is what a team stores: snapshots and volumes.
func (a *Accounts) storageBytes(ctx context.Context, teamID string) (int64, error) {
	snaps, err := a.st.TeamSnapshotBytes(ctx, teamID)
	if err != nil {
		return 0, err
	}
	vols, err := a.st.TeamVolumeBytes(ctx, teamID)
	if err != nil {
		return 0, err
	}
	return snaps + vols, nil
}

// mb rounds bytes up to MiB.
func mb(bytes int64) int64 { return (bytes + 1<<20 - 1) >> 20 }

// recentCreates prunes and returns a team's creates of the last minute.
// a.mu is held.
func (a *Accounts) recentCreates(teamID string) []time.Time {
	cut := a.now().Add(-time.Minute)
	ts := a.creates[teamID]
	i := 0
	for i < len(ts) && !ts[i].After(cut) {
		i++
	}
	ts = ts[i:]
	if len(ts) == 0 {
		delete(a.creates, teamID)
	} else {
		a.creates[teamID] = ts
	}
	return ts
}

// Admit implements sandbox.Admission.
func (a *Accounts) Admit(ctx context.Context, r sandbox.AdmitRequest) (func(), error) {
	l, _, err := a.limits(ctx, r.TeamID)
	if err != nil {
		return nil, err
	}
	refuse := func(limit string, max, used, requested int64) error {
		team := r.TeamID
		if t, err := a.st.TeamByID(ctx, r.TeamID); err == nil {
			team = t.Name
		}
		return &api.QuotaError{Team: team, Op: r.Op,
			QuotaExceeded: api.QuotaExceeded{Limit: limit, Max: max, Used: used, Requested: requested}}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if r.Sandboxes > 0 && (l.RunningSandboxes > 0 || l.RunningMemoryMB > 0) {
		n, mem, err := a.st.TeamRunning(ctx, r.TeamID)
		if err != nil {
			return nil, err
		}
		if res := a.reserved[r.TeamID]; res != nil {
			n, mem = n+res.sandboxes, mem+res.memoryMB
		}
		if l.RunningSandboxes > 0 && n+r.Sandboxes > l.RunningSandboxes {
			return nil, refuse("running_sandboxes", l.RunningSandboxes, n, r.Sandboxes)
		}
		if l.RunningMemoryMB > 0 && mem+r.MemoryMB > l.RunningMemoryMB {
			return nil, refuse("running_memory_mb", l.RunningMemoryMB, mem, r.MemoryMB)
		}
	}
	if r.Creates > 0 && l.CreatesPerMinute > 0 {
		if n := int64(len(a.recentCreates(r.TeamID))); n+r.Creates > l.CreatesPerMinute {
			return nil, refuse("creates_per_minute", l.CreatesPerMinute, n, r.Creates)
		}
	}
	if r.Snapshot && l.StorageMB > 0 {
		b, err := a.storageBytes(ctx, r.TeamID)
		if err != nil {
			return nil, err
		}
		if used := mb(b); used >= l.StorageMB {
			return nil, refuse("storage_mb", l.StorageMB, used, 0)
		}
	}
	if r.DryRun {
		return func() {}, nil
	}
	now := a.now()
	for range r.Creates {
		a.creates[r.TeamID] = append(a.creates[r.TeamID], now)
	}
	if r.Sandboxes == 0 {
		return func() {}, nil
	}
	res := a.reserved[r.TeamID]
	if res == nil {
		res = &reservation{}
		a.reserved[r.TeamID] = res
	}
	res.sandboxes += r.Sandboxes
	res.memoryMB += r.MemoryMB
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			defer a.mu.Unlock()
			res.sandboxes -= r.Sandboxes
			res.memoryMB -= r.MemoryMB
			if res.sandboxes <= 0 && a.reserved[r.TeamID] == res {
				delete(a.reserved, r.TeamID)
			}
		})
	}, nil
}
