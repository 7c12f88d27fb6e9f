#!/bin/sh
# Installs gVisor's runsc at /usr/local/lib/sandboxd/runsc, where the
# containerd backend finds it, and registers it with the Docker engine,
# beside Debian's crun (scripts/setup.sh installs it), idempotently.
#
# A pinned gVisor is built from the Go module proxy, statically
# (CGO_ENABLED=0: a dynamically linked runsc cannot re-exec itself inside its
# own chroot), and cached by version in /var/cache/sandboxd, so that later
# runs and CI reuse it. When the build is not possible, Debian's runsc
# package is used instead, through a wrapper that adds --network=none: that
# 2022 build needs it for containers without a network, which is how
# sandboxd runs every task.
set -eu

GVISOR_VERSION=${GVISOR_VERSION:-v0.0.0-20260905035102-160fafc42237}
cache=/var/cache/sandboxd/runsc/$GVISOR_VERSION
bin=/usr/local/lib/sandboxd/runsc
fallback=""
log() { printf 'install-runsc: %s\n' "$*" >&2; }

if [ ! -x "$cache/runsc" ]; then
	log "building gVisor runsc $GVISOR_VERSION (a few minutes, once)"
	mkdir -p "$cache.tmp"
	# Go's download lines go to the set-up's log when there is one.
	if CGO_ENABLED=0 GOBIN="$cache.tmp" go install "gvisor.dev/gvisor/runsc@$GVISOR_VERSION" >>"${SANDBOXD_SETUP_LOG:-/dev/stderr}" 2>&1; then
		rm -rf "$cache" && mv "$cache.tmp" "$cache"
	else
		rm -rf "$cache.tmp"
		log "the build failed (its output: ${SANDBOXD_SETUP_LOG:-above}); falling back to Debian's runsc package"
	fi
fi
mkdir -p "$(dirname "$bin")"
if [ -x "$cache/runsc" ]; then
	cmp -s "$cache/runsc" "$bin" 2>/dev/null || install -m 0755 "$cache/runsc" "$bin"
else
	[ -x /usr/bin/runsc ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq runsc >/dev/null
	printf '#!/bin/sh\nexec /usr/bin/runsc --network=none "$@"\n' >"$bin.tmp"
	chmod 0755 "$bin.tmp" && mv "$bin.tmp" "$bin"
	fallback=yes
fi

# The direct backend runs it from here; Docker, when the host has it, is
# told of it.
if ! command -v dockerd >/dev/null 2>&1; then
	log "gVisor at $bin (no Docker engine to register it with)"
	exit 0
fi

# Docker: the runtime named runsc, applying OCI seccomp profiles, and crun.
conf=/etc/docker/daemon.json
# --oci-seccomp: runsc applies the container's seccomp profile inside the
# sandbox only with it; sandboxd does not offer a runsc registered without.
# runsc-network-none is the same runsc with a loopback of gVisor's own: a
# container without network then needs none from dockerd, whose network
# hook re-executes dockerd for every container.
want="{\"runtimes\": {\"crun\": {\"path\": \"/usr/bin/crun\"}, \"runsc\": {\"path\": \"$bin\", \"runtimeArgs\": [\"--oci-seccomp\"]}, \"runsc-network-none\": {\"path\": \"$bin\", \"runtimeArgs\": [\"--oci-seccomp\", \"--network=none\"]}}}"
if [ ! -s "$conf" ] || [ "$(cat "$conf")" != "$want" ]; then
	if [ -s "$conf" ] && ! grep -q '"runsc"' "$conf" && [ "$(tr -d ' \n' <"$conf")" != "{}" ]; then
		log "$conf has settings of its own; add this runtime to it by hand: $want"
		exit 1
	fi
	mkdir -p /etc/docker
	echo "$want" >"$conf"
	if pid=$(pidof dockerd); then
		kill -HUP $pid
		i=0
		until docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q -- '"runsc-network-none".*crun\|crun.*"runsc-network-none"'; do
			i=$((i + 1))
			[ $i -lt 40 ] || { log "dockerd did not pick up the runsc and crun runtimes"; exit 1; }
			sleep 0.25
		done
	fi
fi
if [ -z "$fallback" ]; then
	log "gVisor $GVISOR_VERSION at $bin and crun are registered with Docker"
else
	log "Debian's runsc, with --network=none, at $bin is registered with Docker"
fi
