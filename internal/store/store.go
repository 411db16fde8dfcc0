package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/warrenhq/warren/api"
)

// Store is the metadata store.
type Store struct {
	db *sql.DB
}

// migrations maps a version to the SQL that adds it. Versions 1 and 2 are
// here; later ones register themselves from files of their own
// (migrate_vN_*.go) with registerMigration, so features can add tables
// without editing this list. Each applied version is recorded in
// schema_migrations, so versions need not arrive in order (two features
// developed side by side), only be independent of each other.
var migrations = map[int]string{
	1: `CREATE TABLE teams (
		id         TEXT PRIMARY KEY,
		name       TEXT NOT NULL UNIQUE,
		created_at TEXT NOT NULL
	);
	CREATE TABLE api_keys (
		id         TEXT PRIMARY KEY,
		team_id    TEXT NOT NULL REFERENCES teams(id),
		hash       TEXT NOT NULL UNIQUE,
		admin      INTEGER NOT NULL DEFAULT 0,
		created_at TEXT NOT NULL,
		revoked_at TEXT
	);
	CREATE TABLE sandboxes (
		id                    TEXT PRIMARY KEY,
		team_id               TEXT NOT NULL REFERENCES teams(id),
		name                  TEXT NOT NULL DEFAULT '',
		state                 TEXT NOT NULL,
		error                 TEXT NOT NULL DEFAULT '',
		image                 TEXT NOT NULL DEFAULT '',
		image_id              TEXT NOT NULL DEFAULT '',
		template              TEXT NOT NULL DEFAULT '',
		from_snapshot         TEXT NOT NULL DEFAULT '',
		created_at            TEXT NOT NULL,
		updated_at            TEXT NOT NULL,
		cpus                  REAL NOT NULL,
		memory_mb             INTEGER NOT NULL,
		disk_mb               INTEGER NOT NULL,
		env                   TEXT NOT NULL DEFAULT '{}',
		metadata              TEXT NOT NULL DEFAULT '{}',
		network               TEXT NOT NULL DEFAULT '{}',
		volumes               TEXT NOT NULL DEFAULT '[]',
		idle                  TEXT NOT NULL DEFAULT '{}',
		checkpoint_interval_s INTEGER NOT NULL DEFAULT 0,
		last_checkpoint_at    TEXT,
		net_index             INTEGER NOT NULL,
		owner_node            TEXT NOT NULL DEFAULT '',
		owner_epoch           INTEGER NOT NULL DEFAULT 0
	);
	CREATE UNIQUE INDEX sandboxes_team_name ON sandboxes(team_id, name) WHERE name != '';
	CREATE INDEX sandboxes_team_state ON sandboxes(team_id, state);`,
	// Version 2: a sandbox's runtime instance (runsc container, network
	// namespace, address) can change under its fixed id: a restore makes a
	// new one beside the old, then swaps. Addresses are leased per instance.
	// Snapshots are recorded once their files are complete.
	2: `ALTER TABLE sandboxes ADD COLUMN runtime_id TEXT NOT NULL DEFAULT '';
	ALTER TABLE sandboxes ADD COLUMN stored INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE sandboxes ADD COLUMN paused_at TEXT;
	ALTER TABLE sandboxes ADD COLUMN last_active_at TEXT;
	CREATE TABLE net_leases (
		net_index  INTEGER PRIMARY KEY,
		runtime_id TEXT NOT NULL UNIQUE,
		sandbox_id TEXT NOT NULL
	);
	INSERT INTO net_leases (net_index, runtime_id, sandbox_id) SELECT net_index, id, id FROM sandboxes;
	UPDATE sandboxes SET runtime_id = id WHERE runtime_id = '';
	CREATE TABLE snapshots (
		id          TEXT PRIMARY KEY,
		team_id     TEXT NOT NULL REFERENCES teams(id),
		sandbox_id  TEXT NOT NULL,
		parent_id   TEXT NOT NULL DEFAULT '',
		name        TEXT NOT NULL DEFAULT '',
		kind        TEXT NOT NULL,
		created_at  TEXT NOT NULL,
		size_bytes  INTEGER NOT NULL,
		runsc_build TEXT NOT NULL,
		image       TEXT NOT NULL DEFAULT '',
		image_id    TEXT NOT NULL DEFAULT '',
		config      TEXT NOT NULL DEFAULT '{}'
	);
	CREATE INDEX snapshots_sandbox ON snapshots(sandbox_id, created_at);
	CREATE INDEX snapshots_team ON snapshots(team_id, created_at);`,
}

