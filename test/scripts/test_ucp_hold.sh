#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# UCP end to end over remapring (UCX_TLS=remapring,self, module preloaded):
# test/apps/ucp_hold sends 10^5 messages, sizes log-uniform from 0 B to
# 1 MiB, over active messages and tag messages between two processes; the
# receiver keeps a random quarter of the active-message data descriptors
# (and defers a quarter of the rendezvous receives) for up to 2 ms, and
# checks every byte on arrival and again on release. Eager active messages
# above UCX_REMAPRING_RX_INLINE (1 KiB) must arrive as data descriptors the
# receiver may keep (-D), and so do those up to UCX_REMAPRING_RX_COPY
# (512 bytes with UCP's header), out of copies; those between arrive to be
# copied.
# UCP_HOLD_COUNT overrides the message count, UCP_HOLD_ARGS adds options.
#
. "$(dirname "$0")/common.sh"

: "${REMAPRING_SRCDIR:=$(cd "$(dirname "$0")/../.." && pwd)}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

command -v cc >/dev/null || skip "no C compiler"
pkg-config --exists ucx || skip "pkg-config does not know ucx"

note "build ucp_hold"
cc -O2 -g -Wall -o "$tmp/ucp_hold" "$REMAPRING_SRCDIR/test/apps/ucp_hold.c" \
    $(pkg-config --cflags --libs ucx) -lm -ldl || fail "build ucp_hold"

count=${UCP_HOLD_COUNT:-100000}
note "ucp_hold -n $count ${UCP_HOLD_ARGS:-}over remapring"
start=$SECONDS
UCX_TLS=remapring,self UCX_LOG_LEVEL=info LD_PRELOAD=$REMAPRING_MODULE \
    timeout 300 "$tmp/ucp_hold" -n "$count" -s 7 -D 1024 ${UCP_HOLD_ARGS:-} \
    > "$tmp/out" 2>&1
rc=$?
grep -v "UCX  INFO\|UCX  DIAG" "$tmp/out"
echo "   ($((SECONDS - start)) s)"
[ $rc -eq 124 ] && fail "ucp_hold timed out"
[ $rc -eq 0 ] || fail "ucp_hold exit status $rc"
grep -q "^receiver: 0 errors, 0 lost" "$tmp/out" || fail "errors reported"
grep -q "^PASS" "$tmp/out" || fail "no PASS line"

# both processes' endpoints must run over remapring
lanes=$(grep "ep_cfg\[" "$tmp/out" | sed 's/.*INFO *//' | sort -u)
echo "   lanes: $(echo $lanes)"
[ "$(grep -c "ep_cfg\[.*remapring/memory" "$tmp/out")" -ge 2 ] ||
    fail "remapring does not carry both processes' traffic"
echo "$lanes" | sed 's/^[^:]*: *//' | grep -o "[a-z0-9_]*/[a-z0-9_:.]*" |
    grep -qv "^remapring/\|^self/" && fail "another transport took a lane"
echo "PASS"
