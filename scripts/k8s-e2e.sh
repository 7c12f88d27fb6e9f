#!/usr/bin/env bash
# make k8s-e2e: brings up the single-node cluster of scripts/k8s-up.sh,
# imports the daemon's image and the sandbox images into its containerd,
# runs TestKubernetes (deploy/kubernetes deployed, runs, a session, two
# daemons finding each other, a rolling update under load, a deleted pod
# reaped), tears it all down and checks that nothing of it is left.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
version=${K8S_VERSION:-v1.34.4}
bin=${K8S_CACHE:-/var/cache/sandboxd/kubernetes}/$version/bin
sock=/run/sandboxd-k8s/containerd.sock
log() { echo "k8s-e2e: $*" >&2; }

sysctls() { sysctl vm.overcommit_memory kernel.panic kernel.panic_on_oops; }
# What a cluster killed before left is undone first, so that this is the
# machine's own state.
"$repo/scripts/k8s-down.sh"
before=$(sysctls)
leftovers() {
	local bad=0
	if grep -E ' (/var/lib/sandboxd-k8s|/run/sandboxd-k8s)' /proc/self/mountinfo; then bad=1; fi
	if pgrep -af 'sandboxd-k8s'; then bad=1; fi
	if ip link show sbxk8s0 >/dev/null 2>&1; then echo "interface sbxk8s0"; bad=1; fi
	if ls -d /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/*/sandboxd/k8s-* 2>/dev/null; then bad=1; fi
	if [[ -e /var/lib/sandboxd-k8s || -e /run/sandboxd-k8s ]]; then echo "folders of the cluster"; bad=1; fi
	if iptables-save | grep -q 'KUBE-'; then echo "iptables chains KUBE-*"; bad=1; fi
	if [[ $(sysctls) != "$before" ]]; then echo "sysctls changed: $(sysctls)"; bad=1; fi
	return $bad
}
out=
teardown() {
	local rc=$?
	rm -f "$out"
	"$repo/scripts/k8s-down.sh"
	if ! leftovers; then
		log "teardown left the above behind"
		rc=1
	fi
	exit $rc
}
trap teardown EXIT

start=$(date +%s)
kubeconfig=$("$repo/scripts/k8s-up.sh")
log "cluster up in $(($(date +%s) - start)) s"
docker save sandboxd/daemon:latest | ctr --address "$sock" -n k8s.io images import - >&2
images=()
for dir in "$repo"/images/*/; do
	[[ -f $dir/recipe ]] && images+=("sandboxd/$(basename "$dir"):latest")
done
docker save "${images[@]}" | ctr --address "$sock" -n sandboxd images import - >&2
log "images imported at $(($(date +%s) - start)) s"
cd "$repo"
out=$(mktemp /tmp/sandboxd-k8s-e2e.XXXXXX)
rc=0
KUBECTL=$bin/kubectl KUBECONFIG=$kubeconfig go test -tags k8s -count=1 -timeout 20m -v -run '^TestKubernetes$' ./cmd/sandboxd/ 2>&1 | tee "$out" || rc=$?
log "tests done at $(($(date +%s) - start)) s"
if ((rc != 0)); then
	# The daemons' logs, printed when a test fails, bury its own words:
	# say them again, last, where a reader of the output's tail looks.
	log "what the failing tests said:"
	awk '/^ *k8s_e2e_test\.go:[0-9]+: / { keep = $0 !~ /.s log:$/; n = 0; if (keep) print; next }
	     keep && /^        / && n++ < 10 { print }' "$out" >&2
	exit "$rc"
fi
