package accounts

import (
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/sandbox"
	"github.com/warrenhq/warren/internal/store"
)

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), "warren.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func addRunning(t *testing.T, st *store.Store, team, id string, memMB int64) {
	t.Helper()
	sb := &store.Sandbox{ID: id, TeamID: team, State: api.StateRunning, CPUs: 1, MemoryMB: memMB, DiskMB: 1024,
		Network: api.Network{Egress: "none"}}
	if err := st.CreateSandbox(t.Context(), sb); err != nil {
		t.Fatal(err)
	}
}

func TestKeys(t *testing.T) {
	st := openStore(t)
	a := New(st, Limits{})
	ctx := t.Context()
	k, err := a.CreateKey(ctx, "acme", "ci")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(k.Secret, "wk_") || len(k.Secret) < 40 || k.Prefix != k.Secret[:11] || k.Team != "acme" || k.Name != "ci" {
		t.Errorf("new key: got %+v", k)
	}
	got, err := st.KeyByHash(ctx, HashKey(k.Secret))
	if err != nil || got.TeamID != TeamID("acme") || got.Admin {
		t.Fatalf("stored key: got %+v, %v", got, err)
	}
	// The key itself is never stored.
	keys, _ := st.ListKeys(ctx, "")
	for _, sk := range keys {
		if strings.Contains(sk.Hash, k.Secret) || sk.Hash == k.Secret {
			t.Errorf("the key is stored in the clear")
		}
	}
	for _, bad := range []string{"", "Acme", "a/b", "admin", strings.Repeat("a", 64)} {
		if _, err := a.CreateKey(ctx, bad, ""); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("team %q: got %v, want invalid", bad, err)
		}
	}
	a.CreateKey(ctx, "other", "")
	list, err := a.ListKeys(ctx, "acme")
	if err != nil || len(list) != 1 || list[0].ID != k.ID {
		t.Errorf("ListKeys(acme): got %+v, %v", list, err)
	}
	if _, err := a.ListKeys(ctx, "nobody"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("ListKeys of a missing team: got %v", err)
	}
	if err := a.RevokeKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := st.KeyByHash(ctx, HashKey(k.Secret)); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("a revoked key still authenticates: %v", err)
	}
	// The admin key is not revoked through the API.
	st.EnsureTeam(ctx, TeamID(AdminTeam), AdminTeam)
	st.AddKey(ctx, store.KeyInfo{Key: store.Key{ID: "key-admin", TeamID: TeamID(AdminTeam), Hash: "x", Admin: true, CreatedAt: time.Now()}})
	if err := a.RevokeKey(ctx, "key-admin"); !errors.Is(err, api.ErrConflict) {
		t.Errorf("revoking the admin key: got %v, want conflict", err)
	}
	teams, _ := a.Teams(ctx)
	if len(teams) != 3 {
		t.Errorf("teams: got %+v", teams)
	}
}

func TestAdmitRunning(t *testing.T) {
	st := openStore(t)
	a := New(st, Limits{RunningSandboxes: 2, RunningMemoryMB: 1024})
	ctx := t.Context()
	a.CreateKey(ctx, "acme", "")
	team := TeamID("acme")
	addRunning(t, st, team, "sb-aaaaaaaaaaa1", 256)

	req := sandbox.AdmitRequest{Op: "create", TeamID: team, Sandboxes: 1, MemoryMB: 256, Creates: 1}
	release, err := a.Admit(ctx, req)
	if err != nil {
		t.Fatalf("second sandbox: %v", err)
	}
	// The first is reserved until released: a third is refused.
	_, err = a.Admit(ctx, req)
	var qe *api.QuotaError
	if !errors.As(err, &qe) || !errors.Is(err, api.ErrQuota) {
		t.Fatalf("third sandbox: got %v, want a quota error", err)
	}
	if qe.Limit != "running_sandboxes" || qe.Max != 2 || qe.Used != 2 || qe.Requested != 1 || qe.Team != "acme" {
		t.Errorf("quota error: got %+v", qe.QuotaExceeded)
	}
	if !strings.Contains(err.Error(), "running sandboxes") || !strings.Contains(err.Error(), "limit of 2") {
		t.Errorf("message: got %q", err)
	}
	release()
	release() // twice is once
	if r, err := a.Admit(ctx, req); err != nil {
		t.Errorf("after release: %v", err)
	} else {
		r()
	}
	// Memory.
	_, err = a.Admit(ctx, sandbox.AdmitRequest{Op: "resume", TeamID: team, Sandboxes: 1, MemoryMB: 800})
	if !errors.As(err, &qe) || qe.Limit != "running_memory_mb" || qe.Used != 256 {
		t.Errorf("memory: got %v", err)
	}
	// Another team is not affected.
	if r, err := a.Admit(ctx, sandbox.AdmitRequest{Op: "create", TeamID: TeamID("other"), Sandboxes: 2, MemoryMB: 1024}); err != nil {
		t.Errorf("another team: %v", err)
	} else {
		r()
	}
	// An override wins over the default; null goes back to it.
	five := int64(5)
	q, err := a.SetQuota(ctx, "acme", api.Limits{RunningSandboxes: &five})
	if err != nil {
		t.Fatal(err)
	}
	if *q.Limits.RunningSandboxes != 5 || *q.Limits.RunningMemoryMB != 1024 || q.Used.RunningSandboxes != 1 || q.Used.RunningMemoryMB != 256 {
		t.Errorf("quota: got limits %+v used %+v", q.Limits, q.Used)
	}
	if _, err := a.SetQuota(ctx, "nobody", api.Limits{}); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("quota of a missing team: got %v", err)
	}
	neg := int64(-1)
	if _, err := a.SetQuota(ctx, "acme", api.Limits{StorageMB: &neg}); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("a negative limit: got %v", err)
	}
}

