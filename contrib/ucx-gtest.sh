#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# Build UCX's own gtest harness for its UCT suites, instantiated for
# remapring, and run its suites with the module preloaded.
#
# usage: contrib/ucx-gtest.sh [build]
#          build the harness unless a cached one exists; print its path
#        contrib/ucx-gtest.sh run [--tl TL] SUITE|FILTER [harness args...]
#          run one suite, e.g. uct_p2p_am_test (meaning TL/uct_p2p_am_test.*,
#          TL defaults to remapring), or any gtest filter, e.g.
#          'remapring/uct_flush_test.am_zcopy_flush_ep_nb/*'; further
#          arguments go to the harness (--gtest_repeat=10, -s SEED, ...)
#        contrib/ucx-gtest.sh suites
#          print the suites contrib/test.sh runs (contrib/ucx-gtest/suites)
#
# The harness is UCX's test/gtest program, cut down to the UCT suites
# (contrib/ucx-gtest/gtest.mk says what is in it), built from the source
# tree contrib/ucx-src.sh prepares, patched with
# contrib/ucx-gtest/add-remapring.patch (remapring added to UCX's
# instantiation lists) and linked against the installed UCX libraries. It
# is cached in /var/cache/remapring/ucx-gtest/<libucx0 version>-<hash of
# build() below, gtest.mk and the patch> (REMAPRING_UCX_GTEST_CACHE
# overrides the parent directory): a second run costs nothing.
#
# `run` preloads REMAPRING_MODULE (default: build/.libs/libuct_remapring.so
# of this tree; ctest passes the build tree's) and arms UCX's own watchdog
# (common/test_helpers.cc, the harness's -t option) with UCX_GTEST_WATCHDOG
# seconds per test case (default 90, above the 60 s the suites wait for an
# event before they fail on their own): a hung case is aborted with a
# backtrace and fails, and the cases that had not started yet run in a new
# process, UCX_GTEST_RESTARTS times at most (default 2). It prints a summary
# of passed, skipped (with UCX's reason) and failed cases. Exit status: 0 if
# no case failed, 77 if every case skipped or the harness or the module is
# missing (with the reason), 1 otherwise.
#   e.g.  contrib/ucx-gtest.sh run uct_flush_test
#         contrib/ucx-gtest.sh run --tl posix uct_p2p_am_test
#         UCX_LOG_LEVEL=debug contrib/ucx-gtest.sh run \
#             'remapring/test_uct_pending.send_ooo_with_pending/0'
#
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
data=$here/ucx-gtest

die() { echo "ucx-gtest: $*" >&2; exit 1; }

cache_root=${REMAPRING_UCX_GTEST_CACHE:-/var/cache/remapring/ucx-gtest}

# The cache key: the installed UCX package and everything that shapes the
# program: gtest.mk, the patch and build() below. Sets $key and $dir.
cache_key() {
    local pkgver hash
    pkgver=$(dpkg-query -W -f='${Version}' libucx0 2>/dev/null || true)
    [ -n "$pkgver" ] || { key="libucx0 is not installed"; return 1; }
    hash=$({ sed -n '/^build() {$/,/^}$/p' "$here/ucx-gtest.sh"
             cat "$data/gtest.mk" "$data/add-remapring.patch"; } |
           sha256sum | cut -c1-12)
    key=$pkgver-$hash
    dir=$cache_root/$key
}

