package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/warrenhq/warren/api"
)

// Teams, keys and quotas (schema version 3).

// TeamByName returns the team named name.
func (s *Store) TeamByName(ctx context.Context, name string) (Team, error) {
	return s.team(ctx, `name = ?`, name)
}

// TeamByID returns the team with id.
func (s *Store) TeamByID(ctx context.Context, id string) (Team, error) {
	return s.team(ctx, `id = ?`, id)
}

func (s *Store) team(ctx context.Context, where string, arg any) (Team, error) {
	var t Team
	var created string
	err := s.db.QueryRowContext(ctx, `SELECT id, name, created_at FROM teams WHERE `+where, arg).
		Scan(&t.ID, &t.Name, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return Team{}, fmt.Errorf("team %v: %w", arg, api.ErrNotFound)
	}
	if err != nil {
		return Team{}, fmt.Errorf("reading team %v: %w", arg, err)
	}
	t.CreatedAt = parseTime(created)
	return t, nil
}

// ListTeams lists every team, by name.
func (s *Store) ListTeams(ctx context.Context) ([]Team, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, name, created_at FROM teams ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("listing teams: %w", err)
	}
	defer rows.Close()
	var out []Team
	for rows.Next() {
		var t Team
		var created string
		if err := rows.Scan(&t.ID, &t.Name, &created); err != nil {
			return nil, err
		}
		t.CreatedAt = parseTime(created)
		out = append(out, t)
	}
	return out, rows.Err()
}

// KeyInfo is an API key as listed, with its name and displayable prefix.
type KeyInfo struct {
	Key
	Name   string
	Prefix string
	Team   string // the team's name
}

// AddKey stores a key with its name and prefix.
func (s *Store) AddKey(ctx context.Context, k KeyInfo) error {
	_, err := s.db.ExecContext(ctx,
		`INSERT INTO api_keys (id, team_id, hash, admin, created_at, name, prefix) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		k.ID, k.TeamID, k.Hash, k.Admin, fmtTime(k.CreatedAt), k.Name, k.Prefix)
	if err != nil {
		return fmt.Errorf("storing key %s: %w", k.ID, err)
	}
	return nil
}

// ListKeys lists keys, revoked ones too, oldest first; with teamID != "",
// only that team's.
func (s *Store) ListKeys(ctx context.Context, teamID string) ([]KeyInfo, error) {
	q := `SELECT k.id, k.team_id, k.hash, k.admin, k.created_at, k.revoked_at, k.name, k.prefix, t.name
		FROM api_keys k JOIN teams t ON t.id = k.team_id`
	var args []any
	if teamID != "" {
		q += ` WHERE k.team_id = ?`
		args = append(args, teamID)
	}
	rows, err := s.db.QueryContext(ctx, q+` ORDER BY k.created_at, k.id`, args...)
	if err != nil {
		return nil, fmt.Errorf("listing keys: %w", err)
	}
	defer rows.Close()
	var out []KeyInfo
	for rows.Next() {
		var k KeyInfo
		var created string
		var revoked sql.NullString
		if err := rows.Scan(&k.ID, &k.TeamID, &k.Hash, &k.Admin, &created, &revoked, &k.Name, &k.Prefix, &k.Team); err != nil {
			return nil, err
		}
		k.CreatedAt, k.RevokedAt = parseTime(created), nullTime(revoked)
		out = append(out, k)
	}
	return out, rows.Err()
}

// GetKey returns key id.
func (s *Store) GetKey(ctx context.Context, id string) (KeyInfo, error) {
	keys, err := s.ListKeys(ctx, "")
	if err != nil {
		return KeyInfo{}, err
	}
	for _, k := range keys {
		if k.ID == id {
			return k, nil
		}
	}
	return KeyInfo{}, fmt.Errorf("key %s: %w", id, api.ErrNotFound)
}

// RevokeKey revokes key id at once: every later request with it is
// unauthorized. Revoking a revoked key is a no-op.
func (s *Store) RevokeKey(ctx context.Context, id string, at time.Time) error {
	res, err := s.db.ExecContext(ctx, `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?`, fmtTime(at), id)
	if err != nil {
		return fmt.Errorf("revoking key %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("key %s: %w", id, api.ErrNotFound)
	}
	return nil
}

// QuotaOverride is a team's own quota settings; a nil field takes the
// server's default.
type QuotaOverride struct {
	RunningSandboxes *int64
	RunningMemoryMB  *int64
	StorageMB        *int64
	CreatesPerMinute *int64
}

// TeamQuota returns a team's quota overrides (all nil when it has none).
func (s *Store) TeamQuota(ctx context.Context, teamID string) (QuotaOverride, error) {
	var q QuotaOverride
	var a, b, c, d sql.NullInt64
	err := s.db.QueryRowContext(ctx, `SELECT running_sandboxes, running_memory_mb, storage_mb, creates_per_minute
		FROM team_quotas WHERE team_id = ?`, teamID).Scan(&a, &b, &c, &d)
	if errors.Is(err, sql.ErrNoRows) {
		return q, nil
	}
	if err != nil {
		return q, fmt.Errorf("reading the quota of team %s: %w", teamID, err)
	}
	for _, f := range []struct {
		v   sql.NullInt64
		dst **int64
	}{{a, &q.RunningSandboxes}, {b, &q.RunningMemoryMB}, {c, &q.StorageMB}, {d, &q.CreatesPerMinute}} {
		if f.v.Valid {
			n := f.v.Int64
			*f.dst = &n
		}
	}
	return q, nil
}

// SetTeamQuota replaces a team's quota overrides.
func (s *Store) SetTeamQuota(ctx context.Context, teamID string, q QuotaOverride) error {
	opt := func(p *int64) any {
		if p == nil {
			return nil
		}
		return *p
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO team_quotas
		(team_id, running_sandboxes, running_memory_mb, storage_mb, creates_per_minute, updated_at) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (team_id) DO UPDATE SET running_sandboxes = excluded.running_sandboxes,
		running_memory_mb = excluded.running_memory_mb, storage_mb = excluded.storage_mb,
		creates_per_minute = excluded.creates_per_minute, updated_at = excluded.updated_at`,
		teamID, opt(q.RunningSandboxes), opt(q.RunningMemoryMB), opt(q.StorageMB), opt(q.CreatesPerMinute), fmtTime(time.Now()))
	if err != nil {
		return fmt.Errorf("setting the quota of team %s: %w", teamID, err)
	}
	return nil
}

