package netpolicy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/textproto"
	"os"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
)

// Secret is a credential of the operator's that the egress gateway adds to
// an allow-listed task's HTTPS requests to the hosts it names: the task
// never holds it, only a placeholder.
type Secret struct {
	// Name is what requests, grants and logs call it.
	Name string `json:"name"`
	// File or Env is where the daemon reads the value: a file's content
	// (a final newline trimmed), or a variable of its own environment.
	File string `json:"file,omitempty"`
	Env  string `json:"env,omitempty"`
	// Hosts are the names ("api.example.org", "*.example.org") whose
	// requests get the secret; Paths (URL path prefixes) and Methods
	// narrow it, none meaning all.
	Hosts   []string `json:"hosts"`
	Paths   []string `json:"paths,omitempty"`
	Methods []string `json:"methods,omitempty"`
	// Headers are set on each such request, replacing what the program
	// sent, "{secret}" in each replaced by the value ("Authorization":
	// "Bearer {secret}"); Query names a URL parameter set to the value.
	Headers map[string]string `json:"headers,omitempty"`
	Query   string            `json:"query,omitempty"`
	// ProgramEnv names a variable of the program's set to the
	// placeholder (OPENAI_API_KEY), besides SANDBOXD_SECRET_<NAME>: an
	// SDK that insists on a key finds one.
	ProgramEnv string `json:"program_env,omitempty"`

	value string
}

// secretToken is where a header's template takes the value.
const secretToken = "{secret}"

// minSecretBytes is the shortest value: the gateway masks the value
// wherever a response carries it, and a short one would be found in
// responses by chance.
const minSecretBytes = 8

