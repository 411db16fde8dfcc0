package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// A sandbox's CPU limit is a CFS quota per period, which runsc writes into
// the sandbox's cgroup from the spec when it starts the sandbox.
//
// Two operations run with the quota lifted, because they are gVisor's own
// work done on several threads while none of the sandbox's code runs, and
// under a one-CPU quota they throttle themselves:
//
//   - A restore loads the image's memory into the Sentry before the
//     sandbox's processes run again; beside a 256 MB load, runsc's seccomp
//     compile (20 ms alone) took 300 ms. The restore starts with no quota and
//     Warren writes it the moment runsc returns, before the agent is asked
//     anything: resume from stored at 256 MB, ~490 -> ~425 ms.
//   - A checkpoint stops the sandbox's kernel while it writes memory out;
//     the quota is lifted for the runsc checkpoint call and set again right
//     after: live snapshot app pause at 256 MB, ~137 -> ~118 ms.
//
// Both measured A/B with make bench's rows (docs/benchmarks.md). A server
// that dies in between leaves a sandbox unthrottled; Recover sets the limit
// of every sandbox it adopts from its bundle's spec.
//
// (A CFS burst equal to the quota was tried for short commands, which a
// one-CPU quota throttles while the Sentry runs on two cores: round trips
// did not change, measured A/B on one sandbox, so it is not set.)

// cpuLimit is a CFS quota and period in microseconds; a zero quota is no
// limit.
type cpuLimit struct {
	quota  int64
	period uint64
}

// cpuLimitOf reads the limit a spec asks for.
func cpuLimitOf(spec *specs.Spec) cpuLimit {
	if spec.Linux == nil || spec.Linux.Resources == nil || spec.Linux.Resources.CPU == nil {
		return cpuLimit{}
	}
	cpu := spec.Linux.Resources.CPU
	if cpu.Quota == nil || *cpu.Quota <= 0 {
		return cpuLimit{}
	}
	l := cpuLimit{quota: *cpu.Quota, period: cpuPeriod}
	if cpu.Period != nil && *cpu.Period > 0 {
		l.period = *cpu.Period
	}
	return l
}

// withoutCPUQuota returns a copy of spec that asks for no CPU quota; the
// copy shares all but the structs on the way to the quota.
func withoutCPUQuota(spec *specs.Spec) *specs.Spec {
	if cpuLimitOf(spec).quota == 0 {
		return spec
	}
	s := *spec
	linux := *spec.Linux
	res := *spec.Linux.Resources
	cpu := *spec.Linux.Resources.CPU
	cpu.Quota, cpu.Period = nil, nil
	res.CPU = &cpu
	linux.Resources = &res
	s.Linux = &linux
	return &s
}

// cpuController finds the CPU controller's directory of the cgroup at rel
// (relative to the cgroup root): cgroup v1's cpu hierarchy, else cgroup v2.
func cpuController(rel string) (dir string, v2 bool, err error) {
	if dir := filepath.Join("/sys/fs/cgroup/cpu", rel); fileExists(filepath.Join(dir, "cpu.cfs_quota_us")) {
		return dir, false, nil
	}
	if dir := filepath.Join("/sys/fs/cgroup", rel); fileExists(filepath.Join(dir, "cpu.max")) {
		return dir, true, nil
	}
	return "", false, fmt.Errorf("no CPU controller for cgroup %s (looked under /sys/fs/cgroup/cpu and /sys/fs/cgroup)", rel)
}

// setCPULimit writes l into the cgroup at rel.
func setCPULimit(rel string, l cpuLimit) error {
	if l.quota == 0 {
		return nil
	}
	dir, v2, err := cpuController(rel)
	switch {
	case err != nil:
		return fmt.Errorf("setting the CPU limit: %w", err)
	case v2:
		return writeCgroup(dir, [][2]string{{"cpu.max", fmt.Sprintf("%d %d", l.quota, l.period)}})
	}
	return writeCgroup(dir, [][2]string{
		{"cpu.cfs_period_us", strconv.FormatUint(l.period, 10)},
		{"cpu.cfs_quota_us", strconv.FormatInt(l.quota, 10)},
	})
}

// liftCPULimit removes the CPU quota of the cgroup at rel.
func liftCPULimit(rel string) error {
	dir, v2, err := cpuController(rel)
	switch {
	case err != nil:
		return fmt.Errorf("lifting the CPU limit: %w", err)
	case v2:
		return writeCgroup(dir, [][2]string{{"cpu.max", "max"}})
	}
	return writeCgroup(dir, [][2]string{{"cpu.cfs_quota_us", "-1"}})
}

// cgroupOf is the cgroup of instance in, relative to the cgroup root.
func (m *Manager) cgroupOf(in *instance) string { return filepath.Join(m.cfg.CgroupParent, in.id) }

// instanceCPULimit is the limit the bundle's spec of in asks for.
func instanceCPULimit(in *instance) (cpuLimit, error) {
	spec, err := readSpec(filepath.Join(in.bundle(), "config.json"))
	if err != nil {
		return cpuLimit{}, err
	}
	return cpuLimitOf(spec), nil
}

// withCPUUnlimited runs f with the CPU quota of in lifted and sets it again
// afterwards (when in's cgroup is still there: a checkpoint that is not
// leave-running ends the sandbox).
func (m *Manager) withCPUUnlimited(in *instance, f func() error) error {
	limit, err := instanceCPULimit(in)
	if err != nil || limit.quota == 0 {
		return f()
	}
	rel := m.cgroupOf(in)
	if err := liftCPULimit(rel); err != nil {
		m.log.Warn("running with the CPU limit in place", "runtime_id", in.id, "err", err)
		return f()
	}
	ferr := f()
	if err := setCPULimit(rel, limit); err != nil && hasCPUController(rel) {
		m.log.Error("the sandbox runs without its CPU limit; restarting the server sets it again",
			"runtime_id", in.id, "err", err)
	}
	return ferr
}

// hasCPUController reports whether the cgroup at rel is still there.
func hasCPUController(rel string) bool {
	_, _, err := cpuController(rel)
	return err == nil
}

// writeCgroup writes each (file, value) in dir, in order, stopping at the
// first that fails.
func writeCgroup(dir string, writes [][2]string) error {
	for _, w := range writes {
		if err := os.WriteFile(filepath.Join(dir, w[0]), []byte(w[1]), 0); err != nil {
			return fmt.Errorf("setting the CPU limit: writing %s to %s: %w", w[1], filepath.Join(dir, w[0]), err)
		}
	}
	return nil
}
