#!/bin/sh
# launch.sh - how long `ferryrun -n 64` takes to start, join and end a trivial ferry job.
#
#   bench/launch.sh [BUILD_DIR]        (default: build; N=64 ranks, REPEAT=5 runs)
#
# The job is examples/alltoall --join-only: every rank creates a context, a worker and the
# world (bootstrap put + fence), meets the others in one world barrier and leaves.  So the
# figure covers process start, the builtin bootstrap, shared-memory wireup of the barrier's
# endpoints and teardown: what a user waits for before the first useful message.  The goal on
# the 2-core development machine is under 5 s.
#
# Prints every run and the median, and appends the median with the exact command to
# bench/RESULTS.md under the "Launch" heading (made if absent; other sections are left alone).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
build=${1:-$repo/build}
n=${N:-64}
repeat=${REPEAT:-5}
ferryrun=$build/tools/ferryrun
prog=$build/examples/alltoall
for f in "$ferryrun" "$prog"; do
    [ -x "$f" ] || { echo "launch.sh: $f is missing: build the ferryrun and alltoall targets" >&2; exit 1; }
done
cmd="$ferryrun -n $n --timeout 60 $prog --join-only"

now() { date +%s.%N; }
times=""
for i in $(seq "$repeat"); do
    t0=$(now)
    out=$($cmd 2>&1) || { echo "launch.sh: run $i failed:"; echo "$out"; exit 1; }
    t1=$(now)
    t=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.6f", b - a }')
    printf 'run %d: %.3f s  (%s)\n' "$i" "$t" "$(echo "$out" | head -n 1)"
    times="$times $t"
done
median=$(printf '%s\n' $times | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}')
min=$(printf '%s\n' $times | sort -g | head -n 1)
max=$(printf '%s\n' $times | sort -g | tail -n 1)
printf 'ferryrun -n %d, %d runs: median %.3f s (min %.3f, max %.3f); goal < 5 s\n' \
    "$n" "$repeat" "$median" "$min" "$max"

# ---- bench/RESULTS.md: add a row to the Launch section ------------------------------------
results=$here/RESULTS.md
host="$(uname -n), $(nproc) cores, $(uname -r)"
commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
row=$(printf '| %s | %s | %s | %d | %.3f | %.3f | %.3f | `%s` |' "$(date -u +%Y-%m-%d)" \
    "$commit" "$host" "$n" "$median" "$min" "$max" \
    "bench/launch.sh: ferryrun -n $n --timeout 60 examples/alltoall --join-only")
[ -f "$results" ] || printf '# Benchmark results\n' > "$results"
if ! grep -q '^## Launch' "$results"; then
    cat >> "$results" <<'EOF'

## Launch

`ferryrun -n N` of a trivial ferry job (examples/alltoall --join-only: context, worker, world
create, one world barrier, destroy), wall time from start to exit of ferryrun, median of the
runs.  Goal: under 5 s for 64 ranks on the 2-core development machine.  Made by bench/launch.sh.

| date | commit | host | ranks | median s | min s | max s | command |
| --- | --- | --- | --- | --- | --- | --- | --- |
EOF
fi
# insert the row after the last line of the Launch section's table, before the blank lines
# that end the section (other sections are copied unchanged)
tmp=$results.tmp.$$
awk -v row="$row" '
    function flush_blanks() { while (blanks > 0) { print ""; blanks-- } }
    /^## / {
        if (inlaunch && !done) { print row; done = 1 }
        flush_blanks()
        inlaunch = ($0 ~ /^## Launch/)
        print
        next
    }
    inlaunch && !done && NF == 0 { blanks++; next }
    { flush_blanks(); print }
    END { if (inlaunch && !done) print row; flush_blanks() }
' "$results" > "$tmp"
mv "$tmp" "$results"
echo "appended to $results"
