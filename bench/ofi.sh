#!/usr/bin/env bash
# ferry over its ofi transport against libfabric itself, per provider, in one run:
#   8 B latency      ferry_perf am_lat (FERRY_TLS=self,ofi)  vs fi_pingpong -S 8
#   1 MiB ping-pong  ferry_perf am_lat -s 1m (as MB/s)       vs fi_pingpong -S 1048576
#   1 MiB put        ferry_perf put_bw -s 1m                 vs ofi_floor write (the raw fi_write floor)
# and ferry's own shm, tcp and udp transports for the same figures.  Prints the rows of the
# "ofi" section of bench/RESULTS.md.
#   Usage: bench/ofi.sh [build]   (REPS=5 repetitions, ITERS=2000 small, ITERS_BIG=200 at 1 MiB;
#                                  PROVIDERS="tcp;ofi_rxm shm" a subset, OWN=0 without ferry's own;
#                                  FRAG=1 adds the 1 MiB ping-pong by proto's 64 KiB fragments,
#                                  FERRY_OFI_RNDV_THRESH=inf, the path before the AM rendezvous)
# A machine shared with others is never quiet for long, and one disturbed minute used to decide
# a row.  So every row is REPS repetitions, and each repetition runs ferry and its reference
# back to back (alternating which goes first), so both see the same minute; a row prints the
# median of each column and the median of the per-repetition ratios (ferry / reference; for
# latency, below 1 is better), which is what the goals are judged by, and the ratios' range.
# Every program is pinned as ferry_perf pins its ranks (-C 0,1): fi_pingpong's server on CPU 0
# and its client on CPU 1, ofi_floor (a parent and its forked child) on CPUs 0-1, so on a
# loaded machine the raw tools are not penalised by migrating where ferry is not.
set -eu
cd "$(dirname "$0")/.."
build=${1:-build}
n=${ITERS:-2000} nb=${ITERS_BIG:-200} reps=${REPS:-5}
port=$((46000 + RANDOM % 1000))
perf() { # FERRY_TLS provider test size iters -> csv line of ferry_perf
    FERRY_TLS=$1 FERRY_OFI_PROVIDER=$2 FERRY_OFI_RNDV_THRESH=${RNDV:-0} timeout 120 "$build/tools/ferryrun" -n 2 --timeout 110 \
        "$build/tools/ferry_perf" -t "$3" -s "$4" -n "$5" -C 0,1 -f csv 2> /dev/null |
        awk -F, -v t="$3" '$1 == t'
}
lat8() { perf "$@" am_lat 8 "$n" | cut -d, -f7; }
pp1m() { perf "$@" am_lat 1048576 "$nb" | awk -F, '{if ($7 > 0) printf "%.0f", 1048576 / $7}'; }
put1m() { perf "$@" put_bw 1048576 "$nb" | cut -d, -f12; }
fipp() { # provider size iters -> "usec/xfer MB/s" of fi_pingpong
    port=$((port + 1))
    timeout 120 taskset -c 0 fi_pingpong -p "$1" -e rdm -B $port -I "$3" -S "$2" > /dev/null 2>&1 &
    local spid=$! k
    for k in $(seq 100); do # until the server's control port listens
        ss -Hltn "sport = :$port" 2> /dev/null | grep -q . && break
        sleep 0.05
    done
    timeout 120 taskset -c 1 fi_pingpong -p "$1" -e rdm -P $port -I "$3" -S "$2" 127.0.0.1 2> /dev/null |
        awk '$1 ~ /^[0-9]+[kmg]?$/ {print $7, $6}' | tail -1
    wait $spid 2> /dev/null || true
}
floor_write() { timeout 120 taskset -c 0,1 "$build/bench/ofi_floor" "$1" write 1048576 "$nb" | awk '{print $(NF-1)}'; }
med() { # numbers (empty or 0: a failed run, left out) -> their median, or "-"
    printf '%s\n' "$@" | awk '$1 + 0 > 0' | sort -g |
        awk '{v[NR] = $1} END {if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2];
             else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
ratios() { # "a b" pairs -> "median (min-max)" of a/b
    printf '%s\n' "$@" | awk 'NF == 2 && $1 + 0 > 0 && $2 + 0 > 0 {printf "%.3f\n", $1 / $2}' | sort -g |
        awk '{v[NR] = $1} END {if (NR == 0) {print "-"; exit}
             m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
             printf "%.2f (%.2f-%.2f)", m, v[1], v[NR]}'
}
pair() { # first-command second-command rep -> "ferry ref", the order alternating per rep
    local a b
    if [ $(($3 % 2)) -eq 1 ]; then a=$(eval "$1"); b=$(eval "$2"); else b=$(eval "$2"); a=$(eval "$1"); fi
    echo "${a:-0} ${b:-0}"
}
echo "Started $(date -u '+%Y-%m-%d %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg); $reps repetitions per row."
echo
hdr="| provider | ferry 8 B us | fi_pingpong 8 B us | ratio (<= 1.1) | ferry 1 MiB ping-pong MB/s | fi_pingpong 1 MiB MB/s | ratio (>= 0.95) | ferry put 1 MiB MB/s | fi_write floor MB/s | ratio (>= 0.9) |"
[ "${FRAG:-0}" = 1 ] && hdr="$hdr fragments MB/s |"
echo "$hdr"
echo "$hdr" | awk -F'|' '{s = "|"; for (i = 2; i < NF; i++) s = s " --- |"; print s}'
for p in ${PROVIDERS:-"tcp;ofi_rxm" "udp;ofi_rxd" shm}; do
    L=() B=() P=() F=() LR=() BR=() PR=()
    for r in $(seq "$reps"); do
        x=$(pair "lat8 self,ofi '$p'" "fipp '$p' 8 $n | cut -d' ' -f1" "$r")
        L+=("${x% *}") LR+=("$x")
        F+=("${x#* }")
        x=$(pair "pp1m self,ofi '$p'" "fipp '$p' 1048576 $nb | cut -d' ' -f2" "$r")
        B+=("${x% *}") BR+=("$x")
        y=$(pair "put1m self,ofi '$p'" "floor_write '$p'" "$r")
        P+=("${y% *}") PR+=("$y")
        FB+=("${x#* }") FW+=("${y#* }")
        [ "${FRAG:-0}" = 1 ] && G+=("$(RNDV=inf pp1m self,ofi "$p")")
    done
    row="| $p | $(med "${L[@]}") | $(med "${F[@]}") | $(ratios "${LR[@]}") | $(med "${B[@]}") | $(med "${FB[@]}") | $(ratios "${BR[@]}") | $(med "${P[@]}") | $(med "${FW[@]}") | $(ratios "${PR[@]}") |"
    [ "${FRAG:-0}" = 1 ] && row="$row $(med "${G[@]}") |"
    echo "$row"
    unset FB FW G
done
for t in $([ "${OWN:-1}" = 1 ] && echo shm tcp udp); do
    L=() B=() P=()
    for r in $(seq "$reps"); do
        L+=("$(lat8 "self,$t" "")") B+=("$(pp1m "self,$t" "")") P+=("$(put1m "self,$t" "")")
    done
    row="| ferry $t | $(med "${L[@]}") | - | - | $(med "${B[@]}") | - | - | $(med "${P[@]}") | - | - |"
    [ "${FRAG:-0}" = 1 ] && row="$row - |"
    echo "$row"
done
echo
echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)."
