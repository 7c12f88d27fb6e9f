package server

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/cluster"
	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/task"
)

// TestRunsAreFoundOnTheirDaemon serves two daemons that know each other as
// peers: a run's id names the daemon that made it; the other answers a
// call for it with where to go (FAILED_PRECONDITION, ErrorInfo ELSEWHERE),
// and the Go client follows that once.
func TestRunsAreFoundOnTheirDaemon(t *testing.T) {
	names := []string{"daemon-a", "daemon-b"}
	peers := []*cluster.Peers{{}, {}}
	var addrs []string
	for i, name := range names {
		svc := newEngine(t, func(ctx context.Context, spec runtime.Spec) runtime.Exit {
			spec.Stdout.Write([]byte("hi\n"))
			return runtime.Exit{}
		}, func(c *task.Config) { c.Node, c.Peers = name, peers[i] })
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		g := NewGRPCServer(New(svc), NewHealth(), Options{Caller: task.Operator})
		go g.Serve(lis)
		t.Cleanup(g.Stop)
		addrs = append(addrs, lis.Addr().String())
	}
	// Each knows both, as its Watch would read them from the Service.
	for i, p := range peers {
		p.Set(names[i], []cluster.Peer{{Name: names[0], Addr: addrs[0]}, {Name: names[1], Addr: addrs[1]}})
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	onB, err := Dial(DialOptions{Addr: addrs[1]})
	if err != nil {
		t.Fatal(err)
	}
	defer onB.Close()
	res, err := onB.Run(ctx, task.Request{Command: &task.Command{Argv: []string{"x"}}}, discard{})
	if err != nil || !strings.HasPrefix(res.RunID, cluster.Tag("daemon-b")) {
		t.Fatalf("a run on daemon-b: %+v %v, want an id that starts with its tag %s", res, err, cluster.Tag("daemon-b"))
	}

	onA, err := Dial(DialOptions{Addr: addrs[0]})
	if err != nil {
		t.Fatal(err)
	}
	defer onA.Close()
	if run, err := onA.Get(ctx, res.RunID); err != nil || run.Result == nil || run.Result.RunID != res.RunID {
		t.Fatalf("GetRun through daemon-a: %+v %v", run, err)
	}
	if got, err := onA.Attach(ctx, res.RunID, 3, 0, discard{}); err != nil || got.RunID != res.RunID {
		t.Fatalf("AttachRun through daemon-a: %+v %v", got, err)
	}
	_, err = NewClient(onA.conn).c.GetRun(ctx, &pb.GetRunRequest{RunId: res.RunID})
	st := status.Convert(err)
	where := ""
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == ReasonElsewhere {
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

// discard is an Observer that keeps nothing.
type discard struct{}

func (discard) Started(task.Started) error       { return nil }
func (discard) Output(task.Stream, []byte) error { return nil }
