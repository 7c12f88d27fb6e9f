#!/bin/sh
# Runs the unit tests as an unprivileged user (nobody), as a developer
# without root would: on a copy of the tree that user can read and not
# write, with a build cache of its own and the module cache read-only.
# Root's CAP_DAC_OVERRIDE hides a file the code leaves unwritable; this
# shows it. Arguments go to `go test` (default: ./...). Needs root to
# switch users; everything it makes is removed when it ends.
set -eu

repo=$(cd "$(dirname "$0")/.." && pwd)
user=${SANDBOXD_TEST_USER:-nobody}
[ "$(id -u)" -eq 0 ] || { echo "test-unprivileged: run as root (it switches to $user)" >&2; exit 2; }
go=$(command -v go)

work=$(mktemp -d /tmp/sandboxd-unpriv.XXXXXX)
trap 'rm -rf "$work"' EXIT INT TERM
chmod 0755 "$work"

# The tree as git knows it (tracked and new files, not ignored build
# output), owned by root: a test that writes into its source tree fails.
mkdir "$work/src"
(cd "$repo" && git ls-files -z --cached --others --exclude-standard | xargs -0 -r sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh) |
	tar -C "$repo" --null -T - -cf - | tar -C "$work/src" -xf -
chmod -R a+rX "$work/src"

# The modules the tree needs, downloaded as root into a cache the user can
# read and not change; no proxy for the user.
GOMODCACHE="$work/mod" GOFLAGS=-mod=mod "$go" -C "$work/src" mod download
chmod -R a+rX "$work/mod"

# The user's own build cache, seeded from root's so that nothing built
# once is built again.
mkdir "$work/cache" "$work/tmp"
cache=$("$go" env GOCACHE)
[ -d "$cache" ] && cp -a "$cache/." "$work/cache/" 2>/dev/null || true
chown -R "$user" "$work/cache" "$work/tmp"

[ $# -gt 0 ] || set -- ./...
cd "$work/src"
setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups --inh-caps=-all --bounding-set=-all -- \
	env -i PATH="$(dirname "$go"):/usr/local/bin:/usr/bin:/bin" HOME="$work/tmp" TMPDIR="$work/tmp" \
	GOCACHE="$work/cache" GOMODCACHE="$work/mod" GOPROXY=off GOFLAGS=-mod=readonly GOTOOLCHAIN=local \
	"$go" test -count=1 "$@"
