#!/usr/bin/env bash
# run.sh — what each step of the engine's history buys, measured on one day.
#
#   bench/steps/run.sh [-r ROUNDS] [-w WINDOW] [-c CELLS] [-o FILE] COMMIT...
#
# Builds stepbench (main.go here) inside a temporary git worktree of each
# COMMIT, then runs every cell (CELLS, default "sync:4 sync:16 sync:64
# sync:256 async:16") for every build in ROUNDS interleaved rounds (default
# 4), the builds in a shuffled order within each cell, each run a fresh
# uring-direct store in a temporary directory, a WINDOW-long window (default
# 2s). The raw lines go to FILE (default steps-<time>.txt in the current
# directory) and the table — median [min–max] msgs/s and the median CPU µs
# per message — to standard output, the builds in the order given.
set -euo pipefail

usage() { sed -n '3,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
rounds=4 window=2s cells="sync:4 sync:16 sync:64 sync:256 async:16" out=""
while getopts r:w:c:o:h opt; do
	case $opt in
	r) rounds=$OPTARG ;;
	w) window=$OPTARG ;;
	c) cells=$OPTARG ;;
	o) out=$OPTARG ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || usage
case $rounds in '' | *[!0-9]* | 0) echo "run.sh: -r $rounds: want a positive number of rounds" >&2; exit 2 ;; esac
for cell in $cells; do
	case $cell in
	sync:[1-9]* | async:[1-9]*) ;;
	*) echo "run.sh: cell $cell: want sync:N or async:N" >&2; exit 2 ;;
	esac
done

src=$(cd "$(dirname "$0")" && pwd)
repo=$(git -C "$src" rev-parse --show-toplevel)
out=${out:-steps-$(date +%Y%m%d-%H%M%S).txt}
: >"$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/mqstore-steps.XXXXXX")
cleanup() {
	for wt in "$work"/wt-*; do
		[ -d "$wt" ] && git -C "$repo" worktree remove --force "$wt"
	done
	rm -rf "$work"
}
trap cleanup EXIT

builds=()
for commit in "$@"; do
	name=$(git -C "$repo" rev-parse --short "$commit^{commit}")
	wt=$work/wt-$name
	git -C "$repo" worktree add --quiet --detach "$wt" "$name"
	mkdir -p "$wt/cmd/stepbench"
	cp "$src/main.go" "$wt/cmd/stepbench/"
	if [ -d "$wt/backends" ]; then # the engine stopped importing the backends itself
		cp "$src/backends.go" "$wt/cmd/stepbench/"
	fi
	(cd "$wt" && go build -o "$work/bin-$name" ./cmd/stepbench)
	builds+=("$name")
	echo "run.sh: built $name ($(git -C "$repo" log -1 --format=%s "$name" | cut -c1-70))" >&2
done

for round in $(seq "$rounds"); do
	for cell in $cells; do
		flush=${cell%%:*} producers=${cell#*:}
		for b in $(printf '%s\n' "${builds[@]}" | shuf); do
			rm -rf "$work/store"
			line=$("$work/bin-$b" -dir "$work/store" -flush "$flush" -producers "$producers" -duration "$window")
			echo "$round $b $flush $producers $line" >>"$out"
		done
	done
	echo "run.sh: round $round of $rounds done" >&2
done
"$work/bin-${builds[-1]}" -summarize "$out" -order "$(IFS=,; echo "${builds[*]}")"
