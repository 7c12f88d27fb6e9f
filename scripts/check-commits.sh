#!/bin/sh
# Checks each commit of a range on its own tree, as the pre-push hook does:
# a subject of `area: what changed` within 72 characters joining no two
# changes with ';', gofmt, and the layout tests (import rules, nothing
# built tracked). Arguments are git rev-list's (default: the commits not
# on any remote, or the last one). Takes seconds per commit.
set -eu

repo=$(git rev-parse --show-toplevel)
cd "$repo"
if [ $# -eq 0 ]; then
	if [ -n "$(git remote)" ]; then set -- HEAD --not --remotes; else set -- -1 HEAD; fi
fi
commits=$(git rev-list --reverse "$@")
[ -n "$commits" ] || exit 0

work=$(mktemp -d /tmp/sandboxd-check.XXXXXX)
cleanup() {
	git worktree remove --force "$work/tree" >/dev/null 2>&1 || true
	rm -rf "$work"
	git worktree prune
}
trap cleanup EXIT INT TERM
git worktree add --detach --quiet "$work/tree" HEAD

failed=0
for c in $commits; do
	subject=$(git log -1 --format=%s "$c")
	short=$(git log -1 --format='%h %s' "$c")
	why=""
	[ ${#subject} -le 72 ] || why="$why; its subject has ${#subject} characters (72 at most)"
	case "$subject" in *";"*) why="$why; its subject joins two changes with ';'" ;; esac
	case "$subject" in *": "*) ;; *) why="$why; its subject is not 'area: what changed'" ;; esac
	git -C "$work/tree" checkout --quiet --detach "$c"
	unformatted=$(cd "$work/tree" && git ls-files -z '*.go' | xargs -0 -r gofmt -l | grep -v '\.pb\.go$' || true)
	[ -z "$unformatted" ] || why="$why; gofmt would change $(echo $unformatted)"
	if ! out=$(cd "$work/tree" && go test -count=1 ./internal/layout/ 2>&1); then
		why="$why; the layout tests fail:
$out"
	fi
	if [ -n "$why" ]; then
		echo "check-commits: $short${why}" >&2
		failed=1
	fi
done
exit $failed
