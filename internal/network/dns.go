package network

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// Resolver is the DNS resolver the daemon runs for its sandboxes: every
// sandbox's resolv.conf names api.ServiceAddr, which the host redirects to
// the resolver on the host side of that sandbox's link. It answers a name
// the sandbox's policy allows by asking the host's resolvers, and adds the
// addresses of the answer to the sandbox's allowlist before it replies; a
// name the policy does not allow gets NXDOMAIN, and is never sent
// upstream (so DNS is no way out either).
type Resolver struct {
	// Upstreams are "host:port" resolvers, tried in order.
	Upstreams []string
	// Timeout bounds one upstream exchange; 2s when zero.
	Timeout time.Duration
	Log     *slog.Logger
}

// MinAllowTTL and MaxAllowTTL bound how long a resolved address stays in a
// sandbox's allowlist: connections made within that time are kept until
// they close, whatever the TTL.
const (
	MinAllowTTL = 5 * time.Minute
	MaxAllowTTL = 24 * time.Hour
)

// HostUpstreams reads the nameservers of a resolv.conf, as "ip:53".
func HostUpstreams(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "nameserver" {
			if a, err := netip.ParseAddr(fields[1]); err == nil {
				out = append(out, netip.AddrPortFrom(a.WithZone(""), 53).String())
			}
		}
	}
	return out
}

// dnsSandbox is what the resolver serves one sandbox by.
type dnsSandbox struct {
	// client is the only address queries are answered for.
	client netip.Addr
	policy func() Policy
	// allow adds the addresses of an answer to the sandbox's allowlist.
	allow func([]netip.Addr, time.Duration) error
}

type dnsServer struct {
	udp  net.PacketConn
	tcp  net.Listener
	wg   sync.WaitGroup
	once sync.Once
}

func (s *dnsServer) Close() error {
	var err error
	s.once.Do(func() {
		err = errors.Join(s.udp.Close(), s.tcp.Close())
		s.wg.Wait()
	})
	return err
}

// serve starts the resolver of one sandbox on addr:DNSPort (UDP and TCP).
func (r *Resolver) serve(addr netip.Addr, sb dnsSandbox) (io.Closer, error) {
	hostPort := netip.AddrPortFrom(addr, DNSPort).String()
	udp, err := listenMarked().ListenPacket(context.Background(), "udp4", hostPort)
	if err != nil {
		return nil, fmt.Errorf("DNS resolver on %s: %w", hostPort, err)
	}
	tcp, err := listenMarked().Listen(context.Background(), "tcp4", hostPort)
	if err != nil {
		udp.Close()
		return nil, fmt.Errorf("DNS resolver on %s: %w", hostPort, err)
	}
	s := &dnsServer{udp: udp, tcp: tcp}
	s.wg.Add(2)
	go func() { defer s.wg.Done(); r.serveUDP(udp, sb) }()
	go func() { defer s.wg.Done(); r.serveTCP(tcp, sb) }()
	return s, nil
}

// maxInFlight bounds the queries of one sandbox answered at once.
const maxInFlight = 32

func (r *Resolver) serveUDP(conn net.PacketConn, sb dnsSandbox) {
	sem := make(chan struct{}, maxInFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		buf := make([]byte, 4096)
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			return
		}
		ua, ok := from.(*net.UDPAddr)
		if !ok || ua.AddrPort().Addr().Unmap() != sb.client {
			continue
		}
		select {
		case sem <- struct{}{}:
		default:
			continue // the sandbox will retry
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if resp := r.answer(buf[:n], sb, false); resp != nil {
				conn.WriteTo(resp, from)
			}
		}()
	}
}

func (r *Resolver) serveTCP(ln net.Listener, sb dnsSandbox) {
	var wg sync.WaitGroup
	defer wg.Wait()
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	defer func() {
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		ta, ok := c.RemoteAddr().(*net.TCPAddr)
		if !ok || ta.AddrPort().Addr().Unmap() != sb.client {
			c.Close()
			continue
		}
		mu.Lock()
		conns[c] = true
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { mu.Lock(); delete(conns, c); mu.Unlock(); c.Close() }()
			for {
				c.SetDeadline(time.Now().Add(10 * time.Second))
				msg, err := readTCPMessage(c)
				if err != nil {
					return
				}
				resp := r.answer(msg, sb, true)
				if resp == nil {
					return
				}
				if err := writeTCPMessage(c, resp); err != nil {
					return
				}
			}
		}()
	}
}

