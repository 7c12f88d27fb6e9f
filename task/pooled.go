package task

import (
	"context"
	"fmt"

	"github.com/sandboxd/sandboxd/task/exec"
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
func (s *Service) coldReason(pl exec.Plan) string {
	switch {
	case s.pool == nil:
		return "the pool is off"
	case len(pl.Mounts) > 0:
		return fmt.Sprintf("the request mounts %s, which pooled containers do not have", pl.Mounts[0].Target)
	case pl.Limits.DiskBytes != s.cfg.Limits.Default.DiskBytes:
		return "the request's disk size differs from the pool's"
	}
	return ""
}

// prepareWarm makes one pooled container with the default limits, its
// interpreter started where its image has one to pre-start.
func (s *Service) prepareWarm(ctx context.Context, key pool.Key, imageName string) (*pool.Warm, error) {
	id, err := run.NewID(s.cfg.Node)
	if err != nil {
		return nil, err
	}
	w := exec.Warm{ID: id, Key: key, ImageName: imageName, Limits: s.cfg.Limits.Default, Prestart: s.pooledInterpreter(imageName)}
	if w.Prestart != nil {
		if !key.Preimport {
			w.Prestart.Modules = nil
		}
		img, err := s.rt.Image(ctx, imageName)
		if err != nil {
			return nil, err
		}
		w.Env = exec.SortedEnv(s.startupEnv(img, key.Egress))
	}
	return s.ex.PrepareWarm(ctx, w)
}
