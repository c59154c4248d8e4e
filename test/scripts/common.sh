#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# Sourced by test/scripts/test_*.sh. ctest sets REMAPRING_MODULE (the
# shared-memory module in the build tree) and REMAPRING_RDMA_MODULE (the
# RDMA one, which links it; there where the tree was built with rdma-core);
# REMAPRING_PRELOAD is both, or the first alone. A script exits 77 to be
# reported as skipped.
#

: "${REMAPRING_MODULE:?run through ctest, or set REMAPRING_MODULE}"
: "${REMAPRING_RDMA_MODULE:=$(dirname "$REMAPRING_MODULE")/libuct_remaprdma.so}"
REMAPRING_PRELOAD=$REMAPRING_MODULE
[ -f "$REMAPRING_RDMA_MODULE" ] &&
    REMAPRING_PRELOAD="$REMAPRING_MODULE $REMAPRING_RDMA_MODULE"

fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }
note() { echo "== $*"; }

# A TCP port for ucx_perftest's out-of-band exchange, free right now.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# perftest_pair OUT_PREFIX PRELOAD(yes|no) ARGS...: runs an ucx_perftest
# server and client on this host with the same environment and arguments;
# their outputs go to OUT_PREFIX.server and OUT_PREFIX.client; PRELOAD yes
# loads both modules (REMAPRING_PRELOAD). Returns the
# client's exit status, or 1 if the server failed. Each side is stopped
# after PERFTEST_TIMEOUT seconds (default 120).
perftest_pair() {
    local out=$1 preload=$2 port spid rc src pre=""
    shift 2
    port=$(free_port)
    [ "$preload" = yes ] && pre=$REMAPRING_PRELOAD
    LD_PRELOAD=$pre timeout "${PERFTEST_TIMEOUT:-120}" ucx_perftest -p "$port" "$@" \
        >"$out.server" 2>&1 &
    spid=$!
    # the server listens once its UCX context is up
    for _ in $(seq 200); do
        ss -ltn 2>/dev/null | grep -q ":$port " && break
        sleep 0.05
    done
    LD_PRELOAD=$pre timeout "${PERFTEST_TIMEOUT:-120}" ucx_perftest localhost -p "$port" "$@" \
        >"$out.client" 2>&1
    rc=$?
    wait "$spid"
    src=$?
    [ $src -eq 0 ] || return 1
    return $rc
}
