#!/bin/sh
# Builds the sandbox images offline: debootstrap a minimal Debian from the
# mirror apt already uses, add the sandbox user and folders, `docker import`
# it, and record the digests in images/images.lock.
#
# An image is rebuilt only when its recipe changed (or FORCE=1).
# Usage: scripts/build-images.sh [NAME...]   (default: every folder of images/)
set -eu

repo=$(cd "$(dirname "$0")/.." && pwd)
suite=bookworm
lock="$repo/images/images.lock"

log() { printf 'build-images: %s\n' "$*" >&2; }

# debian_mirror prints the URI of apt's Debian source for $suite, from
# deb822 .sources files or the classic sources.list; DEBIAN_MIRROR overrides.
debian_mirror() {
	if [ -n "${DEBIAN_MIRROR:-}" ]; then
		echo "$DEBIAN_MIRROR"
		return
	fi
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		awk -v suite="$suite" '
			function flush() { if (deb && hit && uri != "") { print uri; found = 1; exit } deb = hit = 0; uri = "" }
			/^[ \t]*$/ { flush(); next }
			/^Types:/ { for (i = 2; i <= NF; i++) if ($i == "deb") deb = 1 }
			/^URIs:/ { uri = $2 }
			/^Suites:/ { for (i = 2; i <= NF; i++) if ($i == suite) hit = 1 }
			END { if (!found) flush() }' "$f"
	done | head -n1 | grep . && return
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -f "$f" ] || continue
		awk -v suite="$suite" '$1 == "deb" && $3 == suite { print $2; exit }' "$f"
	done | head -n1 | grep . && return
	log "no Debian $suite source found in apt's sources; set DEBIAN_MIRROR"
	return 1
}

# recipe_digest hashes everything an image is built from: its package list,
# the files it adds (rootfs/) and removes (remove), and this script.
recipe_digest() {
	dir="$repo/images/$1"
	{
		cat "$dir/packages" "$0"
		[ ! -f "$dir/remove" ] || cat "$dir/remove"
		if [ -d "$dir/rootfs" ]; then
			(cd "$dir/rootfs" && find . -type f | LC_ALL=C sort | while read -r f; do echo "$f"; cat "$f"; done)
		fi
	} | sha256sum | cut -d' ' -f1
}

build() {
	name=$1
	ref="sandboxd/$name:latest"
	recipe=$(recipe_digest "$name")
	have=$(docker image inspect -f '{{index .Config.Labels "io.sandboxd.recipe"}}' "$ref" 2>/dev/null || true)
	if [ "$have" = "sha256:$recipe" ] && [ "${FORCE:-0}" != 1 ]; then
		log "$ref is up to date"
		return
	fi
	mirror=$(debian_mirror)
	root=$(mktemp -d /var/tmp/sandboxd-image-XXXXXX)
	trap 'rm -rf "$root"' EXIT INT TERM
	packages=$(grep -v '^#' "$repo/images/$name/packages" | paste -sd, -)
	log "debootstrap $name ($packages) from $mirror"
	debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror" >&2
	# The sandbox user owns nothing but its working directory.
	echo 'sandbox:x:1000:1000:sandbox:/workspace:/bin/bash' >>"$root/etc/passwd"
	echo 'sandbox:x:1000:' >>"$root/etc/group"
	echo 'sandbox:!:19000::::::' >>"$root/etc/shadow"
	# Files the recipe adds, owned by root and read-only for everyone else.
	if [ -d "$repo/images/$name/rootfs" ]; then
		cp -R --no-preserve=ownership "$repo/images/$name/rootfs/." "$root/"
		chmod -R go-w "$root/etc" "$root/usr"
	fi
	# Files of the packages the image does without (one path per line).
	if [ -f "$repo/images/$name/remove" ]; then
		grep -v '^#' "$repo/images/$name/remove" | while read -r f; do
			[ -z "$f" ] || rm -f "$root/$f"
		done
	fi
	mkdir -p "$root/workspace" "$root/input" "$root/code" "$root/mnt"
	chown 1000:1000 "$root/workspace"
	chmod 1777 "$root/tmp"
	rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
		"$root"/var/log/* "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/*
	tar -C "$root" --numeric-owner -c . | docker import \
		--change 'USER 1000:1000' \
		--change 'WORKDIR /workspace' \
		--change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
		--change "LABEL io.sandboxd.image=$name" \
		--change "LABEL io.sandboxd.recipe=sha256:$recipe" \
		- "$ref" >/dev/null
	rm -rf "$root"
	trap - EXIT INT TERM
	log "built $ref $(docker image inspect -f '{{.Id}}' "$ref")"
}

write_lock() {
	tmp="$lock.tmp"
	{
		echo '{'
		echo '  "images": ['
		sep=''
		for dir in "$repo"/images/*/; do
			name=$(basename "$dir")
			[ -f "$dir/packages" ] || continue
			id=$(docker image inspect -f '{{.Id}}' "sandboxd/$name:latest" 2>/dev/null) || continue
			recipe=$(docker image inspect -f '{{index .Config.Labels "io.sandboxd.recipe"}}' "sandboxd/$name:latest")
			printf '%s    {"name": "sandboxd/%s", "digest": "%s", "recipe": "%s"}' "$sep" "$name" "$id" "$recipe"
			sep=',
'
		done
		printf '\n  ]\n}\n'
	} >"$tmp"
	mv "$tmp" "$lock"
}

command -v debootstrap >/dev/null || { log "debootstrap is missing (scripts/setup.sh installs it)"; exit 1; }
docker info >/dev/null 2>&1 || { log "the Docker engine does not answer (scripts/setup.sh starts it)"; exit 1; }

if [ $# -eq 0 ]; then
	for dir in "$repo"/images/*/; do
		[ -f "$dir/packages" ] && set -- "$@" "$(basename "$dir")"
	done
fi
for name in "$@"; do
	[ -f "$repo/images/$name/packages" ] || { log "unknown image $name (no images/$name/packages)"; exit 1; }
	build "$name"
done
write_lock
log "wrote $lock"

# The containerd backend runs the same images, from containerd's own store:
# import each one whose Docker image ID changed since it was last imported.
sock=/run/containerd/containerd.sock
if ctr --address "$sock" version >/dev/null 2>&1; then
	marks=/var/lib/sandboxd/containerd-images
	mkdir -p "$marks"
	for dir in "$repo"/images/*/; do
		name=$(basename "$dir")
		[ -f "$dir/packages" ] || continue
		id=$(docker image inspect -f '{{.Id}}' "sandboxd/$name:latest" 2>/dev/null) || continue
		if [ "$(cat "$marks/$name" 2>/dev/null)" = "$id" ] &&
			ctr --address "$sock" -n sandboxd images ls -q | grep -qx "docker.io/sandboxd/$name:latest"; then
			continue
		fi
		log "importing sandboxd/$name into containerd"
		docker save "sandboxd/$name:latest" | ctr --address "$sock" -n sandboxd images import - >&2
		echo "$id" >"$marks/$name"
	done
fi
