package store

import (
	"errors"
	"testing"
	"time"

	"github.com/warrenhq/warren/api"
)

func TestKeysListRevoke(t *testing.T) {
	s := openTest(t)
	ctx := t.Context()
	mustTeam(t, s, "ta")
	mustTeam(t, s, "tb")
	now := time.Now().UTC()
	for i, k := range []KeyInfo{
		{Key: Key{ID: "key-1", TeamID: "ta", Hash: "h1", CreatedAt: now}, Name: "ci", Prefix: "wk_aaaa"},
		{Key: Key{ID: "key-2", TeamID: "tb", Hash: "h2", CreatedAt: now.Add(time.Second)}, Prefix: "wk_bbbb"},
	} {
		if err := s.AddKey(ctx, k); err != nil {
			t.Fatalf("AddKey %d: %v", i, err)
		}
	}
	all, err := s.ListKeys(ctx, "")
	if err != nil || len(all) != 2 {
		t.Fatalf("ListKeys: got %d, %v, want 2", len(all), err)
	}
	if all[0].Name != "ci" || all[0].Prefix != "wk_aaaa" || all[0].Team != "name-ta" {
		t.Errorf("key 1: got %+v", all[0])
	}
	only, err := s.ListKeys(ctx, "tb")
	if err != nil || len(only) != 1 || only[0].ID != "key-2" {
		t.Errorf("ListKeys(tb): got %+v, %v, want key-2", only, err)
	}
	if _, err := s.KeyByHash(ctx, "h2"); err != nil {
		t.Fatalf("KeyByHash before revoking: %v", err)
	}
	if err := s.RevokeKey(ctx, "key-2", now); err != nil {
		t.Fatal(err)
	}
	if _, err := s.KeyByHash(ctx, "h2"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("KeyByHash after revoking: got %v, want not found", err)
	}
	// Revoking again keeps the first time.
	if err := s.RevokeKey(ctx, "key-2", now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	k, err := s.GetKey(ctx, "key-2")
	if err != nil || k.RevokedAt == nil || !k.RevokedAt.Equal(now) {
		t.Errorf("revoked at: got %+v, %v, want %v", k.RevokedAt, err, now)
	}
	if err := s.RevokeKey(ctx, "key-none", now); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("revoking a missing key: got %v, want not found", err)
	}
}

func TestTeamQuota(t *testing.T) {
	s := openTest(t)
	ctx := t.Context()
	mustTeam(t, s, "ta")
	q, err := s.TeamQuota(ctx, "ta")
	if err != nil || q != (QuotaOverride{}) {
		t.Fatalf("no overrides: got %+v, %v", q, err)
	}
	three, zero := int64(3), int64(0)
	if err := s.SetTeamQuota(ctx, "ta", QuotaOverride{RunningSandboxes: &three, StorageMB: &zero}); err != nil {
		t.Fatal(err)
	}
	q, err = s.TeamQuota(ctx, "ta")
	if err != nil || q.RunningSandboxes == nil || *q.RunningSandboxes != 3 || q.StorageMB == nil || *q.StorageMB != 0 ||
		q.RunningMemoryMB != nil || q.CreatesPerMinute != nil {
		t.Fatalf("after set: got %+v, %v", q, err)
	}
	if err := s.SetTeamQuota(ctx, "ta", QuotaOverride{}); err != nil {
		t.Fatal(err)
	}
	if q, _ := s.TeamQuota(ctx, "ta"); q != (QuotaOverride{}) {
		t.Errorf("after reset: got %+v, want none", q)
	}
	if err := s.SetTeamQuota(ctx, "no-such-team", QuotaOverride{}); err == nil {
		t.Errorf("a quota for a team that does not exist: got nil error")
	}
}

