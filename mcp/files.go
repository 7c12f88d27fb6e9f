package mcp

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"mime"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/containerd/errdefs"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/run"
)

// A session's files are resources, where hosts look for what a server
// holds: sandboxd://session/ID/PATH reads a file of the session's
// /workspace as it is now, and resources/list names the files of the
// sessions made through this server that the caller may see (the engine
// refuses another tenant's, as it refuses their calls).

const sessionURIPrefix = "sandboxd://session/"

// maxResourceFiles bounds the session files one resources/list names.
const maxResourceFiles = 200

// sessionTemplate is the resource template of a session's files.
var sessionTemplate = &mcpsdk.ResourceTemplate{
	Name:        "session-file",
	Title:       "A file of a session",
	Description: "A file of a live session's /workspace, as it is now (text, or base64 for binary files); resources/list names them.",
	URITemplate: sessionURIPrefix + "{session_id}/{+path}",
}

// madeSessions are the sessions made through this server, whose files
// resources/list names while they live.
type madeSessions struct {
	mu  sync.Mutex
	ids []string
}

func (m *madeSessions) add(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ids = append(m.ids, id)
}

func (m *madeSessions) remove(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ids = slices.DeleteFunc(m.ids, func(s string) bool { return s == id })
}

func (m *madeSessions) list() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.ids)
}

// A run's output files are resources too: each is an entry of its
// bundle, sandboxd://bundle/HEX/output/PATH, linked from the call's
// result, and resources/list names those of the recent runs made through
// this server that the caller may open (the engine decides, as it does
// for a read).

// maxLinkedFiles bounds the output files one result links; the result's
// files list names them all, and the bundle keeps them.
const maxLinkedFiles = 32

// outputLinks link the output files of a run that its bundle holds.
func outputLinks(res run.Result) []mcpsdk.Content {
	var links []mcpsdk.Content
	for _, f := range res.Files {
		if !inBundle(f) || len(links) == maxLinkedFiles {
			continue
		}
		links = append(links, outputResource(res.RunID, res.BundleDigest, f))
	}
	return links
}

// inBundle reports whether output f is a file whose content its run's
// bundle keeps.
func inBundle(f artifacts.Output) bool { return f.Type == "file" && f.Omitted == "" }

// outputResource is the resource of output file f of a run.
func outputResource(runID, digest string, f artifacts.Output) *mcpsdk.ResourceLink {
	return &mcpsdk.ResourceLink{
		URI:  bundleURIPrefix + strings.TrimPrefix(digest, "sha256:") + "/" + artifacts.DirOutput + "/" + f.Path,
		Name: "output " + f.Path, Title: f.Path + " (run " + runID + ")",
		MIMEType: cmp.Or(mime.TypeByExtension(path.Ext(f.Path)), "application/octet-stream"), Size: ptr(f.Size),
	}
}

// recentRuns are the last runs made through this server that left
// output files, whose files resources/list names.
type recentRuns struct {
	mu   sync.Mutex
	runs []run.Result
}

// keepRuns is how many runs recentRuns keeps.
const keepRuns = 64

func (r *recentRuns) add(res run.Result) {
	if !slices.ContainsFunc(res.Files, inBundle) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs = append(r.runs, run.Result{RunID: res.RunID, BundleDigest: res.BundleDigest, Files: res.Files})
	if len(r.runs) > keepRuns {
		r.runs = slices.Delete(r.runs, 0, len(r.runs)-keepRuns)
	}
}

func (r *recentRuns) list() []run.Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.runs)
}

