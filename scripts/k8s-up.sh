#!/usr/bin/env bash
# Brings up a single-node Kubernetes on this machine, offline, for
# `make k8s-e2e`: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler and a kubelet from scripts/k8s-build.sh's cache, on a
# containerd instance of their own (not the one the other tests drive),
# with a pause image built here. Everything listens on loopback or on
# node_ip, the address of a bridge with no ports that this script creates.
# What is left of an earlier cluster (a run killed with -9) is torn down
# first.
#
# Prints the kubeconfig's path; scripts/k8s-down.sh undoes all of it.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
version=${K8S_VERSION:-v1.34.4}
bin=${K8S_CACHE:-/var/cache/sandboxd/kubernetes}/$version/bin
top=/var/lib/sandboxd-k8s
run=/run/sandboxd-k8s
node_ip=198.51.100.10 # TEST-NET-2: no network routes it; only this host has it
node=sandboxd-node
log() { echo "k8s-up: $*" >&2; }

"$repo/scripts/k8s-down.sh"
"$repo/scripts/k8s-build.sh" >&2
if ! command -v openssl >/dev/null || [[ ! -x /usr/lib/cni/loopback ]]; then
	log "installing openssl containernetworking-plugins"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq openssl containernetworking-plugins >/dev/null
fi

mkdir -p "$top"/{pki,etcd,logs,kubelet,containerd,cni} "$run"
# Bidirectional mount propagation (the daemon's state folder) needs the
# host path on a shared mount. systemd makes / shared on a usual node; this
# machine's / is not, so the cluster's folders are shared mounts of their own.
for d in "$top" "$run"; do
	mount --bind "$d" "$d"
	mount --make-rshared "$d"
done
# The kubelet sets these sysctls for itself: k8s-down.sh puts them back.
for s in vm.overcommit_memory kernel.panic kernel.panic_on_oops; do
	echo "$s=$(sysctl -n "$s")"
done >"$top/sysctl.saved"
[[ -e /var/lib/kubelet ]] || touch "$top/no-var-lib-kubelet"

ip link add sbxk8s0 type bridge
ip addr add "$node_ip/32" dev sbxk8s0
ip link set sbxk8s0 up

# Certificates: one CA; the API server's serving certificate; one client
# certificate per component (the node's in group system:nodes).
pki=$top/pki
cd "$pki"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=sandboxd-k8s-ca -keyout ca.key -out ca.crt 2>/dev/null
cert() { # name subject [subjectAltName]
	openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$1.key" -out "$1.csr" 2>/dev/null
	local ext=/dev/null
	if [[ -n ${3:-} ]]; then
		ext=$1.ext
		echo "subjectAltName=$3" >"$ext"
	fi
	openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile "$ext" -out "$1.crt" 2>/dev/null
}
cert apiserver /CN=kube-apiserver "IP:$node_ip,IP:127.0.0.1,IP:198.18.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:localhost"
cert admin "/O=system:masters/CN=admin"
cert controller-manager /CN=system:kube-controller-manager
cert scheduler /CN=system:kube-scheduler
cert kubelet "/O=system:nodes/CN=system:node:$node"
openssl genrsa -out sa.key 2048 2>/dev/null
openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null

api=https://$node_ip:6443
kubeconfig() { # name
	cat >"$top/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: "$api", certificate-authority: $pki/ca.crt}}]
users: [{name: $1, user: {client-certificate: $pki/$1.crt, client-key: $pki/$1.key}}]
contexts: [{name: local, context: {cluster: local, user: $1, namespace: default}}]
current-context: local
EOF
}
for c in admin controller-manager scheduler kubelet; do kubeconfig "$c"; done

start() { # name command...
	local name=$1
	shift
	setsid "$@" >"$top/logs/$name.log" 2>&1 </dev/null &
	echo $! >"$run/$name.pid"
}
wait_for() { # what command...
	local what=$1
	shift
	for _ in $(seq 1 120); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.5
	done
	log "$what did not come up; its log:"
	tail -n 30 "$top/logs/$what.log" >&2 || true
	exit 1
}

