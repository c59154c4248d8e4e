#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# The preloaded modules (REMAPRING_PRELOAD: the shared-memory one, and the
# RDMA one where it was built) are visible to ucx_info (component, memory
# domain, transport, settings, the same as remapring(7) lists); the
# shared-memory module exports what its version script lists and nothing
# else (remapring_pool_blocks_in_use; ucm_set_event_handler, which starts
# the seccomp notifier with the first UCS cache; the base the RDMA module
# calls), the RDMA module nothing, and neither links what it should not
# (rdma-core, for the first); they are harmless to processes that select other
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
LD_PRELOAD=$REMAPRING_PRELOAD ucx_info -d > "$tmp/d" 2>&1 || fail "ucx_info -d"
grep -q "Memory domain: remapring" "$tmp/d" || fail "no remapring md in ucx_info -d"
grep -q "Component: remapring" "$tmp/d" || fail "no remapring component"
grep -q "Transport: remapring" "$tmp/d" || fail "no remapring transport"
ucx_info -d 2>&1 | grep -q remapring && fail "remapring listed without the module"

note "ucx_info -c shows every setting"
LD_PRELOAD=$REMAPRING_PRELOAD ucx_info -c -f > "$tmp/c" 2>&1 || fail "ucx_info -c"
for s in BLOCK_SIZE RING_SLOTS POOL_MAX CREDIT_BATCH; do
    grep -q "^UCX_REMAPRING_$s=" "$tmp/c" || fail "UCX_REMAPRING_$s not shown"
done
if [ -f "$REMAPRING_RDMA_MODULE" ]; then
    for s in MODE BLOCK_SIZE MEMCACHE; do
        grep -q "^UCX_REMAPRDMA_$s=" "$tmp/c" || fail "UCX_REMAPRDMA_$s not shown"
    done
fi

note "remapring(7) lists the settings ucx_info -c -f shows"
# UCX's own rows every transport inherits (ALLOC, FAILURE, MAX_NUM_EPS)
# are ucx_info's to document; the RDMA transport's copy of a shared
# setting (UCX_REMAPRDMA_X beside UCX_REMAPRING_X) is documented once
man7=${REMAPRING_BUILDDIR:?}/contrib/man/remapring.7
[ -f "$man7" ] || fail "no $man7"
grep -o '^UCX_REMAPR\(ING\|DMA\)_[A-Z_]*' "$tmp/c" | sort -u |
    grep -vx 'UCX_REMAPR\(ING\|DMA\)_\(ALLOC\|FAILURE\|MAX_NUM_EPS\)' \
    > "$tmp/all.vars"
while read -r v; do
    case $v in
    UCX_REMAPRDMA_*)
        grep -qx "UCX_REMAPRING_${v#UCX_REMAPRDMA_}" "$tmp/all.vars" &&
            continue ;;
    esac
    echo "$v"
done < "$tmp/all.vars" > "$tmp/info.vars"
sed -n 's/^\.B \(UCX_REMAPR\(ING\|DMA\)_[A-Z_]*\)$/\1/p' "$man7" |
    sort -u > "$tmp/man.vars"
echo "   $(wc -l < "$tmp/man.vars") settings in remapring(7)"
diff -u "$tmp/info.vars" "$tmp/man.vars" ||
    fail "remapring(7) and ucx_info -c -f differ"

note "the modules export what their version scripts list, nothing else"
map=$REMAPRING_SRCDIR/src/uct/ib/remapring/libuct_remapring.map
sed -n '/global:/,/local:/s/^ *\([a-z_][a-z_0-9]*\);$/\1/p' "$map" |
    sort > "$tmp/listed"
nm -D --defined-only "$REMAPRING_MODULE" | awk '{print $3}' | sort > "$tmp/exports"
echo "   libuct_remapring.so: $(wc -l < "$tmp/exports") symbols:" \
     "$(grep -v '^uct_remapring_\|^remapring_ring_' "$tmp/exports" |
        paste -sd' ') and the base of the transports on the ring"
[ "$(wc -l < "$tmp/listed")" -gt 2 ] || fail "no symbols read from $map"
diff -u "$tmp/listed" "$tmp/exports" ||
    fail "libuct_remapring.so exports other symbols than libuct_remapring.map lists"
grep -qx ucm_set_event_handler "$tmp/exports" &&
    grep -qx remapring_pool_blocks_in_use "$tmp/exports" ||
    fail "libuct_remapring.so does not export its two symbols"
readelf -d "$REMAPRING_MODULE" | grep 'NEEDED.*lib\(ibverbs\|rdmacm\)' &&
    fail "libuct_remapring.so links rdma-core"
if [ -f "$REMAPRING_RDMA_MODULE" ]; then
    [ -z "$(nm -D --defined-only "$REMAPRING_RDMA_MODULE")" ] ||
        fail "libuct_remaprdma.so exports symbols"
    readelf -d "$REMAPRING_RDMA_MODULE" | grep -q 'NEEDED.*libuct_remapring\.so' ||
        fail "libuct_remaprdma.so does not link libuct_remapring.so"
    echo "   libuct_remaprdma.so: no symbol; links libuct_remapring.so"
else
    echo "   (no RDMA module: built without rdma-core)"
fi

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
LD_PRELOAD=$REMAPRING_PRELOAD ucx_info -e -u t -P intra > "$tmp/e" 2>&1 ||
    fail "ucx_info -e"
grep -q "lane\[" "$tmp/e" || fail "no lanes printed"
grep "lane\[" "$tmp/e" | sed 's/^/   /'
echo "PASS"
