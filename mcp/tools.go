package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/docker/go-units"
	"github.com/google/jsonschema-go/jsonschema"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/run"
	sbtools "github.com/sandboxd/sandboxd/task/tools"
)

// File is an input file of a tool call.
type File struct {
	Path     string `json:"path" jsonschema:"where the file goes, relative to /input, e.g. data/sales.csv"`
	Content  string `json:"content" jsonschema:"the file's content: text, or base64 when encoding is base64"`
	Encoding string `json:"encoding,omitempty" jsonschema:"utf-8 (the default) or base64 for binary files"`
}

// Common are the arguments both tools take.
type Common struct {
	Files          []File            `json:"files,omitempty" jsonschema:"files to place read-only under /input"`
	Stdin          string            `json:"stdin,omitempty" jsonschema:"text for the program's standard input"`
	TimeoutSeconds float64           `json:"timeout_seconds,omitempty" jsonschema:"wall-clock limit in seconds; past it the sandbox is killed"`
	MemoryMB       int64             `json:"memory_mb,omitempty" jsonschema:"memory limit in MiB; past it the program is killed"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"environment variables to add"`
	Seed           *uint64           `json:"seed,omitempty" jsonschema:"seeds Python's random and numpy (exported as SANDBOX_SEED) so that the run reproduces"`
	Network        string            `json:"network,omitempty" jsonschema:"network access: none (the default), or the name of one of the operator's network policies, which lets the program reach only the hosts the policy allows"`
	SessionID      string            `json:"session_id,omitempty" jsonschema:"run in this session (from create_session) instead of a fresh sandbox: its /workspace, background processes and Python or JavaScript variables are kept between calls; files, memory_mb and network are then the session's"`
	IdempotencyKey string            `json:"idempotency_key,omitempty" jsonschema:"makes a retry of this call safe: a second call with the same key and arguments follows the first call's run (the same run_id, or the same task) instead of starting another"`
	Tools          []string          `json:"tools,omitempty" jsonschema:"tools the program may call, never over the network: in Python from sandboxd import tools then tools.PROVIDER.TOOL(arg=...), in JavaScript const { tools } = require('sandboxd') then await tools.PROVIDER.TOOL({arg: ...}); every call is checked, recorded in the bundle and counted in the result"`
}

// CreateSessionInput are create_session's arguments.
type CreateSessionInput struct {
	Language    string  `json:"language,omitempty" jsonschema:"the session's language: python and javascript keep one interpreter across calls; shell (the default) runs commands only"`
	Image       string  `json:"image,omitempty" jsonschema:"the image to run in, for a shell session (default: the shell image) or in place of the language's"`
	Files       []File  `json:"files,omitempty" jsonschema:"files to place read-only under /input for the whole session"`
	MemoryMB    int64   `json:"memory_mb,omitempty" jsonschema:"the session's memory limit in MiB"`
	Network     string  `json:"network,omitempty" jsonschema:"network access for the whole session: none (the default) or an operator's network policy"`
	IdleSeconds float64 `json:"idle_seconds,omitempty" jsonschema:"end the session after this long without a call"`
}

// SessionOutput is create_session's and end_session's result.
type SessionOutput struct {
	SessionID string `json:"session_id"`
	State     string `json:"state" jsonschema:"ACTIVE, DELETED, EXPIRED, FAILED or LOST"`
	Image     string `json:"image"`
	ExpiresAt string `json:"expires_at" jsonschema:"when the session ends at the latest (RFC 3339)"`
}

// EndSessionInput are end_session's arguments.
type EndSessionInput struct {
	SessionID string `json:"session_id" jsonschema:"the session to end; its sandbox is removed"`
}

// RunCodeInput are run_code's arguments.
type RunCodeInput struct {
	Language string `json:"language" jsonschema:"the language of the code"`
	Code     string `json:"code" jsonschema:"the program, run from /code with /workspace as the working directory"`
	Common
}

// RunCommandInput are run_command's arguments.
type RunCommandInput struct {
	Command string   `json:"command,omitempty" jsonschema:"a shell command line, run with /bin/sh -c"`
	Argv    []string `json:"argv,omitempty" jsonschema:"the command as a list of arguments, run without a shell"`
	Image   string   `json:"image,omitempty" jsonschema:"the image to run in"`
	Common
}

