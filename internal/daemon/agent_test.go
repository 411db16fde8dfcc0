package daemon

import (
	"os"
	"path/filepath"
	"testing"
)

func TestInstallAgentKeepsEachBuild(t *testing.T) {
	src := filepath.Join(t.TempDir(), "warren-agent")
	dir := filepath.Join(t.TempDir(), "agents")
	write := func(body string) {
		if err := os.WriteFile(src, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	write("build one")
	first, err := installAgent(src, dir)
	if err != nil {
		t.Fatal(err)
	}
	again, err := installAgent(src, dir)
	if err != nil {
		t.Fatal(err)
	}
	if again != first {
		t.Errorf("same binary installed twice: %s then %s, want one directory", first, again)
	}

	write("build two")
	second, err := installAgent(src, dir)
	if err != nil {
		t.Fatal(err)
	}
	if second == first {
		t.Fatalf("a different binary went into the same directory %s", first)
	}
	for d, want := range map[string]string{first: "build one", second: "build two"} {
		b, err := os.ReadFile(filepath.Join(d, "warren-agent"))
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != want {
			t.Errorf("%s holds %q, want %q", d, b, want)
		}
		fi, err := os.Stat(filepath.Join(d, "warren-agent"))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o111 == 0 {
			t.Errorf("%s/warren-agent is not executable: %v", d, fi.Mode())
		}
	}
}

func TestInstallAgentSweepsCutOffInstalls(t *testing.T) {
	src := filepath.Join(t.TempDir(), "warren-agent")
	if err := os.WriteFile(src, []byte("agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	stale := filepath.Join(dir, ".install-123")
	if err := os.MkdirAll(stale, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := installAgent(src, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale %s still there (err %v)", stale, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("%s holds %d entries, want the one install", dir, len(entries))
	}
}

func TestInstallAgentMissingBinary(t *testing.T) {
	_, err := installAgent(filepath.Join(t.TempDir(), "nope"), t.TempDir())
	if err == nil {
		t.Fatal("installing a missing agent binary succeeded")
	}
}
