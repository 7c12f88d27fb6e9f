package task

import (
	"context"
	"errors"
	"fmt"

	"github.com/sandboxd/sandboxd/task/pool"
	"github.com/sandboxd/sandboxd/task/run"
)

// The engine's side of the pool (package pool): what it keeps ready, how
// a pooled container is made, and which requests it cannot serve.

// poolKeys are the (image, runtime) pairs the pool keeps ready: every
// catalog image on the default runtime, as many as its recipe says or
// Config.PoolSize.
func (s *Service) poolKeys(ctx context.Context) (map[pool.Key]pool.Target, error) {
	_, oci, err := s.checkRuntime(ctx, s.cfg.DefaultRuntime)
	if err != nil {
		return nil, err
	}
	keys := map[pool.Key]pool.Target{}
	for _, r := range s.Catalog().Recipes {
		img, err := s.rt.Image(ctx, r.Name)
		if err != nil || s.mayRun(img) != nil {
			continue
		}
		size := s.cfg.PoolSize
		if r.Pool >= 0 {
			size = r.Pool
		}
		// Containers whose interpreter pre-loaded the recipe's modules
		// are kept too: loading them costs what a program that imports
		// them would pay, so only such programs are given one, and only
		// they make the pool prepare another.
		preimport := []bool{false}
		if p := s.pooledInterpreter(r.Name); p != nil && len(p.Modules) > 0 {
			preimport = append(preimport, true)
		}
		for _, pre := range preimport {
			if size > 0 {
				keys[pool.Key{Image: img.ID, Runtime: oci.Name, Preimport: pre}] = pool.Target{Name: r.Name, Size: size}
			}
			if size > 0 && s.egress != nil && s.cfg.Network.AllowsNetwork() && s.cfg.EgressPoolSize > 0 {
				keys[pool.Key{Image: img.ID, Runtime: oci.Name, Egress: true, Preimport: pre}] = pool.Target{Name: r.Name, Size: s.cfg.EgressPoolSize}
			}
		}
	}
	return keys, nil
}

// coldReason says why a request cannot run in a pooled container, or "".
// The rest (runtime, image) is for claim to find.
func (s *Service) coldReason(pl plan) string {
	switch {
	case s.pool == nil:
		return "the pool is off"
	case len(pl.mounts) > 0:
		return fmt.Sprintf("the request mounts %s, which pooled containers do not have", pl.mounts[0].Target)
	case pl.limits.DiskBytes != s.cfg.Limits.Default.DiskBytes:
		return "the request's disk size differs from the pool's"
	}
	return ""
}

// prepareWarm makes one pooled container with the default limits.
func (s *Service) prepareWarm(ctx context.Context, key pool.Key, imageName string) (*pool.Warm, error) {
	id, err := run.NewID(s.cfg.Node)
	if err != nil {
		return nil, err
	}
	lim := s.cfg.Limits.Default
	ws, err := s.ex.newWorkspace(id, lim.DiskBytes, key.Egress)
	if err != nil {
		return nil, err
	}
	spec := s.ex.containerSpec(id, key.Image, key.Runtime, ws, lim)
	// The init waits in /workspace; the task brings its own environment.
	spec.Env, spec.WorkingDir = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}, run.WorkspaceDir
	if spec.Prestart = s.pooledInterpreter(imageName); spec.Prestart != nil {
		if !key.Preimport {
			spec.Prestart.Modules = nil
		}
		img, err := s.rt.Image(ctx, imageName)
		if err != nil {
			return nil, errors.Join(err, ws.Remove())
		}
		spec.Env = sortedEnv(s.startupEnv(img, key.Egress))
	}
	ctr, err := s.preparer.Prepare(ctx, spec)
	if err != nil {
		return nil, errors.Join(err, ws.Remove())
	}
	return &pool.Warm{ID: id, Key: key, ImageName: imageName, Dir: ws, Container: ctr, Prestart: spec.Prestart}, nil
}
