package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/sandbox/netns"
)

// headerTimeout bounds how long a client may take to say where it goes.
const headerTimeout = 10 * time.Second

// serve starts the listeners in the gateway's namespace.
func (g *Gateway) serve() error {
	var proxy, transparent, dnsTCP net.Listener
	var dnsUDP net.PacketConn
	err := netns.Run(g.nsPath, func() (err error) {
		if proxy, err = net.Listen("tcp4", fmt.Sprintf(":%d", ProxyPort)); err != nil {
			return err
		}
		if transparent, err = net.Listen("tcp4", fmt.Sprintf(":%d", transparentPort)); err != nil {
			return err
		}
		if dnsTCP, err = net.Listen("tcp4", fmt.Sprintf(":%d", dnsPort)); err != nil {
			return err
		}
		dnsUDP, err = net.ListenPacket("udp4", fmt.Sprintf(":%d", dnsPort))
		return err
	})
	for _, l := range []net.Listener{proxy, transparent, dnsTCP} {
		if l != nil {
			g.listeners = append(g.listeners, l)
		}
	}
	if dnsUDP != nil {
		g.closers = append(g.closers, dnsUDP.Close)
	}
	if err != nil {
		return fmt.Errorf("egress gateway listeners: %w", err)
	}
	g.accept(proxy, g.serveProxy)
	g.accept(transparent, g.serveTransparent)
	handler := dns.HandlerFunc(g.serveDNS)
	for _, srv := range []*dns.Server{{Listener: dnsTCP, Handler: handler}, {PacketConn: dnsUDP, Handler: handler}} {
		g.closers = append(g.closers, srv.Shutdown)
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			if err := srv.ActivateAndServe(); err != nil && !errors.Is(err, net.ErrClosed) {
				g.log.Warn("egress DNS stub stopped", "err", err)
			}
		}()
	}
	return nil
}

// accept serves each connection of l, from a task bound to its address,
// on a goroutine of its own; connections from anyone else are refused.
func (g *Gateway) accept(l net.Listener, serve func(*binding, *net.TCPConn)) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			tc := c.(*net.TCPConn)
			s := g.bindingOf(c.RemoteAddr())
			if s == nil || !s.track(c) {
				reset(c)
				continue
			}
			g.wg.Add(1)
			go func() {
				defer g.wg.Done()
				defer s.untrack(c)
				serve(s, tc)
			}()
		}
	}()
}

// serveProxy serves one connection to the proxy port: CONNECT, or a
// request for an absolute http URL, which is forwarded alone
// (Connection: close).
func (g *Gateway) serveProxy(s *binding, c *net.TCPConn) {
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(headerTimeout))
	req, err := http.ReadRequest(br)
	if err != nil {
		reset(c)
		return
	}
	c.SetReadDeadline(time.Time{})
	t, err := proxyTarget(req)
	if err != nil {
		respond(c, http.StatusBadRequest, err.Error())
		return
	}
	if err := checkRequest(req); err != nil {
		respond(c, http.StatusForbidden, s.reasonOf(s.refused(t, err.Error()), err))
		return
	}
	up, to, idx, err := s.dial(context.Background(), t)
	if err != nil {
		status := http.StatusForbidden
		if !errors.Is(err, errRefused) {
			status = http.StatusBadGateway
		}
		respond(c, status, s.reasonOf(idx, err))
		return
	}
	if req.Method == http.MethodConnect {
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			reset(up)
			return
		}
		if t.name != "" && len(s.secretsFor(t.name)) > 0 && startsTLS(c, br) {
			s.intercept(c, br, up, t.name, to, idx)
			return
		}
		s.relay(c, br, up, to, idx)
		return
	}
	s.relay(c, onlyRequest(req, br), up, to, idx)
}

// errH2C refuses HTTP/2 in cleartext: its streams each name a host of
// their own, past the one check of the connection.
var errH2C = errors.New("HTTP/2 in cleartext (h2c) is not allowed through sandboxd's gateway: use HTTP/1.1, or TLS")

// checkRequest refuses what would carry requests the gateway does not see:
// an upgrade to h2c.
func checkRequest(req *http.Request) error {
	for _, v := range req.Header.Values("Upgrade") {
		if strings.Contains(strings.ToLower(v), "h2c") {
			return errH2C
		}
	}
	return nil
}

// onlyRequest is what is forwarded of a plain HTTP connection: req, read
// from br, alone, asking the server to close the connection after it. The
// client's next request then comes on a connection of its own, which is
// checked and recorded as this one was: on a kept-alive or pipelined
// connection it could name another host behind the same address. An
// upgraded connection (WebSocket) goes on raw after its request: it
// carries no further requests.
func onlyRequest(req *http.Request, br *bufio.Reader) io.Reader {
	if req.Header.Get("Upgrade") != "" {
		req.Header.Del("Proxy-Connection")
		req.Header.Del("Proxy-Authorization")
		return io.MultiReader(&requestReader{req: req}, br)
	}
	for _, h := range []string{"Proxy-Connection", "Proxy-Authorization", "Connection", "Keep-Alive"} {
		req.Header.Del(h)
	}
	req.Header.Set("Connection", "close")
	req.Close = true
	return &requestReader{req: req}
}

// proxyTarget is where a proxy request goes.
func proxyTarget(req *http.Request) (target, error) {
	hostport := req.Host
	if req.Method != http.MethodConnect {
		if req.URL == nil || req.URL.Scheme != "http" || req.URL.Host == "" {
			return target{}, fmt.Errorf("the proxy takes CONNECT, or an absolute http:// URL")
		}
		hostport = req.URL.Host
		if req.URL.Port() == "" {
			hostport += ":80"
		}
	}
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		return target{}, fmt.Errorf("%q is not HOST:PORT", hostport)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 {
		return target{}, fmt.Errorf("%q is not a port", portStr)
	}
	via := "connect"
	if req.Method != http.MethodConnect {
		via = "http"
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return target{via: "address", addr: a.Unmap(), port: uint16(port)}, nil
	}
	return target{name: strings.TrimSuffix(strings.ToLower(host), "."), via: via, port: uint16(port)}, nil
}

