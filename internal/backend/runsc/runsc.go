// Package runsc drives gVisor's runsc command.
//
// Every sandbox is one runsc container whose id is the sandbox id (fixed
// length: runsc matches ids by prefix). All sandboxes of a daemon share one
// runsc root directory. The flags a sandbox was started with are the flags
// it must be restored with, so they are derived from Options alone.
package runsc

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/warrenhq/warren/api"
)

// Version is the gvisor.dev/gvisor module version Warren builds runsc from
// (tools/runsc/go.mod). A module build prints VERSION_MISSING for
// --version, so builds are identified by this and the binary's hash.
const Version = "v0.0.0-20260905035102-160fafc42237"

// Runsc runs runsc commands against one root directory.
type Runsc struct {
	binary   string
	root     string
	platform string
	buildID  string
}

// New checks binary and hashes it.
func New(binary, root, platform string) (*Runsc, error) {
	f, err := os.Open(binary)
	if err != nil {
		return nil, fmt.Errorf("runsc binary %s: %w; build it with scripts/build-runsc.sh or pass --runsc", binary, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, fmt.Errorf("hashing runsc binary %s: %w", binary, err)
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("runsc root %s: %w", root, err)
	}
	if platform == "" {
		platform = "systrap"
	}
	return &Runsc{binary: binary, root: root, platform: platform,
		buildID: Version + "+sha256:" + hex.EncodeToString(h.Sum(nil))[:16]}, nil
}

// BuildID names the runsc build: module version and binary hash. A
// checkpoint image restores only under the build that wrote it.
func (r *Runsc) BuildID() string { return r.buildID }

// Binary is the runsc executable's path.
func (r *Runsc) Binary() string { return r.binary }

// Options are the per-sandbox settings that shape runsc's global flags.
type Options struct {
	// OverlayDir holds the sandbox's writable layer (gVisor's overlay,
	// backed by a file in this directory).
	OverlayDir string
	// OverlaySizeMB bounds the writable layer; 0 leaves runsc's default.
	OverlaySizeMB int64
	// LogPath receives runsc's own log.
	LogPath string
	// PidFile receives the pid of a run or restore while it runs.
	PidFile string
}

func (r *Runsc) globalArgs(o Options) []string {
	overlay := "root:dir=" + o.OverlayDir
	if o.OverlaySizeMB > 0 {
		overlay += fmt.Sprintf(",size=%dm", o.OverlaySizeMB)
	}
	args := []string{"--root", r.root, "--platform", r.platform, "--network", "sandbox", "--overlay2", overlay}
	if o.LogPath != "" {
		args = append(args, "--log", o.LogPath, "--log-format", "text")
	}
	return args
}

// Run creates and starts sandbox id from bundle, detached. stdio receives
// the sandbox's PID 1 standard output and error.
func (r *Runsc) Run(ctx context.Context, id, bundle string, o Options, stdio *os.File) error {
	args := append(r.globalArgs(o), "run", "--bundle", bundle, "--detach", id)
	return r.start(ctx, "run", id, args, o, stdio)
}

// start runs a runsc command that creates a container (run, restore). Its
// pid goes to o.PidFile while it runs, so that after a crash of the daemon
// the next one can wait for it before removing what it made.
func (r *Runsc) start(ctx context.Context, verb, id string, args []string, o Options, stdio *os.File) error {
	cmd := exec.CommandContext(ctx, r.binary, args...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = stdio, stdio
	if stdio == nil {
		cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	}
	// The sandbox outlives this call and the daemon: keep it out of the
	// daemon's process group so a ^C to the daemon doesn't reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("runsc %s %s: %w", verb, id, err)
	}
	if o.PidFile != "" {
		os.WriteFile(o.PidFile, []byte(strconv.Itoa(cmd.Process.Pid)), 0o600)
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("runsc %s %s: %w: %s%s", verb, id, err, strings.TrimSpace(stderr.String()), r.logTail(o.LogPath))
	}
	return nil
}

// WaitPidFile waits (up to timeout) for the runsc command whose pid is in
// path to end, if it still runs: a run or restore a crashed daemon left
// behind finishes making its container, which can then be deleted.
func WaitPidFile(path, id string, timeout time.Duration) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return
	}
	deadline := time.Now().Add(timeout)
	for {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !strings.Contains(string(cmdline), id) || !alive(pid) {
			return
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Restore starts container id from the checkpoint image in imageDir,
// detached. The bundle's spec must match the one the image was taken with
// (same mounts, same overlay medium); sources and the network namespace may
// differ.
func (r *Runsc) Restore(ctx context.Context, id, bundle, imageDir string, o Options, stdio *os.File) error {
	args := append(r.globalArgs(o), "restore", "--bundle", bundle, "--image-path", imageDir, "--detach", id)
	return r.start(ctx, "restore", id, args, o, stdio)
}

// Checkpoint saves container id (memory, processes and its overlay
// writable layer) into imageDir. With leaveRunning the container goes on
// running (the app pauses only while its state is copied); without, it
// ends once saved.
func (r *Runsc) Checkpoint(ctx context.Context, id, imageDir string, o Options, leaveRunning bool) error {
	args := append(r.globalArgs(o), "checkpoint", "--image-path", imageDir, "--compression", "none")
	if leaveRunning {
		args = append(args, "--leave-running")
	}
	args = append(args, id)
	_, err := r.run(ctx, args...)
	return err
}

// Pause stops every task of container id in its Sentry: memory stays
// resident, no CPU is used.
func (r *Runsc) Pause(ctx context.Context, id string) error {
	_, err := r.output(ctx, "pause", id)
	return err
}

// Resume thaws a paused container.
func (r *Runsc) Resume(ctx context.Context, id string) error {
	_, err := r.output(ctx, "resume", id)
	return err
}

// State is what runsc reports of a container.
type State struct {
	ID     string `json:"id"`
	Status string `json:"status"` // "created", "running", "paused", "stopped"
	Pid    int    `json:"pid"`
}

// State reports container id; a container runsc doesn't know is ErrNotFound.
func (r *Runsc) State(ctx context.Context, id string) (State, error) {
	out, err := r.output(ctx, "state", id)
	if err != nil {
		if strings.Contains(err.Error(), "does not exist") || strings.Contains(err.Error(), "not found") {
			return State{}, fmt.Errorf("runsc container %s: %w", id, api.ErrNotFound)
		}
		return State{}, err
	}
	var st State
	if err := json.Unmarshal(out, &st); err != nil {
		return State{}, fmt.Errorf("runsc state %s: %w", id, err)
	}
	// runsc keeps saying "running" after the sandbox's processes were
	// killed from outside (or by the OOM killer): check the sandbox
	// process itself.
	if (st.Status == "running" || st.Status == "paused") && !alive(st.Pid) {
		st.Status = "stopped"
	}
	return st, nil
}

// IDs lists the containers under the root from their state files, without
// asking the sandboxes anything (runsc list and state ask each sandbox
// whether it is alive, and a frozen one never answers).
func (r *Runsc) IDs() ([]string, error) {
	matches, err := filepath.Glob(filepath.Join(r.root, "*_sandbox:*.state"))
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, m := range matches {
		name := strings.TrimSuffix(filepath.Base(m), ".state")
		if _, id, ok := strings.Cut(name, "_sandbox:"); ok {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// Kill sends sig to every process of container id.
func (r *Runsc) Kill(ctx context.Context, id string, sig syscall.Signal) error {
	_, err := r.output(ctx, "kill", "--all", id, fmt.Sprint(int(sig)))
	return err
}

// Delete force-deletes container id (killing it if it runs). A container
// runsc doesn't know is not an error.
func (r *Runsc) Delete(ctx context.Context, id string) error {
	_, err := r.output(ctx, "delete", "--force", id)
	if err != nil && (strings.Contains(err.Error(), "does not exist") || strings.Contains(err.Error(), "not found")) {
		return nil
	}
	return err
}

// commandTimeout bounds the short runsc commands (state, list, kill,
// delete, pause, resume): one that hangs (a sandbox that cannot answer)
// must not hang the daemon.
const commandTimeout = 30 * time.Second

func (r *Runsc) output(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	return r.run(ctx, append([]string{"--root", r.root}, args...)...)
}

// run runs runsc with args as given (they carry --root).
func (r *Runsc) run(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, r.binary, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("runsc %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// logTail returns the last lines of runsc's log that say what failed.
func (r *Runsc) logTail(path string) string {
	if path == "" {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var keep []string
	for _, l := range lines {
		if strings.Contains(l, "rror") || strings.Contains(l, "FATAL") || strings.Contains(l, "failed") {
			keep = append(keep, l)
		}
	}
	if len(keep) > 5 {
		keep = keep[len(keep)-5:]
	}
	if len(keep) == 0 {
		return ""
	}
	return "; runsc log (" + path + "): " + strings.Join(keep, " | ")
}

func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state is the field after the parenthesised command name; a
	// zombie (Z) or dead (X) process no longer runs anything.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}

// Release undoes what runsc leaves on the host under its root once no
// container is left: the bind mount of its shared "null" network namespace
// (runsc's root directory can't be removed while it is mounted).
func (r *Runsc) Release() {
	path := filepath.Join(r.root, "null-netns")
	for syscall.Unmount(path, syscall.MNT_DETACH) == nil {
	}
}

// IsNotFound reports whether err says runsc has no such container.
func IsNotFound(err error) bool { return errors.Is(err, api.ErrNotFound) }