// OutputFile is a file the program left in /workspace.
type OutputFile struct {
	Path string `json:"path" jsonschema:"relative to /workspace"`
	Type string `json:"type" jsonschema:"file, dir, symlink, fifo, socket, device or other"`
	Size int64  `json:"size,omitempty" jsonschema:"bytes, for files"`
}

// RunOutput is the structured result of both tools.
type RunOutput struct {
	Status          string       `json:"status" jsonschema:"how the run ended"`
	ExitCode        int          `json:"exit_code" jsonschema:"the program's exit code (128+N when killed by signal N)"`
	Signal          int          `json:"signal,omitempty" jsonschema:"the signal that ended the program"`
	Message         string       `json:"message" jsonschema:"one line on how the run ended"`
	Stdout          string       `json:"stdout" jsonschema:"the head of standard output"`
	Stderr          string       `json:"stderr" jsonschema:"the head of standard error"`
	StdoutTruncated bool         `json:"stdout_truncated" jsonschema:"stdout holds only the head of what the program wrote"`
	StderrTruncated bool         `json:"stderr_truncated" jsonschema:"stderr holds only the head of what the program wrote"`
	StdoutBytes     int64        `json:"stdout_bytes" jsonschema:"bytes the program wrote to stdout, shown or not"`
	StderrBytes     int64        `json:"stderr_bytes" jsonschema:"bytes the program wrote to stderr, shown or not"`
	DurationMs      float64      `json:"duration_ms" jsonschema:"wall time of the run"`
	RunID           string       `json:"run_id"`
	Tenant          string       `json:"tenant,omitempty"`
	BundleDigest    string       `json:"bundle_digest,omitempty" jsonschema:"the run's artifact bundle, readable as a resource"`
	Files           []OutputFile `json:"files" jsonschema:"what the program left in /workspace"`
	// A call of a session, and what the Python kernel made of it.
	SessionSeq     int64           `json:"session_seq,omitempty" jsonschema:"the call's number in its session"`
	ExecutionCount int64           `json:"execution_count,omitempty" jsonschema:"the kernel's execution counter"`
	Value          string          `json:"value,omitempty" jsonschema:"the value of the code's last expression (text/plain), as IPython or Node's REPL shows it"`
	Error          *KernelError    `json:"error,omitempty" jsonschema:"the exception that ended the code"`
	Displays       []DisplayOutput `json:"displays,omitempty" jsonschema:"what the code displayed, in order; images are attached to the result"`
	// For a run with a network policy: every attempt is in the bundle.
	NetworkConnections int   `json:"network_connections,omitempty" jsonschema:"connections the program attempted under its network policy"`
	NetworkDenied      int   `json:"network_denied,omitempty" jsonschema:"connections and DNS queries the network policy refused"`
	NetworkBytesOut    int64 `json:"network_bytes_out,omitempty" jsonschema:"bytes the program sent through the egress gateway"`
	NetworkBytesIn     int64 `json:"network_bytes_in,omitempty" jsonschema:"bytes the program received through the egress gateway"`
}

// KernelError is a Python exception of a session's call.
type KernelError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

// DisplayOutput is one display of a session's Python call.
type DisplayOutput struct {
	Text  string            `json:"text,omitempty" jsonschema:"text/plain, when the display has it"`
	Files map[string]string `json:"files,omitempty" jsonschema:"images and other binary displays by MIME type: their paths in /workspace"`
}

// runOutputSchema is the output schema of the tools that answer with a
// run: run_code, run_command and wait_run.
func runOutputSchema() (*jsonschema.Schema, error) {
	out, err := jsonschema.For[RunOutput](nil)
	if err != nil {
		return nil, err
	}
	out.Properties["status"].Enum = statuses
	return out, nil
}

// kernelFields are RunOutput's fields only a session's kernel fills.
var kernelFields = []string{"execution_count", "value", "error", "displays"}

var statuses = []any{"OK", "NONZERO_EXIT", "TIMEOUT", "OOM_KILLED", "OUTPUT_LIMIT", "CANCELLED", "KILLED_BY_SIGNAL", "RUNTIME_ERROR", "KERNEL_DIED", "LOST", "COMPILE_ERROR", statusRunning}

