package network

import (
	"errors"
	"net/netip"
	"os"
	"reflect"
	"testing"

	"github.com/warrenhq/warren/api"
)

func TestParseEgress(t *testing.T) {
	pfx := netip.MustParsePrefix
	tests := []struct {
		name   string
		in     any
		want   Policy
		egress any
	}{
		{"nil", nil, Policy{}, "none"},
		{"none", "none", Policy{}, "none"},
		{"open", "open", Policy{Open: true}, "open"},
		{"empty list", []any{}, Policy{}, "none"},
		{"cidr and name", []any{"10.1.2.0/24", "Example.COM."},
			Policy{Nets: []netip.Prefix{pfx("10.1.2.0/24")}, Domains: []string{"example.com"}},
			[]any{"10.1.2.0/24", "example.com"}},
		{"address is a /32, cidr masked", []any{"192.0.2.7", "10.1.2.3/16"},
			Policy{Nets: []netip.Prefix{pfx("192.0.2.7/32"), pfx("10.1.0.0/16")}},
			[]any{"192.0.2.7/32", "10.1.0.0/16"}},
		{"duplicates once", []any{"a.example", "A.example", "10.0.0.0/8", "10.0.0.0/8"},
			Policy{Nets: []netip.Prefix{pfx("10.0.0.0/8")}, Domains: []string{"a.example"}},
			[]any{"10.0.0.0/8", "a.example"}},
		{"wildcard", []any{"*.example.org"}, Policy{Domains: []string{"*.example.org"}}, []any{"*.example.org"}},
		{"strings", []string{"allowed.test"}, Policy{Domains: []string{"allowed.test"}}, []any{"allowed.test"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseEgress(tt.in)
			if err != nil {
				t.Fatalf("ParseEgress(%v): %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			if e := got.Egress(); !reflect.DeepEqual(e, tt.egress) {
				t.Errorf("Egress(): got %#v, want %#v", e, tt.egress)
			}
			// What Egress() gives parses to the same policy.
			again, err := ParseEgress(got.Egress())
			if err != nil || !reflect.DeepEqual(again, got) {
				t.Errorf("round trip: got %+v, %v, want %+v", again, err, got)
			}
		})
	}
}

func TestParseEgressInvalid(t *testing.T) {
	long := make([]any, MaxEgressEntries+1)
	for i := range long {
		long[i] = "10.0.0.0/8"
	}
	for _, in := range []any{
		"closed", "all", 3, map[string]any{}, []any{""}, []any{3}, []any{"10.0.0.0/33"}, []any{"10.1"},
		[]any{"300.1.1.1"}, []any{"fd00::/8"}, []any{"::1"}, []any{"exa mple.com"}, []any{"-bad.example"},
		[]any{"a.*.example"}, []any{"*"}, []any{"under_score.example"}, []any{"http://example.com/"}, long,
	} {
		if _, err := ParseEgress(in); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("ParseEgress(%#v): got %v, want ErrInvalid", in, err)
		}
	}
}

func TestAllowsName(t *testing.T) {
	p := Policy{Domains: []string{"example.com", "*.svc.example"}}
	for name, want := range map[string]bool{
		"example.com": true, "EXAMPLE.com.": true, "www.example.com": false, "other.com": false,
		"a.svc.example": true, "a.b.svc.example": true, "svc.example": false, "xsvc.example": false,
	} {
		if got := p.AllowsName(name); got != want {
			t.Errorf("AllowsName(%q): got %v, want %v", name, got, want)
		}
	}
	if !(Policy{Open: true}).AllowsName("anything.example") {
		t.Errorf("open: got false for a name, want true")
	}
	if (Policy{}).AllowsName("example.com") {
		t.Errorf("none: got true, want false")
	}
}

func TestHostUpstreams(t *testing.T) {
	p := t.TempDir() + "/resolv.conf"
	os.WriteFile(p, []byte("# comment\nsearch example\nnameserver 192.0.2.53\nnameserver fd00::53\nnameserver bogus\noptions ndots:1\n"), 0o644)
	got := HostUpstreams(p)
	if want := []string{"192.0.2.53:53", "[fd00::53]:53"}; !reflect.DeepEqual(got, want) {
		t.Errorf("HostUpstreams: got %v, want %v", got, want)
	}
	if got := HostUpstreams(p + ".missing"); got != nil {
		t.Errorf("a missing file: got %v, want none", got)
	}
}
