#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# Build everything (contrib/build.sh) and run the whole test suite with ctest.
#
# usage: contrib/test.sh [--asan | --tsan | --valgrind] [ctest arguments...]
#   (none)      build in BUILD_DIR (default build/) and run every test:
#               each GoogleTest case, the shell tests (*.sh) that drive
#               the stock UCX tools with the module preloaded, and UCX's
#               own UCT suites instantiated for remapring (ucx/remapring/*,
#               one test per suite; the harness is built once and cached
#               by contrib/ucx-gtest.sh, which also runs one suite by hand)
#   --asan      build with AddressSanitizer in BUILD_DIR (default
#               build-asan/) and run the GoogleTest cases under it; leaks
#               fail a test, contrib/lsan.supp lists the accepted ones
#   --tsan      build with ThreadSanitizer in BUILD_DIR (default
#               build-tsan/) and run, unless -R names others, the cases of
#               the ring engine (writer and reader in two threads,
#               reclaims), the memory cache, the notifier (its monitor
#               thread) and its seccomp source (workers, in-thread path)
#               under it; a report fails the case (contrib/tsan.supp: UCX's
#               own, with reasons), fork tests skip.
#               UCX's own libraries are not instrumented, and UCM's mmap
#               hooks are turned off (UCX_MEM_MMAP_HOOK_MODE=none: its
#               madvise hook runs in exiting threads TSan no longer tracks)
#   --valgrind  build as with no option, then run each GoogleTest case under
#               valgrind memcheck (REMAPRING_TEST_WRAPPER, see
#               test/gtest/CTestTestfile.cmake.in): an error or a definite
#               leak fails the test, even one that skips; contrib/valgrind.supp
#               lists the accepted ones; VALGRIND_OPTS adds options.
#               Valgrind does not emulate userfaultfd: the cases that need
#               it (the uffd engine, the memory cache, rcache_nohooks, the
#               notifier stress) skip, with the reason in their output
#   Run as root with no free huge page, it reserves four 2 MiB pages
#   (vm.nr_hugepages) for the hugetlb cases and restores the setting after.
#   Under --asan, --tsan and --valgrind the shell tests and UCX's suites are left
#   out: they preload the module into stock programs, which host neither.
#   (--valgrind-case is internal: the command each case runs through under
#   --valgrind.)
#   e.g.     contrib/test.sh -R ring -j2
#            BUILD_DIR=$PWD/build-vg contrib/test.sh --valgrind -j2
#
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)

mode=
case "${1:-}" in
--asan|--tsan|--valgrind) mode=$1; shift ;;
--valgrind-case)
    # internal: REMAPRING_TEST_WRAPPER runs each case as
    #   test.sh --valgrind-case libtool --mode=execute valgrind ... PROGRAM
    # ctest reports a case whose output holds "[  SKIPPED ]" as skipped
    # whatever its exit code, which would hide valgrind's errors in a case
    # that skips: hold those lines back to the end, and let them through
    # only if valgrind marked no error (--error-markers). Valgrind stays
    # ctest's child (exec), so ctest's timeout still reaches it.
    shift
    exec > >(
        held='' err=''
        while IFS= read -r line || [ -n "$line" ]; do
            case $line in
            *"[  SKIPPED ]"*) held+=$line$'\n'; continue ;;
            *"valgrind-error-begin"*) err=1 ;;
            esac
            printf '%s\n' "$line"
        done
        if [ -z "$err" ]; then
            printf '%s' "$held"
        elif [ -n "$held" ]; then
            printf 'valgrind found errors in a case that skipped:\n%s' \
                   "${held//\[  SKIPPED \]/[  skipped ]}"
        fi
    ) 2>&1
    exec "$@"
    ;;
esac

case "$mode" in
--asan)
    export BUILD_DIR=${BUILD_DIR:-$top/build-asan}
    "$top/contrib/build.sh" --enable-asan
    # full stacks through UCX's libraries, built without frame pointers
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:fast_unwind_on_malloc=0}
    export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$top/contrib/lsan.supp:print_suppressions=0}
    ;;
