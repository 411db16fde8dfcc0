package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/warrenhq/warren/api"
)

// Template is a template's row.
type Template struct {
	TeamID     string
	Name       string
	SnapshotID string
	Image      string
	Setup      []string
	Env        map[string]string
	CPUs       float64
	MemoryMB   int64
	DiskMB     int64
	BuildLog   string
	// PoolSize is how many sandboxes of this template are kept restored
	// and paused, ready to be claimed by a create.
	PoolSize  int
	CreatedAt time.Time
	UpdatedAt time.Time
}

const templateColumns = `team_id, name, snapshot_id, image, setup, env, cpus, memory_mb, disk_mb, build_log, pool_size, created_at, updated_at`

// PutTemplate creates or replaces a template and returns the snapshot the
// previous version pointed at ("" for a new template), for the caller to
// delete.
func (s *Store) PutTemplate(ctx context.Context, t Template) (old string, err error) {
	setup, _ := json.Marshal(nonNilSlice(t.Setup))
	env, _ := json.Marshal(nonNilMap(t.Env))
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return "", err
	}
	defer tx.Rollback()
	var created string
	err = tx.QueryRowContext(ctx, `SELECT snapshot_id, created_at FROM templates WHERE team_id = ? AND name = ?`, t.TeamID, t.Name).Scan(&old, &created)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		created = fmtTime(t.UpdatedAt)
	case err != nil:
		return "", err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO templates (`+templateColumns+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)
		ON CONFLICT (team_id, name) DO UPDATE SET snapshot_id = excluded.snapshot_id, image = excluded.image,
		setup = excluded.setup, env = excluded.env, cpus = excluded.cpus, memory_mb = excluded.memory_mb,
		disk_mb = excluded.disk_mb, build_log = excluded.build_log, pool_size = excluded.pool_size,
		updated_at = excluded.updated_at`,
		t.TeamID, t.Name, t.SnapshotID, t.Image, string(setup), string(env), t.CPUs, t.MemoryMB, t.DiskMB,
		t.BuildLog, t.PoolSize, created, fmtTime(t.UpdatedAt))
	if err != nil {
		return "", fmt.Errorf("storing template %q: %w", t.Name, err)
	}
	return old, tx.Commit()
}

func scanTemplate(row scanner) (Template, error) {
	var t Template
	var setup, env, created, updated string
	if err := row.Scan(&t.TeamID, &t.Name, &t.SnapshotID, &t.Image, &setup, &env, &t.CPUs, &t.MemoryMB,
		&t.DiskMB, &t.BuildLog, &t.PoolSize, &created, &updated); err != nil {
		return Template{}, err
	}
	t.CreatedAt, t.UpdatedAt = parseTime(created), parseTime(updated)
	if err := json.Unmarshal([]byte(setup), &t.Setup); err != nil {
		return Template{}, err
	}
	if err := json.Unmarshal([]byte(env), &t.Env); err != nil {
		return Template{}, err
	}
	return t, nil
}

// GetTemplate reads a team's template.
func (s *Store) GetTemplate(ctx context.Context, team, name string) (Template, error) {
	t, err := scanTemplate(s.db.QueryRowContext(ctx, `SELECT `+templateColumns+` FROM templates WHERE team_id = ? AND name = ?`, team, name))
	if errors.Is(err, sql.ErrNoRows) {
		return Template{}, fmt.Errorf("template %q not found; build it with POST /v1/templates (warren template build): %w", name, api.ErrNotFound)
	}
	return t, err
}

// ListTemplates lists a team's templates by name ("" lists every team's).
func (s *Store) ListTemplates(ctx context.Context, team string) ([]Template, error) {
	q := `SELECT ` + templateColumns + ` FROM templates`
	var args []any
	if team != "" {
		q += ` WHERE team_id = ?`
		args = append(args, team)
	}
	return queryAll(ctx, s.db, scanTemplate, q+` ORDER BY team_id, name`, args...)
}

