#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# The preloaded module is visible to ucx_info (component, memory domain,
# transport, settings, the same as remapring(7) lists), exports its two
# symbols (remapring_pool_blocks_in_use, and ucm_set_event_handler, which
# starts the seccomp notifier with the first UCS cache),
# and is harmless to processes that select other
# transports: ucx_perftest tag_lat with UCX_TLS=posix,self picks the same
# lanes with and without the module, and the module's memory notifier never
# starts there. With the default UCX_TLS the module is weighed like any
# other transport: the lanes UCP picks are printed, with the figures.
#
. "$(dirname "$0")/common.sh"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

note "ucx_info -d lists the component, memory domain and transport"
unset UCX_TLS
LD_PRELOAD=$REMAPRING_MODULE ucx_info -d > "$tmp/d" 2>&1 || fail "ucx_info -d"
grep -q "Memory domain: remapring" "$tmp/d" || fail "no remapring md in ucx_info -d"
grep -q "Component: remapring" "$tmp/d" || fail "no remapring component"
grep -q "Transport: remapring" "$tmp/d" || fail "no remapring transport"
ucx_info -d 2>&1 | grep -q remapring && fail "remapring listed without the module"

note "ucx_info -c shows every setting"
LD_PRELOAD=$REMAPRING_MODULE ucx_info -c -f > "$tmp/c" 2>&1 || fail "ucx_info -c"
for s in BLOCK_SIZE RING_SLOTS POOL_MAX CREDIT_BATCH; do
    grep -q "^UCX_REMAPRING_$s=" "$tmp/c" || fail "UCX_REMAPRING_$s not shown"
done

note "remapring(7) lists the settings ucx_info -c -f shows"
# UCX's own rows every transport inherits (ALLOC, FAILURE, MAX_NUM_EPS)
# are ucx_info's to document
man7=${REMAPRING_BUILDDIR:?}/contrib/man/remapring.7
[ -f "$man7" ] || fail "no $man7"
grep -o '^UCX_REMAPRING_[A-Z_]*' "$tmp/c" | sort -u |
    grep -vx 'UCX_REMAPRING_\(ALLOC\|FAILURE\|MAX_NUM_EPS\)' > "$tmp/info.vars"
sed -n 's/^\.B \(UCX_REMAPRING_[A-Z_]*\)$/\1/p' "$man7" | sort -u > "$tmp/man.vars"
echo "   $(wc -l < "$tmp/man.vars") settings in remapring(7)"
diff -u "$tmp/info.vars" "$tmp/man.vars" ||
    fail "remapring(7) and ucx_info -c -f differ"

note "the module exports remapring_pool_blocks_in_use() and ucm_set_event_handler() alone"
nm -D --defined-only "$REMAPRING_MODULE" | awk '{print $3}' | sort > "$tmp/exports"
sed 's/^/   /' "$tmp/exports"
[ "$(tr '\n' ' ' < "$tmp/exports")" = "remapring_pool_blocks_in_use ucm_set_event_handler " ] ||
    fail "the module exports other symbols than its two"

for tls in posix,self default; do
    for preload in no yes; do
        note "tag_lat UCX_TLS=$tls preload=$preload"
        if [ "$tls" = default ]; then
            unset UCX_TLS
        else
            export UCX_TLS=$tls
        fi
        out=$tmp/lat-$tls-$preload
        UCX_LOG_LEVEL=info perftest_pair "$out" "$preload" -t tag_lat -n 2000 ||
            { cat "$out".*; fail "tag_lat $tls $preload"; }
        grep -q "^Final:" "$out.client" || fail "no result line"
        grep "ep_cfg\[" "$out.client" | tail -1 | sed 's/.*INFO *//' \
            > "$tmp/lanes-$tls-$preload"
        echo "   $(grep '^Final:' "$out.client")"
        echo "   lanes: $(cat "$tmp/lanes-$tls-$preload")"
        [ "$tls" = default ] && continue
        grep "ep_cfg\[" "$out.client" | grep -q "remapring/" &&
            fail "remapring was selected though UCX_TLS excludes it"
        # registrations of a process that sends through other transports
        # stay plain bookkeeping: the memory cache and its notifier (which
        # would slow down munmap) never start
        grep -q "notifier engine" "$out.client" "$out.server" &&
            fail "the notifier started in a process not using remapring"
    done
    [ "$tls" = default ] && continue
    cmp -s "$tmp/lanes-$tls-no" "$tmp/lanes-$tls-yes" ||
        fail "lanes differ with the module loaded ($tls)"
done
unset UCX_TLS

note "ucx_info -e: the lanes UCP picks by default with the module loaded"
LD_PRELOAD=$REMAPRING_MODULE ucx_info -e -u t -P intra > "$tmp/e" 2>&1 ||
    fail "ucx_info -e"
grep -q "lane\[" "$tmp/e" || fail "no lanes printed"
grep "lane\[" "$tmp/e" | sed 's/^/   /'
echo "PASS"
