package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/server/servertest"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/cluster"
	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/server/wire"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/run"
)

// TestRunsAreFoundOnTheirDaemon serves two daemons that know each other as
// peers: a run's id names the daemon that made it; the other answers a
// call for it with where to go (FAILED_PRECONDITION, ErrorInfo ELSEWHERE),
// and the Go client follows that once.
func TestRunsAreFoundOnTheirDaemon(t *testing.T) {
	addrs, _ := servePeers(t, false, func(ctx context.Context, spec runtime.Spec) runtime.Exit {
		spec.Stdout.Write([]byte("hi\n"))
		return runtime.Exit{}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	onB, err := Dial(DialOptions{Addr: addrs[1]})
	if err != nil {
		t.Fatal(err)
	}
	defer onB.Close()
	res, err := onB.Run(ctx, run.Request{Command: &run.Command{Argv: []string{"x"}}}, discard{})
	if err != nil || !strings.HasPrefix(res.RunID, cluster.Tag("daemon-b")) {
		t.Fatalf("a run on daemon-b: %+v %v, want an id that starts with its tag %s", res, err, cluster.Tag("daemon-b"))
	}

	onA, err := Dial(DialOptions{Addr: addrs[0]})
	if err != nil {
		t.Fatal(err)
	}
	defer onA.Close()
	if rn, err := onA.Get(ctx, res.RunID); err != nil || rn.Result == nil || rn.Result.RunID != res.RunID {
		t.Fatalf("GetRun through daemon-a: %+v %v", rn, err)
	}
	if got, err := onA.Attach(ctx, res.RunID, 3, 0, discard{}); err != nil || got.RunID != res.RunID {
		t.Fatalf("AttachRun through daemon-a: %+v %v", got, err)
	}
	_, err = NewClient(onA.conn).c.GetRun(ctx, &pb.GetRunRequest{RunId: res.RunID})
	st := status.Convert(err)
	where := ""
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == wire.ReasonElsewhere {
			where = info.GetMetadata()["address"]
		}
	}
	if st.Code() != codes.FailedPrecondition || where != addrs[1] {
		t.Fatalf("daemon-a's own answer: %v, want FAILED_PRECONDITION naming %s", err, addrs[1])
	}
	var elsewhere *task.ElsewhereError
	if _, err := NewClient(onA.conn).Get(ctx, res.RunID); !errors.As(err, &elsewhere) || elsewhere.Peer.Name != "daemon-b" {
		t.Fatalf("a client that does not redirect: %v", err)
	}
	if _, err := onA.Get(ctx, cluster.Tag("daemon-c")+strings.Repeat("0", 16)); status.Code(err) == codes.FailedPrecondition {
		t.Fatalf("a run of no known daemon: %v, want NOT_FOUND", err)
	}
}

// servePeers serves two daemons, daemon-a and daemon-b, that know each
// other as peers (ready or not), as their Watch would read them from the
// Service, and returns their addresses and views of the cluster.
func servePeers(t *testing.T, ready bool, body func(context.Context, runtime.Spec) runtime.Exit) ([]string, []*cluster.Peers) {
	t.Helper()
	names := []string{"daemon-a", "daemon-b"}
	peers := []*cluster.Peers{{}, {}}
	var addrs []string
	for i, name := range names {
		svc := servertest.NewEngine(t, body, func(c *task.Config) { c.Node = name }, task.WithPeers(peers[i]))
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		g := server.NewGRPCServer(server.New(svc), server.NewHealth(), server.Options{Caller: access.Operator})
		go g.Serve(lis)
		t.Cleanup(g.Stop)
		addrs = append(addrs, lis.Addr().String())
	}
	for i, p := range peers {
		p.Set(names[i], []cluster.Peer{{Name: names[0], Addr: addrs[0], Ready: ready}, {Name: names[1], Addr: addrs[1], Ready: ready}})
	}
	return addrs, peers
}

// TestIdempotencyKeysHaveOneOwner: a keyed run sent to a daemon that does
// not own the key is sent to its owner (ELSEWHERE, kind "idempotency
// key"), so a retry through either daemon follows the one run.
func TestIdempotencyKeysHaveOneOwner(t *testing.T) {
	release := make(chan struct{})
	addrs, views := servePeers(t, true, func(ctx context.Context, spec runtime.Spec) runtime.Exit {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return runtime.Exit{}
	})
	defer close(release)
	var view cluster.Peers
	view.Set("daemon-a", []cluster.Peer{{Name: "daemon-a", Ready: true}, {Name: "daemon-b", Ready: true}})
	// ownedByB is the first key named prefix-N that daemon-b owns.
	ownedByB := func(prefix string) string {
		for i := 0; ; i++ {
			k := fmt.Sprintf("%s-%d", prefix, i)
			if owner, _, _ := view.Owner(access.Operator.Name + "\x00" + k); owner.Name == "daemon-b" {
				return k
			}
		}
	}
	key := ownedByB("retry")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := run.Request{Command: &run.Command{Argv: []string{"x"}}, Options: run.Options{IdempotencyKey: key}}
	var ids []string
	for _, addr := range []string{addrs[0], addrs[1], addrs[0]} {
		c, err := Dial(DialOptions{Addr: addr})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		started, err := c.Detach(ctx, req)
		if err != nil {
			t.Fatalf("keyed run through %s: %v", addr, err)
		}
		ids = append(ids, started.RunID)
	}
	if !strings.HasPrefix(ids[0], cluster.Tag("daemon-b")) || ids[1] != ids[0] || ids[2] != ids[0] {
		t.Fatalf("runs %v: want one run, on daemon-b (tag %s), whichever daemon was called", ids, cluster.Tag("daemon-b"))
	}
	onA, err := Dial(DialOptions{Addr: addrs[0]})
	if err != nil {
		t.Fatal(err)
	}
	defer onA.Close()

	// For a moment b reads itself as not ready (it has just started), and
	// so sends every key to a, while a sends this one to b: the call a
	// sends to b is served there, not sent back.
	views[1].Set("daemon-b", []cluster.Peer{{Name: "daemon-a", Addr: addrs[0], Ready: true}, {Name: "daemon-b", Addr: addrs[1]}})
	other := run.Request{Command: &run.Command{Argv: []string{"x"}}, Options: run.Options{IdempotencyKey: ownedByB("disagreed")}}
	if started, err := onA.Detach(ctx, other); err != nil || !strings.HasPrefix(started.RunID, cluster.Tag("daemon-b")) {
		t.Fatalf("a key the daemons disagree on: %+v %v, want a run on daemon-b", started, err)
	}

	var elsewhere *task.ElsewhereError
	if _, err := NewClient(onA.conn).Detach(ctx, req); !errors.As(err, &elsewhere) ||
		elsewhere.What != "idempotency key" || elsewhere.Peer.Name != "daemon-b" {
		t.Fatalf("daemon-a's own answer for daemon-b's key: %v", err)
	}
}

// discard is an Observer that keeps nothing.
type discard struct{}

func (discard) Started(run.Started) error       { return nil }
func (discard) Output(run.Stream, []byte) error { return nil }
