package network

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/warrenhq/warren/api"
)

// inNetns runs fn on a thread inside network namespace name: sockets it
// opens are the namespace's.
func inNetns(t *testing.T, name string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		// The thread is left locked: Go ends it with the goroutine, so
		// it never returns to the pool in the wrong namespace.
		ns, err := netns.GetFromPath(filepath.Join(NetnsDir, name))
		if err != nil {
			t.Errorf("opening netns %s: %v", name, err)
			return
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			t.Errorf("entering netns %s: %v", name, err)
			return
		}
		fn()
	}()
	<-done
}

// fakeUpstream answers A queries for the names in answers (and NXDOMAIN
// otherwise) on a loopback UDP port.
func fakeUpstream(t *testing.T, answers map[string]netip.Addr) string {
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
			a, ok := answers[strings.TrimSuffix(q.Name.String(), ".")]
			rh := dnsmessage.Header{ID: h.ID, Response: true, RecursionAvailable: true}
			if !ok {
				rh.RCode = dnsmessage.RCodeNameError
			}
			b := dnsmessage.NewBuilder(nil, rh)
			b.StartQuestions()
			b.Question(q)
			if ok && q.Type == dnsmessage.TypeA {
				b.StartAnswers()
				b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 30}, dnsmessage.AResource{A: a.As4()})
			}
			out, _ := b.Finish()
			pc.WriteTo(out, from)
		}
	}()
	return pc.LocalAddr().String()
}

// query asks server for name's A record and returns the answer's rcode
// and addresses.
func query(server, name string) (dnsmessage.RCode, []netip.Addr, error) {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, RecursionDesired: true})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name + "."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	msg, _ := b.Finish()
	c, err := net.DialTimeout("udp4", server, time.Second)
	if err != nil {
		return 0, nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write(msg); err != nil {
		return 0, nil, err
	}
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	if err != nil {
		return 0, nil, err
	}
	var p dnsmessage.Parser
	h, err := p.Start(buf[:n])
	if err != nil {
		return 0, nil, err
	}
	addrs, _ := answerAddrs(buf[:n])
	return h.RCode, addrs, nil
}

// httpGet gets path from addr over a connection dialled by the calling
// thread.
func httpGet(addr, path string) (string, error) {
	c, err := net.DialTimeout("tcp4", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// TestServices attaches a link's services under a Linux network namespace
// (the sandbox side is the kernel's stack here, not gVisor's): the
// resolver and proxy answer at api.ServiceAddr, names outside the policy
// get NXDOMAIN, allowed answers reach the firewall, and a host service on
// every address stays out of reach.
func TestServices(t *testing.T) {
	RequiresRoot(t)
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("needs nft")
	}
	// An allowlist turns IPv4 forwarding on; leave the host as it was.
	if fwd, err := os.ReadFile(ipForward); err == nil {
		t.Cleanup(func() { os.WriteFile(ipForward, fwd, 0o644) })
	}
	l := testLink(t)
	fw := Firewall{Table: "warren_test_" + randHex(t, 4), Subnet: "10.214.0.0/24", Prefix: "wt-"}
	t.Cleanup(func() { fw.Remove() })
	if err := fw.Ensure(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Teardown(l) })
	if err := Setup(l); err != nil {
		t.Fatal(err)
	}
	up := fakeUpstream(t, map[string]netip.Addr{"allowed.test": netip.MustParseAddr("192.0.2.44"), "other.test": netip.MustParseAddr("192.0.2.45")})
	s := &Services{
		Firewall: fw,
		Resolver: &Resolver{Upstreams: []string{up}},
		Proxy: func(id string) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "proxy of %s: %s", id, r.URL.Path) })
		},
	}
	t.Cleanup(s.Close)
	ctx := context.Background()
	if err := s.Attach(ctx, "sb-test", api.Network{Egress: []any{"allowed.test"}}, l); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	// Attaching again replaces it (a daemon restart does that).
	if err := s.Attach(ctx, "sb-test", api.Network{Egress: []any{"allowed.test"}}, l); err != nil {
		t.Fatalf("Attach again: %v", err)
	}

	// A host service listening on every address, unmarked.
	hostSvc, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostSvc.Close()
	go func() {
		for {
			c, err := hostSvc.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("host service"))
			c.Close()
		}
	}()
	hostPort := hostSvc.Addr().(*net.TCPAddr).Port

	svc := api.ServiceAddr + ":53"
	inNetns(t, l.Netns, func() {
		rcode, addrs, err := query(svc, "allowed.test")
		if err != nil || rcode != dnsmessage.RCodeSuccess || len(addrs) != 1 || addrs[0].String() != "192.0.2.44" {
			t.Errorf("allowed name: got %v %v %v, want success with 192.0.2.44", rcode, addrs, err)
		}
		rcode, addrs, err = query(svc, "other.test")
		if err != nil || rcode != dnsmessage.RCodeNameError || len(addrs) != 0 {
			t.Errorf("a name outside the policy: got %v %v %v, want NXDOMAIN", rcode, addrs, err)
		}
		// net/http dials on other threads (the host's namespace): speak
		// HTTP over a connection made on this one.
		if got, err := httpGet(api.ServiceAddr+":80", "/cred/path"); err != nil || got != "proxy of sb-test: /cred/path" {
			t.Errorf("proxy: got %q, %v", got, err)
		}
		c, err := net.DialTimeout("tcp4", fmt.Sprintf("%s:%d", l.Addrs.Host, hostPort), 500*time.Millisecond)
		if err == nil {
			c.Close()
			t.Errorf("a host service on every address was reachable from the sandbox")
		}
	})
	_, _, names := fw.objectNames(l.Veth)
	out, _ := exec.Command("nft", "list", "set", "inet", fw.Table, names).CombinedOutput()
	if !strings.Contains(string(out), "192.0.2.44") || strings.Contains(string(out), "192.0.2.45") {
		t.Errorf("resolved set: got %s, want 192.0.2.44 only", out)
	}

	// Open answers every name; the old answers are gone.
	if err := s.Update(ctx, "sb-test", api.Network{Egress: "open"}); err != nil {
		t.Fatalf("Update: %v", err)
	}
	inNetns(t, l.Netns, func() {
		if rcode, _, err := query(svc, "other.test"); err != nil || rcode != dnsmessage.RCodeSuccess {
			t.Errorf("open: got %v %v, want success", rcode, err)
		}
	})

	if err := s.Detach(l); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	inNetns(t, l.Netns, func() {
		if _, _, err := query(svc, "allowed.test"); err == nil {
			t.Errorf("the resolver still answers after Detach")
		}
	})
	if out, _ := exec.Command("nft", "list", "table", "inet", fw.Table).CombinedOutput(); strings.Contains(string(out), l.Veth) {
		t.Errorf("after Detach the firewall still names %s:\n%s", l.Veth, out)
	}
}
