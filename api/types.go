// Package api holds Warren's wire types: the JSON bodies of the HTTP API
// described in openapi.yaml, shared by the server, the Go SDK and the
// in-sandbox agent.
package api

import "time"

// Sandbox states. The lifecycle is drawn in internal/sandbox.
const (
	StateCreating = "creating"
	StateRunning  = "running"
	StatePaused   = "paused"
	StateError    = "error"
)

// Error codes carried in ErrorBody.
const (
	CodeInvalid      = "invalid"
	CodeUnauthorized = "unauthorized"
	CodeForbidden    = "forbidden"
	CodeNotFound     = "not_found"
	CodeConflict     = "conflict"
	CodeQuota        = "quota"
	CodeUnavailable  = "unavailable"
	CodeInternal     = "internal"
)

// ErrorBody is the body of every non-2xx answer.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail says what went wrong and what to do about it.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Network is a sandbox's network policy.
type Network struct {
	// Egress is "none", "open", or a list of CIDRs and domain names.
	Egress any `json:"egress,omitempty"`
	// GitCredentials names the credentials the sandbox may use through
	// the daemon's credential proxy (see network.go).
	GitCredentials []string `json:"git_credentials,omitempty"`
}

// VolumeMount attaches a volume to a sandbox.
type VolumeMount struct {
	Volume   string `json:"volume"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// IdlePolicy says what happens to a sandbox nobody has used for a while.
type IdlePolicy struct {
	TimeoutS int    `json:"timeout_s"`
	Action   string `json:"action"` // "pause" or "delete"
}

// CreateSandboxRequest is the body of POST /v1/sandboxes.
type CreateSandboxRequest struct {
	Image               string            `json:"image,omitempty"`
	Template            string            `json:"template,omitempty"`
	Snapshot            string            `json:"snapshot,omitempty"`
	Name                string            `json:"name,omitempty"`
	CPUs                *float64          `json:"cpus,omitempty"`
	MemoryMB            *int64            `json:"memory_mb,omitempty"`
	DiskMB              *int64            `json:"disk_mb,omitempty"`
	Env                 map[string]string `json:"env,omitempty"`
	Metadata            map[string]string `json:"metadata,omitempty"`
	Network             *Network          `json:"network,omitempty"`
	Volumes             []VolumeMount     `json:"volumes,omitempty"`
	Idle                *IdlePolicy       `json:"idle,omitempty"`
	CheckpointIntervalS *int              `json:"checkpoint_interval_s,omitempty"`
	// GitCredentials is network.git_credentials, as the create spells it.
	GitCredentials []string `json:"git_credentials,omitempty"`
}

// Sandbox is a sandbox as the API shows it.
type Sandbox struct {
	ID                  string            `json:"id"`
	Name                string            `json:"name,omitempty"`
	State               string            `json:"state"`
	Error               string            `json:"error,omitempty"`
	Image               string            `json:"image,omitempty"`
	Template            string            `json:"template,omitempty"`
	FromSnapshot        string            `json:"from_snapshot,omitempty"`
	CreatedAt           time.Time         `json:"created_at"`
	CPUs                float64           `json:"cpus"`
	MemoryMB            int64             `json:"memory_mb"`
	DiskMB              int64             `json:"disk_mb"`
	Env                 map[string]string `json:"env,omitempty"`
	Network             Network           `json:"network"`
	Volumes             []VolumeMount     `json:"volumes"`
	Idle                IdlePolicy        `json:"idle"`
	CheckpointIntervalS int               `json:"checkpoint_interval_s"`
	LastCheckpointAt    *time.Time        `json:"last_checkpoint_at,omitempty"`
	Metadata            map[string]string `json:"metadata"`
}

// SandboxList is the answer of GET /v1/sandboxes.
type SandboxList struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}

// ExecRequest is the body of POST /v1/sandboxes/{id}/exec, and of the
// agent's /exec. Exactly one of Cmd and Command is set.
type ExecRequest struct {
	Cmd        []string          `json:"cmd,omitempty"`
	Command    string            `json:"command,omitempty"`
	Cwd        string            `json:"cwd,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	Stdin      string            `json:"stdin,omitempty"`
	TimeoutS   float64           `json:"timeout_s,omitempty"`
	Shell      string            `json:"shell,omitempty"`
	Background bool              `json:"background,omitempty"`
}

