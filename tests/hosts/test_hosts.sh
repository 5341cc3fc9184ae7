#!/bin/bash
# test_hosts.sh - ferry across "hosts" made of namespaces (tests/hosts/testbed.sh), and
# ferryrun's multi-host launch (--hosts, --hostfile, --agent, --boot-addr, -x).
#
#   test_hosts.sh CASE FERRYRUN ALLTOALL [RAILS_CHECK [WORLD_CHECK]]
#
# Each case builds its own testbed (names carry this shell's pid), runs, and tears it down
# (trap on exit, also on failure or timeout).  ferryrun itself runs on host tbA, as it would
# on a cluster's first node, with its bootstrap on tbA's address; the ranks are started
# through tests/hosts/tb-agent, which behaves like ssh (no environment passed).  Exit 0 =
# pass, 1 = fail, 77 = skipped (namespaces impossible here, or a case waiting for work in
# progress elsewhere: see PENDING below).
#
# Cases:
#   args          bad --hosts/--hostfile/--boot-addr/-x/--agent input: clear errors (no testbed)
#   local         --hosts localhost:2 starts ranks directly, per-host FERRY_LOCAL_* (no testbed)
#   secret        the job secret is not on a remote rank's command line (the agent's argv, what
#                 ps shows) but reaches it on stdin: a remote rank (an agent that records its
#                 argv and runs the command here) has the local rank's secret, and alltoall
#                 over two such ranks passes the bootstrap's check (no testbed)
#   alltoall      examples/alltoall, 2 hosts x 2 ranks, default lanes, data checked
#   world         2 hosts x 2 ranks, every pair: an AM, a rendezvous tagged message, a put read
#                 back by a get, all checked (world_check); pairs of one host on shm, pairs
#                 across the hosts on tcp (the best network lane there); simultaneous
#                 connects end in one endpoint per peer, the handler's is the application's
#   peer_death    a rank of the other host dies (as after kill -9) while rank 0 connects to it,
#                 and once connected: rank 0's endpoint fails within 10 s each time, no hang
#   sockaddr      no launcher: examples/client_server's server listens on tbA's address, the
#                 client on tbB makes its endpoint from ip:port, 20 echoes come back intact
#   hostfile      the same from a --hostfile, with --boot-addr eth0:PORT
#   env           FERRY_* and -x variables reach remote ranks on the command line; per-host
#                 local rank/size; each rank on the host it was placed on
#   byaddr        hosts given by address: the bootstrap address found by route, alltoall passes
#   rank_dies     a remote rank that exits 3 ends the job: status 3, within seconds, named
#   noudp         udp dropped between the hosts: alltoall still passes (over tcp)
#   notcp         tcp dropped between the hosts (the bootstrap's port excepted): passes (udp)
#   impair        alltoall through the impairer on tbB's link (1% loss, reordering, delay, a rate
#                 limit): passes, and the impairer counted losses and rate-limited packets
#   nonet         udp and tcp dropped: fails (no hang) with an error naming both candidates
#   shm_same      two hosts (network namespaces) sharing the machine's /dev/shm: alltoall passes
#                 with FERRY_TLS=self,shm and ferry_info shows the default AM lane is shm; two
#                 ranks of one host: alltoall with FERRY_TLS=self,shm
#   shm_separate  two ranks with one network namespace but separate /dev/shm: alltoall passes
#                 by default, and fails cleanly (no hang) with FERRY_TLS=self,shm: not over shm
#   rails         two links between two hosts: ferry_info shows both as rails; rails_check
#                 (striped and small AMs mixed, both ways) passes, bytes and order checked, and
#                 each link carried at least 30% of the bytes (with FERRY_MAX_RAILS=1: eth1 none);
#                 1 MiB puts (ferry_perf -c) spread over both links too
#   rail_fails    two links (rate-limited by tbf so that the transfer lasts), tcp dropped on the
#                 second one while striped messages cross it both ways: the rail fails
#                 (FERRY_TCP_USER_TIMEOUT), is dropped with a warning, the messages with bytes
#                 lost on it are dropped at the receiver after the sender's abort (or their sends
#                 fail), and everything else still arrives whole and in order: no hang
#
# PENDING: a case that fails today only because of work in progress elsewhere calls `pending`
# and runs only with FYHOSTS_PENDING=1; otherwise it prints why and skips.  (None does now.)
set -u
CASE=${1:?case}
FRUN=${2:?ferryrun}
A2A=${3:?alltoall}
RAILS=${4:-}
WORLD=${5:-}
HERE=$(cd "$(dirname "$0")" && pwd)
AGENT=$HERE/tb-agent
TMO=40

