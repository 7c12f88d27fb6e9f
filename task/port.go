package task

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/audit"
	"github.com/sandboxd/sandboxd/task/run"
	"github.com/sandboxd/sandboxd/task/session"
)

// A session's port, once opened, is reached from outside through
// sandboxd's inbound proxy only, at a URL that carries a token of that
// session and port alone; the proxy's connection goes through the
// session's init to the container's loopback (runtime.PortDialer). No
// container port is ever published, and the session's outbound policy is
// untouched.

// ports are the opened ports of every session, by the SHA-256 of their
// token: a lookup by a secret's digest tells nothing of the secret by its
// timing.
type ports struct {
	mu     sync.Mutex
	byHash map[string]*openPort
}

// openPort is an opened port of a live session.
type openPort struct {
	sess *liveSession
	info session.Port
}

// maxPorts bounds a session's opened ports.
const maxPorts = 16

func tokenHash(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// OpenPort opens a port of a session of the caller's to the inbound
// proxy, or reports it when it is open already.
func (s *Service) OpenPort(ctx context.Context, sessionID string, port int) (session.Port, error) {
	if port < 1 || port > 65535 {
		return session.Port{}, run.Invalid("port", "%d is not a TCP port (1-65535)", port)
	}
	if s.cfg.InboundURL == "" {
		return session.Port{}, errdefs.ErrFailedPrecondition.WithMessage("the inbound proxy is off on this daemon (--inbound-listen)")
	}
	sess, err := s.liveSession(ctx, sessionID)
	if err != nil {
		return session.Port{}, err
	}
	s.ports.mu.Lock()
	defer s.ports.mu.Unlock()
	mine := 0
	for _, p := range s.ports.byHash {
		if p.sess == sess {
			if p.info.Port == port {
				return p.info, nil
			}
			mine++
		}
	}
	if mine >= maxPorts {
		return session.Port{}, errdefs.ErrResourceExhausted.WithMessage(fmt.Sprintf("the session has %d ports open, the most it may", maxPorts))
	}
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return session.Port{}, err
	}
	token := hex.EncodeToString(b)
	info := session.Port{SessionID: sess.info.ID, Port: port, Token: token, OpenedAt: time.Now().UTC(),
		URL: strings.Replace(s.cfg.InboundURL, "{token}", token, 1)}
	if s.ports.byHash == nil {
		s.ports.byHash = map[string]*openPort{}
	}
	s.ports.byHash[tokenHash(token)] = &openPort{sess: sess, info: info}
	sess.box.Record(artifacts.SessionEvent{At: info.OpenedAt, Kind: artifacts.EventPortOpened, Port: port})
	s.touchSession(sess)
	s.log.Info("port opened", "session", sess.info.ID, "port", port, "tenant", sess.info.Tenant)
	if s.auditLog != nil {
		e := s.auditEvent(ctx)
		e.Kind, e.SessionID, e.Session = audit.KindSession, sess.info.ID, fmt.Sprintf("port %d opened", port)
		s.audit(e)
	}
	return info, nil
}

// ClosePort closes a session's port to the inbound proxy: its URL answers
// no more. Connections already made go on until they end.
func (s *Service) ClosePort(ctx context.Context, sessionID string, port int) error {
	sess, err := s.liveSession(ctx, sessionID)
	if err != nil {
		return err
	}
	s.ports.mu.Lock()
	defer s.ports.mu.Unlock()
	for h, p := range s.ports.byHash {
		if p.sess == sess && p.info.Port == port {
			delete(s.ports.byHash, h)
			sess.box.Record(artifacts.SessionEvent{At: time.Now().UTC(), Kind: artifacts.EventPortClosed, Port: port})
			return nil
		}
	}
	return errdefs.ErrNotFound.WithMessage(fmt.Sprintf("port: %d is not open in session %q", port, sessionID))
}

// ListPorts lists a session's opened ports, lowest first.
func (s *Service) ListPorts(ctx context.Context, sessionID string) ([]session.Port, error) {
	sess, err := s.liveSession(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	s.ports.mu.Lock()
	defer s.ports.mu.Unlock()
	var out []session.Port
	for _, p := range s.ports.byHash {
		if p.sess == sess {
			out = append(out, p.info)
		}
	}
	slices.SortFunc(out, func(a, b session.Port) int { return a.Port - b.Port })
	return out, nil
}

// DialPort connects to the opened port of token, for the inbound proxy:
// an unknown token is not found, whoever asks. Each connection is a use
// of its session.
func (s *Service) DialPort(ctx context.Context, token string) (net.Conn, session.Port, error) {
	s.ports.mu.Lock()
	p := s.ports.byHash[tokenHash(token)]
	s.ports.mu.Unlock()
	if p == nil {
		return nil, session.Port{}, errdefs.ErrNotFound.WithMessage("no open port has this token")
	}
	s.touchSession(p.sess)
	conn, err := p.sess.box.DialPort(ctx, uint16(p.info.Port))
	if err != nil {
		return nil, p.info, err
	}
	return conn, p.info, nil
}

// Port reports the open port of token, for the inbound proxy.
func (s *Service) Port(token string) (session.Port, bool) {
	s.ports.mu.Lock()
	defer s.ports.mu.Unlock()
	p := s.ports.byHash[tokenHash(token)]
	if p == nil {
		return session.Port{}, false
	}
	return p.info, true
}

// forget drops a session's ports, at its end.
func (ps *ports) forget(sess *liveSession) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for h, p := range ps.byHash {
		if p.sess == sess {
			delete(ps.byHash, h)
		}
	}
}
