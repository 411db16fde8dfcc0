package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/agent"
	"github.com/warrenhq/warren/internal/backend/runsc"
	"github.com/warrenhq/warren/internal/network"
	"github.com/warrenhq/warren/internal/snapshot"
)

// instance is one runtime incarnation of a sandbox: a runsc container with
// its own network namespace, address and writable-layer directory. A
// sandbox keeps its id for life; a restore (resume from disk, revert)
// starts a new instance beside the old one, then swaps.
type instance struct {
	id       string // runsc container id, "rt-" + 12 characters
	sandbox  string
	netIndex int
	link     network.Link
	dir      string // StateDir/sandboxes/<sandbox>/<instance>
	agent    *agent.Client
}

// NewRuntimeID returns a fresh runtime instance id: the same length as a
// sandbox id, so no runsc container id is a prefix of another.
func NewRuntimeID() string { return "rt-" + NewID()[3:] }

func (m *Manager) instanceFor(sandboxID, runtimeID string, netIndex int) (*instance, error) {
	addrs, err := m.pool.Addrs(netIndex)
	if err != nil {
		return nil, err
	}
	return &instance{
		id: runtimeID, sandbox: sandboxID, netIndex: netIndex,
		link: network.Link{Netns: "warren-" + runtimeID, Veth: network.VethPrefix + runtimeID[3:], Addrs: addrs},
		dir:  filepath.Join(m.dir(sandboxID), runtimeID),
	}, nil
}

func (in *instance) options(diskMB int64) runsc.Options {
	return runsc.Options{
		OverlayDir:    filepath.Join(in.dir, "overlay"),
		OverlaySizeMB: diskMB,
		LogPath:       filepath.Join(in.dir, "runsc.log"),
		PidFile:       filepath.Join(in.dir, "runsc.pid"),
	}
}

func (in *instance) bundle() string { return filepath.Join(in.dir, "bundle") }

func (in *instance) agentAddr() string {
	return fmt.Sprintf("%s:%d", in.link.Addrs.Sandbox, api.AgentPort)
}

// startOpts say how a new instance starts: from the spec (a fresh boot) or
// from a checkpoint image.
type startOpts struct {
	spec     *specs.Spec // for a fresh boot
	imageDir string      // for a restore: a snapshot.Store image directory
	diskMB   int64
}

