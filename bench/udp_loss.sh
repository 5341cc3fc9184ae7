#!/usr/bin/env bash
# udp_loss.sh BUILD_DIR [row ...] - ferry's udp transport against Linux TCP through the same
# impaired link, row by row, in one run (issue 13's acceptance table).
#
# Two network namespaces joined by a veth pair (MTU 1500); fy_impair (tests/faults) on an
# NFQUEUE rule on both directions of one end, so every impairment applies each way; a rate
# limit (RATE, default 200M bit/s: the impairer passes ~25-30 MB/s on the 2-core VM, so the
# link and not the impairer is measured) with a BURST-byte token bucket (16k: a link that
# serializes; the impairer's default 64 KiB is a policer) and a LIMIT-packet queue (500).  For each row, with the same impairer settings:
#
#   ferry: tests/udp/udp_pingpong bw -s 1048576 -T $SECS -c   (1 MiB AMs, every byte checked
#          by the receiver; the run fails on any difference)
#   tcp:   a Linux TCP stream of 1 MiB writes for $SECS (python3 socket, the system's
#          congestion control or TCP_CC's, e.g. TCP_CC=cubic), bytes counted by the receiver;
#          TCP_CC="cubic bbr" runs one stream per congestion control, each with its column
#          and ratio, in the same row (the same impairer, the same minute)
#
# A row is NAME:impairer-args (commas for spaces), e.g. "loss10:--loss,10".  Prints a markdown
# table of MB/s and the ratio.  Needs root (ip netns, iptables).  Everything it makes carries
# the pid in its name and is removed on exit.
#
# BUILD needs tests/udp/udp_pingpong and tests/faults/fy_impair: a Release directory from
# `make build-release` has no tests; `cmake -S . -B build-bench -DFERRY_BUILD_TESTS=ON` then
# `cmake --build build-bench -j1 --target udp_pingpong fy_impair` adds them.
#
#   bench/udp_loss.sh build                       # the default rows
#   SECS=8 RATE=0 bench/udp_loss.sh build loss10:--loss,10
#
# REPS=N repeats every row N times (one table line per run).  ALT=OTHER_BUILD also runs that
# build's udp_pingpong in every row, beside this one's (before/after in the same minute: the
# machine's load moves faster than a whole table takes; the order alternates by repetition).
# TCP=0 leaves the TCP stream out (ferry alone, for comparing builds).
set -eu
B=${1:?usage: udp_loss.sh BUILD_DIR [name:impairer,args ...]}
shift
SECS=${SECS:-6}
RATE=${RATE:-200M}
BURST=${BURST:-16k}   # the link's token bucket: a real link serializes (the impairer's default, 64 KiB, is a policer)
LIMIT=${LIMIT:-500}   # the link's queue, packets
REPS=${REPS:-1}
ALT=${ALT:-}
TCP=${TCP:-1}
PP=$B/tests/udp/udp_pingpong
IMP=$B/tests/faults/fy_impair
[ -x "$PP" ] && [ -x "$IMP" ] || {
  # (make build-release leaves the tests out: turn them on in that directory and build these two)
  echo "build $PP and $IMP first: cmake -S . -B $B -DFERRY_BUILD_TESTS=ON &&" \
       "cmake --build $B -j1 --target udp_pingpong fy_impair" >&2; exit 1; }
[ -z "$ALT" ] || [ -x "$ALT/tests/udp/udp_pingpong" ] || { echo "no $ALT/tests/udp/udp_pingpong" >&2; exit 1; }
ROWS=("$@")
if [ ${#ROWS[@]} -eq 0 ]; then
  ROWS=(clean: loss1:--loss,1 loss5:--loss,5 loss10:--loss,10 loss20:--loss,20
        loss30:--loss,30 reorder30:--reorder,30 dup5:--dup,5 corrupt2:--corrupt,2,--zero-csum
        delay:--delay,100,--delay-us,2000
        mix:--loss,5,--reorder,5,--dup,2,--corrupt,1,--zero-csum,--delay,5,--delay-us,500)
fi

id=$$
A=fyLa$id; Bn=fyLb$id; DA=fyla$id; DB=fylb$id
imp_pid=
cleanup() {
  [ -n "$imp_pid" ] && kill "$imp_pid" 2>/dev/null && wait "$imp_pid" 2>/dev/null || true
  ip netns del "$A" 2>/dev/null || true
  ip netns del "$Bn" 2>/dev/null || true
  rm -f "/tmp/fy_tcp_$id.py"
}
trap cleanup EXIT
ip netns add "$A"; ip netns add "$Bn"
ip link add "$DA" netns "$A" type veth peer name "$DB" netns "$Bn"
ip -n "$A" addr add 10.78.0.1/24 dev "$DA"; ip -n "$Bn" addr add 10.78.0.2/24 dev "$DB"
ip -n "$A" link set "$DA" up; ip -n "$A" link set lo up
ip -n "$Bn" link set "$DB" up; ip -n "$Bn" link set lo up
for _ in $(seq 100); do
  ip -n "$A" -o link show dev "$DA" | grep -q 'state UP' &&
    ip -n "$Bn" -o link show dev "$DB" | grep -q 'state UP' && break
  sleep 0.05
done
ip netns exec "$A" iptables -A OUTPUT -o "$DA" -p all -m mark ! --mark 0x7e57 -j NFQUEUE --queue-num 9
ip netns exec "$A" iptables -A INPUT -i "$DA" -p all -m mark ! --mark 0x7e57 -j NFQUEUE --queue-num 9

cat > "/tmp/fy_tcp_$id.py" <<'EOF'
import socket, sys, time
mode, secs = sys.argv[1], float(sys.argv[2])
if mode == "server":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("10.78.0.2", 5599)); s.listen(1); print("ready", flush=True)
    c, _ = s.accept(); n = 0; t0 = None
    c.settimeout(secs + 30)  # a stream stalled by the impairment ends the run, counted
    while True:
        try:
            d = c.recv(1 << 20)
        except OSError:
            break
        if not d: break
        if t0 is None: t0 = time.time()
        n += len(d)
    t1 = time.time()
    try:
        c.sendall(b"x"); c.close()
    except OSError:
        pass
    print("%.3f" % (n / (t1 - t0) / 1e6 if t0 is not None and t1 > t0 else 0.0))
else:
    c = socket.create_connection(("10.78.0.2", 5599), timeout=secs + 30)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if len(sys.argv) > 3 and sys.argv[3]:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, sys.argv[3].encode())
    buf = b"\x5a" * (1 << 20); t0 = time.time()
    try:
        while time.time() - t0 < secs: c.sendall(buf)
        c.shutdown(socket.SHUT_WR); c.recv(1)
    except OSError:
        pass
