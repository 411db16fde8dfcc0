package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestPythonSDK installs the Python SDK (sdk/python) into a fresh virtualenv,
// as a user would with pip, and runs its unittest suite against a real
// server: every call of the SDK, end to end.
func TestPythonSDK(t *testing.T) {
	RequiresRoot(t)
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: the Python SDK's tests need it")
	}
	s := StartServer(t)
	sdk := filepath.Join(repoRoot, "sdk", "python")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	// pip install ./sdk/python, offline: the SDK's build backend is in its
	// tree and needs nothing from an index.
	venv := t.TempDir()
	run := func(name string, args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Env = append(os.Environ(), "PIP_NO_INDEX=1", "PIP_DISABLE_PIP_VERSION_CHECK=1", "PYTHONDONTWRITEBYTECODE=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	run(python, "-m", "venv", venv)
	vpython := filepath.Join(venv, "bin", "python")
	run(vpython, "-m", "pip", "install", "--quiet", sdk)

	key, err := os.ReadFile(filepath.Join(s.StateDir, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, vpython, "-m", "unittest", "discover", "-v", "-s", filepath.Join(sdk, "tests"))
	// Not in sdk/python: the package must come from the virtualenv.
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(),
		"WARREN_API_URL=http://"+s.Addr,
		"WARREN_API_KEY="+strings.TrimSpace(string(key)),
		"WARREN_TEST_REQUIRE_SERVER=1",
		"PYTHONDONTWRITEBYTECODE=1",
		"PYTHONPATH=",
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python -m unittest: %v\n%s", err, out)
	}
	ran := regexp.MustCompile(`(?m)^Ran (\d+) tests? in`).FindSubmatch(out)
	if ran == nil || string(ran[1]) == "0" {
		t.Fatalf("unittest ran no tests:\n%s", out)
	}
	if !strings.Contains(string(out), "test_sandbox.TestLifecycle") {
		t.Fatalf("the end-to-end tests (test_sandbox.py) did not run:\n%s", out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "... skipped") {
			t.Log(line)
		}
	}
	t.Logf("%s tests of the Python SDK passed", ran[1])
}
