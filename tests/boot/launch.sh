#!/bin/sh
# launch.sh LAUNCHER NP EXPECT PROGRAM [ARGS...] - run PROGRAM as NP ranks under a launcher
# for CTest, and pass only if it exits 0 (non-zero if LAUNCH_EXPECT_FAIL=1) AND its output
# matches the extended regular expression EXPECT.
#
#   LAUNCHER  hydra (mpiexec.hydra), mpirun (Open MPI), ferryrun:<path>, none (a singleton)
#
# Exit 77 (CTest SKIP_RETURN_CODE) when the launcher is not installed.  The launcher is bounded
# by timeout(1) (FERRY_TEST_LAUNCH_TIMEOUT seconds, default 60), which sends SIGTERM first so
# that the launcher can end its ranks.
set -u
launcher=$1 np=$2 expect=$3
shift 3
limit=${FERRY_TEST_LAUNCH_TIMEOUT:-60}
here=$(cd "$(dirname "$0")" && pwd)
# libpmix, libevent and hwloc keep a few allocations until exit: not ours to report
LSAN_OPTIONS="suppressions=$here/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export LSAN_OPTIONS

# a launcher's marks inherited from outside would confuse the bootstrap's choice
for v in FERRY_BOOT FERRY_BOOT_ADDR FERRY_RANK FERRY_SIZE FERRY_LOCAL_RANK FERRY_LOCAL_SIZE \
         FERRY_JOB_KEY PMI_FD PMI_PORT PMI_RANK PMI_SIZE PMIX_NAMESPACE PMIX_RANK; do
    unset "$v"
done

case $launcher in
hydra)
    l=$(command -v mpiexec.hydra) || { echo "mpiexec.hydra is not installed: skipped"; exit 77; }
    set -- "$l" -np "$np" "$@" ;;
mpirun)
    l=$(command -v mpirun.openmpi) || { echo "mpirun.openmpi is not installed: skipped"; exit 77; }
    set -- "$l" --allow-run-as-root --oversubscribe -x LSAN_OPTIONS -np "$np" "$@" ;;
ferryrun:*)
    set -- "${launcher#ferryrun:}" -n "$np" "$@" ;;
none)
    [ "$np" = 1 ] || { echo "launch.sh: a singleton has 1 rank, not $np"; exit 2; } ;;
*)
    echo "launch.sh: unknown launcher $launcher"; exit 2 ;;
esac

echo "+ $*"
out=$(timeout -k 5 "$limit" "$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ $rc -eq 124 ]; then
    echo "launch.sh: timed out after $limit s"
    exit 1
fi
if [ "${LAUNCH_EXPECT_FAIL:-0}" = 1 ]; then
    [ $rc -ne 0 ] || { echo "launch.sh: exit status 0, but the job should have failed"; exit 1; }
elif [ $rc -ne 0 ]; then
    echo "launch.sh: exit status $rc"
    exit 1
fi
if ! printf '%s\n' "$out" | grep -Eq -- "$expect"; then
    echo "launch.sh: the output does not match: $expect"
    exit 1
fi
exit 0
