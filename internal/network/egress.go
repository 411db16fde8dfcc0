package network

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"github.com/warrenhq/warren/api"
)

// Policy is a sandbox's egress policy: what it may reach beyond the agent
// channel and the daemon's own services (DNS, credential proxy), which it
// always reaches.
//
//	none  (the zero Policy) nothing
//	open  anything but the host and other sandboxes, NATed through the host
//	list  the addresses in Nets, and the addresses the daemon's resolver
//	      answered for a name in Domains (added as they resolve)
type Policy struct {
	Open    bool
	Nets    []netip.Prefix
	Domains []string // lower case; "*.example.com" for every name under example.com
}

// None reports whether p lets nothing out.
func (p Policy) None() bool { return !p.Open && len(p.Nets) == 0 && len(p.Domains) == 0 }

// Forwards reports whether p lets anything through the host (forwarding and
// NAT are needed).
func (p Policy) Forwards() bool { return !p.None() }

// MaxEgressEntries bounds an allowlist.
const MaxEgressEntries = 256

var labelPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ParseEgress parses the egress field of a network policy: nil or "none",
// "open", or a list of IPv4 addresses, IPv4 CIDRs and domain names
// ("example.com", or "*.example.com" for the names under it). Errors wrap
// api.ErrInvalid and say what to fix.
func ParseEgress(v any) (Policy, error) {
	bad := func(format string, args ...any) (Policy, error) {
		return Policy{}, fmt.Errorf("network.egress: "+format+": %w", append(args, api.ErrInvalid)...)
	}
	switch x := v.(type) {
	case nil:
		return Policy{}, nil
	case string:
		switch x {
		case "none", "":
			return Policy{}, nil
		case "open":
			return Policy{Open: true}, nil
		}
		return bad(`%q: use "none", "open", or a list of CIDRs and domain names like ["10.1.0.0/16", "example.com"]`, x)
	case []string:
		items := make([]any, len(x))
		for i, s := range x {
			items[i] = s
		}
		return ParseEgress(items)
	case []any:
		if len(x) > MaxEgressEntries {
			return bad("%d entries; at most %d", len(x), MaxEgressEntries)
		}
		var p Policy
		for _, item := range x {
			s, ok := item.(string)
			if !ok {
				return bad("entry %v: want a string (a CIDR or a domain name)", item)
			}
			if err := p.add(strings.TrimSpace(s)); err != nil {
				return Policy{}, fmt.Errorf("network.egress: %w", err)
			}
		}
		if p.None() {
			// An empty list lets nothing out: the same as "none".
			return Policy{}, nil
		}
		return p, nil
	}
	return bad(`want "none", "open" or a list of strings, not %T`, v)
}

func (p *Policy) add(s string) error {
	if s == "" {
		return fmt.Errorf("an empty entry: %w", api.ErrInvalid)
	}
	if strings.ContainsAny(s, ":/") || isDigits(strings.ReplaceAll(s, ".", "")) {
		// An address or a CIDR.
		var pfx netip.Prefix
		var err error
		if strings.Contains(s, "/") {
			pfx, err = netip.ParsePrefix(s)
		} else {
			var a netip.Addr
			if a, err = netip.ParseAddr(s); err == nil {
				pfx = netip.PrefixFrom(a, a.BitLen())
			}
		}
		if err != nil {
			return fmt.Errorf("%q is neither a CIDR (like 10.1.0.0/16) nor an address: %w", s, api.ErrInvalid)
		}
		if !pfx.Addr().Is4() {
			return fmt.Errorf("%q: sandboxes have IPv4 only; give IPv4 addresses and CIDRs: %w", s, api.ErrInvalid)
		}
		pfx = pfx.Masked()
		if !slices.Contains(p.Nets, pfx) {
			p.Nets = append(p.Nets, pfx)
		}
		return nil
	}
	name := strings.TrimSuffix(strings.ToLower(s), ".")
	check := strings.TrimPrefix(name, "*.")
	if check == "" || len(check) > 253 {
		return fmt.Errorf("%q is not a domain name: %w", s, api.ErrInvalid)
	}
	for _, label := range strings.Split(check, ".") {
		if !labelPattern.MatchString(label) {
			return fmt.Errorf("%q is neither a CIDR nor a domain name (labels of letters, digits and '-'; a wildcard only as a leading \"*.\"): %w", s, api.ErrInvalid)
		}
	}
	if !slices.Contains(p.Domains, name) {
		p.Domains = append(p.Domains, name)
	}
	return nil
}

func isDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

// Egress is p in the form the API shows and stores: "none", "open", or the
// list of entries (CIDRs masked, names in lower case).
func (p Policy) Egress() any {
	switch {
	case p.Open:
		return "open"
	case p.None():
		return "none"
	}
	out := make([]any, 0, len(p.Nets)+len(p.Domains))
	for _, n := range p.Nets {
		out = append(out, n.String())
	}
	for _, d := range p.Domains {
		out = append(out, d)
	}
	return out
}

// AllowsName reports whether the daemon's resolver answers name for a
// sandbox under p: every name when open, the listed ones otherwise.
func (p Policy) AllowsName(name string) bool {
	if p.Open {
		return true
	}
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	for _, d := range p.Domains {
		if d == name {
			return true
		}
		if base, ok := strings.CutPrefix(d, "*."); ok && strings.HasSuffix(name, "."+base) {
			return true
		}
	}
	return false
}
