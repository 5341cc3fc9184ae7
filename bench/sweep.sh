#!/usr/bin/env bash
# bench/sweep.sh - the size sweep of one transport: every operation of ferry_perf over the sizes
# where the protocol changes, to show (or refute) that no size is slower than the next larger
# one.  issue 15's claim, measured rather than assumed.
#
#   bench/sweep.sh [--tests LIST] [--sizes LIST] [--reps N] [--tol PCT] [--tls shm]
#                  [--abs US] [--cpus 0,1] [--build DIR] [--iters N] [--env VAR=VALUE]...
#
#   --tests  ferry_perf tests (default am_lat,am_bw,tag_lat,tag_bw,put_lat,put_bw,get_lat,get_bw)
#   --sizes  sizes in bytes or with k/m (default: powers of two 8..16m, and each threshold
#            of the shm path with its neighbours: 48-49 (AM data past the cell's first cache
#            line), 96-97 and 104-105 (tag and AM data inline in a cell up to 96 and 104: its
#            112 bytes less ferry's headers, a cell buffer above), 8112-8114 (tag eager: a cell buffer up to
#            8113, the outbox above), 8120-8122 (AM data through a cell buffer up to 8121, the
#            outbox above), 32767-32769 (tag rendezvous, automatic: above 32k),
#            8m-1 (streamed stores from 8 MiB), 16m+1 (the outbox's largest message is 16m:
#            pulled above))
#   --reps   repetitions, interleaved test by test (default 3); each figure is their median
#   --tol    allowed excess of a size's time over the next larger size's, in % (default 5:
#            the run-to-run spread of these figures on a quiet machine)
#   --abs    and in us, for latency tests (default 0.01): a median of per-iteration samples
#            moves in steps of the clock (~10 ns on the reference VM: 5 ns one-way), so at
#            0.05-0.2 us one step is 5-20 %; a difference within it is not flagged
#   --iters  iterations per size (default: ferry_perf's own choice by size)
#   --env    an extra environment variable for every ferry_perf run (repeatable)
#   --recheck N  measure each flagged pair again, N rounds (default 0: none): each round one
#            fresh process pair runs just the two sizes, their order alternating round by round,
#            so both sizes see the same minutes of this VM (whose speed flips every few seconds
#            or minutes, which a sweep of 40 sizes per run cannot share out evenly).  A flag
#            stands when the smaller size is slower in the median over the rounds (by --tol
#            and --abs, as above) and in more than half of the rounds; the exit status then
#            counts only the flags that stand.
#
# What is compared, each size against the next larger one, both ways a size can be "slower":
#   T  it takes longer: its time per message exceeds the larger size's by more than --tol
#      (latency tests: the median one-way, or whole-operation for get, latency; bandwidth
#      tests: size / bandwidth, the time per message in a stream);
#   B  the larger size moves fewer bytes per second: its rate (size / time) is below the
#      smaller size's by more than --tol (a protocol switch that costs more than it saves).
# Exit status 0 when nothing is flagged, 1 otherwise, 2 on a usage error.
#
# Output: one table per test (size, figure, time per message in us, rate in MB/s, flags),
# then a summary line per test.  The raw figures of each repetition go to
# $BUILD/sweep/raw.txt.
set -u -o pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
BUILD=${FERRY_BENCH_BUILD:-$ROOT/build-bench}
TESTS="am_lat,am_bw,tag_lat,tag_bw,put_lat,put_bw,get_lat,get_bw"
SIZES=""
REPS=3
TOL=5
ABS=0.01
TLS=shm
CPUS="0,1"
ITERS=""
ENVS=()
RECHECK=0

usage() { sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
    case "$1" in
    --tests) TESTS=$2; shift ;;
    --sizes) SIZES=$2; shift ;;
    --reps) REPS=$2; shift ;;
    --tol) TOL=$2; shift ;;
    --abs) ABS=$2; shift ;;
    --tls) TLS=$2; shift ;;
    --cpus) CPUS=$2; shift ;;
    --build) BUILD=$2; shift ;;
    --iters) ITERS=$2; shift ;;
    --env) ENVS+=("$2"); shift ;;
    --recheck) RECHECK=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench/sweep.sh: unknown option '$1' (--help for help)" >&2; exit 2 ;;
    esac
    shift
done
case "$REPS" in ''|*[!0-9]*|0) echo "bench/sweep.sh: --reps wants a positive number" >&2; exit 2 ;; esac
case "$TOL" in ''|*[!0-9.]*) echo "bench/sweep.sh: --tol wants a percentage" >&2; exit 2 ;; esac
case "$ABS" in ''|*[!0-9.]*) echo "bench/sweep.sh: --abs wants microseconds" >&2; exit 2 ;; esac
case "$RECHECK" in ''|*[!0-9]*) echo "bench/sweep.sh: --recheck wants a number of rounds" >&2; exit 2 ;; esac

