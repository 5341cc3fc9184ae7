# testbed.sh - "hosts" made of Linux namespaces, for ferry's multi-host tests and benchmarks.
#
# Sourced by bash scripts (tests/hosts/*.sh, bench/hosts.sh).  A host is a network namespace
# with its own loopback and one interface per link (eth0, eth1, ...), each link a bridge in
# a switch namespace, and its own mount namespace (held by a small holder process) in which
# /sys shows the host's own interfaces and /dev/shm is either a private tmpfs (shm=private:
# the host's ranks share it, other hosts do not see it) or the machine's (shm=shared).  A host
# can also share another host's network namespace (net=OTHER): two "hosts" with one address
# and separate /dev/shm.  Nothing is created in the caller's own network namespace, so other
# programs on the machine see no new interface or route.
#
#   source tests/hosts/testbed.sh
#   tb_init                        # names, cleanup trap, stale sweep (needs root or userns)
#   tb_host tbA shm=private        # declare hosts (before tb_up)
#   tb_host tbB shm=private links=2
#   tb_up                          # build everything; FYHOSTS_DIR is exported
#   tests/hosts/tb-agent tbA cmd   # run a command on a host, like ssh
#   tb_drop tbA udp                # per-link hooks: drop udp or tcp on a host's link
#   tb_impair tbA 0 --rate 1g      # the NFQUEUE impairer (tests/faults/fy_impair) on a link
#   tb_down                        # also run by the EXIT trap
#
# Names carry the creating shell's pid ("fyh<pid>-<host>", "fyh<pid>-sw") so runs of several
# engineers never collide, and a run killed before its trap ran is swept by the next one (its
# pid is gone).  Link k uses the private subnet 10.99.k.0/24; host i has 10.99.k.(i+1).  Those
# subnets exist only inside the testbed's namespaces.

TB_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

tb_say() { echo "testbed: $*" >&2; }

# Can this process make namespaces?  Root can; otherwise re-run the calling script in a user
# namespace that owns its network and mount namespaces, with its own /run/netns.  Returns 1
# (after printing why) when neither works: the caller skips (exit 77).
tb_can() {
    local probe=fyhprobe$$
    if ip netns add "$probe" 2>/dev/null; then
        ip netns del "$probe"
        command -v nsenter >/dev/null && command -v unshare >/dev/null && return 0
        echo "SKIP: nsenter/unshare (util-linux) are not installed"
        return 1
    fi
    echo "SKIP: cannot create network namespaces here (not root, and no usable user namespaces)"
    return 1
}

# Re-exec "$@" (the calling script and its arguments) in a user namespace when not root.
# Call before tb_init: tb_reexec_unprivileged "$0" "$@"
tb_reexec_unprivileged() {
    [ "$(id -u)" = 0 ] && return 0
    [ -n "${FYHOSTS_USERNS:-}" ] && return 0
    unshare -rnm true 2>/dev/null || return 0 # no user namespaces: tb_can will say so
    export FYHOSTS_USERNS=1
    exec unshare -rnm --propagation private bash -c \
        'mkdir -p /run/netns 2>/dev/null; mount -t tmpfs none /run/netns && exec "$0" "$@"' "$@"
}

tb_init() {
    TB_ID=fyh$$
    TB_HOSTS=()
    TB_IMPAIRERS=()
    TB_NLINKS=1
    declare -gA TB_SHM TB_NET TB_IDX
    FYHOSTS_DIR=$(mktemp -d "/tmp/$TB_ID.XXXX") || return 1
    export FYHOSTS_DIR
    echo "$TB_ID" > "$FYHOSTS_DIR/id"
    tb_sweep
    trap 'tb_down' EXIT
    trap 'tb_down; exit 130' INT
    trap 'tb_down; exit 143' TERM
}

