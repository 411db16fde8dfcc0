package api

import "time"

// CreateTemplateRequest is the body of POST /v1/templates: boot Image, run
// Setup in order (each a shell command, run by bash -c), wait until the
// machine is idle, then snapshot it. Sandboxes created with {template: Name}
// start from that snapshot: packages installed, caches warm, processes
// running. Posting an existing name rebuilds it; the old snapshot is
// replaced only once the new one is complete.
type CreateTemplateRequest struct {
	Name     string            `json:"name"`
	Image    string            `json:"image,omitempty"`
	Setup    []string          `json:"setup,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	CPUs     *float64          `json:"cpus,omitempty"`
	MemoryMB *int64            `json:"memory_mb,omitempty"`
	DiskMB   *int64            `json:"disk_mb,omitempty"`
	// SetupTimeoutS bounds each setup command (default 1800).
	SetupTimeoutS int `json:"setup_timeout_s,omitempty"`
	// Pool is how many sandboxes of the template to keep restored and
	// paused, ready for a create to claim (0 to 64; the server's
	// template_pool_size when absent).
	Pool *int `json:"pool,omitempty"`
}

// Template is a built template.
type Template struct {
	Name       string            `json:"name"`
	Image      string            `json:"image"`
	Setup      []string          `json:"setup"`
	Env        map[string]string `json:"env,omitempty"`
	CPUs       float64           `json:"cpus"`
	MemoryMB   int64             `json:"memory_mb"`
	DiskMB     int64             `json:"disk_mb"`
	SnapshotID string            `json:"snapshot_id"`
	SizeBytes  int64             `json:"size_bytes"`
	PoolSize   int               `json:"pool_size"`
	// PoolReady counts the sandboxes waiting in the pool now.
	PoolReady int       `json:"pool_ready"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// BuildLog is the setup commands' output, kept from the last build.
	BuildLog string `json:"build_log,omitempty"`
}

// TemplateList is the answer of GET /v1/templates.
type TemplateList struct {
	Templates []Template `json:"templates"`
}

// TemplateEvent is one NDJSON line of a template build streamed with
// Accept: application/x-ndjson. The last line carries Done or Error.
type TemplateEvent struct {
	// Phase is "boot", "setup", "settle", "snapshot".
	Phase string `json:"phase"`
	// Step is the index of the setup command (from 0) in phase "setup".
	Step    int       `json:"step,omitempty"`
	Command string    `json:"command,omitempty"`
	Stdout  *string   `json:"stdout,omitempty"`
	Stderr  *string   `json:"stderr,omitempty"`
	Message string    `json:"message,omitempty"`
	Done    *Template `json:"done,omitempty"`
	Error   string    `json:"error,omitempty"`
}
