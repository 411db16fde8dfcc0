package network

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/warrenhq/warren/api"
)

// RequiresRoot skips t unless it runs as root.
func RequiresRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}

func randHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func TestPoolAddrs(t *testing.T) {
	tests := []struct {
		subnet        string
		i             int
		host, sandbox string
	}{
		{"10.201.0.0/16", 0, "10.201.0.1", "10.201.0.2"},
		{"10.201.0.0/16", 1, "10.201.0.5", "10.201.0.6"},
		{"10.201.0.0/16", 63, "10.201.0.253", "10.201.0.254"},
		{"10.201.0.0/16", 64, "10.201.1.1", "10.201.1.2"},
		{"10.201.0.0/16", 16383, "10.201.255.253", "10.201.255.254"},
		{"10.214.0.0/24", 0, "10.214.0.1", "10.214.0.2"},
		{"10.214.0.0/24", 10, "10.214.0.41", "10.214.0.42"},
		// The subnet is masked: host bits in it are ignored.
		{"10.214.0.77/24", 1, "10.214.0.5", "10.214.0.6"},
		{"172.16.0.0/12", 1 << 16, "172.20.0.1", "172.20.0.2"},
	}
	for _, tt := range tests {
		p, err := NewPool(tt.subnet)
		if err != nil {
			t.Fatalf("NewPool(%q): %v", tt.subnet, err)
		}
		got, err := p.Addrs(tt.i)
		if err != nil {
			t.Errorf("%s Addrs(%d): %v", tt.subnet, tt.i, err)
			continue
		}
		want := Addrs{Host: netip.MustParseAddr(tt.host), Sandbox: netip.MustParseAddr(tt.sandbox), Bits: 30}
		if got != want {
			t.Errorf("%s Addrs(%d): got %v, want %v", tt.subnet, tt.i, got, want)
		}
	}
}

func TestPoolSize(t *testing.T) {
	tests := []struct {
		subnet string
		want   int
	}{
		{"10.214.0.0/24", 64},
		{"10.214.0.0/23", 128},
		{"10.201.0.0/16", 16384},
		{"10.0.0.0/8", 1 << 22},
	}
	for _, tt := range tests {
		p, err := NewPool(tt.subnet)
		if err != nil {
			t.Fatalf("NewPool(%q): %v", tt.subnet, err)
		}
		if got := p.Size(); got != tt.want {
			t.Errorf("%s Size: got %v, want %v", tt.subnet, got, tt.want)
		}
	}
}

func TestPoolOutOfRange(t *testing.T) {
	p, err := NewPool("10.214.0.0/24")
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{-1, 64, 1000} {
		_, err := p.Addrs(i)
		if !errors.Is(err, api.ErrQuota) {
			t.Errorf("Addrs(%d): got %v, want %v", i, err, api.ErrQuota)
		}
	}
}

func TestNewPoolInvalid(t *testing.T) {
	for _, subnet := range []string{"", "10.214.0.0", "10.214.0.0/25", "10.214.0.0/30", "fd00::/64", "not a subnet", "300.1.1.0/24"} {
		_, err := NewPool(subnet)
		if !errors.Is(err, api.ErrInvalid) {
			t.Errorf("NewPool(%q): got %v, want %v", subnet, err, api.ErrInvalid)
		}
	}
}

func TestLinkNetnsPath(t *testing.T) {
	l := Link{Netns: "warren-sb-abc"}
	if got, want := l.NetnsPath(), "/run/warren/netns/warren-sb-abc"; got != want {
		t.Errorf("got %v, want %v", got, want)
	}
}

// testLink is a link on a test-only subnet with names no daemon uses (not
// VethPrefix, which the daemon's firewall matches).
func testLink(t *testing.T) Link {
	t.Helper()
	p, err := NewPool("10.214.0.0/24")
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	rand.Read(b)
	addrs, err := p.Addrs(int(b[0]) % p.Size()) // runs of this test at once rarely collide
	if err != nil {
		t.Fatal(err)
	}
	suffix := randHex(t, 4)
	return Link{Netns: "warren-test-" + suffix, Veth: "wt-" + suffix, Addrs: addrs}
}

