#!/usr/bin/env bash
# bench/run.sh - ferry side by side with the systems it is measured against, in one run, on
# the same message sizes, and the results written to bench/RESULTS.md and bench/plot.png.
#
#   bench/run.sh [--quick] [--reps N] [--only shm,tcp,udp] [--cpus A,B] [--build DIR]
#                [--out FILE] [--plot FILE] [--report]
#
#   --quick   3 repetitions of a fifth of the iterations (a minute or two, for a first look)
#   --report  measure nothing: rewrite RESULTS.md and the plot from the last run's raw figures
#
# What runs (each figure the median of N repetitions, default 5; each repetition's own figure
# is the median of its iterations where the tool gives one):
#   shm  ferry_perf (ferryrun -n 2, FERRY_TLS=shm)  vs  ucx_perftest (UCX_TLS=sm,self: ucp_am_lat,
#        tag_lat, tag_bw (8 B), ucp_am_bw, ucp_put_lat, ucp_put_bw, ucp_get)  vs  Open MPI
#        (btl self,vader) and MPICH (hydra) running bench/mpi_pingpong.c  vs  bench/floor_shm.c (the floors)
#   tcp  ferry_perf (FERRY_TLS=tcp)  vs  ucx_perftest (UCX_TLS=tcp)  vs  Open MPI (btl self,tcp)
#        vs  bench/tcp_raw.c (the raw socket floor)
#   udp  ferry_perf (FERRY_TLS=udp)  vs  fi_pingpong -p "udp;ofi_rxd" (libfabric's reliable
#        datagrams)  vs  bench/udp_raw.c
#
# Counting: ucx_perftest's tag_bw streams (receives kept posted, one acknowledgement at the
# end), so its row is set against ferry_perf's tag_stream, which counts the same way; ferry's
# tag_bw (osu_bw's acknowledged windows, as the MPI references) is printed beside it.
#
# Fairness: every program gets the same sizes and iteration counts (ferry_perf's defaults:
# ~256 MiB per latency run, ~1 GiB per bandwidth run, within bounds), the same window of 64
# for bandwidth and rate, and the same pinning: one process per core, rank/side i on the i-th
# cpu of --cpus (ferry_perf -C, mpi_pingpong -C, ucx_perftest -c, udp_raw -C, taskset for
# the others).
#
# Robustness: a reference that is missing or fails gives "n/a" and a line saying why; the run
# goes on.  Only a ferry that does not build stops it.  The script owns the part of
# RESULTS.md between its two markers and leaves the rest of the file alone.
set -u -o pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
BUILD=${FERRY_BENCH_BUILD:-$ROOT/build-bench}
OUT=$HERE/RESULTS.md
PLOT=$HERE/plot.png
REPS=5
QUICK=0
ONLY="shm,tcp,udp"
CPUS="0,1"
SIZES=(8 64 1024 65536 1048576)
WINDOW=64
TMO=300
REPORT=0

usage() {
    sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}

while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1; REPS=3 ;;
    --report) REPORT=1 ;;
    --reps) REPS=$2; shift ;;
    --only) ONLY=$2; shift ;;
    --cpus) CPUS=$2; shift ;;
    --build) BUILD=$2; shift ;;
    --out) OUT=$2; shift ;;
    --plot) PLOT=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench/run.sh: unknown option '$1' (--help for help)" >&2; exit 2 ;;
    esac
    shift
done
case "$REPS" in ''|*[!0-9]*|0) echo "bench/run.sh: --reps wants a positive number" >&2; exit 2 ;; esac
CPU0=${CPUS%%,*}
CPU1=${CPUS##*,}

WORK=$BUILD/bench-run
RAW=$WORK/raw.txt        # "key value" per repetition
NOTES=$WORK/notes.txt    # "system<TAB>why it is n/a"
CMDS=$WORK/commands.txt  # "section<TAB>exact command"
LOG=$WORK/log.txt        # everything the programs said on stderr
META=$WORK/meta.sh       # when, how, and the load, for --report
mkdir -p "$WORK"
if [ $REPORT = 1 ] && [ ! -f "$META" ]; then
    echo "bench/run.sh: --report needs a previous run's figures in $WORK" >&2
    exit 1
fi
[ $REPORT = 1 ] || { : > "$RAW"; : > "$NOTES"; : > "$CMDS"; : > "$LOG"; }
PORT=$((20000 + RANDOM % 20000))

say() { echo "[bench] $*" >&2; }
want() { case ",$ONLY," in *",$1,"*) return 0 ;; esac; return 1; }
put() { [ -n "${2:-}" ] && [ "$2" != "n/a" ] && echo "$1 $2" >> "$RAW"; return 0; }
note() { grep -q "^$1	" "$NOTES" || printf '%s\t%s\n' "$1" "$2" >> "$NOTES"; }
cmdrec() { grep -qxF "$1	$2" "$CMDS" || printf '%s\t%s\n' "$1" "$2" >> "$CMDS"; }
have() { command -v "$1" > /dev/null 2>&1; }

