package sandbox

import (
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/warrenhq/warren/api"
)

// AgentDir is where the agent's host directory is mounted inside every
// sandbox; the agent binary is AgentDir/warren-agent.
const AgentDir = "/.warren"

// AgentBinary is the agent's path inside a sandbox.
const AgentBinary = AgentDir + "/warren-agent"

// SpecInput is what an OCI spec is made from.
type SpecInput struct {
	ID        string
	Hostname  string
	Rootfs    string // the image's read-only unpacked tree
	AgentDir  string // host directory holding warren-agent
	NetnsPath string
	Cwd       string
	// Env is the sandbox's environment, image defaults already merged.
	Env      map[string]string
	CPUs     float64
	MemoryMB int64
	// CgroupParent is the cgroup all sandboxes sit under ("/warren").
	CgroupParent string
}

// cpuPeriod is the CFS period used for CPU limits, in microseconds.
const cpuPeriod = 100000

// pidsLimit caps the processes of one sandbox (a fork bomb stays inside).
const pidsLimit = 16384

// Spec returns the OCI runtime spec of a sandbox: warren-agent as PID 1,
// the image as the root (made writable by runsc's overlay), the sandbox's
// network namespace and its cgroup limits.
func Spec(in SpecInput) *specs.Spec {
	memLimit := in.MemoryMB << 20
	// Rounded: 0.29 * 100000 is 28999.999... in binary.
	quota := int64(math.Round(in.CPUs * cpuPeriod))
	period := uint64(cpuPeriod)
	pids := int64(pidsLimit)
	caps := defaultCapabilities()
	return &specs.Spec{
		Version: "1.0.2",
		Process: &specs.Process{
			User: specs.User{UID: 0, GID: 0},
			Args: []string{AgentBinary, "--listen", fmt.Sprintf(":%d", api.AgentPort)},
			Env:  envList(in.Env),
			Cwd:  in.Cwd,
			Capabilities: &specs.LinuxCapabilities{
				Bounding: caps, Effective: caps, Permitted: caps,
			},
			Rlimits: []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 1 << 20, Soft: 1 << 20}},
		},
		Root:     &specs.Root{Path: in.Rootfs},
		Hostname: in.Hostname,
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: AgentDir, Type: "bind", Source: in.AgentDir, Options: []string{"rbind", "ro"}},
		},
		Linux: &specs.Linux{
			CgroupsPath: filepath.Join(in.CgroupParent, in.ID),
			Resources: &specs.LinuxResources{
				Memory: &specs.LinuxMemory{Limit: &memLimit},
				CPU:    &specs.LinuxCPU{Quota: &quota, Period: &period},
				Pids:   &specs.LinuxPids{Limit: pids},
			},
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace},
				{Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace},
				{Type: specs.MountNamespace},
				{Type: specs.NetworkNamespace, Path: in.NetnsPath},
			},
		},
	}
}

func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// defaultCapabilities are Docker's defaults: root inside the sandbox can
// install packages and bind low ports; the sandbox's kernel is gVisor's.
func defaultCapabilities() []string {
	return []string{
		"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
		"CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
		"CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
	}
}

// BaseEnv merges the environment of a sandbox: Warren's defaults, then the
// image's, then the request's.
func BaseEnv(imageEnv []string, requested map[string]string) map[string]string {
	env := map[string]string{
		"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME": "/root",
		"LANG": "C.UTF-8",
		"TERM": "xterm-256color",
	}
	for _, kv := range imageEnv {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			env[k] = v
		}
	}
	for k, v := range requested {
		env[k] = v
	}
	return env
}
