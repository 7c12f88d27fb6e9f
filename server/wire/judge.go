package wire

import (
	"fmt"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
	"github.com/sandboxd/sandboxd/task/judge"
	"github.com/sandboxd/sandboxd/task/run"
)

// VerdictToProto maps the engine's verdicts to the API's.
var VerdictToProto = map[judge.Verdict]pb.Judgement_Verdict{
	judge.Accepted:     pb.Judgement_ACCEPTED,
	judge.WrongAnswer:  pb.Judgement_WRONG_ANSWER,
	judge.TimeLimit:    pb.Judgement_TIME_LIMIT,
	judge.MemoryLimit:  pb.Judgement_MEMORY_LIMIT,
	judge.RuntimeError: pb.Judgement_RUNTIME_ERROR,
	judge.OutputLimit:  pb.Judgement_OUTPUT_LIMIT,
	judge.CompileError: pb.Judgement_COMPILE_ERROR,
	judge.SandboxError: pb.Judgement_SANDBOX_ERROR,
	judge.Skipped:      pb.Judgement_SKIPPED,
}

// VerdictFromProto maps the API's verdicts to the engine's.
var VerdictFromProto = inverse(VerdictToProto)

var compareFromProto = map[pb.Comparison_Kind]judge.CompareKind{
	pb.Comparison_LINES:   judge.CompareLines,
	pb.Comparison_EXACT:   judge.CompareExact,
	pb.Comparison_NUMBERS: judge.CompareNumbers,
	pb.Comparison_CHECKER: judge.CompareChecker,
}

var compareToProto = inverse(compareFromProto)

var isolationFromProto = map[pb.Isolation]judge.Isolation{
	pb.Isolation_ISOLATION_FRESH:  judge.IsolationFresh,
	pb.Isolation_ISOLATION_SHARED: judge.IsolationShared,
}

var isolationToProto = inverse(isolationFromProto)

func filesFromProto(files []*pb.File) []run.File {
	out := make([]run.File, 0, len(files))
	for _, f := range files {
		out = append(out, run.File{Path: f.GetPath(), Content: f.GetContent(), Executable: f.GetExecutable()})
	}
	return out
}

func filesToProto(files []run.File) []*pb.File {
	out := make([]*pb.File, 0, len(files))
	for _, f := range files {
		out = append(out, &pb.File{Path: f.Path, Content: f.Content, Executable: f.Executable})
	}
	return out
}

// SubmissionFromProto converts a submission, refusing what does not fit
// the engine's types by the field's name.
func SubmissionFromProto(s *pb.Submission) (judge.Submission, error) {
	lim, err := LimitsFromProto(s.GetLimits())
	if err != nil {
		return judge.Submission{}, err
	}
	out := judge.Submission{ID: s.GetId(), Language: s.GetLanguage(), Code: s.GetCode(), Argv: s.GetArgv(),
		Files: filesFromProto(s.GetFiles()), Image: s.GetImage(), Runtime: s.GetRuntime(), Limits: lim, Env: s.GetEnv(),
		StopOnFailure: s.GetStopOnFailure(), IdempotencyKey: s.GetIdempotencyKey()}
	iso, ok := isolationFromProto[s.GetIsolation()]
	if !ok {
		return judge.Submission{}, run.Invalid("isolation", "%d is not an isolation of the API", s.GetIsolation())
	}
	out.Isolation = iso
	if s.Seed != nil {
		seed := s.GetSeed()
		out.Seed = &seed
	}
	if c := s.GetChecker(); c != nil {
		out.Checker = &judge.Checker{Language: c.GetLanguage(), Code: c.GetCode()}
	}
	for i, c := range s.GetCases() {
		lim, err := LimitsFromProto(c.GetLimits())
		if err != nil {
			return judge.Submission{}, run.Invalid(caseField(i, "limits"), "%v", err)
		}
		kind, ok := compareFromProto[c.GetCompare().GetKind()]
		if !ok {
			return judge.Submission{}, run.Invalid(caseField(i, "compare.kind"), "%d is not a comparison of the API", c.GetCompare().GetKind())
		}
		jc := judge.Case{Name: c.GetName(), Args: c.GetArgs(), Files: filesFromProto(c.GetFiles()), Test: c.GetTest(), Limits: lim,
			Compare: judge.Compare{Kind: kind, Absolute: c.GetCompare().GetAbsolute(), Relative: c.GetCompare().GetRelative()}}
		if c.Stdin != nil {
			jc.Stdin = orEmpty(c.GetStdin())
		}
		if c.ExpectedStdout != nil {
			jc.Expected = orEmpty(c.GetExpectedStdout())
		}
		out.Cases = append(out.Cases, jc)
	}
	return out, nil
}

func caseField(i int, name string) string { return fmt.Sprintf("cases[%d].%s", i, name) }