# Iterations for a size, as ferry_perf chooses them by default (--quick: a fifth).
iters() { # lat|bw size
    awk -v k="$1" -v s="$2" -v q="$QUICK" 'BEGIN {
        if (s < 1) s = 1
        if (k == "bw") { n = int(1073741824 / s); lo = 100; hi = 1000000 }
        else { n = int(268435456 / s); lo = 100; hi = 100000 }
        if (n < lo) n = lo; if (n > hi) n = hi
        if (q) { n = int(n / 5); if (n < 50) n = 50 }
        if (k == "bw") n = int((n + 63) / 64) * 64
        print n }'
}
warm() { echo $(( $1 / 10 > 10 ? $1 / 10 : 10 )); }

wait_port() { # port: until something listens on it (5 s at most)
    for _ in $(seq 100); do
        ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return 0
        sleep 0.05
    done
    return 1
}

if [ $REPORT = 0 ]; then
# ---- build ------------------------------------------------------------------------------------

say "building ferry in $BUILD"
# every transport in the tree (FERRY_BENCH_CMAKE_ARGS="-DFERRY_TL_ENABLE=self;shm" narrows it)
if ! cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DFERRY_BUILD_TESTS=OFF \
        "-DFERRY_TL_ENABLE=self;shm;udp;tcp;ofi" ${FERRY_BENCH_CMAKE_ARGS:-} >> "$LOG" 2>&1 ||
   ! cmake --build "$BUILD" -j2 --target ferry_perf ferryrun ferry_info >> "$LOG" 2>&1; then
    tail -30 "$LOG" >&2
    say "ferry does not build: nothing to measure (log: $LOG)"
    exit 1
fi
PERF=$BUILD/tools/ferry_perf
FRUN=$BUILD/tools/ferryrun
INFO=$BUILD/tools/ferry_info
FERRY_TLS_BUILT=$("$INFO" 2>/dev/null | sed -n 's/^# transports compiled in: //p')

BIN=$WORK/bin
mkdir -p "$BIN"
build_c() { # name source compiler: a benchmark program of ours, or a note why not
    local name=$1 src=$2 cc=$3
    if [ ! -f "$src" ]; then note "$name" "$(basename "$src") is not in the tree yet"; return 1; fi
    if ! have "$cc"; then note "$name" "$cc is not installed"; return 1; fi
    if ! "$cc" -O2 -o "$BIN/$name" "$src" >> "$LOG" 2>&1; then
        note "$name" "$(basename "$src") did not compile with $cc (see $LOG)"; return 1
    fi
}
build_c mpi_ompi "$HERE/mpi_pingpong.c" mpicc.openmpi
build_c mpi_mpich "$HERE/mpi_pingpong.c" mpicc.mpich
build_c floor_shm "$HERE/floor_shm.c" cc
build_c tcp_raw "$HERE/tcp_raw.c" cc
build_c udp_raw "$HERE/udp_raw.c" cc

# ---- the runners: each runs one repetition and records "key value" lines ----------------------

# ferry_perf under ferryrun: tls kind size tests
run_ferry() {
    local tls=$1 kind=$2 size=$3 tests=$4 n w cmd out
    case " $FERRY_TLS_BUILT " in *" $tls "*) ;; *)
        note "ferry-$tls" "the $tls transport is not built (compiled in: $FERRY_TLS_BUILT)"; return ;;
    esac
    n=$(iters "$kind" "$size"); w=$(warm "$n")
    cmd="FERRY_TLS=$tls ferryrun -n 2 ferry_perf -t $tests -s $size -n $n -w $w -W $WINDOW -C $CPUS -f csv"
    cmdrec "$tls" "$cmd"
    if ! out=$(env FERRY_TLS="$tls" timeout $TMO "$FRUN" -n 2 --timeout $((TMO - 10)) "$PERF" \
               -t "$tests" -s "$size" -n "$n" -w "$w" -W $WINDOW -C "$CPUS" -f csv 2>> "$LOG"); then
        note "ferry-$tls" "ferry_perf failed over $tls (see $LOG)"
    fi
    # test,size,iters,window,lat_kind,avg,p50,p90,p99,min,max,bw,rate
    echo "$out" | awk -F, -v t="$tls" 'NR > 1 && NF >= 13 {
        if ($5 != "") { print t ".ferry." $1 ".lat." $2, $7
                        if ($1 == "am_lat" && $7 > 0) print t ".ferry.am_pp.bw." $2, $2 / $7 }
        else { print t ".ferry." $1 ".bw." $2, $12; print t ".ferry." $1 ".rate." $2, $13 } }' >> "$RAW"
    case ",$tests," in *,tag_lat,*)
        echo "$out" | grep -q "^tag_lat," ||
            note "ferry-tag" "ferry_perf says tag_lat is not available (ferry_tag_* returns FERRY_ERR_UNSUPPORTED)" ;;
    esac
    return 0
}