// Open opens (creating if needed) the store at path and migrates it to the
// current schema.
func Open(ctx context.Context, path string) (*Store, error) {
	dsn := "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)" +
		"&_pragma=foreign_keys(1)&_pragma=synchronous(FULL)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("opening metadata store %s: %w", path, err)
	}
	// One writer at a time is what SQLite does anyway; a single connection
	// keeps busy errors away and costs nothing at our write rates.
	db.SetMaxOpenConns(1)
	s := &Store{db: db}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("migrating metadata store %s: %w", path, err)
	}
	return s, nil
}

// Close closes the store.
func (s *Store) Close() error { return s.db.Close() }

// SchemaVersion is the schema version of the open store.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := s.db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v)
	return v, err
}

// registerMigration adds the migration to version v; a version registered
// twice panics at start-up (in every test).
func registerMigration(v int, sql string) {
	if _, dup := migrations[v]; dup || v < 1 {
		panic(fmt.Sprintf("store: migration %d registered twice", v))
	}
	migrations[v] = sql
}

func (s *Store) migrate(ctx context.Context) error {
	v, err := s.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	if v > len(migrations) {
		return fmt.Errorf("schema has %d migrations, more than this warren knows (%d): run a newer warren", v, len(migrations))
	}
	if _, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)`); err != nil {
		return err
	}
	applied := map[int]bool{}
	rows, err := s.db.QueryContext(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var n int
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return err
		}
		applied[n] = true
	}
	rows.Close()
	for n := range applied {
		if _, known := migrations[n]; !known {
			return fmt.Errorf("schema has migration %d, which this warren does not know: run a newer warren", n)
		}
	}
	versions := make([]int, 0, len(migrations))
	for n := range migrations {
		versions = append(versions, n)
	}
	sort.Ints(versions)
	for _, n := range versions {
		if applied[n] {
			continue
		}
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, migrations[n]); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %d: %w", n, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`, n, fmtTime(time.Now())); err != nil {
			tx.Rollback()
			return err
		}
		applied[n] = true
		// user_version counts the applied migrations.
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", len(applied))); err != nil {
			tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	return nil
}

// Team owns sandboxes and keys.
type Team struct {
	ID        string
	Name      string
	CreatedAt time.Time
}

// Key is an API key; only its hash is stored.
type Key struct {
	ID        string
	TeamID    string
	Hash      string
	Admin     bool
	CreatedAt time.Time
	RevokedAt *time.Time
}

// EnsureTeam returns the team named name, creating it with id when missing.
func (s *Store) EnsureTeam(ctx context.Context, id, name string) (Team, error) {
	now := time.Now().UTC()
	_, err := s.db.ExecContext(ctx,
		`INSERT INTO teams (id, name, created_at) VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING`,
		id, name, fmtTime(now))
	if err != nil {
		return Team{}, fmt.Errorf("creating team %q: %w", name, err)
	}
	var t Team
	var created string
	err = s.db.QueryRowContext(ctx, `SELECT id, name, created_at FROM teams WHERE name = ?`, name).
		Scan(&t.ID, &t.Name, &created)
	if err != nil {
		return Team{}, fmt.Errorf("reading team %q: %w", name, err)
	}
	t.CreatedAt = parseTime(created)
	return t, nil
}

