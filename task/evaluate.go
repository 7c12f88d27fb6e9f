package task

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/judge"
	"github.com/sandboxd/sandboxd/task/run"
)

// EvaluateOptions are what a judging shares with the others of its batch.
type EvaluateOptions struct {
	// Slots bound the runs of a batch at once, each a send to take one and
	// a receive to give it back; nil bounds the submission's own runs by
	// the daemon's concurrency. Every run still passes the admission
	// that is fair among callers and tenants.
	Slots chan struct{}
	// Progress hears each case as it is decided, in any order. The
	// judgement is the last word: a case after the first failure of a
	// submission that stops there is skipped, whatever it was told.
	Progress func(judge.CaseResult)
}

// EvaluateSlots are slots for a batch of submissions: the daemon's
// concurrency, so that a batch fills the daemon without queueing beyond it.
func (s *Service) EvaluateSlots() chan struct{} { return make(chan struct{}, s.cfg.MaxRunning) }

// Evaluate judges a submission: its compile, once, if its language is
// compiled; each case in a fresh sandbox, run as the caller's runs are (the
// same limits, admission and quotas); each output compared, or decided by
// the caller's checker or test; one bundle with every case's input, output
// and verdict. The error is for a submission that cannot be judged: bad
// input (naming the field), a busy daemon, a checker that fails. A failure
// of sandboxd during one case is that case's SANDBOX_ERROR.
func (s *Service) Evaluate(ctx context.Context, sub judge.Submission, o EvaluateOptions) (judge.Judgement, error) {
	if sub.Isolation == "" {
		sub.Isolation = judge.IsolationFresh
	}
	if err := sub.Validate(s.cfg.Bounds); err != nil {
		return judge.Judgement{}, err
	}
	p := judge.Plan{Submission: sub}
	if sub.Code != "" {
		l, err := languageIn(s.Catalog(), sub.Language, sub.Image)
		if err != nil {
			return judge.Judgement{}, err
		}
		p.Language = &l
	}
	if p.Compiled() && sub.Isolation == judge.IsolationShared {
		for i, c := range sub.Cases {
			if c.Test != "" {
				return judge.Judgement{}, run.Invalid(fmt.Sprintf("cases[%d].test", i), "%s is compiled once for a shared sandbox, and a test makes a program of its own: use isolation fresh", sub.Language)
			}
		}
	}
	if sub.Checker != nil {
		if _, err := languageIn(s.Catalog(), sub.Checker.Language, ""); err != nil {
			return judge.Judgement{}, run.Invalid("checker.language", "%v", err)
		}
	}
	if sub.IdempotencyKey != "" {
		return s.judgements.once(ctx, access.CallerFrom(ctx).Name, sub, func(ctx context.Context) (judge.Judgement, error) {
			return s.judge(ctx, p, o)
		})
	}
	return s.judge(ctx, p, o)
}

// judge runs plan p's compile and cases, and stores its bundle.
func (s *Service) judge(ctx context.Context, p judge.Plan, o EvaluateOptions) (judge.Judgement, error) {
	sub := p.Submission
	start := time.Now()
	id, err := run.NewID(s.cfg.Node)
	if err != nil {
		return judge.Judgement{}, err
	}
	j := judge.Judgement{ID: id, SubmissionID: sub.ID, Tenant: access.CallerFrom(ctx).Name, Isolation: sub.Isolation,
		Image: sub.Image, Cases: make([]judge.CaseResult, len(sub.Cases))}
	for i, c := range sub.Cases {
		j.Cases[i] = judge.CaseResult{Index: i, Name: c.Name}
	}
	slots := o.Slots
	if slots == nil {
		slots = s.EvaluateSlots()
	}
	var ran judge.Ran
	if p.Compiled() {
		if err := s.compile(ctx, &p, &j, slots, &ran.Started); err != nil {
			return judge.Judgement{}, err
		}
	}
	runCases := s.runCases
	if sub.Isolation == judge.IsolationShared {
		runCases = s.runShared
	}
	if j.Compile == nil || j.Compile.OK {
		if err := runCases(ctx, p, &j, slots, o.Progress, &ran.Started); err != nil {
			return judge.Judgement{}, err
		}
	}
	j.Summarise(sub.StopOnFailure)
	j.Duration = time.Since(start)
	if j.Image == "" {
		j.Image = ran.Started.Image
	}
	j.ImageDigest, j.Runtime, j.RuntimeVersion = ran.Started.ImageDigest, ran.Started.Runtime, ran.Started.RuntimeVersion
	ran.Backend, ran.Instance, ran.Version, ran.StartedAt, ran.EndedAt = ran.Started.Backend, s.cfg.Instance, s.cfg.Version, start, time.Now()
	s.storeJudgement(p, &j, ran)
	if s.metrics != nil {
		s.metrics.judged(j)
	}
	for i := range j.Cases {
		c := &j.Cases[i]
		c.Stdout, c.StdoutTruncated = preview(c.Stdout, c.StdoutTruncated)
		c.Stderr, c.StderrTruncated = preview(c.Stderr, c.StderrTruncated)
	}
	if c := j.Compile; c != nil {
		c.Stdout, _ = preview(c.Stdout, false)
	}
	return j, nil
}

