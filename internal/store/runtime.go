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

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// leaseNetIndex leases the smallest free network index to runtimeID.
func leaseNetIndex(ctx context.Context, q querier, runtimeID, sandboxID string) (int, error) {
	var idx int
	err := q.QueryRowContext(ctx, `
		SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM net_leases WHERE net_index = 0)
		UNION ALL
		SELECT l.net_index + 1 FROM net_leases l
		WHERE NOT EXISTS (SELECT 1 FROM net_leases m WHERE m.net_index = l.net_index + 1)
		ORDER BY 1 LIMIT 1`).Scan(&idx)
	if err != nil {
		return 0, fmt.Errorf("allocating a network index: %w", err)
	}
	if _, err := q.ExecContext(ctx, `INSERT INTO net_leases (net_index, runtime_id, sandbox_id) VALUES (?, ?, ?)`,
		idx, runtimeID, sandboxID); err != nil {
		return 0, fmt.Errorf("leasing network index %d: %w", idx, err)
	}
	return idx, nil
}

// LeaseNetIndex leases a network index to a new runtime instance of
// sandbox sandboxID.
func (s *Store) LeaseNetIndex(ctx context.Context, runtimeID, sandboxID string) (int, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	idx, err := leaseNetIndex(ctx, tx, runtimeID, sandboxID)
	if err != nil {
		return 0, err
	}
	return idx, tx.Commit()
}

// ReleaseNetIndex ends runtimeID's lease; no lease is fine.
func (s *Store) ReleaseNetIndex(ctx context.Context, runtimeID string) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM net_leases WHERE runtime_id = ?`, runtimeID)
	return err
}

// Lease is a network index held by a runtime instance.
type Lease struct {
	NetIndex  int
	RuntimeID string
	SandboxID string
}

// Leases lists every lease.
func (s *Store) Leases(ctx context.Context) ([]Lease, error) {
	return queryAll(ctx, s.db, func(row scanner) (Lease, error) {
		var l Lease
		return l, row.Scan(&l.NetIndex, &l.RuntimeID, &l.SandboxID)
	}, `SELECT net_index, runtime_id, sandbox_id FROM net_leases ORDER BY net_index`)
}

// Update is a change to a sandbox row made by UpdateSandbox.
type Update struct {
	// From lists the states the sandbox must be in (compare-and-set).
	From []string
	// State is the new state; "" keeps it.
	State string
	// Error is stored as the sandbox's error (cleared when empty).
	Error string
	// Runtime, when set, moves the sandbox to another runtime instance.
	Runtime *Runtime
	// Stored sets whether a paused sandbox is checkpointed to disk.
	Stored *bool
	// PausedAt sets (or with a zero time clears) the pause time.
	PausedAt *time.Time
	// LastCheckpointAt records a periodic checkpoint.
	LastCheckpointAt *time.Time
}

// Runtime names a runtime instance and its network index.
type Runtime struct {
	ID       string
	NetIndex int
}

// UpdateSandbox applies u to sandbox id if its state is one of u.From.
func (s *Store) UpdateSandbox(ctx context.Context, id string, u Update) (Sandbox, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Sandbox{}, err
	}
	defer tx.Rollback()
	sb, err := scanSandbox(tx.QueryRowContext(ctx, `SELECT `+sandboxColumns+` FROM sandboxes WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Sandbox{}, fmt.Errorf("sandbox %s: %w", id, api.ErrNotFound)
	}
	if err != nil {
		return Sandbox{}, err
	}
	ok := len(u.From) == 0
	for _, f := range u.From {
		ok = ok || f == sb.State
	}
	if !ok {
		return Sandbox{}, fmt.Errorf("sandbox %s is %s, not %s: %w", id, sb.State, strings.Join(u.From, " or "), api.ErrConflict)
	}
	if u.State != "" {
		sb.State = u.State
	}
	sb.Error = u.Error
	if u.Runtime != nil {
		sb.RuntimeID, sb.NetIndex = u.Runtime.ID, u.Runtime.NetIndex
	}
	if u.Stored != nil {
		sb.Stored = *u.Stored
	}
	if u.PausedAt != nil {
		sb.PausedAt = u.PausedAt
		if u.PausedAt.IsZero() {
			sb.PausedAt = nil
		}
	}
	if u.LastCheckpointAt != nil {
		sb.LastCheckpointAt = u.LastCheckpointAt
	}
	sb.UpdatedAt = time.Now().UTC()
	_, err = tx.ExecContext(ctx, `UPDATE sandboxes SET state = ?, error = ?, runtime_id = ?, net_index = ?,
		stored = ?, paused_at = ?, last_checkpoint_at = ?, updated_at = ? WHERE id = ?`,
		sb.State, sb.Error, sb.RuntimeID, sb.NetIndex, sb.Stored, optTime(sb.PausedAt),
		optTime(sb.LastCheckpointAt), fmtTime(sb.UpdatedAt), id)
	if err != nil {
		return Sandbox{}, fmt.Errorf("updating sandbox %s: %w", id, err)
	}
	return sb, tx.Commit()
}