# ferry_perf over shm at 1, 4 and 16 MiB, from malloc'd memory (the outbox: one copy by the
# sender) and from memory ferry allocates (-M alloc: the receiver reads it in place).  The
# stream warms up for 2000 messages: the first thousand or so of a process pair run several
# times slower on this VM, whatever the path (64 KiB from malloc'd memory too)
run_ferry_big() {
    local mem t n w out
    case " $FERRY_TLS_BUILT " in *" shm "*) ;; *) return ;; esac
    for mem in malloc alloc; do
        for t in am_bw am_lat,tag_lat; do
            if [ "$t" = am_bw ]; then n=2000; w=2000; else n=256; w=32; fi
            cmdrec shm "FERRY_TLS=shm ferryrun -n 2 ferry_perf -t $t -s 1m,4m,16m -n $n -w $w -W $WINDOW -C $CPUS -M $mem -f csv"
            out=$(env FERRY_TLS=shm timeout $TMO "$FRUN" -n 2 --timeout $((TMO - 10)) "$PERF" \
                  -t $t -s 1m,4m,16m -n $n -w $w -W $WINDOW -C "$CPUS" -M $mem -f csv \
                  2>> "$LOG") || note "ferry-shm" "ferry_perf -M $mem failed (see $LOG)"
            echo "$out" | awk -F, -v k="shm.big_$mem" 'NR > 1 && NF >= 13 {
                if ($5 != "") print k "." $1 ".lat." $2, $7
                else { print k "." $1 ".bw." $2, $12; print k "." $1 ".rate." $2, $13 } }' >> "$RAW"
        done
    done
}

# ucx_perftest, server and client on localhost: ucx_tls section test size kind key
run_ucx() {
    local utls=$1 sec=$2 test=$3 size=$4 kind=$5 key=$6 n w port spid out line extra=""
    if ! have ucx_perftest; then note "ucx" "ucx_perftest is not installed"; return; fi
    n=$(iters "$kind" "$size"); w=$(warm "$n")
    [ "$kind" = bw ] && extra="-O $WINDOW"
    port=$((PORT++))
    cmdrec "$sec" "UCX_TLS=$utls ucx_perftest -p \$PORT -c $CPU0 &  UCX_TLS=$utls ucx_perftest 127.0.0.1 -p \$PORT -c $CPU1 -t $test -s $size -n $n -w $w $extra -f -v"
    env UCX_TLS="$utls" timeout $TMO ucx_perftest -p $port -c "$CPU0" >> "$LOG" 2>&1 &
    spid=$!
    if ! wait_port $port; then
        kill $spid 2> /dev/null; wait $spid 2> /dev/null
        note "ucx-$sec" "the ucx_perftest server did not start (see $LOG)"; return
    fi
    out=$(env UCX_TLS="$utls" timeout $TMO ucx_perftest 127.0.0.1 -p $port -c "$CPU1" -t "$test" \
          -s "$size" -n "$n" -w "$w" $extra -f -v 2>> "$LOG")
    wait $spid 2> /dev/null
    # iterations,p50_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr (MB = 2^20)
    line=$(echo "$out" | tr -d ' ' | grep -E '^[0-9]+,[0-9.]+,' | tail -1)
    if [ -z "$line" ]; then note "ucx-$sec" "ucx_perftest -t $test gave no result (see $LOG)"; return; fi
    echo "$line" | awk -F, -v k="$key" -v s="$size" -v kind="$kind" '{
        if (kind == "lat") print k ".lat." s, $2
        else { print k ".bw." s, $6 * 1.048576; print k ".rate." s, $8 } }' >> "$RAW"
}

# bench/mpi_pingpong.c: which(ompi|mpich) section kind size [mca btl]
run_mpi() {
    local which=$1 sec=$2 kind=$3 size=$4 btl=${5:-self,vader} n w out launcher
    n=$(iters "$kind" "$size"); w=$(warm "$n")
    if [ "$which" = ompi ]; then
        [ -x "$BIN/mpi_ompi" ] && have mpirun.openmpi || return
        launcher="mpirun.openmpi --allow-run-as-root --oversubscribe -np 2 --bind-to none --mca btl $btl"
        [ "$btl" = "self,tcp" ] && launcher="$launcher --mca btl_tcp_if_include lo"
        cmdrec "$sec" "$launcher mpi_pingpong -t $kind -s $size -n $n -w $w -W $WINDOW -C $CPUS"
        out=$(timeout $TMO $launcher "$BIN/mpi_ompi" -t "$kind" -s "$size" -n "$n" -w "$w" \
              -W $WINDOW -C "$CPUS" 2>> "$LOG")
    else
        [ -x "$BIN/mpi_mpich" ] && have mpiexec.hydra || { note mpi_mpich "mpiexec.hydra is not installed"; return; }
        cmdrec "$sec" "mpiexec.hydra -np 2 mpi_pingpong -t $kind -s $size -n $n -w $w -W $WINDOW -C $CPUS"
        out=$(timeout $TMO mpiexec.hydra -np 2 "$BIN/mpi_mpich" -t "$kind" -s "$size" -n "$n" \
              -w "$w" -W $WINDOW -C "$CPUS" 2>> "$LOG")
    fi
    [ -n "$out" ] || { note "mpi_$which-$sec" "mpi_pingpong under $which gave no result (see $LOG)"; return; }
    # lat,size,iters,median,min,avg  |  bw,size,iters,window,MBps,rate
    echo "$out" | awk -F, -v k="$sec.$which" '
        $1 == "lat" { print k ".lat." $2, $4 }
        $1 == "bw" { print k ".bw." $2, $5; print k ".rate." $2, $6 }' >> "$RAW"
}

