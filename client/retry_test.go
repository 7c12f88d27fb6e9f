package client

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/server/servertest"

	"github.com/containerd/errdefs"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/run"
)

// busyDaemon serves an engine that runs one task at a time and queues
// none, its task blocked until release; the client dials it with policy.
func busyDaemon(t *testing.T, policy Retry) (c *Client, release func()) {
	t.Helper()
	block := make(chan struct{})
	svc := servertest.NewEngine(t, func(ctx context.Context, spec runtime.Spec) runtime.Exit {
		select {
		case <-block:
		case <-ctx.Done():
		}
		return runtime.Exit{}
	}, func(cfg *task.Config) { cfg.MaxRunning = 1; cfg.MaxQueued = 0 })
	lis := bufconn.Listen(1 << 20)
	g := server.NewGRPCServer(server.New(svc), server.NewHealth(), server.Options{})
	go g.Serve(lis)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(policy.unary), grpc.WithChainStreamInterceptor(policy.stream))
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { close(block) }) }
	t.Cleanup(func() {
		release()
		conn.Close()
		g.Stop()
	})
	return NewClient(conn), release
}

// occupy starts a run that holds the daemon's one slot, and returns once
// it started.
func occupy(t *testing.T, c *Client) {
	t.Helper()
	started := make(chan struct{})
	go c.Run(context.Background(), run.Request{Program: &run.Program{Language: "python", Code: "x"}},
		startedObserver(func() { close(started) }))
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the first run did not start")
	}
}

type startedObserver func()

func (f startedObserver) Started(run.Started) error     { f(); return nil }
func (startedObserver) Output(run.Stream, []byte) error { return nil }

// TestRefusedRunIsRetriedAfterItsDelay: a run refused as busy waits the
// delay the refusal names, says so, and runs once the slot frees.
func TestRefusedRunIsRetriedAfterItsDelay(t *testing.T) {
	waits := make(chan time.Duration, 8)
	c, release := busyDaemon(t, Retry{Within: 30 * time.Second, Waiting: func(refusal error, wait time.Duration) {
		if status.Code(refusal) != codes.ResourceExhausted {
			t.Errorf("waiting on %v, want the busy refusal", refusal)
		}
		waits <- wait
	}})
	occupy(t, c)
	go func() {
		<-waits
		release()
	}()
	obs := &observer{out: map[run.Stream]string{}}
	res, err := c.Run(context.Background(), run.Request{Program: &run.Program{Language: "python", Code: "x"}}, obs)
	if err != nil || res.Status != run.StatusOK {
		t.Fatalf("the refused run = %+v, %v, want it run after the wait", res, err)
	}
	if len(obs.started) != 1 {
		t.Fatalf("started %d times, want once: the refusal is not a start", len(obs.started))
	}
}

// TestRetryGivesUpAtItsDeadline: a wait that would end past Within is not
// begun, and the refusal, with its class, is the answer.
func TestRetryGivesUpAtItsDeadline(t *testing.T) {
	waited := 0
	c, _ := busyDaemon(t, Retry{Within: time.Millisecond, Waiting: func(error, time.Duration) { waited++ }})
	occupy(t, c)
	begin := time.Now()
	_, err := c.Run(context.Background(), run.Request{Program: &run.Program{Language: "python", Code: "x"}}, &observer{out: map[run.Stream]string{}})
	if !errdefs.IsResourceExhausted(err) {
		t.Fatalf("err = %v, want the busy refusal", err)
	}
	if waited != 0 || time.Since(begin) > 5*time.Second {
		t.Fatalf("waited %d times (%v), want none: the delay is past the deadline", waited, time.Since(begin))
	}
}

// TestRetryDelayReadsOnlyRefusals: errors without RetryInfo, or of other
// codes, are not retried.
func TestRetryDelayReadsOnlyRefusals(t *testing.T) {
	for _, err := range []error{
		errors.New("plain"),
		status.Error(codes.ResourceExhausted, "no details"),
		status.Error(codes.Unavailable, "connection refused"),
		server.ToStatus(&task.ElsewhereError{What: "run", ID: "r"}),
	} {
		if d, ok := RetryDelay(err); ok {
			t.Errorf("RetryDelay(%v) = %v, want no retry", err, d)
		}
	}
	for _, err := range []error{
		server.ToStatus(&task.BusyError{Quota: "max-queued", RetryAfter: time.Second}),
		server.ToStatus(&task.DrainingError{RetryAfter: 2 * time.Second}),
	} {
		if d, ok := RetryDelay(err); !ok || d <= 0 {
			t.Errorf("RetryDelay(%v) = %v, %v, want the delay named", err, d, ok)
		}
	}
}
