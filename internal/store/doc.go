// Package store keeps Warren's metadata in SQLite (WAL mode).
//
// Every transition of a sandbox is written here before it is acknowledged,
// and state changes are compare-and-set (Transition), so two operations
// racing on one sandbox cannot both win. The schema is versioned with
// PRAGMA user_version; Open applies the migrations that are missing, each in
// its own transaction.
//
// Schema (version 2):
//
//	teams      (id PK, name UNIQUE, created_at)
//	api_keys   (id PK, team_id -> teams, hash UNIQUE, admin, created_at, revoked_at)
//	sandboxes  (id PK, team_id -> teams, name, state, error, image, image_id,
//	            template, from_snapshot, created_at, updated_at, cpus,
//	            memory_mb, disk_mb, env, metadata, network, volumes, idle
//	            (JSON columns), checkpoint_interval_s, last_checkpoint_at,
//	            net_index, owner_node, owner_epoch,
//	            runtime_id, stored, paused_at, last_active_at [v2])
//	            UNIQUE (team_id, name) where name != ''
//	net_leases (net_index PK, runtime_id UNIQUE, sandbox_id)          [v2]
//	snapshots  (id PK, team_id, sandbox_id, parent_id, name, kind,
//	            created_at, size_bytes, runsc_build, image, image_id,
//	            config JSON)                                         [v2]
//
// Every record carries the team that owns it. owner_node and owner_epoch
// are there for the fleet: the node that runs a sandbox and the epoch of its
// lease; on one host they are this host's name and 1.
package store