func TestTeamRunningAndCounts(t *testing.T) {
	s := openTest(t)
	ctx := t.Context()
	mustTeam(t, s, "ta")
	mustTeam(t, s, "tb")
	states := []struct {
		team, id, state, pool string
	}{
		{"ta", "sb-aaaaaaaaaaa1", api.StateRunning, ""},
		{"ta", "sb-aaaaaaaaaaa2", api.StateRunning, ""},
		{"ta", "sb-aaaaaaaaaaa3", api.StatePaused, ""},
		{"ta", "sb-aaaaaaaaaaa4", api.StateRunning, "tpl"},
		{"tb", "sb-bbbbbbbbbbb1", api.StateRunning, ""},
	}
	for _, st := range states {
		sb := newSandbox(st.team, st.id, "")
		sb.State, sb.Pool = st.state, st.pool
		mustCreate(t, s, sb)
	}
	n, mem, err := s.TeamRunning(ctx, "ta")
	if err != nil || n != 2 || mem != 1024 {
		t.Errorf("TeamRunning(ta): got %d, %d, %v, want 2, 1024", n, mem, err)
	}
	counts, err := s.CountSandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, c := range counts {
		key := c.State
		if c.Pooled {
			key = "pooled"
		}
		got[key] += c.Count
	}
	if got[api.StateRunning] != 3 || got[api.StatePaused] != 1 || got["pooled"] != 1 {
		t.Errorf("CountSandboxes: got %v", got)
	}
	for i, size := range []int64{100, 250} {
		if err := s.CreateSnapshot(ctx, Snapshot{ID: "sn-" + string(rune('a'+i)), TeamID: "ta", SandboxID: "sb-aaaaaaaaaaa1",
			Kind: "manual", CreatedAt: time.Now(), SizeBytes: size}); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := s.TeamSnapshotBytes(ctx, "ta"); err != nil || b != 350 {
		t.Errorf("TeamSnapshotBytes: got %d, %v, want 350", b, err)
	}
	if b, err := s.TeamSnapshotBytes(ctx, "tb"); err != nil || b != 0 {
		t.Errorf("TeamSnapshotBytes(tb): got %d, %v, want 0", b, err)
	}
}

func TestSegments(t *testing.T) {
	s := openTest(t)
	ctx := t.Context()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := &Segment{TeamID: "ta", SandboxID: "sb-1", Kind: SegmentCompute, Start: t0, End: t0, CPUs: 2, MemoryMB: 512}
	b := &Segment{TeamID: "tb", SandboxID: "sb-2", Kind: SegmentStorage, Start: t0, End: t0, Bytes: 1 << 30}
	if err := s.ApplySegments(ctx, SegmentChange{Open: []*Segment{a, b}}); err != nil {
		t.Fatal(err)
	}
	if a.ID == 0 || b.ID == 0 || a.ID == b.ID {
		t.Fatalf("ids: got %d, %d", a.ID, b.ID)
	}
	if err := s.ApplySegments(ctx, SegmentChange{Extend: []int64{a.ID, b.ID}, At: t0.Add(10 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	// Extending never moves an end back.
	if err := s.ApplySegments(ctx, SegmentChange{Extend: []int64{a.ID}, At: t0.Add(5 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if err := s.ApplySegments(ctx, SegmentChange{Close: map[int64]time.Time{a.ID: t0.Add(12 * time.Second)}}); err != nil {
		t.Fatal(err)
	}
	segs, err := s.Segments(ctx, "ta", t0, t0.Add(time.Hour))
	if err != nil || len(segs) != 1 {
		t.Fatalf("Segments(ta): got %+v, %v", segs, err)
	}
	if got := segs[0]; got.Open || !got.End.Equal(t0.Add(12*time.Second)) || got.CPUs != 2 || got.MemoryMB != 512 {
		t.Errorf("closed segment: got %+v", got)
	}
	// A crash: what was flushed is what counts.
	n, err := s.CloseOpenSegments(ctx)
	if err != nil || n != 1 {
		t.Errorf("CloseOpenSegments: got %d, %v, want 1", n, err)
	}
	segs, _ = s.Segments(ctx, "", t0, t0.Add(time.Hour))
	if len(segs) != 2 || segs[1].Open || !segs[1].End.Equal(t0.Add(10*time.Second)) {
		t.Errorf("after closing: got %+v", segs)
	}
	// Outside the window.
	if segs, _ := s.Segments(ctx, "", t0.Add(time.Hour), t0.Add(2*time.Hour)); len(segs) != 0 {
		t.Errorf("a later window: got %+v, want none", segs)
	}
}

func TestEventsAndWebhooks(t *testing.T) {
	s := openTest(t)
	ctx := t.Context()
	mustTeam(t, s, "ta")
	if id, err := s.LastEventID(ctx); err != nil || id != 0 {
		t.Errorf("LastEventID of none: got %d, %v", id, err)
	}
	old := time.Now().Add(-48 * time.Hour)
	var evs []*EventRow
	for i, team := range []string{"ta", "tb", "ta", "ta"} {
		at := time.Now()
		if i == 0 {
			at = old
		}
		evs = append(evs, &EventRow{TeamID: team, Kind: "created", SandboxID: "sb-x", At: at, Data: []byte(`{}`)})
	}
	if err := s.AppendEvents(ctx, evs); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].ID <= evs[i-1].ID {
			t.Errorf("ids not increasing: %d then %d", evs[i-1].ID, evs[i].ID)
		}
	}
	got, err := s.EventsAfter(ctx, "ta", evs[0].ID, 10)
	if err != nil || len(got) != 2 || got[0].ID != evs[2].ID || got[1].ID != evs[3].ID {
		t.Errorf("EventsAfter: got %+v, %v", got, err)
	}
	if n, err := s.PruneEvents(ctx, time.Now().Add(-24*time.Hour)); err != nil || n != 1 {
		t.Errorf("PruneEvents: got %d, %v, want 1", n, err)
	}
	// Pruning does not reuse ids.
	last, _ := s.LastEventID(ctx)
	if last != evs[3].ID {
		t.Errorf("LastEventID: got %d, want %d", last, evs[3].ID)
	}
	more := []*EventRow{{TeamID: "ta", Kind: "paused", At: time.Now(), Data: []byte(`{}`)}}
	s.AppendEvents(ctx, more)
	if more[0].ID <= last {
		t.Errorf("an id after pruning: got %d, want more than %d", more[0].ID, last)
	}

	w := Webhook{ID: "wh-1", TeamID: "ta", URL: "http://127.0.0.1:1/x", Secret: "s", CreatedAt: time.Now(), Cursor: 3}
	if err := s.CreateWebhook(ctx, w); err != nil {
		t.Fatal(err)
	}
	if err := s.SetWebhookCursor(ctx, "wh-1", 7, 500, "boom"); err != nil {
		t.Fatal(err)
	}
	s.SetWebhookCursor(ctx, "wh-1", 5, 200, "") // never backwards
	ws, err := s.ListWebhooks(ctx, "ta")
	if err != nil || len(ws) != 1 || ws[0].Cursor != 7 || ws[0].LastStatus != 200 {
		t.Errorf("ListWebhooks: got %+v, %v", ws, err)
	}
	if err := s.DeleteWebhook(ctx, "tb", "wh-1"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("deleting another team's webhook: got %v, want not found", err)
	}
	if err := s.DeleteWebhook(ctx, "ta", "wh-1"); err != nil {
		t.Errorf("DeleteWebhook: %v", err)
	}
}
