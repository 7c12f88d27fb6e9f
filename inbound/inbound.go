// Package inbound is sandboxd's inbound proxy: HTTP and WebSocket from
// outside to a port a session opened (task.Service.OpenPort). A request
// names the port by its token, the first label of its Host
// (TOKEN.localhost:8090); the proxy reaches the port through the
// session's init, never through a published container port, so a token
// is the only way in, and it opens one port of one session.
package inbound

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/task/session"
)

// Engine is what the proxy needs of the engine.
type Engine interface {
	// DialPort connects to the open port of token; an unknown token is
	// not found.
	DialPort(ctx context.Context, token string) (net.Conn, session.Port, error)
	// Port reports the open port of token.
	Port(token string) (session.Port, bool)
}

// Proxy serves the open ports of sessions.
type Proxy struct {
	engine Engine
	log    *slog.Logger
	rp     *httputil.ReverseProxy
}

// token is what a port's token looks like: 32 lower-case hex digits.
var token = regexp.MustCompile(`^[0-9a-f]{32}$`)

type tokenKey struct{}

// New is a proxy to engine's open ports.
func New(engine Engine, log *slog.Logger) *Proxy {
	p := &Proxy{engine: engine, log: log}
	transport := &http.Transport{
		// Idle connections are pooled by URL host, which is the token:
		// one port's connection never serves another's.
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			conn, _, err := engine.DialPort(ctx, ctx.Value(tokenKey{}).(string))
			return conn, err
		},
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     30 * time.Second,
	}
	p.rp = &httputil.ReverseProxy{
		Transport: transport,
		Rewrite: func(r *httputil.ProxyRequest) {
			port := r.In.Context().Value(portKey{}).(session.Port)
			r.Out.URL.Scheme, r.Out.URL.Host = "http", r.In.Context().Value(tokenKey{}).(string)
			r.SetXForwarded()
			// The server sees itself addressed as it listens: dev servers
			// refuse Host names they do not know. Where the request came
			// to is in X-Forwarded-Host.
			r.Out.Host = "localhost:" + strconv.Itoa(port.Port)
		},
		ErrorHandler: p.fail,
	}
	return p
}

type portKey struct{}

// ServeHTTP proxies a request to the port its Host names.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t := tokenOf(r.Host)
	port, ok := p.engine.Port(t)
	if !ok {
		// The same answer for a token that never was, one of a closed
		// port, and a malformed Host: nothing to tell them apart by.
		http.Error(w, "no open port here", http.StatusNotFound)
		return
	}
	ctx := context.WithValue(context.WithValue(r.Context(), tokenKey{}, t), portKey{}, port)
	p.rp.ServeHTTP(w, r.WithContext(ctx))
}

// tokenOf is the token in host, or "".
func tokenOf(host string) string {
	label, _, _ := strings.Cut(host, ".")
	if !token.MatchString(label) {
		return ""
	}
	return label
}

// fail answers a request the port could not serve: 502 when nothing
// listens, 503 when the session is gone.
func (p *Proxy) fail(w http.ResponseWriter, r *http.Request, err error) {
	port, _ := r.Context().Value(portKey{}).(session.Port)
	code := http.StatusBadGateway
	msg := fmt.Sprintf("port %d of session %s did not answer: %v", port.Port, port.SessionID, err)
	switch {
	case errdefs.IsNotFound(err):
		code, msg = http.StatusNotFound, "no open port here"
	case errors.Is(err, context.Canceled):
		// The client left.
		return
	}
	p.log.Debug("inbound proxy", "session", port.SessionID, "port", port.Port, "err", err)
	http.Error(w, msg, code)
}
