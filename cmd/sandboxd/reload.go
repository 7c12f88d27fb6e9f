package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/artifacts/provenance"
	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/access"
)

// reload reads one file of the configuration again and applies it; one
// that fails leaves the daemon as it was.
type reload struct {
	what string
	do   func(ctx context.Context) (attrs []any, err error)
	// files are watched: a change to one runs the reload, as a SIGHUP
	// does (a certificate renewed by cert-manager, a token by a vault).
	files []string
}

// reloads are what SIGHUP reads again: the signing key (sandboxd key
// rotate makes a new one), the TLS certificate, the token, the recipes of
// --images-dir (whose images the MCP tools' schemas then name) and the
// tenants of --tenants. The certificate, the token and the tenants are
// also read again when their files change.
func reloads(cfg Config, svc *task.Service, ids *access.Identities, withToken bool, ls *listeners, keys *provenance.Keyring, log *slog.Logger) []reload {
	servers := ls.mcp
	rs := []reload{{what: "signing key", do: func(context.Context) ([]any, error) {
		// The key's id is read once the new key is in: the line names the
		// key that signs from now on.
		err := keys.Reload()
		return []any{"key", keys.KeyID()}, err
	}}}
	if ls.tls != nil {
		// A rotated certificate is used from the next handshake on.
		rs = append(rs, reload{what: "TLS certificate", do: func(context.Context) ([]any, error) {
			if err := ls.tls.Reload(); err != nil {
				return nil, err
			}
			return []any{"cert", cfg.TLS.CertFile, "not_after", ls.tls.NotAfter()}, nil
		}, files: slices.DeleteFunc([]string{cfg.TLS.CertFile, cfg.TLS.KeyFile, cfg.TLS.CAFile}, func(f string) bool { return f == "" })})
	}
	if withToken {
		rs = append(rs, reload{what: "token", do: func(context.Context) ([]any, error) {
			token, err := readToken(cfg.TokenFile)
			if err != nil {
				return nil, err
			}
			ids.SetToken(token)
			return []any{"file", cfg.TokenFile}, nil
		}, files: []string{cfg.TokenFile}})
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
	if store := cfg.Task.Network.Secrets; store != nil {
		// A value's file is watched too: a vault that rotates a key
		// writes the file, not the list.
		files := []string{cfg.EgressSecrets}
		if list, err := loadSecrets(cfg.EgressSecrets); err == nil {
			for _, sec := range list {
				if sec.File != "" {
					files = append(files, sec.File)
				}
			}
		}
		rs = append(rs, reload{what: "secrets", do: func(context.Context) ([]any, error) {
			list, err := loadSecrets(cfg.EgressSecrets)
			if err != nil {
				return nil, err
			}
			store.Set(list)
			return []any{"file", cfg.EgressSecrets, "secrets", len(list)}, nil
		}, files: files})
	}
	if cfg.Tenants != "" {
		rs = append(rs, reload{what: "tenants", do: func(context.Context) ([]any, error) {
			tenants, err := loadTenants(cfg.Tenants, svc, withToken)
			if err != nil {
				return nil, err
			}
			ids.Set(tenants)
			return []any{"file", cfg.Tenants, "tenants", len(tenants)}, nil
		}, files: []string{cfg.Tenants}})
	}
	return rs
}

// reloader runs the reloads, one at a time, on SIGHUP and when their
// files change.
type reloader struct {
	mu  sync.Mutex
	rs  []reload
	log *slog.Logger
}

func (l *reloader) run(ctx context.Context, rs ...reload) {
	l.mu.Lock()
	defer l.mu.Unlock()
	notifySystemd("RELOADING=1")
	for _, r := range rs {
		attrs, err := r.do(ctx)
		if err != nil {
			l.log.Error(r.what+" not reloaded: the daemon keeps what it had", "err", err)
			continue
		}
		l.log.Info(r.what+" reloaded", attrs...)
	}
	notifySystemd("READY=1")
}

// onHangup runs every reload on each SIGHUP until ctx is done. The images
// go first: tenants are checked against the catalog.
func (l *reloader) onHangup(ctx context.Context) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		l.run(ctx, l.rs...)
	}
}

// watch looks at the reloads' files every interval and runs a reload when
// one of its files changed and then held still for an interval: replaced,
// written or renamed over, as a Kubernetes Secret's files are, and not
// read half-written. A reload that fails (a certificate written before
// its key) runs again at the next change, not each tick.
func (l *reloader) watch(ctx context.Context, every time.Duration) {
	applied, last := map[string]string{}, map[string]string{}
	for _, r := range l.rs {
		for _, f := range r.files {
			applied[f] = fileStamp(f)
			last[f] = applied[f]
		}
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, r := range l.rs {
			changed := false
			for _, f := range r.files {
				stamp := fileStamp(f)
				if stamp != applied[f] && stamp == last[f] {
					applied[f], changed = stamp, true
				}
				last[f] = stamp
			}
			if changed {
				l.run(ctx, r)
			}
		}
	}
}

// fileStamp tells one version of a file from another: its inode, size and
// modification time, through symbolic links; "" when it is missing.
func fileStamp(path string) string {
	info, err := os.Stat(path)
	if err != nil {
		return ""
	}
	var ino uint64
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
	}
	return fmt.Sprintf("%d %d %d", ino, info.Size(), info.ModTime().UnixNano())
}
