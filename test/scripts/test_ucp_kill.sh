#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# Kill tests over remapring (UCX_TLS=remapring,self, module preloaded), on
# each wire of one host: test/apps/ucp_kill streams to and from a victim
# process and SIGKILLs it at a random moment (0-200 ms into the traffic),
# tag eager, active messages and rendezvous in turn, UCP_KILL_TRIALS times
# (default 200) per wire. Every trial, the survivor must see its endpoint
# fail within a second of the kill, and after it closed the endpoint, its
# file descriptors, mappings and the transport's pool blocks in use must
# be back to what they were before the victim came. Prints each wire's
# tally. The verbs wire's killed-peer check runs in the test bed
# (test/scripts/vm/verbs.sh). UCP_KILL_ARGS adds options (e.g. -s SEED,
# -v), UCP_KILL_WIRES (default "shm cma") selects the wires.
#
. "$(dirname "$0")/common.sh"

: "${REMAPRING_SRCDIR:=$(cd "$(dirname "$0")/../.." && pwd)}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

command -v cc >/dev/null || skip "no C compiler"
pkg-config --exists ucx || skip "pkg-config does not know ucx"

note "build ucp_kill"
cc -O2 -g -Wall -o "$tmp/ucp_kill" "$REMAPRING_SRCDIR/test/apps/ucp_kill.c" \
    $(pkg-config --cflags --libs ucx) -ldl || fail "build ucp_kill"

trials=${UCP_KILL_TRIALS:-200}
failed=
for wire in ${UCP_KILL_WIRES:-shm cma}; do
    note "ucp_kill -n $trials ${UCP_KILL_ARGS:-}over the $wire wire"
    start=$SECONDS
    UCX_TLS=remapring,self UCX_REMAPRING_WIRE=$wire UCX_LOG_LEVEL=error \
        LD_PRELOAD=$REMAPRING_MODULE timeout 900 "$tmp/ucp_kill" \
        -n "$trials" ${UCP_KILL_ARGS:-} > "$tmp/$wire.out" 2>&1
    rc=$?
    # the survivor's own lines and the tally; the victims' UCX errors are
    # about the peer they lost
    grep -v 'UCX  ERROR' "$tmp/$wire.out" | sed 's/^/   /'
    echo "   ($((SECONDS - start)) s)"
    [ $rc -eq 0 ] && grep -q '^PASS' "$tmp/$wire.out" ||
        failed="$failed $wire(status $rc)"
done
[ -z "$failed" ] || fail "ucp_kill failed on:$failed"
echo "PASS"
