#!/usr/bin/env bash
# Install the Debian packages ferry's build, tests and benchmarks need.  As root: apt-get.
# Otherwise: print the exact command and stop.  Quiet when everything is present.
set -eu
# clang + libclang-rt-14-dev: the sanitizer build, the thread sanitizer and libFuzzer;
# clang-format: `make format-check`; git: the list of files it checks; util-linux (unshare) and
# iproute2: the namespaces the fuzzers and the fault tests run in.
pkgs=(build-essential cmake pkg-config gcc clang clang-format git util-linux
      libfabric-dev libfabric-bin libpmix-dev
      openmpi-bin libopenmpi-dev mpich libmpich-dev ucx-utils
      libclang-rt-14-dev libnetfilter-queue-dev iptables nftables iproute2 gnuplot-nox procps)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "ferry needs these Debian packages: ${missing[*]}" >&2
  echo "run as root:  sudo sh -c '$cmd'" >&2
  exit 1
fi
echo "ferry: installing ${missing[*]}" >&2
sh -c "$cmd" >&2
