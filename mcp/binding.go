package mcp

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"sync"
	"time"
)

// sessionHeader carries the transport session of Streamable HTTP.
const sessionHeader = "Mcp-Session-Id"

// bindings tie each transport session to the caller that created it: a
// session id is no credential, and a request on it from anyone else is
// answered as for a session that does not exist. They also bound the
// sessions a caller holds and forget idle ones.
type bindings struct {
	max  int           // sessions per caller
	idle time.Duration // after which a session without requests is forgotten
	now  func() time.Time

	mu       sync.Mutex
	sessions map[string]*binding
}

type binding struct {
	owner    string
	lastUsed time.Time
}

func newBindings(max int, idle time.Duration) *bindings {
	return &bindings{max: max, idle: idle, now: time.Now, sessions: map[string]*binding{}}
}

// ownerKey is who a request comes from: the caller's name and the
// credential it presented, so that two credentials are two owners even
// where they name one caller.
func ownerKey(caller, token, cert string) string {
	cred := "none"
	switch {
	case token != "":
		sum := sha256.Sum256([]byte(token))
		cred = "token:" + hex.EncodeToString(sum[:])
	case cert != "":
		cred = "cert:" + cert
	}
	return caller + "\x00" + cred
}

// use says whether owner may send a request on session id, and marks it
// used.
func (b *bindings) use(id, owner string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expireLocked()
	s, ok := b.sessions[id]
	if !ok || s.owner != owner {
		return false
	}
	s.lastUsed = b.now()
	return true
}

// room says whether owner may create one more session.
func (b *bindings) room(owner string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expireLocked()
	n := 0
	for _, s := range b.sessions {
		if s.owner == owner {
			n++
		}
	}
	return n < b.max
}

func (b *bindings) bind(id, owner string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sessions[id] = &binding{owner: owner, lastUsed: b.now()}
}

func (b *bindings) forget(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.sessions, id)
}

func (b *bindings) expireLocked() {
	now := b.now()
	for id, s := range b.sessions {
		if now.Sub(s.lastUsed) >= b.idle {
			delete(b.sessions, id)
		}
	}
}

// bindingWriter binds the session the SDK mints in its answer to an
// initialize request, as the answer's headers are written.
type bindingWriter struct {
	http.ResponseWriter
	once sync.Once
	bind func(id string)
}

func (w *bindingWriter) header() {
	w.once.Do(func() {
		if id := w.Header().Get(sessionHeader); id != "" {
			w.bind(id)
		}
	})
}

func (w *bindingWriter) WriteHeader(code int) {
	w.header()
	w.ResponseWriter.WriteHeader(code)
}

func (w *bindingWriter) Write(p []byte) (int, error) {
	w.header()
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController flush the SDK's event streams.
func (w *bindingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *bindingWriter) Flush() {
	w.header()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}