fail() {
    echo "FAIL ($CASE): $*"
    exit 1
}

# Variables the sanitizer build needs in remote ranks (tb-agent passes no environment).
XS=()
for v in ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS; do
    [ -n "${!v:-}" ] && XS+=(-x "$v")
done

pending() {
    if [ "${FYHOSTS_PENDING:-0}" != 1 ]; then
        echo "SKIP: $* (set FYHOSTS_PENDING=1 to run it)"
        exit 77
    fi
}

# ferryrun on host tbA (whole environment kept), stdout+stderr to $OUT; returns its status.
OUT=$(mktemp /tmp/fyhosts-out.XXXXXX)
trap 'rm -f "$OUT" "$OUT.hf"' EXIT
run_on_a() {
    "$AGENT" -E tbA "$(printf '%q ' "$FRUN" --timeout $TMO "${XS[@]}" --agent "$AGENT" "$@")" \
        > "$OUT" 2>&1
}
show() { sed 's/^/    | /' "$OUT"; }

source "$HERE/testbed.sh"
case $CASE in args | local | secret) ;; *) tb_reexec_unprivileged "$0" "$@" ;; esac

two_hosts() { # [tb_host options, e.g. links=2]
    tb_can || exit 77
    tb_init
    trap 'rm -f "$OUT" "$OUT.hf"; tb_down' EXIT
    tb_host tbA shm=private "$@"
    tb_host tbB shm=private "$@"
    tb_up || fail "could not build the testbed"
}

expect_alltoall_ok() { # what: ferryrun args...
    local what=$1
    shift
    run_on_a "$@"
    local rc=$?
    show
    [ $rc = 0 ] || fail "$what: ferryrun exited with $rc"
    grep -q "[0-9] ranks (builtin).*all verified" "$OUT" || fail "$what: no verdict from alltoall"
    echo "ok: $what"
}

case $CASE in
args)
    r() { "$FRUN" "$@" > "$OUT" 2>&1; }
    chk() { # status pattern: the last command's status and message
        local st=$? want=$1 pat=$2
        [ $st = "$want" ] || { show; fail "expected status $want, got $st"; }
        grep -q -- "$pat" "$OUT" || { show; fail "expected \"$pat\" in the message"; }
    }
    r --hosts a:0 true; chk 2 "slots must be an integer"
    r --hosts 'a;b:1' true; chk 2 "only letters"
    r --hosts , true; chk 2 "no host in it"
    r --hosts a:2 -n 3 true; chk 2 "the hosts have 2 slots"
    r --hostfile /nonexistent/hf true; chk 2 "No such file"
    printf '# only a comment\n\n' > "$OUT.hf"
    r --hostfile "$OUT.hf" true; chk 2 "no host in it"
    printf 'h1 slots=2\nh2:x\n' > "$OUT.hf"
    r --hostfile "$OUT.hf" true; chk 2 "$OUT.hf:2"
    rm -f "$OUT.hf"
    r --hosts h1 --boot-addr nosuchif0 true; chk 2 "neither an IPv4 address nor an interface"
    r --hosts h1 --boot-addr 127.0.0.1:99999 true; chk 2 "port must be"
    r --hosts h1 --boot-addr 0.0.0.0 true; chk 2 "give one they can reach"
    r -x 'A-B' -n 1 true; chk 2 "expected a variable NAME"
    r --hosts h1 --agent /nonexistent/agent --boot-addr 127.0.0.1 true
    chk 127 "cannot start the agent /nonexistent/agent for rank 0 on h1"
    # the agent's failure (ssh's 255) is the rank's status, and named with its host
    r --hosts h1:2 --agent " false -o x" --boot-addr 127.0.0.1 true; chk 1 "rank [01] on h1"
    echo "ok: bad input gets a clear error and a status"
    ;;