// ExecResult is the answer of a foreground exec.
type ExecResult struct {
	ExitCode   int    `json:"exit_code"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	DurationMS int64  `json:"duration_ms"`
	// TimedOut is true when the command was killed at its timeout.
	TimedOut bool `json:"timed_out,omitempty"`
	// Truncated is true when output beyond the buffered limit was dropped.
	Truncated bool `json:"truncated,omitempty"`
}

// ExecEvent is one NDJSON line of a streamed exec. Exactly one field is set
// per line; the last line carries ExitCode.
type ExecEvent struct {
	Stdout   *string `json:"stdout,omitempty"`
	Stderr   *string `json:"stderr,omitempty"`
	ExitCode *int    `json:"exit_code,omitempty"`
	TimedOut bool    `json:"timed_out,omitempty"`
	Error    string  `json:"error,omitempty"`
}

// FileEntry is one entry of a directory listing.
type FileEntry struct {
	Name    string    `json:"name"`
	Path    string    `json:"path"`
	Type    string    `json:"type"` // "file", "dir", "symlink", "other"
	Size    int64     `json:"size"`
	Mode    string    `json:"mode"` // octal permission bits, "0644"
	ModTime time.Time `json:"mtime"`
	// Target is where a symlink points.
	Target string `json:"target,omitempty"`
}

// FileList is the answer of GET .../files/list.
type FileList struct {
	Entries []FileEntry `json:"entries"`
}

// Image is an image in the local cache.
type Image struct {
	Name      string    `json:"name"`
	ID        string    `json:"id"` // sha256:... content address
	SizeBytes int64     `json:"size_bytes"`
	CreatedAt time.Time `json:"created_at"`
	Source    string    `json:"source"` // "builtin", "import", "pull"
}

// ImageList is the answer of GET /v1/images.
type ImageList struct {
	Images []Image `json:"images"`
}

// PullRequest is the body of POST /v1/images/pull.
type PullRequest struct {
	Ref string `json:"ref"`
	// Name is the local name; the ref when empty.
	Name string `json:"name,omitempty"`
}

// Progress is one NDJSON line of a long operation (pull, build, import) when
// the client asks for application/x-ndjson. The last line has Done or Error.
type Progress struct {
	Phase   string `json:"phase,omitempty"`
	Message string `json:"message,omitempty"`
	Current int64  `json:"current,omitempty"`
	Total   int64  `json:"total,omitempty"`
	Done    *Image `json:"done,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Health is the answer of GET /healthz.
type Health struct {
	Status  string `json:"status"`
	Version string `json:"version"`
	Runsc   string `json:"runsc"`
}

// AgentPort is the TCP port warren-agent listens on inside every sandbox.
const AgentPort = 49982

// AgentHealth is the answer of the agent's GET /health.
type AgentHealth struct {
	Status  string `json:"status"`
	Version string `json:"version"`
	PID     int    `json:"pid"`
}

// Snapshot is an immutable save point of a sandbox: memory, processes and
// writable layer.
type Snapshot struct {
	ID        string    `json:"id"`
	Name      string    `json:"name,omitempty"`
	SandboxID string    `json:"sandbox_id"`
	ParentID  string    `json:"parent_id,omitempty"`
	Kind      string    `json:"kind"` // "manual", "checkpoint", "template"
	CreatedAt time.Time `json:"created_at"`
	SizeBytes int64     `json:"size_bytes"`
	Image     string    `json:"image,omitempty"`
}

// SnapshotList is the answer of GET /v1/snapshots.
type SnapshotList struct {
	Snapshots []Snapshot `json:"snapshots"`
}

// SnapshotRequest is the body of POST /v1/sandboxes/{id}/snapshots.
type SnapshotRequest struct {
	Name string `json:"name,omitempty"`
}

// RevertRequest is the body of POST /v1/sandboxes/{id}/revert.
type RevertRequest struct {
	Snapshot string `json:"snapshot"`
}

// ForkRequest is the body of the fork calls.
type ForkRequest struct {
	Count int `json:"count"`
}
