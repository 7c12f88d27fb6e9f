// Package artifacts is the bundle format of sandboxd: what a run was and what
// it produced, as one deterministic tar compressed with zstd, with a manifest
// that lists every entry's SHA-256. It writes bundles, verifies untrusted
// ones without writing anything, and stores them content-addressed on disk.
//
// A bundle's identity is the SHA-256 of its canonical uncompressed tar, so
// the same content has the same digest at any compression level. The
// manifest keeps what must be the same when a run reproduces (the
// "reproducible" section) apart from what differs every time (the "run"
// section: run id, times, durations, peak memory).
package artifacts

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/netpolicy"
)

// Format names this version of the bundle format.
const Format = "sandboxd.bundle/v1"

// ManifestPath is the manifest's name in the tar.
const ManifestPath = "manifest.json"

// Names of the entries a run's bundle may hold.
const (
	EntryStdout = "stdout"
	EntryStderr = "stderr"
	EntryStdin  = "stdin"
	// EntryToolCalls records the program's tool calls, one JSON object
	// a line (see docs/tools.md).
	EntryToolCalls = "tool_calls.jsonl"
	// EntryToolSpecs holds the tools the program's requests named that
	// passed the registry gate (name, description, risk, schema), the
	// caller's as caller.NAME: what a replay holds its calls to.
	EntryToolSpecs = "tool_specs.json"
	DirCode        = "code"
	DirInput       = "input"
	DirOutput      = "output"
	// DirUpload holds the files uploaded into a session before a call.
	DirUpload      = "upload"
	canonicalMtime = 0
)

// Manifest describes a bundle.
type Manifest struct {
	Format       string       `json:"format"`
	Reproducible Reproducible `json:"reproducible"`
	Run          Run          `json:"run"`
}

// Reproducible is what a run that reproduces has the same.
type Reproducible struct {
	Request     Request `json:"request"`
	Image       string  `json:"image"`
	ImageDigest string  `json:"image_digest"`
	// ImageRecipe is the digest of the recipe the image was built from,
	// and ImagePackages what dpkg installed in it, as the lock recorded
	// them: what a replay elsewhere rebuilds it from.
	ImageRecipe   string           `json:"image_recipe,omitempty"`
	ImagePackages []images.Package `json:"image_packages,omitempty"`
	Runtime       Runtime          `json:"runtime"`
	Backend       string           `json:"backend"`
	// Seccomp is the digest of the seccomp profile the program ran under.
	Seccomp     string            `json:"seccomp,omitempty"`
	Environment []string          `json:"environment"`
	Determinism map[string]string `json:"determinism"`
	Outcome     Outcome           `json:"outcome"`
	// Outputs lists what the program left in /workspace, read or not.
	Outputs []Output `json:"outputs"`
	// OutputsTruncated says the listing stopped at its limit.
	OutputsTruncated bool `json:"outputs_truncated"`
	// Entries lists every file of the tar but the manifest, sorted.
	Entries []Entry `json:"entries"`
	// Judgement, in a judgement's bundle, is the submission as judged and
	// each case's verdict; Request.Kind is then "judgement".
	Judgement *Judgement `json:"judgement,omitempty"`
}

// Request is the effective request, as the engine ran it.
type Request struct {
	// Kind is "code" or "command".
	Kind     string        `json:"kind"`
	Language string        `json:"language,omitempty"`
	Argv     []string      `json:"argv"`
	Shell    string        `json:"shell,omitempty"`
	Limits   limits.Limits `json:"limits"`
	Network  string        `json:"network"`
	// NetworkPolicy and NetworkRules are what an allow-listed request
	// asked for (the operator's named policy, its own rules), and
	// NetworkCaps the caps it ran with; NetworkSecrets name the
	// operator's secrets the gateway added (never their values).
	NetworkPolicy  string            `json:"network_policy,omitempty"`
	NetworkRules   []netpolicy.Rule  `json:"network_rules,omitempty"`
	NetworkCaps    *netpolicy.Caps   `json:"network_caps,omitempty"`
	NetworkSecrets []string          `json:"network_secrets,omitempty"`
	Mounts         []string          `json:"mounts"`
	Env            map[string]string `json:"env"`
	Workdir        string            `json:"workdir"`
	Seed           string            `json:"seed,omitempty"`
	// Files lists the input files; their content is under input/.
	Files []InputFile `json:"files"`
	// Stdin says whether stdin was given; its content is the stdin entry.
	Stdin bool `json:"stdin"`
	// Prestarted says the program ran in an interpreter started before
	// it came, which had imported Preimported (docs/prestart.md): a
	// program can tell, so a replay asks for the same.
	Prestarted  bool     `json:"prestarted,omitempty"`
	Preimported []string `json:"preimported,omitempty"`
	// Tools are the tools the program was let call; the calls are the
	// tool_calls.jsonl entry.
	Tools []string `json:"tools,omitempty"`
}

