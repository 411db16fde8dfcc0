package store

// Version 5: templates (with the size of their warm pool), the environment
// a sandbox started from a snapshot or template adds to what its snapshot's
// processes carry, and the pool a sandbox waits in before it is claimed.
func init() {
	registerMigration(5, `CREATE TABLE templates (
		team_id     TEXT NOT NULL REFERENCES teams(id),
		name        TEXT NOT NULL,
		snapshot_id TEXT NOT NULL,
		image       TEXT NOT NULL,
		setup       TEXT NOT NULL DEFAULT '[]',
		env         TEXT NOT NULL DEFAULT '{}',
		cpus        REAL NOT NULL,
		memory_mb   INTEGER NOT NULL,
		disk_mb     INTEGER NOT NULL,
		build_log   TEXT NOT NULL DEFAULT '',
		pool_size   INTEGER NOT NULL DEFAULT 0,
		created_at  TEXT NOT NULL,
		updated_at  TEXT NOT NULL,
		PRIMARY KEY (team_id, name)
	);
	ALTER TABLE sandboxes ADD COLUMN extra_env TEXT NOT NULL DEFAULT '{}';
	ALTER TABLE sandboxes ADD COLUMN pool TEXT NOT NULL DEFAULT '';
	CREATE INDEX sandboxes_pool ON sandboxes(team_id, pool) WHERE pool != '';`)
}