func preview(b []byte, truncated bool) ([]byte, bool) {
	if len(b) > judge.PreviewBytes {
		return b[:judge.PreviewBytes], true
	}
	return b, truncated
}

// storeJudgement writes j's bundle, signed like a run's; a failure loses
// no verdict, and the judgement says why it has no bundle.
func (s *Service) storeJudgement(p judge.Plan, j *judge.Judgement, ran judge.Ran) {
	if s.store == nil {
		j.BundleError = "this daemon stores no bundles"
		return
	}
	m, src := judge.Manifest(p, j, ran)
	digest, _, err := s.store.Write(m, src)
	if err != nil {
		j.BundleError = err.Error()
		s.log.Error("write a judgement's bundle", "judgement", j.ID, "tenant", j.Tenant, "err", err)
		return
	}
	j.BundleDigest = digest
}

// compile runs p's compile and, when it built, takes what it built from
// its bundle for the cases. A compile that fails is every case's
// COMPILE_ERROR; a failure of sandboxd, every case's SANDBOX_ERROR.
func (s *Service) compile(ctx context.Context, p *judge.Plan, j *judge.Judgement, slots chan struct{}, started *run.Started) error {
	slots <- struct{}{}
	res, out, err := s.runCollected(ctx, p.CompileRequest(), started)
	<-slots
	j.Compile = &judge.CompileResult{Duration: res.Duration, Stdout: out.stdout.Bytes(), Stderr: out.stderr.Bytes(), RunID: res.RunID, BundleDigest: res.BundleDigest}
	fail := func(v judge.Verdict, why string) {
		j.Compile.Message = why
		for i := range j.Cases {
			j.Cases[i].Verdict, j.Cases[i].Message = v, why
		}
	}
	if err != nil {
		if refusal(err) {
			return err
		}
		fail(judge.SandboxError, "the compile did not run: "+err.Error())
		return nil
	}
	switch v, why := judge.Of(res, false); v {
	case judge.Accepted:
	case judge.SandboxError:
		fail(v, "the compile: "+why)
		return nil
	case judge.RuntimeError:
		fail(judge.CompileError, fmt.Sprintf("did not compile: the compiler exited with code %d: %s", res.ExitCode, firstLine(out.stderr.Bytes(), out.stdout.Bytes())))
		return nil
	default:
		fail(judge.CompileError, "did not compile: "+why)
		return nil
	}
	built, err := s.builtFiles(ctx, *p, res.BundleDigest)
	if err != nil {
		fail(judge.SandboxError, "take the compiled program from the compile's bundle: "+err.Error())
		return nil
	}
	p.Built, j.Compile.OK = built, true
	return nil
}

// builtFiles are the files the compile built, read from its bundle (the
// daemon never copies out of a container).
func (s *Service) builtFiles(ctx context.Context, p judge.Plan, digest string) ([]run.File, error) {
	if digest == "" {
		return nil, errors.New("the compile has no bundle: this daemon stores none")
	}
	f, err := s.OpenBundle(ctx, digest)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var built []run.File
	prefix := artifacts.DirOutput + "/"
	if _, err := artifacts.Verify(f, digest, artifacts.DefaultReadLimits(), func(name string, r io.Reader) error {
		rel, ok := strings.CutPrefix(name, prefix)
		if !ok || !p.IsBuilt(rel) {
			return nil
		}
		b, err := io.ReadAll(r)
		built = append(built, run.File{Path: rel, Content: b, Executable: true})
		return err
	}); err != nil {
		return nil, err
	}
	if len(built) == 0 {
		return nil, errors.New("the compiler exited 0 and built nothing")
	}
	return built, nil
}

