#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# Job for one test bed guest (contrib/vm/run.sh), run by test_vm_verbs.sh:
# UCX's own UCT suites (contrib/ucx-gtest.sh, the harness built on the
# host and added at its cache path) with the module preloaded, in a guest
# where the transport has two devices: memory and rxe0:1 (the verbs wire,
# each case also in loopback).
#
# usage: ucx_suites.sh CONTRIB MODULE FILTER...
#   CONTRIB  the tree's contrib/ directory, added to the guest
#   FILTER   a suite (e.g. uct_flush_test) or a gtest filter, each run by
#            contrib/ucx-gtest.sh run
#
. /vm/lib.sh

contrib=$1 module=$2
shift 2
errors=0 rxe=0
for f in "$@"; do
    REMAPRING_MODULE=$module UCX_GTEST_WATCHDOG=120 timeout 600 \
        bash "$contrib/ucx-gtest.sh" run "$f" > /tmp/suite 2>&1
    st=$?
    n=$(grep -c '^\[ RUN      \] .*<remapring/rxe0:1' /tmp/suite)
    rxe=$((rxe + n))
    grep '^ucx-gtest: .*: [0-9]* passed' /tmp/suite | sed 's/^ucx-gtest: /   /'
    echo "   ($n cases on rxe0:1)"
    if [ $st -ne 0 ] && [ $st -ne 77 ]; then
        grep -B3 -A12 'Failure\|FAILED \|did not finish' /tmp/suite |
            head -60 | sed 's/^/   | /'
        echo "   BAD: $f (status $st)"
        errors=$((errors + 1))
    fi
done
[ $rxe -gt 0 ] || vm_fail "no case ran on rxe0:1"
[ $errors -eq 0 ] || vm_fail "$errors suite(s) failed"
echo "PASS: UCX's UCT suites, $rxe cases on rxe0:1"
