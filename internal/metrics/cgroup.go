package metrics

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/warrenhq/warren/api"
)

// CgroupStats is what a sandbox's runtime instance uses, read from its
// cgroup.
type CgroupStats struct {
	CPUSeconds       float64
	MemoryBytes      int64
	MemoryLimitBytes int64
}

// CgroupRoot is where cgroup hierarchies are mounted.
var CgroupRoot = "/sys/fs/cgroup"

// noLimit is what cgroup v1 reports for an unlimited memory cgroup
// (PAGE_COUNTER_MAX pages, rounded): anything this large is no limit.
const noLimit = 1 << 62

// ReadCgroup reads the CPU time and memory of cgroup path (like
// /warren/rt-xxxxxxxxxxxx) under cgroup v1 (cpuacct and memory
// controllers) or, failing that, v2 (the unified hierarchy). A cgroup
// that does not exist is ErrNotFound.
func ReadCgroup(path string) (CgroupStats, error) {
	var st CgroupStats
	// v1
	v1cpu := []string{filepath.Join(CgroupRoot, "cpuacct", path, "cpuacct.usage"),
		filepath.Join(CgroupRoot, "cpu,cpuacct", path, "cpuacct.usage")}
	for _, p := range v1cpu {
		if ns, err := readInt(p); err == nil {
			st.CPUSeconds = float64(ns) / 1e9
			mem := filepath.Join(CgroupRoot, "memory", path)
			st.MemoryBytes, _ = readInt(filepath.Join(mem, "memory.usage_in_bytes"))
			if lim, err := readInt(filepath.Join(mem, "memory.limit_in_bytes")); err == nil && lim < noLimit {
				st.MemoryLimitBytes = lim
			}
			return st, nil
		}
	}
	// v2
	dir := filepath.Join(CgroupRoot, path)
	if b, err := os.ReadFile(filepath.Join(dir, "cpu.stat")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == "usage_usec" {
				us, _ := strconv.ParseInt(f[1], 10, 64)
				st.CPUSeconds = float64(us) / 1e6
			}
		}
		st.MemoryBytes, _ = readInt(filepath.Join(dir, "memory.current"))
		if lim, err := readInt(filepath.Join(dir, "memory.max")); err == nil {
			st.MemoryLimitBytes = lim
		}
		return st, nil
	}
	return st, fmt.Errorf("no cgroup %s under %s: %w", path, CgroupRoot, api.ErrNotFound)
}

// readInt reads a file holding one integer ("max" is an error).
func readInt(p string) (int64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}