--tsan)
    export BUILD_DIR=${BUILD_DIR:-$top/build-tsan}
    "$top/contrib/build.sh" --disable-werror \
        CFLAGS="-O1 -g -fsanitize=thread" CXXFLAGS="-O1 -g -fsanitize=thread" \
        LDFLAGS="-fsanitize=thread"
    export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:exitcode=66:suppressions=$top/contrib/tsan.supp}
    export UCX_MEM_MMAP_HOOK_MODE=none
    # the hooks are off for TSan's sake: keep the notifier's default
    # engine what it is elsewhere (auto would pick the seccomp source)
    export UCX_REMAPRING_NOTIFIER=${UCX_REMAPRING_NOTIFIER:-uffd}
    # without -R: the cases with threads of ours that TSan can follow.
    # race_stress and rcache_nohooks map at fixed addresses, which TSan's
    # own layout refuses ("mmap at bad address")
    case " $* " in
    *" -R "*) ;;
    *) set -- -R '^(ring|memcache|notifier|seccomp)/' -E 'race_stress' "$@" ;;
    esac
    ;;
--valgrind)
    export BUILD_DIR=${BUILD_DIR:-$top/build}
    "$top/contrib/build.sh"
    # libtool runs the program behind its wrapper script (the uct tests
    # link the module from the build tree); --trace-children: rcache_nohooks
    # re-executes itself with UCM's hooks off; --fair-sched: the ring and
    # notifier tests spin between threads
    export REMAPRING_TEST_WRAPPER="\"$top/contrib/test.sh\" --valgrind-case
        \"$BUILD_DIR/libtool\" --mode=execute
        valgrind --quiet --error-exitcode=1
        --error-markers=valgrind-error-begin,valgrind-error-end
        --leak-check=full --show-leak-kinds=definite
        --errors-for-leak-kinds=definite --trace-children=yes
        --fair-sched=yes --num-callers=30
        --suppressions=\"$top/contrib/valgrind.supp\""
    ;;
*)
    export BUILD_DIR=${BUILD_DIR:-$top/build}
    "$top/contrib/build.sh"
    # UCX's UCT suites; without the harness their tests skip with the reason
    "$top/contrib/ucx-gtest.sh" build >/dev/null ||
        echo "test.sh: UCX's suites (ucx/remapring/*) will skip" >&2
    ;;
esac

# the ctest file is made by config.status, which make all does not rerun
make -C "$BUILD_DIR" test/gtest/CTestTestfile.cmake >/dev/null
cd "$BUILD_DIR/test/gtest"

# The hugetlb cases need free 2 MiB pages and skip without. As root, with
# none free, reserve a few for the run and give them back afterwards.
nr_huge=/proc/sys/vm/nr_hugepages
huge_old=
if [ -w "$nr_huge" ] &&
   [ "$(awk '/^HugePages_Free:/ {print $2}' /proc/meminfo)" = 0 ]; then
    huge_old=$(cat "$nr_huge")
    if echo $((huge_old + 4)) > "$nr_huge" 2>/dev/null; then
        echo "test.sh: vm.nr_hugepages $huge_old -> $(cat "$nr_huge") for" \
             "the hugetlb cases, restored after the run"
        trap 'echo "$huge_old" > "$nr_huge"' EXIT
    fi
fi

rc=0
if [ -n "$mode" ]; then
    ctest --output-on-failure -E '\.sh$|^ucx/' "$@" || rc=$?
else
    ctest --output-on-failure "$@" || rc=$?
fi
# A failed test's output is printed where it ran, in the middle of a long
# log: its last lines again at the end, where a reader of the log's tail
# (a CI summary) sees why
failed=Testing/Temporary/LastTestsFailed.log
if [ $rc -ne 0 ] && [ -f "$failed" ]; then
    while IFS=: read -r _ name; do
        echo "== the last lines of $name:"
        awk -v t="Testing: $name" '
            index($0, t) && substr($0, index($0, t) + length(t)) == "" { on = 1; next }
            on && /^<end of output>/ { exit }
            on' Testing/Temporary/LastTest.log | tail -40 | sed 's/^/   /'
    done < "$failed"
fi
exit $rc