// InputFile is one file placed in /input.
type InputFile struct {
	Path       string `json:"path"`
	Executable bool   `json:"executable,omitempty"`
}

// Runtime is the OCI runtime a run used.
type Runtime struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Outcome is how the program ended.
type Outcome struct {
	Status          string `json:"status"`
	ExitCode        int    `json:"exit_code"`
	Signal          int    `json:"signal"`
	StdoutTotal     int64  `json:"stdout_total"`
	StderrTotal     int64  `json:"stderr_total"`
	StdoutTruncated bool   `json:"stdout_truncated"`
	StderrTruncated bool   `json:"stderr_truncated"`
	// Kernel is what a session's kernel replied to a Python call.
	Kernel *KernelReply `json:"kernel,omitempty"`
}

// Output is one thing the program left in /workspace.
type Output struct {
	Path string `json:"path"`
	// Type is file, dir, symlink, fifo, socket, device or other. Only
	// files are read; the rest are recorded by name and type.
	Type   string `json:"type"`
	Size   int64  `json:"size,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	// Omitted says why a file's content is not in the bundle.
	Omitted string `json:"omitted,omitempty"`
}

// Entry is one file of the tar.
type Entry struct {
	Path       string `json:"path"`
	Size       int64  `json:"size"`
	SHA256     string `json:"sha256"`
	Executable bool   `json:"executable,omitempty"`
}

// Run is what differs between two runs of the same request.
type Run struct {
	RunID    string `json:"run_id"`
	Instance string `json:"instance"`
	// Tenant is the caller whose run it was, as the daemon named it.
	Tenant          string    `json:"tenant,omitempty"`
	Version         string    `json:"sandboxd_version"`
	StartedAt       time.Time `json:"started_at"`
	FinishedAt      time.Time `json:"finished_at"`
	DurationMs      float64   `json:"duration_ms"`
	QueuedMs        float64   `json:"queued_ms"`
	PeakMemoryBytes int64     `json:"peak_memory_bytes"`
	Message         string    `json:"message"`
	// Start is "warm" (a pooled container) or "cold" (one made for the
	// run), and ColdReason why it was cold.
	Start      string `json:"start,omitempty"`
	ColdReason string `json:"cold_reason,omitempty"`
	// Network is what an allow-listed run's network was and did.
	Network *Network `json:"network,omitempty"`
	// Session places a call of a session in its chain.
	Session *Session `json:"session,omitempty"`
	// Replay, in a replay, says which bundle's record answered its tool
	// calls, and which calls it answered.
	Replay *Replay `json:"replay,omitempty"`
	// Judged, in a judgement's bundle, is what differs between two
	// judgings of a submission: each run's id, bundle, time and memory.
	Judged *Judged `json:"judged,omitempty"`
	// ReproducibleDigest is the SHA-256 of the reproducible section:
	// equal digests mean two runs reproduced each other exactly.
	ReproducibleDigest string `json:"reproducible_digest"`
}

// Judgement is what a judgement's bundle says of the submission and its
// verdicts. The submission's code is under DirCode, its files under
// DirInput, the checker's code at EntryChecker, and case N's stdin,
// expected stdout, test, files, stdout and stderr under cases/N/.
type Judgement struct {
	// Isolation is "fresh" (a sandbox per case).
	Isolation     string         `json:"isolation"`
	StopOnFailure bool           `json:"stop_on_failure,omitempty"`
	Checker       string         `json:"checker_language,omitempty"`
	Verdict       string         `json:"verdict"`
	Passed        int            `json:"passed"`
	FirstFailing  int            `json:"first_failing"`
	Compile       *JudgedCompile `json:"compile,omitempty"`
	Cases         []JudgedCase   `json:"cases"`
}

// JudgedCompile is a compiled submission's compile.
type JudgedCompile struct {
	OK    bool     `json:"ok"`
	Argv  []string `json:"argv"`
	Built []string `json:"built"`
}

// JudgedCase is one case: how it was given, how it was decided and its
// verdict.
type JudgedCase struct {
	Name  string      `json:"name,omitempty"`
	Args  []string    `json:"args,omitempty"`
	Files []InputFile `json:"files,omitempty"`
	Stdin bool        `json:"stdin,omitempty"`
	// Expected and Test say whether the case has an expected stdout and
	// a test program; Compare is how the output was compared, with its
	// tolerances.
	Expected bool          `json:"expected,omitempty"`
	Test     bool          `json:"test,omitempty"`
	Compare  string        `json:"compare,omitempty"`
	Absolute float64       `json:"absolute,omitempty"`
	Relative float64       `json:"relative,omitempty"`
	Limits   limits.Limits `json:"limits"`
	Verdict  string        `json:"verdict"`
	Status   string        `json:"status,omitempty"`
	ExitCode int           `json:"exit_code"`
	Signal   int           `json:"signal,omitempty"`
}

// Judged is what differs between two judgings of one submission.
type Judged struct {
	Compile *JudgedRun  `json:"compile,omitempty"`
	Cases   []JudgedRun `json:"cases"`
}

// JudgedRun is one run of a judgement: the compile or a case.
type JudgedRun struct {
	RunID           string  `json:"run_id,omitempty"`
	Bundle          string  `json:"bundle,omitempty"`
	DurationMs      float64 `json:"duration_ms"`
	PeakMemoryBytes int64   `json:"peak_memory_bytes,omitempty"`
	Message         string  `json:"message,omitempty"`
}

// Entries of a judgement's bundle besides its cases'.
const (
	EntryChecker = "checker/code"
	DirCases     = "cases"
	DirCompile   = "compile"
)

// Replay is what a replay took from the bundle it replays: the record of
// its tool calls, which answered the calls Answered instead of their
// tools. Supplied says the caller sent the record (sandboxd replay of a
// bundle this daemon does not hold), rather than the daemon reading it
// from the bundle in its store.
type Replay struct {
	Of       string     `json:"of"`
	Supplied bool       `json:"supplied,omitempty"`
	Answered []Answered `json:"answered"`
}

// Answered is one request of a replay's tool channel that its record
// answered.
type Answered struct {
	Seq  int    `json:"seq,omitempty"`
	Op   string `json:"op"`
	Tool string `json:"tool,omitempty"`
}

// NetworkChange is a session's network policy as its owner asked for it,
// at its creation or changed between calls (mode none takes every rule
// away); Time is the change's.
type NetworkChange struct {
	Time    time.Time        `json:"time,omitzero"`
	Mode    string           `json:"mode"`
	Policy  string           `json:"policy,omitempty"`
	Rules   []netpolicy.Rule `json:"rules,omitempty"`
	Caps    netpolicy.Caps   `json:"caps,omitzero"`
	Secrets []string         `json:"secrets,omitempty"`
}

// Session is a session call's place: the call before it is the bundle
// ParentBundle, and /workspace went from WorkspaceBefore to WorkspaceAfter.
type Session struct {
	ID              string `json:"id"`
	Seq             int64  `json:"seq"`
	ParentBundle    string `json:"parent_bundle,omitempty"`
	WorkspaceBefore string `json:"workspace_before"`
	WorkspaceAfter  string `json:"workspace_after"`
	// Uploads are the files written into /workspace since the previous
	// call, in order, stored under DirUpload; WorkspaceBefore includes them.
	Uploads []Upload `json:"uploads,omitempty"`
	// Events are what else happened in the session since the previous
	// call, in order: background processes started and ended, ports
	// opened and closed. Replay does not redo them.
	Events []SessionEvent `json:"events,omitempty"`
	// NetworkChanges are the changes of the session's network policy
	// since the previous call, in order: replay makes them again before
	// the call.
	NetworkChanges []NetworkChange `json:"network_changes,omitempty"`
	// Create is, in the first call's bundle, what the session was created
	// with besides what every call's request records; its input files are
	// stored under DirInput.
	Create *SessionCreate `json:"create,omitempty"`
}

// SessionCreate is what a session was created with that its calls'
// requests do not say.
type SessionCreate struct {
	Language string            `json:"language,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	Files    []InputFile       `json:"files,omitempty"`
	// Network is the allow-list the session was created with, as asked.
	Network *NetworkChange `json:"network,omitempty"`
}

