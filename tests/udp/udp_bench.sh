#!/usr/bin/env bash
# udp_bench.sh BUILD_DIR [runs] - the udp transport side by side with raw UDP on loopback,
# each measurement repeated (alternating raw / ferry) and the best kept, since a shared
# 2-core machine is noisy.  Prints a markdown table.
set -eu
b=${1:?usage: udp_bench.sh BUILD_DIR [runs]}/tests/udp
runs=${2:-5}
best() { sort -g | head -n1; }
bestmax() { sort -g | tail -n1; }
raw_lat=() ; udp_lat=() ; raw_bw=() ; udp_bw=() ; udp_bw1=()
for i in $(seq "$runs"); do
  raw_lat+=("$("$b/udp_raw" lat -n 50000 | awk '{print $6}')")
  udp_lat+=("$("$b/udp_pingpong" lat -n 50000 | awk '{print $5}')")
  raw_bw+=("$("$b/udp_raw" bw -s 65000 -n 30000 | awk '{print $6}')")
  udp_bw+=("$("$b/udp_pingpong" bw -s 1048576 -n 2000 | awk '{print $5}')")
  udp_bw1+=("$(FERRY_UDP_FAULT_DROP=1 "$b/udp_pingpong" bw -s 1048576 -n 2000 | awk '{print $5}')")
done
rl=$(printf '%s\n' "${raw_lat[@]}" | best); ul=$(printf '%s\n' "${udp_lat[@]}" | best)
rb=$(printf '%s\n' "${raw_bw[@]}" | bestmax); ub=$(printf '%s\n' "${udp_bw[@]}" | bestmax)
ub1=$(printf '%s\n' "${udp_bw1[@]}" | bestmax)
echo "| measure (best of $runs, loopback) | raw UDP | ferry udp | ratio |"
echo "| --- | --- | --- | --- |"
echo "| 8 B one-way latency (us) | $rl | $ul | $(echo "$ul / $rl" | bc -l | cut -c1-4) |"
echo "| bandwidth (GB/s): raw 65000 B datagrams, ferry 1 MiB AM | $rb | $ub | |"
echo "| ferry 1 MiB AM bandwidth with 1% loss (GB/s) | | $ub1 | $(echo "$ub1 / $ub" | bc -l | cut -c1-4) of lossless |"
