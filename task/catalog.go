package task

import (
	"errors"

	"github.com/sandboxd/sandboxd/images"
)

// Catalog is the catalog requests are resolved against now.
func (s *Service) Catalog() images.Catalog { return *s.catalog.Load() }

// SetCatalog replaces the catalog (an operator's recipes reloaded): runs
// already resolved keep what they resolved, the pool fills for the new
// images and lets go of those that left.
func (s *Service) SetCatalog(c images.Catalog) error {
	if len(c.Languages) == 0 {
		return errors.New("the catalog has no language")
	}
	s.catalog.Store(&c)
	if s.pool != nil {
		s.pool.Refresh()
	}
	return nil
}