// SessionEvent is something that happened in a session between two
// calls. A port's token, a secret, is never recorded.
type SessionEvent struct {
	At   time.Time `json:"at"`
	Kind string    `json:"kind"`
	// Process is a background process's id, with its Argv when it
	// started, and its ExitCode when it ended.
	Process  string   `json:"process,omitempty"`
	Argv     []string `json:"argv,omitempty"`
	ExitCode *int     `json:"exit_code,omitempty"`
	Port     int      `json:"port,omitempty"`
}

// The kinds of a SessionEvent.
const (
	EventProcessStarted = "process_started"
	EventProcessEnded   = "process_ended"
	EventPortOpened     = "port_opened"
	EventPortClosed     = "port_closed"
)

// Upload is a file uploaded into a session.
type Upload struct {
	Path       string `json:"path"`
	Size       int64  `json:"size"`
	SHA256     string `json:"sha256"`
	Executable bool   `json:"executable,omitempty"`
}

// KernelReply is a kernel call's reply: the execution count, the last
// expression's value and the displays by MIME type, and the error.
type KernelReply struct {
	ExecutionCount int64             `json:"execution_count"`
	Result         map[string]string `json:"result,omitempty"`
	Displays       []Display         `json:"displays,omitempty"`
	Error          *KernelError      `json:"error,omitempty"`
}