local)
    # localhost is started directly: the agent (which would fail) is never run
    "$FRUN" --hosts localhost:2 --agent /nonexistent/agent sh -c \
        'echo "rank $FERRY_RANK local $FERRY_LOCAL_RANK/$FERRY_LOCAL_SIZE at $FERRY_BOOT_ADDR"' \
        > "$OUT" 2>&1 || { show; fail "ferryrun --hosts localhost:2 failed"; }
    show
    grep -q "rank 0 local 0/2 at 127.0.0.1:" "$OUT" && grep -q "rank 1 local 1/2 at 127.0.0.1:" "$OUT" ||
        fail "local ranks or boot address wrong"
    "$FRUN" --hosts localhost:2 "$A2A" > "$OUT" 2>&1 || { show; fail "alltoall on localhost:2"; }
    echo "ok: localhost ranks"
    ;;
secret)
    # an ssh stand-in for host h1 that keeps its argv and runs the command on this machine,
    # with no FERRY_BOOT_SECRET in its environment (what it knows comes from ferryrun)
    fake=$OUT.agent
    trap 'rm -f "$OUT" "$OUT.agent" "$OUT.argv"' EXIT
    printf '#!/bin/sh\nprintf "%%s\\n" "$@" >> "%s"\nshift\nexec env -u FERRY_BOOT_SECRET sh -c "$*"\n' \
        "$OUT.argv" > "$fake"
    chmod +x "$fake"
    "$FRUN" --timeout $TMO "${XS[@]}" --hosts localhost:1,h1:1 --agent "$fake" \
        --boot-addr 127.0.0.1 sh -c 'echo "r=$FERRY_RANK secret=$FERRY_BOOT_SECRET"' > "$OUT" 2>&1 ||
        { show; fail "ferryrun with a remote rank failed"; }
    show
    s0=$(sed -n 's/^r=0 secret=//p' "$OUT")
    s1=$(sed -n 's/^r=1 secret=//p' "$OUT")
    [ ${#s0} -ge 32 ] || fail "the local rank has no secret"
    [ "$s0" = "$s1" ] || fail "the remote rank's secret ('$s1') is not the job's ('$s0')"
    grep -q "read -r FERRY_BOOT_SECRET" "$OUT.argv" || fail "the agent's command does not read it"
    if grep -qF -e "$s0" -e "FERRY_BOOT_SECRET=" "$OUT.argv"; then
        sed 's/^/    argv| /' "$OUT.argv"
        fail "the secret is on the agent's command line"
    fi
    : > "$OUT.argv"
    "$FRUN" --timeout $TMO "${XS[@]}" --hosts h1:2 --agent "$fake" --boot-addr 127.0.0.1 "$A2A" \
        > "$OUT" 2>&1 || { show; fail "alltoall through the agent"; }
    grep -q "[0-9] ranks (builtin).*all verified" "$OUT" || { show; fail "no verdict from alltoall"; }
    [ "$(grep -c "read -r FERRY_BOOT_SECRET" "$OUT.argv")" = 2 ] || fail "not both ranks by agent"
    echo "ok: the secret travels on stdin, not on the command line"
    ;;
alltoall)
    two_hosts
    expect_alltoall_ok "2 hosts x 2 ranks, default lanes" --hosts tbA:2,tbB:2 "$A2A"
    ;;
world)
    [ -n "$WORLD" ] || fail "no world_check program given"
    two_hosts
    run_on_a --hosts tbA:2,tbB:2 "$WORLD" tcp
    rc=$?
    show
    [ $rc = 0 ] || fail "world_check exited with $rc"
    [ "$(grep -c "am, tag and rma to every rank checked" "$OUT")" = 4 ] || fail "not every rank checked"
    [ "$(grep -c "(same host): am lane shm" "$OUT")" = 4 ] || fail "same-host pairs not on shm"
    [ "$(grep -c "(other host): am lane tcp" "$OUT")" = 8 ] || fail "cross-host pairs not on tcp"
    echo "ok: am, tag and rma between every pair; shm within a host, tcp between hosts"
    ;;
