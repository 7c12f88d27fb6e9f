package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/session"
)

// sessionLatency is one warm daemon's sessions: creating one, against a
// warm single-use run measured alongside, and a call of 1+1 in a live
// Python session, end to end over gRPC.
type sessionLatency struct {
	Name          string  `json:"name"`
	Runtime       string  `json:"runtime"`
	CreateP50Ms   float64 `json:"create_p50_ms"`
	WarmRunP50Ms  float64 `json:"warm_run_p50_ms"`
	CreateVsWarm  float64 `json:"create_vs_warm_run"`
	CallP50Ms     float64 `json:"call_p50_ms"`
	CallP95Ms     float64 `json:"call_p95_ms"`
	CallP99Ms     float64 `json:"call_p99_ms"`
	IdleMemoryMiB float64 `json:"idle_session_memory_mib"`
}

// liveSessions is many sessions held at once, a call in each at once.
type liveSessions struct {
	Daemon   string  `json:"daemon"`
	Sessions int     `json:"sessions"`
	Answered int     `json:"answered"`
	Errors   int     `json:"errors"`
	Seconds  float64 `json:"seconds"`
}

// sessionRounds sessions are made per daemon, and sessionCalls timed calls
// run in each.
const (
	sessionRounds = 20
	sessionCalls  = 25
)

// measureSessions interleaves, daemon by daemon and round by round, a warm
// single-use run, a session's creation, and calls in that session.
func measureSessions(ctx context.Context, cs []*contender) ([]sessionLatency, error) {
	type acc struct {
		c                  *contender
		create, warm, call []time.Duration
		idle               []int64
	}
	var accs []*acc
	for _, c := range cs {
		accs = append(accs, &acc{c: c})
	}
	for round := -1; round < sessionRounds; round++ {
		for _, a := range accs {
			d := a.c.daemon
			if err := d.poolReady(ctx); err != nil {
				return nil, err
			}
			start := time.Now()
			if _, err := d.hello(ctx, "", "", run.InterpreterAny); err != nil {
				return nil, fmt.Errorf("%s: %w", a.c.name, err)
			}
			warm := time.Since(start)
			if err := d.poolReady(ctx); err != nil {
				return nil, err
			}
			start = time.Now()
			info, err := d.client.CreateSession(ctx, session.Request{Language: "python"})
			if err != nil {
				return nil, fmt.Errorf("%s: create a session: %w", a.c.name, err)
			}
			create := time.Since(start)
			// The first call waits for the kernel's start, and the pool
			// refills after the session took a container: both untimed.
			first, err := sessionCall(ctx, d, info.ID, "1+1")
			if err == nil {
				err = d.poolReady(ctx)
			}
			if err == nil && round >= 0 {
				a.warm, a.create = append(a.warm, warm), append(a.create, create)
				a.idle = append(a.idle, first.PeakMemoryBytes)
			}
			for i := 0; i < sessionCalls && err == nil; i++ {
				start = time.Now()
				_, err = sessionCall(ctx, d, info.ID, "1+1")
				if round >= 0 {
					a.call = append(a.call, time.Since(start))
				}
			}
			if _, derr := d.client.DeleteSession(ctx, info.ID); err == nil {
				err = derr
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", a.c.name, err)
			}
		}
	}
	var out []sessionLatency
	for _, a := range accs {
		var idle int64
		for _, b := range a.idle {
			idle += b
		}
		l := sessionLatency{
			Name: a.c.name, Runtime: a.c.runtime,
			CreateP50Ms: ms(percentile(a.create, 50)), WarmRunP50Ms: ms(percentile(a.warm, 50)),
			CallP50Ms: ms(percentile(a.call, 50)), CallP95Ms: ms(percentile(a.call, 95)), CallP99Ms: ms(percentile(a.call, 99)),
			IdleMemoryMiB: float64(idle) / float64(max(len(a.idle), 1)) / (1 << 20),
		}
		l.CreateVsWarm = l.CreateP50Ms / l.WarmRunP50Ms
		out = append(out, l)
	}
	return out, nil
}

// sessionCall runs code in a session and checks its value.
func sessionCall(ctx context.Context, d *daemon, id, code string) (run.Result, error) {
	out := stdout{asked: time.Now()}
	res, err := d.client.Run(ctx, run.Request{Program: &run.Program{Language: "python", Code: code}, Options: run.Options{SessionID: id}}, &out)
	if err != nil {
		return res, err
	}
	if res.Status != run.StatusOK || res.Kernel == nil || res.Kernel.Result["text/plain"] != "2" || res.BundleError != "" {
		return res, fmt.Errorf("%w: %s %+v %s", errWrongOutput, res.Status, res.Kernel, res.BundleError)
	}
	return res, nil
}

// holdSessions creates n Python sessions on d, then runs a call in each at
// once, and counts the answers.
func holdSessions(ctx context.Context, d *daemon, name string, n int) (liveSessions, error) {
	res := liveSessions{Daemon: name, Sessions: n}
	var ids []string
	defer func() {
		for _, id := range ids {
			d.client.DeleteSession(context.WithoutCancel(ctx), id)
		}
	}()
	for range n {
		info, err := d.client.CreateSession(ctx, session.Request{Language: "python"})
		if err != nil {
			return res, fmt.Errorf("session %d of %d: %w", len(ids)+1, n, err)
		}
		ids = append(ids, info.ID)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := sessionCall(ctx, d, id, "1+1")
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res.Errors++
				return
			}
			res.Answered++
		}()
	}
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

func reportSessions(w io.Writer, ls []sessionLatency, live liveSessions) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "runtime\tdaemon\tCreateSession p50\twarm run p50\tratio\t1+1 call p50\tp95\tp99\tidle session\t\n")
	for _, l := range ls {
		fmt.Fprintf(tw, "%s\t%s\t%.1f ms\t%.1f ms\t%.2fx\t%.1f ms\t%.1f ms\t%.1f ms\t%.0f MiB\t\n", l.Runtime, l.Name,
			l.CreateP50Ms, l.WarmRunP50Ms, l.CreateVsWarm, l.CallP50Ms, l.CallP95Ms, l.CallP99Ms, l.IdleMemoryMiB)
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%d live Python sessions on %s, a call in each at once: %d answered, %d errors, in %.2f s\n",
		live.Sessions, live.Daemon, live.Answered, live.Errors, live.Seconds)
}

// sessionTargets are issue 12's targets.
func sessionTargets(ls []sessionLatency, live liveSessions) []target {
	var out []target
	for _, l := range ls {
		limit := 5.0
		if l.Runtime == "runsc" {
			limit = 15
		}
		out = append(out, target{What: fmt.Sprintf("%s: a 1+1 call in a live session p50 <= %.0f ms", l.Name, limit),
			Result: fmt.Sprintf("%.1f ms", l.CallP50Ms), Met: l.CallP50Ms <= limit})
		out = append(out, target{What: l.Name + ": CreateSession p50 <= 1.2 x a warm single-use run",
			Result: fmt.Sprintf("%.1f ms vs %.1f ms: %.2fx", l.CreateP50Ms, l.WarmRunP50Ms, l.CreateVsWarm), Met: l.CreateVsWarm <= 1.2})
	}
	if live.Sessions == 0 {
		return out
	}
	out = append(out, target{What: fmt.Sprintf("%d live sessions, every call answered", live.Sessions),
		Result: fmt.Sprintf("%d of %d answered, %d errors", live.Answered, live.Sessions, live.Errors), Met: live.Answered == live.Sessions && live.Errors == 0})
	return out
}
