// Package cluster places runs and sessions on the daemons of a Kubernetes
// Service: each daemon tags the ids it makes with its name's hash, and
// finds its peers, and their tags, in the Service's EndpointSlices, so that
// a call for a run or session held by another daemon is told where to go.
// It speaks to the Kubernetes API over HTTPS with the pod's service account;
// it needs list on endpointslices of its namespace only (rbac.yaml grants
// just that): it lists them every few seconds rather than watching.
package cluster

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// TagLen is how many hex digits of an id name the daemon that made it.
const TagLen = 8

// Tag is the tag of a daemon's name: the first TagLen hex digits of its
// SHA-256.
func Tag(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:])[:TagLen]
}

// Peer is another daemon of the Service.
type Peer struct {
	// Name is its pod's name; Addr is where its gRPC listener is.
	Name, Addr string
	// Ready is whether it takes new work: not starting, not draining.
	Ready bool
}

// Peers knows the daemons of one Service, by tag. The zero value knows
// none.
type Peers struct {
	mu    sync.RWMutex
	byTag map[string]Peer
	self  string
}

// Locate names the peer that made id, unless it is this daemon or not
// known.
func (p *Peers) Locate(id string) (Peer, bool) {
	if p == nil || len(id) < TagLen {
		return Peer{}, false
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	peer, ok := p.byTag[id[:TagLen]]
	if !ok || peer.Name == p.self {
		return Peer{}, false
	}
	return peer, true
}

// Set makes peers the daemons known, self among them by name.
func (p *Peers) Set(self string, peers []Peer) {
	p.mu.Lock()
	p.self = self
	p.mu.Unlock()
	p.set(peers)
}

// set replaces the known peers.
func (p *Peers) set(peers []Peer) {
	byTag := make(map[string]Peer, len(peers))
	for _, peer := range peers {
		byTag[Tag(peer.Name)] = peer
	}
	p.mu.Lock()
	p.byTag = byTag
	p.mu.Unlock()
}

// Owner names the daemon that owns key among the ready ones, by
// rendezvous hashing: every daemon that knows the same ready set picks the
// same owner, and a daemon joining or leaving moves only its own share of
// keys. elsewhere says the owner is another daemon; with no ready daemon
// known there is no owner (ok false).
func (p *Peers) Owner(key string) (owner Peer, elsewhere, ok bool) {
	if p == nil {
		return Peer{}, false, false
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	var best uint64
	for _, peer := range p.byTag {
		if !peer.Ready {
			continue
		}
		sum := sha256.Sum256([]byte(key + "\x00" + peer.Name))
		score := binary.BigEndian.Uint64(sum[:8])
		if !ok || score > best || (score == best && peer.Name < owner.Name) {
			owner, best, ok = peer, score, true
		}
	}
	return owner, ok && owner.Name != p.self, ok
}

// All lists the known peers, this daemon among them.
func (p *Peers) All() []Peer {
	p.mu.RLock()
	defer p.mu.RUnlock()
	out := make([]Peer, 0, len(p.byTag))
	for _, peer := range p.byTag {
		out = append(out, peer)
	}
	return out
}

// Kubernetes finds the pods of a Service through the API server.
type Kubernetes struct {
	// API is the API server's URL; Token its bearer token; Client speaks
	// TLS to it.
	API    string
	Token  func() (string, error)
	Client *http.Client
	// Namespace and Service name the Service; Port is the name of its
	// gRPC port.
	Namespace, Service, Port string
}

// serviceAccount is where Kubernetes mounts a pod's credentials.
const serviceAccount = "/var/run/secrets/kubernetes.io/serviceaccount"

// InCluster is the API server of the pod this process runs in, with its
// service account's credentials.
func InCluster(service, port string) (*Kubernetes, error) {
	host, p := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || p == "" {
		return nil, errors.New("not in a Kubernetes pod: KUBERNETES_SERVICE_HOST and _PORT are not set")
	}
	ca, err := os.ReadFile(filepath.Join(serviceAccount, "ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, errors.New("the service account's ca.crt holds no certificate")
	}
	ns, err := os.ReadFile(filepath.Join(serviceAccount, "namespace"))
	if err != nil {
		return nil, err
	}
	return &Kubernetes{
		API: "https://" + net.JoinHostPort(host, p),
		// The token is rotated: read it for each request.
		Token: func() (string, error) {
			b, err := os.ReadFile(filepath.Join(serviceAccount, "token"))
			return string(b), err
		},
		Client:    &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}},
		Namespace: string(ns), Service: service, Port: port,
	}, nil
}

// endpointSlices is what this package reads of an EndpointSliceList.
type endpointSlices struct {
	Items []struct {
		Ports []struct {
			Name string `json:"name"`
			Port int    `json:"port"`
		} `json:"ports"`
		Endpoints []struct {
			Addresses  []string `json:"addresses"`
			Conditions struct {
				// Ready absent means ready (the API's convention).
				Ready *bool `json:"ready"`
			} `json:"conditions"`
			TargetRef *struct {
				Kind string `json:"kind"`
				Name string `json:"name"`
			} `json:"targetRef"`
		} `json:"endpoints"`
	} `json:"items"`
}

// List reads the Service's pods from its EndpointSlices, ready or not: a
// daemon that drains still holds its sessions.
func (k *Kubernetes) List(ctx context.Context) ([]Peer, error) {
	q := url.Values{"labelSelector": {"kubernetes.io/service-name=" + k.Service}}
	u := fmt.Sprintf("%s/apis/discovery.k8s.io/v1/namespaces/%s/endpointslices?%s", k.API, url.PathEscape(k.Namespace), q.Encode())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if k.Token != nil {
		token, err := k.Token()
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := k.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("list the endpointslices of service %s/%s: %s", k.Namespace, k.Service, resp.Status)
	}
	var list endpointSlices
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 16<<20)).Decode(&list); err != nil {
		return nil, err
	}
	var peers []Peer
	for _, slice := range list.Items {
		port := 0
		for _, p := range slice.Ports {
			if p.Name == k.Port {
				port = p.Port
			}
		}
		if port == 0 {
			continue
		}
		for _, ep := range slice.Endpoints {
			if ep.TargetRef == nil || ep.TargetRef.Kind != "Pod" || len(ep.Addresses) == 0 {
				continue
			}
			ready := ep.Conditions.Ready == nil || *ep.Conditions.Ready
			peers = append(peers, Peer{Name: ep.TargetRef.Name, Addr: net.JoinHostPort(ep.Addresses[0], strconv.Itoa(port)), Ready: ready})
		}
	}
	return peers, nil
}

// Watch keeps peers up to date with the Service's pods, reading them every
// interval until ctx is done; self is this daemon's pod name. A failed read
// keeps the peers known before, and is logged.
func Watch(ctx context.Context, k *Kubernetes, self string, peers *Peers, interval time.Duration, log *slog.Logger) {
	peers.mu.Lock()
	peers.self = self
	peers.mu.Unlock()
	for {
		list, err := k.List(ctx)
		if err != nil && ctx.Err() == nil {
			log.Warn("peers: the Service's endpoints could not be read", "err", err)
		} else if err == nil {
			peers.set(list)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}