// tools builds the two tools, with schemas and descriptions that state
// what this engine runs and within which limits.
func tools(inv task.Inventory) (code, command *mcpsdk.Tool, err error) {
	codeIn, err := jsonschema.For[RunCodeInput](nil)
	if err != nil {
		return nil, nil, err
	}
	commandIn, err := jsonschema.For[RunCommandInput](nil)
	if err != nil {
		return nil, nil, err
	}
	out, err := runOutputSchema()
	if err != nil {
		return nil, nil, err
	}
	// A command runs as a process, never in a session's kernel: its
	// result has none of the kernel's fields, and its schema, repeated in
	// every tools/list, does not name them.
	commandOut := out.CloneSchemas()
	for _, k := range kernelFields {
		delete(commandOut.Properties, k)
	}

	var languages []any
	for _, l := range inv.Languages {
		languages = append(languages, l.Name)
	}
	codeIn.Properties["language"].Enum = languages
	codeIn.Properties["code"].MinLength = ptr(1)
	imageNames := imageEnum(inv)
	commandIn.Properties["image"].Enum = imageNames
	commandIn.Properties["command"].MinLength = ptr(1)
	commandIn.Properties["argv"].MinItems = ptr(1)
	for _, in := range []*jsonschema.Schema{codeIn, commandIn} {
		constrainCommon(in, inv)
	}

	// Nothing leaves the sandbox: the tools change nothing outside it and
	// reach nothing beyond it.
	annotations := func(title string) *mcpsdk.ToolAnnotations {
		return &mcpsdk.ToolAnnotations{Title: title, ReadOnlyHint: false, DestructiveHint: ptr(false),
			IdempotentHint: false, OpenWorldHint: ptr(false)}
	}
	limitsText := describeLimits(inv)
	code = &mcpsdk.Tool{
		Name:  "run_code",
		Title: "Run code in a sandbox",
		Description: fmt.Sprintf("Run a program in a fresh, isolated sandbox and get its output, exit status and the files it wrote. "+
			"Use it to compute, analyse data, test code or check an answer by running it. Languages: %s. %s%s%s",
			describeLanguages(inv), describePackages(inv), chartsOnce, limitsText),
		InputSchema:  codeIn,
		OutputSchema: out,
		Annotations:  annotations("Run code in a sandbox"),
	}
	command = &mcpsdk.Tool{
		Name:  "run_command",
		Title: "Run a command in a sandbox",
		Description: fmt.Sprintf("Run a shell command line (command) or an argument list (argv) in a fresh, isolated sandbox and get its output, exit status and the files it wrote. "+
			"Use it for shell tools (ls, grep, sed, awk, sort, python3 ...) on input files. Images: %s (default %s). %s",
			strings.Join(anyStrings(imageNames), ", "), commandImage(inv), limitsText),
		InputSchema:  commandIn,
		OutputSchema: commandOut,
		Annotations:  annotations("Run a command in a sandbox"),
	}
	return code, command, nil
}

// constrainCommon states the ranges of the common arguments.
func constrainCommon(in *jsonschema.Schema, inv task.Inventory) {
	p := in.Properties
	lo, hi := limits.Minimums(), inv.MaxLimits
	p["timeout_seconds"].Minimum = ptr(lo.Timeout.Seconds())
	p["timeout_seconds"].Maximum = ptr(hi.Timeout.Seconds())
	p["timeout_seconds"].Description += fmt.Sprintf(" (default %v, at most %v)", inv.DefaultLimits.Timeout, hi.Timeout)
	p["memory_mb"].Minimum = ptr(float64(lo.MemoryBytes >> 20))
	p["memory_mb"].Maximum = ptr(float64(hi.MemoryBytes >> 20))
	p["memory_mb"].Description += fmt.Sprintf(" (default %d, at most %d)", inv.DefaultLimits.MemoryBytes>>20, hi.MemoryBytes>>20)
	p["network"].Enum = []any{string(netpolicy.None)}
	for _, name := range slices.Sorted(maps.Keys(inv.NetworkPolicies)) {
		p["network"].Enum = append(p["network"].Enum, name)
		p["network"].Description += fmt.Sprintf("; %s allows %s", name, describeRules(inv.NetworkPolicies[name]))
	}
	p["env"].PropertyNames = &jsonschema.Schema{Type: "string", Pattern: `^[A-Za-z_][A-Za-z0-9_]*$`}
	files := p["files"].Items
	files.Properties["encoding"].Enum = []any{"utf-8", "base64"}
	files.Properties["path"].MinLength = ptr(1)
	constrainTools(in, inv)
}

