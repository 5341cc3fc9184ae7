#!/usr/bin/env bash
# bench/hosts.sh - ferry between two "hosts" of the namespace testbed (tests/hosts/testbed.sh:
# a network namespace each, veth into a bridge, private /dev/shm), in one run:
#
#   lanes  1 MiB AM bandwidth (ferry_perf am_bw) and 8 B AM latency (am_lat) with the default
#          lane choice, with FERRY_AM_LANE=latency (udp AM lane, tcp bulk lane), and with
#          FERRY_TLS=tcp and FERRY_TLS=udp forced; the ratios of the
#          default to the best forced figure (issue 11's goals: bandwidth >= 0.9x, latency
#          <= 1.1x)
#   tcp    tcp's policy toward another host (docs/tcp.md: FERRY_TCP_LINKS connections per
#          peer, FERRY_TCP_CONGESTION): 1 MiB am_bw for links 1/2/3 x congestion control
#          system (this machine: bbr) / cubic / reno, on the clean link and on an impaired
#          one (fy_impair on both hosts' egress: --rate, --loss)
#   rails  two links between the hosts, each limited to --rail-rate by fy_impair on both
#          hosts' egress: 1 MiB am_bw over one link (FERRY_TCP_IF_INCLUDE=eth0) against both
#          links offered (FERRY_TLS=tcp, and the default lanes: both stripe 1 MiB AMs over
#          the two links, FERRY_MAX_RAILS=2); issue 11's multi-rail goal is >= 1.6x one link
#
#   bench/hosts.sh [--reps N] [--only lanes,tcp,rails] [--build DIR] [--cpus A,B]
#                  [--impair "fy_impair options"] [--rail-rate R] [--out FILE]
#
# Every figure is the median of N repetitions (default 3), configurations interleaved within
# a repetition so that load drifting on a shared machine hits all of them alike.  ferryrun
# runs on host tbA and starts one ferry_perf rank on each host through tests/hosts/tb-agent;
# rank i is pinned to the i-th cpu of --cpus.  Loads are bounded: fixed iteration counts,
# two processes (and the impairer) at a time, a timeout on every run.  Results (markdown,
# with the exact commands) go to stdout and --out; the log to $BUILD/bench-hosts/log.txt.
# Needs root or user namespaces (exit 77 otherwise, like the tests).
set -u -o pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
BUILD=${FERRY_BENCH_BUILD:-$ROOT/build-bench}
REPS=3
ONLY=lanes,tcp,rails
RAIL_RATE=80M
CPUS=0,1
IMPAIR="--rate 200M --loss 0.1 --seed 7"
OUT=""
TMO=120

while [ $# -gt 0 ]; do
    case "$1" in
    --reps) REPS=$2; shift ;;
    --only) ONLY=$2; shift ;;
    --build) BUILD=$2; shift ;;
    --cpus) CPUS=$2; shift ;;
    --impair) IMPAIR=$2; shift ;;
    --rail-rate) RAIL_RATE=$2; shift ;;
    --out) OUT=$2; shift ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench/hosts.sh: unknown option '$1' (--help)" >&2; exit 2 ;;
    esac
    shift
done
case "$REPS" in '' | *[!0-9]* | 0) echo "bench/hosts.sh: --reps N, N >= 1" >&2; exit 2 ;; esac
want() { case ",$ONLY," in *",$1,"*) return 0 ;; esac; return 1; }
say() { echo "[hosts] $*" >&2; }

WORK=$BUILD/bench-hosts
mkdir -p "$WORK"
LOG=$WORK/log.txt
RAW=$WORK/raw.txt
: > "$LOG"
: > "$RAW"
: > "$WORK/commands.txt"

# ---- build ------------------------------------------------------------------------------------
if [ ! -x "$BUILD/tools/ferry_perf" ] || [ ! -x "$BUILD/tools/ferryrun" ]; then
    say "building ferry (Release) in $BUILD"
    if ! cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DFERRY_BUILD_TESTS=OFF \
            >> "$LOG" 2>&1 ||
       ! cmake --build "$BUILD" -j2 --target ferry_perf ferryrun >> "$LOG" 2>&1; then
        tail -20 "$LOG" >&2
        say "ferry does not build (log: $LOG)"
        exit 1
    fi
fi
PERF=$BUILD/tools/ferry_perf
FRUN=$BUILD/tools/ferryrun
FY_IMPAIR=$WORK/fy_impair
export FY_IMPAIR
if { want tcp || want rails; } && ! cc -O2 -D_GNU_SOURCE -o "$FY_IMPAIR" "$ROOT/tests/faults/fy_impair.c" \
        $(pkg-config --cflags --libs libnetfilter_queue 2>>"$LOG") >> "$LOG" 2>&1; then
    say "fy_impair does not build (libnetfilter_queue missing?): the impaired runs are skipped"
    FY_IMPAIR=""
