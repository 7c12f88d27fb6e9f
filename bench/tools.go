package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/sandboxd/sandboxd/client"

	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/tools"
)

// toolLatency is the round trip of a program's tool call on one warm
// daemon: as the program times it in the sandbox, as the provider (the
// bench's own caller tool) took to answer, and what sandboxd added.
type toolLatency struct {
	Name         string  `json:"name"`
	Runtime      string  `json:"runtime"`
	Calls        int     `json:"calls"`
	P50Ms        float64 `json:"p50_ms"`
	P95Ms        float64 `json:"p95_ms"`
	P99Ms        float64 `json:"p99_ms"`
	ProviderP50  float64 `json:"provider_p50_ms"`
	AddedP50Ms   float64 `json:"added_p50_ms"`
	RunP50Ms     float64 `json:"run_with_tools_p50_ms"`
	PlainRunP50s float64 `json:"plain_run_p50_ms"`
}

// toolCalls is how many calls a program times, after toolWarmup untimed:
// within the daemon's default of 200 calls a run.
const (
	toolCalls  = 150
	toolWarmup = 20
	toolRuns   = 5
)

// toolProgram times each call of caller.echo and prints the samples (ms).
var toolProgram = fmt.Sprintf(`
import json, time
from sandboxd import tools
echo = tools.caller.echo
for i in range(%d):
    echo(n=i)
samples = []
for i in range(%d):
    t = time.perf_counter()
    echo(n=i)
    samples.append((time.perf_counter() - t) * 1000)
print(json.dumps(samples))
`, toolWarmup, toolCalls)

// measureToolCalls runs toolRuns programs on each warm daemon, each
// timing toolCalls calls of a tool the bench answers at once.
func measureToolCalls(ctx context.Context, cs []*contender) ([]toolLatency, error) {
	var out []toolLatency
	for _, c := range cs {
		d := c.daemon
		var inSandbox, provider, withTools, plain []time.Duration
		var mu sync.Mutex
		echo := client.CallerTool{
			Tool: tools.Tool{Name: "echo", Description: "Answers its arguments.", Risk: tools.RiskRead,
				InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`)},
			Call: func(_ context.Context, args json.RawMessage, _ string) (json.RawMessage, error) {
				start := time.Now()
				res := append(json.RawMessage(nil), args...)
				mu.Lock()
				provider = append(provider, time.Since(start))
				mu.Unlock()
				return res, nil
			},
		}
		for i := 0; i < toolRuns; i++ {
			if err := d.poolReady(ctx); err != nil {
				return nil, err
			}
			start := time.Now()
			if _, err := d.hello(ctx, "", "", run.InterpreterAny); err != nil {
				return nil, fmt.Errorf("%s: %w", c.name, err)
			}
			plain = append(plain, time.Since(start))
			if err := d.poolReady(ctx); err != nil {
				return nil, err
			}
			var o outputs
			start = time.Now()
			res, err := d.client.RunWithTools(ctx, run.Request{Program: &run.Program{Language: "python", Code: toolProgram}}, []client.CallerTool{echo}, nil, &o)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c.name, err)
			}
			withTools = append(withTools, time.Since(start))
			var samples []float64
			if res.Status != run.StatusOK || json.Unmarshal([]byte(strings.TrimSpace(string(o.stdout))), &samples) != nil || len(samples) != toolCalls {
				return nil, fmt.Errorf("%s: %w: %s %s", c.name, errWrongOutput, res.Status, o.stderr)
			}
			for _, s := range samples {
				inSandbox = append(inSandbox, time.Duration(s*float64(time.Millisecond)))
			}
		}
		l := toolLatency{Name: c.name, Runtime: c.runtime, Calls: len(inSandbox),
			P50Ms: ms(percentile(inSandbox, 50)), P95Ms: ms(percentile(inSandbox, 95)), P99Ms: ms(percentile(inSandbox, 99)),
			ProviderP50: ms(percentile(provider, 50)), RunP50Ms: ms(percentile(withTools, 50)), PlainRunP50s: ms(percentile(plain, 50))}
		l.AddedP50Ms = l.P50Ms - l.ProviderP50
		out = append(out, l)
	}
	return out, nil
}

// outputs keeps a run's two streams.
type outputs struct{ stdout, stderr []byte }

func (o *outputs) Started(run.Started) error { return nil }
func (o *outputs) Output(s run.Stream, p []byte) error {
	if s == run.Stdout {
		o.stdout = append(o.stdout, p...)
	} else {
		o.stderr = append(o.stderr, p...)
	}
	return nil
}

func reportToolCalls(w io.Writer, ls []toolLatency) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "daemon\truntime\tcalls\tp50 ms\tp95 ms\tp99 ms\tprovider p50 ms\tadded p50 ms\trun of %d calls p50 ms\tprint(1) p50 ms\t\n", toolCalls+toolWarmup)
	for _, l := range ls {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.2f\t%.2f\t%.2f\t%.3f\t%.2f\t%.1f\t%.1f\t\n", l.Name, l.Runtime, l.Calls, l.P50Ms, l.P95Ms, l.P99Ms, l.ProviderP50, l.AddedP50Ms, l.RunP50Ms, l.PlainRunP50s)
	}
	tw.Flush()
}

// toolTargets holds the target: a call adds at most 2 ms (p50)
// over its provider's own time on runc.
func toolTargets(ls []toolLatency) []target {
	var out []target
	for _, l := range ls {
		if l.Runtime != "runc" {
			continue
		}
		out = append(out, target{
			What:   fmt.Sprintf("a tool call adds <= 2 ms p50 over its provider, %s", l.Name),
			Result: fmt.Sprintf("%.2f ms (%.2f in the sandbox, %.3f at the provider)", l.AddedP50Ms, l.P50Ms, l.ProviderP50),
			Met:    l.AddedP50Ms <= 2,
		})
	}
	return out
}
