package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/session"
)

// The workstation workload (docs/processes.md): a keystroke's round trip
// through a session's terminal, the first byte of a session's web server
// through the inbound proxy, and 20 background processes of one session
// read from offsets while they write.

// workstation is what the workload measured on one OCI runtime.
type workstation struct {
	Runtime        string  `json:"runtime"`
	KeystrokeP50Ms float64 `json:"keystroke_p50_ms"`
	KeystrokeP95Ms float64 `json:"keystroke_p95_ms"`
	// FirstByte is a GET's first byte through the proxy, a fresh
	// connection from the client each time (python3 -m http.server closes
	// each one, so the proxy connects through the init each time too).
	FirstByteP50Ms float64 `json:"first_byte_p50_ms"`
	FirstByteP95Ms float64 `json:"first_byte_p95_ms"`
	// Processes wrote Written bytes in all, of which Read were read from
	// offsets and Lost never reached the reader; RSS is the daemon's
	// resident memory before and at the end.
	Processes     int     `json:"processes"`
	WrittenBytes  int64   `json:"written_bytes"`
	ReadBytes     int64   `json:"read_bytes"`
	LostBytes     int64   `json:"lost_bytes"`
	RSSBeforeMiB  float64 `json:"rss_before_mib"`
	RSSPeakMiB    float64 `json:"rss_peak_mib"`
	ProcessesSecs float64 `json:"processes_seconds"`
}

const (
	keystrokes       = 200
	firstBytes       = 100
	benchProcesses   = 20
	processLines     = 100000 // of 32 bytes: 3.2 MiB a process, past its 1 MiB log
	processLineBytes = 32
)

// measureWorkstation runs the workload on each OCI runtime of d, whose
// inbound proxy listens at inbound.
func measureWorkstation(ctx context.Context, d *daemon, inbound string) ([]workstation, error) {
	var out []workstation
	for _, rt := range ociRuntimes {
		w := workstation{Runtime: rt}
		sess, err := d.client.CreateSession(ctx, session.Request{Language: "python", Options: run.Options{Runtime: rt}})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", rt, err)
		}
		err = func() error {
			defer d.client.DeleteSession(context.WithoutCancel(ctx), sess.ID)
			if err := keystrokeRoundTrips(ctx, d, sess.ID, &w); err != nil {
				return fmt.Errorf("keystrokes: %w", err)
			}
			if err := proxyFirstBytes(ctx, d, sess.ID, inbound, &w); err != nil {
				return fmt.Errorf("the inbound proxy: %w", err)
			}
			return manyProcesses(ctx, d, sess.ID, &w)
		}()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", rt, err)
		}
		out = append(out, w)
	}
	return out, nil
}

// keystrokeRoundTrips types one byte at a time into cat on a terminal in
// raw mode and waits for it to come back.
func keystrokeRoundTrips(ctx context.Context, d *daemon, sid string, w *workstation) error {
	p, err := d.client.StartProcess(ctx, session.ProcessRequest{SessionID: sid, Terminal: &session.Terminal{},
		Command: run.Command{Shell: "stty raw -echo; echo ready; exec cat"}})
	if err != nil {
		return err
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := d.client.AttachProcess(actx, sid, p.ID, session.Offsets{})
	if err != nil {
		return err
	}
	echoes := &waiter{ch: make(chan struct{}, 1)}
	go stream.Copy(echoes, io.Discard, nil)
	if !echoes.waitFor("ready", 30*time.Second) {
		return fmt.Errorf("the terminal never got ready: %q", echoes.String())
	}
	var samples []time.Duration
	for i := range keystrokes {
		key := string(rune('a' + i%26))
		echoes.reset()
		began := time.Now()
		if _, err := stream.Write([]byte(key)); err != nil {
			return err
		}
		if !echoes.waitFor(key, 10*time.Second) {
			return fmt.Errorf("keystroke %d did not come back: %q", i, echoes.String())
		}
		samples = append(samples, time.Since(began))
	}
	w.KeystrokeP50Ms, w.KeystrokeP95Ms = ms(percentile(samples, 50)), ms(percentile(samples, 95))
	_, err = d.client.SignalProcess(ctx, sid, p.ID, 9)
	return err
}

// proxyFirstBytes times GETs of a session's python3 -m http.server
// through the inbound proxy, each on a fresh connection.
func proxyFirstBytes(ctx context.Context, d *daemon, sid, inbound string, w *workstation) error {
	if _, err := d.client.StartProcess(ctx, session.ProcessRequest{SessionID: sid,
		Command: run.Command{Argv: []string{"python3", "-m", "http.server", "--bind", "127.0.0.1", "8000"}}}); err != nil {
		return err
	}
	port, err := d.client.OpenPort(ctx, sid, 8000)
	if err != nil {
		return err
	}
	u, err := url.Parse(port.URL)
	if err != nil {
		return err
	}
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true,
		// TOKEN.localhost is the loopback, where the proxy listens.
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var dl net.Dialer
			return dl.DialContext(ctx, network, inbound)
		}}}
	get := func() (time.Duration, int, error) {
		var first time.Time
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			GotFirstResponseByte: func() { first = time.Now() },
		}), "GET", u.String(), nil)
		began := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			return 0, 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return first.Sub(began), resp.StatusCode, nil
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		// 502 until the server listens.
		if _, code, err := get(); err == nil && code == 200 {
			break
		} else if time.Now().After(deadline) {
			return fmt.Errorf("the server never answered 200 (%d, %v)", code, err)
		}
	}
	var samples []time.Duration
	for range firstBytes {
		t, code, err := get()
		if err != nil || code != 200 {
			return fmt.Errorf("GET: %d, %v", code, err)
		}
		samples = append(samples, t)
	}
	w.FirstByteP50Ms, w.FirstByteP95Ms = ms(percentile(samples, 50)), ms(percentile(samples, 95))
	return nil
}

