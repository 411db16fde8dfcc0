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

// Volumes, credentials, and the network and volumes of a sandbox's row.

// Volume is a volume's row.
type Volume struct {
	ID        string
	TeamID    string
	Name      string
	SizeMB    int64
	CreatedAt time.Time
}

// CreateVolume inserts v. A name already used in the team is ErrConflict.
func (s *Store) CreateVolume(ctx context.Context, v Volume) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO volumes (id, team_id, name, size_mb, created_at) VALUES (?, ?, ?, ?, ?)`,
		v.ID, v.TeamID, v.Name, v.SizeMB, fmtTime(v.CreatedAt))
	if err != nil {
		if strings.Contains(err.Error(), "UNIQUE constraint failed") {
			return fmt.Errorf("a volume named %q already exists: %w", v.Name, api.ErrConflict)
		}
		return fmt.Errorf("storing volume %q: %w", v.Name, err)
	}
	return nil
}

const volumeColumns = `id, team_id, name, size_mb, created_at`

func scanVolume(row scanner) (Volume, error) {
	var v Volume
	var created string
	if err := row.Scan(&v.ID, &v.TeamID, &v.Name, &v.SizeMB, &created); err != nil {
		return Volume{}, err
	}
	v.CreatedAt = parseTime(created)
	return v, nil
}

// GetVolume reads team's volume name.
func (s *Store) GetVolume(ctx context.Context, team, name string) (Volume, error) {
	v, err := scanVolume(s.db.QueryRowContext(ctx, `SELECT `+volumeColumns+` FROM volumes WHERE team_id = ? AND name = ?`, team, name))
	if errors.Is(err, sql.ErrNoRows) {
		return Volume{}, fmt.Errorf("volume %q: %w", name, api.ErrNotFound)
	}
	return v, err
}

// GetVolumeByID reads volume id, whatever its team.
func (s *Store) GetVolumeByID(ctx context.Context, id string) (Volume, error) {
	v, err := scanVolume(s.db.QueryRowContext(ctx, `SELECT `+volumeColumns+` FROM volumes WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Volume{}, fmt.Errorf("volume %s: %w", id, api.ErrNotFound)
	}
	return v, err
}

