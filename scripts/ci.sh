#!/bin/sh
# make test: everything CI runs once the set-up is done, in two lanes at
# once on the host's cores. The engines' lane runs the suites that time
# something (a cancel within a second, a CPU quota, a rolling update): the
# engine suite by its matrix, the backends' contract suites, the binary's
# end-to-end tests, the gateway's, then the cluster. Beside it, at the
# lowest CPU and I/O priority so that it takes only what the engines' lane
# leaves, the lane of suites that time nothing: lint, the generated code,
# the unit tests (as root with -race, and as nobody), fuzzing, the image
# builder and MCP's SDK clients. Prints each phase's seconds and the ten
# slowest tests at the end, and every failure with its output. The logs
# stay in the folder it names.
set -u

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

lane() {
	case $1 in
	engines)
		phase integration-engines env SANDBOXD_TEST_JSON="$ci" scripts/test-integration.sh ./conformance
		phase integration-backends env SANDBOXD_TEST_JSON="$ci" scripts/test-integration.sh ./runtime/docker ./runtime/containerd ./runtime/direct
		phase integration-binary env SANDBOXD_TEST_JSON="$ci" scripts/test-integration.sh ./cmd/sandboxd ./netpolicy/gateway
		phase k8s-e2e make -s k8s-e2e
		;;
	untimed)
		phase lint make -s lint
		phase proto-check make -s proto-check
		phase test-unit sh -c 'go test -json -race -count=1 ./... >"$0/unit.json"' "$ci"
		phase test-unprivileged sh -c 'scripts/test-unprivileged.sh -json ./... >"$0/unprivileged.json"' "$ci"
		phase fuzz make -s fuzz
		phase integration-untimed env SANDBOXD_TEST_JSON="$ci" scripts/test-integration.sh ./images/builder ./mcp
		;;
	esac
}

# phase NAME CMD...: runs CMD with its output in $ci/NAME.log and records
# its lane, start, end and status in $ci/phases.
phase() {
	name=$1
	shift
	start=$(date +%s)
	if "$@" >"$ci/$name.log" 2>&1; then status=ok; else status=FAIL; fi
	end=$(date +%s)
	echo "$lane_name $name $start $end $status" >>"$ci/phases"
	echo "ci: [$(clock "$end")] $name ($lane_name): $status in $((end - start)) s" >&2
}

clock() {
	t=$(($1 - started))
	printf '%d:%02d' $((t / 60)) $((t % 60))
}

# A lane runs as this script again, so that its priority is the process's.
if [ "${1:-}" = lane ]; then
	lane_name=$2 ci=$3 started=$4
	lane "$lane_name"
	exit 0
fi

ci=$(mktemp -d /tmp/sandboxd-ci.XXXXXX)
started=$(date +%s)
echo "ci: logs in $ci" >&2
lane_name=setup
phase setup make -s setup
if grep -q ' FAIL$' "$ci/phases"; then
	tail -n 40 "$ci/setup.log" >&2
	exit 1
fi
nice -n 19 ionice -c 3 "$0" lane untimed "$ci" "$started" &
untimed=$!
"$0" lane engines "$ci" "$started"
wait "$untimed"
ended=$(date +%s)

echo
echo "CI's time by phase (the lanes run at once; wall $(clock "$ended")):"
printf '%-22s %-8s %8s %8s  %s\n' phase lane start seconds status
sort -k3,3n "$ci/phases" | while read -r lane name start end status; do
	printf '%-22s %-8s %8s %8d  %s\n' "$name" "$lane" "$(clock "$start")" $((end - start)) "$status"
done
echo
echo "The ten slowest tests:"
go run ./internal/testutil/testreport/cmd/testreport -slowest 10 "$ci"/*.json
if grep -q ' FAIL$' "$ci/phases"; then
	echo
	echo "Failed:"
	go run ./internal/testutil/testreport/cmd/testreport -failed "$ci"/*.json
	for name in $(awk '$5 == "FAIL" { print $2 }' "$ci/phases"); do
		echo
		echo "--- the end of $name's log ($ci/$name.log):"
		tail -n 40 "$ci/$name.log"
	done
	exit 1
fi
