package network

import (
	"bytes"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"time"

	"github.com/warrenhq/warren/api"
)

// VethPrefix starts the name of every sandbox's host-side veth.
const VethPrefix = "wv-"

// Ports of the daemon's services on the host side of every sandbox's link.
// A sandbox reaches them at api.ServiceAddr (DNS on 53, the credential
// proxy on 80), which the host redirects here.
const (
	DNSPort   = 49953
	ProxyPort = 49954
)

// ServiceMark is the socket mark (SO_MARK) of the daemon's service
// listeners: the firewall lets a sandbox reach a socket on the host only
// when it carries this mark, so a host service listening on every address
// is never reachable from a sandbox, whatever its port.
const ServiceMark = 0x57524e01

// Firewall is the daemon's nftables table. Rules sit in the host
// namespace, on the veths: rules inside a sandbox's namespace would never
// match, since runsc's network stack handles its packets.
//
// A sandbox may answer connections the host opens to it (the agent
// channel, the ports proxy) and reach the daemon's own services on the host
// side of its link (DNS, the credential proxy: sockets marked
// ServiceMark). It can never open a connection to the host's other
// services, nor to another sandbox. What it may reach beyond the host is
// its egress policy: nothing (none), anything (open), or an allowlist,
// each sandbox's in a chain of its own, found by its veth in the egress
// verdict map. Forwarded connections are NATed to the host's address.
//
// With a Subnet, the table acts only on packets of that subnet, so that
// daemons side by side on one host (tests do that) keep to their own
// sandboxes.
type Firewall struct {
	Table string
	// Subnet is the daemon's sandbox subnet ("" acts on every wv-* veth).
	Subnet string
	// Prefix starts the names of the veths it acts on; VethPrefix when
	// empty (tests use another, out of every daemon's way).
	Prefix string
}

func (f Firewall) prefix() string {
	if f.Prefix != "" {
		return f.Prefix
	}
	return VethPrefix
}

// Ensure creates or replaces the table's rules. Per-sandbox policies are
// gone after it: apply them again.
func (f Firewall) Ensure() error {
	var src, dst string
	if f.Subnet != "" {
		p, err := netip.ParsePrefix(f.Subnet)
		if err != nil || !p.Addr().Is4() {
			return fmt.Errorf("firewall: subnet %q is not an IPv4 CIDR: %w", f.Subnet, api.ErrInvalid)
		}
		src, dst = "ip saddr "+p.Masked().String()+" ", "ip daddr "+p.Masked().String()+" "
	}
	// Connections a policy let out leave with the host's address. The
	// postrouting hook knows no input interface: NAT by source subnet,
	// so without one nothing is NATed.
	masq := "# no subnet: no NAT"
	if src != "" {
		masq = src + `oifname != "` + f.prefix() + `*" masquerade`
	}
	rules := fmt.Sprintf(`table inet %[1]s
delete table inet %[1]s
table inet %[1]s {
	map egress {
		type ifname : verdict
	}
	chain prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		iifname "%[2]s*" %[3]sip daddr %[5]s udp dport 53 redirect to :%[6]d
		iifname "%[2]s*" %[3]sip daddr %[5]s tcp dport 53 redirect to :%[6]d
		iifname "%[2]s*" %[3]sip daddr %[5]s tcp dport 80 redirect to :%[7]d
	}
	chain input {
		type filter hook input priority filter - 5; policy accept;
		iifname "%[2]s*" meta nfproto ipv6 counter drop
		iifname "%[2]s*" %[3]sct state established,related accept
		iifname "%[2]s*" %[3]smeta l4proto { tcp, udp } fib daddr . iif type local socket mark %#[8]x accept
		iifname "%[2]s*" %[3]scounter drop
	}
	chain forward {
		type filter hook forward priority filter - 5; policy accept;
		iifname "%[2]s*" meta nfproto ipv6 counter drop
		oifname "%[2]s*" meta nfproto ipv6 counter drop
		iifname "%[2]s*" oifname "%[2]s*" counter drop
		oifname "%[2]s*" %[4]sct state established,related accept
		oifname "%[2]s*" %[4]scounter drop
		iifname "%[2]s*" %[3]sct state established,related accept
		iifname "%[2]s*" %[3]sct state new iifname vmap @egress
		iifname "%[2]s*" %[3]scounter drop
	}
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		%[9]s
	}
}
`, f.Table, f.prefix(), src, dst, api.ServiceAddr, DNSPort, ProxyPort, ServiceMark, masq)
	if dst != "" {
		// The host side of every link is reachable from its sandbox
		// only, never from outside.
		rules += fmt.Sprintf("add rule inet %s input %siifname != \"lo\" iifname != \"%s*\" counter drop\n", f.Table, dst, f.prefix())
	}
	return nft(rules)
}

