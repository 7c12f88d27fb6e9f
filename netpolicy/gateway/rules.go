package gateway

import (
	"fmt"
	"net/netip"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// ruleset is the gateway namespace's nftables table. Everything that comes
// in on a container's link is redirected to a port of the gateway:
//
//   - TCP to the gateway's proxy port stays there (explicit proxying);
//   - DNS, over UDP or TCP and whatever the address, goes to the stub;
//   - TCP from a container to a port its policy has a rule for goes to the
//     transparent proxy, which decides by name and address;
//   - any other TCP, and any other UDP, goes to a port nothing listens on,
//     which the kernel refuses (RST, port unreachable) rather than drop;
//
// and nothing is forwarded. The allowed (address, port) pairs are a set
// the gateway fills as tasks are bound.
type ruleset struct {
	mu   sync.Mutex
	nsFd int
	// c keeps one netlink socket open for every change: closing one
	// costs an RCU grace period (10 ms on this VM), which a socket per
	// change put on the path of every allow-listed task's result.
	c     *nftables.Conn
	table *nftables.Table
	ports *nftables.Set
}

// linkPrefix begins the name of every gateway end of a container's link.
const linkPrefix = "sgw"

func newRuleset(nsPath string, gw netip.Addr) (*ruleset, error) {
	fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	r := &ruleset{nsFd: fd}
	c, err := r.conn()
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	fail := func(err error) (*ruleset, error) {
		r.close()
		return nil, err
	}
	r.table = c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: "sandboxd"})
	r.ports = &nftables.Set{
		Table: r.table, Name: "ports",
		KeyType:       nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetService),
		Concatenation: true,
	}
	if err := c.AddSet(r.ports, nil); err != nil {
		return fail(err)
	}
	pre := c.AddChain(&nftables.Chain{Table: r.table, Name: "prerouting", Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
	fromLink := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(linkPrefix)},
	}
	proto := func(p byte) []expr.Any {
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
		}
	}
	dport := func(port uint16) []expr.Any {
		return []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
		}
	}
	redirect := func(port uint16) []expr.Any {
		return []expr.Any{
			&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
			&expr.Redir{RegisterProtoMin: 1},
		}
	}
	rule := func(parts ...[]expr.Any) {
		var exprs []expr.Any
		for _, p := range parts {
			exprs = append(exprs, p...)
		}
		c.AddRule(&nftables.Rule{Table: r.table, Chain: pre, Exprs: exprs})
	}
	toGateway := []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: gw.AsSlice()},
	}
	accept := []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}
	rule(fromLink, toGateway, proto(unix.IPPROTO_TCP), dport(ProxyPort), accept)
	rule(fromLink, proto(unix.IPPROTO_UDP), dport(53), redirect(dnsPort))
	rule(fromLink, proto(unix.IPPROTO_TCP), dport(53), redirect(dnsPort))
	// ip saddr . tcp dport @ports: the concatenation takes two 32-bit
	// registers, the port padded.
	rule(fromLink, proto(unix.IPPROTO_TCP), []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Payload{DestRegister: 9, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Lookup{SourceRegister: 1, SetName: r.ports.Name, SetID: r.ports.ID},
	}, redirect(transparentPort))
	rule(fromLink, proto(unix.IPPROTO_TCP), redirect(refusedPort))
	rule(fromLink, proto(unix.IPPROTO_UDP), redirect(refusedPort))
	// Nothing is forwarded (ip_forward is off too).
	drop := nftables.ChainPolicyDrop
	c.AddChain(&nftables.Chain{Table: r.table, Name: "forward", Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &drop})
	if err := c.Flush(); err != nil {
		return fail(fmt.Errorf("egress rules: %w", err))
	}
	return r, nil
}

// conn returns the lasting connection, opening it if needed.
func (r *ruleset) conn() (*nftables.Conn, error) {
	if r.c == nil {
		c, err := nftables.New(nftables.WithNetNSFd(r.nsFd), nftables.AsLasting())
		if err != nil {
			return nil, err
		}
		r.c = c
	}
	return r.c, nil
}

// portKey is the set's key of an address and a port: the port padded to
// 32 bits.
func portKey(a netip.Addr, port uint16) []byte {
	b := a.As4()
	return append(b[:], byte(port>>8), byte(port), 0, 0)
}

// allow lets TCP from a to the ports reach the transparent proxy.
func (r *ruleset) allow(a netip.Addr, ports []uint16) error {
	return r.change(a, ports, true)
}

// forget undoes allow.
func (r *ruleset) forget(a netip.Addr, ports []uint16) error {
	return r.change(a, ports, false)
}

func (r *ruleset) change(a netip.Addr, ports []uint16, add bool) error {
	if len(ports) == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.conn()
	if err != nil {
		return err
	}
	elems := make([]nftables.SetElement, len(ports))
	for i, p := range ports {
		elems[i] = nftables.SetElement{Key: portKey(a, p)}
	}
	if add {
		err = c.SetAddElements(r.ports, elems)
	} else {
		err = c.SetDeleteElements(r.ports, elems)
	}
	if err == nil {
		err = c.Flush()
	}
	if err != nil {
		// The next change starts on a socket of its own, with nothing
		// of this one's left queued or unread.
		c.CloseLasting()
		r.c = nil
	}
	return err
}

func (r *ruleset) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.c != nil {
		r.c.CloseLasting()
	}
	unix.Close(r.nsFd)
}
