#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# Job for one test bed guest (contrib/vm/run.sh), run by test_vm_verbs.sh:
# UCX's own UCT suites (contrib/ucx-gtest.sh, the harness built on the
# host and added at its cache path) with the RDMA module preloaded, on the
# RDMA transport only: the cases instantiated on remaprdma/rxe0:1 (and,
# for test_md, on the rxe0 memory domain of the remaprdma component), read
# from the harness's --gtest_list_tests, all in one run of the harness
# (each start of it costs seconds under TCG). The host's test command
# already runs every suite on the shared-memory transport.
#
# usage: ucx_suites.sh CONTRIB MODULE SUITE...
#   CONTRIB  the tree's contrib/ directory, added to the guest
#   MODULE   libuct_remaprdma.so
#   SUITE    a suite of the harness, e.g. uct_flush_test
# Prints, per suite, its cases on the device and how many passed, skipped
# (with UCX's reason) and failed; fails if a case failed or none ran.
#
. /vm/lib.sh

contrib=$1 module=$2
shift 2
harness=$(bash "$contrib/ucx-gtest.sh" build 2>/dev/null | tail -1)
[ -x "$harness" ] || vm_fail "no UCX harness in the guest ($harness)"

# the cases of each suite whose parameter is the verbs device, as
# --gtest_list_tests names them:
#   remapring/uct_flush_test.
#     am_flush_ep_nb/1  # GetParam() = remaprdma/rxe0:1
filter=
for s in "$@"; do
    cases=$(LD_PRELOAD=$module "$harness" --gtest_list_tests \
                --gtest_filter="remaprdma/$s.*" \
                2>/dev/null |
            awk '/^[^ ]/ { suite = $1; next }
                 /GetParam\(\) = (remaprdma\/)?rxe[0-9]+(:[0-9]+)?$/ {
                     print suite $1 }')
    n=$(echo "$cases" | grep -c . || true)
    echo "   $s: $n cases on rxe0"
    [ "$n" -gt 0 ] && filter=$filter${filter:+:}$(echo "$cases" | paste -sd:)
done
[ -n "$filter" ] || vm_fail "no case of the suites is on rxe0"

# a case may take minutes under TCG (test_uct_pending.pending_fairness
# waits 10000 times for a credit over rxe): the watchdog is generous
REMAPRING_MODULE=$module UCX_GTEST_WATCHDOG=300 timeout 900 \
    bash "$contrib/ucx-gtest.sh" run "$filter" > /tmp/suites 2>&1
st=$?

# per suite: passed, skipped, failed, from the harness's own lines and the
# summary ucx-gtest.sh prints (skips and failures by name)
awk '
    /^\[ RUN      \] / { split($4, p, "."); s = p[1]; sub(/^remaprdma\//, "", s)
                         seen[s]++; order[s] = order[s] ? order[s] : ++ns
                         name[ns] = s }
    /^ucx-gtest: skipped / { split($3, p, "."); s = p[1]
                             sub(/^remaprdma\//, "", s); skip[s]++ }
    /^ucx-gtest: FAILED / { split($3, p, "."); s = p[1]
                            sub(/^remaprdma\//, "", s); fail[s]++ }
    END {
        for (i = 1; i <= ns; i++) {
            s = name[i]
            printf "   %s: %d passed, %d skipped, %d failed of %d on rxe0\n",
                   s, seen[s] - skip[s] - fail[s], skip[s] + 0,
                   fail[s] + 0, seen[s]
        }
    }' /tmp/suites
grep '^ucx-gtest: \(skipped\|FAILED\|the harness\)' /tmp/suites |
    sed 's/^ucx-gtest: /   /'
total=$(grep -c '^\[ RUN      \] ' /tmp/suites || true)
if [ $st -ne 0 ] && [ $st -ne 77 ]; then
    grep -B3 -A12 'Failure\|FAILED \|did not finish' /tmp/suites |
        head -80 | sed 's/^/   | /'
    vm_fail "UCX's UCT suites on rxe0: status $st"
fi
[ "$total" -gt 0 ] || vm_fail "no case ran on rxe0"
echo "PASS: UCX's UCT suites, $total cases on rxe0"
