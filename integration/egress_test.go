package integration

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/client"
)

// outside is a network namespace the test makes to stand for the world
// beyond the host: a veth to the host (not a wv-* one) on a test subnet,
// with HTTP servers on addresses of its own.
type outside struct {
	ns    string
	veth  string
	host  netip.Addr   // the host's end
	addrs []netip.Addr // the namespace's addresses
}

func run(t testing.TB, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// newOutside makes the namespace and its link, removed when the test ends.
func newOutside(t *testing.T) *outside {
	t.Helper()
	suffix := randHex(4)
	b := make([]byte, 1)
	rand.Read(b)
	n := int(b[0]) % 250
	o := &outside{ns: "wtest-out-" + suffix, veth: "wo-" + suffix, host: netip.MustParseAddr(fmt.Sprintf("10.216.%d.1", n))}
	for _, last := range []int{2, 3} {
		o.addrs = append(o.addrs, netip.MustParseAddr(fmt.Sprintf("10.216.%d.%d", n, last)))
	}
	run(t, "ip", "netns", "add", o.ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", o.ns).Run() })
	run(t, "ip", "link", "add", o.veth, "type", "veth", "peer", "name", "eth0", "netns", o.ns)
	t.Cleanup(func() { exec.Command("ip", "link", "del", o.veth).Run() })
	run(t, "ip", "addr", "add", o.host.String()+"/24", "dev", o.veth)
	run(t, "ip", "link", "set", o.veth, "up")
	for _, a := range o.addrs {
		run(t, "ip", "-n", o.ns, "addr", "add", a.String()+"/24", "dev", "eth0")
	}
	run(t, "ip", "-n", o.ns, "link", "set", "eth0", "up")
	run(t, "ip", "-n", o.ns, "link", "set", "lo", "up")
	return o
}

// serve runs an HTTP server inside the namespace on addr:port answering
// "hello from ADDR to REMOTE".
func (o *outside) serve(t *testing.T, addr netip.Addr, port int) {
	t.Helper()
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// A thread of its own in the namespace, never returned to the
		// pool (Go ends it with this goroutine).
		runtime.LockOSThread()
		ns, err := netns.GetFromName(o.ns)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			ch <- result{err: err}
			return
		}
		ln, err := net.Listen("tcp4", netip.AddrPortFrom(addr, uint16(port)).String())
		ch <- result{ln, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("listening in %s: %v", o.ns, r.err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ap, _ := netip.ParseAddrPort(req.RemoteAddr)
		fmt.Fprintf(w, "hello from %s to %s", addr, ap.Addr())
	})}
	go srv.Serve(r.ln)
	t.Cleanup(func() { srv.Close() })
}

// hostService listens on every address of the host (as a careless host
// service, or a daemon API on 0.0.0.0, would) and returns its port.
func hostService(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "host service") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// fakeDNS answers A queries for names (NXDOMAIN for others) on loopback:
// the daemon's upstream resolver in these tests.
func fakeDNS(t *testing.T, names map[string]netip.Addr) string {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, err := p.Question()
			if err != nil {
				continue
			}
			a, ok := names[strings.TrimSuffix(q.Name.String(), ".")]
			rh := dnsmessage.Header{ID: h.ID, Response: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
			if !ok {
				rh.RCode = dnsmessage.RCodeNameError
			}
			b := dnsmessage.NewBuilder(nil, rh)
			b.StartQuestions()
			b.Question(q)
			if ok && q.Type == dnsmessage.TypeA {
				b.StartAnswers()
				b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60}, dnsmessage.AResource{A: a.As4()})
			}
			out, _ := b.Finish()
			pc.WriteTo(out, from)
		}
	}()
	return pc.LocalAddr().String()
}

// keepForwarding restores the host's IPv4 forwarding setting when the test
// ends: a policy that lets a sandbox out turns it on.
func keepForwarding(t *testing.T) {
	const p = "/proc/sys/net/ipv4/ip_forward"
	if b, err := os.ReadFile(p); err == nil {
		t.Cleanup(func() { os.WriteFile(p, b, 0o644) })
	}
}

// probeScript tries each target from inside a sandbox at once: "http:URL"
// gets the URL, "dns:NAME" resolves the name. It prints a JSON object of
// target to "ok: ..." or "err: ...".
const probeScript = `
import json, socket, sys, threading, urllib.request
res = {}
def probe(t):
    kind, _, what = t.partition(":")
    try:
        if kind == "dns":
            res[t] = "ok: " + socket.gethostbyname(what)
        else:
            with urllib.request.urlopen(what, timeout=4) as r:
                res[t] = "ok: " + r.read().decode()
    except Exception as e:
        res[t] = "err: " + repr(e)
ts = [threading.Thread(target=probe, args=(t,)) for t in sys.argv[1:]]
[t.start() for t in ts]
[t.join() for t in ts]
print(json.dumps(res))
`

