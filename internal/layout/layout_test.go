package layout

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/sandboxd/sandboxd"

// rule forbids the packages that match pkg (a path below the module; a
// trailing "/..." matches the folder and everything below it) to import
// anything that starts with one of imports, unless listed in except.
type rule struct {
	why     string
	pkg     string
	imports []string
	except  []string
}

// Import prefixes of the backends' SDKs, the protocol edges and the
// backends.
var (
	backendSDKs = []string{"github.com/docker/docker/", "github.com/containerd/containerd/"}
	backends    = []string{module + "/runtime/docker", module + "/runtime/containerd"}
	proto       = []string{module + "/proto/", "google.golang.org/grpc", "google.golang.org/protobuf"}
	mcpSDK      = []string{"github.com/modelcontextprotocol/"}
	upper       = []string{module + "/task", module + "/server", module + "/mcp", module + "/reproducer", module + "/cmd/"}
	// mechanics are the engine's floors that only it uses: the edges get
	// what they need through the façade's types.
	mechanics = []string{module + "/task/exec", module + "/task/pool", module + "/task/taskdir", module + "/task/output", module + "/task/registry"}
	// aboveFloors are what the engine's floors may not import: the
	// façade and the edges (floors below them they may).
	aboveFloors = []string{module + "/task$", module + "/server", module + "/mcp", module + "/reproducer", module + "/cmd/"}
)

