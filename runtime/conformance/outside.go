package conformance

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	goruntime "runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// outsideHost is a network namespace of the test's own, joined to the host
// by a veth pair, with a TCP listener in it: the "outside" that a sandbox
// must not reach. Its /30 comes from the documentation ranges of RFC 5737,
// skipping any that this host already uses.
type outsideHost struct {
	ns       string
	addr     string
	port     int
	lis      net.Listener
	accepts  atomic.Int32
	hostVeth string
}

func newOutsideHost(t *testing.T) *outsideHost {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		SkipOrFail(t, "ip(8) is missing (scripts/setup.sh installs iproute2)")
	}
	hostAddr, peerAddr, err := freeTestNet()
	if err != nil {
		t.Fatal(err)
	}
	id := os.Getpid() % 100000
	o := &outsideHost{ns: fmt.Sprintf("sbxout%d", id), hostVeth: fmt.Sprintf("sbxh%d", id), addr: peerAddr.String()}
	peer := fmt.Sprintf("sbxn%d", id)
	t.Cleanup(func() {
		if o.lis != nil {
			o.lis.Close()
		}
		_ = ip("link", "del", o.hostVeth)
		if err := ip("netns", "del", o.ns); err != nil {
			t.Errorf("remove the outside namespace: %v", err)
		}
	})
	steps := [][]string{
		{"netns", "add", o.ns},
		{"link", "add", o.hostVeth, "type", "veth", "peer", "name", peer},
		{"link", "set", peer, "netns", o.ns},
		{"addr", "add", hostAddr.String() + "/30", "dev", o.hostVeth},
		{"link", "set", o.hostVeth, "up"},
		{"-n", o.ns, "addr", "add", o.addr + "/30", "dev", peer},
		{"-n", o.ns, "link", "set", peer, "up"},
		{"-n", o.ns, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			t.Fatalf("ip %s: %v", strings.Join(s, " "), err)
		}
	}
	lis, err := listenIn("/run/netns/"+o.ns, o.addr+":0")
	if err != nil {
		t.Fatalf("listen in the outside namespace: %v", err)
	}
	o.lis = lis
	o.port = lis.Addr().(*net.TCPAddr).Port
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			o.accepts.Add(1)
			c.Close()
		}
	}()
	return o
}

// freeTestNet picks a /30 from the documentation ranges that overlaps no
// address or route of this host, and returns its two usable addresses.
func freeTestNet() (host, peer net.IP, err error) {
	var used []*net.IPNet
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, nil, err
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			used = append(used, n)
		}
	}
	routes, err := exec.Command("ip", "-4", "route", "show", "table", "all").Output()
	if err != nil {
		return nil, nil, err
	}
	for _, line := range strings.Split(string(routes), "\n") {
		dst, _, _ := strings.Cut(line, " ")
		if _, n, err := net.ParseCIDR(dst); err == nil && !n.IP.IsUnspecified() {
			used = append(used, n)
		}
	}
	for _, base := range []string{"198.51.100.200", "203.0.113.200", "192.0.2.200"} {
		host := net.ParseIP(base).To4()
		candidate := &net.IPNet{IP: host.Mask(net.CIDRMask(30, 32)), Mask: net.CIDRMask(30, 32)}
		free := true
		for _, n := range used {
			if n.Contains(candidate.IP) || candidate.Contains(n.IP) {
				free = false
			}
		}
		if free {
			h := append(net.IP{}, candidate.IP...)
			h[3]++
			p := append(net.IP{}, h...)
			p[3]++
			return h, p, nil
		}
	}
	return nil, nil, errors.New("every documentation range (RFC 5737) is in use on this host")
}

// dialFromHost checks that the outside host answers the host.
func (o *outsideHost) dialFromHost() error {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("%s:%d", o.addr, o.port), 3*time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

func (o *outsideHost) accepted() int { return int(o.accepts.Load()) }

// listenIn opens a TCP listener inside the network namespace at nsPath; a
// socket belongs to the namespace it was made in. The work happens on a
// thread of its own that is never unlocked, so it dies with its goroutine
// instead of carrying the namespace into other code.
func listenIn(nsPath, addr string) (net.Listener, error) {
	type result struct {
		lis net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		goruntime.LockOSThread()
		ns, err := os.Open(nsPath)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: err}
			return
		}
		lis, err := net.Listen("tcp", addr)
		ch <- result{lis, err}
	}()
	r := <-ch
	return r.lis, r.err
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return errors.New(strings.TrimSpace(string(out)))
	}
	return nil
}