// startInstance leases an address, makes the network namespace, writes the
// bundle and starts runsc (run, or restore from an image), then waits for
// the agent. On failure it removes everything it made.
func (m *Manager) startInstance(ctx context.Context, sandboxID string, o startOpts) (in *instance, err error) {
	ph := newPhases()
	defer func() {
		if err == nil {
			m.log.Debug("instance started", append([]any{"sandbox_id", sandboxID, "runtime_id", in.id,
				"restore", o.imageDir != ""}, ph.attrs()...)...)
		}
	}()
	rid := NewRuntimeID()
	idx, err := m.store.LeaseNetIndex(ctx, rid, sandboxID)
	if err != nil {
		return nil, err
	}
	in, err = m.instanceFor(sandboxID, rid, idx)
	if err != nil {
		m.store.ReleaseNetIndex(context.WithoutCancel(ctx), rid)
		return nil, err
	}
	defer func() {
		if err != nil {
			if cerr := m.stopInstance(context.WithoutCancel(ctx), in); cerr != nil {
				err = errors.Join(err, fmt.Errorf("cleaning up: %w", cerr))
			}
		}
	}()
	ph.mark("lease")
	opts := in.options(o.diskMB)
	if err := os.MkdirAll(opts.OverlayDir, 0o700); err != nil {
		return in, fmt.Errorf("sandbox %s: making its directory: %w", sandboxID, err)
	}
	if err := network.Setup(in.link); err != nil {
		return in, fmt.Errorf("sandbox %s: %w", sandboxID, err)
	}
	ph.mark("netns")
	spec := o.spec
	if o.imageDir != "" {
		spec, err = readSpec(filepath.Join(o.imageDir, snapshot.SpecName))
		if err != nil {
			return in, fmt.Errorf("sandbox %s: reading the spec of image %s: %w", sandboxID, filepath.Base(o.imageDir), err)
		}
	}
	retarget(spec, in, m.cfg.CgroupParent)
	if err := m.attachInstance(ctx, sandboxID, spec, o.imageDir == "", in); err != nil {
		return in, err
	}
	// A restore runs unthrottled (see cpu.go); the bundle keeps the whole
	// spec once the limit is in place, since snapshots copy it.
	limit, bootSpec := cpuLimitOf(spec), spec
	if o.imageDir != "" {
		bootSpec = withoutCPUQuota(spec)
	}
	if err := writeSpec(in.bundle(), bootSpec); err != nil {
		return in, fmt.Errorf("sandbox %s: writing its OCI bundle: %w", sandboxID, err)
	}
	agentLog, err := os.OpenFile(filepath.Join(in.dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return in, err
	}
	defer agentLog.Close()
	ph.mark("bundle")
	if o.imageDir == "" {
		err = m.rt.Run(ctx, rid, in.bundle(), opts, agentLog)
	} else {
		err = m.rt.Restore(ctx, rid, in.bundle(), o.imageDir, opts, agentLog)
	}
	if err != nil {
		return in, fmt.Errorf("sandbox %s: starting gVisor: %w", sandboxID, err)
	}
	ph.mark("runsc")
	if err := setCPULimit(m.cgroupOf(in), limit); err != nil {
		return in, fmt.Errorf("sandbox %s: %w", sandboxID, err)
	}
	if bootSpec != spec {
		if err := writeSpec(in.bundle(), spec); err != nil {
			return in, fmt.Errorf("sandbox %s: writing its OCI bundle: %w", sandboxID, err)
		}
	}
	in.agent = agent.NewClient(in.agentAddr())
	rctx, cancel := context.WithTimeout(ctx, m.cfg.ReadyTimeout)
	defer cancel()
	if err := in.agent.WaitReady(rctx, 2*time.Millisecond); err != nil {
		// The instance's directory goes with the cleanup: quote its log.
		return in, fmt.Errorf("sandbox %s: its agent did not answer within %s: %w; the end of its log (agent and gVisor):\n%s",
			sandboxID, m.cfg.ReadyTimeout, err, logTail(filepath.Join(in.dir, "agent.log"), 2048))
	}
	ph.mark("agent")
	return in, nil
}

// logTail returns the last n bytes of the file at path, from a line start
// where it can, or a note saying why there is nothing to show.
func logTail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	off := max(fi.Size()-n, 0)
	b := make([]byte, fi.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Sprintf("(reading the log: %v)", err)
	}
	if off > 0 {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return "(the log is empty)"
	}
	return string(bytes.TrimRight(b, "\n"))
}

// retarget points a spec at instance in: its network namespace and cgroup.
// Everything else stays as the image was taken with (runsc restores only
// under the same mounts and arguments).
func retarget(spec *specs.Spec, in *instance, cgroupParent string) {
	for i, ns := range spec.Linux.Namespaces {
		if ns.Type == specs.NetworkNamespace {
			spec.Linux.Namespaces[i].Path = in.link.NetnsPath()
		}
	}
	spec.Linux.CgroupsPath = filepath.Join(cgroupParent, in.id)
}

// stopInstance ends an instance and removes every trace of it: its runsc
// container and processes, network namespace and veth, address lease and
// directory. What is already gone is fine.
func (m *Manager) stopInstance(ctx context.Context, in *instance) error {
	if in.agent != nil {
		in.agent.CloseIdle()
	}
	// A run or restore that a crashed daemon left running finishes first;
	// a frozen sandbox is thawed, or its processes could not die.
	runsc.WaitPidFile(filepath.Join(in.dir, "runsc.pid"), in.id, time.Minute)
	m.unfreeze(ctx, in)
	var errs []error
	if err := m.rt.Delete(ctx, in.id); err != nil {
		errs = append(errs, err)
	}
	m.detachInstance(in)
	if err := network.Teardown(in.link); err != nil {
		errs = append(errs, err)
	}
	removeCgroups(filepath.Join(m.cfg.CgroupParent, in.id))
	if err := os.RemoveAll(in.dir); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		if err := m.store.ReleaseNetIndex(ctx, in.id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeCgroups removes the (empty) cgroup directories of path under
// every hierarchy: runsc removes them when it deletes a container it
// watched end, but not those of a sandbox killed while no runsc was there.
func removeCgroups(path string) {
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", path))
	if d := filepath.Join("/sys/fs/cgroup", path); dirExists(d) {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		os.Remove(d)
	}
}

func dirExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func readSpec(path string) (*specs.Spec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s specs.Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, err
	}
	if s.Linux == nil {
		return nil, fmt.Errorf("spec %s has no linux section", path)
	}
	return &s, nil
}
