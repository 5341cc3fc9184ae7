#!/bin/sh
# run.sh BUILD_DIR SECONDS [TARGET...] - run each libFuzzer target of tests/fuzz for SECONDS,
# one after the other, from its seed corpus (tests/fuzz/corpus/<target>, never written) and a
# working corpus in BUILD_DIR/fuzz-corpus/<target> (kept between runs).  A crash, leak or
# timeout leaves its input in BUILD_DIR/fuzz-artifacts/ and fails the run.  The last line of
# each target's stats (executions, coverage, features) goes to BUILD_DIR/fuzz-summary.txt.
# FUZZ_NICE=19 runs the fuzzers at the lowest priority (the default; the machine is shared).
set -u
build=$1 secs=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
[ $# -gt 0 ] || set -- $(cd "$here" && ls fuzz_*.c | sed 's/\.c$//')
mkdir -p "$build/fuzz-artifacts"
summary=$build/fuzz-summary.txt
# (appended to: `make fuzz` starts it afresh)
failed=0
# As root, each target runs in private pid and network namespaces (only a loopback inside):
# whatever a fuzzed message names - a pid to read from, an address to answer to - no other
# process on the machine is reached.  FUZZ_ISOLATE=0 turns this off.
isolate=
if [ "$(id -u)" = 0 ] && [ "${FUZZ_ISOLATE:-1}" != 0 ] && command -v unshare >/dev/null &&
    unshare --pid --fork --mount-proc --net true 2>/dev/null; then
    isolate="unshare --pid --fork --mount-proc --net $here/in_netns.sh"
fi
for t in "$@"; do
    exe=$build/tests/fuzz/$t
    [ -x "$exe" ] || { echo "run.sh: $exe is not built" >&2; failed=1; continue; }
    mkdir -p "$build/fuzz-corpus/$t"
    log=$build/fuzz-artifacts/$t.log
    echo "fuzz: $t for ${secs}s" >&2
    $isolate nice -n "${FUZZ_NICE:-19}" "$exe" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$build/fuzz-artifacts/$t-" \
        "$build/fuzz-corpus/$t" "$here/corpus/$t" >"$log" 2>&1
    rc=$?
    last=$(grep -E '^#[0-9]+' "$log" | tail -1)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "$t: rc=$rc execs=${execs:-?} $last" | tee -a "$summary"
    if [ $rc -ne 0 ]; then
        failed=1
        grep -E 'ERROR|SUMMARY|Test unit written' "$log" | head -5 >&2
    fi
done
exit $failed
