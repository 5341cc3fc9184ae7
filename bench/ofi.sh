#!/usr/bin/env bash
# ferry over its ofi transport against libfabric itself, per provider, in one run:
#   8 B latency      ferry_perf am_lat (FERRY_TLS=self,ofi)  vs fi_pingpong -S 8 and ofi_floor pingpong
#   1 MiB ping-pong  ferry_perf am_lat -s 1m (as MB/s)       vs fi_pingpong -S 1048576
#                    (and again with FERRY_OFI_RNDV_THRESH=inf: proto's 64 KiB fragments, the
#                    path before the AM rendezvous, in the same minutes)
#   1 MiB put        ferry_perf put_bw -s 1m                 vs ofi_floor write (the raw fi_write floor)
# and ferry's own shm, tcp and udp transports for the same figures.  Prints the rows of the
# "ofi" section of bench/RESULTS.md.
#   Usage: bench/ofi.sh [build]     (ITERS=2000 small, ITERS_BIG=200 at 1 MiB)
#          bench/ofi.sh build rounds   the 1 MiB ping-pong only, interleaved round after round
#                                      (ROUNDS=3): ferry by rendezvous, by fragments, fi_pingpong
# Every program is pinned as ferry_perf pins its ranks (-C 0,1): fi_pingpong's server on CPU 0
# and its client on CPU 1, ofi_floor (a parent and its forked child) on CPUs 0-1, so on a
# loaded machine the raw tools are not penalised by migrating where ferry is not.
set -eu
cd "$(dirname "$0")/.."
build=${1:-build}
n=${ITERS:-2000} nb=${ITERS_BIG:-200}
port=$((46000 + RANDOM % 1000))
perf() { # FERRY_TLS provider test size iters -> csv line of ferry_perf
    FERRY_TLS=$1 FERRY_OFI_PROVIDER=$2 FERRY_OFI_RNDV_THRESH=${RNDV:-0} timeout 120 "$build/tools/ferryrun" -n 2 --timeout 110 \
        "$build/tools/ferry_perf" -t "$3" -s "$4" -n "$5" -C 0,1 -f csv 2> /dev/null |
        awk -F, -v t="$3" '$1 == t'
}
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
if [ "${2:-}" = rounds ]; then
    for p in "tcp;ofi_rxm" shm; do
        for i in $(seq "${ROUNDS:-3}"); do
            r=$(perf self,ofi "$p" am_lat 1048576 "$nb" | awk -F, '{if ($7 > 0) printf "%.0f", 1048576 / $7}')
            f=$(RNDV=inf perf self,ofi "$p" am_lat 1048576 "$nb" | awk -F, '{if ($7 > 0) printf "%.0f", 1048576 / $7}')
            echo "$p round $i, load $(cut -d' ' -f1 /proc/loadavg): rendezvous $r, fragments $f, fi_pingpong $(fipp "$p" 1048576 "$nb" | cut -d' ' -f2) MB/s"
        done
    done
    exit 0
fi
echo "Started $(date -u '+%Y-%m-%d %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)."
echo
echo "| provider | ferry am_lat 8 B p50 us | fi_pingpong 8 B us | ofi_floor 8 B us | ferry 1 MiB ping-pong MB/s | fragments (RNDV_THRESH=inf) MB/s | fi_pingpong 1 MiB MB/s | ferry put 1 MiB MB/s | ofi_floor fi_write 1 MiB MB/s |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for p in "tcp;ofi_rxm" "udp;ofi_rxd" shm; do
    lat=$(perf self,ofi "$p" am_lat 8 "$n" | cut -d, -f7)
    big=$(perf self,ofi "$p" am_lat 1048576 "$nb" | awk -F, '{if ($7 > 0) printf "%.0f", 1048576 / $7}')
    frag=$(RNDV=inf perf self,ofi "$p" am_lat 1048576 "$nb" | awk -F, '{if ($7 > 0) printf "%.0f", 1048576 / $7}')
    put=$(perf self,ofi "$p" put_bw 1048576 "$nb" | cut -d, -f12)
    f8=$(fipp "$p" 8 "$n" | cut -d' ' -f1)
    f1m=$(fipp "$p" 1048576 "$nb" | cut -d' ' -f2)
    fl8=$(timeout 120 taskset -c 0,1 "$build/bench/ofi_floor" "$p" pingpong 8 "$n" | awk '{print $(NF-3)}')
    flw=$(timeout 120 taskset -c 0,1 "$build/bench/ofi_floor" "$p" write 1048576 "$nb" | awk '{print $(NF-1)}')
    echo "| $p | $lat | $f8 | $fl8 | $big | $frag | $f1m | $put | $flw |"
done
for t in shm tcp udp; do
    lat=$(perf "self,$t" "" am_lat 8 "$n" | cut -d, -f7)
    big=$(perf "self,$t" "" am_lat 1048576 "$nb" | awk -F, '{if ($7 > 0) printf "%.0f", 1048576 / $7}')
    put=$(perf "self,$t" "" put_bw 1048576 "$nb" | cut -d, -f12)
    echo "| ferry $t | $lat | - | - | $big | - | - | $put | - |"
done
echo
echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)."