peer_death)
    two_hosts
    PD=$(dirname "$WORLD")/peer_death
    for when in connect after; do
        run_on_a --hosts tbA:1,tbB:1 "$PD" $when
        rc=$?
        show
        [ $rc = 0 ] || fail "peer_death $when: exited with $rc"
        secs=$(sed -n 's/.*the endpoint failed (.*) after \([0-9]*\)\.[0-9] s$/\1/p' "$OUT")
        [ -n "$secs" ] && [ "$secs" -lt 10 ] || fail "peer_death $when: no error within 10 s"
        echo "ok: the peer died during $when: the endpoint failed in ${secs}.x s"
    done
    ;;
sockaddr)
    two_hosts
    CS=$(dirname "$A2A")/client_server
    coproc SRV { exec "$AGENT" -E tbA "exec $(printf '%q' "$CS") server 10.99.0.1 0" 2>&1; }
    port=
    while IFS= read -r -t 20 line <&"${SRV[0]}"; do
        echo "    | $line"
        case $line in "server: listening on "*) port=${line##*:}; break ;; esac
    done
    [ -n "$port" ] || { kill "$SRV_PID" 2>/dev/null; fail "the server did not say its port"; }
    timeout $TMO "$AGENT" -E tbB "$(printf '%q ' "$CS" client 10.99.0.1 "$port" 20)" > "$OUT" 2>&1
    rc=$?
    kill "$SRV_PID" 2>/dev/null
    wait "$SRV_PID" 2>/dev/null
    show
    [ $rc = 0 ] || fail "the client exited with $rc"
    grep -q "client: 20 of 20 echoes back, intact" "$OUT" || fail "the echoes did not come back"
    echo "ok: listener on tbA, endpoint by ip:port from tbB"
    ;;
hostfile)
    two_hosts
    printf '# the testbed\ntbA slots=2\n\ntbB:2   # second\n' > "$OUT.hf"
    expect_alltoall_ok "--hostfile, --boot-addr eth0:$TB_BOOT_PORT" --hostfile "$OUT.hf" \
        --boot-addr "eth0:$TB_BOOT_PORT" "$A2A"
    rm -f "$OUT.hf"
    grep -q . "$OUT" || fail "no output"
    ;;
env)
    two_hosts
    export FERRY_TESTBED_PROBE="it's a 'quoted' \$value"
    export FYHOSTS_X=from-x
    run_on_a --hosts tbA:2,tbB:3 -x FYHOSTS_X -x FYHOSTS_Y=set-here --env FYHOSTS_Z=z sh -c \
        'echo "r=$FERRY_RANK l=$FERRY_LOCAL_RANK/$FERRY_LOCAL_SIZE n=$FERRY_SIZE ip=$(set -- $(ip -4 -br addr show dev eth0); echo "${3%/*}") x=$FYHOSTS_X y=$FYHOSTS_Y z=$FYHOSTS_Z p=$FERRY_TESTBED_PROBE boot=$FERRY_BOOT_ADDR"'
    rc=$?
    show
    [ $rc = 0 ] || fail "ferryrun exited with $rc"
    for want in "r=0 l=0/2 n=5 ip=10.99.0.1 " "r=1 l=1/2 n=5 ip=10.99.0.1 " \
        "r=2 l=0/3 n=5 ip=10.99.0.2 " "r=3 l=1/3 n=5 ip=10.99.0.2 " "r=4 l=2/3 n=5 ip=10.99.0.2 "; do
        grep -qF "$want" "$OUT" || fail "no line with \"$want\""
    done
    [ "$(grep -cF "x=from-x y=set-here z=z p=$FERRY_TESTBED_PROBE boot=10.99.0.1:" "$OUT")" = 5 ] ||
        fail "the variables did not reach every rank intact"
    echo "ok: environment, placement, local ranks, boot address"
    ;;