// listSessionFiles adds the caller's session files to the first page of
// resources/list.
func (h *handlers) listSessionFiles(next mcpsdk.MethodHandler) mcpsdk.MethodHandler {
	return func(ctx context.Context, method string, req mcpsdk.Request) (mcpsdk.Result, error) {
		res, err := next(ctx, method, req)
		list, ok := res.(*mcpsdk.ListResourcesResult)
		if err != nil || !ok || list == nil {
			return res, err
		}
		if p, ok := req.GetParams().(*mcpsdk.ListResourcesParams); ok && p != nil && p.Cursor != "" {
			return res, err
		}
		// What follows is the caller's: no one else's cache may keep it.
		list.CacheScope = "private"
		caller := access.CallerFrom(ctx)
		caller.Method = "mcp resources/list"
		ctx = access.WithCaller(ctx, caller)
		n := 0
		for _, id := range h.made.list() {
			files, err := h.engine.ListFiles(ctx, id, "")
			switch {
			case errdefs.IsFailedPrecondition(err):
				h.made.remove(id) // the session has ended
				continue
			case err != nil:
				continue // another tenant's, or gone
			}
			for _, f := range files {
				if f.Type != "file" || n == maxResourceFiles {
					continue
				}
				n++
				list.Resources = append(list.Resources, &mcpsdk.Resource{
					URI: sessionURIPrefix + id + "/" + f.Path, Name: id + "/" + f.Path, Title: f.Path + " (session " + id + ")",
					MIMEType: cmp.Or(mime.TypeByExtension(path.Ext(f.Path)), "application/octet-stream"), Size: f.Size,
				})
			}
		}
		// Newest first; a bundle the caller may not open is not named.
		runs := h.ran.list()
		for i := len(runs) - 1; i >= 0 && n < maxResourceFiles; i-- {
			rc, err := h.engine.OpenBundle(ctx, runs[i].BundleDigest)
			if err != nil {
				continue
			}
			rc.Close()
			for _, f := range runs[i].Files {
				if !inBundle(f) || n == maxResourceFiles {
					continue
				}
				n++
				l := outputResource(runs[i].RunID, runs[i].BundleDigest, f)
				list.Resources = append(list.Resources, &mcpsdk.Resource{URI: l.URI, Name: l.Name, Title: l.Title, MIMEType: l.MIMEType, Size: f.Size})
			}
		}
		return list, nil
	}
}

// readSessionFile reads a file of a session's /workspace.
func (h *handlers) readSessionFile(ctx context.Context, req *mcpsdk.ReadResourceRequest) (*mcpsdk.ReadResourceResult, error) {
	uri := req.Params.URI
	id, p, ok := strings.Cut(strings.TrimPrefix(uri, sessionURIPrefix), "/")
	if !ok || id == "" || p == "" || !strings.HasPrefix(uri, sessionURIPrefix) {
		return nil, mcpsdk.ResourceNotFoundError(uri)
	}
	caller := access.CallerFrom(ctx)
	caller.Method = "mcp resources/read"
	rc, err := h.engine.ReadFile(access.WithCaller(ctx, caller), id, p)
	switch {
	case errdefs.IsNotFound(err):
		return nil, mcpsdk.ResourceNotFoundError(uri)
	case err != nil:
		return nil, err
	}
	defer rc.Close()
	content, err := io.ReadAll(io.LimitReader(rc, maxResourceBytes+1))
	if err != nil {
		return nil, err
	}
	if len(content) > maxResourceBytes {
		return nil, fmt.Errorf("%s is larger than the %d MiB a resource carries: read it with sandboxd session download", p, maxResourceBytes>>20)
	}
	res := fileContents(uri, p, content)
	res.CacheScope = "private"
	return res, nil
}

// fileContents is a file as a resource: text when it is text, else its
// bytes.
func fileContents(uri, name string, content []byte) *mcpsdk.ReadResourceResult {
	mt := mime.TypeByExtension(path.Ext(name))
	if text, ok := validText(string(content)); ok && (mt == "" || strings.HasPrefix(mt, "text/")) {
		return &mcpsdk.ReadResourceResult{Contents: []*mcpsdk.ResourceContents{{URI: uri, MIMEType: cmp.Or(mt, "text/plain"), Text: text}}}
	}
	return &mcpsdk.ReadResourceResult{Contents: []*mcpsdk.ResourceContents{{URI: uri, MIMEType: cmp.Or(mt, "application/octet-stream"), Blob: content}}}
}