func TestSetupTeardown(t *testing.T) {
	RequiresRoot(t)
	l := testLink(t)
	t.Cleanup(func() { Teardown(l) })

	if err := Setup(l); err != nil {
		t.Fatalf("Setup: %v", err)
	}
	if !Exists(l) {
		t.Fatalf("Exists after Setup: got false, want true")
	}

	host, err := netlink.LinkByName(l.Veth)
	if err != nil {
		t.Fatalf("host veth %s: %v", l.Veth, err)
	}
	if host.Attrs().Flags&net.FlagUp == 0 {
		t.Errorf("host veth %s is down", l.Veth)
	}
	if got, want := linkAddrs(t, netlink.AddrList, host), []string{l.Addrs.Host.String() + "/30"}; !slices.Equal(got, want) {
		t.Errorf("host veth addresses: got %v, want %v", got, want)
	}

	checkInside := func() {
		t.Helper()
		ns, err := netns.GetFromPath(l.NetnsPath())
		if err != nil {
			t.Fatalf("opening netns %s: %v", l.NetnsPath(), err)
		}
		defer ns.Close()
		h, err := netlink.NewHandleAt(ns)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		eth, err := h.LinkByName("eth0")
		if err != nil {
			t.Fatalf("eth0 inside: %v", err)
		}
		if eth.Attrs().Flags&net.FlagUp == 0 {
			t.Errorf("eth0 inside is down")
		}
		if got, want := linkAddrs(t, h.AddrList, eth), []string{l.Addrs.Sandbox.String() + "/30"}; !slices.Equal(got, want) {
			t.Errorf("eth0 addresses: got %v, want %v", got, want)
		}
		lo, err := h.LinkByName("lo")
		if err != nil {
			t.Fatalf("lo inside: %v", err)
		}
		if lo.Attrs().Flags&net.FlagUp == 0 {
			t.Errorf("lo inside is down")
		}
		routes, err := h.RouteList(eth, netlink.FAMILY_V4)
		if err != nil {
			t.Fatal(err)
		}
		var gws []string
		for _, r := range routes {
			if r.Dst == nil || r.Dst.String() == "0.0.0.0/0" {
				gws = append(gws, r.Gw.String())
			}
		}
		if want := []string{l.Addrs.Host.String()}; !slices.Equal(gws, want) {
			t.Errorf("default routes inside: got %v, want %v", gws, want)
		}
	}
	checkInside()

	// Again, as before a restore: nothing changes and nothing fails.
	for range 2 {
		if err := ConfigureInside(l); err != nil {
			t.Fatalf("ConfigureInside again: %v", err)
		}
		checkInside()
	}

	for range 2 {
		if err := Teardown(l); err != nil {
			t.Fatalf("Teardown: %v", err)
		}
		if Exists(l) {
			t.Errorf("Exists after Teardown: got true, want false")
		}
		if _, err := netlink.LinkByName(l.Veth); err == nil {
			t.Errorf("veth %s still there after Teardown", l.Veth)
		}
	}
}

// TestLegacyNetns: a namespace an earlier Warren made under /var/run/netns
// (where `ip netns add` can hide it) is still found, configured and removed.
func TestLegacyNetns(t *testing.T) {
	RequiresRoot(t)
	l := testLink(t)
	t.Cleanup(func() { Teardown(l) })
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // left locked: the thread ends with the goroutine
		orig, err := netns.Get()
		if err != nil {
			done <- err
			return
		}
		ns, err := netns.NewNamed(l.Netns) // iproute2's directory
		if err == nil {
			ns.Close()
		}
		done <- errors.Join(err, netns.Set(orig))
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, want := l.NetnsPath(), filepath.Join(legacyNetnsDir, l.Netns); got != want {
		t.Errorf("NetnsPath of a legacy namespace: got %s, want %s", got, want)
	}
	if !Exists(l) {
		t.Errorf("Exists of a legacy namespace: got false")
	}
	if err := Teardown(l); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	if Exists(l) || fileExists(filepath.Join(legacyNetnsDir, l.Netns)) {
		t.Errorf("the legacy namespace is still there after Teardown")
	}
}

func TestSetupFailsCleanly(t *testing.T) {
	RequiresRoot(t)
	l := testLink(t)
	l.Veth = "this-name-is-far-too-long-for-linux"
	t.Cleanup(func() { Teardown(l) })
	if err := Setup(l); err == nil {
		t.Fatal("Setup with a bad veth name: got nil, want an error")
	}
	if Exists(l) {
		t.Errorf("Setup failed but left network namespace %s", l.Netns)
	}
}