fi

# ---- the testbed ------------------------------------------------------------------------------
source "$ROOT/tests/hosts/testbed.sh"
tb_can || exit 77
tb_init
tb_host tbA shm=private
tb_host tbB shm=private
tb_up || { say "could not build the testbed"; exit 1; }
AGENT=$ROOT/tests/hosts/tb-agent
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)

# perf KEY "ENV..." TEST SIZE ITERS: one ferry_perf run across the two hosts; records
# "KEY value" (am_lat: the median one-way us; am_bw: MB/s).
perf() {
    local key=$1 envs=$2 test=$3 size=$4 n=$5 w out col
    w=$((n / 10 > 10 ? n / 10 : 10))
    local cmd="${envs:+$envs }$FRUN --timeout $((TMO - 10)) --hosts tbA:1,tbB:1 --agent $AGENT $PERF -t $test -s $size -n $n -w $w -C $CPUS -f csv"
    echo "$key	$cmd" >> "$WORK/commands.txt"
    out=$(timeout $TMO "$AGENT" -E tbA "env $cmd" 2>> "$LOG")
    [ "$test" = am_lat ] && col=7 || col=12
    echo "$out" | awk -F, -v k="$key" -v c=$col -v t="$test" '$1 == t { print k, $c }' >> "$RAW"
    echo "$out" | grep -q "^$test," || say "no figure for $key (see $LOG)"
}

median() { # key -> the median of its figures, or n/a
    awk -v k="$1" '$1 == k { v[n++] = $2 } END {
        if (n == 0) { print "n/a"; exit }
        for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
        print (n % 2) ? v[int(n / 2)] : (v[n / 2 - 1] + v[n / 2]) / 2 }' "$RAW"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "n/a" || b == "n/a" || b == 0) print "n/a"; else printf "%.2f", a / b }'; }
best() { # max|min a b
    awk -v m="$1" -v a="$2" -v b="$3" 'BEGIN {
        if (a == "n/a") { print b; exit } if (b == "n/a") { print a; exit }
        print (m == "max") == (a > b) ? a : b }'
}

LANE_CONFS=("default|" "latency|FERRY_AM_LANE=latency" "tcp|FERRY_TLS=tcp" "udp|FERRY_TLS=udp")
LINKS=(1 2 3)
CCS=(system cubic reno)

for ((rep = 1; rep <= REPS; rep++)); do
    say "repetition $rep of $REPS"
    if want lanes; then
        for c in "${LANE_CONFS[@]}"; do
            perf "lanes.${c%%|*}.bw" "${c#*|}" am_bw 1m 128
            perf "lanes.${c%%|*}.lat" "${c#*|}" am_lat 8 20000
        done
    fi
    if want tcp; then
        for l in "${LINKS[@]}"; do
            for cc in "${CCS[@]}"; do
                perf "tcp.clean.$l.$cc" "FERRY_TLS=tcp FERRY_TCP_LINKS=$l FERRY_TCP_CONGESTION=$cc" \
                    am_bw 1m 128
            done
        done
        if [ -n "$FY_IMPAIR" ]; then
            tb_impair tbA 0 out -- $IMPAIR >> "$LOG" 2>&1 &&
                tb_impair tbB 0 out -- $IMPAIR >> "$LOG" 2>&1 || say "the impairer did not start"
            for l in "${LINKS[@]}"; do
                for cc in "${CCS[@]}"; do
                    perf "tcp.impaired.$l.$cc" \
                        "FERRY_TLS=tcp FERRY_TCP_LINKS=$l FERRY_TCP_CONGESTION=$cc" am_bw 1m 64
                done
            done
            tb_impair_stop
            cat "$FYHOSTS_DIR"/impair*.log >> "$LOG" 2>/dev/null
        fi
    fi
done

# ---- rails: a second testbed, two links per host, each rate-limited -----------------------------
if want rails && [ -n "$FY_IMPAIR" ]; then
    tb_down
    tb_init
    tb_host tbA shm=private links=2
    tb_host tbB shm=private links=2
    tb_up || { say "could not build the two-link testbed"; exit 1; }
    for h in tbA tbB; do
        for k in 0 1; do
            tb_impair $h $k out -- --rate "$RAIL_RATE" >> "$LOG" 2>&1 || say "the impairer did not start"
        done
    done
    for ((rep = 1; rep <= REPS; rep++)); do
        say "rails: repetition $rep of $REPS"
        perf rails.one "FERRY_TLS=tcp FERRY_TCP_IF_INCLUDE=eth0" am_bw 1m 32
        perf rails.tcp "FERRY_TLS=tcp" am_bw 1m 32
        perf rails.default "" am_bw 1m 32
    done
    tb_impair_stop
