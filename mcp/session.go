package mcp

import (
	"context"
	"fmt"
	"io"
	"math"
	"mime"
	"path"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/session"
)

// Sessions are explicit: create_session returns an id that run_code and
// run_command take. One implicit session per MCP session would hide when
// a sandbox (and its memory) lives, tie it to a transport's connection,
// and allow only one per host; an id is visible, survives a reconnect, and
// a host may keep several.

// shellSession is create_session's language for a session of commands
// only, which the engine asks for with no language.
const shellSession = "shell"

// sessionTools builds create_session and end_session.
func sessionTools(inv task.Inventory) (create, end *mcpsdk.Tool, err error) {
	createIn, err := jsonschema.For[CreateSessionInput](nil)
	if err != nil {
		return nil, nil, err
	}
	endIn, err := jsonschema.For[EndSessionInput](nil)
	if err != nil {
		return nil, nil, err
	}
	out, err := jsonschema.For[SessionOutput](nil)
	if err != nil {
		return nil, nil, err
	}
	langs := []any{shellSession}
	for _, l := range inv.Languages {
		if l.Name != shellSession {
			langs = append(langs, l.Name)
		}
	}
	createIn.Properties["language"].Enum = langs
	createIn.Properties["image"].Enum = imageEnum(inv)
	p := createIn.Properties
	p["memory_mb"].Maximum = ptr(float64(inv.MaxLimits.MemoryBytes >> 20))
	p["memory_mb"].Description += fmt.Sprintf(" (default %d, at most %d)", inv.DefaultLimits.MemoryBytes>>20, inv.MaxLimits.MemoryBytes>>20)
	p["idle_seconds"].Minimum = ptr(0.0)
	create = &mcpsdk.Tool{
		Name:  "create_session",
		Title: "Create a sandbox session",
		Description: "Start a sandbox that lives across calls: pass the returned session_id to run_code and run_command. " +
			"/workspace, processes started in the background and, for Python and JavaScript, the interpreter's variables and imports persist; " +
			"charts shown with matplotlib come back as images. " + describePackages(inv) +
			"The session ends with end_session, or on its own when idle too long.",
		InputSchema:  createIn,
		OutputSchema: out,
		Annotations:  &mcpsdk.ToolAnnotations{Title: "Create a sandbox session", DestructiveHint: ptr(false), OpenWorldHint: ptr(false)},
	}
	end = &mcpsdk.Tool{
		Name:         "end_session",
		Title:        "End a sandbox session",
		Description:  "End a session: its sandbox and everything in it are removed. Its bundles stay.",
		InputSchema:  endIn,
		OutputSchema: out,
		Annotations:  &mcpsdk.ToolAnnotations{Title: "End a sandbox session", DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}
	return create, end, nil
}

func (h *handlers) createSession(ctx context.Context, req *mcpsdk.CallToolRequest, in CreateSessionInput) (*mcpsdk.CallToolResult, *SessionOutput, error) {
	if !(in.IdleSeconds >= 0 && in.IdleSeconds <= maxTimeoutSeconds) {
		return nil, nil, fmt.Errorf("invalid argument: idle_seconds: %v is out of range", in.IdleSeconds)
	}
	opts, err := h.options(Common{Files: in.Files, MemoryMB: in.MemoryMB, Network: in.Network})
	if err != nil {
		return nil, nil, err
	}
	opts.Image = in.Image
	language := in.Language
	if language == shellSession {
		language = ""
	}
	info, err := h.engine.CreateSession(toolCall(ctx, req), session.Request{
		Language: language, Options: opts, IdleTTL: time.Duration(math.Round(in.IdleSeconds*1000)) * time.Millisecond,
	})
	if err != nil {
		return nil, nil, toolError(err)
	}
	h.made.add(info.ID)
	out := sessionOutput(info)
	text := fmt.Sprintf("session %s is ready (%s, %s); pass session_id %q to run_code and run_command; it ends at %s at the latest",
		info.ID, info.Image, info.Runtime, info.ID, out.ExpiresAt)
	return &mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: text}}}, out, nil
}

func (h *handlers) endSession(ctx context.Context, req *mcpsdk.CallToolRequest, in EndSessionInput) (*mcpsdk.CallToolResult, *SessionOutput, error) {
	if in.SessionID == "" {
		return nil, nil, fmt.Errorf("invalid argument: session_id: is empty")
	}
	info, err := h.engine.DeleteSession(toolCall(ctx, req), in.SessionID)
	if err != nil {
		return nil, nil, toolError(err)
	}
	h.made.remove(info.ID)
	text := fmt.Sprintf("session %s: %s", info.ID, info.State)
	if info.Reason != "" {
		text += " (" + info.Reason + ")"
	}
	return &mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: text}}}, sessionOutput(info), nil
}

func sessionOutput(info session.Info) *SessionOutput {
	return &SessionOutput{SessionID: info.ID, State: string(info.State), Image: info.Image, ExpiresAt: info.ExpiresAt.UTC().Format(time.RFC3339)}
}

// Bounds on the images a tool result carries; the bundle keeps them all.
const (
	maxImages     = 4
	maxImageBytes = 1 << 20
)

// images are the call's images, read from its bundle, as image content:
// what a kernel displayed, then the pictures the program left in
// /workspace (a chart saved as PNG); those past the bounds are only
// linked (see outputLinks).
func (h *handlers) images(ctx context.Context, res run.Result) []mcpsdk.Content {
	if res.BundleDigest == "" {
		return nil
	}
	want := map[string]string{} // bundle entry -> MIME type
	var order []string
	add := func(p, mimeType string, size int64) {
		entry := artifacts.DirOutput + "/" + p
		if _, dup := want[entry]; !dup && size <= maxImageBytes && len(want) < maxImages {
			want[entry] = mimeType
			order = append(order, entry)
		}
	}
	if res.Kernel != nil {
		for _, d := range res.Kernel.Displays {
			for _, f := range d.Files {
				if strings.HasPrefix(f.MIME, "image/") {
					add(f.Path, f.MIME, f.Size)
				}
			}
		}
	}
	for _, f := range res.Files {
		if t := pictureType(f.Path); t != "" && inBundle(f) {
			add(f.Path, t, f.Size)
		}
	}
	if len(want) == 0 {
		return nil
	}
	rc, err := h.engine.OpenBundle(ctx, res.BundleDigest)
	if err != nil {
		h.opts.Log.Warn("images of a call", "bundle", res.BundleDigest, "err", err)
		return nil
	}
	defer rc.Close()
	got := map[string][]byte{}
	if _, err := artifacts.Verify(rc, res.BundleDigest, artifacts.DefaultReadLimits(), func(p string, r io.Reader) error {
		if _, ok := want[p]; !ok {
			return nil
		}
		b, err := io.ReadAll(io.LimitReader(r, maxImageBytes))
		got[p] = b
		return err
	}); err != nil {
		h.opts.Log.Warn("images of a call", "bundle", res.BundleDigest, "err", err)
		return nil
	}
	var out []mcpsdk.Content
	for _, entry := range order {
		if b, ok := got[entry]; ok {
			out = append(out, &mcpsdk.ImageContent{Data: b, MIMEType: want[entry]})
		}
	}
	return out
}

// pictureType is the MIME type of a file a model can be shown as an
// image, by its name, or "".
func pictureType(p string) string {
	switch t := mime.TypeByExtension(strings.ToLower(path.Ext(p))); t {
	case "image/png", "image/jpeg", "image/gif", "image/webp":
		return t
	}
	return ""
}
