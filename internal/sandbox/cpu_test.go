package sandbox

import (
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestWithoutCPUQuota(t *testing.T) {
	spec := Spec(SpecInput{ID: "rt-test", CPUs: 1.5, MemoryMB: 256, CgroupParent: "/warren"})
	if got := cpuLimitOf(spec); got != (cpuLimit{quota: 150000, period: 100000}) {
		t.Fatalf("cpuLimitOf: got %+v", got)
	}
	lifted := withoutCPUQuota(spec)
	if got := cpuLimitOf(lifted); got.quota != 0 {
		t.Errorf("lifted spec still has quota %+v", got)
	}
	if lifted.Linux.Resources.Memory == nil || *lifted.Linux.Resources.Memory.Limit != 256<<20 {
		t.Errorf("lifted spec lost its memory limit")
	}
	if got := cpuLimitOf(spec); got.quota != 150000 {
		t.Errorf("the original spec changed: %+v", got)
	}
	none := &specs.Spec{Linux: &specs.Linux{}}
	if withoutCPUQuota(none) != none || cpuLimitOf(none).quota != 0 {
		t.Errorf("a spec without a CPU limit is not left as it is")
	}
	if err := setCPULimit("/warren/none", cpuLimit{}); err != nil {
		t.Errorf("setting no limit: %v", err)
	}
}
