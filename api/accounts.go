package api

import (
	"fmt"
	"time"
)

// Accounts: teams and their API keys, quotas, usage, events and metrics.

// CreateKeyRequest is the body of POST /v1/keys (admin only).
type CreateKeyRequest struct {
	// Team is the team's name; the team is created with its first key.
	Team string `json:"team"`
	// Name says what the key is for ("ci", "agent-7"); optional.
	Name string `json:"name,omitempty"`
}

// Key is an API key as listed: never the key itself, only its prefix.
type Key struct {
	ID        string     `json:"id"`
	Team      string     `json:"team"`
	Name      string     `json:"name,omitempty"`
	Prefix    string     `json:"prefix"`
	Admin     bool       `json:"admin"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// NewKey is the answer of POST /v1/keys: the key, shown this once.
type NewKey struct {
	Key
	Secret string `json:"key"`
}

// KeyList is the answer of GET /v1/keys.
type KeyList struct {
	Keys []Key `json:"keys"`
}

// Team is a team as listed by GET /v1/teams.
type Team struct {
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// TeamList is the answer of GET /v1/teams.
type TeamList struct {
	Teams []Team `json:"teams"`
}

// Limits are a team's quotas. A nil field is "the server's default" in an
// override (PUT /v1/teams/{team}/quota); in an answer every field is set,
// and 0 means unlimited.
type Limits struct {
	// RunningSandboxes bounds the team's running sandboxes (paused ones
	// do not count).
	RunningSandboxes *int64 `json:"running_sandboxes"`
	// RunningMemoryMB bounds the memory of the team's running sandboxes.
	RunningMemoryMB *int64 `json:"running_memory_mb"`
	// StorageMB bounds the team's snapshot and volume storage: a
	// snapshot is refused while the team is at or over it.
	StorageMB *int64 `json:"storage_mb"`
	// CreatesPerMinute bounds sandboxes created (forks included) in any
	// 60 seconds.
	CreatesPerMinute *int64 `json:"creates_per_minute"`
}

// QuotaUsage is what a team uses of its quotas now.
type QuotaUsage struct {
	RunningSandboxes int64 `json:"running_sandboxes"`
	RunningMemoryMB  int64 `json:"running_memory_mb"`
	StorageMB        int64 `json:"storage_mb"`
	CreatesPerMinute int64 `json:"creates_per_minute"`
}

// Quota is the answer of GET and PUT /v1/teams/{team}/quota.
type Quota struct {
	Team string `json:"team"`
	// Limits in force: the overrides, else the defaults; 0 is unlimited.
	Limits Limits `json:"limits"`
	// Overrides are the team's own settings; nil fields take the default.
	Overrides Limits `json:"overrides"`
	// Used is what the team uses now.
	Used QuotaUsage `json:"used"`
}

// QuotaExceeded says which quota refused a call, and the figures. It is
// carried in the error body of a 429.
type QuotaExceeded struct {
	// Limit names the quota: running_sandboxes, running_memory_mb,
	// storage_mb or creates_per_minute.
	Limit string `json:"limit"`
	// Max is the team's limit.
	Max int64 `json:"max"`
	// Used is what the team uses now.
	Used int64 `json:"used"`
	// Requested is what the call would have added.
	Requested int64 `json:"requested"`
}

// QuotaError is a refusal by a quota; it is ErrQuota for errors.Is.
type QuotaError struct {
	Team string
	Op   string
	QuotaExceeded
}

func (e *QuotaError) Error() string {
	what := map[string]string{
		"running_sandboxes":  "running sandboxes",
		"running_memory_mb":  "MB of memory in running sandboxes",
		"storage_mb":         "MB of snapshots and volumes",
		"creates_per_minute": "sandboxes created in the last minute",
	}[e.Limit]
	hint := "pause or delete sandboxes, or ask the admin to raise it"
	switch e.Limit {
	case "storage_mb":
		hint = "delete snapshots or volumes, or ask the admin to raise it"
		return fmt.Sprintf("%s refused: team %s has %d %s, at or over its limit of %d (%s); %s: %v",
			e.Op, e.Team, e.Used, what, e.Max, e.Limit, hint, ErrQuota)
	case "creates_per_minute":
		hint = "wait a little and retry, or ask the admin to raise it"
	}
	return fmt.Sprintf("%s refused: team %s has %d %s and this would add %d, over its limit of %d (%s); %s: %v",
		e.Op, e.Team, e.Used, what, e.Requested, e.Max, e.Limit, hint, ErrQuota)
}

// Is makes errors.Is(err, ErrQuota) true.
func (e *QuotaError) Is(target error) bool { return target == ErrQuota }

// Usage is the answer of GET /v1/usage: what a team's sandboxes used in
// [from, to), and what it costs.
type Usage struct {
	Team      string         `json:"team"`
	From      time.Time      `json:"from"`
	To        time.Time      `json:"to"`
	Sandboxes []SandboxUsage `json:"sandboxes"`
	Total     UsageFigures   `json:"total"`
	Prices    Prices         `json:"prices"`
}

// SandboxUsage is one sandbox's usage. A deleted sandbox's snapshots keep
// counting storage under its id; a volume's storage is under the volume's
// id (vol-...).
type SandboxUsage struct {
	SandboxID string `json:"sandbox_id"`
	UsageFigures
}

// UsageFigures are usage and its cost. Compute is billed only while a
// sandbox runs; storage counts its writable layer, a stored pause and its
// snapshots. GB is 2^30 bytes.
type UsageFigures struct {
	RunningSeconds  float64 `json:"running_seconds"`
	VCPUSeconds     float64 `json:"vcpu_seconds"`
	MemoryGBSeconds float64 `json:"memory_gb_seconds"`
	StorageGBHours  float64 `json:"storage_gb_hours"`
	Cost            Cost    `json:"cost"`
}

// Cost is usage priced by the server's price table, in US dollars. A
// sandbox's storage is at list price; the free allowance applies to the
// team's total only (StorageFree).
type Cost struct {
	VCPU        float64 `json:"vcpu"`
	Memory      float64 `json:"memory"`
	Storage     float64 `json:"storage"`
	StorageFree float64 `json:"storage_free,omitempty"`
	Total       float64 `json:"total"`
}

// Prices is the server's price table, in US dollars.
type Prices struct {
	VCPUSecond     float64 `json:"vcpu_second"`
	MemoryGBSecond float64 `json:"memory_gb_second"`
	StorageGBMonth float64 `json:"storage_gb_month"`
	// StorageFreeGB is how much storage a team holds free at any moment.
	StorageFreeGB float64 `json:"storage_free_gb"`
}

// Event kinds: lifecycle changes of sandboxes, as GET /v1/events and
// webhooks deliver them.
const (
	EventCreated      = "created"
	EventPaused       = "paused"
	EventResumed      = "resumed"
	EventSnapshotted  = "snapshotted"
	EventForked       = "forked"
	EventReverted     = "reverted"
	EventDeleted      = "deleted"
	EventError        = "error"
	EventIdlePaused   = "idle-paused"
	EventStored       = "stored"
	EventRestored     = "restored"
	EventQuotaRefused = "quota-refused"
)

// Event is one lifecycle change of a team's sandbox. IDs increase
// monotonically across the server; a stream resumes after the last one
// seen (Last-Event-ID).
type Event struct {
	ID         int64  `json:"id"`
	Kind       string `json:"kind"`
	SandboxID  string `json:"sandbox_id,omitempty"`
	SnapshotID string `json:"snapshot_id,omitempty"`
	// State is the sandbox's state after the change ("" once deleted).
	State string `json:"state,omitempty"`
	// Op is the operation an error or a quota refusal is about (create,
	// pause, resume, snapshot, fork, revert, delete, store, restore,
	// recover).
	Op         string    `json:"op,omitempty"`
	Error      string    `json:"error,omitempty"`
	DurationMS int64     `json:"duration_ms,omitempty"`
	At         time.Time `json:"at"`
}

// CreateWebhookRequest is the body of POST /v1/webhooks.
type CreateWebhookRequest struct {
	// URL receives each event as a POST of its JSON, signed (see
	// Webhook).
	URL string `json:"url"`
}

// Webhook delivers a team's events to a URL: each event is POSTed as JSON
// with headers Warren-Event-Id, Warren-Timestamp (Unix seconds) and
// Warren-Signature: "v1=" + hex(HMAC-SHA256(secret, timestamp + "." +
// body)). A delivery that fails (no answer or a non-2xx) is retried with
// backoff; events go out in order.
type Webhook struct {
	ID        string    `json:"id"`
	URL       string    `json:"url"`
	CreatedAt time.Time `json:"created_at"`
	// Secret is shown only when the webhook is created.
	Secret string `json:"secret,omitempty"`
	// Delivered is the id of the last event delivered (or given up on).
	Delivered  int64  `json:"delivered"`
	LastStatus int    `json:"last_status,omitempty"`
	LastError  string `json:"last_error,omitempty"`
}

// WebhookList is the answer of GET /v1/webhooks.
type WebhookList struct {
	Webhooks []Webhook `json:"webhooks"`
}

// SandboxMetrics is the answer of GET /v1/sandboxes/{id}/metrics: what
// the sandbox's current runtime instance uses, read from its cgroup.
type SandboxMetrics struct {
	SandboxID string `json:"sandbox_id"`
	State     string `json:"state"`
	// CPUSeconds is CPU time used since the current runtime instance
	// started (a restore starts a new one); diff two reads for a rate.
	CPUSeconds float64 `json:"cpu_seconds"`
	// MemoryBytes is the memory the sandbox holds now.
	MemoryBytes      int64     `json:"memory_bytes"`
	MemoryLimitBytes int64     `json:"memory_limit_bytes"`
	CPUs             float64   `json:"cpus"`
	At               time.Time `json:"at"`
}

// QuotaErrorBody is the body of a 429: an ErrorBody whose error also says
// which quota refused the call, with the figures.
type QuotaErrorBody struct {
	Error QuotaErrorDetail `json:"error"`
}

// QuotaErrorDetail is an ErrorDetail with the quota that refused.
type QuotaErrorDetail struct {
	ErrorDetail
	Quota *QuotaExceeded `json:"quota,omitempty"`
}
