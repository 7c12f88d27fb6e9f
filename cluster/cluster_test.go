package cluster

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

func TestTagAndLocate(t *testing.T) {
	if a, b := Tag("sandboxd-x7k2p"), Tag("sandboxd-q9w4z"); len(a) != TagLen || a == b || a != Tag("sandboxd-x7k2p") {
		t.Fatalf("tags %q %q", a, b)
	}
	var p Peers
	p.Set("a", []Peer{{Name: "a", Addr: "10.0.0.1:7070"}, {Name: "b", Addr: "10.0.0.2:7070"}})
	if peer, ok := p.Locate(Tag("b") + "0123456789abcdef"); !ok || peer.Addr != "10.0.0.2:7070" {
		t.Fatalf("Locate(b's id) = %v %v", peer, ok)
	}
	for _, id := range []string{Tag("a") + "0123456789abcdef", Tag("c") + "0123456789abcdef", "short"} {
		if peer, ok := p.Locate(id); ok {
			t.Errorf("Locate(%q) = %v: its own, unknown and short ids are no peer's", id, peer)
		}
	}
	var none *Peers
	if _, ok := none.Locate(Tag("b") + "0123456789abcdef"); ok {
		t.Fatal("no peers located a run")
	}
}

// TestOwnerIsOneReadyDaemonPerKey: daemons that know the same ready set
// agree on each key's owner, never pick one that is not ready, and a
// daemon leaving moves only the keys it owned.
func TestOwnerIsOneReadyDaemonPerKey(t *testing.T) {
	all := []Peer{{Name: "a", Ready: true}, {Name: "b", Ready: true}, {Name: "c", Ready: true}, {Name: "d"}}
	views := make([]*Peers, 3)
	for i, self := range []string{"a", "b", "c"} {
		views[i] = &Peers{}
		views[i].Set(self, all)
	}
	owned := map[string]int{}
	owners := map[string]string{}
	for k := range 300 {
		key := fmt.Sprintf("tenant\x00key-%d", k)
		var elsewhere int
		for i, v := range views {
			owner, away, ok := v.Owner(key)
			if !ok || owner.Name == "d" {
				t.Fatalf("view %d: Owner(%q) = %v %v: a ready daemon owns every key", i, key, owner, ok)
			}
			if i == 0 {
				owners[key] = owner.Name
				owned[owner.Name]++
			} else if owner.Name != owners[key] {
				t.Fatalf("views disagree on %q: %s and %s", key, owners[key], owner.Name)
			}
			if away {
				elsewhere++
			}
		}
		if elsewhere != 2 {
			t.Fatalf("key %q: %d daemons send it elsewhere, want 2 (all but its owner)", key, elsewhere)
		}
	}
	for _, name := range []string{"a", "b", "c"} {
		if owned[name] < 60 {
			t.Errorf("daemon %s owns %d of 300 keys: the hash is not spread", name, owned[name])
		}
	}
	// c leaves: only its keys move.
	var less Peers
	less.Set("a", all[:2])
	for key, was := range owners {
		if now, _, _ := less.Owner(key); was != "c" && now.Name != was {
			t.Fatalf("key %q moved from %s to %s when c left", key, was, now.Name)
		}
	}
	var none *Peers
	if _, away, ok := none.Owner("k"); away || ok {
		t.Fatal("no peers: no owner, and nothing is elsewhere")
	}
}

// TestListReadsTheServicesEndpointSlices reads the endpoints of a Service
// as the API server lists them, with the service account's token.
func TestListReadsTheServicesEndpointSlices(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/apis/discovery.k8s.io/v1/namespaces/sandboxd/endpointslices" ||
			r.URL.Query().Get("labelSelector") != "kubernetes.io/service-name=sandboxd" || r.Header.Get("Authorization") != "Bearer sa-token" {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		w.Write([]byte(`{"kind": "EndpointSliceList", "items": [
			{"ports": [{"name": "grpc", "port": 7070}, {"name": "mcp", "port": 7071}],
			 "endpoints": [
				{"addresses": ["10.0.0.1"], "conditions": {"ready": true}, "targetRef": {"kind": "Pod", "name": "sandboxd-a"}},
				{"addresses": ["10.0.0.2"], "conditions": {"ready": false}, "targetRef": {"kind": "Pod", "name": "sandboxd-b"}},
				{"addresses": ["10.0.0.3"]}]},
			{"ports": [{"name": "other", "port": 1}], "endpoints": [{"addresses": ["10.0.0.9"], "targetRef": {"kind": "Pod", "name": "x"}}]}]}`))
	}))
	defer api.Close()
	k := &Kubernetes{API: api.URL, Token: func() (string, error) { return "sa-token", nil }, Client: api.Client(),
		Namespace: "sandboxd", Service: "sandboxd", Port: "grpc"}
	peers, err := k.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []Peer{{Name: "sandboxd-a", Addr: "10.0.0.1:7070", Ready: true}, {Name: "sandboxd-b", Addr: "10.0.0.2:7070"}}
	if !slices.Equal(peers, want) {
		t.Fatalf("List() = %v, want %v (a draining pod is still a peer; an endpoint of no pod is not)", peers, want)
	}
	k.Token = func() (string, error) { return "wrong", nil }
	if _, err := k.List(context.Background()); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("List() with a wrong token = %v", err)
	}
}
