package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/runtime"
)

// DefaultPluginDir is where Docker looks for the sockets of network
// drivers that are not managed plugins.
const DefaultPluginDir = "/run/docker/plugins"

// egressNetwork is the Docker network of allow-listed containers. Docker
// configures a container's interfaces itself, before its runtime starts
// (runsc reads them then), so sandboxd serves Docker a network driver of
// its own (the remote driver protocol, on a unix socket where Docker
// finds it): each endpoint is a link to the egress gateway, and its only
// route is the gateway. Docker's default IPAM hands out the addresses
// sandboxd chose (the containers' static IPv4 addresses).
type egressNetwork struct {
	gw     runtime.EgressGateway
	name   string // the driver's and the network's
	socket string
	srv    *http.Server
	log    *slog.Logger

	mu        sync.Mutex
	endpoints map[string]runtime.EgressLink // endpoint ID -> its link
}

// startEgressNetwork serves the driver and makes the network, replacing
// one an earlier daemon of the same instance left.
func startEgressNetwork(ctx context.Context, c Client, gw runtime.EgressGateway, instance, pluginDir string, log *slog.Logger) (_ *egressNetwork, err error) {
	if pluginDir == "" {
		pluginDir = DefaultPluginDir
	}
	n := &egressNetwork{gw: gw, name: "sandboxd-" + instance, log: log, endpoints: map[string]runtime.EgressLink{}}
	n.socket = filepath.Join(pluginDir, n.name+".sock")
	if err := os.MkdirAll(pluginDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.Remove(n.socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	l, err := net.Listen("unix", n.socket)
	if err != nil {
		return nil, fmt.Errorf("egress network driver: %w", err)
	}
	// Only Docker (root) talks to the driver.
	if err := os.Chmod(n.socket, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	n.srv = &http.Server{Handler: n.handler(), ReadHeaderTimeout: 10 * time.Second}
	go n.srv.Serve(l)
	defer func() {
		if err != nil {
			n.srv.Close()
			os.Remove(n.socket)
		}
	}()
	subnet := gw.Subnet()
	existing, err := n.networks(ctx, c)
	if err != nil {
		return nil, err
	}
	for _, nw := range existing {
		// An earlier daemon's network, on the same subnet, serves as it
		// is: its containers are reaped through it.
		if nw.Driver == n.name && len(nw.IPAM.Config) == 1 && nw.IPAM.Config[0].Subnet == subnet.String() {
			return n, nil
		}
		if err := c.NetworkRemove(ctx, nw.ID); err != nil {
			return nil, fmt.Errorf("remove the egress network an earlier daemon left: %w", err)
		}
	}
	_, err = c.NetworkCreate(ctx, n.name, network.CreateOptions{
		Driver: n.name,
		IPAM: &network.IPAM{Driver: "default", Config: []network.IPAMConfig{{
			Subnet: subnet.String(), Gateway: gw.Addr().String(),
		}}},
		Labels: map[string]string{labelEgress: instance},
	})
	if err != nil {
		return nil, fmt.Errorf("create the egress network %s: %w", n.name, err)
	}
	return n, nil
}

// labelEgress marks the egress networks, with the instance as value.
const labelEgress = "io.sandboxd.egress"

// networks are the networks of the instance's name.
func (n *egressNetwork) networks(ctx context.Context, c Client) ([]network.Summary, error) {
	nets, err := c.NetworkList(ctx, network.ListOptions{Filters: filters.NewArgs(filters.Arg("name", n.name))})
	if err != nil {
		return nil, fmt.Errorf("list networks: %w", err)
	}
	var out []network.Summary
	for _, nw := range nets {
		if nw.Name == n.name { // the filter matches substrings
			out = append(out, nw)
		}
	}
	return out, nil
}

// close removes the network (its containers must be gone) and stops the
// driver.
func (n *egressNetwork) close(ctx context.Context, c Client) error {
	nets, err := n.networks(ctx, c)
	for _, nw := range nets {
		if rmErr := c.NetworkRemove(ctx, nw.ID); rmErr != nil && !errdefs.IsNotFound(rmErr) {
			err = errors.Join(err, rmErr)
		}
	}
	n.srv.Close()
	os.Remove(n.socket)
	return err
}

// The remote driver protocol's messages, as much of them as this driver
// reads or answers.
type (
	driverResponse struct {
		Err string `json:",omitempty"`
	}
	endpointRequest struct {
		NetworkID  string
		EndpointID string
		Interface  *struct{ Address string }
	}
	interfaceName struct {
		SrcName   string
		DstPrefix string
	}
	joinResponse struct {
		InterfaceName         interfaceName
		Gateway               string
		DisableGatewayService bool
	}
)

func (n *egressNetwork) handler() http.Handler {
	mux := http.NewServeMux()
	reply := func(path string, f func(endpointRequest) (any, error)) {
		mux.HandleFunc("POST "+path, func(w http.ResponseWriter, r *http.Request) {
			var req endpointRequest
			// Some calls carry no body worth reading; an empty one is fine.
			_ = json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req)
			out, err := f(req)
			if err != nil {
				out = driverResponse{Err: err.Error()}
			}
			w.Header().Set("Content-Type", "application/vnd.docker.plugins.v1.2+json")
			json.NewEncoder(w).Encode(out)
		})
	}
	empty := func(endpointRequest) (any, error) { return struct{}{}, nil }
	reply("/Plugin.Activate", func(endpointRequest) (any, error) {
		return map[string][]string{"Implements": {"NetworkDriver"}}, nil
	})
	reply("/NetworkDriver.GetCapabilities", func(endpointRequest) (any, error) {
		return map[string]string{"Scope": "local", "ConnectivityScope": "local"}, nil
	})
	for _, p := range []string{"CreateNetwork", "DeleteNetwork", "Leave", "ProgramExternalConnectivity",
		"RevokeExternalConnectivity", "DiscoverNew", "DiscoverDelete"} {
		reply("/NetworkDriver."+p, empty)
	}
	reply("/NetworkDriver.EndpointOperInfo", func(endpointRequest) (any, error) {
		return map[string]any{"Value": map[string]any{}}, nil
	})
	reply("/NetworkDriver.CreateEndpoint", n.createEndpoint)
	reply("/NetworkDriver.Join", n.join)
	reply("/NetworkDriver.DeleteEndpoint", n.deleteEndpoint)
	return mux
}

// createEndpoint makes the link of the container's address: Docker got it
// from the static address sandboxd gave the container.
func (n *egressNetwork) createEndpoint(req endpointRequest) (any, error) {
	if req.Interface == nil || req.Interface.Address == "" {
		return nil, errors.New("an egress endpoint needs the address sandboxd allocated")
	}
	p, err := netip.ParsePrefix(req.Interface.Address)
	if err != nil {
		return nil, fmt.Errorf("endpoint address %q: %w", req.Interface.Address, err)
	}
	l, err := n.gw.Attach(p.Addr())
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	n.endpoints[req.EndpointID] = l
	n.mu.Unlock()
	// The address is Docker's already; the driver adds nothing.
	return struct{}{}, nil
}

// join names the link Docker moves into the container as eth0, and the
// gateway as its route; no other gateway (docker_gwbridge) is added.
func (n *egressNetwork) join(req endpointRequest) (any, error) {
	n.mu.Lock()
	l, ok := n.endpoints[req.EndpointID]
	n.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("endpoint %s has no egress link", req.EndpointID)
	}
	return joinResponse{
		InterfaceName:         interfaceName{SrcName: l.Name, DstPrefix: "eth"},
		Gateway:               l.Gateway.String(),
		DisableGatewayService: true,
	}, nil
}

func (n *egressNetwork) deleteEndpoint(req endpointRequest) (any, error) {
	n.mu.Lock()
	l, ok := n.endpoints[req.EndpointID]
	delete(n.endpoints, req.EndpointID)
	n.mu.Unlock()
	if !ok {
		return struct{}{}, nil
	}
	if err := n.gw.Detach(l.Addr.Addr()); err != nil {
		n.log.Warn("egress network: remove a link", "addr", l.Addr.Addr(), "err", err)
	}
	return struct{}{}, nil
}

// embeddedDNS is the address of Docker's DNS server in every container of
// a user-defined network. It answers the names and addresses of the
// network's containers (PTR included), which are the other allow-listed
// tasks, of every tenant: no task may ask it anything.
var embeddedDNS = netip.MustParseAddr("127.0.0.11")

// blockEmbeddedDNS refuses every packet to Docker's DNS server in the
// network namespace at netnsPath (a container's, before its program runs),
// with a filter of its own that Docker's NAT rules do not touch. The
// program holds no capability to change it. Under gVisor the server is
// out of the program's reach anyway (its loopback is gVisor's); the filter
// costs nothing there.
func blockEmbeddedDNS(netnsPath string) error {
	if netnsPath == "" {
		return errors.New("the container has no network namespace sandboxd can open")
	}
	fd, err := unix.Open(netnsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	// An nsfs file, or the mount of one: an empty regular file (a bind
	// mount this daemon cannot see) would give setns EINVAL, unexplained.
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return err
	}
	if st.Type != unix.NSFS_MAGIC {
		return fmt.Errorf("%s is not a network namespace here: dockerd's mounts do not reach this daemon's mount namespace", netnsPath)
	}
	c, err := nftables.New(nftables.WithNetNSFd(fd))
	if err != nil {
		return err
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: "sandboxd"})
	ch := c.AddChain(&nftables.Chain{Table: t, Name: "output", Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter})
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
		// The IPv4 destination, after Docker's DNAT to the server's port.
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: embeddedDNS.AsSlice()},
		// Refused at once (ICMP port unreachable), rather than left to
		// time out.
		&expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: 3},
	}})
	return c.Flush()
}
