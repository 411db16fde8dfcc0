package daemon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/backend/runsc"
	"github.com/warrenhq/warren/internal/network"
)

// Config is the daemon's configuration. Defaults come from DefaultConfig; a
// JSON file (--config), then environment variables (WARREN_*), then flags
// override them.
type Config struct {
	// StateDir holds the metadata store, the image cache, sandboxes and
	// the admin key.
	StateDir string `json:"state_dir"`
	// Listen is the API's address.
	Listen string `json:"listen"`
	// CacheDir holds slow builds shared by every state directory: runsc
	// and the built-in Debian image, keyed by version.
	CacheDir string `json:"cache_dir"`
	// Runsc is the runsc binary; default CacheDir/runsc/<version>/runsc.
	Runsc string `json:"runsc"`
	// Platform is runsc's platform: systrap (default) or kvm.
	Platform string `json:"platform"`
	// Agent is the warren-agent binary; default: beside this executable.
	Agent string `json:"agent"`
	// Subnet is the IPv4 range sandbox links are carved from (a /30 each).
	Subnet string `json:"subnet"`
	// DefaultImage is the image of a create that names none.
	DefaultImage string `json:"default_image"`
	// BuildImage builds the built-in image at start when it is missing.
	BuildImage bool `json:"build_image"`
	// Debian mirror for the built-in image; empty picks this host's.
	Mirror string `json:"mirror"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `json:"log_level"`

	DefaultCPUs     float64 `json:"default_cpus"`
	DefaultMemoryMB int64   `json:"default_memory_mb"`
	DefaultDiskMB   int64   `json:"default_disk_mb"`
	MaxCPUs         float64 `json:"max_cpus"`
	MaxMemoryMB     int64   `json:"max_memory_mb"`
	MaxDiskMB       int64   `json:"max_disk_mb"`
	IdleTimeoutS    int     `json:"idle_timeout_s"`
	// ReadyTimeoutS bounds the wait for a new sandbox's agent.
	ReadyTimeoutS int `json:"ready_timeout_s"`
	// ShutdownTimeoutS bounds a graceful shutdown.
	ShutdownTimeoutS int `json:"shutdown_timeout_s"`
	// StoreAfterS is how long a sandbox stays paused in memory before it
	// is checkpointed to disk and its memory freed.
	StoreAfterS int `json:"store_after_s"`
	// MinAvailableMB: below this much available host memory, paused
	// sandboxes are stored to disk at once.
	MinAvailableMB int64 `json:"min_available_mb"`
	// KeepCheckpoints is how many periodic checkpoints a sandbox keeps.
	KeepCheckpoints int `json:"keep_checkpoints"`
	// PolicyIntervalMS is how often the idle, store and checkpoint
	// policies run.
	PolicyIntervalMS int `json:"policy_interval_ms"`
	// MaxParallelRestores bounds concurrent restores (forks).
	MaxParallelRestores int `json:"max_parallel_restores"`
	// TemplatePoolSize is how many sandboxes of each template are kept
	// warm (restored and paused) when the template sets no pool.
	TemplatePoolSize int `json:"template_pool_size"`
	// DNSUpstream are the resolvers the daemon asks for its sandboxes,
	// "ip:port" separated by commas; default: the host's resolv.conf
	// nameservers.
	DNSUpstream string `json:"dns_upstream"`

	// Quotas, prices, usage flushing, event retention, public metrics.
	accountsConfig
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		StateDir:         "/var/lib/warren",
		Listen:           "127.0.0.1:7070",
		CacheDir:         "/var/cache/warren",
		Platform:         "systrap",
		Subnet:           "10.201.0.0/16",
		DefaultImage:     "debian:bookworm",
		BuildImage:       true,
		LogLevel:         "info",
		DefaultCPUs:      1,
		DefaultMemoryMB:  512,
		DefaultDiskMB:    4096,
		MaxCPUs:          float64(runtime.NumCPU()),
		MaxMemoryMB:      16384,
		MaxDiskMB:        65536,
		IdleTimeoutS:     600,
		ReadyTimeoutS:    30,
		ShutdownTimeoutS: 10,
		StoreAfterS:      300,
		MinAvailableMB:   1024,
		KeepCheckpoints:  3,
		PolicyIntervalMS: 1000,
		// Restores are mostly CPU (page loading) but wait too (runsc's
		// start, the agent): fork x10 on 2 cores took 1.93 s one at a time,
		// 1.26 s two at a time, 1.07 s three, 0.98-1.17 s five (make bench,
		// two runs each). One more than the cores.
		MaxParallelRestores: runtime.NumCPU() + 1,
		TemplatePoolSize:    1,
		accountsConfig:      defaultAccountsConfig(),
	}
}

// LoadFile overrides c with the fields present in the JSON file at path.
// A field it does not know is an error, so a misspelt setting is not
// silently ignored.
func (c *Config) LoadFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(c); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("config file %s: data after the JSON object", path)
	}
	return nil
}

// RunscPath is the runsc binary the daemon uses.
func (c Config) RunscPath() string {
	if c.Runsc != "" {
		return c.Runsc
	}
	return filepath.Join(c.CacheDir, "runsc", runsc.Version, "runsc")
}

// AgentPath is the warren-agent binary the daemon mounts into sandboxes.
func (c Config) AgentPath() string {
	if c.Agent != "" {
		return c.Agent
	}
	exe, err := os.Executable()
	if err != nil {
		return "warren-agent"
	}
	return filepath.Join(filepath.Dir(exe), "warren-agent")
}

// Validate says what is wrong with c, if anything.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("config: "+format+": %w", append(args, api.ErrInvalid)...)
	}
	if !filepath.IsAbs(c.StateDir) {
		return bad("state_dir %q must be an absolute path", c.StateDir)
	}
	if !filepath.IsAbs(c.CacheDir) {
		return bad("cache_dir %q must be an absolute path", c.CacheDir)
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return bad("listen %q: want host:port, like 127.0.0.1:7070", c.Listen)
	}
	if _, err := network.NewPool(c.Subnet); err != nil {
		return bad("%v", err)
	}
	switch c.Platform {
	case "systrap", "ptrace", "kvm":
	default:
		return bad("platform %q: use systrap, ptrace or kvm", c.Platform)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return bad("log_level %q: use debug, info, warn or error", c.LogLevel)
	}
	if c.DefaultCPUs <= 0 || c.DefaultCPUs > c.MaxCPUs {
		return bad("default_cpus %v must be in (0, max_cpus=%v]", c.DefaultCPUs, c.MaxCPUs)
	}
	if c.DefaultMemoryMB < 64 || c.DefaultMemoryMB > c.MaxMemoryMB {
		return bad("default_memory_mb %d must be in [64, max_memory_mb=%d]", c.DefaultMemoryMB, c.MaxMemoryMB)
	}
	if c.DefaultDiskMB < 64 || c.DefaultDiskMB > c.MaxDiskMB {
		return bad("default_disk_mb %d must be in [64, max_disk_mb=%d]", c.DefaultDiskMB, c.MaxDiskMB)
	}
	if err := c.validateAccounts(); err != nil {
		return err
	}
	if c.TemplatePoolSize < 0 || c.TemplatePoolSize > 64 {
		return bad("template_pool_size %d: keep between 0 and 64 sandboxes warm", c.TemplatePoolSize)
	}
	if c.StoreAfterS < 0 || c.MinAvailableMB < 0 || c.KeepCheckpoints < 1 || c.PolicyIntervalMS < 10 || c.MaxParallelRestores < 1 {
		return bad("store_after_s and min_available_mb must not be negative; keep_checkpoints and max_parallel_restores at least 1; policy_interval_ms at least 10")
	}
	for _, u := range c.dnsUpstreams() {
		if _, err := netip.ParseAddrPort(u); err != nil {
			return bad("dns_upstream %q: want ip:port, like 192.0.2.53:53 (several separated by commas)", u)
		}
	}
	if c.IdleTimeoutS < 0 || c.ReadyTimeoutS <= 0 || c.ShutdownTimeoutS < 0 {
		return bad("idle_timeout_s, ready_timeout_s and shutdown_timeout_s must not be negative (ready_timeout_s > 0)")
	}
	return nil
}

func (c Config) readyTimeout() time.Duration { return time.Duration(c.ReadyTimeoutS) * time.Second }

// dnsUpstreams lists DNSUpstream's resolvers.
func (c Config) dnsUpstreams() []string {
	var out []string
	for _, u := range strings.Split(c.DNSUpstream, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}
