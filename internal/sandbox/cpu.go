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
// A restore is the exception. It loads the image's memory into the Sentry
// before any of the sandbox's own code runs, CPU-bound and on several
// threads; under a one-CPU quota the loading and runsc's own start-up
// (compiling its seccomp filter, ~20 ms alone, took 300 ms beside a 256 MB
// load) throttle each other. So a restore starts with no quota, and Warren
// writes the quota into the cgroup the moment runsc returns, before the
// agent is asked anything: resume from stored at 256 MB went from ~490 to
// ~425 ms (make bench; docs/benchmarks.md).
//
// (A CFS burst equal to the quota was tried too, for short commands that a
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

// setCPULimit writes l into the cgroup at rel (relative to the cgroup
// root), under cgroup v1's cpu controller or cgroup v2.
func setCPULimit(rel string, l cpuLimit) error {
	if l.quota == 0 {
		return nil
	}
	if dir := filepath.Join("/sys/fs/cgroup/cpu", rel); fileExists(filepath.Join(dir, "cpu.cfs_quota_us")) {
		return writeCgroup(dir, [][2]string{
			{"cpu.cfs_period_us", strconv.FormatUint(l.period, 10)},
			{"cpu.cfs_quota_us", strconv.FormatInt(l.quota, 10)},
		})
	}
	if dir := filepath.Join("/sys/fs/cgroup", rel); fileExists(filepath.Join(dir, "cpu.max")) {
		return writeCgroup(dir, [][2]string{{"cpu.max", fmt.Sprintf("%d %d", l.quota, l.period)}})
	}
	return fmt.Errorf("setting the CPU limit: no CPU controller for cgroup %s (looked under /sys/fs/cgroup/cpu and /sys/fs/cgroup)", rel)
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
