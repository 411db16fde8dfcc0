package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"path"
	"slices"
	"sort"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/credentials"
	"github.com/warrenhq/warren/internal/network"
	"github.com/warrenhq/warren/internal/store"
)

// Volumes, egress policy and credentials of sandboxes.
//
// A sandbox's volumes are OCI bind mounts in its spec; a snapshot keeps
// the spec, so every restore (resume from disk, revert, fork) mounts the
// same volumes again, found by id. Volumes are shared durable storage: a
// snapshot holds none of their data, a revert does not roll them back, and
// a fork mounts the same volumes as its parent.
//
// A sandbox's network policy (egress, git credentials) is in its row and
// is applied to each runtime instance as it starts (a restore's instance
// has a new link and addresses), to every instance again after a daemon
// restart, and at once when it is changed (SetNetwork). Inside, the
// sandbox reaches the daemon's resolver and credential proxy at
// api.ServiceAddr, whatever its link: /etc/resolv.conf (a read-only
// mount) and the credentials block of /etc/gitconfig (on its disk, so in
// its snapshots) name that address and so stay right across restores.

// Networking connects a Manager to volumes, per-sandbox network services
// and credentials. Without it, sandboxes have no volumes and no egress.
type Networking struct {
	Volumes     Volumes
	Links       LinkServices
	Credentials Credentials
	// ResolvConf is a host file mounted read-only at /etc/resolv.conf in
	// every sandbox booted from an image; "" mounts none.
	ResolvConf string
}

// Volumes finds volumes and mounts them on the host.
type Volumes interface {
	// Resolve returns team's volume name and its host directory.
	Resolve(ctx context.Context, team, name string) (store.Volume, string, error)
	// ResolveID returns volume id and its host directory.
	ResolveID(ctx context.Context, id string) (store.Volume, string, error)
	// IDOf returns the id of the volume whose host directory is dir, ""
	// if none.
	IDOf(dir string) string
}

// LinkServices serves a runtime instance's link: its egress policy, its
// resolver and its credential proxy.
type LinkServices interface {
	Attach(ctx context.Context, sandboxID string, n api.Network, l network.Link) error
	Update(ctx context.Context, sandboxID string, n api.Network) error
	Detach(l network.Link) error
}

// Credentials finds a team's credentials.
type Credentials interface {
	Get(ctx context.Context, team, name string) (store.Credential, error)
}

// SetNetworking gives m its volumes, network services and credentials.
// Call it before Recover.
func (m *Manager) SetNetworking(n *Networking) { m.netw = n }

// MaxVolumes bounds the volumes of one sandbox.
const MaxVolumes = 16

// reservedPaths are where no volume may be mounted.
var reservedPaths = []string{"/proc", "/sys", "/dev", AgentDir, "/etc/resolv.conf"}

// validateNetwork checks the network and volumes of a create request and
// puts them, in their stored form, into sb. It changes nothing on the host.
func validateNetwork(req *api.CreateSandboxRequest, sb *store.Sandbox) error {
	if req.Network != nil && req.Network.Egress != nil {
		p, err := network.ParseEgress(req.Network.Egress)
		if err != nil {
			return err
		}
		sb.Network.Egress = p.Egress()
	}
	names := slices.Clone(req.GitCredentials)
	if req.Network != nil {
		names = append(names, req.Network.GitCredentials...)
	}
	creds, err := credentialNames(names)
	if err != nil {
		return err
	}
	sb.Network.GitCredentials = creds
	vols, err := validateMounts(req.Volumes)
	if err != nil {
		return err
	}
	sb.Volumes = vols
	return nil
}

