package sandbox

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/warrenhq/warren/api"
)

func testConfig() Config {
	return Config{
		StateDir:        "/var/lib/warren",
		Node:            "host-1",
		DefaultCPUs:     1,
		DefaultMemoryMB: 512,
		DefaultDiskMB:   4096,
		MaxCPUs:         4,
		MaxMemoryMB:     8192,
		MaxDiskMB:       16384,
		DefaultImage:    "debian:bookworm",
		DefaultIdle:     api.IdlePolicy{TimeoutS: 600, Action: "pause"},
	}
}

// testManager is a Manager with only its config: validate reads nothing
// else. A struct literal, not NewManager, so the test does not change each
// time the Manager gains a dependency.
func testManager() *Manager { return &Manager{cfg: testConfig()} }

func ptr[T any](v T) *T { return &v }

func TestValidateDefaults(t *testing.T) {
	m := testManager()
	sb, err := m.validate(&api.CreateSandboxRequest{})
	if err != nil {
		t.Fatalf("validate({}): %v", err)
	}
	if sb.CPUs != 1 || sb.MemoryMB != 512 || sb.DiskMB != 4096 {
		t.Errorf("resources: got cpus %v memory_mb %v disk_mb %v, want 1, 512, 4096", sb.CPUs, sb.MemoryMB, sb.DiskMB)
	}
	if sb.Idle != (api.IdlePolicy{TimeoutS: 600, Action: "pause"}) {
		t.Errorf("idle: got %+v, want the default", sb.Idle)
	}
	if sb.Network.Egress != "none" {
		t.Errorf("egress: got %v, want none", sb.Network.Egress)
	}
	if sb.OwnerNode != "host-1" {
		t.Errorf("owner node: got %v, want host-1", sb.OwnerNode)
	}
}

func TestValidateKeeps(t *testing.T) {
	m := testManager()
	req := &api.CreateSandboxRequest{
		Name: "worker.1_a-b", CPUs: ptr(0.5), MemoryMB: ptr(int64(64)), DiskMB: ptr(int64(16384)),
		Env:                 map[string]string{"_X": "1", "PATH": "/bin", "EMPTY": ""},
		Metadata:            map[string]string{"owner": "alice", "a.b\"c": strings.Repeat("v", 1024)},
		Network:             &api.Network{Egress: "none"},
		Idle:                &api.IdlePolicy{TimeoutS: 0, Action: "delete"},
		CheckpointIntervalS: ptr(0),
	}
	sb, err := m.validate(req)
	if err != nil {
		t.Fatalf("validate: %v", err)
	}
	if sb.Name != req.Name || sb.CPUs != 0.5 || sb.MemoryMB != 64 || sb.DiskMB != 16384 {
		t.Errorf("got name %v cpus %v memory_mb %v disk_mb %v, want what was asked", sb.Name, sb.CPUs, sb.MemoryMB, sb.DiskMB)
	}
	if sb.Env["PATH"] != "/bin" || sb.Metadata["owner"] != "alice" {
		t.Errorf("env %v, metadata %v: want what was asked", sb.Env, sb.Metadata)
	}
	if sb.Idle != *req.Idle {
		t.Errorf("idle: got %+v, want %+v", sb.Idle, *req.Idle)
	}
	// The bounds themselves are allowed.
	if _, err := m.validate(&api.CreateSandboxRequest{CPUs: ptr(4.0), MemoryMB: ptr(int64(8192)), DiskMB: ptr(int64(64))}); err != nil {
		t.Errorf("at the max: got %v, want nil", err)
	}
	if _, err := m.validate(&api.CreateSandboxRequest{Name: strings.Repeat("a", 63)}); err != nil {
		t.Errorf("63-character name: got %v, want nil", err)
	}
	tooMany := map[string]string{}
	for i := range 64 {
		tooMany[strings.Repeat("k", i+1)] = "v"
	}
	if _, err := m.validate(&api.CreateSandboxRequest{Metadata: tooMany}); err != nil {
		t.Errorf("64 metadata keys: got %v, want nil", err)
	}
}

