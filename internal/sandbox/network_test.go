package sandbox

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/store"
)

func TestValidateNetwork(t *testing.T) {
	m := testManager()
	sb, err := m.validate(&api.CreateSandboxRequest{
		Network:        &api.Network{Egress: []any{"10.1.2.3", "Example.com"}, GitCredentials: []string{"b"}},
		GitCredentials: []string{"a", "b"},
		Volumes:        []api.VolumeMount{{Volume: "data", Path: "/data/"}, {Volume: "cache", Path: "/var/cache/x", ReadOnly: true}},
	})
	if err != nil {
		t.Fatalf("validate: %v", err)
	}
	if want := []any{"10.1.2.3/32", "example.com"}; !reflect.DeepEqual(sb.Network.Egress, want) {
		t.Errorf("egress: got %#v, want %#v", sb.Network.Egress, want)
	}
	if want := []string{"a", "b"}; !reflect.DeepEqual(sb.Network.GitCredentials, want) {
		t.Errorf("git_credentials: got %v, want %v", sb.Network.GitCredentials, want)
	}
	want := []api.VolumeMount{{Volume: "data", Path: "/data"}, {Volume: "cache", Path: "/var/cache/x", ReadOnly: true}}
	if !reflect.DeepEqual(sb.Volumes, want) {
		t.Errorf("volumes: got %+v, want %+v", sb.Volumes, want)
	}
	if sb, _ := m.validate(&api.CreateSandboxRequest{Network: &api.Network{Egress: "open"}}); sb.Network.Egress != "open" {
		t.Errorf("open: got %v", sb.Network.Egress)
	}
}

func TestValidateNetworkInvalid(t *testing.T) {
	vol := func(name, path string) []api.VolumeMount { return []api.VolumeMount{{Volume: name, Path: path}} }
	tests := []struct {
		name  string
		req   api.CreateSandboxRequest
		field string
	}{
		{"credential name", api.CreateSandboxRequest{GitCredentials: []string{"a/b"}}, "git_credentials"},
		{"credential empty", api.CreateSandboxRequest{Network: &api.Network{GitCredentials: []string{""}}}, "git_credentials"},
		{"egress number", api.CreateSandboxRequest{Network: &api.Network{Egress: 7}}, "egress"},
		{"egress v6", api.CreateSandboxRequest{Network: &api.Network{Egress: []any{"fd00::/8"}}}, "egress"},
		{"volume name", api.CreateSandboxRequest{Volumes: vol("../x", "/data")}, "volumes[0].volume"},
		{"volume at /", api.CreateSandboxRequest{Volumes: vol("data", "/")}, "volumes[0].path"},
		{"volume at /proc", api.CreateSandboxRequest{Volumes: vol("data", "/proc/x")}, "volumes[0].path"},
		{"volume at the agent", api.CreateSandboxRequest{Volumes: vol("data", AgentDir)}, "volumes[0].path"},
		{"volume at resolv.conf", api.CreateSandboxRequest{Volumes: vol("data", "/etc/resolv.conf")}, "volumes[0].path"},
		{"volumes nested", api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Volume: "a", Path: "/data"}, {Volume: "b", Path: "/data/sub"}}}, "volumes[1].path"},
		{"volumes same path", api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Volume: "a", Path: "/data"}, {Volume: "b", Path: "/data/"}}}, "volumes[1].path"},
		{"too many volumes", api.CreateSandboxRequest{Volumes: make([]api.VolumeMount, MaxVolumes+1)}, "volumes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := testManager().validate(&tt.req)
			if !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), tt.field) {
				t.Errorf("got %v, want ErrInvalid naming %s", err, tt.field)
			}
		})
	}
}

// Without networking (a server without volumes or network services),
// creates asking for them are refused before anything is made.
func TestCheckAttachmentsWithoutNetworking(t *testing.T) {
	m := testManager()
	for _, sb := range []store.Sandbox{
		{Volumes: []api.VolumeMount{{Volume: "data", Path: "/data"}}},
		{Network: api.Network{Egress: "open"}},
		{Network: api.Network{GitCredentials: []string{"gh"}}},
	} {
		if err := m.checkAttachments(t.Context(), "t", &api.CreateSandboxRequest{}, sb); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("checkAttachments(%+v): got %v, want ErrInvalid", sb, err)
		}
	}
	if err := m.checkAttachments(t.Context(), "t", &api.CreateSandboxRequest{}, store.Sandbox{Network: api.Network{Egress: "none"}}); err != nil {
		t.Errorf("none: %v", err)
	}
}