func linkAddrs(t *testing.T, list func(netlink.Link, int) ([]netlink.Addr, error), l netlink.Link) []string {
	t.Helper()
	as, err := list(l, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range as {
		out = append(out, a.IPNet.String())
	}
	return out
}

func TestFirewall(t *testing.T) {
	RequiresRoot(t)
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("needs nft")
	}
	fw := Firewall{Table: "warren_test_" + randHex(t, 4), Subnet: "10.214.0.0/24", Prefix: "wt-"}
	t.Cleanup(func() { fw.Remove() })

	list := func() (string, error) {
		out, err := exec.Command("nft", "list", "table", "inet", fw.Table).CombinedOutput()
		return string(out), err
	}
	for range 2 {
		if err := fw.Ensure(); err != nil {
			t.Fatalf("Ensure: %v", err)
		}
		out, err := list()
		if err != nil {
			t.Fatalf("nft list table: %v: %s", err, out)
		}
		for _, want := range []string{
			"chain input", "chain forward", "chain prerouting", "chain postrouting", "map egress",
			`iifname "wt-*" ip saddr 10.214.0.0/24 ct state established,related accept`,
			`iifname "wt-*" ip saddr 10.214.0.0/24 counter packets`,
			`oifname "wt-*" ip daddr 10.214.0.0/24 counter packets`,
			`iifname "wt-*" oifname "wt-*" counter packets`,
			`socket mark 0x57524e01 accept`,
			`ip daddr 169.254.64.1 tcp dport 80 redirect to :49954`,
			`ip saddr 10.214.0.0/24 oifname != "wt-*" masquerade`,
			`ip daddr 10.214.0.0/24 iifname != "lo" iifname != "wt-*" counter packets`,
		} {
			if !strings.Contains(out, want) {
				t.Errorf("table after Ensure has no %q:\n%s", want, out)
			}
		}
		// Ensure replaces the table: the rules are not doubled.
		if got := strings.Count(out, "ct state established,related accept"); got != 3 {
			t.Errorf("established rules: got %v, want 3:\n%s", got, out)
		}
	}

	// Per-sandbox policies.
	veth := "wt-" + randHex(t, 4)
	_, nets, names := fw.objectNames(veth)
	list2 := func() string {
		out, err := list()
		if err != nil {
			t.Fatalf("nft list table: %v: %s", err, out)
		}
		return out
	}
	p, err := ParseEgress([]any{"10.9.0.0/16", "allowed.test"})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := fw.Apply(veth, p); err != nil {
			t.Fatalf("Apply: %v", err)
		}
	}
	out := list2()
	for _, want := range []string{`"` + veth + `" : jump e-`, "10.9.0.0/16", "ip daddr @" + nets + " accept", "ip daddr @" + names + " accept"} {
		if !strings.Contains(out, want) {
			t.Errorf("after Apply: no %q:\n%s", want, out)
		}
	}
	if err := fw.AllowResolved(veth, []netip.Addr{netip.MustParseAddr("192.0.2.9")}, time.Minute); err != nil {
		t.Fatalf("AllowResolved: %v", err)
	}
	if out := list2(); !strings.Contains(out, "192.0.2.9 timeout 1m") {
		t.Errorf("after AllowResolved: no 192.0.2.9 with its timeout:\n%s", out)
	}
	// Open replaces the list.
	if err := fw.Apply(veth, Policy{Open: true}); err != nil {
		t.Fatalf("Apply open: %v", err)
	}
	if out := list2(); strings.Contains(out, "10.9.0.0/16") || strings.Contains(out, "192.0.2.9") || !strings.Contains(out, "jump e-") {
		t.Errorf("after Apply open: the list is still there, or no jump:\n%s", out)
	}
	// None, or Clear, removes everything; twice is fine.
	if err := fw.Apply(veth, Policy{}); err != nil {
		t.Fatalf("Apply none: %v", err)
	}
	if err := fw.Clear(veth); err != nil {
		t.Fatalf("Clear again: %v", err)
	}
	if out := list2(); strings.Contains(out, veth) || strings.Contains(out, nets) || strings.Contains(out, names) {
		t.Errorf("after Clear: objects of %s remain:\n%s", veth, out)
	}

	for range 2 {
		if err := fw.Remove(); err != nil {
			t.Fatalf("Remove: %v", err)
		}
		if out, err := list(); err == nil {
			t.Errorf("table %s still there after Remove:\n%s", fw.Table, out)
		}
	}
	// Clear on a table that is gone is fine.
	if err := fw.Clear(veth); err != nil {
		t.Errorf("Clear without a table: %v", err)
	}
}
