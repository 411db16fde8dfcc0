package store

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Usage segments (schema version 3). A segment is an interval [Start, End)
// over which one sandbox held constant resources: compute (CPUs and
// memory, while running) or storage (bytes). An open segment is still
// growing: its End is the last time it was flushed. Segments of one
// sandbox and kind never overlap, so summing them never counts twice.

// Segment kinds.
const (
	SegmentCompute = "compute"
	SegmentStorage = "storage"
)

// Segment is one usage interval.
type Segment struct {
	ID        int64
	TeamID    string
	SandboxID string
	Kind      string
	Start     time.Time
	End       time.Time
	Open      bool
	CPUs      float64
	MemoryMB  int64
	Bytes     int64
}

// SegmentChange is a batch of changes to segments, applied in one
// transaction by ApplySegments.
type SegmentChange struct {
	// Open inserts new open segments; their IDs are set.
	Open []*Segment
	// Close ends open segments at the given times.
	Close map[int64]time.Time
	// Extend moves the end of these open segments to At.
	Extend []int64
	At     time.Time
}

// ApplySegments applies c in one transaction.
func (s *Store) ApplySegments(ctx context.Context, c SegmentChange) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for id, end := range c.Close {
		if _, err := tx.ExecContext(ctx, `UPDATE usage_segments SET end_at = MAX(start_at, ?), open = 0 WHERE id = ?`, fmtTime(end), id); err != nil {
			return fmt.Errorf("closing usage segment %d: %w", id, err)
		}
	}
	for i := 0; i < len(c.Extend); i += 500 {
		ids := c.Extend[i:min(i+500, len(c.Extend))]
		args := []any{fmtTime(c.At)}
		for _, id := range ids {
			args = append(args, id)
		}
		q := `UPDATE usage_segments SET end_at = MAX(end_at, ?) WHERE open = 1 AND id IN (?` + strings.Repeat(",?", len(ids)-1) + `)`
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("extending usage segments: %w", err)
		}
	}
	for _, sg := range c.Open {
		res, err := tx.ExecContext(ctx, `INSERT INTO usage_segments (team_id, sandbox_id, kind, start_at, end_at, open, cpus, memory_mb, bytes)
			VALUES (?, ?, ?, ?, ?, 1, ?, ?, ?)`, sg.TeamID, sg.SandboxID, sg.Kind, fmtTime(sg.Start), fmtTime(sg.End), sg.CPUs, sg.MemoryMB, sg.Bytes)
		if err != nil {
			return fmt.Errorf("opening a usage segment for %s: %w", sg.SandboxID, err)
		}
		if sg.ID, err = res.LastInsertId(); err != nil {
			return err
		}
		sg.Open = true
	}
	return tx.Commit()
}

// CloseOpenSegments closes every open segment where it was last flushed:
// what a server that stopped (or crashed) last recorded is what counts. It
// returns how many it closed.
func (s *Store) CloseOpenSegments(ctx context.Context) (int64, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE usage_segments SET open = 0 WHERE open = 1`)
	if err != nil {
		return 0, fmt.Errorf("closing usage segments: %w", err)
	}
	return res.RowsAffected()
}

// Segments lists the segments of a team that overlap [from, to), oldest
// first; with teamID == "", every team's.
func (s *Store) Segments(ctx context.Context, teamID string, from, to time.Time) ([]Segment, error) {
	q := `SELECT id, team_id, sandbox_id, kind, start_at, end_at, open, cpus, memory_mb, bytes
		FROM usage_segments WHERE start_at < ? AND end_at >= ?`
	args := []any{fmtTime(to), fmtTime(from)}
	if teamID != "" {
		q += ` AND team_id = ?`
		args = append(args, teamID)
	}
	rows, err := s.db.QueryContext(ctx, q+` ORDER BY start_at, id`, args...)
	if err != nil {
		return nil, fmt.Errorf("reading usage: %w", err)
	}
	defer rows.Close()
	var out []Segment
	for rows.Next() {
		var sg Segment
		var start, end string
		if err := rows.Scan(&sg.ID, &sg.TeamID, &sg.SandboxID, &sg.Kind, &start, &end, &sg.Open, &sg.CPUs, &sg.MemoryMB, &sg.Bytes); err != nil {
			return nil, err
		}
		sg.Start, sg.End = parseTime(start), parseTime(end)
		out = append(out, sg)
	}
	return out, rows.Err()
}
