package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warrenhq/warren/api"
)

func TestAccountsConfig(t *testing.T) {
	c := DefaultConfig()
	if c.UsageFlushS != 10 || c.EventRetentionH != 168 || c.Prices.StorageGBMonth != 0.05 || c.Prices.StorageFreeGB != 10 || c.Quota.RunningSandboxes != 0 {
		t.Errorf("defaults: got %+v", c.accountsConfig)
	}
	for _, tt := range []struct {
		field string
		edit  func(c *Config)
	}{
		{"quota", func(c *Config) { c.Quota.RunningSandboxes = -1 }},
		{"prices", func(c *Config) { c.Prices.VCPUSecond = -0.1 }},
		{"usage_flush_s", func(c *Config) { c.UsageFlushS = 0 }},
		{"event_retention_h", func(c *Config) { c.EventRetentionH = 0 }},
	} {
		c := DefaultConfig()
		tt.edit(&c)
		err := c.Validate()
		if !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("%s: got %v, want an invalid error naming it", tt.field, err)
		}
	}
	// The fields sit at the top level of the config file.
	path := filepath.Join(t.TempDir(), "config.json")
	os.WriteFile(path, []byte(`{"quota": {"running_sandboxes": 3, "creates_per_minute": 60},
		"prices": {"vcpu_second": 0.00002, "storage_gb_month": 0.1}, "usage_flush_s": 2, "metrics_public": true}`), 0o600)
	c = DefaultConfig()
	if err := c.LoadFile(path); err != nil {
		t.Fatal(err)
	}
	if c.Quota.RunningSandboxes != 3 || c.Quota.CreatesPerMinute != 60 || c.Prices.VCPUSecond != 0.00002 ||
		c.Prices.StorageGBMonth != 0.1 || c.UsageFlushS != 2 || !c.MetricsPublic {
		t.Errorf("loaded: got %+v", c.accountsConfig)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("loaded config: %v", err)
	}
	os.WriteFile(path, []byte(`{"quota": {"running": 3}}`), 0o600)
	c = DefaultConfig()
	if err := c.LoadFile(path); err == nil {
		t.Errorf("a misspelt quota field: got nil error")
	}
}
