#!/usr/bin/env bash
# Fails, naming the file and line, when a layer includes a layer above it.
set -u
src=$1
bad=0
check() { # layer, forbidden include prefixes...
  local layer=$1; shift
  for f in "$src/$layer"/*.[ch] "$src/$layer"/*/*.[ch]; do
    [ -e "$f" ] || continue
    for up in "$@"; do
      if grep -Hn "#include \"$up/" "$f"; then bad=1; fi
    done
  done
}
check util tl cm boot proto
check tl cm boot proto
check boot tl cm proto
check cm proto
[ $bad -eq 0 ] && echo "layering: ok" || echo "layering: a lower layer includes a higher one (above)"
exit $bad
