package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/sandboxd/sandboxd/artifacts/provenance"
	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/access"
)

// A reload reads one file of the configuration again and applies it; one
// that fails leaves the daemon as it was.
type reload struct {
	what string
	do   func(ctx context.Context) (attrs []any, err error)
}

// reloads are what SIGHUP reads again: the signing key (sandboxd key
// rotate makes a new one), the recipes of --images-dir (whose images the
// MCP tools' schemas then name) and the tenants of --tenants.
func reloads(cfg Config, svc *task.Service, ids *access.Identities, withToken bool, ls *listeners, keys *provenance.Keyring, log *slog.Logger) []reload {
	servers := ls.mcp
	rs := []reload{{what: "signing key", do: func(context.Context) ([]any, error) {
		return []any{"key", keys.KeyID()}, keys.Reload()
	}}}
	if ls.tls != nil {
		// A rotated certificate is used from the next handshake on.
		rs = append(rs, reload{what: "TLS certificate", do: func(context.Context) ([]any, error) {
			if err := ls.tls.Reload(); err != nil {
				return nil, err
			}
			return []any{"cert", cfg.TLS.CertFile, "not_after", ls.tls.NotAfter()}, nil
		}})
	}
	if withToken {
		rs = append(rs, reload{what: "token", do: func(context.Context) ([]any, error) {
			token, err := readToken(cfg.TokenFile)
			if err != nil {
				return nil, err
			}
			ids.SetToken(token)
			return []any{"file", cfg.TokenFile}, nil
		}})
	}
	if cfg.ImagesDir != "" {
		rs = append(rs, reload{what: "images", do: func(ctx context.Context) ([]any, error) {
			catalog, err := images.WithDir(cfg.ImagesDir)
			if err != nil {
				return nil, err
			}
			if err := svc.SetCatalog(catalog); err != nil {
				return nil, err
			}
			for _, s := range servers {
				if err := s.Refresh(ctx); err != nil {
					log.Error("the MCP tools still name the images they named", "err", err)
				}
			}
			return []any{"dir", cfg.ImagesDir, "images", len(catalog.Images)}, nil
		}})
	}
	if cfg.Tenants != "" {
		rs = append(rs, reload{what: "tenants", do: func(context.Context) ([]any, error) {
			tenants, err := loadTenants(cfg.Tenants, svc, withToken)
			if err != nil {
				return nil, err
			}
			ids.Set(tenants)
			return []any{"file", cfg.Tenants, "tenants", len(tenants)}, nil
		}})
	}
	return rs
}

// reloadOnHangup runs the reloads on each SIGHUP until ctx is done. The
// images go first: tenants are checked against the catalog.
func reloadOnHangup(ctx context.Context, rs []reload, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		notifySystemd("RELOADING=1")
		for _, r := range rs {
			attrs, err := r.do(ctx)
			if err != nil {
				log.Error(r.what+" not reloaded: the daemon keeps what it had", "err", err)
				continue
			}
			log.Info(r.what+" reloaded", attrs...)
		}
		notifySystemd("READY=1")
	}
}