// probeFrom runs probeScript in sandbox id.
func probeFrom(t *testing.T, c *client.Client, id string, targets ...string) map[string]string {
	t.Helper()
	res, err := c.Exec(ctxT(t), id, api.ExecRequest{Cmd: append([]string{"python3", "-c", probeScript}, targets...), TimeoutS: 30})
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	out := map[string]string{}
	if err := json.Unmarshal([]byte(res.Stdout), &out); err != nil {
		t.Fatalf("probe: %v: stdout %q stderr %q", err, res.Stdout, res.Stderr)
	}
	return out
}

// expect checks probe results: want maps a target to the prefix of its
// result ("ok: hello from X", "err").
func expect(t *testing.T, label string, got map[string]string, want map[string]string) {
	t.Helper()
	for target, prefix := range want {
		if !strings.HasPrefix(got[target], prefix) {
			t.Errorf("%s: %s: got %q, want %q...", label, target, got[target], prefix)
		}
	}
}

// sandboxAddrs returns a sandbox's own address and its gateway (the host
// side of its link).
func sandboxAddrs(t *testing.T, c *client.Client, id string) (self, gateway netip.Addr) {
	t.Helper()
	res, err := c.Exec(ctxT(t), id, api.ExecRequest{Cmd: []string{"python3", "-c",
		`import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(("192.0.2.1", 9)); print(s.getsockname()[0])`}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("finding the sandbox's address: %v %+v", err, res)
	}
	self = netip.MustParseAddr(strings.TrimSpace(res.Stdout))
	return self, self.Prev()
}

// TestNetworkEgress checks each egress policy against servers in a
// namespace the test made, and that the host and other sandboxes stay out
// of reach under all of them; a policy changes on a running sandbox, holds
// across a restore and a daemon restart.
func TestNetworkEgress(t *testing.T) {
	RequiresRoot(t)
	keepForwarding(t)
	o := newOutside(t)
	allowed, other := o.addrs[1], o.addrs[0]
	o.serve(t, allowed, 8080)
	o.serve(t, other, 8080)
	dns := fakeDNS(t, map[string]netip.Addr{"allowed.test": allowed, "other.test": other})
	hostPort := hostService(t)
	s := StartServerWith(t, map[string]any{"dns_upstream": dns})
	ctx := ctxT(t)
	c := s.Client

	urlOf := func(host string) string { return "http:http://" + host + ":8080/" }
	toAllowed, toOther := urlOf(allowed.String()), urlOf(other.String())
	byName, otherByName := urlOf("allowed.test"), urlOf("other.test")
	hostOutside := fmt.Sprintf("http:http://%s:%d/", o.host, hostPort)

	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatalf("create: %v\n%s", err, s.Log())
	}
	if sb.Network.Egress != "none" {
		t.Errorf("default egress: got %v, want none", sb.Network.Egress)
	}
	peer, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Network: &api.Network{Egress: "open"}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, err := c.StartJob(ctx, peer.ID, api.ExecRequest{Command: "python3 -m http.server 8081 --bind 0.0.0.0"}); err != nil {
		t.Fatal(err)
	}
	peerAddr, _ := sandboxAddrs(t, c, peer.ID)
	toPeer := fmt.Sprintf("http:http://%s:8081/", peerAddr)

	// Out of reach under every policy: the host (its side of the link,
	// its address toward the outside) and the other sandbox.
	never := func(label string) map[string]string {
		_, gw := sandboxAddrs(t, c, sb.ID)
		got := probeFrom(t, c, sb.ID, fmt.Sprintf("http:http://%s:%d/", gw, hostPort), hostOutside, toPeer)
		for target, res := range got {
			if !strings.HasPrefix(res, "err") {
				t.Errorf("%s: %s reachable: %q", label, target, res)
			}
		}
		return got
	}
	// The peer's server answers the host: a probe of it can succeed.
	if !waitFor(30*time.Second, func() bool {
		resp, err := http.Get("http://" + peerAddr.String() + ":8081/")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}) {
		t.Errorf("the peer's server does not answer the host")
	}

	t.Run("none", func(t *testing.T) {
		got := probeFrom(t, c, sb.ID, toAllowed, toOther, "dns:allowed.test")
		expect(t, "none", got, map[string]string{toAllowed: "err", toOther: "err", "dns:allowed.test": "err"})
		never("none")
	})

	t.Run("allowlist", func(t *testing.T) {
		sb2, err := c.SetNetwork(ctx, sb.ID, api.NetworkPatch{Egress: []any{allowed.String(), "allowed.test"}})
		if err != nil {
			t.Fatalf("PATCH network: %v", err)
		}
		want := []any{allowed.String() + "/32", "allowed.test"}
		if fmt.Sprint(sb2.Network.Egress) != fmt.Sprint(want) {
			t.Errorf("egress: got %v, want %v", sb2.Network.Egress, want)
		}
		got := probeFrom(t, c, sb.ID, toAllowed, toOther, byName, otherByName, "dns:allowed.test", "dns:other.test")
		expect(t, "allowlist", got, map[string]string{
			toAllowed: "ok: hello from " + allowed.String() + " to " + o.host.String(),
			toOther:   "err", byName: "ok: hello from " + allowed.String(), otherByName: "err",
			"dns:allowed.test": "ok: " + allowed.String(), "dns:other.test": "err",
		})
		never("allowlist")
	})

	t.Run("names only", func(t *testing.T) {
		if _, err := c.SetNetwork(ctx, sb.ID, api.NetworkPatch{Egress: []any{"allowed.test"}}); err != nil {
			t.Fatal(err)
		}
		// Before the name is resolved, its address is not allowed.
		got := probeFrom(t, c, sb.ID, toAllowed)
		expect(t, "before resolving", got, map[string]string{toAllowed: "err"})
		got = probeFrom(t, c, sb.ID, byName, toOther)
		expect(t, "names only", got, map[string]string{byName: "ok: hello from " + allowed.String(), toOther: "err"})
	})

	t.Run("open", func(t *testing.T) {
		if _, err := c.SetNetwork(ctx, sb.ID, api.NetworkPatch{Egress: "open"}); err != nil {
			t.Fatal(err)
		}
		got := probeFrom(t, c, sb.ID, toAllowed, toOther, otherByName)
		// NAT: the outside sees the host's address.
		expect(t, "open", got, map[string]string{
			toAllowed: "ok: hello from " + allowed.String() + " to " + o.host.String(),
			toOther:   "ok: hello from " + other.String(), otherByName: "ok: hello from " + other.String(),
		})
		never("open")
	})

	t.Run("bad input", func(t *testing.T) {
		for _, e := range []any{"closed", []any{"10.0.0.0/33"}, []any{"bad name.test"}, []any{"fd00::/8"}, 5} {
			if _, err := c.SetNetwork(ctx, sb.ID, api.NetworkPatch{Egress: e}); !errors.Is(err, client.ErrInvalid) {
				t.Errorf("PATCH egress %v: got %v, want invalid", e, err)
			}
			if _, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Network: &api.Network{Egress: e}}); !errors.Is(err, client.ErrInvalid) {
				t.Errorf("create with egress %v: got %v, want invalid", e, err)
			}
		}
		if got, _ := c.GetSandbox(ctx, sb.ID); got.Network.Egress != "open" {
			t.Errorf("after bad PATCHes: egress %v, want open unchanged", got.Network.Egress)
		}
		if _, err := c.SetNetwork(ctx, "sb-nonexistent0", api.NetworkPatch{Egress: "none"}); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("PATCH a missing sandbox: got %v, want not_found", err)
		}
		if sbs, _ := c.ListSandboxes(ctx, client.ListOptions{}); len(sbs) != 2 {
			t.Errorf("bad creates left sandboxes: %d, want 2", len(sbs))
		}
	})

	t.Run("after restore and restart", func(t *testing.T) {
		if _, err := c.SetNetwork(ctx, sb.ID, api.NetworkPatch{Egress: []any{"allowed.test"}}); err != nil {
			t.Fatal(err)
		}
		before, _ := sandboxAddrs(t, c, sb.ID)
		sn, err := c.SnapshotSandbox(ctx, sb.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.RevertSandbox(ctx, sb.ID, sn.ID); err != nil {
			t.Fatalf("revert: %v", err)
		}
		after, _ := sandboxAddrs(t, c, sb.ID)
		if after == before {
			t.Logf("the restore kept address %s", after)
		}
		got := probeFrom(t, c, sb.ID, byName, toOther)
		expect(t, "after a revert", got, map[string]string{byName: "ok: hello from " + allowed.String(), toOther: "err"})
		never("after a revert")

		s.Stop()
		s.Start()
		c = s.Client
		got = probeFrom(t, c, sb.ID, byName, toOther)
		expect(t, "after a daemon restart", got, map[string]string{byName: "ok: hello from " + allowed.String(), toOther: "err"})
		never("after a daemon restart")
	})
}

// waitFor polls cond until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return cond()
}