PERF=$BUILD/tools/ferry_perf
FRUN=$BUILD/tools/ferryrun
if [ ! -x "$PERF" ] || [ ! -x "$FRUN" ]; then
    echo "bench/sweep.sh: no ferry_perf/ferryrun in $BUILD (make build-release builds them)" >&2
    exit 2
fi

if [ -z "$SIZES" ]; then
    SIZES=8,16,32,48,49,64,96,97,104,105,128,256,512,1024
    SIZES=$SIZES,2048,4096,8112,8113,8114,8120,8121,8122,8192,16384,32767,32768,32769,65536,131072,262144
    SIZES=$SIZES,524288,1048576,2097152,4194304,8388607,8388608,16777216,16777217
fi
# ferry_perf's sizes, in bytes, sorted and unique (k/m suffixes expanded)
SIZES=$(echo "$SIZES" | tr ',' '\n' | awk '
    /^[0-9]+[kK]$/ { print $0 * 1024; next }
    /^[0-9]+[mM]$/ { print $0 * 1048576; next }
    /^[0-9]+$/ { print; next }
    { print "bad size: " $0 > "/dev/stderr"; exit 1 }' | sort -un | paste -sd, -) || exit 2

OUT=$BUILD/sweep
mkdir -p "$OUT"
RAW=$OUT/raw.txt # "test size figure" per repetition
FLAGGED=$OUT/flagged.txt # "test size next-size" per flag
: > "$RAW"
: > "$FLAGGED"

load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "# bench/sweep.sh: FERRY_TLS=$TLS ${ENVS[*]:-}, $REPS repetitions, tolerance $TOL % (latency: and $ABS us), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# load at start: $(load)"
echo "# command per test: FERRY_TLS=$TLS ferryrun -n 2 ferry_perf -t TEST -s $SIZES ${ITERS:+-n $ITERS }-C $CPUS -f csv"

for ((r = 1; r <= REPS; r++)); do
    for t in ${TESTS//,/ }; do
        # ferry_perf csv: test,size,iters,window,lat_kind,avg,p50,p90,p99,min,max,bw_MBps,rate
        if ! out=$(env FERRY_TLS="$TLS" "${ENVS[@]}" timeout 600 "$FRUN" -n 2 --timeout 590 \
                "$PERF" -t "$t" -s "$SIZES" ${ITERS:+-n "$ITERS"} -C "$CPUS" -f csv 2>> "$OUT/log.txt"); then
            echo "# $t, repetition $r: ferry_perf failed (see $OUT/log.txt)" >&2
            continue
        fi
        echo "$out" | awk -F, -v t="$t" '$1 == t {
            if ($12 != "") print t, $2, $12, "bw"; else print t, $2, $7, "lat" }' >> "$RAW"
    done
    echo "# repetition $r done, load $(load)" >&2
done

# The median per (test, size); per-message time and rate; each size against the next larger.
sort -k1,1 -k2,2n -k3,3g "$RAW" | awk -v tol="$TOL" -v abs="$ABS" -v tests="$TESTS" -v flagged="$FLAGGED" '
    { key = $1 SUBSEP $2; n[key]++; v[key, n[key]] = $3; kind[$1] = $4
      if (!((key) in seen)) { seen[key] = 1; sizes[$1] = sizes[$1] " " $2 } }
    function median(key,   c) { c = n[key]; return c % 2 ? v[key, (c + 1) / 2] : (v[key, c / 2] + v[key, c / 2 + 1]) / 2 }
    END {
        bad_total = 0
        nt = split(tests, tl, ",")
        for (i = 1; i <= nt; i++) {
            t = tl[i]
            if (!(t in sizes)) { printf "\n%s: no figures\n", t; bad_total++; continue }
            ns = split(substr(sizes[t], 2), sz, " ")
            for (j = 1; j <= ns; j++) {
                m = median(t SUBSEP sz[j])
                fig[j] = m
                us[j] = kind[t] == "bw" ? (m > 0 ? sz[j] / m : 0) : m
                rate[j] = us[j] > 0 ? sz[j] / us[j] : 0
            }
            printf "\n%-8s %10s %12s %12s %12s\n", t, "size", kind[t] == "bw" ? "MB/s" : "p50 us", "us/msg", "MB/s"
            bt = 0; bb = 0; lt = ""; lb = ""
            for (j = 1; j <= ns; j++) {
                flag = ""
                # latency: also more than the clock step (--abs) apart
                lat = kind[t] == "lat"
                if (j < ns && us[j] > us[j + 1] * (1 + tol / 100) && (!lat || us[j] - us[j + 1] > abs)) {
                    flag = sprintf("T: %.0f%% longer than %d", (us[j] / us[j + 1] - 1) * 100, sz[j + 1])
                    bt++; lt = lt " " sz[j]
                }
                if (j < ns && rate[j + 1] < rate[j] * (1 - tol / 100) &&
                    (!lat || sz[j + 1] / rate[j + 1] - sz[j + 1] / rate[j] > abs)) {
                    flag = flag (flag == "" ? "" : "; ") sprintf("B: %d moves %.0f%% fewer bytes/s", sz[j + 1], (1 - rate[j + 1] / rate[j]) * 100)
                    bb++; lb = lb " " sz[j]
                }
                printf "%-8s %10d %12.3f %12.3f %12.1f  %s\n", "", sz[j], fig[j], us[j], rate[j], flag
                if (flag != "")
                    print t, sz[j], sz[j + 1] > flagged
            }
            summary[i] = sprintf("%-8s %s; %s", t,
                bt ? "T at" lt : "time monotonic", bb ? "B at" lb : "rate monotonic")
            bad_total += bt + bb
        }
        printf "\n"
        for (i = 1; i <= nt; i++) if (i in summary) print "# " summary[i]
        exit bad_total ? 1 : 0
    }'
status=$?
if [ "$RECHECK" = 0 ] || [ ! -s "$FLAGGED" ]; then
    exit $status
fi

# Each flagged pair again: RECHECK rounds, one process pair each, the two sizes in turn.
echo
echo "# recheck, $(date -u '+%H:%M UTC'), load $(load): each flagged pair in $RECHECK rounds of one process pair"
echo "# (sizes in alternating order); us per message, medians over the rounds [min-max]"
stand=0
while read -r t a b; do
    vals=""
    for ((r = 1; r <= RECHECK; r++)); do
        if ((r % 2)); then s="$a,$b"; else s="$b,$a"; fi
        if ! out=$(env FERRY_TLS="$TLS" "${ENVS[@]}" timeout 600 "$FRUN" -n 2 --timeout 590 \
                "$PERF" -t "$t" -s "$s" ${ITERS:+-n "$ITERS"} -C "$CPUS" -f csv 2>> "$OUT/log.txt"); then
            echo "# $t -s $s, round $r: ferry_perf failed (see $OUT/log.txt)" >&2
            continue
        fi
        vals+=$(echo "$out" | awk -F, -v t="$t" -v r="$r" '$1 == t {
            if ($12 != "") print r, $2, ($12 > 0 ? $2 / $12 : 0), "bw"; else print r, $2, $7, "lat" }')
        vals+=$'\n'
    done
    printf '%s' "$vals" | awk -v t="$t" -v a="$a" -v b="$b" -v tol="$TOL" -v abs="$ABS" '
        NF == 4 { if ($2 == a) ua[$1] = $3; else ub[$1] = $3; lat = $4 == "lat" }
        function med(v, n,   i, j, x) {
            for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j] < v[j - 1]; j--) { x = v[j]; v[j] = v[j - 1]; v[j - 1] = x }
            return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }
        END {
            n = 0; kt = 0; kb = 0
            for (r in ua) if (r in ub) {
                n++; A[n] = ua[r]; B[n] = ub[r]
                kt += ua[r] > ub[r]; kb += ub[r] / b > ua[r] / a
            }
            if (n == 0) { printf "%-8s %d vs %d: no figures\n", t, a, b; exit 2 }
            ma = med(A, n); mb = med(B, n)
            st = ma > mb * (1 + tol / 100) && (!lat || ma - mb > abs) && 2 * kt > n
            sb = b / mb < (a / ma) * (1 - tol / 100) && (!lat || mb - b * ma / a > abs) && 2 * kb > n
            printf "%-8s %8d vs %-8d %8.3f [%.3f-%.3f] vs %8.3f [%.3f-%.3f]; %d slower in %d of %d rounds, %d moves fewer bytes/s in %d: %s\n",
                t, a, b, ma, A[1], A[n], mb, B[1], B[n], a, kt, n, b, kb,
                st || sb ? "stands (" (st ? "T" : "") (sb ? "B" : "") ")" : "gone"
            exit st || sb ? 1 : 0
        }'
    rc=$?
    [ $rc = 1 ] && stand=$((stand + 1))
done < "$FLAGGED"
echo "# recheck: $stand of $(wc -l < "$FLAGGED") flags stand"
[ $stand = 0 ]
