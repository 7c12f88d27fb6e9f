package task

import "github.com/sandboxd/sandboxd/images"

// Catalog is the catalog requests are resolved against now.
func (s *Service) Catalog() images.Catalog { return *s.catalog.Load() }
