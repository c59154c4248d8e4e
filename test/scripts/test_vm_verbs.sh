#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# The verbs wire on soft-RoCE, in test bed guests (contrib/vm), with the
# freshly built module (test/scripts/vm/verbs.sh says what each part runs):
#   odp     one guest, the trixie-backports 7.x kernel (rxe with ODP): the
#           interface in odp mode; UCT and UCP figures next to rc_verbs
#           and tcp in the same boot; ucp_hold (test/apps/ucp_hold.c);
#           ucp_remap (test/apps/ucp_remap.c: a registered buffer unmapped
#           and new memory mapped at its address, the next transfer reads
#           the new memory)
#   pair    two guests on a qemu socket network, the 7.x kernel: the same
#           figures between them (servers on vm-a, clients on vm-b),
#           ucp_hold between them, and test/apps/mpi_pingpong.c with Open
#           MPI and MPICH, one rank on each guest, over remapring,self
#   pinned  one guest, Debian 12's 6.1 kernel (no ODP): pinned mode, the
#           same as odp
#   pinned-pair  two guests on the 6.1 kernel
#   suites  UCX's UCT suites (contrib/ucx-gtest.sh's harness) in one guest
#           on the 7.x kernel, where they also instantiate on rxe0:1
#           (test/scripts/vm/ucx_suites.sh; about 4 minutes under TCG);
#           left out, with the reason, when the harness cannot be built
#   pinned-suites  the same on the 6.1 kernel, in pinned mode
# Skipped, with the reason, where the bed cannot be set up or qemu cannot
# boot. VM_VERBS_PARTS (default "odp pair pinned pinned-pair suites
# pinned-suites") selects the parts.
#
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/vm_host.sh"
parts=${VM_VERBS_PARTS:-odp pair pinned pinned-pair suites pinned-suites}

vm_setup

[ -f "$REMAPRING_MODULE" ] || fail "no module at $REMAPRING_MODULE"
module=(-a "$REMAPRING_MODULE:/payload/libuct_remapring.so")
mkdir "$tmp/apps"
for app in ucp_hold ucp_remap; do
    cc -O2 -g -Wall -o "$tmp/apps/$app" \
        "$REMAPRING_SRCDIR/test/apps/$app.c" \
        $(pkg-config --cflags --libs ucx) -lm || fail "build $app"
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
job=("$jobs/verbs.sh")

for p in $parts; do
    case $p in
    odp)
        part odp -t 420 -k odp "${module[@]}" "${apps[@]}" "${job[@]}" \
            one odp /payload/libuct_remapring.so /payload/apps ;;
    pair)
        part pair -t 420 -2 -k odp "${module[@]}" "${apps[@]}" "${mpi[@]}" \
            "${job[@]}" pair odp /payload/libuct_remapring.so /payload/apps ;;
    pinned)
        part pinned -t 420 -k pinned "${module[@]}" "${apps[@]}" \
            "${job[@]}" one pinned /payload/libuct_remapring.so /payload/apps ;;
    pinned-pair)
        part pinned-pair -t 420 -2 -k pinned "${module[@]}" "${apps[@]}" \
            "${mpi[@]}" "${job[@]}" pair pinned /payload/libuct_remapring.so \
            /payload/apps ;;
    suites|pinned-suites)
        # UCX's UCT suites on rxe0:1 (the harness contrib/test.sh builds)
        if ! harness=$("$REMAPRING_SRCDIR/contrib/ucx-gtest.sh" build 2>&1 |
                       tail -1) || [ ! -x "$harness" ]; then
            note "suites: no UCX harness ($harness): left out"
            continue
        fi
        if [ ! -f "$tmp/harness/.ready" ]; then
            mkdir -p "$tmp/harness"
            strip -o "$tmp/harness/gtest" "$harness" ||
                fail "strip $harness"
            touch "$tmp/harness/.ready"
        fi
        kernel=odp
        [ "$p" = suites ] || kernel=pinned
        part "$p" -t 600 -m 4096 -k $kernel "${module[@]}" \
            -a "$REMAPRING_SRCDIR/contrib:/payload/contrib" \
            -a "$tmp/harness:$(dirname "$harness")" \
            "$jobs/ucx_suites.sh" /payload/contrib \
            /payload/libuct_remapring.so uct_p2p_am_test uct_p2p_am_misc \
            uct_p2p_rma_test test_uct_pending \
            uct_flush_test uct_p2p_err_test test_uct_ep test_many2one_am \
            test_uct_peer_failure test_md ;;
    *)
        fail "VM_VERBS_PARTS: unknown part $p" ;;
    esac
done

vm_times
echo "PASS"