// Placeholder is what a program holds instead of the secret name: it is
// worth nothing outside the gateway.
func Placeholder(name string) string {
	return "SANDBOXD_SECRET_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// Value is the secret's value.
func (s Secret) Value() string { return s.value }

// MatchesHost says whether the secret is for requests to name.
func (s Secret) MatchesHost(name string) bool {
	return slices.ContainsFunc(s.Hosts, func(h string) bool { return Rule{Host: h}.MatchesHost(name) })
}

// Matches says whether a request of method to path on a host of the
// secret's gets it.
func (s Secret) Matches(method, path string) bool {
	if len(s.Methods) > 0 && !slices.Contains(s.Methods, method) {
		return false
	}
	return len(s.Paths) == 0 || slices.ContainsFunc(s.Paths, func(p string) bool { return strings.HasPrefix(path, p) })
}

// HeaderValues are the headers the secret sets, with its value in.
func (s Secret) HeaderValues() map[string]string {
	out := make(map[string]string, len(s.Headers))
	for h, tmpl := range s.Headers {
		out[h] = strings.ReplaceAll(tmpl, secretToken, s.value)
	}
	return out
}

// validate refuses a secret that is not well formed; its value is read
// by load.
func (s Secret) validate() error {
	switch {
	case !validPolicyName(s.Name):
		return fmt.Errorf("name %q: a name is 1-32 of a-z 0-9 - _", s.Name)
	case (s.File == "") == (s.Env == ""):
		return fmt.Errorf("%s: names one of file and env, where the daemon reads its value", s.Name)
	case len(s.Hosts) == 0:
		return fmt.Errorf("%s: names no hosts", s.Name)
	case len(s.Headers) == 0 && s.Query == "":
		return fmt.Errorf("%s: sets no header and no query parameter", s.Name)
	}
	for _, h := range s.Hosts {
		if !validHostPattern(h) {
			return fmt.Errorf("%s: host %q is not a DNS name (lower case) or *.domain", s.Name, h)
		}
	}
	for _, m := range s.Methods {
		if m == "" || strings.ToUpper(m) != m || strings.ContainsAny(m, " \t\r\n") {
			return fmt.Errorf("%s: method %q is not an HTTP method in upper case", s.Name, m)
		}
	}
	for _, p := range s.Paths {
		if !strings.HasPrefix(p, "/") {
			return fmt.Errorf("%s: path %q does not begin with /", s.Name, p)
		}
	}
	for h, tmpl := range s.Headers {
		if textproto.CanonicalMIMEHeaderKey(h) != h || strings.ContainsAny(h, " \t\r\n:") {
			return fmt.Errorf("%s: header %q is not a header name in canonical form (%q)", s.Name, h, textproto.CanonicalMIMEHeaderKey(h))
		}
		if hopByHop(h) {
			return fmt.Errorf("%s: header %s is the connection's, not the request's", s.Name, h)
		}
		if !strings.Contains(tmpl, secretToken) || strings.ContainsAny(tmpl, "\r\n") {
			return fmt.Errorf("%s: header %s: %q needs %s where the value goes, on one line", s.Name, h, tmpl, secretToken)
		}
	}
	if s.ProgramEnv != "" && !validEnvName(s.ProgramEnv) {
		return fmt.Errorf("%s: program_env %q is not a variable name", s.Name, s.ProgramEnv)
	}
	return nil
}

// hopByHop are headers the gateway's own connection sets.
func hopByHop(h string) bool {
	switch h {
	case "Host", "Connection", "Content-Length", "Transfer-Encoding", "Upgrade", "Te", "Trailer", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization":
		return true
	}
	return false
}

func validEnvName(s string) bool {
	for i, c := range s {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != ""
}

// load reads the secret's value with getenv.
func (s *Secret) load(getenv func(string) string) error {
	if s.File != "" {
		b, err := os.ReadFile(s.File)
		if err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		s.value = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	} else {
		s.value = getenv(s.Env)
	}
	switch {
	case len(s.value) < minSecretBytes:
		return fmt.Errorf("%s: its value has %d bytes; a secret has at least %d", s.Name, len(s.value), minSecretBytes)
	case strings.ContainsFunc(s.value, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }):
		return fmt.Errorf("%s: its value holds a control character, which no header may", s.Name)
	}
	return nil
}

// ParseSecrets reads the operator's secrets file, {"secrets": [...]},
// refusing unknown fields and repeated names, and reads each value.
func ParseSecrets(b []byte, getenv func(string) string) ([]Secret, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f struct {
		Secrets []Secret `json:"secrets"`
	}
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	seen := map[string]bool{}
	for i := range f.Secrets {
		s := &f.Secrets[i]
		if err := s.validate(); err != nil {
			return nil, fmt.Errorf("secrets[%d]: %w", i, err)
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("secrets[%d]: %s is named twice", i, s.Name)
		}
		seen[s.Name] = true
		if err := s.load(getenv); err != nil {
			return nil, fmt.Errorf("secrets[%d]: %w", i, err)
		}
	}
	return f.Secrets, nil
}

// Secrets are the operator's secrets as last read: Set swaps them while
// tasks run, and a task's connections look them up by name at each
// request, so a rotated value is used from the next request on.
type Secrets struct {
	cur atomic.Pointer[map[string]Secret]
}

// NewSecrets holds list.
func NewSecrets(list []Secret) *Secrets {
	s := &Secrets{}
	s.Set(list)
	return s
}

// Set makes list the secrets.
func (s *Secrets) Set(list []Secret) {
	m := make(map[string]Secret, len(list))
	for _, sec := range list {
		m[sec.Name] = sec
	}
	s.cur.Store(&m)
}

// Get is the secret named name, if the operator has it.
func (s *Secrets) Get(name string) (Secret, bool) {
	if s == nil {
		return Secret{}, false
	}
	sec, ok := (*s.cur.Load())[name]
	return sec, ok
}

// Names are the secrets' names, sorted.
func (s *Secrets) Names() []string {
	if s == nil {
		return nil
	}
	m := *s.cur.Load()
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// resolveSecrets checks the secrets a request names: each the operator's,
// named once, and for a host the policy's rules allow.
func (o Operator) resolveSecrets(names []string, rules []Rule) ([]string, error) {
	var out []string
	for i, name := range names {
		field := fmt.Sprintf("network.secrets[%d]", i)
		sec, ok := o.Secrets.Get(name)
		if !ok {
			return nil, permissionDenied(field, fmt.Sprintf("%q is not a secret of the operator's (%q)", name, o.Secrets.Names()))
		}
		if slices.Contains(out, name) {
			return nil, invalid(field, fmt.Sprintf("%q is named twice", name))
		}
		if !slices.ContainsFunc(rules, func(r Rule) bool {
			return r.Host != "" && slices.ContainsFunc(sec.Hosts, func(h string) bool {
				return Rule{Host: h}.MatchesHost(r.Host) || r.Covers(Rule{Host: h, Ports: r.Ports})
			})
		}) {
			return nil, invalid(field, fmt.Sprintf("%s is for %q, which no rule of the policy allows", name, sec.Hosts))
		}
		out = append(out, name)
	}
	return out, nil
}