# containerd with the CRI plugin. root in this VM lacks CAP_SYS_RESOURCE,
# so it must not try to lower a pod's oom_score_adj below its own.
cat >"$top/containerd.toml" <<EOF
version = 2
root = "$top/containerd"
state = "$run/containerd"
[grpc]
  address = "$run/containerd.sock"
[ttrpc]
  address = "$run/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "sandboxd.test/pause:1"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$top/cni"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
EOF
# Pods run on the host's network: the CRI plugin only needs a network
# configuration to call itself ready.
cat >"$top/cni/10-loopback.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "loopback", "plugins": [{"type": "loopback"}]}
EOF
start containerd containerd --config "$top/containerd.toml"
wait_for containerd ctr --address "$run/containerd.sock" version

# The pause image: a static binary that sleeps until it is told to stop.
work=$(mktemp -d /tmp/k8s-pause.XXXXXX)
trap 'rm -rf "$work"' EXIT
cat >"$work/main.go" <<'EOF'
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
	<-c
}
EOF
(cd "$work" && CGO_ENABLED=0 GOFLAGS= GOWORK=off go build -trimpath -ldflags "-s -w" -o pause main.go)
printf 'FROM scratch\nCOPY pause /pause\nENTRYPOINT ["/pause"]\n' >"$work/Dockerfile"
docker build -q -t sandboxd.test/pause:1 "$work" >/dev/null 2>&1
docker save sandboxd.test/pause:1 | ctr --address "$run/containerd.sock" -n k8s.io images import - >&2

start etcd "$bin/etcd" --name node --data-dir "$top/etcd" \
	--listen-client-urls http://127.0.0.1:12379 --advertise-client-urls http://127.0.0.1:12379 \
	--listen-peer-urls http://127.0.0.1:12380 --initial-advertise-peer-urls http://127.0.0.1:12380 \
	--initial-cluster node=http://127.0.0.1:12380 --listen-metrics-urls http://127.0.0.1:12381
wait_for etcd curl -sf http://127.0.0.1:12379/health

start kube-apiserver "$bin/kube-apiserver" --etcd-servers http://127.0.0.1:12379 \
	--bind-address "$node_ip" --advertise-address "$node_ip" --secure-port 6443 \
	--service-cluster-ip-range 198.18.0.0/24 \
	--tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
	--client-ca-file "$pki/ca.crt" --authorization-mode Node,RBAC --allow-privileged \
	--service-account-issuer https://kubernetes.default.svc --service-account-key-file "$pki/sa.pub" \
	--service-account-signing-key-file "$pki/sa.key" \
	--kubelet-client-certificate "$pki/admin.crt" --kubelet-client-key "$pki/admin.key" \
	--kubelet-preferred-address-types InternalIP
kubectl() { "$bin/kubectl" --kubeconfig "$top/admin.kubeconfig" "$@"; }
wait_for kube-apiserver kubectl get --raw /readyz

start kube-controller-manager "$bin/kube-controller-manager" --kubeconfig "$top/controller-manager.kubeconfig" \
	--bind-address 127.0.0.1 --secure-port 10257 --use-service-account-credentials \
	--service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
	--cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
	--controllers '*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller'
start kube-scheduler "$bin/kube-scheduler" --kubeconfig "$top/scheduler.kubeconfig" \
	--bind-address 127.0.0.1 --secure-port 10259

cat >"$top/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $node_ip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$run/containerd.sock
failSwapOn: false
failCgroupV1: false
# The images are imported, not pulled: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%}
resolvConf: /etc/resolv.conf
EOF
start kubelet "$bin/kubelet" --config "$top/kubelet.yaml" --kubeconfig "$top/kubelet.kubeconfig" \
	--root-dir "$top/kubelet" --cert-dir "$top/kubelet/pki" --hostname-override "$node" --node-ip "$node_ip"
wait_for kubelet kubectl wait --for condition=Ready "node/$node" --timeout 1s
# Pods mount the cluster's CA from this ConfigMap, which the controller
# manager publishes.
wait_for kube-controller-manager kubectl get -n default configmap kube-root-ca.crt
log "cluster $version is up on $node_ip; kubeconfig $top/admin.kubeconfig"
echo "$top/admin.kubeconfig"
