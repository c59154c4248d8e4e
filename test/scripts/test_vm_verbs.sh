#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# The verbs wire on soft-RoCE, in test bed guests (contrib/vm), with the
# freshly built module (test/scripts/vm/verbs.sh says what each part runs):
#   odp     one guest, the trixie-backports 7.x kernel (rxe with ODP): the
#           interface in odp mode (ucx_info -d and its log line); a
#           receiver killed under traffic fails its sender within a
#           second; the memory of one connection next to rc_verbs';
#           ucp_hold (test/apps/ucp_hold.c); ucp_remap (test/apps/
#           ucp_remap.c: a registered buffer unmapped and new memory mapped
#           at its address, the next transfer reads the new memory); the
#           same over rc_verbs with UCM's hooks off, UCX's own IB cache
#           stale without the seccomp notifier and never with it; the
#           RDMA cases of test/gtest/ucp/test_ucp_rules.cc (AM alignment,
#           the status of every operation after a failure); then,
#           in the same boot, UCX's UCT suites (contrib/ucx-gtest.sh's
#           harness) on rxe0 (test/scripts/vm/ucx_suites.sh: only the
#           cases instantiated on rxe0:1 and on the rxe0 memory domain, the
#           host's run having done the memory device), left out with the
#           reason where the harness cannot be built. The guest's two
#           vCPUs run on two host threads (qemu's multi-threaded TCG).
#   pair    two guests on a qemu socket network, the 7.x kernel: UCT and
#           UCP figures between them (servers on vm-a, clients on vm-b)
#           next to rc_verbs and tcp in the same boot, ratios printed;
#           ucp_hold between them; 64 connections into one interface
#           (test/apps/ucp_fanin.c), memory per connection busy and quiet
#           next to rc_verbs; test/apps/mpi_pingpong.c with Open MPI
#           and MPICH, one rank on each guest, over remapring,self
#   pinned  one guest, Debian 12's 6.1 kernel (no ODP): pinned mode, the
#           same as odp, and a hostile sender (test/apps/rdma_rogue.c)
#           writing outside its ring beside ucp_hold's, MAX_CONNS
#   pinned-pair  two guests on the 6.1 kernel
# Skipped, with the reason, where the bed cannot be set up or qemu cannot
# boot. VM_VERBS_PARTS (default "odp pair pinned pinned-pair") selects the
# parts; VM_VERBS_SUITES=0 leaves UCX's suites out; VM_VERBS_ROUNDS
# (default 5) is how many rounds of am_lat and am_bw bcopy the pairs run,
# remaprdma and rc_verbs in turn, for the medians of their ratios.
#
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/vm_host.sh"
parts=${VM_VERBS_PARTS:-odp pair pinned pinned-pair}

vm_setup

vm_modules
mkdir "$tmp/apps"
for app in ucp_hold ucp_remap ucp_fanin; do
    cc -O2 -g -Wall -o "$tmp/apps/$app" \
        "$REMAPRING_SRCDIR/test/apps/$app.c" \
        $(pkg-config --cflags --libs ucx) -lm -ldl || fail "build $app"
done
# a sender that breaks the RDMA transport's rules, on rdma-core alone
cc -O2 -g -Wall -o "$tmp/apps/rdma_rogue" \
    "$REMAPRING_SRCDIR/test/apps/rdma_rogue.c" -lrdmacm -libverbs ||
    fail "build rdma_rogue"
# what UCP expects of a transport (test/gtest/ucp/test_ucp_rules.cc), its
# RDMA cases: the transport linked in, nothing preloaded
rules=$REMAPRING_BUILDDIR/test/gtest/gtest_ucp_rules
[ -x "$rules" ] || fail "no $rules: build the suites first (make check)"
strip -o "$tmp/apps/gtest_ucp_rules" "$rules" || fail "strip $rules"
# the allocators the seccomp notifier's stale-read check runs under
for lib in libjemalloc.so.2 libtcmalloc_minimal.so.4; do
    cp -L "/usr/lib/$(gcc -print-multiarch)/$lib" "$tmp/apps/" ||
        fail "no $lib: contrib/setup.sh installs it"