// constrainTools names the operator's tools a program may call, or
// leaves the argument out when there are none.
func constrainTools(in *jsonschema.Schema, inv task.Inventory) {
	if len(inv.Tools) == 0 {
		delete(in.Properties, "tools")
		return
	}
	p := in.Properties["tools"]
	var names []any
	var listed []string
	providers := map[string]bool{}
	for _, t := range inv.Tools {
		names = append(names, t.Name)
		note := string(t.Risk)
		if t.Risk == sbtools.RiskHigh {
			note += ", each call needs your confirmation"
		}
		listed = append(listed, fmt.Sprintf("%s (%s): %s", t.Name, note, t.Description))
		prov, _, _ := strings.Cut(t.Name, ".")
		providers[prov] = true
	}
	for _, prov := range slices.Sorted(maps.Keys(providers)) {
		names = append(names, prov+".*")
	}
	p.Items = &jsonschema.Schema{Type: "string", Enum: names}
	p.Description += ". Available: " + strings.Join(listed, "; ")
}

func describeRules(rules []netpolicy.Rule) string {
	parts := make([]string, 0, len(rules))
	for _, r := range rules {
		parts = append(parts, r.String())
	}
	return strings.Join(parts, ", ")
}

func describeLanguages(inv task.Inventory) string {
	var parts []string
	for _, l := range inv.Languages {
		parts = append(parts, fmt.Sprintf("%s (%s)", l.Name, l.Image))
	}
	return strings.Join(parts, ", ")
}

// imageEnum is the names of inv's images, as a schema's enum.
func imageEnum(inv task.Inventory) []any {
	var names []any
	for _, im := range inv.Images {
		names = append(names, im.Name)
	}
	return names
}