build() {
    local src start
    cache_key || die "$key"
    if [ -f "$dir/.ready" ]; then
        echo "$dir/gtest"
        return 0
    fi
    mkdir -p "$cache_root" || die "cannot create $cache_root"
    exec 9>"$cache_root/.lock"
    flock 9
    if [ -f "$dir/.ready" ]; then           # built while we waited
        echo "$dir/gtest"
        return 0
    fi
    # the reason a run finds when there is no harness
    fail() {
        echo "$*" > "$cache_root/$key.failed"
        die "$*"
    }
    rm -rf "$dir" "$cache_root/$key.failed"
    src=$("$here/ucx-src.sh" | tail -1) ||
        fail "no UCX source tree (contrib/ucx-src.sh failed)"
    [ -f "$src/build/config.h" ] || fail "$src/build is not configured"

    # Built where it stays: its sources are what the program's debug
    # information and failure messages name.
    echo "ucx-gtest: building UCX's UCT suites from $src in $dir" >&2
    mkdir -p "$dir/test/gtest"
    cp -r "$src/source/test/gtest/common" "$src/source/test/gtest/uct" \
        "$dir/test/gtest/" || fail "no UCX test sources in $src/source"
    (cd "$dir" && patch -p1 -s < "$data/add-remapring.patch") ||
        fail "add-remapring.patch does not apply to $src/source"
    start=$SECONDS
    if ! make -C "$dir" -f "$data/gtest.mk" -j"$(nproc)" \
            UCX_SRC="$src/source" UCX_BUILD="$src/build" TREE="$dir" \
            > "$dir/build.log" 2>&1; then
        tail -20 "$dir/build.log" >&2
        fail "the harness does not build, see $dir/build.log"
    fi
    echo "ucx-gtest: built in $((SECONDS - start)) s" >&2
    rm -rf "$dir/obj"                       # keep the program and sources
    touch "$dir/.ready"
    # keep the four newest harnesses
    ls -dt "$cache_root"/*/ 2>/dev/null | tail -n +5 | xargs -r rm -rf
    echo "$dir/gtest"
}

# Runs the harness, passing its output through, and prints a summary.
run() {
    local tl=remapring filter bin module
    if [ "${1:-}" = --tl ]; then
        [ $# -ge 2 ] || die "--tl needs a transport name"
        tl=$2
        shift 2
    fi
    [ $# -ge 1 ] || die "run needs a suite or a gtest filter"
    case $1 in
    *[.*:?]*) filter=$1 ;;                  # a gtest filter
    */*)      filter=$1.* ;;                # e.g. alloc_methods/test_mem
    *)        filter=$tl/$1.* ;;
    esac
    shift

    local why=
    if ! cache_key; then
        why=$key
    elif [ ! -f "$dir/.ready" ]; then
        why="not built"
        [ -f "$cache_root/$key.failed" ] && why=$(cat "$cache_root/$key.failed")
    fi
    if [ -n "$why" ]; then
        echo "[  SKIPPED ] UCX's harness: $why (run contrib/ucx-gtest.sh)"
        exit 77
    fi
    bin=$dir/gtest
    module=${REMAPRING_MODULE:-$top/build/.libs/libuct_remapring.so}
    if [ ! -f "$module" ]; then
        echo "[  SKIPPED ] no module $module" \
             "(build it, or set REMAPRING_MODULE)"
        exit 77
    fi

    # UCX's test Makefile defaults to UCX_HANDLE_ERRORS=freeze, which would
    # turn the watchdog's abort into a hang: print a backtrace and exit.
    # The watchdog aborts a hung case with SIGABRT to the test thread:
    # catch it too, so the backtrace shows where the case hung.
    export UCX_HANDLE_ERRORS=bt
    export UCX_ERROR_SIGNALS=SIGILL,SIGSEGV,SIGBUS,SIGFPE,SIGABRT
    export UCX_LOG_LEVEL=${UCX_LOG_LEVEL:-warn}
    export UCX_LOG_PRINT_ENABLE=y
    export LD_PRELOAD=$module${LD_PRELOAD:+:$LD_PRELOAD}

    local wd=${UCX_GTEST_WATCHDOG:-90} restarts=${UCX_GTEST_RESTARTS:-2}
    local out rc died=0 exclude=
    out=$(mktemp)
    trap 'rm -f "$out"' EXIT
    while :; do
        echo "ucx-gtest: $bin --gtest_filter=$filter${exclude:+-$exclude}" \
             "-t $wd $* (LD_PRELOAD=$module)"
        # unbuffered, as UCX's Makefile runs it: a case that dies leaves
        # its last lines
        set +e
        stdbuf -o0 -e0 "$bin" --gtest_filter="$filter${exclude:+-$exclude}" \
            -t "$wd" "$@" 2>&1 | tee -a "$out"
        rc=${PIPESTATUS[0]}
        set -e
        [ "$rc" -gt 128 ] || break
        echo "ucx-gtest: the harness died of signal $((rc - 128))"
        died=1
        # a hung or crashed case takes the rest of the program with it:
        # run the cases that did not start yet, a few times at most
        [ "$restarts" -gt 0 ] || break
        restarts=$((restarts - 1))
        exclude=$(sed -n 's/^\[ RUN      \] \([^ ]*\).*/\1/p' "$out" |
                  paste -sd: -)
    done
    if [ "$rc" != 0 ] && [ "$rc" -le 128 ]; then
        echo "ucx-gtest: the harness exited with status $rc"
    fi

    # UCX's skips are its own "[     SKIP ] (reason)" line inside a case
    # that gtest reports as OK
    rc=0
    awk -v filter="$filter" '
        function unfinished() {
            if (cur != "") {
                nf++; failed[nf] = cur " (did not finish: watchdog or crash)"
            }
            cur = ""
        }
        /^\[ RUN      \] / { unfinished(); cur = $4; skip = ""; next }
        /^\[     SKIP \] / {
            sub(/^\[     SKIP \] */, "")
            skip = ($0 == "") ? "(no reason given)" : $0
            next
        }
        /^\[       OK \] / && cur != "" {
            if (skip != "") { ns++; skipped[ns] = cur " " skip } else np++
            cur = ""; next
        }
        /^\[  FAILED  \] .*\([0-9]+ ms\)$/ && cur != "" {
            nf++; failed[nf] = cur; cur = ""; next
        }
        END {
            unfinished()
            n = np + ns + nf
            printf "ucx-gtest: %s: %d passed, %d skipped, %d failed of %d\n",
                   filter, np, ns, nf, n
            for (i = 1; i <= ns; i++) print "ucx-gtest: skipped " skipped[i]
            for (i = 1; i <= nf; i++) print "ucx-gtest: FAILED " failed[i]
            if (n == 0) print "ucx-gtest: no test case matches " filter
            exit (n == 0 || nf > 0) ? 1 : (ns == n) ? 77 : 0
        }' "$out" || rc=$?
    [ "$died" = 0 ] || rc=1
    exit $rc
}

case "${1:-build}" in
build)  build ;;
run)    shift; run "$@" ;;
suites) grep -v '^#' "$data/suites" ;;
*)      sed -n '/^# usage/,/^# The harness/p' "$0" | sed '$d; s/^# \{0,1\}//'
        exit 1 ;;
esac
