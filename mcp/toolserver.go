package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	sbtools "github.com/sandboxd/sandboxd/task/tools"
)

// ToolServer is an operator's MCP server whose tools sandboxed programs
// may call: sandboxd is its MCP client, connected on first use and again
// after the connection failed.
type ToolServer struct {
	name, version string
	transport     func() mcpsdk.Transport

	mu      sync.Mutex
	session *mcpsdk.ClientSession
	changed func() // told when the server says its tool list changed
}

// OnListChanged has f called whenever the server says its tools changed
// (notifications/tools/list_changed), so that a cached list is dropped.
func (s *ToolServer) OnListChanged(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.changed = f
}

// KeyMeta is the _meta key of a call's idempotency key (see tools.Channel):
// a server that does writes can refuse to do one twice.
const KeyMeta = "io.sandboxd/idempotency-key"

// NewToolServer makes the tool server name at target: an http:// or
// https:// URL of a Streamable HTTP endpoint, sent header on every
// request (its credentials), or a command line that sandboxd starts
// and speaks to on its stdin and stdout.
func NewToolServer(name, target string, header http.Header, version string) (*ToolServer, error) {
	if err := sbtools.ValidName(name); err != nil {
		return nil, err
	}
	s := &ToolServer{name: name, version: version}
	switch {
	case strings.HasPrefix(target, "http://") || strings.HasPrefix(target, "https://"):
		client := &http.Client{Transport: headerTransport{header, http.DefaultTransport}}
		s.transport = func() mcpsdk.Transport {
			// The standalone stream carries the server's word that its
			// tools changed (see OnListChanged).
			return &mcpsdk.StreamableClientTransport{Endpoint: target, HTTPClient: client}
		}
	default:
		argv := strings.Fields(target)
		if len(argv) == 0 {
			return nil, fmt.Errorf("tool server %s: no command or URL", name)
		}
		if _, err := exec.LookPath(argv[0]); err != nil {
			return nil, fmt.Errorf("tool server %s: %w", name, err)
		}
		s.transport = func() mcpsdk.Transport { return &mcpsdk.CommandTransport{Command: exec.Command(argv[0], argv[1:]...)} }
	}
	return s, nil
}

type headerTransport struct {
	header http.Header
	next   http.RoundTripper
}

func (t headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, v := range t.header {
		req.Header[k] = v
	}
	return t.next.RoundTrip(req)
}

// connected is the session, connecting first when there is none.
func (s *ToolServer) connected(ctx context.Context) (*mcpsdk.ClientSession, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.session != nil {
		return s.session, nil
	}
	client := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "sandboxd", Version: s.version}, &mcpsdk.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcpsdk.ToolListChangedRequest) {
			s.mu.Lock()
			f := s.changed
			s.mu.Unlock()
			if f != nil {
				f()
			}
		},
	})
	sess, err := client.Connect(ctx, s.transport(), nil)
	if err != nil {
		return nil, fmt.Errorf("connect to tool server %s: %w", s.name, err)
	}
	s.session = sess
	return sess, nil
}

// drop forgets a session that failed, so that the next use connects again.
func (s *ToolServer) drop(sess *mcpsdk.ClientSession) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.session == sess {
		s.session = nil
		_ = sess.Close()
	}
}

// Close ends the connection, and the server's process if sandboxd started it.
func (s *ToolServer) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.session == nil {
		return nil
	}
	err := s.session.Close()
	s.session = nil
	return err
}

// Tools lists the server's tools, their risk from its annotations as
// MCP defines their defaults: read-only, else destructive (high risk)
// unless the server says it is not.
func (s *ToolServer) Tools(ctx context.Context) ([]sbtools.Tool, error) {
	sess, err := s.connected(ctx)
	if err != nil {
		return nil, err
	}
	var out []sbtools.Tool
	for t, err := range sess.Tools(ctx, nil) {
		if err != nil {
			s.drop(sess)
			return nil, err
		}
		schema, err := json.Marshal(t.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("tool %s: %w", t.Name, err)
		}
		risk := sbtools.RiskHigh
		if a := t.Annotations; a != nil && a.ReadOnlyHint {
			risk = sbtools.RiskRead
		} else if a != nil && a.DestructiveHint != nil && !*a.DestructiveHint {
			risk = sbtools.RiskWrite
		}
		desc, _, _ := strings.Cut(strings.TrimSpace(t.Description), "\n")
		out = append(out, sbtools.Tool{Name: t.Name, Description: desc, InputSchema: schema, Risk: risk})
	}
	return out, nil
}

// Call calls tool. A result the server marks as an error is a
// *sbtools.Failure with its text; a structured result is returned as it
// is, else the text of the content (one text as a string).
func (s *ToolServer) Call(ctx context.Context, tool string, args json.RawMessage, key string) (json.RawMessage, error) {
	sess, err := s.connected(ctx)
	if err != nil {
		return nil, err
	}
	res, err := sess.CallTool(ctx, &mcpsdk.CallToolParams{Meta: mcpsdk.Meta{KeyMeta: key}, Name: tool, Arguments: args})
	if err != nil {
		if ctx.Err() == nil && !isProtocolError(err) {
			s.drop(sess)
		}
		return nil, err
	}
	var texts []string
	for _, c := range res.Content {
		if t, ok := c.(*mcpsdk.TextContent); ok {
			texts = append(texts, t.Text)
		}
	}
	if res.IsError {
		return nil, &sbtools.Failure{Message: strings.Join(texts, "\n")}
	}
	if res.StructuredContent != nil {
		return json.Marshal(res.StructuredContent)
	}
	if len(texts) == 1 && len(res.Content) == 1 {
		return json.Marshal(texts[0])
	}
	return json.Marshal(res.Content)
}

// isProtocolError says the server answered with a JSON-RPC error: the
// connection is fine.
func isProtocolError(err error) bool {
	var rpc *jsonrpc.Error
	return errors.As(err, &rpc)
}