// Remove deletes the table; a table that is not there is fine.
func (f Firewall) Remove() error {
	err := nft(fmt.Sprintf("table inet %[1]s\ndelete table inet %[1]s\n", f.Table))
	if err != nil && strings.Contains(err.Error(), "No such file") {
		return nil
	}
	return err
}

// names of veth's per-sandbox objects: its chain, its allowed networks and
// the addresses its allowed names resolved to.
func (f Firewall) objectNames(veth string) (chain, nets, names string) {
	id := strings.TrimPrefix(veth, f.prefix())
	return "e-" + id, "n-" + id, "d-" + id
}

// Apply sets the egress policy of the sandbox behind veth, replacing what
// it had. A none policy removes the sandbox's objects (nothing matches, so
// its packets are dropped).
func (f Firewall) Apply(veth string, p Policy) error {
	if p.None() {
		return f.Clear(veth)
	}
	chain, nets, names := f.objectNames(veth)
	var b strings.Builder
	fmt.Fprintf(&b, "add chain inet %s %s\nflush chain inet %[1]s %[2]s\n", f.Table, chain)
	fmt.Fprintf(&b, "add set inet %s %s { type ipv4_addr; flags interval; }\nflush set inet %[1]s %[2]s\n", f.Table, nets)
	fmt.Fprintf(&b, "add set inet %s %s { type ipv4_addr; flags timeout; }\nflush set inet %[1]s %[2]s\n", f.Table, names)
	if p.Open {
		fmt.Fprintf(&b, "add rule inet %s %s accept\n", f.Table, chain)
	} else {
		if len(p.Nets) > 0 {
			elems := make([]string, len(p.Nets))
			for i, n := range p.Nets {
				elems[i] = n.String()
			}
			fmt.Fprintf(&b, "add element inet %s %s { %s }\n", f.Table, nets, strings.Join(elems, ", "))
		}
		fmt.Fprintf(&b, "add rule inet %s %s ip daddr @%s accept\n", f.Table, chain, nets)
		fmt.Fprintf(&b, "add rule inet %s %s ip daddr @%s accept\n", f.Table, chain, names)
	}
	fmt.Fprintf(&b, "add element inet %s egress { %q : jump %s }\n", f.Table, veth, chain)
	if err := nft(b.String()); err != nil {
		return fmt.Errorf("applying the egress policy of %s: %w", veth, err)
	}
	return nil
}

// Clear removes veth's per-sandbox objects; what is not there is fine.
func (f Firewall) Clear(veth string) error {
	chain, nets, names := f.objectNames(veth)
	// Each object is made first, so that deleting it cannot fail for its
	// absence (nft 1.0.6 has no "destroy").
	script := fmt.Sprintf(`add chain inet %[1]s %[2]s
add element inet %[1]s egress { %[5]q : jump %[2]s }
delete element inet %[1]s egress { %[5]q }
flush chain inet %[1]s %[2]s
delete chain inet %[1]s %[2]s
add set inet %[1]s %[3]s { type ipv4_addr; flags interval; }
delete set inet %[1]s %[3]s
add set inet %[1]s %[4]s { type ipv4_addr; flags timeout; }
delete set inet %[1]s %[4]s
`, f.Table, chain, nets, names, veth)
	if err := nft(script); err != nil {
		if strings.Contains(err.Error(), "No such file") {
			return nil // the table itself is gone
		}
		return fmt.Errorf("clearing the egress policy of %s: %w", veth, err)
	}
	return nil
}

// AllowResolved lets the sandbox behind veth reach addrs for ttl: the
// answers the daemon's resolver gave it for an allowed name.
func (f Firewall) AllowResolved(veth string, addrs []netip.Addr, ttl time.Duration) error {
	if len(addrs) == 0 {
		return nil
	}
	_, _, names := f.objectNames(veth)
	secs := max(1, int(ttl.Seconds()))
	elems := make([]string, len(addrs))
	for i, a := range addrs {
		elems[i] = fmt.Sprintf("%s timeout %ds", a, secs)
	}
	if err := nft(fmt.Sprintf("add element inet %s %s { %s }\n", f.Table, names, strings.Join(elems, ", "))); err != nil {
		return fmt.Errorf("allowing resolved addresses for %s: %w", veth, err)
	}
	return nil
}

func nft(script string) error {
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("nft: %w: %s (is the nftables package installed? scripts/up.sh installs it)", err, strings.TrimSpace(out.String()))
	}
	return nil
}
