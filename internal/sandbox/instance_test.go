package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLogTail(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.log")
	if got := logTail(path, 64); !strings.HasPrefix(got, "(no log:") {
		t.Errorf("missing log: got %q", got)
	}
	os.WriteFile(path, nil, 0o600)
	if got := logTail(path, 64); got != "(the log is empty)" {
		t.Errorf("empty log: got %q", got)
	}
	os.WriteFile(path, []byte("short\n"), 0o600)
	if got := logTail(path, 64); got != "short" {
		t.Errorf("short log: got %q", got)
	}
	long := strings.Repeat("early line\n", 20) + "fatal: morestack on gsignal\n"
	os.WriteFile(path, []byte(long), 0o600)
	got := logTail(path, 40)
	if !strings.HasSuffix(got, "fatal: morestack on gsignal") || len(got) > 40 {
		t.Errorf("long log: got %q, want at most 40 bytes ending in the last line", got)
	}
	if strings.HasPrefix(got, "line") || strings.HasPrefix(got, "ine") {
		t.Errorf("long log: got %q, want it to start at a line", got)
	}
}
