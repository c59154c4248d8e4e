#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# Install what building and testing remapring needs on Debian 12 (as root),
# then prepare the matching UCX source tree (contrib/ucx-src.sh).
# Idempotent: with everything in place it costs a second.
#
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

packages=(
    # build
    build-essential autoconf automake libtool pkg-config dpkg-dev
    # UCX as Debian ships it, used by Open MPI and MPICH
    libucx-dev ucx-utils libibverbs-dev librdmacm-dev rdma-core
    # tests
    libgtest-dev cmake python3 iproute2 valgrind
    # the seccomp notifier's checks under other allocators
    libjemalloc2 libtcmalloc-minimal4
    # contrib/bench/bench.sh: its plots
    python3-matplotlib
    # MPI end to end
    openmpi-bin libopenmpi-dev mpich libmpich-dev python3-mpi4py
    # the Debian package (debian/control's Build-Depends, test_package.sh)
    debhelper libnuma-dev lintian dpkg-repack
)

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
        missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "setup: missing packages ${missing[*]}; run as root" >&2
        exit 1
    fi
    echo "setup: installing ${missing[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends "${missing[@]}" >/dev/null
fi

"$here/ucx-src.sh" >/dev/null
