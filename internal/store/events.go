package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/warrenhq/warren/api"
)

// Events and webhooks (schema version 3).

// EventRow is a stored lifecycle event; Data is its JSON as delivered.
type EventRow struct {
	ID        int64
	TeamID    string
	Kind      string
	SandboxID string
	At        time.Time
	Data      []byte
}

// AppendEvents stores events in order, setting their ids, which increase
// and are never reused.
func (s *Store) AppendEvents(ctx context.Context, evs []*EventRow) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, ev := range evs {
		res, err := tx.ExecContext(ctx, `INSERT INTO events (team_id, kind, sandbox_id, at, data) VALUES (?, ?, ?, ?, ?)`,
			ev.TeamID, ev.Kind, ev.SandboxID, fmtTime(ev.At), string(ev.Data))
		if err != nil {
			return fmt.Errorf("recording event %s: %w", ev.Kind, err)
		}
		if ev.ID, err = res.LastInsertId(); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// EventsAfter lists up to limit events of a team with ids above after, in
// order.
func (s *Store) EventsAfter(ctx context.Context, teamID string, after int64, limit int) ([]EventRow, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, team_id, kind, sandbox_id, at, data FROM events
		WHERE team_id = ? AND id > ? ORDER BY id LIMIT ?`, teamID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("reading events: %w", err)
	}
	defer rows.Close()
	var out []EventRow
	for rows.Next() {
		var ev EventRow
		var at, data string
		if err := rows.Scan(&ev.ID, &ev.TeamID, &ev.Kind, &ev.SandboxID, &at, &data); err != nil {
			return nil, err
		}
		ev.At, ev.Data = parseTime(at), []byte(data)
		out = append(out, ev)
	}
	return out, rows.Err()
}

// LastEventID is the highest event id ever given (0 for none).
func (s *Store) LastEventID(ctx context.Context) (int64, error) {
	var n sql.NullInt64
	// sqlite_sequence remembers the highest id even once pruned.
	err := s.db.QueryRowContext(ctx, `SELECT seq FROM sqlite_sequence WHERE name = 'events'`).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return n.Int64, err
}

// PruneEvents removes events older than before and returns how many.
func (s *Store) PruneEvents(ctx context.Context, before time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM events WHERE at < ?`, fmtTime(before))
	if err != nil {
		return 0, fmt.Errorf("pruning events: %w", err)
	}
	return res.RowsAffected()
}

// Webhook delivers a team's events to a URL.
type Webhook struct {
	ID         string
	TeamID     string
	URL        string
	Secret     string
	CreatedAt  time.Time
	Cursor     int64 // the last event id delivered or given up on
	LastStatus int
	LastError  string
}

// CreateWebhook stores w.
func (s *Store) CreateWebhook(ctx context.Context, w Webhook) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO webhooks (id, team_id, url, secret, created_at, cursor) VALUES (?, ?, ?, ?, ?, ?)`,
		w.ID, w.TeamID, w.URL, w.Secret, fmtTime(w.CreatedAt), w.Cursor)
	if err != nil {
		return fmt.Errorf("storing webhook %s: %w", w.ID, err)
	}
	return nil
}

// ListWebhooks lists a team's webhooks; with teamID == "", every team's.
func (s *Store) ListWebhooks(ctx context.Context, teamID string) ([]Webhook, error) {
	q := `SELECT id, team_id, url, secret, created_at, cursor, last_status, last_error FROM webhooks`
	var args []any
	if teamID != "" {
		q += ` WHERE team_id = ?`
		args = append(args, teamID)
	}
	rows, err := s.db.QueryContext(ctx, q+` ORDER BY created_at, id`, args...)
	if err != nil {
		return nil, fmt.Errorf("listing webhooks: %w", err)
	}
	defer rows.Close()
	var out []Webhook
	for rows.Next() {
		var w Webhook
		var created string
		if err := rows.Scan(&w.ID, &w.TeamID, &w.URL, &w.Secret, &created, &w.Cursor, &w.LastStatus, &w.LastError); err != nil {
			return nil, err
		}
		w.CreatedAt = parseTime(created)
		out = append(out, w)
	}
	return out, rows.Err()
}

// DeleteWebhook removes a team's webhook.
func (s *Store) DeleteWebhook(ctx context.Context, teamID, id string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM webhooks WHERE id = ? AND team_id = ?`, id, teamID)
	if err != nil {
		return fmt.Errorf("deleting webhook %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("webhook %s: %w", id, api.ErrNotFound)
	}
	return nil
}

// SetWebhookCursor records a delivery (or a delivery given up on) of event
// cursor, with the last answer's status and error.
func (s *Store) SetWebhookCursor(ctx context.Context, id string, cursor int64, status int, errMsg string) error {
	_, err := s.db.ExecContext(ctx, `UPDATE webhooks SET cursor = MAX(cursor, ?), last_status = ?, last_error = ? WHERE id = ?`,
		cursor, status, errMsg, id)
	return err
}
