#!/usr/bin/env bash
# 1 MiB put and get between two local processes, ferry against UCX, many times, alternating:
# both are one core's memcpy, so the question is only how far apart they are run to run.
# Writes the section "RMA at 1 MiB, repeated" of bench/RESULTS.md.
#   Usage: bench/rma_1m.sh [build]   (REPS=10 by default)
set -eu
cd "$(dirname "$0")/.."
build=${1:-build-bench}
reps=${REPS:-10}
n=1024 w=102 port=$((14000 + RANDOM % 1000))
ferry() { # test -> MB/s
    FERRY_TLS=shm "$build/tools/ferryrun" -n 2 --timeout 120 "$build/tools/ferry_perf" -t "$1" \
        -s 1048576 -n $n -w $w -W 64 -C 0,1 -f csv | awk -F, -v t="$1" '$1 == t {print $12}'
}
ucx() { # test -> MB/s (ucx_perftest reports MiB/s)
    port=$((port + 1))
    UCX_TLS=sm,self timeout 120 ucx_perftest -p $port -c 0 > /dev/null 2>&1 &
    local spid=$! k
    for k in $(seq 100); do
        ss -Hltn "sport = :$port" 2> /dev/null | grep -q . && break
        sleep 0.05 # until the server listens; the measurement itself never sleeps
    done
    UCX_TLS=sm,self timeout 120 ucx_perftest 127.0.0.1 -p $port -c 1 -t "$1" -s 1048576 -n $n \
        -w $w -O 64 -f -v 2> /dev/null | tr -d ' ' | grep -E '^[0-9]+,' | tail -1 |
        awk -F, '{printf "%.0f\n", $6 * 1.048576}'
    wait $spid 2> /dev/null || true
}
fp=() fg=() up=() ug=()
for ((i = 0; i < reps; i++)); do
    fp+=("$(ferry put_bw)"); up+=("$(ucx ucp_put_bw)")
    fg+=("$(ferry get_bw)"); ug+=("$(ucx ucp_get)")
    echo "rep $((i + 1)): ferry put ${fp[-1]} get ${fg[-1]}  UCX put ${up[-1]} get ${ug[-1]}"
done
stats() { printf '%s\n' "$@" | grep . | sort -g |
    awk '{v[NR]=$1} END {if (NR) printf "%d | %d-%d", v[int((NR+1)/2)], v[1], v[NR]; else printf "n/a | n/a"}'; }
wins() { # how many reps ferry's figure ($1 list) was at or above UCX's ($2 list)
    local -n a=$1 b=$2
    local k c=0
    for k in "${!a[@]}"; do awk -v x="${a[$k]:-0}" -v y="${b[$k]:-0}" 'BEGIN {exit !(x >= y)}' && c=$((c + 1)); done
    echo "$c of ${#a[@]}"
}
out=$(mktemp)
{
    echo "## RMA at 1 MiB, repeated (bench/rma_1m.sh)"
    echo
    echo "Put and get of 1 MiB into ferry-allocated / UCX-mapped memory of the other process, window"
    echo "64, $reps repetitions alternating ferry and UCX, one process per core.  Both are one core's"
    echo "memcpy, so this shows how far apart they are from run to run.  Measured"
    echo "$(date -u '+%Y-%m-%d %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)."
    echo
    echo "| test | ferry median MB/s | ferry range | UCX median MB/s | UCX range | ferry at or above UCX |"
    echo "| --- | ---: | ---: | ---: | ---: | ---: |"
    echo "| put | $(stats "${fp[@]}") | $(stats "${up[@]}") | $(wins fp up) |"
    echo "| get | $(stats "${fg[@]}") | $(stats "${ug[@]}") | $(wins fg ug) |"
    echo
    echo "Commands: \`FERRY_TLS=shm $build/tools/ferryrun -n 2 $build/tools/ferry_perf -t put_bw|get_bw"
    echo "-s 1048576 -n $n -w $w -W 64 -C 0,1\`; \`UCX_TLS=sm,self ucx_perftest -p PORT -c 0 &"
    echo "UCX_TLS=sm,self ucx_perftest 127.0.0.1 -p PORT -c 1 -t ucp_put_bw|ucp_get -s 1048576 -n $n -w $w"
    echo "-O 64\`."
    echo
} > "$out"
cat "$out"
python3 - "$out" << 'PY'
import os, re, sys
new = open(sys.argv[1]).read()
p = "bench/RESULTS.md"
s = open(p).read() if os.path.exists(p) else "# Benchmark results\n\n"
pat = re.compile(r"## RMA at 1 MiB, repeated.*?(?=\n## |\n<!-- |\Z)", re.S)
s = pat.sub(new.rstrip() + "\n", s) if pat.search(s) else s.rstrip() + "\n\n" + new
open(p, "w").write(s)
PY
rm -f "$out"
