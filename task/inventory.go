package task

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/tools"
)

// Inventory is what this daemon can run.
type Inventory struct {
	// Version is the daemon's sandboxd version.
	Version        string
	Backend        string
	BackendVersion string
	Languages      []images.Language
	Images         []ImageStatus
	Runtimes       []RuntimeStatus
	DefaultRuntime string
	DefaultLimits  limits.Limits
	MaxLimits      limits.Limits
	Mounts         []string
	Pools          []PoolStatus
	// NetworkPolicies are the operator's named policies, and NetworkRules
	// the rules a request's own rules must fall within.
	NetworkPolicies map[string][]netpolicy.Rule
	NetworkRules    []netpolicy.Rule
	// NetworkSecrets are the operator's secrets the caller may name.
	NetworkSecrets []netpolicy.Secret
	// SigningKeys are the PEM public keys bundles are signed with, the
	// current one first.
	SigningKeys []string
	// Tools are the operator's tools the caller is granted, by name
	// (PROVIDER.TOOL), with their schemas.
	Tools []tools.Tool
}

// RuntimeStatus is an OCI runtime the backend has.
type RuntimeStatus struct {
	runtime.OCIRuntime
	// Allowed says whether requests may ask for it.
	Allowed bool
}

// ImageStatus is a catalog image as the backend has it.
type ImageStatus struct {
	Name string
	// Digest is the image present in the backend, or "" when missing.
	Digest string
	// LockedDigest is the digest recorded when it was built.
	LockedDigest string
	// RecipeDigest is the digest of its recipe as the catalog has it, and
	// LockedRecipe of the recipe the locked image was built from.
	RecipeDigest, LockedRecipe string
	// Packages are what a program can import in it (images.Recipe's
	// Importable).
	Packages []string
}

// Inventory reports the languages, images, runtimes and limits.
func (s *Service) Inventory(ctx context.Context) (Inventory, error) {
	info, err := s.backendInfo(ctx)
	if err != nil {
		return Inventory{}, err
	}
	catalog := s.Catalog()
	inv := Inventory{
		Version: s.cfg.Version, Backend: info.Backend, BackendVersion: info.Version,
		DefaultRuntime: info.DefaultRuntime,
		DefaultLimits:  s.cfg.Limits.Default, MaxLimits: s.cfg.Limits.Max,
		NetworkPolicies: s.cfg.Network.Policies, NetworkRules: s.cfg.Network.Permitted,
	}
	if s.signing != nil {
		inv.SigningKeys = s.signing.PublicKeys()
	}
	caller := access.CallerFrom(ctx)
	// A tenant learns of the languages and images it may use, as of the
	// tools it may call.
	for _, l := range catalog.Languages {
		if caller.MayUseImage(l.Image) {
			inv.Languages = append(inv.Languages, l)
		}
	}
	inv.Tools = s.tools.Granted(ctx, caller.ToolGrants())
	for _, name := range s.cfg.Network.Secrets.Names() {
		if sec, ok := s.cfg.Network.Secrets.Get(name); ok && caller.MaySecret(name) {
			inv.NetworkSecrets = append(inv.NetworkSecrets, sec)
		}
	}
	if s.cfg.DefaultRuntime != "" {
		inv.DefaultRuntime = s.cfg.DefaultRuntime
	}
	for _, r := range info.Runtimes {
		if slices.Contains(knownRuntimes, r.Name) {
			allowed := len(s.cfg.AllowedRuntimes) == 0 || slices.Contains(s.cfg.AllowedRuntimes, r.Name)
			inv.Runtimes = append(inv.Runtimes, RuntimeStatus{OCIRuntime: r, Allowed: allowed})
		}
	}
	lock, err := s.lock()
	if err != nil {
		return Inventory{}, err
	}
	for _, r := range catalog.Recipes {
		name := r.Name
		if !caller.MayUseImage(name) {
			continue
		}
		locked, _ := lock.Entry(name)
		st := ImageStatus{Name: name, LockedDigest: locked.Digest, RecipeDigest: r.Digest, LockedRecipe: locked.Recipe, Packages: r.Importable()}
		img, err := s.rt.Image(ctx, name)
		switch {
		case err == nil:
			st.Digest = img.ID
		case !errdefs.IsNotFound(err):
			return Inventory{}, err
		}
		inv.Images = append(inv.Images, st)
	}
	for name := range s.cfg.Mounts {
		inv.Mounts = append(inv.Mounts, name)
	}
	slices.Sort(inv.Mounts)
	if s.pool != nil {
		pools, err := s.pool.Status(ctx, true)
		if err != nil {
			return Inventory{}, err
		}
		for _, p := range pools {
			inv.Pools = append(inv.Pools, PoolStatus(p))
		}
	}
	return inv, nil
}

// PoolStatus is the pool of one image and OCI runtime: how many of its
// containers are ready of how many it keeps, and since when and why its
// prepares fail, if they do.
type PoolStatus struct {
	Image   string
	Runtime string
	Ready   int
	Size    int
	// Egress says the containers are linked to the egress gateway, for
	// allow-listed tasks; Preimport that they pre-loaded the image's
	// preimport modules.
	Egress, Preimport bool
	// FailingSince, when not zero, is since when every prepare of this
	// pool failed; Failure is the last reason, Failures every failure
	// since the daemon started.
	FailingSince time.Time
	Failure      string
	Failures     uint64
}

// infoTTL is how long the backend's description is reused: it changes only
// when the operator registers a runtime.
const infoTTL = time.Minute

// backendInfo returns the backend's description, cached for infoTTL.
func (s *Service) backendInfo(ctx context.Context) (runtime.Info, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.info != nil && time.Since(s.infoAt) < infoTTL {
		return *s.info, nil
	}
	info, err := s.rt.Info(ctx)
	if err != nil {
		return runtime.Info{}, err
	}
	s.info, s.infoAt = &info, time.Now()
	return info, nil
}

// checkRuntime refuses an OCI runtime the backend does not have.
func (s *Service) checkRuntime(ctx context.Context, name string) (runtime.Info, runtime.OCIRuntime, error) {
	info, err := s.backendInfo(ctx)
	if err != nil {
		return runtime.Info{}, runtime.OCIRuntime{}, err
	}
	if name == "" {
		name = info.DefaultRuntime
	}
	i := slices.IndexFunc(info.Runtimes, func(r runtime.OCIRuntime) bool { return r.Name == name })
	if i < 0 {
		var have []string
		for _, r := range info.Runtimes {
			have = append(have, r.Name)
		}
		return info, runtime.OCIRuntime{}, errdefs.ErrFailedPrecondition.WithMessage(fmt.Sprintf("runtime: %q is not installed on this host (it has %q)", name, have))
	}
	return info, info.Runtimes[i], nil
}

// offers says whether the backend of info can run the OCI runtime name.
func offers(info runtime.Info, name string) bool {
	return slices.ContainsFunc(info.Runtimes, func(r runtime.OCIRuntime) bool { return r.Name == name })
}
