package sandbox

import (
	"fmt"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/warrenhq/warren/api"
)

func testSpecInput() SpecInput {
	return SpecInput{
		ID:           "sb-abcdefghijkl",
		Hostname:     "worker-1",
		Rootfs:       "/var/lib/warren/images/rootfs/abc",
		AgentDir:     "/var/lib/warren/agent",
		NetnsPath:    "/var/run/netns/warren-sb-abcdefghijkl",
		Cwd:          "/root",
		Env:          map[string]string{"PATH": "/bin", "HOME": "/root", "A": "1", "Z": "26"},
		CPUs:         1.5,
		MemoryMB:     512,
		CgroupParent: "/warren",
	}
}

func TestSpec(t *testing.T) {
	in := testSpecInput()
	s := Spec(in)

	if got, want := s.Process.Args, []string{"/.warren/warren-agent", "--listen", fmt.Sprintf(":%d", api.AgentPort)}; !slices.Equal(got, want) {
		t.Errorf("args: got %v, want %v", got, want)
	}
	if got, want := s.Process.Env, []string{"A=1", "HOME=/root", "PATH=/bin", "Z=26"}; !slices.Equal(got, want) {
		t.Errorf("env: got %v, want %v", got, want)
	}
	if s.Process.Cwd != "/root" {
		t.Errorf("cwd: got %v, want %v", s.Process.Cwd, "/root")
	}
	if s.Process.User.UID != 0 || s.Process.User.GID != 0 {
		t.Errorf("user: got %+v, want root", s.Process.User)
	}
	if s.Root.Path != in.Rootfs {
		t.Errorf("root: got %v, want %v", s.Root.Path, in.Rootfs)
	}
	if s.Hostname != "worker-1" {
		t.Errorf("hostname: got %v, want %v", s.Hostname, "worker-1")
	}
	if got, want := s.Linux.CgroupsPath, "/warren/sb-abcdefghijkl"; got != want {
		t.Errorf("cgroup: got %v, want %v", got, want)
	}
	res := s.Linux.Resources
	if got, want := *res.Memory.Limit, int64(512<<20); got != want {
		t.Errorf("memory limit: got %v, want %v", got, want)
	}
	if got, want := *res.CPU.Quota, int64(150000); got != want {
		t.Errorf("cpu quota: got %v, want %v", got, want)
	}
	if got, want := *res.CPU.Period, uint64(100000); got != want {
		t.Errorf("cpu period: got %v, want %v", got, want)
	}
	if res.Pids == nil || res.Pids.Limit <= 0 {
		t.Errorf("pids: got %+v, want a limit", res.Pids)
	}

	var nsTypes []specs.LinuxNamespaceType
	for _, ns := range s.Linux.Namespaces {
		nsTypes = append(nsTypes, ns.Type)
		switch {
		case ns.Type == specs.NetworkNamespace && ns.Path != in.NetnsPath:
			t.Errorf("network namespace path: got %v, want %v", ns.Path, in.NetnsPath)
		case ns.Type != specs.NetworkNamespace && ns.Path != "":
			t.Errorf("%s namespace: got path %v, want a new one", ns.Type, ns.Path)
		}
	}
	slices.Sort(nsTypes)
	wantNS := []specs.LinuxNamespaceType{specs.IPCNamespace, specs.MountNamespace, specs.NetworkNamespace, specs.PIDNamespace, specs.UTSNamespace}
	slices.Sort(wantNS)
	if !slices.Equal(nsTypes, wantNS) {
		t.Errorf("namespaces: got %v, want %v", nsTypes, wantNS)
	}

	var agent []specs.Mount
	for _, m := range s.Mounts {
		if m.Destination == AgentDir {
			agent = append(agent, m)
		}
	}
	if len(agent) != 1 {
		t.Fatalf("agent mounts: got %v, want one at %s", agent, AgentDir)
	}
	if m := agent[0]; m.Type != "bind" || m.Source != in.AgentDir || !slices.Contains(m.Options, "ro") || !slices.Contains(m.Options, "rbind") {
		t.Errorf("agent mount: got %+v, want a read-only bind of %s", m, in.AgentDir)
	}
	for _, dest := range []string{"/proc", "/dev", "/dev/pts", "/dev/shm", "/sys"} {
		if !slices.ContainsFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == dest }) {
			t.Errorf("mounts: no %s", dest)
		}
	}
}

func TestSpecCPUQuota(t *testing.T) {
	tests := []struct {
		cpus float64
		want int64
	}{
		{1, 100000},
		{0.5, 50000},
		{0.25, 25000},
		{2, 200000},
		// Not exact in binary: the quota must still be the nearest
		// microsecond, not one below.
		{0.29, 29000},
		{0.57, 57000},
		{1.13, 113000},
		{2.01, 201000},
		{0.001, 100},
	}
	for _, tt := range tests {
		in := testSpecInput()
		in.CPUs = tt.cpus
		if got := *Spec(in).Linux.Resources.CPU.Quota; got != tt.want {
			t.Errorf("cpus %v: quota got %v, want %v", tt.cpus, got, tt.want)
		}
	}
}

func TestSpecMemory(t *testing.T) {
	for _, mb := range []int64{64, 512, 16384, 65536} {
		in := testSpecInput()
		in.MemoryMB = mb
		if got, want := *Spec(in).Linux.Resources.Memory.Limit, mb*1024*1024; got != want {
			t.Errorf("memory_mb %v: limit got %v, want %v", mb, got, want)
		}
	}
}

func TestBaseEnv(t *testing.T) {
	tests := []struct {
		name      string
		image     []string
		requested map[string]string
		want      map[string]string
	}{
		{
			name: "defaults",
			want: map[string]string{
				"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
				"HOME": "/root", "LANG": "C.UTF-8", "TERM": "xterm-256color",
			},
		},
		{
			name:  "image over defaults",
			image: []string{"PATH=/opt/python/bin:/usr/bin", "PYTHON_VERSION=3.12", "EMPTY="},
			want: map[string]string{
				"PATH": "/opt/python/bin:/usr/bin", "HOME": "/root", "LANG": "C.UTF-8",
				"TERM": "xterm-256color", "PYTHON_VERSION": "3.12", "EMPTY": "",
			},
		},
		{
			name:      "request over image and defaults",
			image:     []string{"PATH=/opt/bin", "LANG=en_US.UTF-8"},
			requested: map[string]string{"PATH": "/mine", "HOME": "/home/me", "DEBUG": "1"},
			want: map[string]string{
				"PATH": "/mine", "HOME": "/home/me", "LANG": "en_US.UTF-8",
				"TERM": "xterm-256color", "DEBUG": "1",
			},
		},
		{
			name:  "image entries without a name are skipped",
			image: []string{"NOEQUALS", "=value", "A=b=c"},
			want: map[string]string{
				"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
				"HOME": "/root", "LANG": "C.UTF-8", "TERM": "xterm-256color", "A": "b=c",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := BaseEnv(tt.image, tt.requested)
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// The environment in the spec is BaseEnv's, sorted, whatever the map order.
func TestSpecEnvSortedFromBaseEnv(t *testing.T) {
	in := testSpecInput()
	in.Env = BaseEnv([]string{"LANG=de_DE.UTF-8", "B=image"}, map[string]string{"B": "request", "A": "x"})
	want := []string{"A=x", "B=request", "HOME=/root", "LANG=de_DE.UTF-8",
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TERM=xterm-256color"}
	for range 20 {
		if got := Spec(in).Process.Env; !slices.Equal(got, want) {
			t.Fatalf("env: got %v, want %v", got, want)
		}
	}
}
