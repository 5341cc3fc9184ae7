#!/usr/bin/env bash
# test_coexist.sh BUILD_DIR - a ferry udp stream and a Linux TCP stream share one
# rate-limited link; each must keep at least a quarter of it (issue 13: congestion control
# that neither starves nor is starved by TCP).
#
# Two network namespaces joined by a veth pair (MTU 1500); fy_impair on an NFQUEUE rule at
# one end makes the link: --rate $RATE (default 40 Mbit/s), a 16 KiB token bucket (a link
# that serializes, not a policer) and a queue of $LIMIT packets.  A TCP stream (python3,
# bbr unless TCP_CC says otherwise, see below) starts first; then ferry's tl-level stream
# (udp_pingpong bw, 64 KiB AMs, every byte checked) runs for $SECS s; the TCP receiver logs
# its byte count every 50 ms, so its rate is taken over exactly the time ferry ran.
# Prints both rates and their shares; exits 1 if either is below a quarter of the link in
# each of three attempts, 77 (skipped) without root, ip, iptables, python3 or the impairer.  Everything it creates
# carries the pid in its name and is removed on exit.
set -u
B=${1:?usage: test_coexist.sh BUILD_DIR}
SECS=${SECS:-4}
RATE_MBIT=${RATE_MBIT:-40}
LIMIT=${LIMIT:-200}
PP=$B/tests/udp/udp_pingpong
IMP=$B/tests/faults/fy_impair
# The shares are a measurement on a machine that may be loaded: three attempts are allowed
# (each attempt builds its own namespaces and link).  The TCP share here has ranged 0.20-0.64
# (2026-12-02: 0.28-0.46 in 13 runs on a quiet machine; 0.25 and 0.20 in two attempts in a row
# at the end of a sanitizer build's suite).
if [ -z "${FY_COEXIST_TRY:-}" ]; then
  for t in 1 2 3; do
    FY_COEXIST_TRY=$t "$0" "$@"
    rc=$?
    if [ $rc = 0 ] || [ $rc = 77 ]; then exit $rc; fi
    echo "attempt $t failed"
  done
  exit 1
fi
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (network namespaces, iptables)"
for t in ip iptables python3 timeout; do command -v $t > /dev/null || skip "no $t"; done
[ -x "$PP" ] && [ -x "$IMP" ] || skip "build $PP and $IMP first"

id=$$
A=fyCa$id; Bn=fyCb$id; DA=fyca$id; DB=fycb$id
tmp=$(mktemp -d /tmp/fy_coexist.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2> /dev/null; done
  ip netns del "$A" 2> /dev/null
  ip netns del "$Bn" 2> /dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
ip netns add "$A" && ip netns add "$Bn" || skip "cannot create network namespaces"
ip link add "$DA" netns "$A" type veth peer name "$DB" netns "$Bn" || skip "no veth"
ip -n "$A" addr add 10.79.0.1/24 dev "$DA"; ip -n "$Bn" addr add 10.79.0.2/24 dev "$DB"
ip -n "$A" link set "$DA" up; ip -n "$A" link set lo up
ip -n "$Bn" link set "$DB" up; ip -n "$Bn" link set lo up
up=0
for _ in $(seq 200); do
  if ip -n "$A" -o link show dev "$DA" | grep -q 'state UP' &&
    ip -n "$Bn" -o link show dev "$DB" | grep -q 'state UP'; then up=1; break; fi
  sleep 0.05
done
[ $up = 1 ] || { echo "FAIL: veth never came up"; exit 1; }
# The TCP flow's congestion control (set on its socket): $TCP_CC, else bbr where the kernel
# has it (the shares are steady: each keeps 0.34-0.6 in our runs), else the system's.  Against
# cubic (TCP_CC=cubic) the shares swing more on a loaded 2-core machine (ferry 0.17-0.67 in
# four runs, bench/RESULTS.md): measured by hand, not asserted here.
cc=${TCP_CC:-}
if [ -z "$cc" ]; then
  if grep -qw bbr /proc/sys/net/ipv4/tcp_available_congestion_control 2> /dev/null; then cc=bbr
  else cc=$(cat /proc/sys/net/ipv4/tcp_congestion_control); fi
fi
ip netns exec "$A" iptables -A OUTPUT -o "$DA" -p all -m mark ! --mark 0x7e57 -j NFQUEUE --queue-num 11 &&
  ip netns exec "$A" iptables -A INPUT -i "$DA" -p all -m mark ! --mark 0x7e57 -j NFQUEUE --queue-num 11 ||
  skip "iptables NFQUEUE not available"

ip netns exec "$A" "$IMP" --queue 11 --seed 3 --rate "${RATE_MBIT}M" --burst 16k --limit "$LIMIT" \
  > "$tmp/imp" 2>&1 &
pids+=($!)
for _ in $(seq 200); do grep -q ready "$tmp/imp" && break; sleep 0.05; done
grep -q ready "$tmp/imp" || { echo "FAIL: impairer not ready"; cat "$tmp/imp"; exit 1; }

cat > "$tmp/tcp.py" << 'EOF'
import socket, sys, time
mode = sys.argv[1]
if mode == "server":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("10.79.0.2", 5601)); s.listen(1); print("ready", flush=True)
    c, _ = s.accept(); c.settimeout(0.05); n = 0; last = 0.0
    log = open(sys.argv[2], "w")
    while True:
        try:
            d = c.recv(1 << 20)
            if not d: break
            n += len(d)
        except socket.timeout:
            pass
        t = time.time()
        if t - last >= 0.05:
            log.write("%.4f %d\n" % (t, n)); log.flush(); last = t
    log.write("%.4f %d\n" % (time.time(), n)); log.close()