byaddr)
    # hosts named by address: ferryrun's bootstrap address is the local end of the route to
    # the first remote one (10.99.0.1 on tbA), found without --boot-addr
    two_hosts
    run_on_a --hosts 10.99.0.1:2,10.99.0.2:2 sh -c 'echo "r=$FERRY_RANK boot=$FERRY_BOOT_ADDR"'
    rc=$?
    show
    [ $rc = 0 ] || fail "ferryrun exited with $rc"
    [ "$(grep -c "boot=10.99.0.1:" "$OUT")" = 4 ] || fail "the bootstrap address is not tbA's"
    expect_alltoall_ok "hosts named by address" --hosts 10.99.0.1:2,10.99.0.2:2 "$A2A"
    ;;
rank_dies)
    two_hosts
    start=$SECONDS
    run_on_a --hosts tbA:2,tbB:2 sh -c \
        '[ "$FERRY_RANK" = 3 ] && exit 3; exec sleep 60 # the victims, ended by ferryrun'
    rc=$?
    show
    [ $rc = 3 ] || fail "expected status 3 (rank 3's), got $rc"
    grep -q "rank 3 on tbB (agent pid [0-9]*) exited with status 3; ending the other 3 ranks" \
        "$OUT" || fail "rank 3's failure was not reported with its host"
    [ $((SECONDS - start)) -lt 15 ] || fail "the job took $((SECONDS - start)) s to end"
    echo "ok: a remote rank's failure ends the job"
    ;;
noudp)
    two_hosts
    tb_drop tbB udp || fail "iptables"
    expect_alltoall_ok "udp dropped between the hosts" --hosts tbA:2,tbB:2 \
        --boot-addr "eth0:$TB_BOOT_PORT" "$A2A"
    ;;
nonet)
    two_hosts
    tb_drop tbB udp && tb_drop tbB tcp || fail "iptables"
    start=$SECONDS
    run_on_a --hosts tbA:1,tbB:1 --boot-addr "eth0:$TB_BOOT_PORT" "$A2A"
    rc=$?
    show
    [ $rc != 0 ] || fail "alltoall passed with no network between the hosts"
    [ $rc != 124 ] || fail "no error within ${TMO} s: the job hung"
    grep -Eiq "tcp.*udp|udp.*tcp" "$OUT" || fail "the error does not name both candidates"
    echo "ok: no network: failed in $((SECONDS - start)) s, naming the candidates"
    ;;
notcp)
    two_hosts
    tb_drop tbB tcp || fail "iptables"
    # the rule holds: a tcp connect from tbB to tbA (not the bootstrap's port) times out
    "$AGENT" tbB "timeout 3 bash -c 'exec 3<>/dev/tcp/10.99.0.1/24998'" 2>/dev/null
    [ $? = 124 ] || fail "tcp between the hosts is not dropped"
    expect_alltoall_ok "tcp dropped between the hosts" --hosts tbA:2,tbB:2 \
        --boot-addr "eth0:$TB_BOOT_PORT" "$A2A"
    ;;
impair)
    [ -x "${FY_IMPAIR:-}" ] || { echo "SKIP: fy_impair is not built (libnetfilter_queue)"; exit 77; }
    two_hosts
    tb_impair tbB 0 both -- --seed 3 --loss 1 --reorder 1 --delay 1 --delay-us 200 \
        --rate 300M || fail "the impairer did not start"
    # a loaded machine (sanitizers, other jobs) and losses: give udp's peers more than the
    # default 3 s before they are presumed dead (passed on to the remote ranks as FERRY_*)
    export FERRY_UDP_PEER_TIMEOUT=20s
    expect_alltoall_ok "through the impairer" --hosts tbA:2,tbB:2 "$A2A"
    tb_impair_stop
    cat "$FYHOSTS_DIR"/impair*.log
    grep -Eq "lost [1-9][0-9]*, .*rate-limited [1-9]" "$FYHOSTS_DIR"/impair*.log ||
        fail "the impairer saw no traffic to lose or limit"
    echo "ok: impaired link"
    ;;
