#!/bin/sh
# Prepares a Debian 12 host for sandboxd, idempotently: installs the Docker
# engine, runc, debootstrap and the tools the tests use from Debian's
# packages when missing, starts dockerd when it does not answer, and builds
# the sandbox images when missing or stale. Run as root.
set -eu

repo=$(cd "$(dirname "$0")/.." && pwd)
log() { printf 'setup: %s\n' "$*" >&2; }

[ "$(id -u)" = 0 ] || { log "run as root: sandboxd mounts a tmpfs per task and drives the Docker engine"; exit 1; }

# Debian package -> a command it provides. Node.js runs the MCP end-to-end
# test's client (the official TypeScript SDK).
need=""
for pair in docker.io:dockerd runc:runc containerd:containerd debootstrap:debootstrap \
	protobuf-compiler:protoc iproute2:ip nodejs:node npm:npm; do
	pkg=${pair%%:*} cmd=${pair#*:}
	command -v "$cmd" >/dev/null 2>&1 || need="$need $pkg"
done
if [ -n "$need" ]; then
	log "installing$need"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	# shellcheck disable=SC2086
	apt-get install -y -qq $need >/dev/null
fi

# dockerd: started directly when no init system runs it.
if ! docker info >/dev/null 2>&1; then
	log "starting dockerd"
	mkdir -p /var/log
	nohup dockerd >/var/log/dockerd.log 2>&1 &
	i=0
	until docker info >/dev/null 2>&1; do
		i=$((i + 1))
		[ $i -lt 60 ] || { log "dockerd did not answer within 30 s; see /var/log/dockerd.log"; exit 1; }
		sleep 0.5
	done
fi
log "docker $(docker version -f '{{.Server.Version}}') is up"

"$repo/scripts/install-runsc.sh"

# containerd for --backend containerd: a standalone one, apart from the
# containerd that dockerd runs for itself.
if ! ctr --address /run/containerd/containerd.sock version >/dev/null 2>&1; then
	log "starting containerd"
	nohup containerd --config "$repo/scripts/containerd.toml" >/var/log/containerd.log 2>&1 &
	i=0
	until ctr --address /run/containerd/containerd.sock version >/dev/null 2>&1; do
		i=$((i + 1))
		[ $i -lt 60 ] || { log "containerd did not answer within 30 s; see /var/log/containerd.log"; exit 1; }
		sleep 0.5
	done
fi
log "containerd $(ctr --address /run/containerd/containerd.sock version 2>/dev/null | awk '/Server/{s=1} s && /Version/{print $2; exit}') is up"

"$repo/scripts/build-images.sh"