func readTCPMessage(r io.Reader) ([]byte, error) {
	var l [2]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, err
	}
	msg := make([]byte, binary.BigEndian.Uint16(l[:]))
	_, err := io.ReadFull(r, msg)
	return msg, err
}

func writeTCPMessage(w io.Writer, msg []byte) error {
	b := make([]byte, 2+len(msg))
	binary.BigEndian.PutUint16(b, uint16(len(msg)))
	copy(b[2:], msg)
	_, err := w.Write(b)
	return err
}

// answer returns the reply to query, nil to drop it.
func (r *Resolver) answer(query []byte, sb dnsSandbox, tcp bool) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil || h.Response {
		return nil
	}
	q, err := p.Question()
	if err != nil {
		return reply(h, nil, dnsmessage.RCodeFormatError)
	}
	policy := sb.policy()
	if !policy.AllowsName(q.Name.String()) {
		return reply(h, &q, dnsmessage.RCodeNameError)
	}
	resp, err := r.exchange(query, tcp)
	if err != nil {
		r.logf("DNS query upstream failed", "name", q.Name.String(), "err", err)
		return reply(h, &q, dnsmessage.RCodeServerFailure)
	}
	if policy.Open {
		return resp
	}
	addrs, ttl := answerAddrs(resp)
	if len(addrs) > 0 {
		if err := sb.allow(addrs, min(max(ttl, MinAllowTTL), MaxAllowTTL)); err != nil {
			r.logf("allowing resolved addresses failed", "name", q.Name.String(), "err", err)
			return reply(h, &q, dnsmessage.RCodeServerFailure)
		}
	}
	return resp
}

func (r *Resolver) logf(msg string, args ...any) {
	if r.Log != nil {
		r.Log.Warn(msg, args...)
	}
}

// reply builds an answer with no records and rcode.
func reply(h dnsmessage.Header, q *dnsmessage.Question, rcode dnsmessage.RCode) []byte {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{
		ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired,
		RecursionAvailable: true, RCode: rcode,
	})
	if q != nil {
		b.StartQuestions()
		b.Question(*q)
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// answerAddrs returns the IPv4 addresses in resp's answers and their
// smallest TTL.
func answerAddrs(resp []byte) ([]netip.Addr, time.Duration) {
	var p dnsmessage.Parser
	if _, err := p.Start(resp); err != nil {
		return nil, 0
	}
	if err := p.SkipAllQuestions(); err != nil {
		return nil, 0
	}
	var addrs []netip.Addr
	ttl := time.Duration(-1)
	for {
		h, err := p.AnswerHeader()
		if err != nil {
			break
		}
		if h.Type != dnsmessage.TypeA || h.Class != dnsmessage.ClassINET {
			p.SkipAnswer()
			continue
		}
		a, err := p.AResource()
		if err != nil {
			break
		}
		addrs = append(addrs, netip.AddrFrom4(a.A))
		if t := time.Duration(h.TTL) * time.Second; ttl < 0 || t < ttl {
			ttl = t
		}
	}
	return addrs, max(ttl, 0)
}

// exchange sends query to the upstreams in turn and returns the first
// answer.
func (r *Resolver) exchange(query []byte, tcp bool) ([]byte, error) {
	if len(r.Upstreams) == 0 {
		return nil, errors.New("no upstream resolver: the host's resolv.conf names none; set dns_upstream")
	}
	timeout := r.Timeout
	if timeout == 0 {
		timeout = 2 * time.Second
	}
	var errs []error
	for _, up := range r.Upstreams {
		resp, err := exchangeOne(up, query, tcp, timeout)
		if err == nil {
			return resp, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

func exchangeOne(upstream string, query []byte, tcp bool, timeout time.Duration) ([]byte, error) {
	network := "udp"
	if tcp {
		network = "tcp"
	}
	c, err := net.DialTimeout(network, upstream, timeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if tcp {
		if err := writeTCPMessage(c, query); err != nil {
			return nil, err
		}
		return readTCPMessage(c)
	}
	if _, err := c.Write(query); err != nil {
		return nil, err
	}
	id := binary.BigEndian.Uint16(query)
	buf := make([]byte, 65535)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return nil, err
		}
		if n >= 12 && binary.BigEndian.Uint16(buf) == id {
			return buf[:n], nil
		}
	}
}

// listenMarked returns a ListenConfig whose sockets carry ServiceMark, the
// mark the firewall lets sandboxes reach.
func listenMarked() *net.ListenConfig {
	return &net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_MARK, ServiceMark)
		})
		return errors.Join(err, serr)
	}}
}
