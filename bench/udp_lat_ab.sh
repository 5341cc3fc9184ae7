#!/usr/bin/env bash
# bench/udp_lat_ab.sh - two ferry builds' udp 8 B one-way latency against each other and
# against raw UDP, interleaved round by round (A, B, raw; A, B, raw; ...), on the same cpus.
#
#   bench/udp_lat_ab.sh [--rounds N] [--size S] [--iters N] [--cpus a,b] [--min | --bw] BUILD_A BUILD_B
#
#   BUILD_A, BUILD_B  build directories holding tools/ferry_perf and tools/ferryrun (Release:
#                     `make build-release`, the dir build-bench)
#   --rounds N        rounds (default 15)
#   --size S          message size (default 8)
#   --iters N         iterations per run (default 20000, 5000 warm-up)
#   --cpus a,b        one process per cpu (default 0,1), for ferry_perf -C and udp_raw -C
#   --min             each run's minimum round trip / 2 instead of its median (less moved by a
#                     loaded machine's preemptions, but a best case)
#   --bw              the 1 MiB stream instead (ferry_perf -t am_bw -s 1m -n 1024 -W 64 and
#                     udp_raw bw's "delivered" figure)
#
# Prints every round (A, B, raw, B / A, A / raw, B / raw), then the medians of each column and
# of the per-round ratios, with the time and the load before and after.  Latency: the p50
# one-way of each run in us (lower is better); --bw: MB/s (higher is better).  udp_raw is
# built from bench/udp_raw.c into a temporary directory.
set -u -o pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROUNDS=15
SIZE=8
ITERS=20000
CPUS=0,1
BW=0
MIN=0
while [ $# -gt 0 ]; do
    case "$1" in
    --rounds) ROUNDS=$2; shift ;;
    --size) SIZE=$2; shift ;;
    --iters) ITERS=$2; shift ;;
    --cpus) CPUS=$2; shift ;;
    --bw) BW=1 ;;
    --min) MIN=1 ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "udp_lat_ab.sh: unknown option '$1'" >&2; exit 2 ;;
    *) break ;;
    esac
    shift
done
[ $# -eq 2 ] || { echo "usage: bench/udp_lat_ab.sh [options] BUILD_A BUILD_B (--help)" >&2; exit 2; }
A=$(cd "$1" && pwd) B=$(cd "$2" && pwd)
for d in "$A" "$B"; do
    [ -x "$d/tools/ferry_perf" ] && [ -x "$d/tools/ferryrun" ] ||
        { echo "udp_lat_ab.sh: no tools/ferry_perf and tools/ferryrun in $d" >&2; exit 1; }
done
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cc -O2 -o "$TMP/udp_raw" "$HERE/udp_raw.c" || exit 1

if [ $BW = 1 ]; then
    FARGS="-t am_bw -s 1m -n 1024 -w 102 -W 64 -C $CPUS -f csv"
    RAW="$TMP/udp_raw bw -s 1048576 -n 1024 -C $CPUS"
else
    FARGS="-t am_lat -s $SIZE -n $ITERS -w 5000 -C $CPUS -f csv"
    RAW="$TMP/udp_raw lat -s $SIZE -n $ITERS -C $CPUS"
fi
ferry() { # build: the run's figure (csv: p50 one-way, or bandwidth)
    FERRY_TLS=udp timeout 300 "$1/tools/ferryrun" -n 2 "$1/tools/ferry_perf" $FARGS 2> /dev/null |
        awk -F, -v bw=$BW -v min=$MIN 'NR > 1 && NF >= 13 { print (bw ? $12 : min ? $10 : $7); exit }'
}
raw() {
    local out
    out=$(timeout 120 $RAW 2> /dev/null)
    if [ $BW = 1 ]; then
        echo "$out" | sed -n 's/.* \([0-9.]*\) GB\/s delivered.*/\1/p' | awk '{ print $1 * 1000 }'
    else
        if [ $MIN = 1 ]; then echo "$out" | sed -n 's/.*min \([0-9.]*\)).*/\1/p'
        else echo "$out" | sed -n 's/.*: *\([0-9.]*\) us one-way.*/\1/p'; fi
    fi
}

echo "# $(date -u '+%F %T UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# A = $A"
echo "# B = $B"
echo "# ferry: FERRY_TLS=udp ferryrun -n 2 ferry_perf $FARGS"
echo "# raw:   ${RAW/#$TMP\//}"
echo "# round A B raw B/A A/raw B/raw ($([ $BW = 1 ] && echo 'MB/s' || echo "us one-way, $([ $MIN = 1 ] && echo min || echo p50)"))"
: > "$TMP/rows"
for r in $(seq "$ROUNDS"); do
    a=$(ferry "$A"); b=$(ferry "$B"); c=$(raw)
    row=$(awk -v r=$r -v a="$a" -v b="$b" -v c="$c" 'BEGIN {
        if (a == "" || b == "" || c == "" || a == 0 || c == 0) { print "# round " r " failed: " a " " b " " c; exit }
        printf("%d %s %s %s %.3f %.3f %.3f\n", r, a, b, c, b / a, a / c, b / c) }')
    echo "$row"
    case "$row" in \#*) ;; *) echo "$row" >> "$TMP/rows" ;; esac
done
med() { sort -g | awk '{ a[NR] = $1 } END { if (NR) print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2); else print "n/a" }'; }
printf "# medians of %d rounds:" "$(wc -l < "$TMP/rows")"
for i in 2 3 4 5 6 7; do printf " %s" "$(awk -v i=$i '{ print $i }' "$TMP/rows" | med)"; done
echo
echo "# $(date -u '+%F %T UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"