# bench/tcp_raw.c (one ping-pong and one stream per run) and bench/udp_raw.c (lat or bw per
# run; a datagram carries at most 65507 bytes, so larger sizes have no latency floor and
# their stream floor is a stream of messages of that size cut into the largest datagrams,
# from and into buffers of that size).
raw_out() { # out-text: "lat gbs" from the programs' lines
    local lat gbs
    lat=$(echo "$1" | sed -n 's/.*: *\([0-9.]*\) us one-way.*/\1/p' | head -1)
    # (udp_raw bw: the receiver's "delivered" figure, what a reliable stream compares with;
    # its "sent" one counts datagrams its receiver's socket dropped)
    gbs=$(echo "$1" | sed -n 's/.* \([0-9.]*\) GB\/s delivered.*/\1/p' | head -1)
    [ -n "$gbs" ] || gbs=$(echo "$1" | sed -n 's/.*: *\([0-9.]*\) GB\/s.*/\1/p' | head -1)
    [ -n "$lat" ] && put "$2.lat.$3" "$lat"
    [ -n "$gbs" ] && put "$2.bw.$3" "$(awk -v g="$gbs" 'BEGIN { print g * 1000 }')"
    [ -n "$lat$gbs" ]
}
run_raw() { # tcp|udp size
    local proto=$1 size=$2 n out dsize
    [ -x "$BIN/${proto}_raw" ] || return
    n=$(iters lat "$size")
    if [ "$proto" = tcp ]; then
        cmdrec tcp "taskset -c $CPUS tcp_raw -a 127.0.0.1 -s $size -n $n -b $size -t 500"
        out=$(timeout 120 taskset -c "$CPUS" "$BIN/tcp_raw" -a 127.0.0.1 -s "$size" -n "$n" \
              -b "$size" -t 500 2>> "$LOG")
        raw_out "$out" tcp.raw "$size" || note tcp_raw "tcp_raw printed nothing this script understands (see $LOG)"
        return
    fi
    if [ "$size" -gt 65507 ]; then
        note udp_raw "a UDP datagram carries at most 65507 B: no raw latency above that; the raw stream figure for larger sizes is a stream of messages of that size, each sent from one buffer of that size as 65507 B datagrams and received into one such buffer (as ferry's messages are)"
    else
        cmdrec udp "udp_raw lat -s $size -n $n -C $CPUS"
        out=$(timeout 120 "$BIN/udp_raw" lat -s "$size" -n "$n" -C "$CPUS" 2>> "$LOG")
        raw_out "$out" udp.raw "$size" || note udp_raw "udp_raw lat printed nothing this script understands (see $LOG)"
    fi
    n=$(iters bw "$size")
    cmdrec udp "udp_raw bw -s $size -n $n -C $CPUS"
    out=$(timeout 120 "$BIN/udp_raw" bw -s "$size" -n "$n" -C "$CPUS" 2>> "$LOG")
    raw_out "$out" udp.raw "$size" || note udp_raw "udp_raw bw printed nothing this script understands (see $LOG)"
}

# fi_pingpong over udp;ofi_rxd on the loopback: size
run_fi() {
    local size=$1 n port spid out line
    have fi_pingpong || { note fi_pingpong "fi_pingpong (libfabric-bin) is not installed"; return; }
    n=$(iters lat "$size"); [ "$n" -gt 20000 ] && n=20000 # ~5 us a message: keep runs short
    port=$((PORT++))
    local fi="fi_pingpong -p 'udp;ofi_rxd' -e rdm -d lo -I $n -S $size"
    cmdrec udp "FI_UDP_IFACE=lo taskset -c $CPU0 $fi -B \$PORT &  FI_UDP_IFACE=lo taskset -c $CPU1 $fi -P \$PORT 127.0.0.1"
    env FI_UDP_IFACE=lo timeout $TMO taskset -c "$CPU0" fi_pingpong -p "udp;ofi_rxd" -e rdm -d lo \
        -I "$n" -S "$size" -B $port >> "$LOG" 2>&1 &
    spid=$!
    sleep 0.3 # fi_pingpong's server binds its control port late; nothing to poll on
    out=$(env FI_UDP_IFACE=lo timeout $TMO taskset -c "$CPU1" fi_pingpong -p "udp;ofi_rxd" -e rdm \
          -d lo -I "$n" -S "$size" -P $port 127.0.0.1 2>> "$LOG")
    wait $spid 2> /dev/null
    # bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec
    line=$(echo "$out" | awk '$1 ~ /^[0-9]/ && NF >= 8 { print $7 }' | tail -1)
    [ -n "$line" ] || { note fi_pingpong "fi_pingpong gave no result (see $LOG)"; return; }
    put "udp.fi.lat.$size" "$line"
    put "udp.fi.bw.$size" "$(awk -v s="$size" -v u="$line" 'BEGIN { if (u > 0) print s / u }')"
}

# ---- the runs ----------------------------------------------------------------------------------

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
START=$(date -u '+%Y-%m-%d %H:%M UTC')
SZLIST=$(IFS=,; echo "${SIZES[*]}")

