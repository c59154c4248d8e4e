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
#           figures between them (servers on vm-a, clients on vm-b), and
#           test/apps/mpi_pingpong.c with Open MPI and MPICH, one rank on
#           each guest, over remapring,self
#   pinned  one guest, Debian 12's 6.1 kernel (no ODP): pinned mode, the
#           same as odp
#   pinned-pair  two guests on the 6.1 kernel
# Skipped, with the reason, where the bed cannot be set up or qemu cannot
# boot. VM_VERBS_PARTS (default "odp pair pinned pinned-pair") selects the
# parts.
#
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/vm_host.sh"
parts=${VM_VERBS_PARTS:-odp pair pinned pinned-pair}

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
mkdir "$tmp/mpi"
if command -v mpicc.mpich >/dev/null; then
    mpicc.mpich -O2 -o "$tmp/mpi/mpi_pingpong_mpich" \
        "$REMAPRING_SRCDIR/test/apps/mpi_pingpong.c" || fail "mpicc.mpich"
fi
if command -v mpicc.openmpi >/dev/null; then
    mpicc.openmpi -O2 -o "$tmp/mpi/mpi_pingpong_ompi" \
        "$REMAPRING_SRCDIR/test/apps/mpi_pingpong.c" || fail "mpicc.openmpi"
fi
mpi=(-M -a "$tmp/mpi:/payload/mpi")
job=("$jobs/verbs.sh")

for p in $parts; do
    case $p in
    odp)
        part odp -t 420 -k odp "${module[@]}" "${apps[@]}" "${job[@]}" \
            one odp /payload/libuct_remapring.so /payload/apps ;;
    pair)
        part pair -t 420 -2 -k odp "${module[@]}" "${mpi[@]}" "${job[@]}" \
            pair odp /payload/libuct_remapring.so /payload/mpi ;;
    pinned)
        part pinned -t 420 -k pinned "${module[@]}" "${apps[@]}" \
            "${job[@]}" one pinned /payload/libuct_remapring.so /payload/apps ;;
    pinned-pair)
        part pinned-pair -t 420 -2 -k pinned "${module[@]}" "${mpi[@]}" \
            "${job[@]}" pair pinned /payload/libuct_remapring.so /payload/mpi ;;
    *)
        fail "VM_VERBS_PARTS: unknown part $p" ;;
    esac
done

vm_times
echo "PASS"
