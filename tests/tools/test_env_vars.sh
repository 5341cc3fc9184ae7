#!/bin/sh
# test_env_vars.sh SRCDIR FERRY_INFO - every FERRY_* variable the code reads is documented.
#
# Collects the variable names in src/ and tools/: every complete string literal
# "FERRY_NAME" (getenv, the bootstrap's helpers, messages naming a variable), every
# "FERRY_NAME=..." a launcher sets for its ranks, and every FERRY_<prefix><field> of the
# config tables (which ferry_info prints from the tables themselves).  Fails, naming them, on
# any that `ferry_info -c` does not list as a variable.  Also fails when ferry_info -c lists
# nothing, so a broken tool cannot pass.
set -u
SRC=$1
INFO=$2
listed=$(mktemp) || exit 2
read=$(mktemp) || exit 2
trap 'rm -f "$listed" "$read"' EXIT

# What ferry_info -c documents: "FERRY_X=value" or "# FERRY_X is not set" or
# "FERRY_X (default ...)" lines.
env -u FERRY_TLS "$INFO" -c 2>/dev/null |
    sed -n -e 's/^\(FERRY_[A-Z0-9_]*\)=.*/\1/p' -e 's/^# \(FERRY_[A-Z0-9_]*\) is not set$/\1/p' \
        -e 's/^\(FERRY_[A-Z0-9_]*\) (default .*/\1/p' | sort -u > "$listed"
n=$(wc -l < "$listed")
if [ "$n" -lt 20 ]; then
    echo "FAIL: ferry_info -c lists only $n variables"
    exit 1
fi

# What the code reads.
grep -rhoE --include='*.c' --include='*.h' '"FERRY_[A-Z0-9_]+("|=)' "$SRC/src" "$SRC/tools" |
    sed -e 's/^"//' -e 's/["=]$//' | sort -u > "$read"
m=$(wc -l < "$read")
if [ "$m" -lt 10 ]; then
    echo "FAIL: found only $m variable names in the sources (is SRCDIR right?)"
    exit 1
fi

missing=$(comm -23 "$read" "$listed")
if [ -n "$missing" ]; then
    echo "FAIL: read in src/ or tools/ but not listed by ferry_info -c (add them to a config"
    echo "table, or to fy_config_direct_vars in src/util/config.c):"
    echo "$missing" | sed 's/^/  /'
    exit 1
fi
echo "ok: all $m variables read in src/ and tools/ are among the $n ferry_info -c lists"