for rep in $(seq "$REPS"); do
    if want shm; then
        say "shm, repetition $rep of $REPS"
        for s in "${SIZES[@]}"; do
            run_ferry shm lat "$s" am_lat,tag_lat,put_lat,get_lat
            if [ "$s" = 8 ]; then run_ferry shm bw "$s" am_bw,am_rate,tag_bw,tag_stream,put_bw,get_bw
            else run_ferry shm bw "$s" am_bw,put_bw,get_bw; fi
            run_ucx sm,self shm ucp_am_lat "$s" lat shm.ucx.am_lat
            run_ucx sm,self shm tag_lat "$s" lat shm.ucx.tag_lat
            run_ucx sm,self shm ucp_put_lat "$s" lat shm.ucx.put_lat
            run_ucx sm,self shm ucp_get "$s" lat shm.ucx.get_lat
            run_ucx sm,self shm ucp_am_bw "$s" bw shm.ucx.am_bw
            [ "$s" = 8 ] && run_ucx sm,self shm tag_bw "$s" bw shm.ucx.tag_bw
            run_ucx sm,self shm ucp_put_bw "$s" bw shm.ucx.put_bw
            run_ucx sm,self shm ucp_get "$s" bw shm.ucx.get_bw
            for m in ompi mpich; do
                run_mpi $m shm lat "$s"
                run_mpi $m shm bw "$s"
            done
        done
        run_ferry_big
        if [ -x "$BIN/floor_shm" ]; then
            cmdrec shm "floor_shm -C $CPUS"
            timeout $TMO "$BIN/floor_shm" -C "$CPUS" 2>> "$LOG" |
                awk -F, '$1 == "floor" && $3 != "n/a" { print "shm.floor." $2, $3 }' >> "$RAW"
        fi
    fi
    if want tcp; then
        say "tcp, repetition $rep of $REPS"
        for s in "${SIZES[@]}"; do
            run_ferry tcp lat "$s" am_lat
            run_ferry tcp bw "$s" am_bw
            run_ucx tcp tcp ucp_am_lat "$s" lat tcp.ucx.am_lat
            run_ucx tcp tcp ucp_am_bw "$s" bw tcp.ucx.am_bw
            run_mpi ompi tcp lat "$s" self,tcp
            run_mpi ompi tcp bw "$s" self,tcp
            run_raw tcp "$s"
        done
    fi
    if want udp; then
        say "udp, repetition $rep of $REPS"
        for s in "${SIZES[@]}"; do
            run_ferry udp lat "$s" am_lat
            run_ferry udp bw "$s" am_bw
            run_fi "$s"
            run_raw udp "$s"
        done
    fi
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
declare -p START LOAD_BEFORE LOAD_AFTER FERRY_TLS_BUILT REPS QUICK ONLY CPUS > "$META"
else
    . "$META"
fi

# ---- medians ------------------------------------------------------------------------------------

declare -A MED CNT
while read -r k v c; do MED[$k]=$v; CNT[$k]=$c; done < <(
    sort -k1,1 -k2,2g "$RAW" | awk '
        function flush() { m = (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2; print k, m, n; n = 0 }
        { if ($1 != k && k != "") flush(); k = $1; a[++n] = $2 }
        END { if (k != "") flush() }')

val() { echo "${MED[$1]:-n/a}"; }
fmt() { # lat|bw|rate value
    [ "$2" = "n/a" ] && { echo "n/a"; return; }
    awk -v k="$1" -v v="$2" 'BEGIN {
        if (k == "lat") printf(v < 10 ? "%.3f" : v < 100 ? "%.2f" : "%.1f", v)
        else if (k == "rate") printf("%.2f M", v / 1e6)
        else printf(v < 10 ? "%.2f" : v < 100 ? "%.1f" : "%.0f", v) }'
}
ratio() { # ferry reference: ferry / reference
    if [ "$1" = "n/a" ] || [ "$2" = "n/a" ]; then echo "–"; return; fi
    awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf("%.2f", a / b); else print "–" }'
}
hsize() { awk -v s="$1" 'BEGIN { if (s >= 1048576) printf("%d MiB", s / 1048576);
                                 else if (s >= 1024) printf("%d KiB", s / 1024); else printf("%d B", s) }'; }

