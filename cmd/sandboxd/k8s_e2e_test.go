//go:build k8s

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/client"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/audit"
	"github.com/sandboxd/sandboxd/cluster"
	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
	"github.com/sandboxd/sandboxd/task"
	"github.com/sandboxd/sandboxd/task/run"
)

// The cluster scripts/k8s-up.sh brings up, which `make k8s-e2e` passes in.
var (
	kubectlPath = os.Getenv("KUBECTL")
	kubeconfig  = os.Getenv("KUBECONFIG")
)

const (
	k8sNodeIP     = "198.51.100.10"
	k8sContainerd = "/run/sandboxd-k8s/containerd.sock"
	k8sToken      = "k8s-e2e-token"
)

func kubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, err := kubectlErr(stdin, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func kubectlErr(stdin string, args ...string) (string, error) {
	cmd := exec.Command(kubectlPath, append([]string{"--kubeconfig", kubeconfig, "-n", "sandboxd"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// k8sDaemon is one DaemonSet of the test: its name, the instance its
// daemon runs as, the ports it listens on, on the node's address (gRPC,
// MCP the next, metrics the one after), and its uids (two daemons share
// the node).
type k8sDaemon struct {
	name, instance string
	grpcPort       int
	uids           string
}

// render is deploy/kubernetes as an operator would apply it (the tenants
// and flags of an overlay), with the DaemonSet adapted to this machine:
// its state, socket folder and containerd are the test cluster's, so that
// nothing of the host's own sandboxd is touched, and the daemon reaches
// the API server at the node's address (there is no kube-proxy).
func render(t *testing.T, d k8sDaemon) string {
	t.Helper()
	dir := t.TempDir()
	base, err := filepath.Abs("../../deploy/kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	// kustomize takes bases by relative path only.
	if base, err = filepath.Rel(dir, base); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(k8sToken))
	files := map[string]string{
		"kustomization.yaml": fmt.Sprintf(`resources: [%s]
configMapGenerator:
  - {name: sandboxd-config, behavior: replace, files: [sandboxd.conf]}
secretGenerator:
  - {name: sandboxd-tenants, behavior: replace, files: [tenants.json]}
patches:
  - patch: |
      apiVersion: apps/v1
      kind: DaemonSet
      metadata: {name: sandboxd}
      spec:
        template:
          spec:
            terminationGracePeriodSeconds: 60
            containers:
              - name: sandboxd
                env:
                  - {name: KUBERNETES_SERVICE_HOST, value: %q}
                  - {name: KUBERNETES_SERVICE_PORT, value: "6443"}
`, base, k8sNodeIP),
		"sandboxd.conf": "--backend containerd\n--insecure-listen\n--drain-timeout 30s\n",
		"tenants.json":  fmt.Sprintf(`{"tenants": [{"name": "e2e", "token_sha256": %q}]}`, hex.EncodeToString(sum[:])),
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out := kubectl(t, "", "kustomize", dir)
	var docs []string
	for _, doc := range strings.Split(out, "\n---\n") {
		if strings.Contains(doc, "kind: DaemonSet") {
			doc = adaptDaemonSet(t, doc, d)
		}
		docs = append(docs, doc)
	}
	return strings.Join(docs, "\n---\n")
}

// adaptDaemonSet moves the DaemonSet's host paths under the test
// cluster's folders and gives it d's name, ports, instance and uids.
func adaptDaemonSet(t *testing.T, doc string, d k8sDaemon) string {
	t.Helper()
	state, rn := "/var/lib/sandboxd-k8s/"+d.instance, "/run/sandboxd-k8s/"+d.instance
	r := strings.NewReplacer(
		"/var/lib/sandboxd", state,
		"/run/sandboxd", rn,
		"path: /run/containerd/containerd.sock", "path: "+k8sContainerd,
		"name: sandboxd\n  namespace", "name: "+d.name+"\n  namespace",
		"app.kubernetes.io/instance: sandboxd", "app.kubernetes.io/instance: "+d.name,
		":7070", fmt.Sprintf(":%d", d.grpcPort),
		"containerPort: 7070", fmt.Sprintf("containerPort: %d", d.grpcPort),
		":7071", fmt.Sprintf(":%d", d.grpcPort+1),
		"containerPort: 7071", fmt.Sprintf("containerPort: %d", d.grpcPort+1),
		":9464", fmt.Sprintf(":%d", d.grpcPort+2),
		"containerPort: 9464", fmt.Sprintf("containerPort: %d", d.grpcPort+2),
	)
	doc = r.Replace(doc)
	i := strings.Index(doc, "- --node=$(POD_NAME)")
	if i < 0 {
		t.Fatalf("the DaemonSet has no --node argument:\n%s", doc)
	}
	indent := doc[strings.LastIndex(doc[:i], "\n")+1 : i]
	extra := fmt.Sprintf("- --instance=%s\n%s- --uid-range=%s\n%s", d.instance, indent, d.uids, indent)
	return doc[:i] + extra + doc[i:]
}

// k8sApply applies d's manifests and waits for its pods to be ready.
func k8sApply(t *testing.T, d k8sDaemon) {
	t.Helper()
	kubectl(t, render(t, d), "apply", "-f", "-")
	rolledOut(t, d)
}

// rolledOut waits for d's rollout, and shows its pods when it fails.
func rolledOut(t *testing.T, d k8sDaemon) {
	t.Helper()
	if out, err := kubectlErr("", "rollout", "status", "daemonset/"+d.name, "--timeout", "180s"); err != nil {
		pods, _ := kubectlErr("", "describe", "pods", "-l", "app.kubernetes.io/instance="+d.name)
		logs, _ := kubectlErr("", "logs", "-l", "app.kubernetes.io/instance="+d.name, "--tail", "50")
		t.Fatalf("rollout of %s: %v\n%s\n%s\n%s", d.name, err, out, pods, logs)
	}
}

// endpoints is the Service's ready gRPC addresses by pod, read as the
// daemons read them (there is no cluster DNS here), as the cluster's admin.
func endpoints(t *testing.T) map[string]string {
	t.Helper()
	pki := filepath.Join(filepath.Dir(kubeconfig), "pki")
	cert, err := tls.LoadX509KeyPair(filepath.Join(pki, "admin.crt"), filepath.Join(pki, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(pki, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	k := &cluster.Kubernetes{
		API:       "https://" + k8sNodeIP + ":6443",
		Client:    &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: roots}}},
		Namespace: "sandboxd", Service: "sandboxd", Port: "grpc",
	}
	peers, err := k.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	addrs := map[string]string{}
	for _, p := range peers {
		if p.Ready {
			addrs[p.Name] = p.Addr
		}
	}
	return addrs
}

// podOf is the name of d's one pod.
func podOf(t *testing.T, d k8sDaemon) string {
	t.Helper()
	return strings.TrimSpace(kubectl(t, "", "get", "pods", "-l", "app.kubernetes.io/instance="+d.name,
		"--field-selector", "status.phase=Running", "-o", "jsonpath={.items[0].metadata.name}"))
}

// addrOf waits until the Service lists d's ready pod and returns its
// gRPC address.
func addrOf(t *testing.T, d k8sDaemon) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		pod := podOf(t, d)
		if a, ok := endpoints(t)[pod]; ok {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Service does not list %s's pod %s: %v", d.name, pod, endpoints(t))
		}
		time.Sleep(time.Second)
	}
}

type tokenCreds string

func (c tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(c)}, nil
}

func (tokenCreds) RequireTransportSecurity() bool { return false }

// rawClient waits for the daemon at addr rather than failing while it is
// away (as between a rolling update's old and new pod), reconnecting
// within a second.
func rawClient(t *testing.T, addr string) pb.SandboxServiceClient {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(tokenCreds(k8sToken)),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, MaxDelay: time.Second}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewSandboxServiceClient(conn)
}

// k8sRun is what a run's stream said.
type k8sRun struct {
	started *pb.Started
	result  *pb.Result
	stdout  string
}

func runPython(ctx context.Context, c pb.SandboxServiceClient, code string, opts *pb.RunOptions) (k8sRun, error) {
	var r k8sRun
	stream, err := c.RunCode(ctx, &pb.RunCodeRequest{Language: "python", Code: code, Options: opts})
	if err != nil {
		return r, err
	}
	var out strings.Builder
	for {
		ev, err := stream.Recv()
		r.stdout = out.String()
		if err != nil {
			return r, err
		}
		if s := ev.GetStarted(); s != nil {
			r.started = s
		}
		out.Write(ev.GetStdout())
		if res := ev.GetResult(); res != nil {
			r.result, r.stdout = res, out.String()
			return r, nil
		}
	}
}

func (r k8sRun) ok(want string) bool {
	return r.result.GetStatus() == pb.Status_OK && r.stdout == want
}

// containersOf lists the containers of a daemon instance on the test
// cluster's containerd.
func containersOf(t *testing.T, instance string) []string {
	t.Helper()
	out, err := exec.Command("ctr", "--address", k8sContainerd, "-n", "sandboxd", "containers", "ls", "-q",
		"labels."+task.LabelInstance+"=="+instance).CombinedOutput()
	if err != nil {
		t.Fatalf("ctr containers ls: %v\n%s", err, out)
	}
	return strings.Fields(string(out))
}

func TestKubernetes(t *testing.T) {
	if kubectlPath == "" || kubeconfig == "" {
		t.Fatal("needs the cluster of scripts/k8s-up.sh: run make k8s-e2e")
	}
	t.Run("the base and its overlays", checkOverlays)
	a := k8sDaemon{name: "sandboxd", instance: "k8s-a", grpcPort: 7070, uids: "1500000000:65536"}
	b := k8sDaemon{name: "sandboxd-b", instance: "k8s-b", grpcPort: 7170, uids: "1500065536:65536"}
	t.Cleanup(func() {
		if t.Failed() {
			for _, d := range []k8sDaemon{a, b} {
				logs, _ := kubectlErr("", "logs", "-l", "app.kubernetes.io/instance="+d.name, "--tail", "40")
				t.Logf("%s's log:\n%s", d.name, logs)
			}
		}
		// b's DaemonSet, then everything of a's rendering (the namespace,
		// the Service and the rest that both share). Foreground: the
		// DaemonSet goes only once its pods have, so that --wait waits
		// for the daemons to end.
		for _, del := range []struct {
			d          k8sDaemon
			stdin, arg string
		}{{b, "", "daemonset/" + b.name}, {a, render(t, a), "-f=-"}} {
			if out, err := kubectlErr(del.stdin, "delete", "--ignore-not-found", "--cascade=foreground", "--wait", "--timeout", "120s", del.arg); err != nil {
				t.Errorf("delete %s: %v\n%s", del.d.name, err, out)
			}
			if left := containersOf(t, del.d.instance); len(left) > 0 {
				t.Errorf("%s's daemon left containers behind: %v", del.d.name, left)
			}
		}
	})
	k8sApply(t, a)
	addrA := addrOf(t, a)
	c := rawClient(t, addrA)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	t.Run("runs on runc and runsc through the Service", func(t *testing.T) {
		for _, rt := range []string{"runc", "runsc"} {
			r, err := runPython(ctx, c, "import platform; print(6 * 7, platform.system())", &pb.RunOptions{Runtime: rt})
			if err != nil {
				t.Fatalf("%s: %v", rt, err)
			}
			if !r.ok("42 Linux\n") || r.started.GetRuntime() != rt {
				t.Fatalf("%s: status %v (%s), runtime %q, output %q", rt, r.result.GetStatus(), r.result.GetMessage(), r.started.GetRuntime(), r.stdout)
			}
			// The pod names runc to the node's containerd by the node's
			// path, and reports the version of the runc that ran.
			if rt == "runc" {
				out, err := exec.Command("/usr/local/sbin/runc", "--version").Output()
				node, _, _ := strings.Cut(strings.TrimPrefix(string(out), "runc version "), "\n")
				if err != nil || r.started.GetRuntimeVersion() != node {
					t.Errorf("the run says runc %q; the node's /usr/local/sbin/runc is %q (%v)", r.started.GetRuntimeVersion(), node, err)
				}
			}
		}
	})

	t.Run("metrics, probes and the audit log", func(t *testing.T) {
		host, port, _ := net.SplitHostPort(addrA)
		n, _ := strconv.Atoi(port)
		base := fmt.Sprintf("http://%s:%d", host, n+2)
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, want := range []string{`sandboxd_runs_total{language="python",runtime="runsc"`, "sandboxd_build_info{"} {
			if !strings.Contains(string(body), want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
		for _, path := range []string{"/readyz", "/healthz"} {
			if resp, err := http.Get(base + path); err != nil || resp.StatusCode != http.StatusOK {
				t.Errorf("GET %s: %v %v", path, resp, err)
			}
		}
		// On the node, beside the state: a run's end, in a sound chain.
		rep, err := audit.Verify("/var/lib/sandboxd-k8s/" + a.instance + "/audit/audit.log")
		if err != nil || rep.Lines < 2 {
			t.Fatalf("the audit log: %+v, %v", rep, err)
		}
	})

	t.Run("a session keeps its kernel", func(t *testing.T) {
		s, err := c.CreateSession(ctx, &pb.CreateSessionRequest{Language: "python"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.DeleteSession(ctx, &pb.DeleteSessionRequest{SessionId: s.GetSessionId()})
		if _, err := runPython(ctx, c, "x = 41", &pb.RunOptions{SessionId: s.GetSessionId()}); err != nil {
			t.Fatal(err)
		}
		if r, err := runPython(ctx, c, "print(x + 1)", &pb.RunOptions{SessionId: s.GetSessionId()}); err != nil || !r.ok("42\n") {
			t.Fatalf("the second call saw %q, %v", r.stdout, err)
		}
	})

	t.Run("two daemons find each other", func(t *testing.T) {
		k8sApply(t, b)
		addrB := addrOf(t, b)
		podB := podOf(t, b)
		cb := rawClient(t, addrB)
		started, err := detached(ctx, cb, "import time; time.sleep(1); print('on b')")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(started, cluster.Tag(podB)) {
			t.Fatalf("run %s does not name pod %s (tag %s)", started, podB, cluster.Tag(podB))
		}
		// A learns of B from the EndpointSlices within its read interval.
		var info *errdetails.ErrorInfo
		deadline := time.Now().Add(30 * time.Second)
		for info == nil {
			_, err := c.GetRun(ctx, &pb.GetRunRequest{RunId: started})
			for _, d := range status.Convert(err).Details() {
				if e, ok := d.(*errdetails.ErrorInfo); ok && e.GetReason() == "ELSEWHERE" {
					info = e
				}
			}
			if info == nil && time.Now().After(deadline) {
				t.Fatalf("daemon a does not send run %s to b: %v", started, err)
			}
			time.Sleep(time.Second)
		}
		if info.GetMetadata()["address"] != addrB || info.GetMetadata()["daemon"] != podB {
			t.Fatalf("ELSEWHERE names %v, want %s at %s", info.GetMetadata(), podB, addrB)
		}
		// The Go client follows it.
		gc, err := client.Dial(client.DialOptions{Addr: addrA, Token: k8sToken})
		if err != nil {
			t.Fatal(err)
		}
		defer gc.Close()
		rn, err := gc.Wait(ctx, started)
		if err != nil || rn.Result.Status != run.StatusOK {
			t.Fatalf("wait for b's run through a: %+v, %v", rn, err)
		}
		// Each idempotency key has one owner among the ready daemons: a
		// keyed run lands there whichever daemon is called, and a retry
		// through the other finds it.
		gb, err := client.Dial(client.DialOptions{Addr: addrB, Token: k8sToken})
		if err != nil {
			t.Fatal(err)
		}
		defer gb.Close()
		// Both daemons must read b as ready first: until then they may
		// disagree on the owner (docs/kubernetes.md), one read interval.
		time.Sleep(peersEvery + time.Second)
		var view cluster.Peers
		view.Set(podOf(t, a), []cluster.Peer{{Name: podOf(t, a), Ready: true}, {Name: podB, Ready: true}})
		for i := range 4 {
			key := fmt.Sprintf("k8s-e2e-%d", i)
			owner, _, _ := view.Owner("e2e\x00" + key)
			req := run.Request{Program: &run.Program{Language: "python", Code: "print('once')"}, Options: run.Options{IdempotencyKey: key}}
			first, err := gc.Run(ctx, req, dropOutput{})
			if err != nil {
				t.Fatalf("keyed run %s through a: %v", key, err)
			}
			retry, err := gb.Run(ctx, req, dropOutput{})
			if err != nil || retry.RunID != first.RunID || !strings.HasPrefix(first.RunID, cluster.Tag(owner.Name)) {
				t.Fatalf("key %s: run %s through a, %s through b (%v); its owner is %s", key, first.RunID, retry.RunID, err, owner.Name)
			}
		}
	})

	t.Run("a rolling update loses no run", func(t *testing.T) {
		var ok, refused atomic.Int64
		var mu sync.Mutex
		var failures []string
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					want := fmt.Sprintf("worker %d run %d\n", w, i)
					// Some runs outlast the moment the old daemon is told
					// to stop: they must end, not be cut.
					code := fmt.Sprintf("import time; time.sleep(%g); print(%q, end='')", float64(i%3)*0.5, want)
					r, err := runPython(ctx, c, code, nil)
					switch {
					case err == nil && r.ok(want):
						ok.Add(1)
					case err != nil && retryable(err):
						refused.Add(1)
						time.Sleep(200 * time.Millisecond)
					default:
						mu.Lock()
						failures = append(failures, fmt.Sprintf("run %q: status %v, output %q, err %v", want, r.result.GetStatus(), r.stdout, err))
						mu.Unlock()
					}
				}
			}()
		}
		// A run that is still going when the old daemon gets SIGTERM ends
		// within the drain, with all its output.
		long := make(chan error, 1)
		go func() {
			r, err := runPython(ctx, c, "import time; time.sleep(5); print('drained')", nil)
			if err == nil && !r.ok("drained\n") {
				err = fmt.Errorf("status %v, output %q", r.result.GetStatus(), r.stdout)
			}
			long <- err
		}()
		time.Sleep(2 * time.Second)
		before := ok.Load()
		old := podOf(t, a)
		kubectl(t, "", "rollout", "restart", "daemonset/"+a.name)
		rolledOut(t, a)
		if now := podOf(t, a); now == old {
			t.Fatalf("the pod %s was not replaced", old)
		}
		during := ok.Load()
		// The new daemon must take runs too: some of the loop's, on a node
		// that is also filling the new daemon's pools, may take a while.
		for deadline := time.Now().Add(45 * time.Second); ok.Load() < during+4 && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
		}
		close(stop)
		wg.Wait()
		after := ok.Load()
		t.Logf("runs: %d before the update, %d by its end, %d in all; %d refused with RetryInfo and retried", before, during, after, refused.Load())
		if err := <-long; err != nil {
			t.Errorf("the run under way at SIGTERM: %v", err)
		}
		if len(failures) > 0 {
			t.Fatalf("%d runs failed during the update:\n%s", len(failures), strings.Join(failures, "\n"))
		}
		if before == 0 || after == during {
			t.Fatalf("runs before the update %d, after it %d: the loop did not run on both daemons", before, after-during)
		}
	})

	t.Run("a deleted pod comes back and reaps", func(t *testing.T) {
		c := rawClient(t, addrA)
		s, err := c.CreateSession(ctx, &pb.CreateSessionRequest{Language: "python"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := detached(ctx, c, "import time; time.sleep(600)"); err != nil {
			t.Fatal(err)
		}
		left := containersOf(t, a.instance)
		if len(left) < 2 {
			t.Fatalf("a session and a run hold %d containers, want 2 or more: %v", len(left), left)
		}
		old := podOf(t, a)
		// A second's grace: the daemon is killed before its tasks end, and
		// leaves them on the node.
		kubectl(t, "", "delete", "pod", old, "--grace-period", "1", "--wait")
		rolledOut(t, a)
		if now := podOf(t, a); now == old {
			t.Fatalf("the pod %s did not come back as a new one", old)
		}
		stillThere := map[string]bool{}
		for _, id := range containersOf(t, a.instance) {
			stillThere[id] = true
		}
		for _, id := range left {
			if stillThere[id] {
				t.Errorf("the new daemon did not reap container %s", id)
			}
		}
		_, err = c.GetSession(ctx, &pb.GetSessionRequest{SessionId: s.GetSessionId()})
		if status.Code(err) != codes.NotFound && status.Code(err) != codes.OK {
			t.Errorf("the old pod's session: %v", err)
		}
		r, err := runPython(ctx, c, "print('back')", nil)
		if err != nil || !r.ok("back\n") {
			t.Fatalf("the new daemon: %v %q %v", r.result.GetStatus(), r.stdout, err)
		}
	})
}

// dropOutput is an Observer that keeps nothing.
type dropOutput struct{}

func (dropOutput) Started(run.Started) error       { return nil }
func (dropOutput) Output(run.Stream, []byte) error { return nil }

// detached starts code and returns its run's id once it has started.
func detached(ctx context.Context, c pb.SandboxServiceClient, code string) (string, error) {
	stream, err := c.RunCode(ctx, &pb.RunCodeRequest{Language: "python", Code: code, Options: &pb.RunOptions{Detach: true}})
	if err != nil {
		return "", err
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			return "", err
		}
		if s := ev.GetStarted(); s != nil {
			return s.GetRunId(), nil
		}
	}
}

// retryable says whether err is a refusal a client retries: the daemon
// says when, with a RetryInfo.
func retryable(err error) bool {
	st, ok := status.FromError(err)
	if !ok || (st.Code() != codes.Unavailable && st.Code() != codes.ResourceExhausted) {
		return false
	}
	for _, d := range st.Details() {
		if _, ok := d.(*errdetails.RetryInfo); ok {
			return true
		}
	}
	return false
}

// checkOverlays renders deploy/kubernetes and its overlays as an
// operator would apply them: the base serves TLS from the Secret
// sandboxd-tls, deploy/kubernetes-dev without TLS, and
// deploy/kubernetes-cert-manager adds the Certificate that makes the
// Secret; each DaemonSet bounds the daemon's memory.
func checkOverlays(t *testing.T) {
	for _, tc := range []struct {
		dir       string
		want, not []string
	}{
		{"../../deploy/kubernetes", []string{"--tls-cert /etc/sandboxd/tls/tls.crt", "secretName: sandboxd-tls"}, []string{"--insecure-listen", "kind: Certificate"}},
		{"../../deploy/kubernetes-dev", []string{"--insecure-listen"}, []string{"--tls-cert", "kind: Certificate"}},
		{"../../deploy/kubernetes-cert-manager", []string{"--tls-cert /etc/sandboxd/tls/tls.crt", "kind: Certificate", "secretName: sandboxd-tls", "sandboxd.sandboxd.svc"}, []string{"--insecure-listen"}},
	} {
		out := kubectl(t, "", "kustomize", tc.dir)
		for _, w := range append(tc.want, "memory: 2Gi") {
			if !strings.Contains(out, w) {
				t.Errorf("%s renders no %q", tc.dir, w)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(out, n) {
				t.Errorf("%s renders %q", tc.dir, n)
			}
		}
	}
}