// Display is one thing the code displayed: text by MIME type, and binary
// types (PNG charts) as files of the call's outputs.
type Display struct {
	Data  map[string]string `json:"data,omitempty"`
	Files []DisplayFile     `json:"files,omitempty"`
}

// DisplayFile is a display written as a file, relative to /workspace.
type DisplayFile struct {
	MIME   string `json:"mime"`
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// KernelError is the exception that ended a kernel call's code.
type KernelError struct {
	Name      string   `json:"name"`
	Value     string   `json:"value"`
	Traceback []string `json:"traceback"`
}

// Network is an allow-listed run's effective rules (the named policy's,
// then the request's) and its record: every DNS query and connection
// attempt, with the decision and the bytes moved.
type Network struct {
	Rules []netpolicy.Rule `json:"rules"`
	netpolicy.Summary
}

// Source is a file to put in a bundle. Open is called to hash (unless
// SHA256 is given), then to write; it must give the same bytes each time.
type Source struct {
	Path       string
	Size       int64
	Executable bool
	Open       func() (io.ReadCloser, error)
	// SHA256, when set, is the content's digest and Size its size, from
	// whoever wrote it: Build then reads the content once, not twice.
	SHA256 []byte
}

// BytesSource is a Source of bytes in memory.
func BytesSource(p string, b []byte, executable bool) Source {
	return Source{Path: p, Size: int64(len(b)), Executable: executable,
		Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }}
}

// Digest formats a SHA-256 sum as "sha256:HEX".
func Digest(sum []byte) string { return "sha256:" + hex.EncodeToString(sum) }

