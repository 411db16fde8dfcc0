package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/credentials"
	"github.com/warrenhq/warren/internal/network"
	"github.com/warrenhq/warren/internal/sandbox"
	"github.com/warrenhq/warren/internal/server"
	"github.com/warrenhq/warren/internal/store"
	"github.com/warrenhq/warren/internal/volume"
)

// netParts are the daemon's volumes, credentials and per-sandbox network
// services (firewall policy, DNS resolver, credential proxy).
type netParts struct {
	volumes  *volume.Manager
	creds    *credentials.Manager
	services *network.Services
	// sandbox is what the Manager is given.
	sandbox *sandbox.Networking
}

// openNetworking opens the volumes and credentials of the state directory
// and makes the network services, which act through fw.
func openNetworking(ctx context.Context, cfg Config, st *store.Store, fw network.Firewall, log *slog.Logger) (*netParts, error) {
	vols, err := volume.Open(ctx, filepath.Join(cfg.StateDir, "volumes"), st, log)
	if err != nil {
		return nil, err
	}
	creds, err := credentials.Open(filepath.Join(cfg.StateDir, "credentials.key"), st, log)
	if err != nil {
		return nil, err
	}
	upstreams := cfg.dnsUpstreams()
	if len(upstreams) == 0 {
		upstreams = network.HostUpstreams("/etc/resolv.conf")
	}
	if len(upstreams) == 0 {
		log.Warn("no DNS resolver for sandboxes: /etc/resolv.conf names none; set dns_upstream")
	}
	svc := &network.Services{Firewall: fw, Resolver: &network.Resolver{Upstreams: upstreams, Log: log}, Proxy: creds.Proxy, Log: log}
	// Every sandbox asks the daemon's resolver, at the same address
	// whatever its link.
	resolv := filepath.Join(cfg.StateDir, "resolv.conf")
	if err := sandbox.WriteFileAtomic(resolv, []byte("nameserver "+api.ServiceAddr+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("writing %s: %w", resolv, err)
	}
	return &netParts{volumes: vols, creds: creds, services: svc, sandbox: &sandbox.Networking{
		Volumes: vols, Links: svc, Credentials: creds, ResolvConf: resolv,
	}}, nil
}

// wire gives the API server the volumes and credentials.
func (n *netParts) wire(s *server.Server) *server.Server {
	s.SetNetworking(n.volumes, n.creds)
	return s
}
