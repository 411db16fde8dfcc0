package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/warrenhq/warren/api"
)

func TestDefaultConfigValidates(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("DefaultConfig().Validate(): got %v, want nil", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		field string // what the error must name
		edit  func(c *Config)
	}{
		{"state_dir", func(c *Config) { c.StateDir = "var/lib/warren" }},
		{"state_dir", func(c *Config) { c.StateDir = "" }},
		{"cache_dir", func(c *Config) { c.CacheDir = "cache" }},
		{"listen", func(c *Config) { c.Listen = "7070" }},
		{"listen", func(c *Config) { c.Listen = "" }},
		{"subnet", func(c *Config) { c.Subnet = "10.201.0.0/25" }},
		{"subnet", func(c *Config) { c.Subnet = "fd00::/64" }},
		{"platform", func(c *Config) { c.Platform = "docker" }},
		{"log_level", func(c *Config) { c.LogLevel = "verbose" }},
		{"default_cpus", func(c *Config) { c.DefaultCPUs = 0 }},
		{"default_cpus", func(c *Config) { c.DefaultCPUs = -1 }},
		{"default_cpus", func(c *Config) { c.MaxCPUs = 2; c.DefaultCPUs = 2.5 }},
		{"default_memory_mb", func(c *Config) { c.DefaultMemoryMB = 63 }},
		{"default_memory_mb", func(c *Config) { c.MaxMemoryMB = 256; c.DefaultMemoryMB = 512 }},
		{"default_disk_mb", func(c *Config) { c.DefaultDiskMB = 0 }},
		{"default_disk_mb", func(c *Config) { c.MaxDiskMB = 1024; c.DefaultDiskMB = 4096 }},
		{"idle_timeout_s", func(c *Config) { c.IdleTimeoutS = -1 }},
		{"ready_timeout_s", func(c *Config) { c.ReadyTimeoutS = 0 }},
		{"shutdown_timeout_s", func(c *Config) { c.ShutdownTimeoutS = -1 }},
	}
	for _, tt := range tests {
		c := DefaultConfig()
		c.MaxCPUs = 4 // not the host's count, so every run sees the same bounds
		tt.edit(&c)
		err := c.Validate()
		if !errors.Is(err, api.ErrInvalid) {
			t.Errorf("%s: got %v, want %v", tt.field, err, api.ErrInvalid)
			continue
		}
		if !strings.Contains(err.Error(), tt.field) {
			t.Errorf("%s: got %q, want a message naming %s", tt.field, err, tt.field)
		}
	}
}

func TestConfigValidateAccepts(t *testing.T) {
	tests := []struct {
		name string
		edit func(c *Config)
	}{
		{"kvm", func(c *Config) { c.Platform = "kvm" }},
		{"ptrace", func(c *Config) { c.Platform = "ptrace" }},
		{"debug", func(c *Config) { c.LogLevel = "debug" }},
		{"any port", func(c *Config) { c.Listen = ":0" }},
		{"small subnet", func(c *Config) { c.Subnet = "10.214.0.0/24" }},
		{"fractional cpus", func(c *Config) { c.DefaultCPUs = 0.25 }},
		{"defaults at the max", func(c *Config) {
			c.DefaultCPUs, c.DefaultMemoryMB, c.DefaultDiskMB = c.MaxCPUs, c.MaxMemoryMB, c.MaxDiskMB
		}},
		{"no idle timeout", func(c *Config) { c.IdleTimeoutS = 0 }},
	}
	for _, tt := range tests {
		c := DefaultConfig()
		tt.edit(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("%s: got %v, want nil", tt.name, err)
		}
	}
}

func TestLoadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "warren.json")
	if err := os.WriteFile(path, []byte(`{"listen": "0.0.0.0:8080", "max_cpus": 2, "build_image": false}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	if err := c.LoadFile(path); err != nil {
		t.Fatalf("LoadFile: %v", err)
	}
	want := DefaultConfig()
	want.Listen, want.MaxCPUs, want.BuildImage = "0.0.0.0:8080", 2, false
	if c != want {
		t.Errorf("got %+v, want %+v", c, want)
	}
}

func TestLoadFileErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"listen": `), 0o600); err != nil {
		t.Fatal(err)
	}
	wrongType := filepath.Join(dir, "type.json")
	if err := os.WriteFile(wrongType, []byte(`{"max_cpus": "four"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	unknown := filepath.Join(dir, "unknown.json")
	if err := os.WriteFile(unknown, []byte(`{"max_cpu": 4}`), 0o600); err != nil {
		t.Fatal(err)
	}
	trailing := filepath.Join(dir, "trailing.json")
	if err := os.WriteFile(trailing, []byte(`{"max_cpus": 4} {"max_cpus": 8}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(dir, "missing.json"), bad, wrongType, unknown, trailing} {
		c := DefaultConfig()
		err := c.LoadFile(path)
		if err == nil {
			t.Errorf("LoadFile(%s): got nil, want an error", filepath.Base(path))
			continue
		}
		if !strings.Contains(err.Error(), "config file") {
			t.Errorf("LoadFile(%s): got %q, want it to say it is the config file", filepath.Base(path), err)
		}
	}
}

func TestFirewallTable(t *testing.T) {
	valid := regexp.MustCompile(`^warren_[0-9a-f]{8}$`)
	a1, a2 := firewallTable("/var/lib/warren"), firewallTable("/var/lib/warren")
	b := firewallTable("/tmp/warren-test-1")
	if a1 != a2 {
		t.Errorf("same dir: got %v and %v, want the same name", a1, a2)
	}
	if a1 == b {
		t.Errorf("different dirs: both got %v, want different names", a1)
	}
	for _, name := range []string{a1, b} {
		if !valid.MatchString(name) {
			t.Errorf("got %v, want a name matching %v", name, valid)
		}
	}
}