// DeleteTemplate removes a team's template and returns its snapshot id.
func (s *Store) DeleteTemplate(ctx context.Context, team, name string) (string, error) {
	t, err := s.GetTemplate(ctx, team, name)
	if err != nil {
		return "", err
	}
	if _, err := s.db.ExecContext(ctx, `DELETE FROM templates WHERE team_id = ? AND name = ?`, team, name); err != nil {
		return "", err
	}
	return t.SnapshotID, nil
}

// SetExtraEnv records the environment a sandbox adds to its snapshot's.
func (s *Store) SetExtraEnv(ctx context.Context, id string, env map[string]string) error {
	b, _ := json.Marshal(nonNilMap(env))
	_, err := s.db.ExecContext(ctx, `UPDATE sandboxes SET extra_env = ? WHERE id = ?`, string(b), id)
	return err
}

// ExtraEnv reads the environment a sandbox adds to its snapshot's.
func (s *Store) ExtraEnv(ctx context.Context, id string) (map[string]string, error) {
	var b string
	if err := s.db.QueryRowContext(ctx, `SELECT extra_env FROM sandboxes WHERE id = ?`, id).Scan(&b); err != nil {
		return nil, err
	}
	var env map[string]string
	return env, json.Unmarshal([]byte(b), &env)
}

func nonNilSlice(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// SetPool puts sandbox id in the warm pool of template (or takes it out,
// with "").
func (s *Store) SetPool(ctx context.Context, id, template string) error {
	_, err := s.db.ExecContext(ctx, `UPDATE sandboxes SET pool = ? WHERE id = ?`, template, id)
	return err
}

// PoolMembers lists the sandboxes waiting in a template's pool.
func (s *Store) PoolMembers(ctx context.Context, team, template string) ([]Sandbox, error) {
	return queryAll(ctx, s.db, scanSandbox, `SELECT `+sandboxColumns+` FROM sandboxes WHERE team_id = ? AND pool = ? ORDER BY created_at`, team, template)
}

// Claim is what a create sets on the pooled sandbox it takes.
type Claim struct {
	Name                string
	Metadata            map[string]string
	Env                 map[string]string
	ExtraEnv            map[string]string
	Idle                api.IdlePolicy
	CheckpointIntervalS int
}

// ClaimPooled takes one paused sandbox out of a template's pool for a
// create, in one statement: two creates never get the same sandbox. It
// returns ErrNotFound when the pool is empty.
func (s *Store) ClaimPooled(ctx context.Context, team, template, snapshotID string, c Claim) (Sandbox, error) {
	meta, _ := json.Marshal(nonNilMap(c.Metadata))
	env, _ := json.Marshal(nonNilMap(c.Env))
	extra, _ := json.Marshal(nonNilMap(c.ExtraEnv))
	idle, _ := json.Marshal(c.Idle)
	now := fmtTime(time.Now().UTC())
	var id string
	err := s.db.QueryRowContext(ctx, `UPDATE sandboxes SET pool = '', name = ?, metadata = ?, env = ?, extra_env = ?,
		idle = ?, checkpoint_interval_s = ?, created_at = ?, updated_at = ?
		WHERE id = (SELECT id FROM sandboxes WHERE team_id = ? AND pool = ? AND from_snapshot = ? AND state = 'paused' AND stored = 0
			ORDER BY created_at LIMIT 1)
		RETURNING id`,
		c.Name, string(meta), string(env), string(extra), string(idle), c.CheckpointIntervalS, now, now,
		team, template, snapshotID).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return Sandbox{}, fmt.Errorf("pool of template %q is empty: %w", template, api.ErrNotFound)
	}
	if err != nil {
		if strings.Contains(err.Error(), "UNIQUE constraint failed: sandboxes.team_id, sandboxes.name") {
			return Sandbox{}, fmt.Errorf("a sandbox named %q already exists; pick another name or delete it: %w", c.Name, api.ErrConflict)
		}
		return Sandbox{}, err
	}
	return s.GetSandbox(ctx, team, id)
}
