package store

// Version 3: accounts. Keys get a name and a displayable prefix; teams get
// quota overrides; usage is recorded as intervals; lifecycle events are
// kept with increasing ids (AUTOINCREMENT: an id is never reused, even
// after old events are pruned), and webhooks remember how far they have
// delivered.
//
//	team_quotas    (team_id PK -> teams, running_sandboxes, running_memory_mb,
//	                storage_mb, creates_per_minute (NULL: the default), updated_at)
//	usage_segments (id PK AUTOINCREMENT, team_id, sandbox_id, kind
//	                'compute'|'storage', start_at, end_at, open, cpus,
//	                memory_mb, bytes)
//	events         (id PK AUTOINCREMENT, team_id, kind, sandbox_id, at, data JSON)
//	webhooks       (id PK, team_id -> teams, url, secret, created_at, cursor,
//	                last_status, last_error)
func init() {
	registerMigration(3, `ALTER TABLE api_keys ADD COLUMN name TEXT NOT NULL DEFAULT '';
	ALTER TABLE api_keys ADD COLUMN prefix TEXT NOT NULL DEFAULT '';
	CREATE TABLE team_quotas (
		team_id            TEXT PRIMARY KEY REFERENCES teams(id),
		running_sandboxes  INTEGER,
		running_memory_mb  INTEGER,
		storage_mb         INTEGER,
		creates_per_minute INTEGER,
		updated_at         TEXT NOT NULL
	);
	CREATE TABLE usage_segments (
		id         INTEGER PRIMARY KEY AUTOINCREMENT,
		team_id    TEXT NOT NULL,
		sandbox_id TEXT NOT NULL,
		kind       TEXT NOT NULL,
		start_at   TEXT NOT NULL,
		end_at     TEXT NOT NULL,
		open       INTEGER NOT NULL DEFAULT 1,
		cpus       REAL NOT NULL DEFAULT 0,
		memory_mb  INTEGER NOT NULL DEFAULT 0,
		bytes      INTEGER NOT NULL DEFAULT 0
	);
	CREATE INDEX usage_segments_team ON usage_segments(team_id, end_at);
	CREATE INDEX usage_segments_open ON usage_segments(open) WHERE open = 1;
	CREATE TABLE events (
		id         INTEGER PRIMARY KEY AUTOINCREMENT,
		team_id    TEXT NOT NULL,
		kind       TEXT NOT NULL,
		sandbox_id TEXT NOT NULL DEFAULT '',
		at         TEXT NOT NULL,
		data       TEXT NOT NULL
	);
	CREATE INDEX events_team ON events(team_id, id);
	CREATE INDEX events_at ON events(at);
	CREATE TABLE webhooks (
		id          TEXT PRIMARY KEY,
		team_id     TEXT NOT NULL REFERENCES teams(id),
		url         TEXT NOT NULL,
		secret      TEXT NOT NULL,
		created_at  TEXT NOT NULL,
		cursor      INTEGER NOT NULL DEFAULT 0,
		last_status INTEGER NOT NULL DEFAULT 0,
		last_error  TEXT NOT NULL DEFAULT ''
	);
	CREATE INDEX webhooks_team ON webhooks(team_id);`)
}