done
apps=(-a "$tmp/apps:/payload/apps")
# the ping-pong, built here against the host's MPIs, for the pairs
if command -v mpicc.mpich >/dev/null; then
    mpicc.mpich -O2 -o "$tmp/apps/mpi_pingpong_mpich" \
        "$REMAPRING_SRCDIR/test/apps/mpi_pingpong.c" || fail "mpicc.mpich"
fi
if command -v mpicc.openmpi >/dev/null; then
    mpicc.openmpi -O2 -o "$tmp/apps/mpi_pingpong_ompi" \
        "$REMAPRING_SRCDIR/test/apps/mpi_pingpong.c" || fail "mpicc.openmpi"
fi
mpi=(-M)
# the pairs' rounds of am_lat and am_bw bcopy, the transports in turn
rounds=(-e "VM_VERBS_ROUNDS=${VM_VERBS_ROUNDS:-5}")
job=("$jobs/verbs.sh")

# UCX's UCT suites on rxe0 run in the one-guest boot, with the harness
# contrib/test.sh builds (left out, with the reason, where it cannot be)
suites=(uct_p2p_am_test uct_p2p_am_misc uct_p2p_rma_test test_uct_pending
        uct_flush_test uct_p2p_err_test test_uct_ep test_many2one_am
        test_uct_peer_failure test_md)
harness_args=()
if [ "${VM_VERBS_SUITES:-1}" = 0 ]; then
    note "suites: left out (VM_VERBS_SUITES=0)"
elif ! harness=$("$REMAPRING_SRCDIR/contrib/ucx-gtest.sh" build 2>&1 |
                 tail -1) || [ ! -x "$harness" ]; then
    note "suites: no UCX harness ($harness): left out"
else
    mkdir -p "$tmp/harness"
    strip -o "$tmp/harness/gtest" "$harness" || fail "strip $harness"
    # in the guest, at the cache path: contrib/ucx-gtest.sh takes it as built
    touch "$tmp/harness/.ready"
    harness_args=(-m 4096 -a "$REMAPRING_SRCDIR/contrib:/payload/contrib"
                  -a "$tmp/harness:$(dirname "$harness")")
fi
# one KERNEL: the one-guest job, with the suites if there is a harness
one() {
    local contrib=-
    # one guest, two vCPUs: each on a host thread of its own (a pair's
    # guests keep one thread each, the two cores being theirs)
    local -x VM_ACCEL=${VM_ACCEL:-tcg,thread=multi}
    [ ${#harness_args[@]} -eq 0 ] || contrib=/payload/contrib
    part "$1" -t 1200 -k "$1" "${modules[@]}" "${apps[@]}" \
        -a "$jobs:/payload/jobs" "${harness_args[@]}" "$jobs/one.sh" \
        /payload/jobs "$1" "$rdma_module" /payload/apps \
        "$contrib" "${suites[@]}"
}

for p in $parts; do
    case $p in
    odp|pinned)
        one $p ;;
    pair)
        part pair -t 600 -m 3072 -2 -k odp "${modules[@]}" "${apps[@]}" \
            "${rounds[@]}" \
            "${mpi[@]}" \
            "${job[@]}" pair odp "$rdma_module" /payload/apps ;;
    pinned-pair)
        part pinned-pair -t 600 -m 3072 -2 -k pinned "${modules[@]}" \
            "${apps[@]}" "${rounds[@]}" \
            "${mpi[@]}" "${job[@]}" pair pinned "$rdma_module" \
            /payload/apps ;;
    *)
        fail "VM_VERBS_PARTS: unknown part $p" ;;
    esac
done

vm_times
echo "PASS"
