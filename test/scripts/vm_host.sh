#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# Sourced by the test_vm_*.sh scripts, after common.sh: the host's side of
# a test bed run (contrib/vm). Sets vm, jobs (test/scripts/vm), tmp
# (removed at exit) and times.
#   vm_setup             contrib/vm/setup.sh; a skip there skips the test
#   part NAME ARGS...    one contrib/vm/run.sh ARGS..., its guests' job
#                        output shown, its time kept in times; a skip ends
#                        the test as skipped, a failure fails it with the
#                        consoles' last lines
#   vm_times             the times, one line
#   vm_modules           the two modules, added to a guest: modules (run.sh
#                        -a arguments) and rdma_module (the RDMA one's path
#                        in the guest, libuct_remapring.so next to it)
#

: "${REMAPRING_SRCDIR:=$(cd "$(dirname "$0")/../.." && pwd)}"
vm=$REMAPRING_SRCDIR/contrib/vm
jobs=$REMAPRING_SRCDIR/test/scripts/vm
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
times=()
# in the jobs' output: perftest's tables, framing, settings and addresses
noise='^ *[a-z_0-9]+ (server|client): *([-+|*]|$|.*address|.*GID:|[A-Za-z* ]+: )'

part() {
    local name=$1 t=$SECONDS rc=0 f
    shift
    note "$name: contrib/vm/run.sh $*"
    "$vm/run.sh" -q -o "$tmp/$name" "$@" > "$tmp/$name.run" 2>&1 || rc=$?
    for f in "$tmp/$name"/[ab]/job.log; do
        [ -f "$f" ] || continue
        echo "-- guest $(basename "$(dirname "$f")")"
        grep -vE "$noise" "$f"
    done
    sed 's/^/   /' "$tmp/$name.run"
    times+=("$name $((SECONDS - t)) s")
    if [ $rc -eq 77 ]; then
        skip "$name: $(grep 'SKIP' "$tmp/$name.run" | head -1)"
    elif [ $rc -ne 0 ]; then
        for f in "$tmp/$name"/[ab]/console.log; do
            [ -f "$f" ] || continue
            echo "-- console of guest $(basename "$(dirname "$f")"), last lines"
            tail -30 "$f"
        done
        # last, where a shortened log still shows them: the checks that
        # failed and each guest's verdict
        echo "-- $name: what failed"
        for f in "$tmp/$name"/[ab]/job.log; do
            [ -f "$f" ] || continue
            grep -h 'BAD:' "$f" |
                sed "s/^ */   guest $(basename "$(dirname "$f")"): /"
        done
        grep -E '^vm: (guest .*(job status|no result|did not start)|a guest)' \
             "$tmp/$name.run" | sed 's/^/   /'
        fail "$name: status $rc"
    fi
}

vm_setup() {
    local t=$SECONDS rc=0
    note "setup: contrib/vm/setup.sh"
    "$vm/setup.sh" || rc=$?
    [ $rc -eq 77 ] && exit 77
    [ $rc -eq 0 ] || fail "setup: status $rc"
    times+=("setup $((SECONDS - t)) s")
}

vm_modules() {
    local rdma=$REMAPRING_RDMA_MODULE # common.sh gave its default
    [ -f "$REMAPRING_MODULE" ] || fail "no module at $REMAPRING_MODULE"
    [ -f "$rdma" ] || fail "no RDMA module at $rdma (built without rdma-core?)"
    modules=(-a "$REMAPRING_MODULE:/payload/libuct_remapring.so"
             -a "$rdma:/payload/libuct_remaprdma.so")
    rdma_module=/payload/libuct_remaprdma.so
}

vm_times() {
    note "times: $(IFS=,; echo "${times[*]}" | sed 's/,/, /g')"
}
