package task

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/task/access"
	"github.com/sandboxd/sandboxd/task/tools"
)

// CheckTenants refuses tenants that ask for what this daemon does not
// have: a tenant's grants narrow the operator's, never widen them.
func (s *Service) CheckTenants(tenants []access.Tenant) error {
	for _, t := range tenants {
		if err := s.checkTenant(t); err != nil {
			return fmt.Errorf("tenant %s: %w", t.Name, err)
		}
	}
	return nil
}

func (s *Service) checkTenant(t access.Tenant) error {
	for _, r := range t.Runtimes {
		if !slices.Contains(knownRuntimes, r) {
			return fmt.Errorf("runtimes: %q is not one of %q", r, knownRuntimes)
		}
		if len(s.cfg.AllowedRuntimes) > 0 && !slices.Contains(s.cfg.AllowedRuntimes, r) {
			return fmt.Errorf("runtimes: %q is not allowed on this daemon (%q)", r, s.cfg.AllowedRuntimes)
		}
	}
	catalog := s.Catalog()
	for _, img := range t.Images {
		if !catalog.HasImage(img) {
			return fmt.Errorf("images: %q is not one of %q", img, catalog.Images)
		}
	}
	for _, m := range t.Mounts {
		if _, ok := s.cfg.Mounts[m]; !ok {
			return fmt.Errorf("mounts: %q is not a --mount of this daemon", m)
		}
	}
	for _, p := range t.Tools {
		if err := tools.ValidPattern(p); err != nil {
			return fmt.Errorf("tools: %w", err)
		}
		if prov, _, _ := strings.Cut(p, "."); prov == tools.CallerProvider {
			return fmt.Errorf("tools: %q names the caller's own tools, which need no grant", p)
		}
	}
	if _, err := s.cfg.Limits.Within(t.MaxLimits); err != nil {
		return fmt.Errorf("max_limits: %w", err)
	}
	if _, err := access.NarrowNetwork(s.cfg.Network, t.Network); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	for _, name := range t.Secrets {
		if _, ok := s.cfg.Network.Secrets.Get(name); !ok {
			return fmt.Errorf("secrets: %q is not one of the operator's (%q)", name, s.cfg.Network.Secrets.Names())
		}
	}
	return nil
}
