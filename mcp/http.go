package mcp

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/audit"
	"github.com/sandboxd/sandboxd/internal/edge/budget"
	"github.com/sandboxd/sandboxd/internal/edge/tlsconf"
	"github.com/sandboxd/sandboxd/task/access"
)

// Path is where the Streamable HTTP endpoint is served.
const Path = "/mcp"

// HTTPOptions configure the Streamable HTTP endpoint.
type HTTPOptions struct {
	// Identities, when set, name the caller of every request by its bearer
	// token or client certificate, and a request that names none is
	// refused; sandboxd serve sets them on every listener, loopback ones
	// included.
	Identities *access.Identities
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
	// Caller is who calls on an endpoint without Identities.
	Caller access.Caller
	// Budget bounds what the requests in flight hold, with the daemon's
	// other listeners; nil for no bound. A request is counted at its
	// declared length (the most a body may be when it has none) until it
	// has been answered.
	Budget *budget.Budget
	// ReadTimeout bounds how long a request's body may take to arrive.
	ReadTimeout time.Duration
	// Audit, when set, gets a line per request refused for its token.
	Audit *audit.Log
	// Log receives the transport's log lines.
	Log *slog.Logger
	// MaxSessions bounds the transport sessions one caller holds at once
	// (default 64); SessionIdle is how long a session without requests is
	// kept (default 30 minutes).
	MaxSessions int
	SessionIdle time.Duration
}

// Defaults of HTTPOptions.
const (
	DefaultMaxSessions = 64
	DefaultSessionIdle = 30 * time.Minute
)

// HTTPHandler serves s on Path over Streamable HTTP, behind the checks of
// opts, at both revisions of the protocol: a request that names 2026-07-28
// or later (MCP-Protocol-Version) is served statelessly, as that revision
// is, with no transport session; older clients initialize and keep a
// transport session, as 2025-11-25 has them. A dropped connection does not
// cancel a running tool call; a notifications/cancelled message does.
func HTTPHandler(s *Server, opts HTTPOptions) http.Handler {
	if opts.MaxSessions <= 0 {
		opts.MaxSessions = DefaultMaxSessions
	}
	if opts.SessionIdle <= 0 {
		opts.SessionIdle = DefaultSessionIdle
	}
	server := func(*http.Request) *mcpsdk.Server { return s.Server }
	stateful := mcpsdk.NewStreamableHTTPHandler(server, &mcpsdk.StreamableHTTPOptions{
		Logger:              sdkLogger(opts.Log),
		MaxRequestBodyBytes: opts.MaxBodyBytes,
		SessionTimeout:      opts.SessionIdle,
	})
	stateless := mcpsdk.NewStreamableHTTPHandler(server, &mcpsdk.StreamableHTTPOptions{
		Logger:              sdkLogger(opts.Log),
		MaxRequestBodyBytes: opts.MaxBodyBytes,
		Stateless:           true,
	})
	mux := http.NewServeMux()
	mux.Handle(Path, guard{next: stateful, stateless: taskMethods{h: s.h, next: stateless, maxBody: opts.MaxBodyBytes}, opts: opts, sessions: newBindings(opts.MaxSessions, opts.SessionIdle)})
	return mux
}

// statelessVersion is the first revision of the protocol without
// transport sessions.
const statelessVersion = "2026-07-28"

// guard checks the Host, Origin and token of every request, and that a
// request on a transport session comes from the session's creator.
type guard struct {
	next, stateless http.Handler
	opts            HTTPOptions
	sessions        *bindings
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
	c := g.opts.Caller
	token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	cert := ""
	if r.TLS != nil {
		cert = tlsconf.CertName(*r.TLS)
	}
	if g.opts.Identities != nil {
		var ok bool
		if c, ok = g.opts.Identities.Identify(token, cert); !ok {
			// Hosts read a bare 401 as "OAuth required" and go looking for
			// an authorization server: say which credential this is.
			why, challenge := "the request carries no Authorization header and no client certificate", `Bearer realm="sandboxd"`
			if r.Header.Get("Authorization") != "" {
				why, challenge = "its bearer token is not one this server accepts", challenge+`, error="invalid_token"`
			}
			w.Header().Set("WWW-Authenticate", challenge)
			http.Error(w, "unauthorized: "+why+"; send the token the operator gave you as Authorization: Bearer TOKEN (sandboxd uses no OAuth), or connect with a tenant's client certificate", http.StatusUnauthorized)
			g.refused(r, "UNAUTHENTICATED", "no valid bearer token or client certificate")
			return
		}
	}
	owner := ownerKey(c.Name, token, cert)
	next := g.next
	if v := r.Header.Get("MCP-Protocol-Version"); v >= statelessVersion && r.Header.Get(sessionHeader) == "" {
		// Each request stands alone, its caller named by its own token;
		// what lives across requests is found by id and that caller.
		next = g.stateless
	} else if id := r.Header.Get(sessionHeader); id != "" {
		if !g.sessions.use(id, owner) {
			// The answer to an unknown session: whose session it is, and
			// that it exists, are not to be learnt by trying.
			http.Error(w, "session not found", http.StatusNotFound)
			return
		}
		if r.Method == http.MethodDelete {
			defer g.sessions.forget(id)
		}
	} else if r.Method == http.MethodPost {
		if !g.sessions.room(owner) {
			w.Header().Set("Retry-After", "60")
			http.Error(w, fmt.Sprintf("too many sessions: this caller holds %d MCP sessions, the most it may; end one (DELETE) or let one idle out", g.opts.MaxSessions), http.StatusTooManyRequests)
			return
		}
		w = &bindingWriter{ResponseWriter: w, bind: func(id string) { g.sessions.bind(id, owner) }}
	}
	if g.opts.Budget != nil && r.Body != nil && r.Body != http.NoBody {
		n := g.opts.MaxBodyBytes
		if r.ContentLength >= 0 && r.ContentLength < n {
			n = r.ContentLength
		}
		h := g.opts.Budget.Hold(n)
		if h == nil {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "busy: the calls in flight hold the whole request budget; retry shortly", http.StatusServiceUnavailable)
			return
		}
		defer h.Release()
	}
	if g.opts.ReadTimeout > 0 && r.Body != nil && r.Body != http.NoBody {
		// The body must arrive in time; the answer, a tool call's
		// progress among it, may take as long as the run.
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Now().Add(g.opts.ReadTimeout))
		r.Body = &deadlineBody{ReadCloser: r.Body, clear: func() { _ = rc.SetReadDeadline(time.Time{}) }}
	}
	c.Peer, c.Method = r.RemoteAddr, "mcp"
	next.ServeHTTP(w, r.WithContext(access.WithCaller(r.Context(), c)))
}

// refused records a request refused at the door in the audit log.
func (g guard) refused(r *http.Request, code, reason string) {
	if g.opts.Audit == nil {
		return
	}
	err := g.opts.Audit.Record(audit.Event{Kind: audit.KindDecision, Peer: r.RemoteAddr,
		Method: "mcp", Decision: audit.Refused, Code: code, Reason: reason})
	if err != nil && g.opts.Log != nil {
		g.opts.Log.Error("audit log", "err", err)
	}
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

// deadlineBody clears the connection's read deadline once the body has
// been read to its end.
type deadlineBody struct {
	io.ReadCloser
	once  sync.Once
	clear func()
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.once.Do(b.clear)
	}
	return n, err
}

// BodyBytes is the largest request body that carries a request of
// messageBytes: files travel base64-encoded in JSON, a third larger.
func BodyBytes(messageBytes int64) int64 { return messageBytes*4/3 + 1<<20 }