shm_same)
    # two network namespaces (each its own addresses and abstract socket space) that share
    # the machine's /dev/shm: shm must be found (its probe and wake-up socket are files there)
    tb_can || exit 77
    tb_init
    trap 'rm -f "$OUT" "$OUT.hf"; tb_down' EXIT
    tb_host tbA shm=shared
    tb_host tbB shm=shared
    tb_up || fail "could not build the testbed"
    [ "$("$AGENT" tbA readlink /proc/self/ns/net)" != "$("$AGENT" tbB readlink /proc/self/ns/net)" ] ||
        fail "tbA and tbB share a network namespace"
    expect_alltoall_ok "two network namespaces, one /dev/shm, FERRY_TLS=self,shm" \
        --hosts tbA:1,tbB:1 --env FERRY_TLS=self,shm "$A2A"
    # the default lanes choose shm between them (every transport offered)
    run_on_a --hosts tbA:1,tbB:1 "$(dirname "$FRUN")/ferry_info" -a || { show; fail "ferry_info -a"; }
    [ "$(grep -c "ep [0-9]* -> [0-9a-f]*.* am=shm/memory" "$OUT")" = 2 ] ||
        { show; fail "the default AM lane between the namespaces is not shm on both ranks"; }
    echo "ok: default lanes across the namespaces: am=shm/memory on both ranks"
    # and two ranks of one host, as before
    expect_alltoall_ok "one host, shared /dev/shm, FERRY_TLS=self,shm" --hosts tbA:2 \
        --env FERRY_TLS=self,shm --boot-addr eth0 "$A2A"
    ;;
shm_separate)
    tb_can || exit 77
    tb_init
    trap 'rm -f "$OUT" "$OUT.hf"; tb_down' EXIT
    tb_host tbA shm=private
    tb_host tbA2 net=tbA shm=private
    tb_up || fail "could not build the testbed"
    "$AGENT" tbA touch /dev/shm/fyhosts_probe
    "$AGENT" tbA2 test -e /dev/shm/fyhosts_probe && fail "tbA2 sees tbA's /dev/shm"
    run_on_a --hosts tbA:1,tbA2:1 "$A2A"
    rc=$?
    show
    [ $rc = 0 ] || fail "separate /dev/shm, default lanes: ferryrun exited with $rc"
    grep -q "2 ranks (builtin).*all verified" "$OUT" || fail "no verdict from alltoall"
    echo "ok: separate /dev/shm, default lanes"
    start=$SECONDS
    run_on_a --hosts tbA:1,tbA2:1 --env FERRY_TLS=self,shm "$A2A"
    rc=$?
    show
    [ $rc != 0 ] || fail "FERRY_TLS=self,shm worked between separate /dev/shm: it cannot be shm"
    [ $rc != 124 ] && [ $((SECONDS - start)) -lt $TMO ] ||
        fail "FERRY_TLS=self,shm between separate /dev/shm hung instead of failing"
    echo "ok: separate /dev/shm is not reachable over shm (status $rc, a clean failure)"
    ;;
rail_fails)
    [ -n "$RAILS" ] || fail "no rails_check program given"
    two_hosts links=2
    for h in tbA tbB; do
        for k in 0 1; do
            "$AGENT" $h tc qdisc add dev eth$k root tbf rate 200mbit burst 64kb latency 200ms ||
                { echo "SKIP: tc tbf is not available here"; exit 77; }
        done
    done
    txb() { "$AGENT" tbA cat /sys/class/net/eth$1/statistics/tx_bytes; }
    export FERRY_TCP_USER_TIMEOUT=2s # unacknowledged data on a dead link fails the rail
    b1=$(txb 1)
    start=$SECONDS
    # 7 rounds: 56 messages each way, no more than the receiver gathers or holds at once
    run_on_a --hosts tbA:1,tbB:1 "$RAILS" 7 lossy &
    job=$!
    # the cut: once eth1 carried 3 MB (the counter polled, bounded by a deadline)
    until [ $(($(txb 1) - b1)) -gt 3000000 ] || [ $((SECONDS - start)) -gt 30 ]; do
        sleep 0.02
    done
    tb_drop tbA tcp 1 || fail "iptables"
    echo "eth1 cut after $(($(txb 1) - b1)) B"
    wait $job
    rc=$?
    show
    [ $rc = 0 ] || fail "rails_check (lossy) exited with $rc: messages out of order, or a hang"
    grep -q "the rail tcp eth1 failed" "$OUT" || fail "no rank saw the rail fail"
    [ "$(grep -c "rails_check: rank [01]: .*: ok" "$OUT")" = 2 ] || fail "a rank did not finish"
    grep -Eq "dropped: [0-9]+ of its bytes were on the sender's rail|[1-9][0-9]* sends failed" \
        "$OUT" || fail "nothing was lost with the rail: was it cut mid-transfer?"
    echo "ok: a rail cut mid-transfer: dropped, its messages dropped or failed, the rest in order"
    ;;
