#!/bin/sh
# Starts bin/sandboxd serve in the background (replacing one this script
# started before) and waits until it answers; `run.sh stop` stops it.
# Extra arguments go to `sandboxd serve`. Logs: /var/log/sandboxd/sandboxd.log
# (the start before's: sandboxd.log.1).
set -eu

repo=$(cd "$(dirname "$0")/.." && pwd)
pidfile=/run/sandboxd/sandboxd.pid
socket=/run/sandboxd/sandboxd.sock
logfile=/var/log/sandboxd/sandboxd.log
# Every network listener requires a token: the one of MCP over HTTP here.
token=/etc/sandboxd/token

stop() {
	[ -f "$pidfile" ] || return 0
	pid=$(cat "$pidfile")
	if kill -0 "$pid" 2>/dev/null; then
		echo "stopping sandboxd ($pid)" >&2
		kill -TERM "$pid"
		i=0
		while kill -0 "$pid" 2>/dev/null; do
			i=$((i + 1))
			[ $i -lt 120 ] || { echo "sandboxd did not stop in 60 s" >&2; exit 1; }
			sleep 0.5
		done
	fi
	rm -f "$pidfile"
}

if [ "${1:-}" = stop ]; then
	stop
	exit 0
fi

stop
mkdir -p /run/sandboxd
if [ ! -s "$token" ]; then
	mkdir -p "$(dirname "$token")"
	(umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$token")
fi
# One start's log a file, the start before's kept beside it.
mkdir -p "$(dirname "$logfile")" && chmod 0700 "$(dirname "$logfile")"
[ ! -s "$logfile" ] || mv "$logfile" "$logfile.1"
nohup "$repo/bin/sandboxd" serve --socket "$socket" --mcp-listen 127.0.0.1:7071 --inbound-listen 127.0.0.1:8090 --token-file "$token" \
	"$@" >>"$logfile" 2>&1 &
echo $! >"$pidfile"
i=0
until "$repo/bin/sandboxd" images --socket "$socket" >/dev/null 2>&1; do
	i=$((i + 1))
	if [ $i -ge 60 ] || ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
		echo "sandboxd did not come up; the end of $logfile:" >&2
		tail -n 20 "$logfile" >&2
		exit 1
	fi
	sleep 0.5
done
echo "sandboxd is serving gRPC on $socket and MCP on http://127.0.0.1:7071/mcp (pid $(cat "$pidfile"), log $logfile)" >&2
echo "MCP over HTTP takes the bearer token in $token" >&2
echo "try: bin/sandboxd run --lang python -c 'print(6*7)'" >&2