// manyProcesses starts 20 writers of numbered lines and reads each from
// its offsets as they write, checking every line came, in order.
func manyProcesses(ctx context.Context, d *daemon, sid string, w *workstation) error {
	w.Processes, w.RSSBeforeMiB = benchProcesses, d.rssMiB()
	began := time.Now()
	script := fmt.Sprintf("import sys\nw = sys.stdout.write\nfor i in range(%d): w('%%031d\\n' %% i)\n", processLines)
	var wg sync.WaitGroup
	errs := make(chan error, benchProcesses)
	var mu sync.Mutex
	peak := 0.0
	for range benchProcesses {
		p, err := d.client.StartProcess(ctx, session.ProcessRequest{SessionID: sid, Command: run.Command{Argv: []string{"python3", "-c", script}}})
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var at session.Offsets
			next := 0
			var partial []byte
			for {
				o, err := d.client.ReadProcessOutput(ctx, sid, p.ID, at, 0, 5*time.Second)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				w.LostBytes += o.Start.Stdout - at.Stdout
				w.ReadBytes += int64(len(o.Stdout))
				peak = max(peak, d.rssMiB())
				mu.Unlock()
				partial = append(partial, o.Stdout...)
				for {
					i := bytes.IndexByte(partial, '\n')
					if i < 0 {
						break
					}
					if want := fmt.Sprintf("%031d", next); o.Start.Stdout == at.Stdout && string(partial[:i]) != want {
						errs <- fmt.Errorf("%s: line %q, want %q", p.ID, partial[:i], want)
						return
					}
					partial, next = partial[i+1:], next+1
				}
				at = o.Next
				if o.Info.State != session.Running && at.Stdout >= o.Info.StdoutBytes {
					if o.Info.ExitCode != 0 {
						errs <- fmt.Errorf("%s exited %d", p.ID, o.Info.ExitCode)
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	w.WrittenBytes = int64(benchProcesses * processLines * processLineBytes)
	w.RSSPeakMiB, w.ProcessesSecs = peak, time.Since(began).Seconds()
	return nil
}

// waiter collects output and wakes whoever waits for a piece of it.
type waiter struct {
	mu  sync.Mutex
	buf strings.Builder
	ch  chan struct{}
}

func (w *waiter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.buf.Write(p)
	w.mu.Unlock()
	select {
	case w.ch <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (w *waiter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func (w *waiter) reset() {
	w.mu.Lock()
	w.buf.Reset()
	w.mu.Unlock()
}

func (w *waiter) waitFor(s string, within time.Duration) bool {
	deadline := time.After(within)
	for !strings.Contains(w.String(), s) {
		select {
		case <-w.ch:
		case <-deadline:
			return false
		}
	}
	return true
}

func reportWorkstation(out io.Writer, ws []workstation) {
	fmt.Fprintf(out, "\nthe workstation workload (direct backend): keystroke through a terminal, first byte through the inbound proxy, %d background processes read from offsets\n\n", benchProcesses)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "runtime\tkeystroke p50 ms\tp95\tfirst byte p50 ms\tp95\twritten MiB\tlost\tRSS before MiB\tpeak\tseconds\t")
	for _, w := range ws {
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.1f\t%d\t%.0f\t%.0f\t%.1f\t\n", w.Runtime, w.KeystrokeP50Ms, w.KeystrokeP95Ms,
			w.FirstByteP50Ms, w.FirstByteP95Ms, float64(w.WrittenBytes)/(1<<20), w.LostBytes, w.RSSBeforeMiB, w.RSSPeakMiB, w.ProcessesSecs)
	}
	tw.Flush()
}

func workstationTargets(ws []workstation) []target {
	var ts []target
	for _, w := range ws {
		ts = append(ts,
			target{What: "keystroke round trip through a PTY, p50, " + w.Runtime, Result: fmt.Sprintf("%.2f ms (target <= 10)", w.KeystrokeP50Ms), Met: w.KeystrokeP50Ms <= 10},
			target{What: "first byte of a session's server through the inbound proxy, p50, " + w.Runtime, Result: fmt.Sprintf("%.2f ms (target <= 20)", w.FirstByteP50Ms), Met: w.FirstByteP50Ms <= 20},
			target{What: "20 background processes read from offsets, " + w.Runtime,
				Result: fmt.Sprintf("%d of %d bytes lost, RSS %.0f -> %.0f MiB (target: none lost, growth <= 2 x 20 x 1 MiB logs + 16)", w.LostBytes, w.WrittenBytes, w.RSSBeforeMiB, w.RSSPeakMiB),
				Met:    w.LostBytes == 0 && w.ReadBytes == w.WrittenBytes && w.RSSPeakMiB-w.RSSBeforeMiB <= 2*20+16})
	}
	return ts
}

// freeLoopback is a loopback address with a port free now.
func freeLoopback() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