# One markdown table: title unit kind metric, then "label:key-prefix" columns; the first is
# ferry's, every other one gets a ratio column (ferry / it).
table() {
    local title=$1 kind=$2 metric=$3; shift 3
    local cols=("$@") hdr="| size |" sep="|---:|" c label key f v
    echo "$title"
    echo
    for c in "${cols[@]}"; do
        label=${c%%:*}
        hdr="$hdr $label |"; sep="$sep---:|"
        [ "$c" != "${cols[0]}" ] && { hdr="$hdr ferry ÷ |"; sep="$sep---:|"; }
    done
    echo "$hdr"; echo "$sep"
    for s in "${SIZES[@]}"; do
        local line="| $(hsize "$s") |"
        f=$(val "${cols[0]#*:}.$metric.$s")
        for c in "${cols[@]}"; do
            key=${c#*:}
            v=$(val "$key.$metric.$s")
            line="$line $(fmt "$kind" "$v") |"
            [ "$c" != "${cols[0]}" ] && line="$line $(ratio "$f" "$v") |"
        done
        echo "$line"
    done
    echo
}

notes_for() { # section: the n/a reasons that concern it
    local sec=$1
    awk -F'\t' -v s="$sec" '
        { sys = $1 }
        (s == "shm" && (sys ~ /^(ucx|ucx-shm|mpi_ompi|mpi_mpich|mpi_ompi-shm|mpi_mpich-shm|floor_shm|ferry-shm|ferry-tag)$/)) ||
        (s == "tcp" && (sys ~ /^(ucx|ucx-tcp|mpi_ompi|mpi_ompi-tcp|tcp_raw|ferry-tcp)$/)) ||
        (s == "udp" && (sys ~ /^(fi_pingpong|udp_raw|ferry-udp)$/)) { printf("- n/a — %s: %s\n", sys, $2) }' "$NOTES"
}

commands_for() {
    echo "<details><summary>exact commands ($1)</summary>"
    echo
    echo '```'
    awk -F'\t' -v s="$1" '$1 == s { print $2 }' "$CMDS"
    echo '```'
    echo
    echo "</details>"
    echo
}

# ---- RESULTS.md ---------------------------------------------------------------------------------

machine() {
    local cpu mem
    cpu=$(lscpu 2> /dev/null | sed -n 's/^Model name: *//p' | head -1)
    mem=$(awk '/MemTotal/ { printf("%.0f GB", $2 / 1e6) }' /proc/meminfo)
    echo "- cpu: ${cpu:-unknown}, $(nproc) cpus online ($(lscpu 2> /dev/null | sed -n 's/^Hypervisor vendor: *//p' | sed 's/^./virtual machine: &/' | head -1)); memory $mem"
    echo "- kernel: $(uname -sr); clock source $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2> /dev/null)"
    echo "- ferry: $(git -C "$ROOT" rev-parse --short HEAD 2> /dev/null)$(git -C "$ROOT" diff --quiet 2> /dev/null || echo ' (with uncommitted changes)'), CMake Release build, transports: $FERRY_TLS_BUILT"
    echo "- UCX: $(ucx_info -v 2> /dev/null | sed -n 's/^# *//p' | head -1)"
    echo "- Open MPI: $(mpirun.openmpi --version 2> /dev/null | head -1)"
    echo "- MPICH: $(mpichversion 2> /dev/null | sed -n 's/^MPICH Version: *//p' | head -1)"
    echo "- libfabric: $(fi_info --version 2> /dev/null | sed -n 's/^libfabric: *//p' | head -1)"
    echo "- compiler: $(cc --version | head -1)"
    echo "- load average before / after the run: $LOAD_BEFORE / $LOAD_AFTER (other work on the host makes figures noisy)"
}

section() {
    echo "<!-- bench/run.sh: begin (generated; edit bench/run.sh, not this part) -->"
    echo "## Side by side: ferry and the reference systems (bench/run.sh)"
    echo
    echo "Generated by \`bench/run.sh$([ $QUICK = 1 ] && echo ' --quick')\` on $START: every figure is the median of"
    echo "$REPS repetitions, all systems in the same run, on the same sizes and iteration counts, one process per"
    echo "core (cpus $CPUS). Latency: one-way in microseconds (ping-pong round trip / 2; the median of the"
    echo "iterations for ferry_perf, ucx_perftest and mpi_pingpong, the mean for fi_pingpong and the raw"
    echo "floors). Get latency is one whole get. Bandwidth: MB/s = 10^6 bytes/s (ucx_perftest's MiB/s"
    echo "converted), windows of $WINDOW. **ferry ÷** is ferry's figure divided by the column to its"
    echo "left: below 1 is better for latency, above 1 is better for bandwidth and rate."
    echo
    echo "### Machine"
    echo
    machine
    echo
    if want shm; then
        echo "### shm: processes on one host"
        echo
        table "One-way latency, us: active messages (ferry am_lat, UCX ucp_am_lat, MPI send/recv)" lat lat \
            "ferry:shm.ferry.am_lat" "UCX:shm.ucx.am_lat" "Open MPI:shm.ompi" "MPICH:shm.mpich"
        table "One-way latency, us: tagged messages (ferry tag_lat, UCX tag_lat)" lat lat \
            "ferry:shm.ferry.tag_lat" "UCX:shm.ucx.tag_lat"
        table "Bandwidth, MB/s: active messages / MPI isend (window $WINDOW)" bw bw \
            "ferry:shm.ferry.am_bw" "UCX:shm.ucx.am_bw" "Open MPI:shm.ompi" "MPICH:shm.mpich"
        table "RMA bandwidth, MB/s: put (ferry put_bw, UCX ucp_put_bw)" bw bw \
            "ferry:shm.ferry.put_bw" "UCX:shm.ucx.put_bw"
        table "RMA bandwidth, MB/s: get (ferry get_bw, UCX ucp_get)" bw bw \
            "ferry:shm.ferry.get_bw" "UCX:shm.ucx.get_bw"
        table "RMA latency, us: put ping-pong one-way (ferry put_lat, UCX ucp_put_lat)" lat lat \
            "ferry:shm.ferry.put_lat" "UCX:shm.ucx.put_lat"
        table "RMA latency, us: one get (ferry get_lat, UCX ucp_get)" lat lat \
            "ferry:shm.ferry.get_lat" "UCX:shm.ucx.get_lat"
        local r8 u8 o8 m8
        r8=$(val shm.ferry.am_rate.rate.8); u8=$(val shm.ucx.am_bw.rate.8)
        o8=$(val shm.ompi.rate.8); m8=$(val shm.mpich.rate.8)
        echo "8-byte message rate (window $WINDOW), messages/s"
        echo
        echo "| ferry am_rate | UCX ucp_am_bw | ferry ÷ | Open MPI | ferry ÷ | MPICH | ferry ÷ |"
        echo "|---:|---:|---:|---:|---:|---:|---:|"
        echo "| $(fmt rate "$r8") | $(fmt rate "$u8") | $(ratio "$r8" "$u8") | $(fmt rate "$o8") | $(ratio "$r8" "$o8") | $(fmt rate "$m8") | $(ratio "$r8" "$m8") |"
        echo
        local t8 s8 v8
        t8=$(val shm.ferry.tag_bw.rate.8); s8=$(val shm.ferry.tag_stream.rate.8)
        v8=$(val shm.ucx.tag_bw.rate.8)
        echo "8-byte tagged message rate (window $WINDOW), messages/s: ferry tag_stream counts as"
        echo "UCX's tag_bw does (receives kept posted, one acknowledgement at the end); ferry tag_bw"
        echo "waits for an acknowledgement of every window (osu_bw's scheme)"
        echo
        echo "| ferry tag_stream | UCX tag_bw | ferry ÷ | ferry tag_bw (acknowledged windows) |"
        echo "|---:|---:|---:|---:|"
        echo "| $(fmt rate "$s8") | $(fmt rate "$v8") | $(ratio "$s8" "$v8") | $(fmt rate "$t8") |"
        echo
        local s bm1 ba1 bm ba
        bm1=$(val shm.big_malloc.am_bw.bw.1048576); ba1=$(val shm.big_alloc.am_bw.bw.1048576)
        echo "Large active messages, ferry only: bandwidth (MB/s, window $WINDOW) against its own 1 MiB"
        echo "figure, and one-way latency (us), from malloc'd memory (the outbox: one copy by the"
        echo "sender) and from memory ferry allocates (\`ferry_perf -M alloc\`: the receiver reads it in place)"
        echo
        echo "| size | am_bw | ÷ 1 MiB | am_bw, allocated | ÷ 1 MiB | messages/s, allocated | am_lat | am_lat, allocated | tag_lat | tag_lat, allocated |"
        echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        for s in 1048576 4194304 16777216; do
            bm=$(val shm.big_malloc.am_bw.bw.$s); ba=$(val shm.big_alloc.am_bw.bw.$s)
            echo "| $(hsize $s) | $(fmt bw "$bm") | $(ratio "$bm" "$bm1") | $(fmt bw "$ba") | $(ratio "$ba" "$ba1") | $(fmt rate "$(val shm.big_alloc.am_bw.rate.$s)") | $(fmt lat "$(val shm.big_malloc.am_lat.lat.$s)") | $(fmt lat "$(val shm.big_alloc.am_lat.lat.$s)") | $(fmt lat "$(val shm.big_malloc.tag_lat.lat.$s)") | $(fmt lat "$(val shm.big_alloc.tag_lat.lat.$s)") |"
        done
        echo
        local fl fm fc l8 b1 p1
        fl=$(val shm.floor.cacheline_lat_us); fc=$(val shm.floor.cma_read_1m_MBps); fm=$(val shm.floor.memcpy_1m_MBps)
        l8=$(val shm.ferry.am_lat.lat.8); b1=$(val shm.ferry.am_bw.bw.1048576); p1=$(val shm.ferry.get_bw.bw.1048576)
        echo "Distance to the floors (bench/floor_shm.c)"
        echo
        echo "| floor | floor | ferry | ferry ÷ floor |"
        echo "|---|---:|---:|---:|"
        echo "| one cache line ping-pong vs 8 B am_lat, us | $(fmt lat "$fl") | $(fmt lat "$l8") | $(ratio "$l8" "$fl") |"
        echo "| memcpy 1 MiB (one core) vs 1 MiB am_bw (the outbox: one memcpy by the sender), MB/s | $(fmt bw "$fm") | $(fmt bw "$b1") | $(ratio "$b1" "$fm") |"
        echo "| process_vm_readv 1 MiB (the pull path, and UCX's) vs 1 MiB am_bw, MB/s | $(fmt bw "$fc") | $(fmt bw "$b1") | $(ratio "$b1" "$fc") |"
        echo "| memcpy 1 MiB (one core) vs 1 MiB get_bw, MB/s | $(fmt bw "$fm") | $(fmt bw "$p1") | $(ratio "$p1" "$fm") |"
        echo
        notes_for shm
        echo
        commands_for shm
    fi
    if want tcp; then
        echo "### tcp: stream sockets (on the loopback here)"
        echo
        table "One-way latency, us (ferry am_lat, UCX ucp_am_lat, Open MPI btl tcp, raw socket ping-pong)" lat lat \
            "ferry:tcp.ferry.am_lat" "UCX:tcp.ucx.am_lat" "Open MPI:tcp.ompi" "raw tcp:tcp.raw"
        table "Bandwidth, MB/s (ferry am_bw, UCX ucp_am_bw, Open MPI, raw write stream)" bw bw \
            "ferry:tcp.ferry.am_bw" "UCX:tcp.ucx.am_bw" "Open MPI:tcp.ompi" "raw tcp:tcp.raw"
        notes_for tcp
        echo
        commands_for tcp
    fi
    if want udp; then
        echo "### udp: reliable datagrams (on the loopback here)"
        echo
        table "One-way latency, us (ferry am_lat, fi_pingpong udp;ofi_rxd, raw UDP ping-pong)" lat lat \
            "ferry:udp.ferry.am_lat" "libfabric rxd:udp.fi" "raw udp:udp.raw"
        table "Ping-pong bandwidth, MB/s: size / one-way latency (ferry am_lat, fi_pingpong)" bw bw \
            "ferry:udp.ferry.am_pp" "libfabric rxd:udp.fi"
        table "Streaming bandwidth, MB/s (ferry am_bw, raw UDP stream without flow control)" bw bw \
            "ferry:udp.ferry.am_bw" "raw udp:udp.raw"
        notes_for udp
        echo
        commands_for udp
    fi
    echo "### Plot"
    echo
    echo "![latency and bandwidth against message size](plot.png)"
    echo
    echo "<!-- bench/run.sh: end -->"
}

NEW=$WORK/section.md
section > "$NEW"
if [ -f "$OUT" ] && grep -q '<!-- bench/run.sh: begin' "$OUT"; then
    # replace our part, keep everything else
    awk -v new="$NEW" '
        /<!-- bench\/run.sh: begin/ { while ((getline l < new) > 0) print l; skip = 1; next }
        /<!-- bench\/run.sh: end -->/ { skip = 0; next }
        !skip { print }' "$OUT" > "$OUT.tmp" && mv "$OUT.tmp" "$OUT"
elif [ -f "$OUT" ]; then
    { echo; cat "$NEW"; } >> "$OUT"
else
    { echo "# ferry benchmark results"; echo; cat "$NEW"; } > "$OUT"
fi
say "wrote $OUT"

# ---- plot -----------------------------------------------------------------------------------------

plot_data() { # metric key... : one line per size, NaN where missing
    local metric=$1; shift
    for s in "${SIZES[@]}"; do
        local line="$s" k v
        for k in "$@"; do
            v=$(val "$k.$metric.$s"); [ "$v" = "n/a" ] && v=NaN
            line="$line $v"
        done
        echo "$line"
    done
}
# "file" using 1:i ... for every column that has at least one figure (an all-missing
# column would stop gnuplot).
plot_cmd() { # file title...
    local file=$1 i=2 t cmd="" dt; shift
    for t in "$@"; do
        if awk -v c=$i '$c != "NaN" { f = 1 } END { exit !f }' "$file"; then
            case "$t" in *shm*|*vader*|MPICH) dt=1 ;; *tcp*) dt=2 ;; *) dt=3 ;; esac
            cmd="$cmd${cmd:+, }\"$file\" using 1:$i with linespoints lw 2 dt $dt title \"$t\""
        fi
        i=$((i + 1))
    done
    echo "${cmd:-NaN notitle}"
}
if have gnuplot; then
    TITLES=(ferry-shm UCX-shm OpenMPI-vader MPICH ferry-tcp UCX-tcp raw-tcp ferry-udp libfabric-rxd-udp)
    plot_data lat shm.ferry.am_lat shm.ucx.am_lat shm.ompi shm.mpich tcp.ferry.am_lat tcp.ucx.am_lat tcp.raw udp.ferry.am_lat udp.fi > "$WORK/lat.dat"
    plot_data bw shm.ferry.am_bw shm.ucx.am_bw shm.ompi shm.mpich tcp.ferry.am_bw tcp.ucx.am_bw tcp.raw udp.ferry.am_bw udp.fi > "$WORK/bw.dat"
    gnuplot > /dev/null 2>> "$LOG" <<EOF
set terminal pngcairo size 1400,560 font "sans,10"
set output "$PLOT"
set datafile missing "NaN"
set logscale xy
set grid
set key top left
set xrange [4:2097152]
set xtics ($(for s in "${SIZES[@]}"; do printf '"%s" %s, ' "$(hsize "$s")" "$s"; done | sed 's/, $//'))
set xlabel "message size"
set multiplot layout 1,2 title "ferry and the reference systems, one run — $START (dashed: tcp, dotted: udp)"
set title "one-way latency, us (lower is better)"
set ylabel "us"
plot $(plot_cmd "$WORK/lat.dat" "${TITLES[@]}")
set title "bandwidth, MB/s (higher is better; libfabric rxd: ping-pong)"
set ylabel "MB/s"
plot $(plot_cmd "$WORK/bw.dat" "${TITLES[@]}")
unset multiplot
EOF
    [ -s "$PLOT" ] && say "wrote $PLOT" || say "gnuplot failed (see $LOG)"
else
    say "gnuplot is not installed: no plot"
fi
