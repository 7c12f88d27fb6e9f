#!/bin/sh
# Lists the integration tests: for each package with test files that only
# the `integration` build has, the package and a -run pattern of the tests
# those files declare, one package a line. The unit tests beside them run
# once, in make test-unit, not again here. Arguments are packages (default
# ./...).
set -eu
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- ./...
files='{{.ImportPath}} {{.Dir}}{{range .TestGoFiles}} {{.}}{{end}}{{range .XTestGoFiles}} {{.}}{{end}}'
plain=$(go list -f "$files" "$@")
go list -tags integration -f "$files" "$@" | while read -r pkg dir tagged; do
	[ -n "$tagged" ] || continue
	untagged=$(printf '%s\n' "$plain" | awk -v p="$pkg" '$1 == p { $1 = ""; $2 = ""; print }')
	tests=""
	for f in $tagged; do
		case " $untagged " in *" $f "*) continue ;; esac
		tests="$tests $(sed -n 's/^func \(Test[A-Za-z0-9_]*\)(t \*testing\.T).*/\1/p' "$dir/$f")"
	done
	tests=$(echo $tests | tr ' ' '|')
	[ -z "$tests" ] || echo "$pkg ^($tests)\$"
done
