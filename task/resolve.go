package task

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/exec"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/tools"
)

// resolve checks a request against the configuration.
func (s *Service) resolve(caller access.Caller, req run.Request) (exec.Plan, error) {
	if err := req.Validate(s.cfg.Bounds); err != nil {
		return exec.Plan{}, err
	}
	catalog := s.Catalog()
	p := exec.Plan{Image: catalog.CommandImage}
	if err := resolveProgram(catalog, &p, req); err != nil {
		return exec.Plan{}, err
	}
	return p, s.resolveOptions(catalog, caller, &p, req.Options)
}

// resolveProgram sets what p runs for req: its language's image and
// command (as the image the request names runs it, if its recipe says), or
// the argv of its command (a shell line through /bin/sh -c).
// The image of a command is left as p has it.
func resolveProgram(catalog images.Catalog, p *exec.Plan, req run.Request) error {
	if req.Program == nil {
		p.Argv = req.Command.Argv
		if req.Command.Shell != "" {
			p.Argv = []string{"/bin/sh", "-c", req.Command.Shell}
		}
		return nil
	}
	lang, err := languageIn(catalog, req.Program.Language, req.Options.Image)
	if err != nil {
		return err
	}
	p.Language, p.Image, p.Argv = lang, lang.Image, lang.Command
	return nil
}

// languageIn is the language name as image runs it: an image that
// declares the language runs it its own way; in another the catalog's
// command runs (bash is in every image).
func languageIn(catalog images.Catalog, name, image string) (images.Language, error) {
	lang, ok := catalog.Language(name)
	if !ok {
		return images.Language{}, run.Invalid("language", "%q is not one of %q", name, catalog.LanguageNames())
	}
	if own, ok := catalog.Recipe(image); ok {
		if l, ok := own.Language(name); ok {
			lang = l
		}
	}
	return lang, nil
}

// notCompiled refuses a compiled language in a session, whose calls each
// start one process: a session's user builds with the compiler as a
// command, in the image that has it.
func notCompiled(l images.Language) error {
	if l.Compile == nil {
		return nil
	}
	return run.Invalid("language", "%s is compiled, and a session runs no compile step: create the session with image %s and run %s as a command", l.Name, l.Image, l.Compile[0])
}

// resolveOptions completes p, whose image is the language's or the
// command image, with the options.
func (s *Service) resolveOptions(catalog images.Catalog, caller access.Caller, p *exec.Plan, o run.Options) error {
	switch {
	case strings.HasPrefix(o.Image, "sha256:"):
		if _, err := artifacts.ParseDigest(o.Image); err != nil {
			return run.Invalid("image", "%q is not sha256:<64 hex digits>", o.Image)
		}
		p.Image = o.Image
	case o.Image != "":
		if !catalog.HasImage(o.Image) {
			return run.Invalid("image", "%q is not one of %q (or the digest of one)", o.Image, catalog.Images)
		}
		p.Image = o.Image
	}
	if o.Seed != nil {
		p.Seed = strconv.FormatUint(*o.Seed, 10)
	}
	if !caller.MayUseImage(p.Image) {
		return tenantDenied(caller, "image", p.Image, caller.Tenant.Images)
	}
	lim := s.cfg.Limits
	if t := caller.Tenant; t != nil {
		var err error
		if lim, err = lim.Within(t.MaxLimits); err != nil {
			return err
		}
	}
	var err error
	if p.Limits, err = lim.Resolve(o.Limits); err != nil {
		return err
	}
	if p.Network, err = s.resolveNetwork(caller, o.Network); err != nil {
		return err
	}
	if p.Network.Mode == netpolicy.AllowList && s.egress == nil {
		return errdefs.ErrFailedPrecondition.WithMessage("network: this daemon has no egress gateway for allow-listed tasks")
	}
	p.Runtime = o.Runtime
	if p.Runtime == "" {
		p.Runtime = s.cfg.DefaultRuntime
		if t := caller.Tenant; t != nil && len(t.Runtimes) > 0 && !slices.Contains(t.Runtimes, p.Runtime) {
			p.Runtime = t.Runtimes[0]
		}
	}
	if t := caller.Tenant; t != nil && len(t.Runtimes) > 0 && !slices.Contains(t.Runtimes, p.Runtime) {
		return tenantDenied(caller, "runtime", p.Runtime, t.Runtimes)
	}
	if p.Runtime != "" && !slices.Contains(knownRuntimes, p.Runtime) {
		return run.Invalid("runtime", "%q is not one of %q", p.Runtime, knownRuntimes)
	}
	if p.Runtime != "" && len(s.cfg.AllowedRuntimes) > 0 && !slices.Contains(s.cfg.AllowedRuntimes, p.Runtime) {
		why := fmt.Sprintf("the operator allows only %q", s.cfg.AllowedRuntimes)
		if s.cfg.RequireRunsc {
			why = "this daemon runs every task under gVisor (runsc)"
		}
		return errdefs.ErrPermissionDenied.WithMessage(fmt.Sprintf("runtime: %q is not allowed: %s", p.Runtime, why))
	}
	if err := s.resolveTools(caller, p, o); err != nil {
		return err
	}
	p.Workdir, _ = run.ResolveWorkdir(o.Workdir)
	for i, name := range o.Mounts {
		dir, ok := s.cfg.Mounts[name]
		if !ok {
			return run.Invalid(fmt.Sprintf("mounts[%d]", i), "%q is not a mount the operator configured", name)
		}
		if !caller.MayMount(name) {
			return fmt.Errorf("mounts[%d]: %q is not granted to %s callers: %w", i, name, caller.Name, errdefs.ErrPermissionDenied)
		}
		p.Mounts = append(p.Mounts, runtime.Mount{Source: dir, Target: run.MountDir + "/" + name, ReadOnly: true})
	}
	return nil
}

