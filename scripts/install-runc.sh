#!/bin/sh
# Installs a pinned runc at /usr/local/sbin/runc, ahead of Debian's
# /usr/sbin/runc on PATH, where every backend finds it: Docker's and
# containerd's runc shims look runc up on PATH, and sandboxd's containerd
# backend names the path it found to the shim, so that the version it
# reports is the one that runs. Idempotent.
#
# Debian 12's runc 1.1.5 carries the fix of CVE-2024-21626 but none of
# runc's November 2025 advisories (CVE-2025-31133, CVE-2025-52565,
# CVE-2025-52881), fixed in 1.2.8 and 1.3.3. The pinned runc is built from
# the Go module proxy, with libseccomp (Debian's libseccomp-dev), and cached
# by version in /var/cache/sandboxd, so that later runs and CI reuse it.
set -eu

RUNC_VERSION=${RUNC_VERSION:-v1.5.3}
cache=/var/cache/sandboxd/runc/$RUNC_VERSION
bin=/usr/local/sbin/runc
log() { printf 'install-runc: %s\n' "$*" >&2; }

if [ ! -x "$cache/runc" ]; then
	log "building runc $RUNC_VERSION (under a minute, once)"
	rm -rf "$cache.tmp" && mkdir -p "$cache.tmp"
	# Go's download lines go to the set-up's log when there is one.
	if ! CGO_ENABLED=1 GOBIN="$cache.tmp" go install -tags "seccomp urfave_cli_no_docs" \
		"github.com/opencontainers/runc@$RUNC_VERSION" >>"${SANDBOXD_SETUP_LOG:-/dev/stderr}" 2>&1; then
		rm -rf "$cache.tmp"
		log "the build of runc $RUNC_VERSION failed; its output: ${SANDBOXD_SETUP_LOG:-above}"
		exit 1
	fi
	rm -rf "$cache" && mv "$cache.tmp" "$cache"
fi
want="runc version ${RUNC_VERSION#v}"
got=$("$cache/runc" --version | head -n 1)
[ "$got" = "$want" ] || { log "$cache/runc says \"$got\", not \"$want\""; exit 1; }
mkdir -p "$(dirname "$bin")"
cmp -s "$cache/runc" "$bin" 2>/dev/null || install -m 0755 "$cache/runc" "$bin"
case ":$PATH:" in
*:/usr/local/sbin:*) ;;
*) log "/usr/local/sbin is not on PATH: the backends would run Debian's runc"; exit 1 ;;
esac
log "runc $RUNC_VERSION at $bin, ahead of $(command -v -p runc 2>/dev/null || echo /usr/sbin/runc)"
