#!/usr/bin/env bash
# ferry's main job on this machine: active messages between two workers of one process, then
# between two processes over shared memory (ferry_perf under ferryrun) once those are built.
set -eu
build=${1:-build}
echo "== two workers in one process (self transport)"
"$build/examples/two_workers"
if [ -x "$build/tools/ferryrun" ] && [ -x "$build/tools/ferry_perf" ]; then
  echo
  echo "== two processes over shared memory (FERRY_TLS=shm ferryrun -n 2 ferry_perf --demo)"
  FERRY_TLS=self,shm "$build/tools/ferryrun" -n 2 --timeout 120 "$build/tools/ferry_perf" --demo -C 0,1
fi