rails)
    # two links between two hosts: AMs above FERRY_RAILS_THRESH are striped over both
    [ -n "$RAILS" ] || fail "no rails_check program given"
    two_hosts links=2
    run_on_a --hosts tbA:1,tbB:1 "$(dirname "$FRUN")/ferry_info" -a || { show; fail "ferry_info -a"; }
    [ "$(grep -c "am=tcp/eth0 .* rails=tcp/eth0:[0-9]*+tcp/eth1:[0-9]*" "$OUT")" = 2 ] ||
        { show; fail "ferry_info -a does not show both links as rails on both ranks"; }
    txb() { "$AGENT" tbA cat /sys/class/net/eth$1/statistics/tx_bytes; }
    # (rails_check ROUNDS: rank pairs send each other messages of 0 B..3 MiB, order and bytes checked)
    for rails in 1 2; do
        a0=$(txb 0) a1=$(txb 1)
        run_on_a --hosts tbA:1,tbB:1 --env FERRY_MAX_RAILS=$rails "$RAILS" $((rails == 1 ? 1 : 3))
        rc=$?
        show
        [ $rc = 0 ] || fail "FERRY_MAX_RAILS=$rails: rails_check exited with $rc"
        [ "$(grep -c "in order (0 lost), 0 errors, 0 sends failed: ok" "$OUT")" = 2 ] || fail "no verdict of both ranks"
        d0=$(($(txb 0) - a0)) d1=$(($(txb 1) - a1))
        echo "FERRY_MAX_RAILS=$rails: tbA sent $d0 B on eth0, $d1 B on eth1"
        if [ $rails = 1 ]; then
            [ $((d1 * 20)) -lt $((d0 + d1)) ] || fail "one rail, yet eth1 carried $d1 of $((d0 + d1)) B"
        else
            [ $((d1 * 10)) -gt $(((d0 + d1) * 3)) ] && [ $((d0 * 10)) -gt $(((d0 + d1) * 3)) ] ||
                fail "two rails, yet the bytes were not shared: eth0 $d0 B, eth1 $d1 B"
        fi
    done
    echo "ok: striped over both links, every message whole and in order"
    # native puts above the threshold: pieces over both links (ferry_perf checks every byte)
    a0=$(txb 0) a1=$(txb 1)
    run_on_a --hosts tbA:1,tbB:1 "$(dirname "$FRUN")/ferry_perf" -t put_bw -s 1m -n 16 -w 2 -c
    rc=$?
    show
    [ $rc = 0 ] && grep -q "verification: passed (0 errors)" "$OUT" || fail "put_bw -c over the rails"
    d0=$(($(txb 0) - a0)) d1=$(($(txb 1) - a1))
    echo "puts: tbA sent $d0 B on eth0, $d1 B on eth1"
    [ $((d1 * 10)) -gt $(((d0 + d1) * 3)) ] && [ $((d0 * 10)) -gt $(((d0 + d1) * 3)) ] ||
        fail "puts were not spread over the rails: eth0 $d0 B, eth1 $d1 B"
    echo "ok: puts striped over both links, every byte checked"
    ;;
*)
    fail "unknown case"
    ;;
esac
exit 0
