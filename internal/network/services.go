package network

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/warrenhq/warren/api"
)

// Services attaches the daemon's per-sandbox network services to each
// runtime instance's link, and takes them off again:
//   - the sandbox's egress policy, in the firewall (keyed by its veth);
//   - its DNS resolver, on the host side of its link;
//   - its credential proxy, on the host side of its link.
//
// A sandbox reaches the last two at api.ServiceAddr whatever its link, so
// a restore (a new link, new addresses) changes nothing inside it. The
// policy is the sandbox's, kept across its instances; Attach it again to
// every instance after a daemon restart (the firewall starts empty).
type Services struct {
	Firewall Firewall
	Resolver *Resolver
	// Proxy returns the handler of sandbox id's credential proxy; nil
	// serves none.
	Proxy func(sandboxID string) http.Handler
	Log   *slog.Logger

	mu    sync.Mutex
	links map[string]*attachment // by veth
}

type attachment struct {
	sandboxID string
	link      Link
	policy    atomic.Pointer[Policy]
	dns       io.Closer
	proxy     *http.Server
}

func (a *attachment) close() {
	if a.dns != nil {
		a.dns.Close()
	}
	if a.proxy != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		a.proxy.Shutdown(ctx)
		cancel()
		a.proxy.Close()
	}
}

// Attach serves sandbox sandboxID on link l under network policy n: its
// resolver and proxy listen, and its egress policy is in the firewall. A
// link attached before is attached again (its services restarted, its
// policy replaced).
func (s *Services) Attach(ctx context.Context, sandboxID string, n api.Network, l Link) (err error) {
	p, err := ParseEgress(n.Egress)
	if err != nil {
		return err
	}
	a := &attachment{sandboxID: sandboxID, link: l}
	a.policy.Store(&p)
	defer func() {
		if err != nil {
			a.close()
			s.Firewall.Clear(l.Veth)
		}
	}()
	s.mu.Lock()
	if s.links == nil {
		s.links = map[string]*attachment{}
	}
	old := s.links[l.Veth]
	delete(s.links, l.Veth)
	s.mu.Unlock()
	if old != nil {
		old.close()
	}
	if s.Resolver != nil {
		a.dns, err = s.Resolver.serve(l.Addrs.Host, dnsSandbox{
			client: l.Addrs.Sandbox,
			policy: func() Policy { return *a.policy.Load() },
			allow: func(addrs []netip.Addr, ttl time.Duration) error {
				return s.Firewall.AllowResolved(l.Veth, addrs, ttl)
			},
		})
		if err != nil {
			return fmt.Errorf("sandbox %s: %w", sandboxID, err)
		}
	}
	if s.Proxy != nil {
		hostPort := netip.AddrPortFrom(l.Addrs.Host, ProxyPort).String()
		ln, err := listenMarked().Listen(ctx, "tcp4", hostPort)
		if err != nil {
			return fmt.Errorf("sandbox %s: credential proxy on %s: %w", sandboxID, hostPort, err)
		}
		a.proxy = &http.Server{
			Handler:           onlyFrom(l.Addrs.Sandbox, s.Proxy(sandboxID)),
			ReadHeaderTimeout: 30 * time.Second,
			IdleTimeout:       2 * time.Minute,
			ErrorLog:          nil,
		}
		go a.proxy.Serve(ln)
	}
	if err := s.applyPolicy(l, p, old != nil); err != nil {
		return fmt.Errorf("sandbox %s: %w", sandboxID, err)
	}
	s.mu.Lock()
	s.links[l.Veth] = a
	s.mu.Unlock()
	return nil
}

func (s *Services) applyPolicy(l Link, p Policy, hadObjects bool) error {
	if p.Forwards() {
		if err := s.enableForwarding(); err != nil {
			return err
		}
	}
	if p.None() && !hadObjects {
		return nil // nothing was there, nothing to take away
	}
	return s.Firewall.Apply(l.Veth, p)
}

// Update replaces the policy of sandbox sandboxID on every link it is
// attached to. When the egress policy changed, connections the sandbox
// opened are cut, so a tighter policy holds at once.
func (s *Services) Update(ctx context.Context, sandboxID string, n api.Network) error {
	p, err := ParseEgress(n.Egress)
	if err != nil {
		return err
	}
	s.mu.Lock()
	var mine []*attachment
	for _, a := range s.links {
		if a.sandboxID == sandboxID {
			mine = append(mine, a)
		}
	}
	s.mu.Unlock()
	var errs []error
	for _, a := range mine {
		prev := a.policy.Load()
		a.policy.Store(&p)
		if err := s.applyPolicy(a.link, p, true); err != nil {
			errs = append(errs, err)
			continue
		}
		if !samePolicy(*prev, p) {
			flushConntrack(a.link.Addrs.Sandbox)
		}
	}
	return errors.Join(errs...)
}

func samePolicy(a, b Policy) bool {
	return a.Open == b.Open && slices.Equal(a.Nets, b.Nets) && slices.Equal(a.Domains, b.Domains)
}

// flushConntrack forgets the connections addr opened, so the firewall
// judges their next packets afresh.
func flushConntrack(addr netip.Addr) {
	f := &netlink.ConntrackFilter{}
	if err := f.AddIP(netlink.ConntrackOrigSrcIP, addr.AsSlice()); err != nil {
		return
	}
	netlink.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, f)
}

// Detach stops l's services and takes its policy out of the firewall.
func (s *Services) Detach(l Link) error {
	s.mu.Lock()
	a := s.links[l.Veth]
	delete(s.links, l.Veth)
	s.mu.Unlock()
	if a != nil {
		a.close()
	}
	return s.Firewall.Clear(l.Veth)
}

// Close stops every link's services (the daemon is going away; sandboxes
// keep their firewall policies until it comes back).
func (s *Services) Close() {
	s.mu.Lock()
	links := s.links
	s.links = nil
	s.mu.Unlock()
	for _, a := range links {
		a.close()
	}
}

const ipForward = "/proc/sys/net/ipv4/ip_forward"

// enableForwarding turns on IPv4 forwarding, which a policy that lets a
// sandbox out needs. The firewall's forward chain keeps every sandbox to
// its policy; forwarding between the host's other interfaces is the host
// firewall's business, as it is with any container runtime. It looks each
// time, so that a host that turned it off gets it back at the next policy
// applied.
func (s *Services) enableForwarding() error {
	b, err := os.ReadFile(ipForward)
	if err != nil {
		return fmt.Errorf("reading %s: %w", ipForward, err)
	}
	if strings.TrimSpace(string(b)) != "1" {
		if err := os.WriteFile(ipForward, []byte("1\n"), 0o644); err != nil {
			return fmt.Errorf("enabling IPv4 forwarding for sandbox egress: %w", err)
		}
		if s.Log != nil {
			s.Log.Info("enabled IPv4 forwarding (net.ipv4.ip_forward=1) for sandbox egress")
		}
	}
	return nil
}

// onlyFrom serves h to requests from addr only.
func onlyFrom(addr netip.Addr, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ap, err := netip.ParseAddrPort(r.RemoteAddr)
		if err != nil || ap.Addr().Unmap() != addr {
			http.Error(w, "this proxy serves its sandbox only", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}
