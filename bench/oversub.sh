#!/usr/bin/env bash
# Four ranks on two cores, all-to-all rounds, under each idle policy; appends the figures and
# the exact commands to bench/RESULTS.md (section "Oversubscribed").  Usage: oversub.sh [build]
set -eu
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${ROUNDS:-2000}
out=$(mktemp)
{
  echo "## Oversubscribed: 4 ranks on 2 cores (bench/oversub.sh)"
  echo
  echo "All-to-all rounds of 8-byte active messages over shm; time per round and per message,"
  echo "rank 0's view; median (range) of ${REPS:-5} runs.  Measured $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)."
  echo
  echo "| FERRY_WAIT | us per round, median (range) | us per message | command |"
  echo "| --- | ---: | ---: | --- |"
} > "$out"
reps=${REPS:-5}
for mode in spin adaptive block; do
  [ $mode = spin ] && r_rounds=200 || r_rounds=$rounds
  cmd="FERRY_TLS=self,shm FERRY_WAIT=$mode $build/tools/ferryrun -n 4 $build/bench/alltoall_rounds $r_rounds"
  rounds_us=()
  msgs_us=()
  for ((k = 0; k < reps; k++)); do
    line=$(FERRY_TLS=self,shm FERRY_WAIT=$mode timeout 300 "$build/tools/ferryrun" -n 4 --timeout 280 \
             "$build/bench/alltoall_rounds" "$r_rounds" | grep alltoall_rounds || echo "failed")
    echo "$line"
    rounds_us+=("$(echo "$line" | sed -n 's/.*: \([0-9.]*\) us per round.*/\1/p')")
    msgs_us+=("$(echo "$line" | sed -n 's/.*round, \([0-9.]*\) us per message.*/\1/p')")
  done
  # median and range of the repetitions (the wake-up luck of four processes on two cores
  # makes single runs bimodal)
  stats() { printf '%s\n' "$@" | grep . | sort -g | awk '{v[NR]=$1} END {if (NR) printf "%s (%s-%s)", v[int((NR+1)/2)], v[1], v[NR]; else printf "n/a"}'; }
  echo "| $mode | $(stats "${rounds_us[@]}") | $(stats "${msgs_us[@]}") | \`$cmd\` |" >> "$out"
done
echo >> "$out"
# Replace the previous section, keep everything else.
python3 - "$out" <<'PY'
import re, sys
new = open(sys.argv[1]).read()
p = "bench/RESULTS.md"
s = open(p).read() if __import__("os").path.exists(p) else "# Benchmark results\n\n"
pat = re.compile(r"## Oversubscribed: .*?(?=\n## |\n<!-- |\Z)", re.S)
s = pat.sub(new.rstrip() + "\n", s) if pat.search(s) else s.rstrip() + "\n\n" + new
open(p, "w").write(s)
PY
rm -f "$out"