EOF

tcp_run() { # [congestion control]
  local out; out=$(mktemp)
  ip netns exec "$Bn" timeout $((${SECS%.*} * 4 + 90)) python3 "/tmp/fy_tcp_$id.py" server "$SECS" > "$out" &
  local sp=$!
  for _ in $(seq 100); do grep -q ready "$out" && break; sleep 0.05; done
  ip netns exec "$A" timeout 120 python3 "/tmp/fy_tcp_$id.py" client "$SECS" "${1:-}" || true
  wait "$sp" || true
  # (a stream that never got going - a lossy link can keep even the handshake back past the
  # server's time limit - ends without a figure: nothing was carried)
  tail -n1 "$out" | awk '$1 + 0 == $1 { print; ok = 1 } END { if (!ok) print "0.000" }'
  rm -f "$out"
}

ferry_run() { # [udp_pingpong]
  local r pp=${1:-$PP}
  r=$(ip netns exec "$A" env FERRY_UDP_IF_INCLUDE="$DA" FERRY_UDP_CHECKSUM=y FERRY_STATS=1 \
      timeout 180 "$pp" bw -s 1048576 -T "$SECS" -c -w -d "$DA" -N "$Bn" -D "$DB" 2>&1) || {
    echo "FAIL"; echo "$r" >&2; return; }
  echo "$r" >&2
  echo "$r" | awk '/GB\/s/ {printf "%.2f\n", $5 * 1000}'
}

read -r -a CCS <<< "${TCP_CC:-}"
[ ${#CCS[@]} -gt 0 ] || CCS=("")
ccname() { echo "${1:-$(ip netns exec "$A" sysctl -n net.ipv4.tcp_congestion_control 2>/dev/null || echo '?')}"; }
names=(); for c in "${CCS[@]}"; do names+=("$(ccname "$c")"); done
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); rate ${RATE}, ${SECS} s per run, TCP ${names[*]}, $(date -u +%H:%M)"
echo
hdr="| row (each way) | impairer | ferry udp MB/s |"; sep="| --- | --- | ---: |"
[ -z "$ALT" ] || { echo "ALT: $ALT"; echo; hdr+=" ALT MB/s |"; sep+=" ---: |"; }
for n in "${names[@]}"; do
  hdr+=" TCP $n MB/s | ferry / $n |"; sep+=" ---: | ---: |"
  [ -z "$ALT" ] || { hdr+=" ALT / $n |"; sep+=" ---: |"; }
done
echo "$hdr"; echo "$sep"
ratio() { awk -v f="$1" -v t="$2" 'BEGIN { if (t > 0 && f+0 == f) printf "%.2f", f / t; else print "-" }'; }
for row in "${ROWS[@]}"; do
 for _rep in $(seq "$REPS"); do
  name=${row%%:*}; args=${row#*:}; args=${args//,/ }
  rate_args=(); [ "$RATE" != 0 ] && rate_args=(--rate "$RATE" --burst "$BURST" --limit "$LIMIT")
  p=$(mktemp)
  # shellcheck disable=SC2086
  ip netns exec "$A" "$IMP" --queue 9 --seed 7 "${rate_args[@]}" $args > "$p" &
  imp_pid=$!
  for _ in $(seq 100); do grep -q ready "$p" && break; sleep 0.05; done
  # (with ALT, every second repetition runs ALT first: the second run of a row tends to be
  # a few % faster, which would otherwise always favour ALT)
  a=
  if [ -n "$ALT" ] && [ $((_rep % 2)) = 0 ]; then
    a=$(ferry_run "$ALT/tests/udp/udp_pingpong"); f=$(ferry_run)
  else
    f=$(ferry_run); [ -z "$ALT" ] || a=$(ferry_run "$ALT/tests/udp/udp_pingpong")
  fi
  line="| $name | ${args:-none} | $f |"; [ -z "$ALT" ] || line+=" $a |"
  for c in "${CCS[@]}"; do
    t=-; [ "$TCP" = 0 ] || t=$(tcp_run "$c")
    line+=" $t | $(ratio "$f" "$t") |"; [ -z "$ALT" ] || line+=" $(ratio "$a" "$t") |"
  done
  kill "$imp_pid" 2>/dev/null; wait "$imp_pid" 2>/dev/null || true; imp_pid=; rm -f "$p"
  echo "$line"
 done
done
echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
