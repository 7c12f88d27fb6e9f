#!/usr/bin/env bash
# Builds a Kubernetes control plane and node (kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet, kubectl) and etcd from
# the Go module proxy, offline from anything else, into a cache by version:
# K8S_CACHE/VERSION/bin. A second run with the same version does nothing.
#
# k8s.io/kubernetes is published without its staging folder, so its go.mod's
# "./staging/src/k8s.io/X" replaces are pointed at the published k8s.io/X
# v0.MINOR.PATCH; etcd is the server module at the version Kubernetes pins.
set -euo pipefail

version=${K8S_VERSION:-v1.34.4}
cache=${K8S_CACHE:-/var/cache/sandboxd/kubernetes}
out=$cache/$version/bin
bins=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl etcd)

have_all() {
	for b in "${bins[@]}"; do [[ -x $out/$b ]] || return 1; done
}
if have_all; then
	echo "k8s-build: $version is cached in $out"
	exit 0
fi

log() { echo "k8s-build: $*"; }
work=$(mktemp -d /tmp/k8s-build.XXXXXX)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
# The published staging modules are not in Kubernetes' go.sum (it replaced
# them with folders): -mod=mod lets go.sum take them, checked against the
# checksum database as any module.
export GOFLAGS=-mod=mod GOWORK=off GOTOOLCHAIN=local

src=$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
[[ -d $src ]] || { echo "k8s-build: k8s.io/kubernetes@$version is not on the module proxy" >&2; exit 1; }
cp -r "$src" "$work/kubernetes"
chmod -R u+w "$work/kubernetes"
cd "$work/kubernetes"
staging=v0.${version#v1.}
sed -i -E "s#^([[:space:]]*)(k8s\.io/[a-z0-9-]+) => \./staging/src/k8s\.io/[a-z0-9-]+\$#\1\2 => \2 $staging#" go.mod
if grep -q '=> ./staging' go.mod; then
	echo "k8s-build: go.mod still points into ./staging" >&2
	exit 1
fi

mkdir -p "$out.tmp"
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1"
ldflags+=" -X k8s.io/component-base/version.gitMinor=$(cut -d. -f2 <<<"$version") -X k8s.io/component-base/version.gitTreeState=clean"
log "building ${bins[*]::5} $version (a few minutes on 2 cores with a warm module cache; half an hour from a cold one)"
start=$SECONDS
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out.tmp/" 2> >(grep -v '^go: downloading' >&2) \
	./cmd/kube-apiserver ./cmd/kube-controller-manager ./cmd/kube-scheduler ./cmd/kubelet ./cmd/kubectl

etcd=$(sed -n 's#^[[:space:]]*go.etcd.io/etcd/server/v3 \(v[^ ]*\).*#\1#p' go.mod | head -1)
log "building etcd $etcd"
mkdir -p "$work/etcd"
cd "$work/etcd"
cat > main.go <<'GO'
// Command etcd is etcd's server, as its etcdmain package runs it.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
go mod init sandboxd.local/etcd >/dev/null 2>&1
go get "go.etcd.io/etcd/server/v3@$etcd" >/dev/null 2>&1
go mod tidy >/dev/null 2>&1
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out.tmp/etcd" .

rm -rf "$out"
mv "$out.tmp" "$out"
log "built $version and etcd $etcd in $((SECONDS - start)) s: $out"