// describePackages says what programs can import, image by image, for
// the images of inv's languages that install any.
func describePackages(inv task.Inventory) string {
	var parts []string
	for _, im := range inv.Images {
		if len(im.Packages) > 0 && slices.ContainsFunc(inv.Languages, func(l images.Language) bool { return l.Image == im.Name }) {
			parts = append(parts, fmt.Sprintf("%s has %s", im.Name, strings.Join(im.Packages, ", ")))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return strings.Join(parts, "; ") + ". "
}

// chartsOnce says how a single run shows a chart: a kernel's display
// needs a session.
const chartsOnce = "A picture the program saves in /workspace (plt.savefig('chart.png')) comes back as an image; plt.show() shows one only in a session. "

func commandImage(inv task.Inventory) string {
	for _, l := range inv.Languages {
		if l.Name == "sh" {
			return l.Image
		}
	}
	return "the shell image"
}

// describeLimits is the sentence on limits both tools carry.
func describeLimits(inv task.Inventory) string {
	d, m := inv.DefaultLimits, inv.MaxLimits
	size := func(n int64) string { return units.BytesSize(float64(n)) }
	return fmt.Sprintf("The program runs as an unprivileged user with no network, a read-only system, input files read-only in /input "+
		"and a writable working directory /workspace; files it leaves there are listed in the result and kept in the run's bundle. "+
		"Nothing persists between calls unless session_id names a session from create_session. Limits: memory %s (up to %s with memory_mb), CPU %.1f cores, %d processes, %v (up to %v with timeout_seconds), "+
		"%s of disk; the result shows the head of stdout and stderr.",
		size(d.MemoryBytes), size(m.MemoryBytes), float64(d.CPUMillis)/1000, d.Pids, d.Timeout, m.Timeout, size(d.DiskBytes))
}

// resultOutput is the structured result of a run.
func resultOutput(res run.Result, obs *observer) *RunOutput {
	stdout, _ := validText(obs.text(run.Stdout))
	stderr, _ := validText(obs.text(run.Stderr))
	out := &RunOutput{
		Status: string(res.Status), ExitCode: res.ExitCode, Signal: res.Signal, Message: res.Message,
		Stdout: stdout, Stderr: stderr, StdoutTruncated: res.StdoutTruncated, StderrTruncated: res.StderrTruncated,
		StdoutBytes: res.StdoutTotal, StderrBytes: res.StderrTotal,
		DurationMs: float64(res.Duration) / float64(time.Millisecond), RunID: res.RunID, Tenant: res.Tenant, BundleDigest: res.BundleDigest,
		Files: []OutputFile{},
	}
	for _, f := range res.Files {
		out.Files = append(out.Files, OutputFile{Path: f.Path, Type: f.Type, Size: f.Size})
	}
	if n := res.Network; n != nil {
		out.NetworkConnections, out.NetworkDenied = n.Connections, n.Denied
		out.NetworkBytesOut, out.NetworkBytesIn = n.BytesOut, n.BytesIn
	}
	if c := res.Session; c != nil {
		out.SessionSeq = c.Seq
	}
	if k := res.Kernel; k != nil {
		out.ExecutionCount, out.Value = k.ExecutionCount, k.Result["text/plain"]
		if e := k.Error; e != nil {
			out.Error = &KernelError{Name: e.Name, Value: e.Value, Traceback: strings.Join(e.Traceback, "\n")}
		}
		for _, d := range k.Displays {
			disp := DisplayOutput{Text: d.Data["text/plain"]}
			for _, f := range d.Files {
				if disp.Files == nil {
					disp.Files = map[string]string{}
				}
				disp.Files[f.MIME] = f.Path
			}
			out.Displays = append(out.Displays, disp)
		}
	}
	return out
}

// maxListedFiles bounds the files the text result names.
const maxListedFiles = 20

// resultText is what a model reads: the status line, the output, and
// plain notes on what was left out.
func resultText(out *RunOutput, res run.Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "status: %s (%s) in %.2f s\n", out.Status, out.Message, out.DurationMs/1000)
	for _, s := range []struct {
		name      string
		text      string
		truncated bool
		total     int64
	}{
		{"stdout", out.Stdout, out.StdoutTruncated, out.StdoutBytes},
		{"stderr", out.Stderr, out.StderrTruncated, out.StderrBytes},
	} {
		if s.text == "" && s.total == 0 {
			fmt.Fprintf(&b, "--- %s: empty ---\n", s.name)
			continue
		}
		fmt.Fprintf(&b, "--- %s ---\n%s", s.name, s.text)
		if !strings.HasSuffix(s.text, "\n") {
			b.WriteString("\n")
		}
		if s.truncated {
			fmt.Fprintf(&b, "[%s truncated: showing the first %d of %d bytes; %d bytes left out]\n", s.name, len(s.text), s.total, s.total-int64(len(s.text)))
		}
	}
	if len(out.Files) > 0 {
		var names []string
		for i, f := range out.Files {
			if i == maxListedFiles {
				names = append(names, fmt.Sprintf("and %d more", len(out.Files)-maxListedFiles))
				break
			}
			if f.Type == "file" {
				names = append(names, fmt.Sprintf("%s (%s)", f.Path, units.BytesSize(float64(f.Size))))
			} else {
				names = append(names, fmt.Sprintf("%s (%s)", f.Path, f.Type))
			}
		}
		fmt.Fprintf(&b, "files left in /workspace: %s\n", strings.Join(names, ", "))
	}
	if out.Value != "" {
		fmt.Fprintf(&b, "value: %s\n", out.Value)
	}
	if e := out.Error; e != nil {
		fmt.Fprintf(&b, "error: %s: %s\n", e.Name, e.Value)
	}
	for i, d := range out.Displays {
		for _, mime := range slices.Sorted(maps.Keys(d.Files)) {
			fmt.Fprintf(&b, "display %d: %s at /workspace/%s\n", i+1, mime, d.Files[mime])
		}
		if d.Text != "" && len(d.Files) == 0 {
			fmt.Fprintf(&b, "display %d: %s\n", i+1, d.Text)
		}
	}
	if c := res.Session; c != nil {
		fmt.Fprintf(&b, "session %s, call %d\n", c.ID, c.Seq)
	}
	if res.BundleDigest != "" {
		fmt.Fprintf(&b, "bundle: %s\n", res.BundleDigest)
	}
	return b.String()
}

// bundleURIPrefix starts the URIs of bundle resources:
// sandboxd://bundle/HEX/manifest.json, .../stdout, .../stderr.
const bundleURIPrefix = "sandboxd://bundle/"

// readBundle serves a bundle's manifest, stdout or stderr, after verifying
// the whole bundle.
func (h *handlers) readBundle(ctx context.Context, req *mcpsdk.ReadResourceRequest) (*mcpsdk.ReadResourceResult, error) {
	uri := req.Params.URI
	rest, ok := strings.CutPrefix(uri, bundleURIPrefix)
	hex, entry, ok2 := strings.Cut(rest, "/")
	output := strings.HasPrefix(entry, artifacts.DirOutput+"/")
	if !ok || !ok2 || (entry != artifacts.ManifestPath && entry != artifacts.EntryStdout && entry != artifacts.EntryStderr && !output) {
		return nil, mcpsdk.ResourceNotFoundError(uri)
	}
	digest := "sha256:" + hex
	if _, err := artifacts.ParseDigest(digest); err != nil {
		return nil, mcpsdk.ResourceNotFoundError(uri)
	}
	rc, err := h.engine.OpenBundle(ctx, digest)
	if err != nil {
		return nil, mcpsdk.ResourceNotFoundError(uri)
	}
	defer rc.Close()
	var content []byte
	found := false
	b, err := artifacts.Verify(rc, digest, artifacts.DefaultReadLimits(), func(p string, r io.Reader) error {
		if p != entry {
			return nil
		}
		found = true
		var err error
		content, err = io.ReadAll(io.LimitReader(r, maxResourceBytes+1))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("bundle %s does not verify: %w", digest, err)
	}
	if output {
		if !found {
			return nil, mcpsdk.ResourceNotFoundError(uri)
		}
		if len(content) > maxResourceBytes {
			return nil, fmt.Errorf("%s is larger than the %d MiB a resource carries: fetch the bundle with sandboxd bundle file", entry, maxResourceBytes>>20)
		}
		return fileContents(uri, entry, content), nil
	}
	mime := "text/plain"
	if entry == artifacts.ManifestPath {
		mime = "application/json"
		if content, err = json.MarshalIndent(b.Manifest, "", "  "); err != nil {
			return nil, err
		}
	}
	text, _ := validText(string(content))
	return &mcpsdk.ReadResourceResult{Contents: []*mcpsdk.ResourceContents{{URI: uri, MIMEType: mime, Text: text}}}, nil
}

// maxResourceBytes bounds an output file read as a resource.
const maxResourceBytes = 16 << 20

func ptr[T any](v T) *T { return &v }

func anyStrings(v []any) []string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = fmt.Sprint(x)
	}
	return out
}

