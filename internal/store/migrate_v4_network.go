package store

// Version 4: volumes and credentials, both owned by a team.
//
//	volumes     (id PK, team_id -> teams, name, size_mb, created_at)
//	            UNIQUE (team_id, name)
//	credentials (team_id -> teams, name, url, username, secret (sealed:
//	            nonce and AES-GCM ciphertext, key in the state directory),
//	            created_at) PK (team_id, name)
//
// Which volumes a sandbox mounts and which credentials it may use are in
// its row (the volumes and network JSON columns).
func init() {
	registerMigration(4, `CREATE TABLE volumes (
		id         TEXT PRIMARY KEY,
		team_id    TEXT NOT NULL REFERENCES teams(id),
		name       TEXT NOT NULL,
		size_mb    INTEGER NOT NULL,
		created_at TEXT NOT NULL,
		UNIQUE (team_id, name)
	);
	CREATE TABLE credentials (
		team_id    TEXT NOT NULL REFERENCES teams(id),
		name       TEXT NOT NULL,
		url        TEXT NOT NULL,
		username   TEXT NOT NULL,
		secret     BLOB NOT NULL,
		created_at TEXT NOT NULL,
		PRIMARY KEY (team_id, name)
	);`)
}