// resolveTools takes the tools a run, or a session's call, may call, and
// the record that answers them in a replay.
func (s *Service) resolveTools(caller access.Caller, p *exec.Plan, o run.Options) error {
	if len(o.Tools) > 0 && (o.ReplayOf == "" || o.LiveReadTools) && (s.tools == nil || s.tools.Len() == 0) {
		return run.Invalid("tools", "this daemon has no tool servers (the operator adds them with --tool-server)")
	}
	p.Tools, p.ToolRecord, p.Replay = o.Tools, nil, exec.Replay{}
	if o.ReplayOf == "" || len(o.Tools) == 0 {
		return nil
	}
	record, specs, supplied, err := s.replayRecord(caller, o)
	if err != nil {
		return err
	}
	if p.ToolRecord, err = tools.ParseRecord(record); err != nil {
		return run.Invalid("tool_record", "%v", err)
	}
	p.Replay = exec.Replay{Of: o.ReplayOf, Supplied: supplied, Specs: specs}
	return nil
}

// replayRecord is the record of tool calls that answers a replay of the
// bundle o.ReplayOf, and the tools as its run resolved them: read from the
// store when it holds the bundle and the caller may read it (what the
// request sends must then be the same), or as the request sends them,
// which only the operator may do (sandboxd replay of a bundle this daemon
// does not hold). Nobody else can have a record answer for calls that
// were never made.
func (s *Service) replayRecord(caller access.Caller, o run.Options) (record []byte, specs []tools.Tool, supplied bool, err error) {
	stored, specs, err := s.storedRecord(caller, o.ReplayOf)
	switch {
	case err == nil:
		if len(o.ToolRecord) > 0 && !bytes.Equal(o.ToolRecord, stored) {
			return nil, nil, false, run.Invalid("tool_record", "is not the record of bundle %s, which this daemon holds", o.ReplayOf)
		}
		return stored, specs, false, nil
	case !errdefs.IsNotFound(err):
		return nil, nil, false, err
	case !caller.Operator:
		return nil, nil, false, errdefs.ErrNotFound.WithMessage(fmt.Sprintf("replay_of: bundle %s is not in the store, or not yours: a record answers tool calls only in a replay of a bundle you may read", o.ReplayOf))
	}
	return o.ToolRecord, nil, true, nil
}

// storedRecord reads the record of tool calls and the tools' specs out of
// the stored bundle digest, verified as it is read; a bundle the store
// does not hold, or that is another tenant's, is not found.
func (s *Service) storedRecord(caller access.Caller, digest string) (record []byte, specs []tools.Tool, err error) {
	if err := s.mayOpenAs(caller, digest); err != nil {
		return nil, nil, err
	}
	f, err := s.store.Open(digest)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	record = []byte{}
	var specsJSON []byte
	if _, err := artifacts.Verify(f, digest, artifacts.DefaultReadLimits(), func(name string, r io.Reader) error {
		var dst *[]byte
		switch name {
		case artifacts.EntryToolCalls:
			dst = &record
		case artifacts.EntryToolSpecs:
			dst = &specsJSON
		default:
			return nil
		}
		b, err := io.ReadAll(io.LimitReader(r, run.MaxToolRecordBytes+1))
		*dst = b
		return err
	}); err != nil {
		return nil, nil, fmt.Errorf("replay_of: bundle %s: %w", digest, err)
	}
	if len(specsJSON) > 0 {
		if err := json.Unmarshal(specsJSON, &specs); err != nil {
			return nil, nil, fmt.Errorf("replay_of: bundle %s: its tools' specs: %w", digest, err)
		}
	}
	return record, specs, nil
}