// runCases runs p's cases side by side, within slots, each decided as it
// ends. The cases after a halt are not started, and those running are
// cancelled: after a refusal (the lowest refused case's error is the
// submission's), and with StopOnFailure after a failure.
func (s *Service) runCases(ctx context.Context, p judge.Plan, j *judge.Judgement, slots chan struct{}, progress func(judge.CaseResult), started *run.Started) error {
	n := len(p.Submission.Cases)
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		halt    = n
		cancels = make([]context.CancelFunc, n)
		refused = make([]error, n)
	)
	// haltAt stops the cases after i; mu is held.
	haltAt := func(i int) {
		halt = min(halt, i)
		for k := halt + 1; k < n; k++ {
			if cancels[k] != nil {
				cancels[k]()
			}
		}
	}
	for i := range n {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		mu.Lock()
		stop := ctx.Err() != nil || halt < i
		var cctx context.Context
		if !stop {
			cctx, cancels[i] = context.WithCancel(ctx)
		}
		mu.Unlock()
		if stop {
			if ctx.Err() == nil {
				<-slots
			}
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, st, err := s.runCase(cctx, p, i)
			<-slots
			mu.Lock()
			defer mu.Unlock()
			if halt < i {
				// Cancelled by the halt: what it says does not count.
				return
			}
			if started.RunID == "" && st.RunID != "" {
				*started = st
			}
			j.Cases[i] = c
			switch {
			case err != nil:
				refused[i] = err
				haltAt(i)
				return
			case c.Verdict != judge.Accepted && p.Submission.StopOnFailure:
				haltAt(i)
			}
			if progress != nil {
				progress(c)
			}
		}()
	}
	wg.Wait()
	for _, c := range cancels {
		if c != nil {
			c()
		}
	}
	for _, err := range refused {
		if err != nil {
			return err
		}
	}
	return context.Cause(ctx)
}