func TestValidateRejects(t *testing.T) {
	manyKeys := map[string]string{}
	for i := range 65 {
		manyKeys[strings.Repeat("k", i+1)] = "v"
	}
	tests := []struct {
		name  string
		req   api.CreateSandboxRequest
		field string // the message must name it
	}{
		{"cpus 0", api.CreateSandboxRequest{CPUs: ptr(0.0)}, "cpus"},
		{"cpus negative", api.CreateSandboxRequest{CPUs: ptr(-1.0)}, "cpus"},
		{"cpus above max", api.CreateSandboxRequest{CPUs: ptr(4.5)}, "cpus"},
		{"memory below 64", api.CreateSandboxRequest{MemoryMB: ptr(int64(63))}, "memory_mb"},
		{"memory 0", api.CreateSandboxRequest{MemoryMB: ptr(int64(0))}, "memory_mb"},
		{"memory above max", api.CreateSandboxRequest{MemoryMB: ptr(int64(8193))}, "memory_mb"},
		{"disk below 64", api.CreateSandboxRequest{DiskMB: ptr(int64(10))}, "disk_mb"},
		{"disk negative", api.CreateSandboxRequest{DiskMB: ptr(int64(-1))}, "disk_mb"},
		{"disk above max", api.CreateSandboxRequest{DiskMB: ptr(int64(16385))}, "disk_mb"},
		{"env key with =", api.CreateSandboxRequest{Env: map[string]string{"A=B": "1"}}, "env"},
		{"env key starting with a digit", api.CreateSandboxRequest{Env: map[string]string{"1A": "1"}}, "env"},
		{"env key empty", api.CreateSandboxRequest{Env: map[string]string{"": "1"}}, "env"},
		{"env key with a dash", api.CreateSandboxRequest{Env: map[string]string{"MY-VAR": "1"}}, "env"},
		{"env value with NUL", api.CreateSandboxRequest{Env: map[string]string{"A": "x\x00y"}}, "env"},
		{"metadata too many keys", api.CreateSandboxRequest{Metadata: manyKeys}, "metadata"},
		{"metadata empty key", api.CreateSandboxRequest{Metadata: map[string]string{"": "v"}}, "metadata"},
		{"metadata key too long", api.CreateSandboxRequest{Metadata: map[string]string{strings.Repeat("k", 129): "v"}}, "metadata"},
		{"metadata value too long", api.CreateSandboxRequest{Metadata: map[string]string{"k": strings.Repeat("v", 1025)}}, "metadata"},
		{"name with a space", api.CreateSandboxRequest{Name: "my box"}, "name"},
		{"name starting with a dash", api.CreateSandboxRequest{Name: "-box"}, "name"},
		{"name with a slash", api.CreateSandboxRequest{Name: "a/b"}, "name"},
		{"name too long", api.CreateSandboxRequest{Name: strings.Repeat("a", 64)}, "name"},
		{"idle action", api.CreateSandboxRequest{Idle: &api.IdlePolicy{TimeoutS: 60, Action: "stop"}}, "idle.action"},
		{"idle action empty", api.CreateSandboxRequest{Idle: &api.IdlePolicy{TimeoutS: 60}}, "idle.action"},
		{"idle timeout negative", api.CreateSandboxRequest{Idle: &api.IdlePolicy{TimeoutS: -1, Action: "pause"}}, "idle.timeout_s"},
		{"volume path relative", api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Volume: "data", Path: "data"}}}, "volumes[0].path"},
		{"egress word", api.CreateSandboxRequest{Network: &api.Network{Egress: "closed"}}, "egress"},
		{"egress bad cidr", api.CreateSandboxRequest{Network: &api.Network{Egress: []any{"10.0.0.0/33"}}}, "egress"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := testManager()
			_, err := m.validate(&tt.req)
			if !errors.Is(err, api.ErrInvalid) {
				t.Fatalf("got %v, want %v", err, api.ErrInvalid)
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Errorf("got %q, want a message naming %s", err, tt.field)
			}
		})
	}
}

func TestNewID(t *testing.T) {
	pattern := regexp.MustCompile(`^sb-[a-z2-7]{12}$`)
	seen := make(map[string]bool, 10000)
	for range 10000 {
		id := NewID()
		if len(id) != IDLen || IDLen != 15 {
			t.Fatalf("NewID() = %q: length got %v, want %v", id, len(id), 15)
		}
		if !pattern.MatchString(id) {
			t.Fatalf("NewID() = %q: want a match of %v", id, pattern)
		}
		if !ValidID(id) {
			t.Fatalf("ValidID(%q): got false, want true", id)
		}
		if seen[id] {
			t.Fatalf("NewID() = %q twice", id)
		}
		seen[id] = true
	}
}

func TestValidID(t *testing.T) {
	tests := []struct {
		id   string
		want bool
	}{
		{"sb-abcdefghijkl", true},
		{"sb-234567abcdef", true},
		{"", false},
		{"sb-", false},
		{"sb-abcdefghijk", false},   // short
		{"sb-abcdefghijklm", false}, // long: would be a prefix match for runsc
		{"sb-ABCDEFGHIJKL", false},
		{"sb-abcdefghijk1", false}, // 1 is not base32
		{"sb-abcdefghijk8", false},
		{"xx-abcdefghijkl", false},
		{"sb-abcdefghijkl\n", false},
		{"sb-abc/../ghijk", false},
	}
	for _, tt := range tests {
		if got := ValidID(tt.id); got != tt.want {
			t.Errorf("ValidID(%q): got %v, want %v", tt.id, got, tt.want)
		}
	}
}
