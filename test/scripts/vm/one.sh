#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# Job for one test bed guest (contrib/vm/run.sh), run by test_vm_verbs.sh:
# the one-guest checks of verbs.sh, then UCX's UCT suites on rxe0
# (ucx_suites.sh), in the same boot, so that the guest boots once.
#
# usage: one.sh JOBS MODE MODULE APPS CONTRIB [SUITE...]
#   JOBS     this directory (test/scripts/vm), added to the guest
#   CONTRIB  the tree's contrib/ directory, or - to leave the suites out
#   the others as verbs.sh and ucx_suites.sh take them
#
. /vm/lib.sh

jobs=$1 mode=$2 module=$3 apps=$4 contrib=$5
shift 5
failed=

bash "$jobs/verbs.sh" one "$mode" "$module" "$apps" || failed="verbs.sh"
if [ "$contrib" != - ]; then
    vm_note "UCX's UCT suites on rxe0"
    bash "$jobs/ucx_suites.sh" "$contrib" "$module" "$@" ||
        failed="$failed${failed:+, }ucx_suites.sh"
fi
[ -z "$failed" ] || vm_fail "$failed failed ($mode)"