// CreateKey stores a key.
func (s *Store) CreateKey(ctx context.Context, k Key) error {
	_, err := s.db.ExecContext(ctx,
		`INSERT INTO api_keys (id, team_id, hash, admin, created_at) VALUES (?, ?, ?, ?, ?)`,
		k.ID, k.TeamID, k.Hash, k.Admin, fmtTime(k.CreatedAt))
	if err != nil {
		return fmt.Errorf("storing key %s: %w", k.ID, err)
	}
	return nil
}

// KeyByHash finds an unrevoked key by its hash.
func (s *Store) KeyByHash(ctx context.Context, hash string) (Key, error) {
	var k Key
	var created string
	err := s.db.QueryRowContext(ctx,
		`SELECT id, team_id, hash, admin, created_at FROM api_keys WHERE hash = ? AND revoked_at IS NULL`, hash).
		Scan(&k.ID, &k.TeamID, &k.Hash, &k.Admin, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return Key{}, fmt.Errorf("key: %w", api.ErrNotFound)
	}
	if err != nil {
		return Key{}, fmt.Errorf("looking up key: %w", err)
	}
	k.CreatedAt = parseTime(created)
	return k, nil
}

// Sandbox is a sandbox's row.
type Sandbox struct {
	ID                  string
	TeamID              string
	Name                string
	State               string
	Error               string
	Image               string
	ImageID             string
	Template            string
	FromSnapshot        string
	CreatedAt           time.Time
	UpdatedAt           time.Time
	CPUs                float64
	MemoryMB            int64
	DiskMB              int64
	Env                 map[string]string
	Metadata            map[string]string
	Network             api.Network
	Volumes             []api.VolumeMount
	Idle                api.IdlePolicy
	CheckpointIntervalS int
	LastCheckpointAt    *time.Time
	NetIndex            int
	OwnerNode           string
	OwnerEpoch          int64
	// RuntimeID names the sandbox's current runtime instance: its runsc
	// container and network namespace. It changes at every restore.
	RuntimeID string
	// Stored is true for a paused sandbox whose memory is checkpointed to
	// disk and whose processes are gone.
	Stored       bool
	PausedAt     *time.Time
	LastActiveAt *time.Time
	// Pool names the template whose warm pool the sandbox waits in, until
	// a create claims it; "" for every sandbox a user has.
	Pool string
}

const sandboxColumns = `id, team_id, name, state, error, image, image_id, template, from_snapshot,
	created_at, updated_at, cpus, memory_mb, disk_mb, env, metadata, network, volumes, idle,
	checkpoint_interval_s, last_checkpoint_at, net_index, owner_node, owner_epoch,
	runtime_id, stored, paused_at, last_active_at, pool`

