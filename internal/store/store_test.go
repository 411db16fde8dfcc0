package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warrenhq/warren/api"
)

func openTest(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "warren.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// newSandbox is a minimal sandbox row of team, with its first runtime
// instance (so CreateSandbox leases it a network index): every test makes
// its rows here, so a change to what a row needs is made in one place.
func newSandbox(team, id, name string) *Sandbox {
	return &Sandbox{
		ID: id, TeamID: team, Name: name, State: api.StateCreating, RuntimeID: id,
		Image: "debian:bookworm", ImageID: "sha256:abc", CPUs: 1, MemoryMB: 512, DiskMB: 4096,
		Network: api.Network{Egress: "none"}, Idle: api.IdlePolicy{TimeoutS: 600, Action: "pause"},
		OwnerNode: "host-1", OwnerEpoch: 1,
	}
}

func mustTeam(t *testing.T, s *Store, id string) {
	t.Helper()
	if _, err := s.EnsureTeam(t.Context(), id, "name-"+id); err != nil {
		t.Fatal(err)
	}
}

func mustCreate(t *testing.T, s *Store, sb *Sandbox) {
	t.Helper()
	if err := s.CreateSandbox(t.Context(), sb); err != nil {
		t.Fatalf("CreateSandbox %s: %v", sb.ID, err)
	}
}

func TestOpenMigrates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "warren.db")
	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := s.SchemaVersion(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if v != len(migrations) || v < 1 {
		t.Errorf("user_version: got %v, want %v", v, len(migrations))
	}
	var tables []string
	rows, err := s.db.QueryContext(t.Context(), `SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		rows.Scan(&n)
		tables = append(tables, n)
	}
	rows.Close()
	for _, want := range []string{"api_keys", "sandboxes", "teams"} {
		if !slices.Contains(tables, want) {
			t.Errorf("tables: got %v, want %s among them", tables, want)
		}
	}
	var mode string
	if err := s.db.QueryRowContext(t.Context(), "PRAGMA journal_mode").Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" {
		t.Errorf("journal_mode: got %v, want wal", mode)
	}
	mustTeam(t, s, "t1")
	mustCreate(t, s, newSandbox("t1", "sb-aaaaaaaaaaaa", "keep"))
	s.Close()

	// Reopening migrates nothing and keeps the data.
	for range 2 {
		s, err = Open(t.Context(), path)
		if err != nil {
			t.Fatalf("reopening: %v", err)
		}
		if v, _ := s.SchemaVersion(t.Context()); v != len(migrations) {
			t.Errorf("user_version after reopening: got %v, want %v", v, len(migrations))
		}
		sb, err := s.GetSandbox(t.Context(), "t1", "sb-aaaaaaaaaaaa")
		if err != nil || sb.Name != "keep" {
			t.Errorf("after reopening: got %+v, %v, want the sandbox named keep", sb, err)
		}
		s.Close()
	}
}

func TestOpenNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "warren.db")
	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	newer := len(migrations) + 1
	if _, err := s.db.ExecContext(t.Context(), fmt.Sprintf("PRAGMA user_version = %d", newer)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(t.Context(), path)
	if err == nil {
		s.Close()
		t.Fatal("Open of a newer schema: got nil, want an error")
	}
	if !strings.Contains(err.Error(), "newer") || !strings.Contains(err.Error(), path) {
		t.Errorf("got %q, want it to say the schema at %s is newer", err, path)
	}
}

func TestCreateSandboxNetIndex(t *testing.T) {
	s := openTest(t)
	mustTeam(t, s, "t1")
	ids := []string{"sb-aaaaaaaaaaaa", "sb-bbbbbbbbbbbb", "sb-cccccccccccc"}
	for i, id := range ids {
		sb := newSandbox("t1", id, "")
		mustCreate(t, s, sb)
		if sb.NetIndex != i {
			t.Errorf("%s: net index got %v, want %v", id, sb.NetIndex, i)
		}
	}
	if err := s.DeleteSandbox(t.Context(), ids[1]); err != nil {
		t.Fatal(err)
	}
	for _, want := range []int{1, 3, 4} {
		sb := newSandbox("t1", fmt.Sprintf("sb-dddddddddd%02d", want), "")
		mustCreate(t, s, sb)
		if sb.NetIndex != want {
			t.Errorf("after deleting index 1: got %v, want %v", sb.NetIndex, want)
		}
	}
	// Freeing 0 makes 0 the next again.
	if err := s.DeleteSandbox(t.Context(), ids[0]); err != nil {
		t.Fatal(err)
	}
	sb := newSandbox("t1", "sb-eeeeeeeeeeee", "")
	mustCreate(t, s, sb)
	if sb.NetIndex != 0 {
		t.Errorf("after deleting index 0: got %v, want 0", sb.NetIndex)
	}
	got, err := s.GetSandbox(t.Context(), "t1", "sb-eeeeeeeeeeee")
	if err != nil || got.NetIndex != 0 {
		t.Errorf("stored net index: got %v, %v, want 0", got.NetIndex, err)
	}
}

// A sandbox without a runtime instance yet holds no address.
func TestCreateSandboxWithoutRuntime(t *testing.T) {
	s := openTest(t)
	mustTeam(t, s, "t1")
	sb := newSandbox("t1", "sb-aaaaaaaaaaaa", "")
	sb.RuntimeID = ""
	mustCreate(t, s, sb)
	if sb.NetIndex != -1 {
		t.Errorf("net index: got %v, want -1", sb.NetIndex)
	}
	next := newSandbox("t1", "sb-bbbbbbbbbbbb", "")
	mustCreate(t, s, next)
	if next.NetIndex != 0 {
		t.Errorf("next sandbox's net index: got %v, want 0", next.NetIndex)
	}
}

// A restore leases its new instance an index beside the old one's; the
// old lease is released after the swap; deleting the sandbox frees all.
func TestNetLeases(t *testing.T) {
	s := openTest(t)
	ctx := t.Context()
	mustTeam(t, s, "t1")
	mustCreate(t, s, newSandbox("t1", "sb-aaaaaaaaaaaa", "")) // 0
	mustCreate(t, s, newSandbox("t1", "sb-bbbbbbbbbbbb", "")) // 1
	idx, err := s.LeaseNetIndex(ctx, "rt-a2", "sb-aaaaaaaaaaaa")
	if err != nil {
		t.Fatal(err)
	}
	if idx != 2 {
		t.Errorf("second instance: got %v, want 2", idx)
	}
	if _, err := s.LeaseNetIndex(ctx, "rt-a2", "sb-aaaaaaaaaaaa"); err == nil {
		t.Errorf("leasing the same runtime twice: got nil, want an error")
	}
	if err := s.ReleaseNetIndex(ctx, "sb-aaaaaaaaaaaa"); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseNetIndex(ctx, "sb-aaaaaaaaaaaa"); err != nil {
		t.Errorf("releasing again: got %v, want nil", err)
	}
	leases, err := s.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(leases), "[{1 sb-bbbbbbbbbbbb sb-bbbbbbbbbbbb} {2 rt-a2 sb-aaaaaaaaaaaa}]"; got != want {
		t.Errorf("leases: got %v, want %v", got, want)
	}
	if idx, _ := s.LeaseNetIndex(ctx, "rt-c", "sb-cccccccccccc"); idx != 0 {
		t.Errorf("after release: got %v, want 0", idx)
	}
	if err := s.DeleteSandbox(ctx, "sb-aaaaaaaaaaaa"); err != nil {
		t.Fatal(err)
	}
	leases, _ = s.Leases(ctx)
	if got, want := fmt.Sprint(leases), "[{0 rt-c sb-cccccccccccc} {1 sb-bbbbbbbbbbbb sb-bbbbbbbbbbbb}]"; got != want {
		t.Errorf("leases after delete: got %v, want %v", got, want)
	}
}

func TestCreateSandboxConcurrent(t *testing.T) {
	s := openTest(t)
	mustTeam(t, s, "t1")
	const n = 20
	var wg sync.WaitGroup
	idx := make([]int, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			sb := newSandbox("t1", fmt.Sprintf("sb-concurrent%02d", i), fmt.Sprintf("c%d", i))
			errs[i] = s.CreateSandbox(t.Context(), sb)
			idx[i] = sb.NetIndex
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	slices.Sort(idx)
	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(idx, want) {
		t.Errorf("net indexes: got %v, want %v", idx, want)
	}
}

func TestCreateSandboxNames(t *testing.T) {
	s := openTest(t)
	mustTeam(t, s, "t1")
	mustTeam(t, s, "t2")
	mustCreate(t, s, newSandbox("t1", "sb-aaaaaaaaaaaa", "web"))

	err := s.CreateSandbox(t.Context(), newSandbox("t1", "sb-bbbbbbbbbbbb", "web"))
	if !errors.Is(err, api.ErrConflict) {
		t.Fatalf("same name, same team: got %v, want %v", err, api.ErrConflict)
	}
	if !strings.Contains(err.Error(), `"web"`) {
		t.Errorf("got %q, want it to name the sandbox", err)
	}
	if _, err := s.GetSandbox(t.Context(), "", "sb-bbbbbbbbbbbb"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("the refused sandbox: got %v, want %v", err, api.ErrNotFound)
	}
	mustCreate(t, s, newSandbox("t2", "sb-cccccccccccc", "web"))
	// Unnamed sandboxes never clash.
	mustCreate(t, s, newSandbox("t1", "sb-dddddddddddd", ""))
	mustCreate(t, s, newSandbox("t1", "sb-eeeeeeeeeeee", ""))
	// A name is free again once its sandbox is deleted.
	if err := s.DeleteSandbox(t.Context(), "sb-aaaaaaaaaaaa"); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, newSandbox("t1", "sb-ffffffffffff", "web"))
}

func TestCreateSandboxDuplicateID(t *testing.T) {
	s := openTest(t)
	mustTeam(t, s, "t1")
	mustCreate(t, s, newSandbox("t1", "sb-aaaaaaaaaaaa", ""))
	if err := s.CreateSandbox(t.Context(), newSandbox("t1", "sb-aaaaaaaaaaaa", "")); err == nil {
		t.Error("a second sandbox with the same id: got nil, want an error")
	}
}

func TestGetSandboxTeams(t *testing.T) {
	s := openTest(t)
	mustTeam(t, s, "t1")
	mustTeam(t, s, "t2")
	mustCreate(t, s, newSandbox("t1", "sb-aaaaaaaaaaaa", "x"))
	tests := []struct {
		team, id string
		wantErr  error
	}{
		{"t1", "sb-aaaaaaaaaaaa", nil},
		{"", "sb-aaaaaaaaaaaa", nil}, // no team: the daemon's own view
		{"t2", "sb-aaaaaaaaaaaa", api.ErrNotFound},
		{"t1", "sb-zzzzzzzzzzzz", api.ErrNotFound},
	}
	for _, tt := range tests {
		sb, err := s.GetSandbox(t.Context(), tt.team, tt.id)
		if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
			t.Errorf("GetSandbox(%q, %q): got %v, want %v", tt.team, tt.id, err, tt.wantErr)
			continue
		}
		if tt.wantErr == nil && sb.ID != tt.id {
			t.Errorf("GetSandbox(%q, %q): got id %v", tt.team, tt.id, sb.ID)
		}
	}
}

func TestTransition(t *testing.T) {
	s := openTest(t)
	mustTeam(t, s, "t1")
	mustCreate(t, s, newSandbox("t1", "sb-aaaaaaaaaaaa", ""))
	ctx := t.Context()

	before, _ := s.GetSandbox(ctx, "", "sb-aaaaaaaaaaaa")
	time.Sleep(time.Millisecond) // so updated_at can move
	sb, err := s.Transition(ctx, "sb-aaaaaaaaaaaa", []string{api.StateCreating}, api.StateRunning, "")
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != api.StateRunning {
		t.Errorf("state: got %v, want %v", sb.State, api.StateRunning)
	}
	if !sb.UpdatedAt.After(before.UpdatedAt) {
		t.Errorf("updated_at: got %v, want after %v", sb.UpdatedAt, before.UpdatedAt)
	}

	// From a state it is not in: conflict, naming the state it is in.
	_, err = s.Transition(ctx, "sb-aaaaaaaaaaaa", []string{api.StateCreating, api.StatePaused}, api.StateRunning, "")
	if !errors.Is(err, api.ErrConflict) {
		t.Fatalf("wrong from: got %v, want %v", err, api.ErrConflict)
	}
	if !strings.Contains(err.Error(), "is running") {
		t.Errorf("got %q, want it to say the sandbox is running", err)
	}
	if got, _ := s.GetSandbox(ctx, "", "sb-aaaaaaaaaaaa"); got.State != api.StateRunning {
		t.Errorf("after a refused transition: got %v, want %v", got.State, api.StateRunning)
	}

	sb, err = s.Transition(ctx, "sb-aaaaaaaaaaaa", []string{api.StatePaused, api.StateRunning}, api.StateError, "processes died")
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != api.StateError || sb.Error != "processes died" {
		t.Errorf("got state %v error %q, want error with the reason", sb.State, sb.Error)
	}
	sb, err = s.Transition(ctx, "sb-aaaaaaaaaaaa", []string{api.StateError}, api.StateRunning, "")
	if err != nil {
		t.Fatal(err)
	}
	if sb.Error != "" {
		t.Errorf("error after leaving error: got %q, want cleared", sb.Error)
	}

	if _, err := s.Transition(ctx, "sb-zzzzzzzzzzzz", []string{api.StateRunning}, api.StatePaused, ""); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("missing sandbox: got %v, want %v", err, api.ErrNotFound)
	}
}

// Two racing transitions from one state: exactly one wins.
func TestTransitionCAS(t *testing.T) {
	s := openTest(t)
	mustTeam(t, s, "t1")
	mustCreate(t, s, newSandbox("t1", "sb-aaaaaaaaaaaa", ""))
	const n = 10
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = s.Transition(t.Context(), "sb-aaaaaaaaaaaa", []string{api.StateCreating}, api.StateRunning, "")
		})
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, api.ErrConflict):
			t.Errorf("loser: got %v, want %v", err, api.ErrConflict)
		}
	}
	if won != 1 {
		t.Errorf("winners: got %v, want 1", won)
	}
}

func TestListSandboxes(t *testing.T) {
	s := openTest(t)
	mustTeam(t, s, "t1")
	mustTeam(t, s, "t2")
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	rows := []struct {
		team, id, state string
		meta            map[string]string
	}{
		{"t1", "sb-aaaaaaaaaaaa", api.StateRunning, map[string]string{"owner": "alice", "env": "prod"}},
		{"t1", "sb-bbbbbbbbbbbb", api.StateRunning, map[string]string{"owner": "bob", "a.b": "dots"}},
		{"t1", "sb-cccccccccccc", api.StateError, map[string]string{"owner": "alice", `say "hi"`: "quotes", `back\slash`: "yes"}},
		{"t2", "sb-dddddddddddd", api.StateRunning, map[string]string{"owner": "alice"}},
	}
	for i, r := range rows {
		sb := newSandbox(r.team, r.id, "")
		sb.State = r.state
		sb.Metadata = r.meta
		sb.CreatedAt = base.Add(time.Duration(len(rows)-i) * time.Second) // newest first in the table
		mustCreate(t, s, sb)
	}
	tests := []struct {
		name string
		f    Filter
		want []string // oldest first
	}{
		{"all", Filter{}, []string{"sb-dddddddddddd", "sb-cccccccccccc", "sb-bbbbbbbbbbbb", "sb-aaaaaaaaaaaa"}},
		{"team", Filter{Team: "t1"}, []string{"sb-cccccccccccc", "sb-bbbbbbbbbbbb", "sb-aaaaaaaaaaaa"}},
		{"other team", Filter{Team: "t2"}, []string{"sb-dddddddddddd"}},
		{"no such team", Filter{Team: "t3"}, nil},
		{"state", Filter{Team: "t1", State: api.StateRunning}, []string{"sb-bbbbbbbbbbbb", "sb-aaaaaaaaaaaa"}},
		{"state error", Filter{State: api.StateError}, []string{"sb-cccccccccccc"}},
		{"metadata", Filter{Team: "t1", Metadata: map[string]string{"owner": "alice"}}, []string{"sb-cccccccccccc", "sb-aaaaaaaaaaaa"}},
		{"metadata and", Filter{Team: "t1", Metadata: map[string]string{"owner": "alice", "env": "prod"}}, []string{"sb-aaaaaaaaaaaa"}},
		{"metadata and state", Filter{Team: "t1", State: api.StateRunning, Metadata: map[string]string{"owner": "alice"}}, []string{"sb-aaaaaaaaaaaa"}},
		{"metadata no match", Filter{Metadata: map[string]string{"owner": "carol"}}, nil},
		{"metadata missing key", Filter{Metadata: map[string]string{"nope": ""}}, nil},
		{"key with a dot", Filter{Metadata: map[string]string{"a.b": "dots"}}, []string{"sb-bbbbbbbbbbbb"}},
		{"dot is not a path", Filter{Metadata: map[string]string{"a": "dots"}}, nil},
		{"key with quotes", Filter{Metadata: map[string]string{`say "hi"`: "quotes"}}, []string{"sb-cccccccccccc"}},
		{"key with a backslash", Filter{Metadata: map[string]string{`back\slash`: "yes"}}, []string{"sb-cccccccccccc"}},
		{"key like a path", Filter{Metadata: map[string]string{`owner"]`: "alice"}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sbs, err := s.ListSandboxes(t.Context(), tt.f)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, sb := range sbs {
				got = append(got, sb.ID)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSandboxRoundTrip(t *testing.T) {
	s := openTest(t)
	mustTeam(t, s, "t1")
	created := time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.FixedZone("CET", 3600))
	ckpt := time.Date(2025, 3, 4, 6, 0, 0, 42, time.UTC)
	tests := []struct {
		name string
		edit func(sb *Sandbox)
	}{
		{"full", func(sb *Sandbox) {
			sb.Name = "full"
			sb.Error = ""
			sb.Template, sb.FromSnapshot = "tpl", "snap-1"
			sb.CPUs = 0.25
			sb.Env = map[string]string{"A": "1", "WITH_NEWLINE": "x\ny", "EMPTY": ""}
			sb.Metadata = map[string]string{"a.b": "c", `q"uote`: "ü", "": "empty key"}
			sb.Network = api.Network{Egress: []any{"10.0.0.0/8", "example.com"}}
			sb.Volumes = []api.VolumeMount{{Volume: "data", Path: "/data"}, {Volume: "ro", Path: "/ro", ReadOnly: true}}
			sb.Idle = api.IdlePolicy{TimeoutS: 0, Action: "delete"}
			sb.CheckpointIntervalS = 300
			sb.LastCheckpointAt = &ckpt
			sb.CreatedAt = created
		}},
		{"empty collections", func(sb *Sandbox) {
			sb.Env, sb.Metadata, sb.Volumes = nil, nil, nil
			sb.Network = api.Network{}
		}},
		{"egress open", func(sb *Sandbox) { sb.Network = api.Network{Egress: "open"} }},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := newSandbox("t1", fmt.Sprintf("sb-roundtrip%03d", i), "")
			tt.edit(in)
			mustCreate(t, s, in)
			out, err := s.GetSandbox(t.Context(), "t1", in.ID)
			if err != nil {
				t.Fatal(err)
			}
			// What a reader gets back: UTC times, empty rather than nil maps
			// and lists, and JSON's view of any.
			want := *in
			want.CreatedAt = in.CreatedAt.UTC()
			want.UpdatedAt = in.UpdatedAt.UTC()
			if want.Env == nil {
				want.Env = map[string]string{}
			}
			if want.Metadata == nil {
				want.Metadata = map[string]string{}
			}
			if want.Volumes == nil {
				want.Volumes = []api.VolumeMount{}
			}
			// JSON, so pointers compare by what they point to.
			g, err := json.Marshal(out)
			if err != nil {
				t.Fatal(err)
			}
			w, err := json.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			if string(g) != string(w) {
				t.Errorf("got  %s\nwant %s", g, w)
			}
			if tt.name == "full" && (!out.CreatedAt.Equal(created) || !out.LastCheckpointAt.Equal(ckpt)) {
				t.Errorf("times: got %v and %v, want %v and %v", out.CreatedAt, out.LastCheckpointAt, created, ckpt)
			}
		})
	}
}