else:
    c = socket.socket()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, sys.argv[3].encode())
    c.connect(("10.79.0.2", 5601))
    buf = b"\x5a" * (1 << 16); t0 = time.time(); secs = float(sys.argv[2])
    while time.time() - t0 < secs: c.sendall(buf)
    c.close()
EOF
ip netns exec "$Bn" python3 "$tmp/tcp.py" server "$tmp/tcplog" > "$tmp/srv" 2>&1 &
pids+=($!)
for _ in $(seq 200); do grep -q ready "$tmp/srv" && break; sleep 0.05; done
# TCP runs longer than ferry, so it competes for ferry's whole run (the drain included).
ip netns exec "$A" timeout $((SECS * 4 + 30)) python3 "$tmp/tcp.py" client $((SECS * 3 + 10)) "$cc" &
tcp_pid=$!
pids+=($tcp_pid)
# TCP takes the link first: wait (with a deadline) until it has moved 1 MB.
for _ in $(seq 400); do
  [ "$(tail -n1 "$tmp/tcplog" 2> /dev/null | awk '{print $2 + 0}')" -gt 1000000 ] 2> /dev/null && break
  sleep 0.05
done
t0=$(date +%s.%N)
out=$(ip netns exec "$A" env FERRY_UDP_IF_INCLUDE="$DA" FERRY_STATS=1 FERRY_UDP_PACING=y \
  timeout $((SECS * 3 + 30)) "$PP" bw -s 65536 -T "$SECS" -c -w -d "$DA" -N "$Bn" -D "$DB" 2>&1)
rc=$?
t1=$(date +%s.%N)
kill "$tcp_pid" 2> /dev/null
echo "$out" | grep -E "bw size|model" | grep -v "tx 1 msgs 1 B"
[ $rc = 0 ] || { echo "FAIL: ferry stream failed ($rc)"; echo "$out" | tail -20; exit 1; }
sleep 0.2
ferry=$(echo "$out" | awk '/GB\/s/ {printf "%.3f", $5 * 1000}')
tcp=$(awk -v a="$t0" -v b="$t1" '$1 <= a {n0 = $2; s0 = $1} $1 <= b {n1 = $2; s1 = $1}
  END { if (s1 > s0) printf "%.3f", (n1 - n0) / (s1 - s0) / 1e6; else print 0 }' "$tmp/tcplog")
link=$(awk -v r="$RATE_MBIT" 'BEGIN { printf "%.3f", r / 8 * 0.95 }') # goodput of the link, MB/s
echo "link ${RATE_MBIT} Mbit/s (~$link MB/s goodput), queue $LIMIT packets, ferry ran $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b - a}') s; load $(cut -d' ' -f1 /proc/loadavg)"
echo "ferry udp: $ferry MB/s   Linux TCP ($cc, same interval): $tcp MB/s"
awk -v f="$ferry" -v t="$tcp" -v l="$link" 'BEGIN {
  printf "shares of the link: ferry %.2f, tcp %.2f\n", f / l, t / l
  exit !(f >= l / 4 && t >= l / 4) }' || { echo "FAIL: a flow kept less than a quarter of the link"; exit 1; }
echo "PASS"
