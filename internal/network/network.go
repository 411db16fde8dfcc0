// Package network gives each sandbox its own network namespace with a veth
// pair, and keeps sandboxes off each other and off the host.
//
// Sandbox i of the pool gets the /30 at Subnet + 4*i: the host side of its
// veth holds .1, the sandbox side (eth0 inside the namespace, which runsc
// takes over at start) holds .2, with a default route through .1. The daemon
// dials the agent at .2.
package network

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/warrenhq/warren/api"
)

// NetnsDir is where sandboxes' network namespaces are bind-mounted (enter
// one with nsenter --net=PATH).
//
// Not iproute2's /var/run/netns: the first `ip netns add` on a host whose
// /var/run/netns is not yet a mount point bind-mounts that directory onto
// itself, which hides every namespace mounted in it before; Warren could
// then neither unmount nor remove them, and deleting those sandboxes failed
// with EBUSY. Namespaces made there by an earlier Warren are still found.
const NetnsDir = "/run/warren/netns"

// legacyNetnsDir is where Warren kept namespaces before NetnsDir.
const legacyNetnsDir = "/var/run/netns"

// Pool hands out addresses from a subnet.
type Pool struct {
	prefix netip.Prefix
}

// NewPool returns a pool over subnet (an IPv4 CIDR of /24 or larger).
func NewPool(subnet string) (*Pool, error) {
	p, err := netip.ParsePrefix(subnet)
	if err != nil || !p.Addr().Is4() || p.Bits() > 24 {
		return nil, fmt.Errorf("sandbox subnet %q: want an IPv4 CIDR of /24 or larger, like 10.201.0.0/16: %w", subnet, api.ErrInvalid)
	}
	return &Pool{prefix: p.Masked()}, nil
}

// Size is how many sandboxes the pool can address.
func (p *Pool) Size() int { return 1 << (32 - p.prefix.Bits()) / 4 }

// Addrs are the two ends of sandbox i's link.
type Addrs struct {
	Host    netip.Addr
	Sandbox netip.Addr
	Bits    int
}

// Addrs returns the addresses of sandbox index i.
func (p *Pool) Addrs(i int) (Addrs, error) {
	if i < 0 || i >= p.Size() {
		return Addrs{}, fmt.Errorf("network index %d outside the pool of %d (subnet %s): %w", i, p.Size(), p.prefix, api.ErrQuota)
	}
	b := p.prefix.Addr().As4()
	base := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	at := func(off uint32) netip.Addr {
		v := base + uint32(i)*4 + off
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	return Addrs{Host: at(1), Sandbox: at(2), Bits: 30}, nil
}

// Link names the namespace and the host-side veth of one sandbox.
type Link struct {
	Netns string // name under NetnsDir
	Veth  string // host-side interface
	Addrs Addrs
}

// NetnsPath is the path runsc is given in the OCI spec: under NetnsDir,
// unless an earlier Warren made the namespace under legacyNetnsDir.
func (l Link) NetnsPath() string {
	p := filepath.Join(NetnsDir, l.Netns)
	if legacy := filepath.Join(legacyNetnsDir, l.Netns); !fileExists(p) && fileExists(legacy) {
		return legacy
	}
	return p
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Setup creates l's namespace and veth pair and configures both ends. On
// failure it removes what it made.
func Setup(l Link) (err error) {
	defer func() {
		if err != nil {
			err = errors.Join(err, Teardown(l))
		}
	}()
	ns, err := newNamedNetns(l.Netns)
	if err != nil {
		return fmt.Errorf("creating network namespace %s: %w", l.Netns, err)
	}
	defer ns.Close()

	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: l.Veth, MTU: 1500},
		PeerName:      "eth0",
		PeerNamespace: netlink.NsFd(int(ns)),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("creating veth %s: %w", l.Veth, err)
	}
	host, err := netlink.LinkByName(l.Veth)
	if err != nil {
		return fmt.Errorf("finding veth %s: %w", l.Veth, err)
	}
	hostAddr := &netlink.Addr{IPNet: &net.IPNet{IP: l.Addrs.Host.AsSlice(), Mask: net.CIDRMask(l.Addrs.Bits, 32)}}
	if err := netlink.AddrAdd(host, hostAddr); err != nil {
		return fmt.Errorf("addressing veth %s: %w", l.Veth, err)
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return fmt.Errorf("bringing up veth %s: %w", l.Veth, err)
	}
	return ConfigureInside(l)
}