// Build writes the canonical tar of m and sources to w and returns its
// digest. It fills in m's entries and reproducible digest.
func Build(w io.Writer, m *Manifest, sources []Source) (string, error) {
	m.Format = Format
	slices.SortFunc(sources, func(a, b Source) int { return strings.Compare(a.Path, b.Path) })
	m.Reproducible.Entries = make([]Entry, 0, len(sources))
	for i, s := range sources {
		if err := checkName(s.Path); err != nil {
			return "", fmt.Errorf("entry %q: %w", s.Path, err)
		}
		if s.Path == ManifestPath || (i > 0 && sources[i-1].Path == s.Path) {
			return "", fmt.Errorf("entry %q is given twice", s.Path)
		}
		sum, n, err := hashSource(s)
		if err != nil {
			return "", err
		}
		m.Reproducible.Entries = append(m.Reproducible.Entries, Entry{Path: s.Path, Size: n, SHA256: hex.EncodeToString(sum), Executable: s.Executable})
		sources[i].Size = n
	}
	// Output files stored in the bundle carry their entry's digest.
	for i, o := range m.Reproducible.Outputs {
		j := slices.IndexFunc(m.Reproducible.Entries, func(e Entry) bool { return e.Path == DirOutput+"/"+o.Path })
		if o.Type == "file" && j >= 0 {
			m.Reproducible.Outputs[i].SHA256 = m.Reproducible.Entries[j].SHA256
		}
	}
	repro, err := json.Marshal(m.Reproducible)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(repro)
	m.Run.ReproducibleDigest = Digest(sum[:])
	manifest, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return "", err
	}
	manifest = append(manifest, '\n')

	all := append(sources, BytesSource(ManifestPath, manifest, false))
	slices.SortFunc(all, func(a, b Source) int { return strings.Compare(a.Path, b.Path) })
	h := sha256.New()
	tw := tar.NewWriter(io.MultiWriter(w, h))
	dirs := map[string]bool{}
	for _, s := range all {
		for _, dir := range parents(s.Path) {
			if dirs[dir] {
				continue
			}
			dirs[dir] = true
			if err := tw.WriteHeader(canonicalHeader(dir+"/", tar.TypeDir, 0, true)); err != nil {
				return "", err
			}
		}
		if err := tw.WriteHeader(canonicalHeader(s.Path, tar.TypeReg, s.Size, s.Executable)); err != nil {
			return "", err
		}
		if err := copySource(tw, s); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	return Digest(h.Sum(nil)), nil
}

// parents lists the folders of p, outermost first.
func parents(p string) []string {
	var dirs []string
	for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
		dirs = append(dirs, dir)
	}
	slices.Reverse(dirs)
	return dirs
}

// canonicalHeader is the only header shape a bundle has: fixed owner, time
// and modes, no names of users.
func canonicalHeader(name string, typ byte, size int64, executable bool) *tar.Header {
	mode := int64(0o644)
	if executable || typ == tar.TypeDir {
		mode = 0o755
	}
	return &tar.Header{
		Typeflag: typ,
		Name:     name,
		Size:     size,
		Mode:     mode,
		ModTime:  time.Unix(canonicalMtime, 0),
		Format:   tar.FormatPAX,
	}
}

func hashSource(s Source) ([]byte, int64, error) {
	if s.SHA256 != nil {
		return s.SHA256, s.Size, nil
	}
	r, err := s.Open()
	if err != nil {
		return nil, 0, fmt.Errorf("entry %s: %w", s.Path, err)
	}
	defer r.Close()
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return nil, 0, fmt.Errorf("entry %s: %w", s.Path, err)
	}
	return h.Sum(nil), n, nil
}

// copySource writes exactly s.Size bytes of s: a source that changed
// between hashing and writing fails the bundle.
func copySource(w io.Writer, s Source) error {
	r, err := s.Open()
	if err != nil {
		return fmt.Errorf("entry %s: %w", s.Path, err)
	}
	defer r.Close()
	n, err := io.Copy(w, io.LimitReader(r, s.Size))
	if err != nil {
		return fmt.Errorf("entry %s: %w", s.Path, err)
	}
	if n != s.Size {
		return fmt.Errorf("entry %s changed while the bundle was written", s.Path)
	}
	return nil
}