// CreateSandbox inserts sb. With a RuntimeID, it also leases that runtime
// instance the smallest free network index (sb.NetIndex). A name already
// used in the team is ErrConflict.
func (s *Store) CreateSandbox(ctx context.Context, sb *Sandbox) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	// A sandbox gets its address with its first runtime instance
	// (LeaseNetIndex); until then it has none.
	if sb.RuntimeID == "" {
		sb.NetIndex = -1
	} else if sb.NetIndex, err = leaseNetIndex(ctx, tx, sb.RuntimeID, sb.ID); err != nil {
		return err
	}
	now := time.Now().UTC()
	if sb.CreatedAt.IsZero() {
		sb.CreatedAt = now
	}
	sb.UpdatedAt = now
	args, err := sandboxArgs(sb)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO sandboxes (`+sandboxColumns+`)
		VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`, args...)
	if err != nil {
		if strings.Contains(err.Error(), "UNIQUE constraint failed: sandboxes.team_id, sandboxes.name") {
			return fmt.Errorf("a sandbox named %q already exists; pick another name or delete it: %w", sb.Name, api.ErrConflict)
		}
		return fmt.Errorf("storing sandbox %s: %w", sb.ID, err)
	}
	return tx.Commit()
}

func sandboxArgs(sb *Sandbox) ([]any, error) {
	js := func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	}
	env, err := js(nonNilMap(sb.Env))
	if err != nil {
		return nil, err
	}
	meta, err := js(nonNilMap(sb.Metadata))
	if err != nil {
		return nil, err
	}
	network, err := js(sb.Network)
	if err != nil {
		return nil, err
	}
	vols := sb.Volumes
	if vols == nil {
		vols = []api.VolumeMount{}
	}
	volumes, err := js(vols)
	if err != nil {
		return nil, err
	}
	idle, err := js(sb.Idle)
	if err != nil {
		return nil, err
	}
	return []any{sb.ID, sb.TeamID, sb.Name, sb.State, sb.Error, sb.Image, sb.ImageID, sb.Template,
		sb.FromSnapshot, fmtTime(sb.CreatedAt), fmtTime(sb.UpdatedAt), sb.CPUs, sb.MemoryMB, sb.DiskMB,
		env, meta, network, volumes, idle, sb.CheckpointIntervalS, optTime(sb.LastCheckpointAt), sb.NetIndex,
		sb.OwnerNode, sb.OwnerEpoch, sb.RuntimeID, sb.Stored, optTime(sb.PausedAt), optTime(sb.LastActiveAt), sb.Pool}, nil
}

type scanner interface{ Scan(...any) error }

// queryAll runs q and scans every row with scan.
func queryAll[T any](ctx context.Context, db *sql.DB, scan func(scanner) (T, error), q string, args ...any) ([]T, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

func scanSandbox(row scanner) (Sandbox, error) {
	var sb Sandbox
	var created, updated, env, meta, network, volumes, idle string
	var lastCkpt, pausedAt, lastActive sql.NullString
	err := row.Scan(&sb.ID, &sb.TeamID, &sb.Name, &sb.State, &sb.Error, &sb.Image, &sb.ImageID,
		&sb.Template, &sb.FromSnapshot, &created, &updated, &sb.CPUs, &sb.MemoryMB, &sb.DiskMB,
		&env, &meta, &network, &volumes, &idle, &sb.CheckpointIntervalS, &lastCkpt, &sb.NetIndex,
		&sb.OwnerNode, &sb.OwnerEpoch, &sb.RuntimeID, &sb.Stored, &pausedAt, &lastActive, &sb.Pool)
	if err != nil {
		return Sandbox{}, err
	}
	sb.CreatedAt, sb.UpdatedAt = parseTime(created), parseTime(updated)
	sb.LastCheckpointAt, sb.PausedAt, sb.LastActiveAt = nullTime(lastCkpt), nullTime(pausedAt), nullTime(lastActive)
	for _, f := range []struct {
		s string
		v any
	}{{env, &sb.Env}, {meta, &sb.Metadata}, {network, &sb.Network}, {volumes, &sb.Volumes}, {idle, &sb.Idle}} {
		if err := json.Unmarshal([]byte(f.s), f.v); err != nil {
			return Sandbox{}, fmt.Errorf("sandbox %s: decoding a JSON column: %w", sb.ID, err)
		}
	}
	return sb, nil
}

// GetSandbox reads a sandbox. With team != "", a sandbox of another team is
// ErrNotFound, as if it did not exist.
func (s *Store) GetSandbox(ctx context.Context, team, id string) (Sandbox, error) {
	q := `SELECT ` + sandboxColumns + ` FROM sandboxes WHERE id = ?`
	args := []any{id}
	if team != "" {
		// A sandbox waiting in a warm pool is nobody's yet.
		q += ` AND team_id = ? AND pool = ''`
		args = append(args, team)
	}
	sb, err := scanSandbox(s.db.QueryRowContext(ctx, q, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return Sandbox{}, fmt.Errorf("sandbox %s: %w", id, api.ErrNotFound)
	}
	if err != nil {
		return Sandbox{}, fmt.Errorf("reading sandbox %s: %w", id, err)
	}
	return sb, nil
}

// Filter selects sandboxes in ListSandboxes. Zero fields match everything;
// with a Team, sandboxes waiting in a warm pool are left out.
type Filter struct {
	Team     string
	State    string
	Metadata map[string]string
}

// ListSandboxes lists sandboxes matching f, oldest first.
func (s *Store) ListSandboxes(ctx context.Context, f Filter) ([]Sandbox, error) {
	q := `SELECT ` + sandboxColumns + ` FROM sandboxes WHERE 1=1`
	var args []any
	if f.Team != "" {
		q += ` AND team_id = ? AND pool = ''`
		args = append(args, f.Team)
	}
	if f.State != "" {
		q += ` AND state = ?`
		args = append(args, f.State)
	}
	for k, v := range f.Metadata {
		q += ` AND json_extract(metadata, ?) = ?`
		args = append(args, "$."+jsonPathKey(k), v)
	}
	out, err := queryAll(ctx, s.db, scanSandbox, q+` ORDER BY created_at, id`, args...)
	if err != nil {
		return nil, fmt.Errorf("listing sandboxes: %w", err)
	}
	return out, nil
}

// jsonPathKey quotes a metadata key for a JSON path, so keys with dots or
// quotes match literally.
func jsonPathKey(k string) string {
	return `"` + strings.ReplaceAll(strings.ReplaceAll(k, `\`, `\\`), `"`, `\"`) + `"`
}

// Transition moves sandbox id to state to, only if its state is one of from
// (compare-and-set). errMsg is stored as the sandbox's error (cleared when
// empty). A sandbox in another state is ErrConflict, naming the state.
func (s *Store) Transition(ctx context.Context, id string, from []string, to, errMsg string) (Sandbox, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Sandbox{}, err
	}
	defer tx.Rollback()
	var cur string
	err = tx.QueryRowContext(ctx, `SELECT state FROM sandboxes WHERE id = ?`, id).Scan(&cur)
	if errors.Is(err, sql.ErrNoRows) {
		return Sandbox{}, fmt.Errorf("sandbox %s: %w", id, api.ErrNotFound)
	}
	if err != nil {
		return Sandbox{}, err
	}
	ok := false
	for _, f := range from {
		ok = ok || f == cur
	}
	if !ok {
		return Sandbox{}, fmt.Errorf("sandbox %s is %s, not %s: %w", id, cur, strings.Join(from, " or "), api.ErrConflict)
	}
	_, err = tx.ExecContext(ctx, `UPDATE sandboxes SET state = ?, error = ?, updated_at = ? WHERE id = ?`,
		to, errMsg, fmtTime(time.Now().UTC()), id)
	if err != nil {
		return Sandbox{}, fmt.Errorf("sandbox %s: setting state %s: %w", id, to, err)
	}
	sb, err := scanSandbox(tx.QueryRowContext(ctx, `SELECT `+sandboxColumns+` FROM sandboxes WHERE id = ?`, id))
	if err != nil {
		return Sandbox{}, err
	}
	return sb, tx.Commit()
}

// DeleteSandbox removes a sandbox's row and its address leases.
func (s *Store) DeleteSandbox(ctx context.Context, id string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM net_leases WHERE sandbox_id = ?`, id); err != nil {
		return fmt.Errorf("deleting sandbox %s's address leases: %w", id, err)
	}
	res, err := s.db.ExecContext(ctx, `DELETE FROM sandboxes WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("deleting sandbox %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("sandbox %s: %w", id, api.ErrNotFound)
	}
	return nil
}

func optTime(t *time.Time) any {
	if t == nil {
		return nil
	}
	return fmtTime(*t)
}

func nullTime(s sql.NullString) *time.Time {
	if !s.Valid {
		return nil
	}
	t := parseTime(s.String)
	return &t
}

func nonNilMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// timeLayout is fixed-width, so stored times sort as text.
const timeLayout = "2006-01-02T15:04:05.000000000Z07:00"

func fmtTime(t time.Time) string { return t.UTC().Format(timeLayout) }

func parseTime(s string) time.Time {
	t, _ := time.Parse(timeLayout, s)
	return t
}
