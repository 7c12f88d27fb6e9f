package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/sandbox/netns"
	"github.com/sandboxd/sandboxd/runtime"
)

// linkNames are the names of the two ends of the link of a (15 bytes at
// most, as interface names are).
func linkNames(a netip.Addr) (container, gateway string) {
	b := a.As4()
	id := fmt.Sprintf("%02x%02x%02x%02x", b[0], b[1], b[2], b[3])
	return "sbx" + id, "sgw" + id
}

// Attach makes the link of an address Allocate returned: a veth pair
// whose gateway end is up in the gateway's namespace, with a route to
// addr, and whose other end waits in the host's namespace for the backend
// (or Configure) to move it into the container's.
func (g *Gateway) Attach(addr netip.Addr) (_ runtime.EgressLink, err error) {
	if err := g.claimLink(addr); err != nil {
		return runtime.EgressLink{}, err
	}
	defer func() {
		if err != nil {
			g.setLink(addr, "")
		}
	}()
	cname, gname := linkNames(addr)
	nsFd, err := unix.Open(g.nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return runtime.EgressLink{}, err
	}
	defer unix.Close(nsFd)
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: cname, MTU: 1500},
		PeerName:      gname,
		PeerNamespace: netlink.NsFd(nsFd),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return runtime.EgressLink{}, fmt.Errorf("egress link for %s: %w", addr, err)
	}
	h, err := netlink.NewHandleAt(vnetns.NsHandle(nsFd))
	if err != nil {
		netlink.LinkDel(veth)
		return runtime.EgressLink{}, err
	}
	defer h.Close()
	if err := configureGatewayEnd(h, gname, g.addr, addr); err != nil {
		netlink.LinkDel(veth)
		return runtime.EgressLink{}, fmt.Errorf("egress link for %s: %w", addr, err)
	}
	g.setLink(addr, gname)
	return runtime.EgressLink{Name: cname, Addr: netip.PrefixFrom(addr, g.cfg.Subnet.Bits()), Gateway: g.addr}, nil
}

// configureGatewayEnd gives the gateway's end of a link the gateway's
// address and a route to the container's.
func configureGatewayEnd(h *netlink.Handle, name string, gw, container netip.Addr) error {
	l, err := h.LinkByName(name)
	if err != nil {
		return err
	}
	if err := h.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: gw.AsSlice(), Mask: net.CIDRMask(32, 32)}}); err != nil {
		return fmt.Errorf("address: %w", err)
	}
	if err := h.LinkSetUp(l); err != nil {
		return err
	}
	route := &netlink.Route{LinkIndex: l.Attrs().Index, Scope: netlink.SCOPE_LINK,
		Dst: &net.IPNet{IP: container.AsSlice(), Mask: net.CIDRMask(32, 32)}}
	if err := h.RouteAdd(route); err != nil {
		return fmt.Errorf("route: %w", err)
	}
	return nil
}

// Configure moves a link into the network namespace pinned at nsPath and
// makes it the namespace's eth0: its address, up, the default route via
// the gateway, and no IPv6. Backends that do not configure interfaces
// themselves (containerd) call it.
func (g *Gateway) Configure(l runtime.EgressLink, nsPath string) error {
	link, err := netlink.LinkByName(l.Name)
	if err != nil {
		return err
	}
	fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := netlink.LinkSetNsFd(link, fd); err != nil {
		return fmt.Errorf("move %s into %s: %w", l.Name, nsPath, err)
	}
	return netns.Run(nsPath, func() error {
		if err := netns.Sysctl("net.ipv6.conf.all.disable_ipv6", "1"); err != nil {
			return err
		}
		link, err := netlink.LinkByName(l.Name)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetName(link, "eth0"); err != nil {
			return err
		}
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: l.Addr.Addr().AsSlice(), Mask: net.CIDRMask(l.Addr.Bits(), 32)}}
		if err := netlink.AddrAdd(link, addr); err != nil {
			return fmt.Errorf("address: %w", err)
		}
		if err := netlink.LinkSetUp(link); err != nil {
			return err
		}
		return netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: l.Gateway.AsSlice()})
	})
}

// Detach removes the link of addr, if it has one (deleting one end of a
// veth deletes the other); the address stays allocated until Free.
func (g *Gateway) Detach(addr netip.Addr) error {
	_, gname := linkNames(addr)
	err := netns.Run(g.nsPath, func() error {
		l, err := netlink.LinkByName(gname)
		if err != nil {
			var notFound netlink.LinkNotFoundError
			if errors.As(err, &notFound) {
				return nil // went with the container's namespace
			}
			return err
		}
		// The kernel removes a veth whose other end's namespace went
		// a moment after the namespace: between the lookup and the
		// deletion it may be gone (ENODEV).
		if err := netlink.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
			return err
		}
		return nil
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("egress link of %s: %w", addr, err)
	}
	g.setLink(addr, "")
	return nil
}

// Free removes the link of addr, if any, and returns the address to the
// subnet.
func (g *Gateway) Free(addr netip.Addr) error {
	err := errors.Join(g.Detach(addr), g.dropCA(addr))
	g.mu.Lock()
	delete(g.links, addr)
	g.mu.Unlock()
	return err
}

// claimLink checks that addr is allocated and has no link yet.
func (g *Gateway) claimLink(a netip.Addr) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	link, ok := g.links[a]
	switch {
	case !ok:
		return fmt.Errorf("%s is not an address the gateway allocated", a)
	case link != "":
		return fmt.Errorf("%s already has a link", a)
	}
	g.links[a] = "pending"
	return nil
}

func (g *Gateway) setLink(a netip.Addr, link string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.links[a]; ok {
		g.links[a] = link
	}
}