// resolveNetwork is the policy of a request's network, within what the
// operator permits and the caller is granted.
func (s *Service) resolveNetwork(caller access.Caller, req netpolicy.Request) (netpolicy.Policy, error) {
	network := s.cfg.Network
	if t := caller.Tenant; t != nil {
		var err error
		if network, err = access.NarrowNetwork(network, t.Network); err != nil {
			return netpolicy.Policy{}, err
		}
	}
	p, err := network.Resolve(req)
	if err != nil {
		return netpolicy.Policy{}, err
	}
	for _, name := range p.Secrets {
		if !caller.MaySecret(name) {
			return netpolicy.Policy{}, tenantDenied(caller, "network.secrets", name, caller.Tenant.Secrets)
		}
	}
	return p, nil
}

// tenantDenied refuses what a tenant's grants leave out, naming them.
func tenantDenied(caller access.Caller, field, asked string, granted []string) error {
	return errdefs.ErrPermissionDenied.WithMessage(fmt.Sprintf("%s: %q is not granted to tenant %s (it may use %q)", field, asked, caller.Name, granted))
}

// image resolves a catalog name, or the digest of a sandbox image (what a
// replay asks for), to the image in the backend and its catalog name, which
// the caller must be granted. A digest must name an image the set-up
// built, not any image the backend has.
func (s *Service) image(ctx context.Context, caller access.Caller, ref string) (runtime.Image, string, error) {
	img, name, err := s.catalogImage(ctx, ref)
	if err == nil && !caller.MayUseImage(name) {
		return runtime.Image{}, "", tenantDenied(caller, "image", name, caller.Tenant.Images)
	}
	return img, name, err
}

func (s *Service) catalogImage(ctx context.Context, ref string) (runtime.Image, string, error) {
	img, err := s.rt.Image(ctx, ref)
	if errdefs.IsNotFound(err) {
		return runtime.Image{}, "", &ImageMissingError{Ref: ref}
	}
	if err != nil {
		return runtime.Image{}, "", err
	}
	if err := s.mayRun(img); err != nil {
		return runtime.Image{}, "", err
	}
	if !strings.HasPrefix(ref, "sha256:") {
		return img, ref, nil
	}
	short, ok := img.Labels[images.LabelImage]
	if !ok || !s.Catalog().HasImage(images.Prefix+short) {
		return runtime.Image{}, "", run.Invalid("image", "%s is not a sandbox image of this host's catalog", ref)
	}
	return img, images.Prefix + short, nil
}

// mayRun refuses an image that the operator did not name: only the images
// whose digests the lock (written when this host built them) or
// --allow-image names may run, whatever their tags and labels say. It also
// refuses one that declares volumes, which a backend would make on the
// host's disk, outside the task's disk limit.
func (s *Service) mayRun(img runtime.Image) error {
	if !slices.Contains(s.cfg.AllowedImages, img.ID) {
		lock, err := s.lock()
		if err != nil {
			return err
		}
		if !lock.Has(img.ID) {
			return fmt.Errorf("image %s (%s) is not in the image lock %s nor allowed with --allow-image: only images the operator names may run: %w",
				img.Ref, img.ID, s.lockPath(), errdefs.ErrPermissionDenied)
		}
	}
	if len(img.Volumes) > 0 {
		return fmt.Errorf("image %s declares volumes %q, which sandboxd never makes: %w", img.Ref, img.Volumes, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// lock is the image lock as its file holds it now; without a file, an
// empty lock.
func (s *Service) lock() (images.Lock, error) {
	if s.lockFile == nil {
		return images.Lock{}, nil
	}
	return s.lockFile.Lock()
}

func (s *Service) lockPath() string {
	if s.lockFile == nil {
		return "(none)"
	}
	return s.lockFile.Path()
}

// ImageMissingError refuses a run whose image is not in the backend: not
// built yet, or (for a digest) rebuilt since. It is a failed precondition.
type ImageMissingError struct{ Ref string }

func (e *ImageMissingError) Error() string {
	if strings.HasPrefix(e.Ref, "sha256:") {
		return fmt.Sprintf("image: %s is not present on this host", e.Ref)
	}
	return fmt.Sprintf("image %s is not built on this host (run sandboxd image build %s)", e.Ref, strings.TrimPrefix(e.Ref, images.Prefix))
}

// FailedPrecondition marks ImageMissingError for errdefs.
func (e *ImageMissingError) FailedPrecondition() {}