func cat(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

var rules = []rule{
	{why: "the runtime contract is types and interfaces only", pkg: "runtime",
		imports: cat(backendSDKs, backends, proto, mcpSDK, upper, []string{module + "/internal/"})},
	{why: "the shared lifecycle knows no backend's SDK", pkg: "internal/sandbox/lifecycle",
		imports: cat(backendSDKs, backends, proto, mcpSDK, upper)},
	{why: "a backend talks to its own daemon only, below the engine", pkg: "runtime/docker",
		imports: cat([]string{"github.com/containerd/containerd/", module + "/runtime/containerd"}, proto, mcpSDK, upper)},
	{why: "a backend talks to its own daemon only, below the engine", pkg: "runtime/containerd",
		imports: cat([]string{"github.com/docker/docker/", module + "/runtime/docker"}, mcpSDK, upper, []string{module + "/proto/"})},
	{why: "the engine sees no protocol and no engine SDK", pkg: "task",
		imports: cat(backendSDKs, backends, proto, mcpSDK, []string{module + "/server", module + "/mcp", module + "/reproducer", module + "/cmd/"})},
	{why: "the data packages sit at the bottom", pkg: "artifacts",
		imports: cat(backendSDKs, proto, mcpSDK, upper, []string{module + "/runtime"})},
	{why: "the data packages sit at the bottom", pkg: "limits",
		imports: cat(backendSDKs, proto, mcpSDK, upper, []string{module + "/runtime", module + "/artifacts"})},
	{why: "the data packages sit at the bottom", pkg: "netpolicy",
		imports: cat(backendSDKs, proto, mcpSDK, upper, []string{module + "/runtime", module + "/artifacts"})},
	{why: "the gateway enforces policies for the engine, below it", pkg: "netpolicy/gateway",
		imports: cat(backendSDKs, backends, proto, mcpSDK, upper)},
	{why: "the data packages sit at the bottom", pkg: "audit",
		imports: cat(backendSDKs, proto, mcpSDK, upper, []string{module + "/runtime", module + "/artifacts"})},
	{why: "PID 1 of every sandbox knows only its launch protocol", pkg: "internal/sandbox/sandboxinit",
		imports: cat(backendSDKs, backends, proto, mcpSDK, upper, []string{module + "/runtime", module + "/internal/sandbox/lifecycle", module + "/artifacts", module + "/netpolicy", module + "/limits"})},
	{why: "host checks below the engine know no backend SDK, protocol or daemon", pkg: "internal/host/hostview",
		imports: cat(backendSDKs, backends, proto, mcpSDK, upper, []string{module + "/runtime"})},
	{why: "host claims below the engine know no backend SDK, protocol or daemon", pkg: "internal/host/claim",
		imports: cat(backendSDKs, backends, proto, mcpSDK, upper, []string{module + "/runtime"})},
	{why: "finding peers knows no engine, protocol or daemon", pkg: "cluster",
		imports: cat(backendSDKs, backends, proto, mcpSDK, upper, []string{module + "/runtime", module + "/internal/"})},
	{why: "a task's folders know nothing of the engine above them", pkg: "task/taskdir",
		imports: cat(backendSDKs, backends, proto, mcpSDK, aboveFloors, []string{module + "/runtime", module + "/internal/"})},
	{why: "who calls and what they may ask for knows nothing of the engine above it", pkg: "task/access",
		imports: cat(backendSDKs, backends, proto, mcpSDK, aboveFloors, []string{module + "/runtime", module + "/internal/"})},
	{why: "a run's vocabulary is data, below everything that speaks it", pkg: "task/run",
		imports: cat(backendSDKs, backends, proto, mcpSDK, aboveFloors, []string{module + "/runtime", module + "/internal/"})},
	{why: "judging's vocabulary and decisions run nothing: no container, mechanics, engine or edge", pkg: "task/judge",
		imports: cat(backendSDKs, backends, proto, mcpSDK, aboveFloors, mechanics, []string{module + "/runtime", module + "/internal/"})},
	{why: "the sessions' table knows no container, engine or edge", pkg: "task/session",
		imports: cat(backendSDKs, backends, proto, mcpSDK, aboveFloors, []string{module + "/runtime", module + "/internal/"})},
	{why: "the run registry knows no container, engine or edge", pkg: "task/registry",
		imports: cat(backendSDKs, backends, proto, mcpSDK, aboveFloors, []string{module + "/runtime", module + "/internal/"})},
	{why: "a run's output on its way knows no container, engine or edge", pkg: "task/output",
		imports: cat(backendSDKs, backends, proto, mcpSDK, aboveFloors, []string{module + "/runtime", module + "/internal/"})},
	{why: "the host uids know nothing of the engine above them", pkg: "task/hostuid",
		imports: cat(backendSDKs, backends, proto, mcpSDK, aboveFloors, []string{module + "/runtime", module + "/internal/"})},
	{why: "one run's mechanics take a plan and a container source, not a policy: no tenants, sessions' table or admission", pkg: "task/exec",
		imports: cat(backendSDKs, backends, proto, mcpSDK, aboveFloors, []string{module + "/task/access", module + "/task/session", module + "/audit", module + "/cluster"})},
	{why: "the engine's floors sit below its façade and the edges", pkg: "task/...", except: []string{"task"},
		imports: cat(backendSDKs, backends, proto, mcpSDK, aboveFloors)},
	{why: "the data packages sit at the bottom", pkg: "images",
		imports: cat(backendSDKs, proto, mcpSDK, upper, []string{module + "/runtime", module + "/artifacts"})},
	{why: "an image's build knows recipes and the file system, no engine: the backends load what it makes", pkg: "images/builder",
		imports: cat(backendSDKs, backends, proto, mcpSDK, upper, []string{module + "/runtime", module + "/internal/"})},
	{why: "signing knows what a bundle says, nothing of who ran it or how", pkg: "artifacts/provenance",
		imports: cat(backendSDKs, backends, mcpSDK, upper, []string{module + "/proto/", module + "/runtime", module + "/internal/"})},
	{why: "replays know no protocol", pkg: "reproducer",
		imports: cat(backendSDKs, backends, proto, mcpSDK, []string{module + "/server", module + "/mcp", module + "/cmd/"})},
	{why: "the API's conversions are data both ways, below the service and its client", pkg: "server/wire",
		imports: cat(backendSDKs, backends, mcpSDK, []string{module + "/server$", module + "/client", module + "/mcp", module + "/reproducer", module + "/cmd/"})},
	{why: "the Go client speaks the API, nothing else: no MCP, no backend", pkg: "client",
		imports: cat(backendSDKs, backends, mcpSDK, []string{module + "/server$", module + "/mcp", module + "/reproducer", module + "/cmd/"})},
	{why: "the gRPC edge knows no MCP and no engine", pkg: "server",
		imports: cat(backendSDKs, backends, mcpSDK, []string{module + "/mcp", module + "/cmd/"})},
	{why: "the inbound proxy sees the engine's façade and vocabulary: no protocol, MCP, runtime or backend", pkg: "inbound",
		imports: cat(backendSDKs, backends, proto, mcpSDK, []string{module + "/server", module + "/mcp", module + "/cmd/", module + "/runtime", module + "/internal/sandbox/"})},
	{why: "the MCP edge knows no gRPC types and no engine", pkg: "mcp",
		imports: cat(backendSDKs, backends, []string{module + "/proto/", module + "/server", module + "/cmd/"})},
	{why: "what makes and runs sandboxes sits below the engine and the edges", pkg: "internal/sandbox/...",
		imports: cat(proto, mcpSDK, upper, []string{module + "/internal/edge/", module + "/internal/host/"})},
	{why: "the edges' helpers know no engine below them", pkg: "internal/edge/...",
		imports: cat(backendSDKs, backends, mcpSDK, upper, []string{module + "/runtime", module + "/internal/sandbox/", module + "/internal/host/"})},
	{why: "the edges see the engine's façade and vocabulary, never its mechanics", pkg: "...", imports: mechanics,
		except: []string{"task", "task/...", "conformance", "internal/testutil/...", "server/servertest"}},
	{why: "only cmd/sandboxd picks a backend", pkg: "...", imports: backends,
		except: []string{"cmd/sandboxd", "internal/testutil/backends", "runtime/docker", "runtime/containerd"}},
	{why: "only the gRPC edge sees the API's types: the service, its Go client, their conversions", pkg: "...", imports: []string{module + "/proto/"},
		except: []string{"server", "server/wire", "client", "proto/..."}},
	{why: "only mcp sees the MCP SDK (and the tests' MCP server)", pkg: "...", imports: mcpSDK, except: []string{"mcp", "internal/testutil/toolserver"}},
	{why: "test helpers stay in tests", pkg: "...", imports: []string{module + "/internal/testutil", module + "/runtime/runtimetest", module + "/runtime/fake", module + "/internal/testprog", module + "/server/servertest"},
		except: []string{"internal/testutil/...", "runtime/runtimetest", "runtime/fake", "internal/testprog/...", "server/servertest"}},
}

// matches says whether the package path rel (below the module) is matched
// by pattern.
func matches(pattern, rel string) bool {
	if pattern == "..." {
		return true
	}
	if dir, ok := strings.CutSuffix(pattern, "/..."); ok {
		return rel == dir || strings.HasPrefix(rel, dir+"/")
	}
	return rel == pattern
}

// TestImportRules checks the non-test imports of every package.
func TestImportRules(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	used := make([]bool, len(rules))
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		rel := strings.TrimPrefix(strings.TrimPrefix(fields[0], module), "/")
		for i, r := range rules {
			if !matches(r.pkg, rel) || exempt(r.except, rel) {
				continue
			}
			used[i] = true
			for _, imp := range fields[1:] {
				for _, bad := range r.imports {
					if forbids(bad, imp) {
						t.Errorf("%s imports %s: %s", fields[0], imp, r.why)
					}
				}
			}
		}
	}
	for i, u := range used {
		if !u {
			t.Errorf("the rule for %s matches no package: it names a package that is gone", rules[i].pkg)
		}
	}
}

// forbids says whether the import path imp is the forbidden bad: a
// prefix of imports, or with a trailing "$" exactly one.
func forbids(bad, imp string) bool {
	if exact, ok := strings.CutSuffix(bad, "$"); ok {
		return imp == exact
	}
	return imp == strings.TrimSuffix(bad, "/") || strings.HasPrefix(imp, bad)
}

func exempt(except []string, rel string) bool {
	for _, e := range except {
		if matches(e, rel) {
			return true
		}
	}
	return false
}