// requestReader writes a forwarded request in origin form.
type requestReader struct {
	req *http.Request
	r   io.Reader
}

func (rr *requestReader) Read(p []byte) (int, error) {
	if rr.r == nil {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(rr.req.Write(pw)) }()
		rr.r = pr
	}
	return rr.r.Read(p)
}

// serveTransparent serves a connection the rules redirected: the name is
// the TLS server name or the HTTP Host when the client sends one first,
// else the name the DNS stub answered the address for; the connection
// goes to the address the client asked for, and only if the name (or,
// without a name, the address) is allowed.
func (g *Gateway) serveTransparent(s *binding, c *net.TCPConn) {
	dst, err := originalDst(c)
	if err != nil {
		reset(c)
		return
	}
	g.transparent(s, c, dst)
}

// transparent serves a redirected connection that was going to dst.
func (g *Gateway) transparent(s *binding, c *net.TCPConn, dst netip.AddrPort) {
	br := bufio.NewReaderSize(c, 16<<10)
	c.SetReadDeadline(time.Now().Add(sniffTimeout))
	name, via := sniff(br)
	c.SetReadDeadline(time.Time{})
	if via == "h2c" {
		// HTTP/2 by prior knowledge: refused, and recorded.
		s.refused(target{via: via, addr: dst.Addr(), port: dst.Port()}, errH2C.Error())
		reset(c)
		return
	}
	if name == "" {
		if n, ok := s.nameOf(dst.Addr()); ok {
			name, via = n, "dns"
		} else {
			via = "address"
		}
	}
	t := target{name: name, via: via, addr: dst.Addr(), port: dst.Port()}
	fromClient := io.Reader(br)
	if via == "host" {
		// Plain HTTP: one request per connection, each checked.
		c.SetReadDeadline(time.Now().Add(headerTimeout))
		req, err := http.ReadRequest(br)
		c.SetReadDeadline(time.Time{})
		if err != nil {
			respond(c, http.StatusBadRequest, "sandboxd: "+err.Error())
			return
		}
		if err := checkRequest(req); err != nil {
			respond(c, http.StatusForbidden, s.reasonOf(s.refused(t, err.Error()), err))
			return
		}
		fromClient = onlyRequest(req, br)
	}
	up, to, idx, err := s.dial(context.Background(), t)
	if err != nil {
		if via == "host" {
			respond(c, http.StatusForbidden, s.reasonOf(idx, err))
			return
		}
		reset(c)
		return
	}
	if via == "sni" && len(s.secretsFor(name)) > 0 {
		s.intercept(c, br, up, name, to, idx)
		return
	}
	s.relay(c, fromClient, up, to, idx)
}

// reasonOf is what a refused client is told.
func (s *binding) reasonOf(idx int, err error) string {
	if idx >= 0 {
		if ev := s.log.Summary().Events; idx < len(ev) && ev[idx].Reason != "" {
			return "sandboxd: " + ev[idx].Reason
		}
	}
	return "sandboxd: " + err.Error()
}

// respond writes a short HTTP response and closes the connection.
func respond(c net.Conn, status int, msg string) {
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s\n",
		status, http.StatusText(status), len(msg)+1, msg)
	c.Close()
}

// relay copies between the client and upstream until both directions end,
// within the task's byte caps: past one, both connections are reset and
// the event says so.
func (s *binding) relay(client *net.TCPConn, fromClient io.Reader, up net.Conn, to target, idx int) {
	if !s.track(up) {
		reset(client)
		reset(up)
		return
	}
	defer s.untrack(up)
	defer s.underway(idx, to, client, up)()
	upTCP := up.(*net.TCPConn)
	var out, in int64
	var wg sync.WaitGroup
	copyDir := func(n *int64, dst *net.TCPConn, src io.Reader, isOut bool) {
		defer wg.Done()
		var err error
		*n, err = io.Copy(&capWriter{w: dst, s: s, out: isOut}, src)
		if errors.Is(err, errCap) {
			s.log.Cut(idx, s.overCaps())
			reset(client)
			reset(up)
			return
		}
		dst.CloseWrite()
	}
	wg.Add(2)
	go copyDir(&out, upTCP, fromClient, true)
	go copyDir(&in, client, up, false)
	wg.Wait()
	client.Close()
	up.Close()
	s.log.Moved(idx, out, in)
}

// errCap ends a copy past the task's byte cap.
var errCap = errors.New("byte cap reached")

type capWriter struct {
	w   io.Writer
	s   *binding
	out bool
}

func (cw *capWriter) Write(p []byte) (int, error) {
	if !cw.s.moved(int64(len(p)), cw.out) {
		return 0, errCap
	}
	return cw.w.Write(p)
}

// originalDst is where a redirected connection was going.
func originalDst(c *net.TCPConn) (netip.AddrPort, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var addr netip.AddrPort
	var sysErr error
	err = raw.Control(func(fd uintptr) {
		// SO_ORIGINAL_DST returns a sockaddr_in; IPv6Mreq is a 20-byte
		// buffer that holds it.
		mreq, err := unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
		if err != nil {
			sysErr = err
			return
		}
		b := mreq.Multiaddr
		addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{b[4], b[5], b[6], b[7]}), uint16(b[2])<<8|uint16(b[3]))
	})
	if err != nil {
		return netip.AddrPort{}, err
	}
	return addr, sysErr
}
