package gateway

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/sandboxd/sandboxd/internal/sandbox/netns"
	"github.com/sandboxd/sandboxd/internal/testutil"
	"github.com/sandboxd/sandboxd/netpolicy"
)

// The gateway in a namespace of its own, with its nftables rules and a
// task's link, as a container meets it: root only. The integration suite
// drives the same gateway with more cases.

// task is a network namespace of the test's own standing in for a
// container, linked to the gateway.
type task struct {
	path string
	addr netip.Addr
}

func startGateway(t *testing.T, hosts map[string]netip.Addr) *Gateway {
	t.Helper()
	testutil.RequireRoot(t)
	dir := t.TempDir()
	o := netpolicy.DefaultOperator()
	o.Hosts = hosts
	g, err := Start(context.Background(), Config{Instance: fmt.Sprintf("gwtest%d", os.Getpid()), RunDir: dir,
		Subnet: netip.MustParsePrefix("100.79.0.0/24"), Operator: o, Log: testutil.Logger(t, 0)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Errorf("close the gateway: %v", err)
		}
	})
	return g
}

func newTask(t *testing.T, g *Gateway) task {
	t.Helper()
	path := filepath.Join(t.TempDir(), "netns")
	if err := netns.New(path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netns.Remove(path) })
	addr, err := g.Allocate()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Free(addr) })
	l, err := g.Attach(addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Configure(l, path); err != nil {
		t.Fatal(err)
	}
	return task{path: path, addr: l.Addr.Addr()}
}

// dial connects from the task's namespace.
func (tk task) dial(addr string) (net.Conn, error) {
	var c net.Conn
	err := netns.Run(tk.path, func() (err error) {
		c, err = net.DialTimeout("tcp4", addr, 5*time.Second)
		return err
	})
	return c, err
}

// lookup asks the DNS server at server for name's A records, from the
// task's namespace.
func (tk task) lookup(t *testing.T, server, name string) (*dns.Msg, error) {
	t.Helper()
	var conn net.Conn
	if err := netns.Run(tk.path, func() (err error) {
		conn, err = net.Dial("udp4", server)
		return err
	}); err != nil {
		return nil, err
	}
	defer conn.Close()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	c := dns.Client{Timeout: 3 * time.Second}
	r, _, err := c.ExchangeWithConn(m, &dns.Conn{Conn: conn})
	return r, err
}

// TestGatewayInItsNamespace starts a gateway, links a task's namespace to
// it and binds a policy: a raw TCP connection to a test host the task
// had by name goes through the rules' redirect to the transparent proxy,
// which learns where it was going; a port no rule names is refused by
// the kernel; after End, Free and Close nothing of the gateway is left.
func TestGatewayInItsNamespace(t *testing.T) {
	db := testutil.NewHost(t)
	dbAddr, _ := netip.AddrFromSlice(db.Addr.To4())
	var g *Gateway
	// Registered first, so run last: after the gateway's Close.
	t.Cleanup(func() {
		if g == nil {
			return
		}
		if _, err := os.Stat(g.nsPath); !os.IsNotExist(err) {
			t.Errorf("the gateway's namespace %s is still there after Close: %v", g.nsPath, err)
		}
	})
	g = startGateway(t, map[string]netip.Addr{"db.test": dbAddr})
	lis := db.Listen(t, 5432)
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, "banner\n")
			io.Copy(c, c)
			c.Close()
		}
	}()
	tk := newTask(t, g)
	b, err := g.Bind(tk.addr, netpolicy.Policy{Mode: netpolicy.AllowList, Rules: []netpolicy.Rule{{Host: "db.test", Ports: []uint16{5432}}}})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := tk.lookup(t, g.Addr().String()+":53", "db.test"); err != nil || len(r.Answer) != 1 {
		t.Fatalf("db.test: %v %v", r, err)
	}
	c, err := tk.dial(dbAddr.String() + ":5432")
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	banner := make([]byte, len("banner\n"))
	if _, err := io.ReadFull(c, banner); err != nil || string(banner) != "banner\n" {
		t.Fatalf("the test host's banner: %q, %v", banner, err)
	}
	c.Close()
	if _, err := tk.dial(dbAddr.String() + ":22"); err == nil {
		t.Error("port 22 was reached")
	}
	sum := b.End()
	if len(sum.Events) != 2 || !sum.Events[1].Allowed || sum.Events[1].Via != "dns" || sum.Events[1].Addr != dbAddr.String() {
		t.Errorf("events %+v", sum.Events)
	}
}