// runShared runs p's cases one after another as calls of one session,
// each a new process, each call holding a slot while it runs; the session
// is deleted at the end, whatever happened.
func (s *Service) runShared(ctx context.Context, p judge.Plan, j *judge.Judgement, slots chan struct{}, progress func(judge.CaseResult), started *run.Started) error {
	info, err := s.CreateSession(ctx, p.SessionRequest())
	if err != nil {
		if refusal(err) {
			return err
		}
		for i := range j.Cases {
			j.Cases[i].Verdict, j.Cases[i].Message = judge.SandboxError, "the shared sandbox did not start: "+err.Error()
		}
		return nil
	}
	defer func() {
		if _, err := s.DeleteSession(context.WithoutCancel(ctx), info.ID); err != nil {
			s.log.Error("delete a judgement's shared sandbox", "session", info.ID, "err", err)
		}
	}()
	for i, c := range p.Submission.Cases {
		if c.Test != "" {
			code := p.Submission.Code + "\n\n" + c.Test
			if _, err := s.UploadFile(ctx, info.ID, p.TestPath(i), false, strings.NewReader(code)); err != nil {
				return fmt.Errorf("cases[%d]: upload its test: %w", i, err)
			}
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		r, st, err := s.decide(ctx, p, i, p.SharedCaseRequest(i, info.ID))
		<-slots
		if err != nil {
			return err
		}
		if started.RunID == "" {
			*started = st
		}
		j.Cases[i] = r
		if progress != nil {
			progress(r)
		}
		if r.Verdict != judge.Accepted && p.Submission.StopOnFailure {
			break
		}
	}
	return nil
}

// runCase runs case i and decides it. The error is a refusal of the whole
// submission (bad input, a busy daemon, a failing checker); sandboxd's
// failure is the case's SANDBOX_ERROR.
func (s *Service) runCase(ctx context.Context, p judge.Plan, i int) (judge.CaseResult, run.Started, error) {
	return s.decide(ctx, p, i, p.CaseRequest(i))
}

// decide runs req, case i's run, and decides the case.
func (s *Service) decide(ctx context.Context, p judge.Plan, i int, req run.Request) (judge.CaseResult, run.Started, error) {
	c := p.Submission.Cases[i]
	var st run.Started
	res, out, err := s.runCollected(ctx, req, &st)
	r := judge.CaseResult{Index: i, Name: c.Name, Status: res.Status, ExitCode: res.ExitCode, Signal: res.Signal,
		Duration: res.Duration, PeakMemoryBytes: res.PeakMemoryBytes, Stdout: out.stdout.Bytes(), Stderr: out.stderr.Bytes(),
		StdoutTruncated: res.StdoutTruncated, StderrTruncated: res.StderrTruncated, RunID: res.RunID, BundleDigest: res.BundleDigest}
	if err != nil {
		if refusal(err) {
			return r, st, fmt.Errorf("cases[%d]: %w", i, err)
		}
		r.Verdict, r.Message = judge.SandboxError, err.Error()
		return r, st, nil
	}
	r.Verdict, r.Message = judge.Of(res, c.Test != "")
	if r.Verdict != judge.Accepted || c.Test != "" {
		return r, st, nil
	}
	if c.Compare.Kind != judge.CompareChecker {
		if ok, why := judge.Match(c.Compare, r.Stdout, c.Expected); !ok {
			r.Verdict, r.Message = judge.WrongAnswer, why
		}
		return r, st, nil
	}
	v, why, err := s.check(ctx, p, i, r.Stdout)
	if err != nil {
		return r, st, err
	}
	r.Verdict, r.Message = v, why
	return r, st, nil
}

// check runs the submission's checker on case i's output got.
func (s *Service) check(ctx context.Context, p judge.Plan, i int, got []byte) (judge.Verdict, string, error) {
	res, out, err := s.runCollected(ctx, p.CheckerRequest(i, got), nil)
	if err != nil {
		if refusal(err) {
			return "", "", fmt.Errorf("checker on cases[%d]: %w", i, err)
		}
		return judge.SandboxError, "the checker did not run: " + err.Error(), nil
	}
	said := firstLine(out.stdout.Bytes(), out.stderr.Bytes())
	switch {
	case res.Status == run.StatusOK:
		return judge.Accepted, said, nil
	case res.Status == run.StatusNonzeroExit && res.ExitCode == 1:
		return judge.WrongAnswer, "the checker rejected it: " + said, nil
	case res.Status == run.StatusLost || res.Status == run.StatusCancelled:
		return judge.SandboxError, "the checker's run ended " + string(res.Status), nil
	}
	return "", "", run.Invalid("checker", "failed on cases[%d] (%s, %s): exit 0 accepts, 1 rejects; anything else is the checker's own failure: %s", i, res.Status, res.Message, said)
}

// refusal says whether err refuses the submission rather than failing a
// case: the caller's input or quotas, which a retry of the same cannot fix
// by itself or must wait for.
func refusal(err error) bool {
	return errdefs.IsInvalidArgument(err) || errdefs.IsNotFound(err) || errdefs.IsFailedPrecondition(err) ||
		errdefs.IsPermissionDenied(err) || errdefs.IsResourceExhausted(err) || errdefs.IsUnavailable(err) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

func firstLine(parts ...[]byte) string {
	for _, b := range parts {
		b = bytes.TrimSpace(b)
		if len(b) == 0 {
			continue
		}
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[:i]
		}
		if len(b) > 200 {
			b = b[:200]
		}
		return string(b)
	}
	return "(it printed nothing)"
}

// collected is a run's output as its caller heard it, up to its caps.
type collected struct{ stdout, stderr bytes.Buffer }

type collector struct {
	out     *collected
	started *run.Started
}

func (c collector) Started(st run.Started) error {
	if c.started != nil {
		*c.started = st
	}
	return nil
}

func (c collector) Output(s run.Stream, p []byte) error {
	if s == run.Stderr {
		c.out.stderr.Write(p)
	} else {
		c.out.stdout.Write(p)
	}
	return nil
}

// runCollected runs req as the caller's run and keeps its output.
func (s *Service) runCollected(ctx context.Context, req run.Request, started *run.Started) (run.Result, *collected, error) {
	out := &collected{}
	res, err := s.runRecorded(ctx, req, collector{out: out, started: started})
	return res, out, err
}