// grantedTools states run_code's, run_command's and create_session's
// languages, images and tools, in a tenant's tools/list, as the tenant
// may use them: the server's tools name the operator's whole catalog,
// and a tenant is not to learn of what it may not use (the engine
// refuses it anyway).
func (h *handlers) grantedTools(next mcpsdk.MethodHandler) mcpsdk.MethodHandler {
	return func(ctx context.Context, method string, req mcpsdk.Request) (mcpsdk.Result, error) {
		res, err := next(ctx, method, req)
		list, ok := res.(*mcpsdk.ListToolsResult)
		if err != nil || !ok || list == nil || access.CallerFrom(ctx).Tenant == nil {
			return res, err
		}
		inv, err := h.engine.Inventory(ctx)
		if err != nil {
			return nil, fmt.Errorf("ask the engine what the caller may use: %w", err)
		}
		code, command, err := tools(inv)
		if err != nil {
			return nil, err
		}
		create, _, err := sessionTools(inv)
		if err != nil {
			return nil, err
		}
		mine := map[string]*mcpsdk.Tool{code.Name: code, command.Name: command, create.Name: create}
		for i, t := range list.Tools {
			m, ok := mine[t.Name]
			if !ok {
				continue
			}
			// The listed tool is the server's, shared by every caller's
			// list: the tenant's is a copy.
			own := *t
			own.Description = m.Description
			own.InputSchema = portable(m.InputSchema.(*jsonschema.Schema))
			own.OutputSchema = portable(m.OutputSchema.(*jsonschema.Schema))
			list.Tools[i] = &own
		}
		return list, nil
	}
}
