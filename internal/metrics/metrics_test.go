package metrics

import (
	"errors"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/sandbox"
	"github.com/warrenhq/warren/internal/store"
)

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestMetrics(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(t.Context(), filepath.Join(dir, "warren.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	st.EnsureTeam(t.Context(), "team-a", "a")
	for i, s := range []struct {
		state  string
		stored bool
		pool   string
	}{{api.StateRunning, false, ""}, {api.StateRunning, false, ""}, {api.StatePaused, false, ""}, {api.StatePaused, true, ""}, {api.StatePaused, false, "tpl"}} {
		sb := &store.Sandbox{ID: "sb-" + strings.Repeat(string(rune('a'+i)), 12), TeamID: "team-a", State: s.state, Stored: s.stored, Pool: s.pool,
			CPUs: 1, MemoryMB: 256, DiskMB: 256}
		if err := st.CreateSandbox(t.Context(), sb); err != nil {
			t.Fatal(err)
		}
	}
	m := New(st, dir)
	ctx := t.Context()
	m.SandboxEvent(ctx, sandbox.Event{Kind: api.EventCreated, TeamID: "team-a", SandboxID: "sb-1", State: api.StateRunning, Duration: 300 * time.Millisecond})
	m.SandboxEvent(ctx, sandbox.Event{Kind: api.EventPaused, TeamID: "team-a", SandboxID: "sb-1", State: api.StatePaused, Duration: 15 * time.Millisecond})
	m.SandboxEvent(ctx, sandbox.Event{Kind: api.EventIdlePaused, TeamID: "team-a", SandboxID: "sb-1", State: api.StatePaused, Duration: 15 * time.Millisecond})
	m.SandboxEvent(ctx, sandbox.Event{Kind: api.EventError, Op: "resume", TeamID: "team-a", SandboxID: "sb-1", Code: api.CodeInternal})
	m.SandboxEvent(ctx, sandbox.Event{Kind: api.EventQuotaRefused, Op: "create", TeamID: "team-a", Code: api.CodeQuota})
	m.SandboxEvent(ctx, sandbox.Event{Kind: api.EventCreated, TeamID: "team-a", Pool: "tpl", Duration: time.Second}) // a pool fill: not counted
	out := scrape(t, m)
	for _, want := range []string{
		`warren_sandboxes{state="running"} 2`,
		`warren_sandboxes{state="paused"} 1`,
		`warren_sandboxes{state="stored"} 1`,
		`warren_sandboxes{state="pooled"} 1`,
		`warren_sandboxes{state="error"} 0`,
		`warren_operation_duration_seconds_count{op="create"} 1`,
		`warren_operation_duration_seconds_count{op="pause"} 2`,
		`warren_operation_errors_total{code="internal",op="resume"} 1`,
		`warren_operation_errors_total{code="quota",op="create"} 1`,
		`warren_events_total{kind="created"} 1`,
		`warren_host_memory_available_bytes `,
		`warren_host_disk_available_bytes{path="` + dir + `"}`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if t.Failed() {
		t.Logf("scraped:\n%s", out)
	}
}

func TestReadCgroup(t *testing.T) {
	old := CgroupRoot
	defer func() { CgroupRoot = old }()
	write := func(p, s string) {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// v1
	CgroupRoot = t.TempDir()
	write(filepath.Join(CgroupRoot, "cpuacct/warren/rt-1/cpuacct.usage"), "2500000000\n")
	write(filepath.Join(CgroupRoot, "memory/warren/rt-1/memory.usage_in_bytes"), "104857600\n")
	write(filepath.Join(CgroupRoot, "memory/warren/rt-1/memory.limit_in_bytes"), "536870912\n")
	st, err := ReadCgroup("/warren/rt-1")
	if err != nil || st.CPUSeconds != 2.5 || st.MemoryBytes != 100<<20 || st.MemoryLimitBytes != 512<<20 {
		t.Errorf("v1: got %+v, %v", st, err)
	}
	write(filepath.Join(CgroupRoot, "memory/warren/rt-1/memory.limit_in_bytes"), "9223372036854771712\n")
	if st, _ := ReadCgroup("/warren/rt-1"); st.MemoryLimitBytes != 0 {
		t.Errorf("v1 unlimited: got limit %d, want 0", st.MemoryLimitBytes)
	}
	// v2
	CgroupRoot = t.TempDir()
	write(filepath.Join(CgroupRoot, "warren/rt-2/cpu.stat"), "usage_usec 1500000\nuser_usec 1000000\n")
	write(filepath.Join(CgroupRoot, "warren/rt-2/memory.current"), "1048576\n")
	write(filepath.Join(CgroupRoot, "warren/rt-2/memory.max"), "max\n")
	st, err = ReadCgroup("/warren/rt-2")
	if err != nil || st.CPUSeconds != 1.5 || st.MemoryBytes != 1<<20 || st.MemoryLimitBytes != 0 {
		t.Errorf("v2: got %+v, %v", st, err)
	}
	if _, err := ReadCgroup("/warren/none"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("missing: got %v, want not found", err)
	}
}