fi
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- report -----------------------------------------------------------------------------------
report() {
    echo "Generated by \`bench/hosts.sh --reps $REPS --only $ONLY\` on $(date -u '+%Y-%m-%d %H:%M') UTC,"
    echo "ferry $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)'),"
    echo "$(nproc) cpus, kernel $(uname -r); load average before / after: $LOAD0 / $LOAD1."
    echo "Two testbed hosts (veth into a bridge, MTU 1500), one ferry_perf rank on each, pinned to"
    echo "cpus $CPUS; medians of $REPS repetitions.  Bandwidth MB/s = 10^6 B/s, window 64."
    echo
    if want lanes; then
        local db tb ub dl tl ul lb ll
        db=$(median lanes.default.bw) tb=$(median lanes.tcp.bw) ub=$(median lanes.udp.bw)
        dl=$(median lanes.default.lat) tl=$(median lanes.tcp.lat) ul=$(median lanes.udp.lat)
        lb=$(median lanes.latency.bw) ll=$(median lanes.latency.lat)
        echo "| lanes | default | FERRY_AM_LANE=latency | FERRY_TLS=tcp | FERRY_TLS=udp | default ÷ best forced | latency ÷ best forced | goal |"
        echo "|---|---:|---:|---:|---:|---:|---:|---|"
        echo "| 1 MiB am_bw, MB/s | $db | $lb | $tb | $ub | $(ratio "$db" "$(best max "$tb" "$ub")") | $(ratio "$lb" "$(best max "$tb" "$ub")") | >= 0.9 |"
        echo "| 8 B am_lat, us one-way | $dl | $ll | $tl | $ul | $(ratio "$dl" "$(best min "$tl" "$ul")") | $(ratio "$ll" "$(best min "$tl" "$ul")") | <= 1.1 |"
        echo
    fi
    if want tcp; then
        local kind l cc
        for kind in clean impaired; do
            [ $kind = impaired ] && [ -z "$FY_IMPAIR" ] && continue
            if [ $kind = clean ]; then
                echo "tcp, 1 MiB am_bw MB/s, clean link (system congestion control: $(sysctl -n net.ipv4.tcp_congestion_control))"
            else
                echo "tcp, 1 MiB am_bw MB/s, impaired: fy_impair $IMPAIR on both hosts' egress"
            fi
            echo
            printf '| FERRY_TCP_LINKS |'
            printf ' %s |' "${CCS[@]}"
            printf '\n|---:|'
            printf -- '---:|%.0s' "${CCS[@]}"
            echo
            for l in "${LINKS[@]}"; do
                printf '| %s |' "$l"
                for cc in "${CCS[@]}"; do printf ' %s |' "$(median "tcp.$kind.$l.$cc")"; done
                echo
            done
            echo
        done
    fi
    if want rails && [ -n "$FY_IMPAIR" ]; then
        local one tcp2 def2
        one=$(median rails.one) tcp2=$(median rails.tcp) def2=$(median rails.default)
        echo "Two links, each limited to $RAIL_RATE bit/s each way (fy_impair --rate on both hosts' egress), 1 MiB am_bw MB/s"
        echo
        echo "| one link (FERRY_TCP_IF_INCLUDE=eth0) | two links, FERRY_TLS=tcp | two links, default lanes | tcp ÷ one | default ÷ one | goal |"
        echo "|---:|---:|---:|---:|---:|---|"
        echo "| $one | $tcp2 | $def2 | $(ratio "$tcp2" "$one") | $(ratio "$def2" "$one") | >= 1.6 |"
        echo
    fi
    echo "Commands (run on host tbA through \`tests/hosts/tb-agent -E tbA\`; the build in $BUILD):"
    echo
    echo '```'
    grep -v '^tcp\.' "$WORK/commands.txt" | sort -u -t'	' -k1,1 | cut -f2 | sed "s|$ROOT/||g"
    grep '^tcp\.' "$WORK/commands.txt" | cut -f2 | sed "s|$ROOT/||g" |
        sed 's/FERRY_TCP_LINKS=[0-9]*/FERRY_TCP_LINKS=$L/; s/FERRY_TCP_CONGESTION=[a-z]*/FERRY_TCP_CONGESTION=$CC/' |
        sort -u | sed "s/^/for L in ${LINKS[*]}; do for CC in ${CCS[*]}; do /; s/\$/; done; done/"
    echo '```'
    [ -n "$FY_IMPAIR" ] && want tcp &&
        echo "(the -n 64 runs with \`tb_impair tbA 0 out -- $IMPAIR\` and the same on tbB: tests/hosts/testbed.sh)"
    want rails && [ -n "$FY_IMPAIR" ] &&
        echo "(the -n 32 runs on hosts with links=2 and \`tb_impair HOST LINK out -- --rate $RAIL_RATE\` on both links of both hosts)"
    return 0
}
report | tee ${OUT:+"$OUT"}
