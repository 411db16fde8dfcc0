package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/warrenhq/warren/internal/daemon"
)

func TestServerConfigLayers(t *testing.T) {
	file := filepath.Join(t.TempDir(), "warren.json")
	err := os.WriteFile(file, []byte(`{"state_dir": "/srv/file", "listen": "0.0.0.0:9000", "subnet": "10.9.0.0/16", "default_memory_mb": 1024}`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"WARREN_LISTEN": "127.0.0.1:8000", "WARREN_SUBNET": "10.8.0.0/16", "WARREN_LOG_LEVEL": "debug"}
	fl := pflag.NewFlagSet("server", pflag.ContinueOnError)
	f := addServerFlags(fl)
	if err := fl.Parse([]string{"--config", file, "--subnet", "10.7.0.0/16", "--no-build-image", "--runsc", "/opt/runsc"}); err != nil {
		t.Fatal(err)
	}

	cfg, err := serverConfig(fl, *f, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	def := daemon.DefaultConfig()
	tests := []struct {
		name      string
		got, want any
	}{
		{"state_dir from the file", cfg.StateDir, "/srv/file"},
		{"default_memory_mb from the file", cfg.DefaultMemoryMB, int64(1024)},
		{"listen from the environment over the file", cfg.Listen, "127.0.0.1:8000"},
		{"log_level from the environment", cfg.LogLevel, "debug"},
		{"subnet from the flag over both", cfg.Subnet, "10.7.0.0/16"},
		{"build_image off by flag", cfg.BuildImage, false},
		{"runsc by flag", cfg.Runsc, "/opt/runsc"},
		{"cache_dir default", cfg.CacheDir, def.CacheDir},
		{"platform default: an unset flag does not override", cfg.Platform, def.Platform},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, tt.got, tt.want)
		}
	}
}

func TestServerBadConfig(t *testing.T) {
	var stdout, stderr bytes.Buffer
	t.Setenv("WARREN_STATE_DIR", "relative/dir")
	code := run(t.Context(), []string{"server", "--no-build-image"}, nil, &stdout, &stderr)
	if code != exitError || !strings.Contains(stderr.String(), `state_dir "relative/dir" must be an absolute path`) {
		t.Errorf("got exit %d, stderr %q; want 1 and the config error", code, stderr.String())
	}

	stderr.Reset()
	code = run(t.Context(), []string{"server", "--config", filepath.Join(t.TempDir(), "none.json")}, nil, &stdout, &stderr)
	if code != exitError || !strings.Contains(stderr.String(), "config file") {
		t.Errorf("missing config file: got exit %d, stderr %q", code, stderr.String())
	}

	stderr.Reset()
	t.Setenv("WARREN_STATE_DIR", "")
	code = run(t.Context(), []string{"server", "--log-format", "xml"}, nil, &stdout, &stderr)
	if code != exitUsage || !strings.Contains(stderr.String(), `log format "xml": use text or json`) {
		t.Errorf("bad log format: got exit %d, stderr %q", code, stderr.String())
	}
}