// credentialNames checks credential names and returns them sorted, once
// each; nil for none.
func credentialNames(names []string) ([]string, error) {
	var out []string
	for _, n := range names {
		if !credentials.ValidName(n) {
			return nil, invalid("git_credentials: %q is not a credential name", n)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}

func validateMounts(vols []api.VolumeMount) ([]api.VolumeMount, error) {
	if len(vols) > MaxVolumes {
		return nil, invalid("volumes: %d given; at most %d", len(vols), MaxVolumes)
	}
	var out []api.VolumeMount
	for i, v := range vols {
		if !namePattern.MatchString(v.Volume) {
			return nil, invalid("volumes[%d].volume %q: not a volume name", i, v.Volume)
		}
		p := path.Clean(v.Path)
		if !path.IsAbs(v.Path) || p == "/" || strings.ContainsRune(p, 0) {
			return nil, invalid("volumes[%d].path %q: want an absolute path other than /, like /data", i, v.Path)
		}
		for _, r := range reservedPaths {
			if p == r || strings.HasPrefix(p, r+"/") {
				return nil, invalid("volumes[%d].path %q: %s is the sandbox's own; mount the volume elsewhere", i, v.Path, r)
			}
		}
		for _, o := range out {
			if o.Path == p || strings.HasPrefix(p, o.Path+"/") || strings.HasPrefix(o.Path, p+"/") {
				return nil, invalid("volumes[%d].path %q: overlaps %q; give each volume a path of its own", i, v.Path, o.Path)
			}
		}
		out = append(out, api.VolumeMount{Volume: v.Volume, Path: p, ReadOnly: v.ReadOnly})
	}
	return out, nil
}

// checkAttachments checks that what a create asks to attach exists in
// team, before anything is made.
func (m *Manager) checkAttachments(ctx context.Context, team string, req *api.CreateSandboxRequest, sb store.Sandbox) error {
	if m.netw == nil {
		if len(sb.Volumes) > 0 || len(sb.Network.GitCredentials) > 0 || (sb.Network.Egress != nil && sb.Network.Egress != "none") {
			return invalid("volumes, egress and credentials are not available on this server")
		}
		return nil
	}
	if (req.Template != "" || req.Snapshot != "") && len(req.Volumes) > 0 {
		return invalid("volumes: a sandbox made from a snapshot or template mounts the volumes its snapshot had; omit volumes")
	}
	for _, v := range sb.Volumes {
		if _, _, err := m.netw.Volumes.Resolve(ctx, team, v.Volume); err != nil {
			return err
		}
	}
	_, err := m.credentialRows(ctx, team, sb.Network.GitCredentials)
	return err
}

// credentialRows returns team's credentials names, refusing two for one
// URL (git could use only one of them).
func (m *Manager) credentialRows(ctx context.Context, team string, names []string) ([]store.Credential, error) {
	var out []store.Credential
	for _, n := range names {
		c, err := m.netw.Credentials.Get(ctx, team, n)
		if err != nil {
			return nil, fmt.Errorf("git_credentials: %w; add it with POST /v1/credentials", err)
		}
		for _, o := range out {
			if o.URL == c.URL {
				return nil, invalid("git_credentials: %q and %q are both for %s; give one", o.Name, c.Name, c.URL)
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// afterCreate finishes a create that succeeded: a sandbox made from a
// snapshot takes the network the request asks for (it has its snapshot's
// otherwise), and git is configured for the sandbox's credentials. If
// that fails, the sandbox is removed and the create fails.
func (m *Manager) afterCreate(ctx context.Context, req api.CreateSandboxRequest, sb store.Sandbox, err error) (store.Sandbox, error) {
	if err != nil || m.netw == nil {
		return sb, err
	}
	fromSnapshot := req.Template != "" || req.Snapshot != ""
	unlock := m.lock(sb.ID)
	defer unlock()
	switch {
	case fromSnapshot && (req.Network != nil || req.GitCredentials != nil):
		var asked store.Sandbox
		if err := validateNetwork(&req, &asked); err != nil {
			return m.failCreate(ctx, sb, err)
		}
		n := api.Network{Egress: sb.Network.Egress, GitCredentials: sb.Network.GitCredentials}
		if req.Network != nil && req.Network.Egress != nil {
			n.Egress = asked.Network.Egress
		}
		if req.GitCredentials != nil || (req.Network != nil && req.Network.GitCredentials != nil) {
			n.GitCredentials = asked.Network.GitCredentials
		}
		updated, err := m.applyNetwork(ctx, sb, n)
		if err != nil {
			return m.failCreate(ctx, sb, err)
		}
		return updated, nil
	case !fromSnapshot && len(sb.Network.GitCredentials) > 0:
		in := m.liveInstance(sb.ID)
		if in == nil {
			return m.failCreate(ctx, sb, fmt.Errorf("sandbox %s: no instance to configure git in: %w", sb.ID, api.ErrUnavailable))
		}
		if err := m.writeGitConfig(ctx, sb, in); err != nil {
			return m.failCreate(ctx, sb, err)
		}
	}
	return sb, nil
}

func (m *Manager) failCreate(ctx context.Context, sb store.Sandbox, err error) (store.Sandbox, error) {
	if derr := m.destroy(context.WithoutCancel(ctx), sb); derr != nil {
		err = errors.Join(err, derr)
	}
	return store.Sandbox{}, err
}

// SetNetwork changes the egress policy or the git credentials of sandbox
// id of team; fields patch leaves out stay. Egress changes apply at once,
// to connections already open too; credentials change only while the
// sandbox runs (its git configuration is on its disk).
func (m *Manager) SetNetwork(ctx context.Context, team, id string, patch api.NetworkPatch) (store.Sandbox, error) {
	if m.netw == nil {
		return store.Sandbox{}, fmt.Errorf("network policies are not available on this server: %w", api.ErrUnavailable)
	}
	if _, err := m.Get(ctx, team, id); err != nil {
		return store.Sandbox{}, err
	}
	n := api.Network{}
	if patch.Egress != nil {
		p, err := network.ParseEgress(patch.Egress)
		if err != nil {
			return store.Sandbox{}, err
		}
		n.Egress = p.Egress()
	}
	if patch.GitCredentials != nil {
		names, err := credentialNames(*patch.GitCredentials)
		if err != nil {
			return store.Sandbox{}, err
		}
		if _, err := m.credentialRows(ctx, team, names); err != nil {
			return store.Sandbox{}, err
		}
		n.GitCredentials = names
	}
	unlock := m.lock(id)
	defer unlock()
	sb, err := m.store.GetSandbox(ctx, team, id)
	if err != nil {
		return sb, err
	}
	if sb.State == api.StateCreating {
		return sb, fmt.Errorf("sandbox %s is being created: %w", id, api.ErrConflict)
	}
	if patch.Egress == nil {
		n.Egress = sb.Network.Egress
	}
	if patch.GitCredentials == nil {
		n.GitCredentials = sb.Network.GitCredentials
	}
	m.Touch(id)
	return m.applyNetwork(ctx, sb, n)
}

// applyNetwork records n as sb's network and applies it: to the firewall
// and services of its instance, and to its git configuration when its
// credentials change. On failure sb is left as it was. Holds sb's lock.
func (m *Manager) applyNetwork(ctx context.Context, sb store.Sandbox, n api.Network) (store.Sandbox, error) {
	credsChanged := !slices.Equal(sb.Network.GitCredentials, n.GitCredentials)
	var in *instance
	if credsChanged {
		if sb.State != api.StateRunning {
			return sb, fmt.Errorf("sandbox %s is %s: git credentials change only while it runs (its git configuration is on its disk)%s: %w",
				sb.ID, sb.State, stateHint(sb), api.ErrConflict)
		}
		if in = m.liveInstance(sb.ID); in == nil {
			return sb, fmt.Errorf("sandbox %s: not connected to its agent yet; retry: %w", sb.ID, api.ErrUnavailable)
		}
	}
	updated, err := m.store.SetSandboxNetwork(ctx, sb.ID, n)
	if err != nil {
		return sb, err
	}
	undo := func(cause error) (store.Sandbox, error) {
		uctx := context.WithoutCancel(ctx)
		m.store.SetSandboxNetwork(uctx, sb.ID, sb.Network)
		m.netw.Links.Update(uctx, sb.ID, sb.Network)
		return sb, cause
	}
	if err := m.netw.Links.Update(ctx, sb.ID, n); err != nil {
		return undo(fmt.Errorf("sandbox %s: applying its network policy: %w", sb.ID, err))
	}
	if credsChanged {
		if err := m.writeGitConfig(ctx, updated, in); err != nil {
			return undo(err)
		}
	}
	m.log.Info("sandbox network set", "sandbox_id", sb.ID, "egress", fmt.Sprint(n.Egress), "git_credentials", strings.Join(n.GitCredentials, ","))
	return updated, nil
}

// gitConfigPath is the system gitconfig inside a sandbox.
const gitConfigPath = "/etc/gitconfig"

// writeGitConfig routes git's requests for sb's credentials' URLs through
// its credential proxy, in Warren's block of /etc/gitconfig.
func (m *Manager) writeGitConfig(ctx context.Context, sb store.Sandbox, in *instance) error {
	creds, err := m.credentialRows(ctx, sb.TeamID, sb.Network.GitCredentials)
	if err != nil {
		return err
	}
	var existing []byte
	rc, err := in.agent.ReadFile(ctx, gitConfigPath)
	switch {
	case err == nil:
		existing, err = io.ReadAll(io.LimitReader(rc, 1<<20))
		rc.Close()
		if err != nil {
			return fmt.Errorf("sandbox %s: reading %s: %w", sb.ID, gitConfigPath, err)
		}
	case !errors.Is(err, api.ErrNotFound):
		return fmt.Errorf("sandbox %s: reading %s: %w", sb.ID, gitConfigPath, err)
	}
	body := credentials.GitConfig(string(existing), creds)
	if _, err := in.agent.WriteFile(ctx, gitConfigPath, bytes.NewReader([]byte(body)), 0o644); err != nil {
		return fmt.Errorf("sandbox %s: writing %s: %w", sb.ID, gitConfigPath, err)
	}
	return nil
}

// attachInstance prepares instance in of sandboxID before it starts: the
// volume mounts of its spec (added at a fresh boot, found again by id at a
// restore) and its link's network services.
func (m *Manager) attachInstance(ctx context.Context, sandboxID string, spec *specs.Spec, fresh bool, in *instance) error {
	if m.netw == nil {
		return nil
	}
	sb, err := m.store.GetSandbox(ctx, "", sandboxID)
	if err != nil {
		return err
	}
	if fresh {
		if m.netw.ResolvConf != "" {
			spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/etc/resolv.conf", Type: "bind",
				Source: m.netw.ResolvConf, Options: []string{"rbind", "ro"}})
		}
		for _, v := range sb.Volumes {
			_, dir, err := m.netw.Volumes.Resolve(ctx, sb.TeamID, v.Volume)
			if err != nil {
				return fmt.Errorf("sandbox %s: %w", sandboxID, err)
			}
			spec.Mounts = append(spec.Mounts, volumeMount(dir, v))
		}
	} else {
		var found []api.VolumeMount
		for i, mnt := range spec.Mounts {
			id := m.netw.Volumes.IDOf(mnt.Source)
			if id == "" {
				continue
			}
			v, dir, err := m.netw.Volumes.ResolveID(ctx, id)
			if err != nil {
				return fmt.Errorf("sandbox %s: its snapshot mounts volume %s at %s: %w", sandboxID, id, mnt.Destination, err)
			}
			spec.Mounts[i].Source = dir
			found = append(found, api.VolumeMount{Volume: v.Name, Path: mnt.Destination, ReadOnly: slices.Contains(mnt.Options, "ro")})
		}
		// A sandbox made from a snapshot mounts what the snapshot did.
		if len(found) > 0 && len(sb.Volumes) == 0 {
			if _, err := m.store.SetSandboxVolumes(ctx, sandboxID, found); err != nil {
				return err
			}
		}
	}
	return m.netw.Links.Attach(ctx, sandboxID, sb.Network, in.link)
}

func volumeMount(dir string, v api.VolumeMount) specs.Mount {
	mode := "rw"
	if v.ReadOnly {
		mode = "ro"
	}
	return specs.Mount{Destination: v.Path, Type: "bind", Source: dir, Options: []string{"rbind", mode}}
}

// detachInstance takes in's link off the network services.
func (m *Manager) detachInstance(in *instance) {
	if m.netw == nil {
		return
	}
	if err := m.netw.Links.Detach(in.link); err != nil {
		m.log.Warn("removing an instance's network policy", "sandbox_id", in.sandbox, "runtime_id", in.id, "err", err)
	}
}

// reattach applies every live instance's network services again, as a
// daemon start needs (the firewall starts empty, and the services died
// with the previous daemon).
func (m *Manager) reattach(ctx context.Context) {
	if m.netw == nil {
		return
	}
	m.mu.Lock()
	ins := make([]*instance, 0, len(m.live))
	for _, l := range m.live {
		ins = append(ins, l.in)
	}
	m.mu.Unlock()
	for _, in := range ins {
		sb, err := m.store.GetSandbox(ctx, "", in.sandbox)
		if err == nil {
			err = m.netw.Links.Attach(ctx, in.sandbox, sb.Network, in.link)
		}
		if err != nil {
			m.log.Error("applying a sandbox's network policy after a restart", "sandbox_id", in.sandbox, "err", err)
		}
	}
}

// Addr returns the address of running sandbox id of team, at which the
// host reaches its ports, and records the call as activity.
func (m *Manager) Addr(ctx context.Context, team, id string) (netip.Addr, error) {
	sb, err := m.Get(ctx, team, id)
	if err != nil {
		return netip.Addr{}, err
	}
	if sb.State != api.StateRunning {
		return netip.Addr{}, fmt.Errorf("sandbox %s is %s, not running%s: %w", id, sb.State, stateHint(sb), api.ErrConflict)
	}
	in := m.liveInstance(id)
	if in == nil {
		return netip.Addr{}, fmt.Errorf("sandbox %s: not connected yet; retry: %w", id, api.ErrUnavailable)
	}
	m.Touch(id)
	return in.link.Addrs.Sandbox, nil
}
