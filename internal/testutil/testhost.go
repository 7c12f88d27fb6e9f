package testutil

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// Host is a test host: a network namespace of the test's own, joined to
// the host by a veth pair, with an address of its own. Tests send packets
// only to loopback and to such hosts. Its /30 comes from the documentation
// ranges of RFC 5737, skipping any that this machine already uses.
type Host struct {
	// Name is the namespace's name (ip netns).
	Name string
	// Addr is the host's address; HostAddr is the machine's end of the
	// link.
	Addr, HostAddr net.IP
}

// hostPrefix starts the names of test hosts' namespaces, followed by the
// test process's pid, so that hosts of a killed test can be told apart.
const hostPrefix = "sbxt"

var (
	hostsMu   sync.Mutex
	hostCount int
)

// NewHost makes a test host, removed when the test ends. It first removes
// the hosts of test processes that no longer run (killed with -9).
func NewHost(t testing.TB) *Host {
	t.Helper()
	RequireRoot(t)
	if _, err := exec.LookPath("ip"); err != nil {
		SkipOrFail(t, "ip(8) is missing (scripts/setup.sh installs iproute2)")
	}
	hostsMu.Lock()
	defer hostsMu.Unlock()
	removeStaleHosts()
	hostAddr, peerAddr, err := freeTestNet()
	if err != nil {
		t.Fatal(err)
	}
	hostCount++
	tag := fmt.Sprintf("%d%c", os.Getpid(), 'a'+hostCount%26)
	h := &Host{Name: hostPrefix + tag, Addr: peerAddr, HostAddr: hostAddr}
	hostVeth, peer := "sbxh"+tag, "sbxp"+tag
	t.Cleanup(func() {
		_ = ip("link", "del", hostVeth)
		if err := ip("netns", "del", h.Name); err != nil {
			t.Errorf("remove the test host %s: %v", h.Name, err)
		}
	})
	steps := [][]string{
		{"netns", "add", h.Name},
		{"link", "add", hostVeth, "type", "veth", "peer", "name", peer},
		{"link", "set", peer, "netns", h.Name},
		{"addr", "add", hostAddr.String() + "/30", "dev", hostVeth},
		{"link", "set", hostVeth, "up"},
		{"-n", h.Name, "addr", "add", peerAddr.String() + "/30", "dev", peer},
		{"-n", h.Name, "link", "set", peer, "up"},
		{"-n", h.Name, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			t.Fatalf("ip %s: %v", strings.Join(s, " "), err)
		}
	}
	return h
}

// Path is the namespace's file.
func (h *Host) Path() string { return "/run/netns/" + h.Name }

// Listen opens a TCP listener on the host at port (0 for any), closed when
// the test ends.
func (h *Host) Listen(t testing.TB, port int) net.Listener {
	t.Helper()
	var lis net.Listener
	err := h.Do(func() error {
		var err error
		lis, err = net.Listen("tcp", net.JoinHostPort(h.Addr.String(), strconv.Itoa(port)))
		return err
	})
	if err != nil {
		t.Fatalf("listen on the test host %s: %v", h.Name, err)
	}
	t.Cleanup(func() { lis.Close() })
	return lis
}

// Do runs fn in the host's network namespace: sockets made in fn belong to
// it. fn runs on a thread of its own that is never unlocked, so that the
// thread dies with its goroutine instead of carrying the namespace into
// other code.
func (h *Host) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		ns, err := os.Open(h.Path())
		if err != nil {
			errc <- err
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// removeStaleHosts removes the namespaces of test hosts whose process is
// gone; their veth pairs go with them.
func removeStaleHosts() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(line, " ")
		rest, ok := strings.CutPrefix(name, hostPrefix)
		if !ok || len(rest) < 2 {
			continue
		}
		pid, err := strconv.Atoi(rest[:len(rest)-1])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); errors.Is(err, os.ErrNotExist) {
			_ = ip("netns", "del", name)
		}
	}
}

// freeTestNet picks a /30 from the documentation ranges that overlaps no
// address or route of this machine, and returns its two usable addresses.
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
	for _, base := range []string{"198.51.100.0", "203.0.113.0", "192.0.2.0"} {
		for i := 0; i < 256; i += 4 {
			ip4 := net.ParseIP(base).To4()
			ip4[3] = byte(i)
			candidate := &net.IPNet{IP: ip4, Mask: net.CIDRMask(30, 32)}
			free := true
			for _, n := range used {
				if n.Contains(candidate.IP) || candidate.Contains(n.IP) {
					free = false
					break
				}
			}
			if free {
				h := append(net.IP{}, ip4...)
				h[3]++
				p := append(net.IP{}, h...)
				p[3]++
				return h, p, nil
			}
		}
	}
	return nil, nil, errors.New("every documentation range (RFC 5737) is in use on this machine")
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return errors.New(strings.TrimSpace(string(out)))
	}
	return nil
}