// ListVolumes lists team's volumes by name; every volume when team is "".
func (s *Store) ListVolumes(ctx context.Context, team string) ([]Volume, error) {
	q := `SELECT ` + volumeColumns + ` FROM volumes`
	var args []any
	if team != "" {
		q += ` WHERE team_id = ?`
		args = append(args, team)
	}
	rows, err := s.db.QueryContext(ctx, q+` ORDER BY name, team_id`, args...)
	if err != nil {
		return nil, fmt.Errorf("listing volumes: %w", err)
	}
	defer rows.Close()
	var out []Volume
	for rows.Next() {
		v, err := scanVolume(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

const volumeUsersQuery = `SELECT id FROM sandboxes WHERE team_id = ? AND EXISTS (
	SELECT 1 FROM json_each(sandboxes.volumes) WHERE json_extract(json_each.value, '$.volume') = ?) ORDER BY created_at, id`

// VolumeUsers lists the sandboxes of team (warm pools included) that mount
// its volume name.
func (s *Store) VolumeUsers(ctx context.Context, team, name string) ([]string, error) {
	return volumeUsers(ctx, s.db, team, name)
}

func volumeUsers(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, team, name string) ([]string, error) {
	rows, err := q.QueryContext(ctx, volumeUsersQuery, team, name)
	if err != nil {
		return nil, fmt.Errorf("finding the sandboxes that use volume %q: %w", name, err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// DeleteVolume removes team's volume name unless a sandbox mounts it
// (ErrConflict, naming them), and returns the removed row.
func (s *Store) DeleteVolume(ctx context.Context, team, name string) (Volume, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Volume{}, err
	}
	defer tx.Rollback()
	v, err := scanVolume(tx.QueryRowContext(ctx, `SELECT `+volumeColumns+` FROM volumes WHERE team_id = ? AND name = ?`, team, name))
	if errors.Is(err, sql.ErrNoRows) {
		return Volume{}, fmt.Errorf("volume %q: %w", name, api.ErrNotFound)
	}
	if err != nil {
		return Volume{}, err
	}
	users, err := volumeUsers(ctx, tx, team, name)
	if err != nil {
		return Volume{}, err
	}
	if len(users) > 0 {
		return Volume{}, fmt.Errorf("volume %q is mounted by sandbox %s; delete those sandboxes first: %w",
			name, strings.Join(users, ", "), api.ErrConflict)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM volumes WHERE id = ?`, v.ID); err != nil {
		return Volume{}, fmt.Errorf("deleting volume %q: %w", name, err)
	}
	return v, tx.Commit()
}

// Credential is a credential's row. Secret is sealed by the caller.
type Credential struct {
	TeamID    string
	Name      string
	URL       string
	Username  string
	Secret    []byte
	CreatedAt time.Time
}

// CreateCredential inserts c. A name already used in the team is
// ErrConflict.
func (s *Store) CreateCredential(ctx context.Context, c Credential) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO credentials (team_id, name, url, username, secret, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
		c.TeamID, c.Name, c.URL, c.Username, c.Secret, fmtTime(c.CreatedAt))
	if err != nil {
		if strings.Contains(err.Error(), "UNIQUE constraint failed") {
			return fmt.Errorf("a credential named %q already exists; delete it first to replace it: %w", c.Name, api.ErrConflict)
		}
		return fmt.Errorf("storing credential %q: %w", c.Name, err)
	}
	return nil
}

func scanCredential(row scanner) (Credential, error) {
	var c Credential
	var created string
	if err := row.Scan(&c.TeamID, &c.Name, &c.URL, &c.Username, &c.Secret, &created); err != nil {
		return Credential{}, err
	}
	c.CreatedAt = parseTime(created)
	return c, nil
}

// GetCredential reads team's credential name.
func (s *Store) GetCredential(ctx context.Context, team, name string) (Credential, error) {
	c, err := scanCredential(s.db.QueryRowContext(ctx,
		`SELECT team_id, name, url, username, secret, created_at FROM credentials WHERE team_id = ? AND name = ?`, team, name))
	if errors.Is(err, sql.ErrNoRows) {
		return Credential{}, fmt.Errorf("credential %q: %w", name, api.ErrNotFound)
	}
	return c, err
}

// ListCredentials lists team's credentials by name.
func (s *Store) ListCredentials(ctx context.Context, team string) ([]Credential, error) {
	rows, err := s.db.QueryContext(ctx,
		`SELECT team_id, name, url, username, secret, created_at FROM credentials WHERE team_id = ? ORDER BY name`, team)
	if err != nil {
		return nil, fmt.Errorf("listing credentials: %w", err)
	}
	defer rows.Close()
	var out []Credential
	for rows.Next() {
		c, err := scanCredential(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// DeleteCredential removes team's credential name.
func (s *Store) DeleteCredential(ctx context.Context, team, name string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM credentials WHERE team_id = ? AND name = ?`, team, name)
	if err != nil {
		return fmt.Errorf("deleting credential %q: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("credential %q: %w", name, api.ErrNotFound)
	}
	return nil
}

// SetSandboxNetwork replaces sandbox id's network policy.
func (s *Store) SetSandboxNetwork(ctx context.Context, id string, n api.Network) (Sandbox, error) {
	b, err := json.Marshal(n)
	if err != nil {
		return Sandbox{}, err
	}
	return s.setSandboxColumn(ctx, id, "network", string(b))
}

// SetSandboxVolumes replaces the volumes sandbox id records as mounted.
func (s *Store) SetSandboxVolumes(ctx context.Context, id string, vols []api.VolumeMount) (Sandbox, error) {
	if vols == nil {
		vols = []api.VolumeMount{}
	}
	b, err := json.Marshal(vols)
	if err != nil {
		return Sandbox{}, err
	}
	return s.setSandboxColumn(ctx, id, "volumes", string(b))
}

func (s *Store) setSandboxColumn(ctx context.Context, id, column, value string) (Sandbox, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE sandboxes SET `+column+` = ?, updated_at = ? WHERE id = ?`,
		value, fmtTime(time.Now()), id)
	if err != nil {
		return Sandbox{}, fmt.Errorf("sandbox %s: setting its %s: %w", id, column, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return Sandbox{}, fmt.Errorf("sandbox %s: %w", id, api.ErrNotFound)
	}
	return s.GetSandbox(ctx, "", id)
}
