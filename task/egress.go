package task

import (
	"net/netip"

	"github.com/sandboxd/sandboxd/netpolicy"
)

// Egress is the egress gateway of allow-listed tasks (netpolicy/gateway),
// as the engine uses it: an address per container, linked by the backend,
// and a task's policy bound to that address while the task runs.
type Egress interface {
	Allocate() (netip.Addr, error)
	Free(addr netip.Addr) error
	Bind(addr netip.Addr, p netpolicy.Policy) (netpolicy.Binding, error)
	// ProxyURL is what HTTP_PROXY and HTTPS_PROXY name; ResolvConf the
	// host file bound at /etc/resolv.conf.
	ProxyURL() string
	ResolvConf() string
}

// WithEgress gives allow-listed tasks the egress gateway e.
func WithEgress(e Egress) Option {
	return func(s *Service) { s.egress = e }
}

// proxyEnv points HTTP clients, pip among them, at the gateway's proxy;
// what ignores them is redirected to the gateway anyway.
func proxyEnv(proxy string) map[string]string {
	return map[string]string{
		"HTTP_PROXY": proxy, "HTTPS_PROXY": proxy, "http_proxy": proxy, "https_proxy": proxy,
		"PIP_PROXY": proxy, "NO_PROXY": "", "no_proxy": "",
	}
}
