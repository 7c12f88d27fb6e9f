#!/bin/sh
# Installs sandboxd as a systemd service, in the places a Debian operator
# looks: the binaries in $PREFIX/bin (/usr/local/bin), the unit in
# /etc/systemd/system, the settings in /etc/sandboxd/sandboxd.conf (kept
# when present), the docs in $PREFIX/share/doc/sandboxd; the image lock
# stays in /var/lib/sandboxd, where `sandboxd image build` writes it. With
# DESTDIR, into that folder instead, the lock copied there too (the system
# is not touched: no group, no systemctl). The binaries come from $BINDIR
# (bin/). Run `make build` and `make images` first; `make install` does.
set -eu

repo=$(cd "$(dirname "$0")/.." && pwd)
prefix=${PREFIX:-/usr/local}
dest=${DESTDIR:-}
bindir=${BINDIR:-$repo/bin}
lock=/var/lib/sandboxd/images.lock
log() { printf 'install: %s\n' "$*" >&2; }

for f in "$bindir/sandboxd" "$bindir/sandboxd-init" "$lock"; do
	[ -f "$f" ] || { log "$f is missing: run make build and make images first"; exit 1; }
done

install -d -m 0755 "$dest$prefix/bin" "$dest/etc/systemd/system" "$dest$prefix/share/doc/sandboxd"
install -d -m 0700 "$dest/etc/sandboxd" "$dest/var/lib/sandboxd"
# The daemon finds its init next to itself.
install -m 0755 "$bindir/sandboxd" "$bindir/sandboxd-init" "$dest$prefix/bin/"
if [ -x /usr/local/lib/sandboxd/runsc ] && [ "$dest" = "" ]; then
	log "gVisor's runsc stays in /usr/local/lib/sandboxd, where the set-up built it"
fi
sed "s|/usr/local/|$prefix/|g" "$repo/deploy/systemd/sandboxd.service" >"$dest/etc/systemd/system/sandboxd.service"
chmod 0644 "$dest/etc/systemd/system/sandboxd.service"
if [ -f "$dest/etc/sandboxd/sandboxd.conf" ]; then
	log "keeping /etc/sandboxd/sandboxd.conf; the new default is $prefix/share/doc/sandboxd/sandboxd.conf"
else
	install -m 0600 "$repo/deploy/systemd/sandboxd.conf" "$dest/etc/sandboxd/sandboxd.conf"
fi
install -m 0644 "$repo/deploy/systemd/sandboxd.conf" "$repo"/docs/*.md "$dest$prefix/share/doc/sandboxd/"
[ "$dest" = "" ] || install -m 0644 "$lock" "$dest$lock"
if [ ! -s "$dest/etc/sandboxd/token" ]; then
	(umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dest/etc/sandboxd/token")
fi

[ "$dest" = "" ] || { log "installed into $dest"; exit 0; }
getent group sandboxd >/dev/null || groupadd --system sandboxd
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload
	log "installed; start it with: systemctl enable --now sandboxd"
else
	log "installed; systemd is not this machine's init, so start it by hand: $prefix/bin/sandboxd serve --config /etc/sandboxd/sandboxd.conf"
fi