// TouchSandbox records activity on a sandbox (for its idle policy).
func (s *Store) TouchSandbox(ctx context.Context, id string, at time.Time) error {
	_, err := s.db.ExecContext(ctx, `UPDATE sandboxes SET last_active_at = ? WHERE id = ?`, fmtTime(at), id)
	return err
}

// Snapshot is a snapshot's row. It exists only once the snapshot's files
// are complete, fsynced and checksummed.
type Snapshot struct {
	ID         string
	TeamID     string
	SandboxID  string
	ParentID   string
	Name       string
	Kind       string // "manual", "checkpoint", "template"
	CreatedAt  time.Time
	SizeBytes  int64
	RunscBuild string
	Image      string
	ImageID    string
	// Config is what a restore needs to know of the sandbox it came from.
	Config SnapshotConfig
}

// SnapshotConfig is the sandbox configuration a snapshot restores with.
type SnapshotConfig struct {
	CPUs     float64           `json:"cpus"`
	MemoryMB int64             `json:"memory_mb"`
	DiskMB   int64             `json:"disk_mb"`
	Env      map[string]string `json:"env,omitempty"`
	Network  api.Network       `json:"network"`
	Idle     api.IdlePolicy    `json:"idle"`
}

const snapshotColumns = `id, team_id, sandbox_id, parent_id, name, kind, created_at, size_bytes,
	runsc_build, image, image_id, config`

// CreateSnapshot records a complete snapshot.
func (s *Store) CreateSnapshot(ctx context.Context, sn Snapshot) error {
	cfg, err := json.Marshal(sn.Config)
	if err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx, `INSERT INTO snapshots (`+snapshotColumns+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)`,
		sn.ID, sn.TeamID, sn.SandboxID, sn.ParentID, sn.Name, sn.Kind, fmtTime(sn.CreatedAt), sn.SizeBytes,
		sn.RunscBuild, sn.Image, sn.ImageID, string(cfg))
	if err != nil {
		return fmt.Errorf("recording snapshot %s: %w", sn.ID, err)
	}
	return nil
}

func scanSnapshot(row scanner) (Snapshot, error) {
	var sn Snapshot
	var created, cfg string
	if err := row.Scan(&sn.ID, &sn.TeamID, &sn.SandboxID, &sn.ParentID, &sn.Name, &sn.Kind, &created,
		&sn.SizeBytes, &sn.RunscBuild, &sn.Image, &sn.ImageID, &cfg); err != nil {
		return Snapshot{}, err
	}
	sn.CreatedAt = parseTime(created)
	if err := json.Unmarshal([]byte(cfg), &sn.Config); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot %s: decoding its config: %w", sn.ID, err)
	}
	return sn, nil
}

// GetSnapshot reads a snapshot; with team != "", another team's is
// ErrNotFound.
func (s *Store) GetSnapshot(ctx context.Context, team, id string) (Snapshot, error) {
	q := `SELECT ` + snapshotColumns + ` FROM snapshots WHERE id = ?`
	args := []any{id}
	if team != "" {
		q += ` AND team_id = ?`
		args = append(args, team)
	}
	sn, err := scanSnapshot(s.db.QueryRowContext(ctx, q, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return Snapshot{}, fmt.Errorf("snapshot %s: %w", id, api.ErrNotFound)
	}
	return sn, err
}

// SnapshotFilter selects snapshots; zero fields match everything.
type SnapshotFilter struct {
	Team      string
	SandboxID string
	Kind      string
}

// ListSnapshots lists snapshots, oldest first.
func (s *Store) ListSnapshots(ctx context.Context, f SnapshotFilter) ([]Snapshot, error) {
	q := `SELECT ` + snapshotColumns + ` FROM snapshots WHERE 1=1`
	var args []any
	if f.Team != "" {
		q += ` AND team_id = ?`
		args = append(args, f.Team)
	}
	if f.SandboxID != "" {
		q += ` AND sandbox_id = ?`
		args = append(args, f.SandboxID)
	}
	if f.Kind != "" {
		q += ` AND kind = ?`
		args = append(args, f.Kind)
	}
	return queryAll(ctx, s.db, scanSnapshot, q+` ORDER BY created_at, id`, args...)
}

// DeleteSnapshot removes a snapshot's row.
func (s *Store) DeleteSnapshot(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM snapshots WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("deleting snapshot %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("snapshot %s: %w", id, api.ErrNotFound)
	}
	return nil
}