// TeamRunning counts a team's running sandboxes and their memory; those
// waiting in a warm pool are not the team's yet.
func (s *Store) TeamRunning(ctx context.Context, teamID string) (count, memoryMB int64, err error) {
	err = s.db.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(memory_mb), 0) FROM sandboxes
		WHERE team_id = ? AND state = ? AND pool = ''`, teamID, api.StateRunning).Scan(&count, &memoryMB)
	if err != nil {
		return 0, 0, fmt.Errorf("counting the running sandboxes of team %s: %w", teamID, err)
	}
	return count, memoryMB, nil
}

// TeamSnapshotBytes is the size of a team's snapshots.
func (s *Store) TeamSnapshotBytes(ctx context.Context, teamID string) (int64, error) {
	var n int64
	err := s.db.QueryRowContext(ctx, `SELECT COALESCE(SUM(size_bytes), 0) FROM snapshots WHERE team_id = ?`, teamID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("sizing the snapshots of team %s: %w", teamID, err)
	}
	return n, nil
}

// TeamVolumeBytes is the size of a team's volumes (allocated in full).
func (s *Store) TeamVolumeBytes(ctx context.Context, teamID string) (int64, error) {
	var mb int64
	err := s.db.QueryRowContext(ctx, `SELECT COALESCE(SUM(size_mb), 0) FROM volumes WHERE team_id = ?`, teamID).Scan(&mb)
	if err != nil {
		return 0, fmt.Errorf("sizing the volumes of team %s: %w", teamID, err)
	}
	return mb << 20, nil
}

// StateCount is how many sandboxes are in one state.
type StateCount struct {
	State  string
	Stored bool
	Pooled bool
	Count  int64
}

// CountSandboxes counts sandboxes by state, stored flag and whether they
// wait in a warm pool.
func (s *Store) CountSandboxes(ctx context.Context) ([]StateCount, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT state, stored, pool != '', COUNT(*) FROM sandboxes
		GROUP BY state, stored, pool != '' ORDER BY 1, 2, 3`)
	if err != nil {
		return nil, fmt.Errorf("counting sandboxes: %w", err)
	}
	defer rows.Close()
	var out []StateCount
	for rows.Next() {
		var c StateCount
		if err := rows.Scan(&c.State, &c.Stored, &c.Pooled, &c.Count); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}