func TestDeleteSandbox(t *testing.T) {
	s := openTest(t)
	mustTeam(t, s, "t1")
	mustCreate(t, s, newSandbox("t1", "sb-aaaaaaaaaaaa", ""))
	if err := s.DeleteSandbox(t.Context(), "sb-aaaaaaaaaaaa"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSandbox(t.Context(), "", "sb-aaaaaaaaaaaa"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("after delete: got %v, want %v", err, api.ErrNotFound)
	}
	if err := s.DeleteSandbox(t.Context(), "sb-aaaaaaaaaaaa"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("deleting again: got %v, want %v", err, api.ErrNotFound)
	}
}

func TestEnsureTeam(t *testing.T) {
	s := openTest(t)
	first, err := s.EnsureTeam(t.Context(), "team-1", "admin")
	if err != nil {
		t.Fatal(err)
	}
	if first.ID != "team-1" || first.Name != "admin" || first.CreatedAt.IsZero() {
		t.Errorf("got %+v, want team-1 named admin with a creation time", first)
	}
	// Again, even with another id: the existing team, unchanged.
	for _, id := range []string{"team-1", "team-2"} {
		again, err := s.EnsureTeam(t.Context(), id, "admin")
		if err != nil {
			t.Fatal(err)
		}
		if again != first {
			t.Errorf("EnsureTeam(%q, admin) again: got %+v, want %+v", id, again, first)
		}
	}
	other, err := s.EnsureTeam(t.Context(), "team-3", "other")
	if err != nil || other.ID != "team-3" {
		t.Errorf("another team: got %+v, %v, want team-3", other, err)
	}
}

func TestKeys(t *testing.T) {
	s := openTest(t)
	mustTeam(t, s, "t1")
	created := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	k := Key{ID: "key-1", TeamID: "t1", Hash: "hash-1", Admin: true, CreatedAt: created}
	if err := s.CreateKey(t.Context(), k); err != nil {
		t.Fatal(err)
	}
	got, err := s.KeyByHash(t.Context(), "hash-1")
	if err != nil {
		t.Fatal(err)
	}
	if got != k {
		t.Errorf("got %+v, want %+v", got, k)
	}
	if _, err := s.KeyByHash(t.Context(), "hash-2"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("unknown hash: got %v, want %v", err, api.ErrNotFound)
	}
	if err := s.CreateKey(t.Context(), Key{ID: "key-2", TeamID: "t1", Hash: "hash-1", CreatedAt: created}); err == nil {
		t.Error("a second key with the same hash: got nil, want an error")
	}
	if err := s.CreateKey(t.Context(), Key{ID: "key-3", TeamID: "no-such-team", Hash: "hash-3", CreatedAt: created}); err == nil {
		t.Error("a key of a team that does not exist: got nil, want an error")
	}
	// Revocation has no method yet; set it as one would.
	if _, err := s.db.ExecContext(t.Context(), `UPDATE api_keys SET revoked_at = ? WHERE id = 'key-1'`, fmtTime(time.Now())); err != nil {
		t.Fatal(err)
	}
	if _, err := s.KeyByHash(t.Context(), "hash-1"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("revoked key: got %v, want %v", err, api.ErrNotFound)
	}
}

func TestJSONPathKey(t *testing.T) {
	tests := []struct{ in, want string }{
		{"owner", `"owner"`},
		{"a.b", `"a.b"`},
		{`say "hi"`, `"say \"hi\""`},
		{`back\slash`, `"back\\slash"`},
	}
	for _, tt := range tests {
		if got := jsonPathKey(tt.in); got != tt.want {
			t.Errorf("jsonPathKey(%q): got %v, want %v", tt.in, got, tt.want)
		}
	}
}