func orEmpty(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// SubmissionToProto converts a submission for the API.
func SubmissionToProto(s judge.Submission) *pb.Submission {
	out := &pb.Submission{Id: s.ID, Language: s.Language, Code: s.Code, Argv: s.Argv, Files: filesToProto(s.Files),
		Image: s.Image, Runtime: s.Runtime, Limits: LimitsToProto(s.Limits), Env: s.Env, Seed: s.Seed,
		StopOnFailure: s.StopOnFailure, IdempotencyKey: s.IdempotencyKey, Isolation: isolationToProto[s.Isolation]}
	if c := s.Checker; c != nil {
		out.Checker = &pb.Checker{Language: c.Language, Code: c.Code}
	}
	for _, c := range s.Cases {
		pc := &pb.TestCase{Name: c.Name, Args: c.Args, Files: filesToProto(c.Files), Test: c.Test, Limits: LimitsToProto(c.Limits),
			Compare: &pb.Comparison{Kind: compareToProto[c.Compare.Kind], Absolute: c.Compare.Absolute, Relative: c.Compare.Relative}}
		if c.Stdin != nil {
			pc.Stdin = c.Stdin
		}
		if c.Expected != nil {
			pc.ExpectedStdout = c.Expected
		}
		out.Cases = append(out.Cases, pc)
	}
	return out
}

// CaseResultToProto converts a case's result for the API.
func CaseResultToProto(c judge.CaseResult) *pb.CaseResult {
	return &pb.CaseResult{Index: uint32(c.Index), Name: c.Name, Verdict: VerdictToProto[c.Verdict], Message: c.Message,
		Status: StatusToProto[c.Status], ExitCode: int32(c.ExitCode), Signal: int32(c.Signal), Duration: durationpb.New(c.Duration),
		PeakMemoryBytes: c.PeakMemoryBytes, Stdout: c.Stdout, Stderr: c.Stderr, StdoutTruncated: c.StdoutTruncated,
		StderrTruncated: c.StderrTruncated, RunId: c.RunID, BundleDigest: c.BundleDigest}
}

// CaseResultFromProto converts a case's result from the API.
func CaseResultFromProto(c *pb.CaseResult) judge.CaseResult {
	return judge.CaseResult{Index: int(c.GetIndex()), Name: c.GetName(), Verdict: VerdictFromProto[c.GetVerdict()], Message: c.GetMessage(),
		Status: StatusFromProto[c.GetStatus()], ExitCode: int(c.GetExitCode()), Signal: int(c.GetSignal()), Duration: c.GetDuration().AsDuration(),
		PeakMemoryBytes: c.GetPeakMemoryBytes(), Stdout: c.GetStdout(), Stderr: c.GetStderr(), StdoutTruncated: c.GetStdoutTruncated(),
		StderrTruncated: c.GetStderrTruncated(), RunID: c.GetRunId(), BundleDigest: c.GetBundleDigest()}
}

// JudgementToProto converts a judgement for the API.
func JudgementToProto(j judge.Judgement) *pb.Judgement {
	out := &pb.Judgement{JudgementId: j.ID, SubmissionId: j.SubmissionID, Verdict: VerdictToProto[j.Verdict], Passed: uint32(j.Passed),
		Total: uint32(len(j.Cases)), FirstFailing: int32(j.FirstFailing), Isolation: isolationToProto[j.Isolation], Image: j.Image,
		ImageDigest: j.ImageDigest, Runtime: j.Runtime, Duration: durationpb.New(j.Duration), BundleDigest: j.BundleDigest,
		BundleError: j.BundleError, Tenant: j.Tenant, Retried: j.Retried}
	for _, c := range j.Cases {
		out.Cases = append(out.Cases, CaseResultToProto(c))
	}
	if c := j.Compile; c != nil {
		out.Compile = &pb.CompileResult{Ok: c.OK, Message: c.Message, Duration: durationpb.New(c.Duration), Stdout: c.Stdout,
			Stderr: c.Stderr, RunId: c.RunID, BundleDigest: c.BundleDigest}
	}
	return out
}

// JudgementFromProto converts a judgement from the API.
func JudgementFromProto(p *pb.Judgement) judge.Judgement {
	j := judge.Judgement{ID: p.GetJudgementId(), SubmissionID: p.GetSubmissionId(), Verdict: VerdictFromProto[p.GetVerdict()],
		Passed: int(p.GetPassed()), FirstFailing: int(p.GetFirstFailing()), Isolation: isolationFromProto[p.GetIsolation()], Image: p.GetImage(),
		ImageDigest: p.GetImageDigest(), Runtime: p.GetRuntime(), Duration: p.GetDuration().AsDuration(), BundleDigest: p.GetBundleDigest(),
		BundleError: p.GetBundleError(), Tenant: p.GetTenant(), Retried: p.GetRetried()}
	for _, c := range p.GetCases() {
		j.Cases = append(j.Cases, CaseResultFromProto(c))
	}
	if c := p.GetCompile(); c != nil {
		j.Compile = &judge.CompileResult{OK: c.GetOk(), Message: c.GetMessage(), Duration: c.GetDuration().AsDuration(),
			Stdout: c.GetStdout(), Stderr: c.GetStderr(), RunID: c.GetRunId(), BundleDigest: c.GetBundleDigest()}
	}
	return j
}
