package agent

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warrenhq/warren/api"
)

// startAgent serves an agent on 127.0.0.1:0 for the test and returns a
// client of it.
func startAgent(t testing.TB, cfg Config) *Client {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Version == "" {
		cfg.Version = "test"
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 2 * time.Second
	}
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx, ln) }()
	c := NewClient(ln.Addr().String())
	t.Cleanup(func() {
		c.CloseIdle()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: got %v, want nil", err)
		}
	})
	return c
}

// procState returns the state letter ("R", "S", "Z", ...) and parent pid of
// a process, ok false when it is gone.
func procState(pid int) (state string, ppid int, ok bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0, false
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 2 {
		return "", 0, false
	}
	ppid, _ = strconv.Atoi(fields[1])
	return fields[0], ppid, true
}

// waitGone waits until pid no longer exists (killed and reaped) and says
// whether it went within d.
func waitGone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if _, _, ok := procState(pid); !ok {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// zombieChildren lists the zombie children of this process.
func zombieChildren() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if state, ppid, ok := procState(pid); ok && ppid == os.Getpid() && state == "Z" {
			out = append(out, pid)
		}
	}
	return out
}

// peakHeap runs f and returns how far the heap grew above where it was
// before, sampled every few milliseconds.
func peakHeap(f func()) uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	stop, done := make(chan struct{}), make(chan uint64)
	go func() {
		var peak uint64
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
			select {
			case <-stop:
				done <- peak
				return
			case <-t.C:
			}
		}
	}()
	f()
	close(stop)
	peak := <-done
	if peak < base {
		return 0
	}
	return peak - base
}

func TestHealth(t *testing.T) {
	c := startAgent(t, Config{Version: "v9"})
	h, err := c.Health(t.Context())
	if err != nil {
		t.Fatalf("Health: %v", err)
	}
	want := api.AgentHealth{Status: "ok", Version: "v9", PID: os.Getpid()}
	if h != want {
		t.Errorf("got %+v, want %+v", h, want)
	}
}

func TestWaitReady(t *testing.T) {
	// Reserve a port, free it, and start the agent there only later: the
	// first polls are refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := NewClient(addr)
	defer c.CloseIdle()

	ready := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		ready <- c.WaitReady(ctx, 5*time.Millisecond)
	}()
	time.Sleep(100 * time.Millisecond)
	a, err := New(Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("port %s taken again meanwhile: %v", addr, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, ln) }()
	if err := <-ready; err != nil {
		t.Errorf("WaitReady: got %v, want nil", err)
	}
	cancel()
	<-served

	// Nobody listening: WaitReady gives up when its context ends.
	ctx, cancel = context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	err = c.WaitReady(ctx, 5*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitReady with no agent: got %v, want %v", err, context.DeadlineExceeded)
	}
}

func TestUnreachableIsUnavailable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = NewClient(addr).Health(t.Context())
	if !errors.Is(err, api.ErrUnavailable) {
		t.Errorf("got %v, want %v", err, api.ErrUnavailable)
	}
}

func TestRawErrors(t *testing.T) {
	c := startAgent(t, Config{})
	tests := []struct {
		name, method, path, body string
		wantStatus               int
		wantCode                 string
	}{
		{"bad JSON", "POST", "/exec", "{", 400, api.CodeInvalid},
		{"wrong JSON type", "POST", "/exec", `{"cmd":"echo"}`, 400, api.CodeInvalid},
		{"unknown endpoint", "GET", "/nope", "", 404, api.CodeNotFound},
		{"wrong method", "GET", "/exec", "", 404, api.CodeNotFound},
		{"files without path", "GET", "/files", "", 400, api.CodeInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), tt.method, c.BaseURL()+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := c.hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var eb api.ErrorBody
			if err := json.NewDecoder(resp.Body).Decode(&eb); err != nil {
				t.Fatalf("decoding error body: %v", err)
			}
			if resp.StatusCode != tt.wantStatus || eb.Error.Code != tt.wantCode || eb.Error.Message == "" {
				t.Errorf("got %d %+v, want %d code %q with a message", resp.StatusCode, eb.Error, tt.wantStatus, tt.wantCode)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type: got %q, want %q", ct, "application/json")
			}
		})
	}
}

func TestDefaultEnv(t *testing.T) {
	tests := []struct {
		in, want []string
	}{
		{nil, []string{"PATH=" + defaultPath, "HOME=/root"}},
		{[]string{"PATH=/x", "A=1"}, []string{"PATH=/x", "A=1", "HOME=/root"}},
		{[]string{"HOME=/h"}, []string{"HOME=/h", "PATH=" + defaultPath}},
	}
	for _, tt := range tests {
		got := DefaultEnv(tt.in)
		if strings.Join(got, ";") != strings.Join(tt.want, ";") {
			t.Errorf("DefaultEnv(%q): got %q, want %q", tt.in, got, tt.want)
		}
	}
}
