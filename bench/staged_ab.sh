#!/usr/bin/env bash
# bench/staged_ab.sh - tagged one-way latency over shm, two ferry_perf binaries against each
# other and against the two fixed paths, round after round, so that each of the host's states
# (its cores hand cache lines over fast or slowly for minutes at a time) is seen by all of them.
#
#   bench/staged_ab.sh [--rounds N] [--sizes 64k,1m] [--cpus 0,1] [--build DIR] A B
#
# A and B are ferry_perf binaries (say main's and a change's, each copied twice: a static
# binary's page placement moves latency by 15-30 ns, docs/perf.md).  Per round and size it runs
# A, B, A with FERRY_TAG_RNDV_THRESH=32k (every message by get), A with
# FERRY_TAG_STAGED_RATE=0 (every message staged), then A and B again, and prints one line:
#   HH:MM:SS size  a A1 A2  b B1 B2  get G  staged S  p99 a A1 A2 b B1 B2
# (one-way p50 in us, then p99).  At the end: the medians per 2-minute window.
set -u
ROUNDS=50
SIZES=64k,1m
CPUS=0,1
BUILD=build-bench
while [ $# -gt 2 ]; do
    case $1 in
    --rounds) ROUNDS=$2; shift ;;
    --sizes) SIZES=$2; shift ;;
    --cpus) CPUS=$2; shift ;;
    --build) BUILD=$2; shift ;;
    *) echo "staged_ab.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
[ $# -eq 2 ] || { sed -n '2,14p' "$0"; exit 2; }
A=$1
B=$2
FR="$BUILD/tools/ferryrun"
[ -x "$FR" ] || { echo "staged_ab.sh: no $FR (build first, or --build DIR)" >&2; exit 2; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# p50,p99 of one run: binary size iterations [VAR=VALUE]
one() {
    env ${4:-X=1} FERRY_TLS=shm timeout 120 "$FR" -n 2 "$1" -t tag_lat -s "$2" -n "$3" -w 30 \
        -C "$CPUS" -f csv 2> /dev/null | tail -1 | cut -d, -f7,9
}

for r in $(seq "$ROUNDS"); do
    for s in ${SIZES//,/ }; do
        case $s in *m) n=600 ;; *) n=3000 ;; esac
        a1=$(one "$A" "$s" $n); b1=$(one "$B" "$s" $n)
        g=$(one "$A" "$s" $n FERRY_TAG_RNDV_THRESH=32k); st=$(one "$A" "$s" $n FERRY_TAG_STAGED_RATE=0)
        a2=$(one "$A" "$s" $n); b2=$(one "$B" "$s" $n)
        echo "$(date +%T) $s a ${a1%,*} ${a2%,*} b ${b1%,*} ${b2%,*} get ${g%,*} staged ${st%,*}" \
            "p99 a ${a1#*,} ${a2#*,} b ${b1#*,} ${b2#*,}" | tee -a "$out"
    done
done

echo "medians per 2-minute window (one-way p50, us):"
awk '{ split($1, t, ":"); w = t[1] ":" sprintf("%02d", int(t[2] / 2) * 2) " " $2
       A[w] = A[w] " " $4 " " $5; B[w] = B[w] " " $7 " " $8; G[w] = G[w] " " $10; S[w] = S[w] " " $12 }
     function med(list,   v, n, i, j, x) {
         n = split(list, v, " ")
         for (i = 2; i <= n; i++) { x = v[i]; for (j = i - 1; j >= 1 && v[j] + 0 > x + 0; j--) v[j + 1] = v[j]; v[j + 1] = x }
         return n ? v[int((n + 1) / 2)] : "n/a" }
     END { for (w in A) printf "%s  a %s  b %s  get %s  staged %s\n", w, med(A[w]), med(B[w]), med(G[w]), med(S[w]) }' \
    "$out" | sort
