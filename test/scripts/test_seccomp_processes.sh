#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# The seccomp notifier across processes (test/gtest/ucs/test_seccomp.cc
# has the cases within one):
# 1. A program that loads the module with the settings but never uses a
#    UCS cache (a shell, an MPI launcher) gets no filter, so that its
#    children can start their own.
# 2. UCX_REMAPRING_NOTIFIER=auto starts the source only with UCM's mmap
#    hooks off and where it needs no privilege change (root here; not an
#    unprivileged user, not with the hooks on); seccomp starts it anyway.
# 3. The guard: a process starts the source, forks a child and exits; the
#    child, which keeps the filter, then unmaps memory and runs a program
#    through system(). Both need somebody to answer the filter's
#    notifications: with the starter gone, its guard process. Without it
#    the child's munmap() fails with ENOSYS and the program it runs cannot
#    even be loaded. Fails if the child hangs (30 s) or reports anything
#    else, or if a process of the run is left.
#
. "$(dirname "$0")/common.sh"
set -euo pipefail

bin=${REMAPRING_BUILDDIR:?}/test/gtest/gtest_seccomp
[ -x "$bin" ] || skip "no $bin"
case "${LD_PRELOAD:-}" in *vgpreload*) skip "under valgrind";; esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

note "a shell with the module and the settings, no UCX use: no filter"
f=$(LD_PRELOAD=$REMAPRING_MODULE UCX_REMAPRING_NOTIFIER=seccomp \
    UCX_MEM_MMAP_HOOK_MODE=none sh -c 'grep Seccomp_filters /proc/self/status')
echo "   $f"
case $f in *"	0") ;; *) fail "the shell got a filter: $f" ;; esac

probe() { # EXPECT DESCRIPTION [PREFIX...] : gtest_seccomp --probe
    local want=$1 what=$2 got
    shift 2
    got=$("$@" "$bin" --probe | sed -n 's/^running \([01]\) .*/\1/p')
    echo "   $what: running=${got:-?}"
    [ "$got" = "$want" ] || fail "$what: expected running=$want"
}
note "UCX_REMAPRING_NOTIFIER=auto"
probe 0 "hooks on (UCX's default)" env
probe 1 "hooks off, root" env UCX_MEM_MMAP_HOOK_MODE=none
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
    probe 0 "hooks off, an unprivileged user" env UCX_MEM_MMAP_HOOK_MODE=none \
        setpriv --reuid=65534 --regid=65534 --clear-groups
    probe 1 "hooks off, unprivileged, UCX_REMAPRING_NOTIFIER=seccomp" env \
        UCX_MEM_MMAP_HOOK_MODE=none UCX_REMAPRING_NOTIFIER=seccomp \
        setpriv --reuid=65534 --regid=65534 --clear-groups
fi
probe 0 "UCX_REMAPRING_NOTIFIER=uffd, hooks off" env \
    UCX_MEM_MMAP_HOOK_MODE=none UCX_REMAPRING_NOTIFIER=uffd

note "starter exits at once; its child unmaps and runs sh -c 'exit 5'"
"$bin" --orphan "$tmp/out" || true
for _ in $(seq 300); do
    [ -s "$tmp/out" ] && break
    sleep 0.1
done
[ -s "$tmp/out" ] || fail "the orphaned child wrote nothing in 30 s (hung?)"
cat "$tmp/out"
grep -q "source not running" "$tmp/out" &&
    skip "the seccomp source could not start here (kernel, seccomp off)"
grep -qx "munmap 0, sh exit 5" "$tmp/out" ||
    fail "expected 'munmap 0, sh exit 5'"
# the guard exits once no task uses the filter any more
sleep 0.5
if pgrep -f -- "--orphan $tmp/out" >/dev/null; then
    fail "a process of the run is still alive: $(pgrep -af -- "--orphan $tmp/out")"
fi
echo "PASS"
