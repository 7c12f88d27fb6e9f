#!/bin/sh
# Runs the integration tests of the given packages (default: every package
# that has some), each package's alone (scripts/integration-tests.sh), one
# package at a time, failing rather than skipping where an engine is
# missing. With SANDBOXD_TEST_JSON=DIR each package's `go test -json`
# events go to DIR/integration-NAME.json, for the report at CI's end;
# otherwise the output is go test's own. Needs root and what make setup
# installs.
set -u
cd "$(dirname "$0")/.."
export SANDBOXD_REQUIRE_BACKENDS=1
list=$(scripts/integration-tests.sh "$@") || exit 2
[ -n "$list" ] || { echo "test-integration: no integration tests in $*" >&2; exit 2; }
rc=0
while read -r pkg run; do
	if [ -n "${SANDBOXD_TEST_JSON:-}" ]; then
		name=$(echo "${pkg#github.com/sandboxd/sandboxd/}" | tr / -)
		go test -json -tags integration -count=1 -timeout 60m -run "$run" "$pkg" >"$SANDBOXD_TEST_JSON/integration-$name.json" 2>&1
	else
		go test -tags integration -count=1 -timeout 60m -run "$run" "$pkg"
	fi || { echo "test-integration: $pkg failed" >&2; rc=1; }
done <<LIST
$list
LIST
exit $rc
