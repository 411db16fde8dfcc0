package store

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/warrenhq/warren/api"
)

func TestVolumes(t *testing.T) {
	s := openTest(t)
	ctx := t.Context()
	mustTeam(t, s, "t1")
	mustTeam(t, s, "t2")
	now := time.Now().UTC().Truncate(time.Microsecond)
	v := Volume{ID: "vol-aaaaaaaaaaaa", TeamID: "t1", Name: "data", SizeMB: 64, CreatedAt: now}
	if err := s.CreateVolume(ctx, v); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateVolume(ctx, Volume{ID: "vol-bbbbbbbbbbbb", TeamID: "t1", Name: "data", SizeMB: 1, CreatedAt: now}); !errors.Is(err, api.ErrConflict) {
		t.Errorf("same name twice in a team: got %v, want ErrConflict", err)
	}
	// Another team may use the name.
	if err := s.CreateVolume(ctx, Volume{ID: "vol-cccccccccccc", TeamID: "t2", Name: "data", SizeMB: 1, CreatedAt: now}); err != nil {
		t.Errorf("same name in another team: %v", err)
	}
	got, err := s.GetVolume(ctx, "t1", "data")
	if err != nil || !reflect.DeepEqual(got, v) {
		t.Errorf("GetVolume: got %+v, %v, want %+v", got, err, v)
	}
	if _, err := s.GetVolume(ctx, "t2", "nope"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("GetVolume of a missing volume: got %v, want ErrNotFound", err)
	}
	if got, err := s.GetVolumeByID(ctx, "vol-cccccccccccc"); err != nil || got.TeamID != "t2" {
		t.Errorf("GetVolumeByID: got %+v, %v", got, err)
	}
	if l, _ := s.ListVolumes(ctx, "t1"); len(l) != 1 {
		t.Errorf("ListVolumes(t1): got %d, want 1", len(l))
	}
	if l, _ := s.ListVolumes(ctx, ""); len(l) != 2 {
		t.Errorf("ListVolumes(all): got %d, want 2", len(l))
	}

	// A sandbox mounting it keeps it; one of another team does not count.
	sb := newSandbox("t1", "sb-aaaaaaaaaaaa", "")
	sb.Volumes = []api.VolumeMount{{Volume: "data", Path: "/data"}}
	mustCreate(t, s, sb)
	other := newSandbox("t2", "sb-bbbbbbbbbbbb", "")
	mustCreate(t, s, other)
	if _, err := s.SetSandboxVolumes(ctx, other.ID, []api.VolumeMount{{Volume: "data", Path: "/x"}}); err != nil {
		t.Fatal(err)
	}
	users, err := s.VolumeUsers(ctx, "t1", "data")
	if err != nil || !reflect.DeepEqual(users, []string{sb.ID}) {
		t.Errorf("VolumeUsers: got %v, %v, want [%s]", users, err, sb.ID)
	}
	_, err = s.DeleteVolume(ctx, "t1", "data")
	if !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), sb.ID) {
		t.Errorf("DeleteVolume in use: got %v, want ErrConflict naming %s", err, sb.ID)
	}
	if _, err := s.GetVolume(ctx, "t1", "data"); err != nil {
		t.Errorf("a refused delete removed the volume: %v", err)
	}
	if err := s.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := s.DeleteVolume(ctx, "t1", "data"); err != nil || got.ID != v.ID {
		t.Errorf("DeleteVolume: got %+v, %v", got, err)
	}
	if _, err := s.DeleteVolume(ctx, "t1", "data"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("DeleteVolume twice: got %v, want ErrNotFound", err)
	}
}

func TestCredentials(t *testing.T) {
	s := openTest(t)
	ctx := t.Context()
	mustTeam(t, s, "t1")
	mustTeam(t, s, "t2")
	c := Credential{TeamID: "t1", Name: "gh", URL: "https://github.com/", Username: "x", Secret: []byte{1, 2, 3},
		CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
	if err := s.CreateCredential(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateCredential(ctx, c); !errors.Is(err, api.ErrConflict) {
		t.Errorf("same name twice: got %v, want ErrConflict", err)
	}
	got, err := s.GetCredential(ctx, "t1", "gh")
	if err != nil || !reflect.DeepEqual(got, c) {
		t.Errorf("GetCredential: got %+v, %v, want %+v", got, err, c)
	}
	// Teams see only their own.
	if _, err := s.GetCredential(ctx, "t2", "gh"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("another team's credential: got %v, want ErrNotFound", err)
	}
	if err := s.DeleteCredential(ctx, "t2", "gh"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("deleting another team's credential: got %v, want ErrNotFound", err)
	}
	if l, _ := s.ListCredentials(ctx, "t2"); len(l) != 0 {
		t.Errorf("ListCredentials(t2): got %d, want 0", len(l))
	}
	if l, _ := s.ListCredentials(ctx, "t1"); len(l) != 1 {
		t.Errorf("ListCredentials(t1): got %d, want 1", len(l))
	}
	if err := s.DeleteCredential(ctx, "t1", "gh"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetCredential(ctx, "t1", "gh"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("after delete: got %v, want ErrNotFound", err)
	}
}

func TestSetSandboxNetwork(t *testing.T) {
	s := openTest(t)
	ctx := t.Context()
	mustTeam(t, s, "t1")
	sb := newSandbox("t1", "sb-aaaaaaaaaaaa", "")
	mustCreate(t, s, sb)
	want := api.Network{Egress: []any{"10.0.0.0/8", "example.com"}, GitCredentials: []string{"gh"}}
	got, err := s.SetSandboxNetwork(ctx, sb.ID, want)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Network, want) {
		t.Errorf("network: got %#v, want %#v", got.Network, want)
	}
	if _, err := s.SetSandboxNetwork(ctx, "sb-nonexistent0", want); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("missing sandbox: got %v, want ErrNotFound", err)
	}
}
