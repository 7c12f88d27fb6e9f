package mcp

import (
	"crypto/subtle"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/task"
)

// Path is where the Streamable HTTP endpoint is served.
const Path = "/mcp"

// HTTPOptions configure the Streamable HTTP endpoint.
type HTTPOptions struct {
	// Token, when set, is the bearer token every request must carry;
	// sandboxd serve gives every listener one, loopback ones included.
	Token string
	// AllowedHosts are Host header names accepted besides the loopback
	// names; a request naming another host is refused with 403, which
	// defeats DNS rebinding.
	AllowedHosts []string
	// AllowedOrigins are browser origins (scheme://host:port) that may call
	// the endpoint besides its own; a request from another origin is refused
	// with 403.
	AllowedOrigins []string
	// MaxBodyBytes caps a request body (413 beyond).
	MaxBodyBytes int64
	// Caller is who calls on this endpoint: it decides what a call may
	// ask for.
	Caller task.Caller
	// Log receives the transport's log lines.
	Log *slog.Logger
}

// HTTPHandler serves s on Path over Streamable HTTP, behind the checks of
// opts. A dropped connection does not cancel a running tool call; a
// notifications/cancelled message does.
func HTTPHandler(s *mcpsdk.Server, opts HTTPOptions) http.Handler {
	h := mcpsdk.NewStreamableHTTPHandler(func(*http.Request) *mcpsdk.Server { return s }, &mcpsdk.StreamableHTTPOptions{
		Logger:              opts.Log,
		MaxRequestBodyBytes: opts.MaxBodyBytes,
	})
	mux := http.NewServeMux()
	mux.Handle(Path, guard{next: h, opts: opts})
	return mux
}

// guard checks the Host, Origin and token of every request.
type guard struct {
	next http.Handler
	opts HTTPOptions
}

func (g guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if !loopbackName(host) && !slices.Contains(g.opts.AllowedHosts, host) {
		http.Error(w, "forbidden: Host "+r.Host+" is not this server's", http.StatusForbidden)
		return
	}
	if origin := r.Header.Get("Origin"); origin != "" && !g.originAllowed(origin, r.Host) {
		http.Error(w, "forbidden: Origin "+origin+" may not call this server", http.StatusForbidden)
		return
	}
	if g.opts.Token != "" {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(token), []byte(g.opts.Token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sandboxd"`)
			http.Error(w, "unauthorized: a bearer token is required", http.StatusUnauthorized)
			return
		}
	}
	g.next.ServeHTTP(w, r.WithContext(task.WithCaller(r.Context(), g.opts.Caller)))
}

// originAllowed accepts the endpoint's own origin and the configured ones.
func (g guard) originAllowed(origin, host string) bool {
	if slices.Contains(g.opts.AllowedOrigins, origin) {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host == host
}

func loopbackName(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
