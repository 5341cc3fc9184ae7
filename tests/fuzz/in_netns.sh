#!/bin/sh
# in_netns.sh PROGRAM [ARGS...] - in a fresh network namespace (run.sh made it): bring the
# loopback up, then become PROGRAM.
ip link set lo up || exit 1
exec "$@"
