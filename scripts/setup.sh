#!/bin/sh
# Prepares a Debian 12 host for sandboxd, idempotently: installs runc,
# crun, gVisor's runsc, debootstrap, the Docker engine and containerd, and
# the tools the tests use, from Debian's packages and the Go module proxy
# when missing, starts dockerd and containerd when they do not answer, and
# builds the sandbox images when missing or stale. With --no-engines (make
# run: the default backend runs the OCI runtimes itself) it installs and
# starts neither engine, the images go into the image store alone, and
# the recipes of images/extra are not built.
# Run as root.
set -eu

engines=1
[ "${1:-}" != --no-engines ] || engines=0

repo=$(cd "$(dirname "$0")/.." && pwd)
started=$(date +%s)
# Each line says how long the set-up has run: where the minutes go.
elapsed() { t=$(($(date +%s) - started)); printf '%d:%02d' $((t / 60)) $((t % 60)); }
log() { printf 'setup: [%s] %s\n' "$(elapsed)" "$*" >&2; }
# What the tools print at length (Go's downloads, apt's) goes here, and its
# end to the terminal when a step fails.
noise=/var/log/sandboxd/setup.log
export DEBIAN_FRONTEND=noninteractive SANDBOXD_SETUP_LOG="$noise"

[ "$(id -u)" = 0 ] || { log "run as root: sandboxd mounts a tmpfs per task and drives the Docker engine"; exit 1; }
mkdir -p "$(dirname "$noise")" && chmod 0700 "$(dirname "$noise")"
: >"$noise"
# quietly CMD...: runs CMD with its output in $noise, shown when it fails.
quietly() {
	if ! "$@" >>"$noise" 2>&1; then
		log "failed: $*; the end of $noise:"
		tail -n 30 "$noise" >&2
		exit 1
	fi
}

# Debian package -> a command it provides. Node.js runs the MCP end-to-end
# test's client (the official TypeScript SDK); g++ compiles the judge
# workload's C++ bare, beside the judged (make bench); curl fetches a
# session's server through the inbound proxy in docs/processes.md.
need=""
for pair in docker.io:dockerd runc:runc crun:crun containerd:containerd debootstrap:debootstrap \
	protobuf-compiler:protoc iproute2:ip nodejs:node npm:npm g++:g++ curl:curl; do
	pkg=${pair%%:*} cmd=${pair#*:}
	case "$engines:$pkg" in 0:docker.io | 0:containerd) continue ;; esac
	command -v "$cmd" >/dev/null 2>&1 || need="$need $pkg"
done
# The Python client is built and tested with Debian's packages, on Debian's
# /usr/bin/python3 (no other registry is reachable); the pinned runc is
# built with libseccomp's headers.
for pkg in protobuf-compiler-grpc python3-grpcio python3-protobuf python3-zstandard python3-build \
	python3-hatchling python3-pytest python3-pyflakes python3-venv libseccomp-dev pkg-config; do
	dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q '^install ok installed$' || need="$need $pkg"
done
if [ -n "$need" ]; then
	log "installing$need"
	quietly apt-get update -qq
	# shellcheck disable=SC2086
	quietly apt-get install -y -qq $need
fi
# Prometheus and promtool test deploy/prometheus against a live daemon;
# the tests start their own. Installed here, Debian's package would also
# start a server as a service: stop and disable the one it starts.
if ! command -v promtool >/dev/null 2>&1; then
	log "installing prometheus (for the tests; its service is left off)"
	quietly apt-get install -y -qq --no-install-recommends prometheus
	if [ -d /run/systemd/system ]; then
		systemctl disable --now prometheus >/dev/null 2>&1 || true
	fi
fi

# The group whose members may use the daemon's socket besides root.
getent group sandboxd >/dev/null || groupadd --system sandboxd

containerd_sock=/run/containerd/containerd.sock
docker_up() { docker info >/dev/null 2>&1; }
containerd_up() { ctr --address "$containerd_sock" version >/dev/null 2>&1; }

