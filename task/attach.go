package task

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/registry"
	"github.com/sandboxd/sandboxd/task/run"
)

// attachChunk is the most output one Output call of an attacher carries.
const attachChunk = 64 << 10

// Attach follows a run of the caller's: it reports Started (once the run
// has started), the output a caller of the run got from the offsets on,
// by stream, as it comes, and returns the run's result once it ended. A
// run that ended is read from its bundle. The two streams are each in
// order; how they interleave is as the attacher reads them.
func (s *Service) Attach(ctx context.Context, id string, stdoutFrom, stderrFrom int64, obs run.Observer) (run.Result, error) {
	if stdoutFrom < 0 || stderrFrom < 0 {
		return run.Result{}, run.Invalid("offsets", "must not be negative")
	}
	_, out, err := s.watch(ctx, id)
	if err != nil {
		return run.Result{}, err
	}
	from := [2]int64{stdoutFrom, stderrFrom}
	var files [2]*os.File
	defer func() {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
	}()
	sentStarted := false
	net := networkFollower{obs: obs}
	for {
		// The signal first, then the state: a change after the state was
		// read closes news.
		visible, closed, news := out.State()
		rn, _, err := s.watch(ctx, id)
		if err != nil {
			return run.Result{}, err
		}
		if !sentStarted && rn.Started != nil {
			if err := obs.Started(*rn.Started); err != nil {
				return run.Result{}, err
			}
			sentStarted = true
		}
		progressed, err := net.fromLive(out)
		if err != nil {
			return run.Result{}, err
		}
		for i, stream := range []run.Stream{run.Stdout, run.Stderr} {
			if from[i] >= visible[i] {
				continue
			}
			if files[i] == nil {
				f, ok := out.Dup(stream)
				if !ok {
					continue // gone: the rest comes from the bundle
				}
				files[i] = f
			}
			n, err := sendRange(files[i], stream, from[i], visible[i], obs)
			from[i] += n
			if err != nil {
				return run.Result{}, err
			}
			progressed = progressed || n > 0
		}
		switch {
		case progressed:
			continue
		case rn.State == run.Finished && rn.Result == nil:
			return run.Result{}, fmt.Errorf("sandboxd failed run %s: %s", id, rn.Error)
		case rn.State == run.Finished && closed:
			if err := net.fromResult(*rn.Result); err != nil {
				return run.Result{}, err
			}
			if err := s.sendFromBundle(ctx, *rn.Result, from, files, obs); err != nil {
				return run.Result{}, err
			}
			return *rn.Result, nil
		}
		select {
		case <-news:
		case <-ctx.Done():
			return run.Result{}, context.Cause(ctx)
		}
	}
}

// networkFollower passes an attacher that follows the network
// (run.NetworkObserver) each network event of the run as it changes:
// from the live run, then, once it has ended, what its result holds that
// the attacher has not seen as it is.
type networkFollower struct {
	obs  run.Observer
	seq  uint64
	sent []netpolicy.Event
}

func (f *networkFollower) send(ev run.NetworkEvent) error {
	if err := run.ForwardNetwork(f.obs, ev); err != nil {
		return err
	}
	if ev.Index >= len(f.sent) {
		f.sent = append(f.sent, make([]netpolicy.Event, ev.Index+1-len(f.sent))...)
	}
	f.sent[ev.Index] = ev.Event
	return nil
}

// fromLive sends what changed in the live run's log since the last call,
// and says whether anything did.
func (f *networkFollower) fromLive(out *registry.Live) (bool, error) {
	if _, ok := f.obs.(run.NetworkObserver); !ok {
		return false, nil
	}
	evs, seq := out.NetworkSince(f.seq)
	f.seq = seq
	for _, ev := range evs {
		if err := f.send(ev); err != nil {
			return false, err
		}
	}
	return len(evs) > 0, nil
}

func (f *networkFollower) fromResult(res run.Result) error {
	if _, ok := f.obs.(run.NetworkObserver); !ok || res.Network == nil {
		return nil
	}
	for _, ev := range run.NetworkEvents(res.Network.Events) {
		if ev.Index < len(f.sent) && f.sent[ev.Index].Equal(ev.Event) {
			continue
		}
		if err := f.send(ev); err != nil {
			return err
		}
	}
	return nil
}

// sendRange reports the bytes [from, to) of a stream file, in chunks.
func sendRange(f *os.File, stream run.Stream, from, to int64, obs run.Observer) (int64, error) {
	buf := make([]byte, min(attachChunk, to-from))
	sent := int64(0)
	for from+sent < to {
		n, err := f.ReadAt(buf[:min(int64(len(buf)), to-from-sent)], from+sent)
		if n > 0 {
			if oerr := obs.Output(stream, buf[:n]); oerr != nil {
				return sent, oerr
			}
			sent += int64(n)
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return sent, nil
			}
			return sent, err
		}
	}
	return sent, nil
}