func TestAdmitConcurrent(t *testing.T) {
	st := openStore(t)
	a := New(st, Limits{RunningSandboxes: 3})
	team := TeamID("acme")
	var mu sync.Mutex
	granted := 0
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := a.Admit(t.Context(), sandbox.AdmitRequest{Op: "create", TeamID: team, Sandboxes: 1}); err == nil {
				mu.Lock()
				granted++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if granted != 3 {
		t.Errorf("granted: got %d, want 3", granted)
	}
}

func TestAdmitCreatesPerMinute(t *testing.T) {
	st := openStore(t)
	a := New(st, Limits{CreatesPerMinute: 3})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a.now = func() time.Time { return now }
	team := TeamID("acme")
	fork := sandbox.AdmitRequest{Op: "fork", TeamID: team, Sandboxes: 2, Creates: 2}
	r, err := a.Admit(t.Context(), fork)
	if err != nil {
		t.Fatal(err)
	}
	r()
	// A dry run checks without counting.
	if _, err := a.Admit(t.Context(), sandbox.AdmitRequest{Op: "fork", TeamID: team, Creates: 1, DryRun: true}); err != nil {
		t.Fatalf("dry run: %v", err)
	}
	if _, err := a.Admit(t.Context(), fork); !errors.Is(err, api.ErrQuota) {
		t.Fatalf("2 more within the minute: got %v, want refused", err)
	}
	if r, err := a.Admit(t.Context(), sandbox.AdmitRequest{Op: "create", TeamID: team, Creates: 1}); err != nil {
		t.Fatalf("1 more: %v", err)
	} else {
		r()
	}
	now = now.Add(61 * time.Second)
	if _, err := a.Admit(t.Context(), fork); err != nil {
		t.Errorf("a minute later: %v", err)
	}
}

func TestAdmitStorage(t *testing.T) {
	st := openStore(t)
	a := New(st, Limits{StorageMB: 2})
	a.CreateKey(t.Context(), "acme", "")
	team := TeamID("acme")
	snap := sandbox.AdmitRequest{Op: "snapshot", TeamID: team, Snapshot: true}
	if _, err := a.Admit(t.Context(), snap); err != nil {
		t.Fatalf("no snapshots yet: %v", err)
	}
	st.CreateSnapshot(t.Context(), store.Snapshot{ID: "sn-1", TeamID: team, SandboxID: "sb-1", Kind: "manual", CreatedAt: time.Now(), SizeBytes: 2 << 20})
	_, err := a.Admit(t.Context(), snap)
	var qe *api.QuotaError
	if !errors.As(err, &qe) || qe.Limit != "storage_mb" || qe.Used != 2 {
		t.Errorf("at the limit: got %v", err)
	}
	// Volumes count too.
	three := int64(3)
	a.SetQuota(t.Context(), "acme", api.Limits{StorageMB: &three})
	if r, err := a.Admit(t.Context(), snap); err != nil {
		t.Fatalf("under a raised limit: %v", err)
	} else {
		r()
	}
	if err := st.CreateVolume(t.Context(), store.Volume{ID: "vol-1", TeamID: team, Name: "data", SizeMB: 1, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Admit(t.Context(), snap); !errors.As(err, &qe) || qe.Used != 3 {
		t.Errorf("with a volume: got %v, want refused at 3 MB", err)
	}
	q, _ := a.Quota(t.Context(), "acme")
	if q.Used.StorageMB != 3 {
		t.Errorf("used storage: got %d MB, want 3 (2 of snapshots, 1 of volume)", q.Used.StorageMB)
	}
}