# A machine that was stopped without its services shutting down keeps their
# sockets and pid files in /run. dockerd takes an existing $containerd_sock
# for a running containerd and gives up after 15 s of dialling it; a pid file
# naming a live process of another program keeps a daemon from starting.
# Remove what no running daemon owns.
clear_stale_containerd_socket() {
	if [ -S "$containerd_sock" ] && ! containerd_up; then
		log "removing the stale socket $containerd_sock"
		rm -f "$containerd_sock" "$containerd_sock.ttrpc"
	fi
}
clear_stale_pidfile() { # pid file, the program that would own it
	[ -f "$1" ] || return 0
	pid=$(cat "$1" 2>/dev/null || true)
	if [ -z "$pid" ] || [ "$(cat "/proc/$pid/comm" 2>/dev/null || true)" != "$2" ]; then
		log "removing the stale pid file $1"
		rm -f "$1"
	fi
}

# start_daemon NAME LOG UP COMMAND...: unless the function UP succeeds,
# starts COMMAND in the background and waits up to 60 s for UP.
start_daemon() {
	name=$1 logfile=$2 up=$3
	shift 3
	"$up" && return 0
	log "starting $name"
	mkdir -p "$(dirname "$logfile")"
	nohup "$@" >"$logfile" 2>&1 &
	i=0
	until "$up"; do
		i=$((i + 1))
		if [ $i -ge 120 ]; then
			log "$name did not answer within 60 s; the end of $logfile:"
			tail -n 20 "$logfile" >&2
			exit 1
		fi
		sleep 0.5
	done
}

# crun refuses a cgroup v1 host whose cgroup2 hierarchy (hybrid mode, at
# /sys/fs/cgroup/unified) holds controllers: give each such controller its
# own v1 hierarchy, as an init in legacy mode mounts them. runc and gVisor
# work either way. Before dockerd starts, so that it sees the hierarchy.
unified=/sys/fs/cgroup/unified
if [ -f "$unified/cgroup.controllers" ] && [ ! -f /sys/fs/cgroup/cgroup.controllers ]; then
	for c in $(cat "$unified/cgroup.controllers"); do
		log "mounting the $c controller as a cgroup v1 hierarchy (it was in $unified, which crun refuses)"
		mkdir -p "/sys/fs/cgroup/$c"
		mount -t cgroup -o "$c" cgroup "/sys/fs/cgroup/$c"
	done
fi

# dockerd: started directly when no init system runs it. It runs a
# containerd of its own unless a system one answers at $containerd_sock.
if [ $engines = 1 ]; then
	if ! docker_up; then
		clear_stale_containerd_socket
		clear_stale_pidfile /var/run/docker.pid dockerd
		clear_stale_pidfile /var/run/docker/containerd/containerd.pid containerd
	fi
	start_daemon dockerd /var/log/dockerd.log docker_up dockerd
	log "docker $(docker version -f '{{.Server.Version}}') is up"
fi

"$repo/scripts/install-runsc.sh"
"$repo/scripts/install-runc.sh"

# containerd for --backend containerd: a standalone one at the standard
# socket (dockerd's own, when it runs one, listens elsewhere).
if [ $engines = 1 ]; then
	clear_stale_containerd_socket
	start_daemon containerd /var/log/containerd.log containerd_up \
		containerd --config "$repo/scripts/containerd.toml"
	log "containerd $(ctr --address "$containerd_sock" version 2>/dev/null | awk '/Server/{s=1} s && /Version/{print $2; exit}') is up"
fi

# The sandbox images, built from their recipes (images/*/recipe) by
# sandboxd itself, offline and bit for bit, into the image store and the
# engines that answer; an image is built again only when its recipe
# changed. FORCE=1 builds them all.
log "building sandboxd, then the sandbox images (their logs in /tmp while they build)"
(cd "$repo" && quietly go build -o bin/sandboxd ./cmd/sandboxd)
force=""
[ "${FORCE:-0}" != 1 ] || force=--force
# For the tests (not make run), the recipes an operator may add for
# judging too (images/extra: Java, Go, Rust), which the engine suite judges.
extra=""
[ "$engines" = 0 ] || extra="--images-dir images/extra"
# shellcheck disable=SC2086 # empty or flags
(cd "$repo" && bin/sandboxd image build $force $extra)
log "ready"
