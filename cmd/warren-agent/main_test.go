package main

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/agent"
)

// buildAgent builds warren-agent as it ships: CGO_ENABLED=0.
func buildAgent(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "warren-agent")
	cmd := exec.Command("go", "build", "-ldflags", "-X main.version=v0.0.0-test", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func TestBinaryIsStatic(t *testing.T) {
	bin := buildAgent(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("got program header %v, want none: the agent must be static", p.Type)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("got shared libraries %v, want none", libs)
	}
}

// TestBinary runs the built agent: --version, serving a command, and a
// clean exit on SIGTERM.
func TestBinary(t *testing.T) {
	bin := buildAgent(t)

	out, err := exec.Command(bin, "--version").Output()
	if err != nil || strings.TrimSpace(string(out)) != "warren-agent v0.0.0-test" {
		t.Errorf("--version: got %q, %v, want %q", out, err, "warren-agent v0.0.0-test")
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var logs bytes.Buffer
	cmd := exec.Command(bin, "--listen", addr)
	cmd.Env = []string{} // the agent supplies PATH and HOME
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()

	c := agent.NewClient(addr)
	defer c.CloseIdle()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx, 10*time.Millisecond); err != nil {
		t.Fatalf("WaitReady: %v\nlogs:\n%s", err, logs.String())
	}
	h, err := c.Health(ctx)
	if err != nil || h.Status != "ok" || h.Version != "v0.0.0-test" || h.PID != cmd.Process.Pid {
		t.Errorf("Health: got %+v, %v, want ok v0.0.0-test pid %d", h, err, cmd.Process.Pid)
	}
	res, err := c.Exec(ctx, api.ExecRequest{Command: "echo $HOME; command -v sh"})
	if err != nil || res.Stdout != "/root\n/usr/bin/sh\n" && res.Stdout != "/root\n/bin/sh\n" {
		t.Errorf("Exec: got %+v, %v, want HOME=/root and sh found on the default PATH", res, err)
	}

	c.CloseIdle()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) || err != nil {
			t.Errorf("exit after SIGTERM: got %v, want status 0\nlogs:\n%s", err, logs.String())
		}
	case <-time.After(10 * time.Second):
		t.Errorf("agent still running 10s after SIGTERM")
	}
}