# Remove what runs killed before their trap left: namespaces fyh<pid>-* and holder processes
# whose creating shell is gone.  Only names with our prefix and a dead pid are touched.
tb_sweep() {
    local ns pid d p
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
        case $ns in fyh[0-9]*-*) ;; *) continue ;; esac
        pid=${ns#fyh}
        pid=${pid%%-*}
        [ "$pid" = $$ ] && continue
        kill -0 "$pid" 2>/dev/null && continue
        ip netns del "$ns" 2>/dev/null
    done
    for d in /tmp/fyh[0-9]*.*; do
        [ -d "$d" ] || continue
        pid=${d#/tmp/fyh}
        pid=${pid%%.*}
        [ "$pid" = $$ ] && continue
        kill -0 "$pid" 2>/dev/null && continue
        for p in "$d"/*.pid; do
            [ -f "$p" ] && tb_kill_marked "$(cat "$p")" "fyh$pid-"
        done
        for p in "$d"/*.impair; do
            [ -f "$p" ] && tb_kill_marked "$(cat "$p")" "fy_impair"
        done
        rm -rf "$d"
    done
}

# Kill a process by pid only if its command line carries our marker (pids get reused).
tb_kill_marked() {
    local pid=$1 mark=$2
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 0
    tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q -- "$mark" || return 0
    kill -TERM "$pid" 2>/dev/null
}

# tb_host NAME [shm=private|shared] [net=OTHER] [links=N]
tb_host() {
    local name=$1 a
    shift
    case $name in *[!A-Za-z0-9_]* | "") tb_say "bad host name '$name'"; return 1 ;; esac
    TB_HOSTS+=("$name")
    TB_SHM[$name]=private
    TB_NET[$name]=""
    for a in "$@"; do
        case $a in
        shm=private | shm=shared) TB_SHM[$name]=${a#shm=} ;;
        net=*) TB_NET[$name]=${a#net=} ;;
        links=[1-8]) [ "${a#links=}" -gt "$TB_NLINKS" ] && TB_NLINKS=${a#links=} ;;
        *) tb_say "tb_host $name: unknown option '$a'"; return 1 ;;
        esac
    done
}

tb_ns() { # the network namespace of a host
    local h=$1
    [ -n "${TB_NET[$h]}" ] && h=${TB_NET[$h]}
    echo "$TB_ID-$h"
}

tb_addr() { # tb_addr HOST [LINK]: the host's address on a link
    echo "10.99.${2:-0}.$((TB_IDX[${TB_NET[$1]:-$1}] + 1))"
}

tb_up() {
    local sw=$TB_ID-sw h i k ns dev
    ip netns add "$sw" || return 1
    ip -n "$sw" link set lo up
    for ((k = 0; k < TB_NLINKS; k++)); do
        ip -n "$sw" link add "br$k" type bridge || return 1
        ip -n "$sw" link set "br$k" up
    done
    i=0
    for h in "${TB_HOSTS[@]}"; do
        [ -n "${TB_NET[$h]}" ] && continue
        TB_IDX[$h]=$i
        ns=$TB_ID-$h
        ip netns add "$ns" || return 1
        ip -n "$ns" link set lo up
        for ((k = 0; k < TB_NLINKS; k++)); do
            dev=p$i-$k
            ip link add "eth$k" netns "$ns" type veth peer name "$dev" netns "$sw" || return 1
            ip -n "$sw" link set "$dev" master "br$k" up || return 1
            ip -n "$ns" addr add "10.99.$k.$((i + 1))/24" dev "eth$k" || return 1
            ip -n "$ns" link set "eth$k" up || return 1
        done
        i=$((i + 1))
    done
    for h in "${TB_HOSTS[@]}"; do
        if [ -n "${TB_NET[$h]}" ] && [ -z "${TB_IDX[${TB_NET[$h]}]+x}" ]; then
            tb_say "host $h: net=${TB_NET[$h]} names no host with its own network"
            return 1
        fi
        tb_holder "$h" || return 1
        echo "$(tb_addr "$h")" > "$FYHOSTS_DIR/$h.addr"
    done
    tb_wait_carrier || return 1
    printf '%s\n' "${TB_HOSTS[@]}" > "$FYHOSTS_DIR/hosts"
}

# The holder of a host's mount namespace: enters the host's network namespace, makes its
# own mount namespace (mounts there do not propagate out), mounts a sysfs of that network
# namespace and, for shm=private, a fresh tmpfs on /dev/shm, says "ready" and waits.  It dies
# with the shell that made it (--pdeathsig) and at tb_down.
tb_holder() {
    local h=$1 ns fd line shm=""
    ns=$(tb_ns "$h")
    [ "${TB_SHM[$h]}" = private ] && shm="mount -t tmpfs -o size=1g,mode=1777 fyshm /dev/shm &&"
    exec {fd}< <(exec setpriv --pdeathsig KILL nsenter --net="/run/netns/$ns" \
        unshare --mount --propagation slave bash -c \
        "mount -t sysfs sysfs /sys && $shm echo ready && exec -a $TB_ID-hold-$h sleep infinity" \
        2>&1)
    echo $! > "$FYHOSTS_DIR/$h.pid"
    if ! read -r -t 10 -u "$fd" line || [ "$line" != ready ]; then
        tb_say "host $h: the namespace holder did not start: $line"
        exec {fd}<&-
        return 1
    fi
    exec {fd}<&-
}

# A new veth's carrier comes up asynchronously: poll its state with a deadline (the kernel
# offers no readiness notification to a script), then check each host reaches the others.
tb_wait_carrier() {
    local deadline=$((SECONDS + 10)) h k ns
    for h in "${TB_HOSTS[@]}"; do
        [ -n "${TB_NET[$h]}" ] && continue
        ns=$TB_ID-$h
        for ((k = 0; k < TB_NLINKS; k++)); do
            until ip -n "$ns" -o link show dev "eth$k" | grep -q 'state UP'; do
                if [ $SECONDS -ge $deadline ]; then
                    tb_say "host $h: eth$k did not come up"
                    return 1
                fi
                sleep 0.02 # polling the link state, bounded by the deadline above
            done
        done
    done
}

tb_ipt() { # tb_ipt HOST iptables-arguments...: in the host's network namespace
    local h=$1
    shift
    ip netns exec "$(tb_ns "$h")" iptables -w 5 "$@"
}

# tb_drop HOST udp|tcp [LINK|all]: drop that protocol on the host's link(s), both ways,
# silently (a firewall that filters: connects time out).  TCP port TB_BOOT_PORT (ferryrun
# --boot-addr ADDR:$TB_BOOT_PORT) stays open: the launcher's own connection is not what the
# tests take away.
TB_BOOT_PORT=24999
tb_drop() {
    local h=$1 proto=$2 link=${3:-all} k keep=()
    case $proto in udp | tcp) ;; *) tb_say "tb_drop: udp or tcp, not '$proto'"; return 1 ;; esac
    [ "$proto" = tcp ] && keep=(-m multiport ! --ports "$TB_BOOT_PORT")
    for ((k = 0; k < TB_NLINKS; k++)); do
        [ "$link" = all ] || [ "$link" = "$k" ] || continue
        tb_ipt "$h" -A INPUT -i "eth$k" -p "$proto" "${keep[@]}" -j DROP || return 1
        tb_ipt "$h" -A OUTPUT -o "eth$k" -p "$proto" "${keep[@]}" -j DROP || return 1
    done
}

tb_undrop() { # remove every rule of tb_drop/tb_impair on a host
    tb_ipt "$1" -F INPUT && tb_ipt "$1" -F OUTPUT
}

# tb_impair HOST LINK [DIR] -- fy_impair options...: queue what the host sends on eth<LINK>
# (DIR=out, the default) or sends and receives (DIR=both) through the impairer, started in
# the host's namespaces.  Returns when it is bound to its queue.  FY_IMPAIR names the
# program (default: fy_impair next to this build's tests/faults).
tb_impair() {
    local h=$1 link=$2 dir=out q fd line
    shift 2
    if [ "$1" = out ] || [ "$1" = both ]; then dir=$1; shift; fi
    [ "$1" = -- ] && shift
    q=$((10 + ${#TB_IMPAIRERS[@]}))
    [ -x "$FY_IMPAIR" ] || { tb_say "FY_IMPAIR=$FY_IMPAIR is not an executable"; return 1; }
    tb_ipt "$h" -A OUTPUT -o "eth$link" -m mark ! --mark 0x7e57 -j NFQUEUE --queue-num $q ||
        return 1
    if [ $dir = both ]; then
        tb_ipt "$h" -A INPUT -i "eth$link" -m mark ! --mark 0x7e57 -j NFQUEUE --queue-num $q ||
            return 1
    fi
    exec {fd}< <(exec setpriv --pdeathsig KILL "$TB_HERE/tb-agent" "$h" \
        exec "$FY_IMPAIR" --queue $q "$@" 2>"$FYHOSTS_DIR/impair$q.log")
    local pid=$!
    echo $pid > "$FYHOSTS_DIR/$q.impair"
    TB_IMPAIRERS+=("$pid")
    if ! read -r -t 10 -u "$fd" line || [ "$line" != ready ]; then
        tb_say "the impairer on $h eth$link did not start: $(cat "$FYHOSTS_DIR/impair$q.log")"
        exec {fd}<&-
        return 1
    fi
    exec {fd}<&-
}

# Stop the impairers and take their rules away (their summaries stay in
# $FYHOSTS_DIR/impair*.log until tb_down).
tb_impair_stop() {
    local p h
    for p in "${TB_IMPAIRERS[@]}"; do
        kill -TERM "$p" 2>/dev/null && tail --pid="$p" -f /dev/null 2>/dev/null
    done
    TB_IMPAIRERS=()
    for h in "${TB_HOSTS[@]}"; do
        [ -z "${TB_NET[$h]}" ] && tb_undrop "$h" 2>/dev/null
    done
}

tb_down() {
    local p h
    [ -n "$TB_ID" ] || return 0
    for p in "${TB_IMPAIRERS[@]}"; do
        kill -TERM "$p" 2>/dev/null && tail --pid="$p" -f /dev/null 2>/dev/null
    done
    TB_IMPAIRERS=()
    for h in "${TB_HOSTS[@]}"; do
        [ -f "$FYHOSTS_DIR/$h.pid" ] && tb_kill_marked "$(cat "$FYHOSTS_DIR/$h.pid")" "$TB_ID-"
    done
    for h in $(ip netns list 2>/dev/null | awk '{print $1}'); do
        case $h in "$TB_ID"-*) ip netns del "$h" 2>/dev/null ;; esac
    done
    [ -n "$FYHOSTS_DIR" ] && rm -rf "$FYHOSTS_DIR"
    TB_ID=""
}