// ConfigureInside (re)applies the sandbox side of l: address, link up,
// loopback up and the default route. runsc takes the address off eth0 when
// it starts a sandbox, so a restore into a namespace used before calls this
// again first.
func ConfigureInside(l Link) error {
	ns, err := netns.GetFromPath(l.NetnsPath())
	if err != nil {
		return fmt.Errorf("opening network namespace %s: %w", l.Netns, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink in namespace %s: %w", l.Netns, err)
	}
	defer h.Close()
	eth, err := h.LinkByName("eth0")
	if err != nil {
		return fmt.Errorf("finding eth0 in %s: %w", l.Netns, err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: l.Addrs.Sandbox.AsSlice(), Mask: net.CIDRMask(l.Addrs.Bits, 32)}}
	if err := h.AddrReplace(eth, addr); err != nil {
		return fmt.Errorf("addressing eth0 in %s: %w", l.Netns, err)
	}
	if err := h.LinkSetUp(eth); err != nil {
		return fmt.Errorf("bringing up eth0 in %s: %w", l.Netns, err)
	}
	if lo, err := h.LinkByName("lo"); err == nil {
		if err := h.LinkSetUp(lo); err != nil {
			return fmt.Errorf("bringing up lo in %s: %w", l.Netns, err)
		}
	}
	route := &netlink.Route{LinkIndex: eth.Attrs().Index, Gw: l.Addrs.Host.AsSlice()}
	if err := h.RouteReplace(route); err != nil {
		return fmt.Errorf("default route in %s: %w", l.Netns, err)
	}
	return nil
}

// Teardown removes l's veth and namespace. What is already gone is fine.
func Teardown(l Link) error {
	var errs []error
	if link, err := netlink.LinkByName(l.Veth); err == nil {
		if err := netlink.LinkDel(link); err != nil {
			errs = append(errs, fmt.Errorf("deleting veth %s: %w", l.Veth, err))
		}
	}
	for _, dir := range []string{NetnsDir, legacyNetnsDir} {
		if err := deleteNamedNetns(filepath.Join(dir, l.Netns)); err != nil {
			errs = append(errs, fmt.Errorf("deleting network namespace %s: %w", filepath.Join(dir, l.Netns), err))
		}
	}
	return errors.Join(errs...)
}

// deleteNamedNetns unmounts and removes a named namespace's file. A file
// that is not (or no longer) a mount point — a daemon killed between
// creating the file and bind-mounting the namespace on it — is removed too.
func deleteNamedNetns(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Exists reports whether l's namespace is there.
func Exists(l Link) bool {
	_, err := os.Stat(l.NetnsPath())
	return err == nil
}

// newNamedNetns creates a network namespace bind-mounted at
// NetnsDir/name. It does so on a thread of its own: should that thread
// fail to return to the host namespace, it is left locked and Go ends it
// with its goroutine, never reusing it.
func newNamedNetns(name string) (netns.NsHandle, error) {
	if err := os.MkdirAll(NetnsDir, 0o755); err != nil {
		return 0, err
	}
	path := filepath.Join(NetnsDir, name)
	type result struct {
		ns  netns.NsHandle
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer orig.Close()
		ns, err := enterNewNamed(path)
		if setErr := netns.Set(orig); setErr != nil {
			ch <- result{ns: ns, err: errors.Join(err, fmt.Errorf("returning to the host namespace: %w", setErr))}
			return
		}
		runtime.UnlockOSThread()
		ch <- result{ns: ns, err: err}
	}()
	r := <-ch
	return r.ns, r.err
}

// enterNewNamed moves the calling (locked) thread into a new network
// namespace and bind-mounts it at path, which must not exist.
func enterNewNamed(path string) (netns.NsHandle, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return netns.None(), err
	}
	f.Close()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		os.Remove(path)
		return netns.None(), fmt.Errorf("unshare: %w", err)
	}
	ns, err := netns.Get()
	if err != nil {
		os.Remove(path)
		return netns.None(), err
	}
	self := fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
	if err := unix.Mount(self, path, "bind", unix.MS_BIND, ""); err != nil {
		ns.Close()
		os.Remove(path)
		return netns.None(), fmt.Errorf("bind-mounting it at %s: %w", path, err)
	}
	return ns, nil
}