// sendFromBundle reports what an ended run's caller got past the offsets
// that the attacher has not read from the live files: from the files it
// holds, or from the run's bundle.
func (s *Service) sendFromBundle(ctx context.Context, res run.Result, from [2]int64, files [2]*os.File, obs run.Observer) error {
	caps := [2]int64{min(res.StdoutTotal, res.Limits.StdoutBytes), min(res.StderrTotal, res.Limits.StderrBytes)}
	need := false
	for i, stream := range []run.Stream{run.Stdout, run.Stderr} {
		if from[i] >= caps[i] {
			continue
		}
		if files[i] == nil {
			need = true
			continue
		}
		n, err := sendRange(files[i], stream, from[i], caps[i], obs)
		if err != nil {
			return err
		}
		from[i] += n
	}
	if !need {
		return nil
	}
	if res.BundleDigest == "" {
		return errdefs.ErrFailedPrecondition.WithMessage(fmt.Sprintf("run %s kept no bundle (%s): its output past the offsets is gone", res.RunID, res.BundleError))
	}
	f, err := s.OpenBundle(ctx, res.BundleDigest)
	if err != nil {
		return fmt.Errorf("the output of run %s: %w", res.RunID, err)
	}
	defer f.Close()
	// The bundle is checked as it is read: output is sent only from a
	// sound bundle, so it is gathered first (up to the streams' caps).
	var kept [2][]byte
	_, err = artifacts.Verify(f, res.BundleDigest, artifacts.DefaultReadLimits(), func(name string, r io.Reader) error {
		for i, stream := range []run.Stream{run.Stdout, run.Stderr} {
			if name == stream.String() && from[i] < caps[i] && files[i] == nil {
				if _, err := io.CopyN(io.Discard, r, from[i]); err != nil {
					return err
				}
				b, err := io.ReadAll(io.LimitReader(r, caps[i]-from[i]))
				kept[i] = b
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("the bundle of run %s: %w", res.RunID, err)
	}
	for i, stream := range []run.Stream{run.Stdout, run.Stderr} {
		for b := kept[i]; len(b) > 0; {
			n := min(len(b), attachChunk)
			if err := obs.Output(stream, b[:n]); err != nil {
				return err
			}
			b = b[n:]
		}
	}
	return nil
}

// watch reports a run of the caller's, with what signals its changes.
func (s *Service) watch(ctx context.Context, id string) (run.Info, *registry.Live, error) {
	rn, out, ok := s.runs.Watch(id)
	if !ok || !access.CallerFrom(ctx).Owns(rn.Tenant) {
		return run.Info{}, nil, s.unknownRun(id)
	}
	return rn, out, nil
}

// Wait waits until a run of the caller's has ended, and reports it.
func (s *Service) Wait(ctx context.Context, id string) (run.Info, error) {
	_, out, err := s.watch(ctx, id)
	if err != nil {
		return run.Info{}, err
	}
	for {
		_, _, news := out.State()
		rn, _, err := s.watch(ctx, id)
		if err != nil {
			return run.Info{}, err
		}
		if rn.State == run.Finished {
			return rn, nil
		}
		select {
		case <-news:
		case <-ctx.Done():
			return run.Info{}, context.Cause(ctx)
		}
	}
}

// ListRuns reports the caller's running and recently finished runs,
// newest first.
func (s *Service) ListRuns(ctx context.Context) []run.Info {
	c := access.CallerFrom(ctx)
	return s.runs.List(func(r run.Info) bool { return c.Owns(r.Tenant) })
}

// Detached is how a detached run began: it started, or it ended without
// starting here (a keyed retry of a run that was LOST in a restart), and
// then Ended is its result.
type Detached struct {
	Started run.Started
	Ended   *run.Result
}

// Detach starts a run that goes on without its caller: it returns once
// the run has started, or ended, or failed to start. The caller's going
// does not stop it; Cancel and the daemon's shutdown do. A caller that
// goes before the run started never learns its id, so the run is
// cancelled.
func (s *Service) Detach(ctx context.Context, req run.Request) (Detached, error) {
	runCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	started := make(chan run.Started, 1)
	type ended struct {
		res run.Result
		err error
	}
	done := make(chan ended, 1)
	go func() {
		defer cancel(nil)
		res, err := s.Run(runCtx, req, detachedObserver{started})
		done <- ended{res, err}
	}()
	select {
	case st := <-started:
		return Detached{Started: st}, nil
	case e := <-done:
		select {
		case st := <-started:
			return Detached{Started: st}, nil // it ran, and ended already
		default:
		}
		if e.err != nil {
			return Detached{}, e.err
		}
		return Detached{Ended: &e.res}, nil
	case <-ctx.Done():
		cancel(fmt.Errorf("the caller of a detached run left before it started: %w", context.Cause(ctx)))
		return Detached{}, context.Cause(ctx)
	}
}

// detachedObserver tells Detach the run started, and drops the output,
// which the run's stream files and bundle keep for attachers.
type detachedObserver struct{ started chan<- run.Started }

func (o detachedObserver) Started(st run.Started) error {
	select {
	case o.started <- st:
	default:
	}
	return nil
}

func (detachedObserver) Output(run.Stream, []byte) error { return nil }
