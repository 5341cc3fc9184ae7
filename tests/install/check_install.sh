#!/usr/bin/env bash
# Usage: check_install.sh BUILD_DIR user_program.c CC
set -euo pipefail
build=$1 src=$2 cc=$3
prefix=$(mktemp -d /tmp/ferry-install-XXXXXX)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig:$prefix/lib/$(gcc -print-multiarch 2>/dev/null)/pkgconfig"
pkg-config --exists ferry || { echo "pkg-config does not find ferry under $prefix"; exit 1; }
flags=$(pkg-config --cflags --libs ferry)
echo "pkg-config --cflags --libs ferry: $flags"
"$cc" -std=c11 -Wall -Wextra -Werror -o "$prefix/user_program" "$src" $flags
out=$("$prefix/user_program")
echo "$out"
[ "$out" = "user program: received 'hello from an installed ferry'" ]
