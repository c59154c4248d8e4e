#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# Helpers for test bed jobs, in the guest as /vm/lib.sh: `. /vm/lib.sh`.
# The environment is the one contrib/vm/guest/init describes (VM_ROLE,
# VM_IP, VM_PEER, VM_GID_INDEX, VM_ODP, VM_OUT, ...).
#
#   vm_fail MSG / vm_skip MSG    print and exit 1 / 77
#   vm_note MSG                  "== MSG", with the guest's clock
#   vm_loopback NAME PORT CMD... a server and a client of CMD in this guest
#   vm_pair NAME PORT CMD...     CMD as server on a, as client on b
#   vm_barrier NAME              wait until the other guest is here too
#   vm_rxe_counters              rxe0's retransmission counters
#   vm_mpich NP PROG [ARG...]    MPICH (hydra) across vm-a and vm-b
#   vm_ompi NP PROG [ARG...]     Open MPI (pml ucx) across vm-a and vm-b
#   vm_mpi_check MPI PROG LANE   one of them, two ranks, checked
# The MPI helpers need the MPI layer (run.sh -M), run from guest a, while
# guest b waits in a barrier; no ssh: the launchers start their daemons on
# the other guest through /vm/bin/vm-rsh. They stop the program after
# VM_MPI_TIMEOUT seconds (default 120).
#

vm_uptime() { cut -d' ' -f1 /proc/uptime; }
vm_note() { echo "== [$(vm_uptime)] $*"; }
vm_fail() { echo "FAIL: $*"; exit 1; }
vm_skip() { echo "SKIP: $*"; exit 77; }

# vm_listening HOST PORT: true if a TCP socket listens on PORT on HOST
# (asked through vm-rsh), or here if HOST is -
vm_listening() {
    if [ "$1" = - ]; then
        [ -n "$(ss -Hltn "sport = :$2")" ]
    else
        [ -n "$(VM_RSH_WAIT=2 /vm/bin/vm-rsh "$1" "ss -Hltn 'sport = :$2'" \
                2>/dev/null)" ]
    fi
}

# vm_wait_listen HOST PORT SEC: waits until vm_listening HOST PORT, at
# most SEC seconds
vm_wait_listen() {
    local i
    for ((i = 0; i < $3 * 5; ++i)); do
        vm_listening "$1" "$2" && return 0
        sleep 0.2
    done
    return 1
}

# vm_rxe_counters: rxe0's retransmission counters, one line; under TCG a
# late acknowledgement makes rxe retransmit, and RC QPs have been seen to
# stall for good after some retransmissions
vm_rxe_counters() {
    local d=/sys/class/infiniband/rxe0/ports/1/hw_counters c line=
    for c in completer_retry_err duplicate_request retry_exceeded_err \
             rcvd_seq_err; do
        line+=" $c $(cat "$d/$c" 2>/dev/null)"
    done
    echo "rxe0:$line"
}

# vm_rxe_pkts: the packets rxe0 sent and received so far
vm_rxe_pkts() {
    local d=/sys/class/infiniband/rxe0/ports/1/hw_counters
    echo $(( $(cat $d/sent_pkts 2>/dev/null || echo 0) +
             $(cat $d/rcvd_pkts 2>/dev/null || echo 0) ))
}

# vm_show NAME ROLE FILE: a command's output, each line under its name
vm_show() {
    sed "s/^/   $1 $2: /" "$3"
}

# vm_loopback NAME PORT CMD...: runs CMD as a server, waits until it
# listens on TCP PORT, then runs CMD again with this guest's address
# appended as its client (the ibv_*_pingpong, ib_*_bw and ucx_perftest
# way). Shows both outputs and the time; true if both exited 0.
vm_loopback() {
    local name=$1 port=$2 spid src crc t=$SECONDS
    shift 2
    vm_note "$name"
    timeout 120 "$@" > "/tmp/$name.server" 2>&1 &
    spid=$!
    if ! vm_wait_listen - "$port" 30; then
        kill "$spid" 2>/dev/null
        wait "$spid"
        vm_show "$name" server "/tmp/$name.server"
        echo "   $name: the server never listened on port $port"
        return 1
    fi
    timeout 120 "$@" "$VM_IP" > "/tmp/$name.client" 2>&1
    crc=$?
    [ $crc -eq 0 ] || kill "$spid" 2>/dev/null
    wait "$spid"
    src=$?
    vm_show "$name" server "/tmp/$name.server"
    vm_show "$name" client "/tmp/$name.client"
    echo "   $name: server $src, client $crc ($((SECONDS - t)) s)"
    [ $src -eq 0 ] && [ $crc -eq 0 ]
}

# vm_pair NAME PORT CMD...: the two guests' halves of one test. On a, CMD
# runs as the server; on b, once a listens on TCP PORT, CMD runs with a's
# address appended. Each guest shows and returns its own half's result.
# When either half's output matches VM_PAIR_AGAIN (default: perftest's
# "Can't produce a report", its clock calibration failing under TCG), both
# run again, up to VM_PAIR_TRIES times (default 3): each tells the other
# its outcome through vm-rsh and waits for the other's, so both decide the
# same.
vm_pair() {
    local name=$1 port=$2 rc try=1 tries=${VM_PAIR_TRIES:-3} t=$SECONDS
    local side=server mine theirs other f i
    local again=${VM_PAIR_AGAIN:-"Can't produce a report"}
    shift 2
    [ "$VM_ROLE" = a ] || side=client
    other=$([ "$VM_ROLE" = a ] && echo b || echo a)
    vm_note "$name"
    mkdir -p /tmp/vm-pair
    while :; do
        if [ "$VM_ROLE" = a ]; then
            timeout 180 "$@" > "/tmp/$name.log" 2>&1
            rc=$?
        elif vm_wait_listen "$VM_PEER" "$port" 120; then
            timeout 180 "$@" "$VM_PEER" > "/tmp/$name.log" 2>&1
            rc=$?
        else
            echo "   $name: the server on $VM_PEER never listened on port $port"
            rc=1
        fi
        mine=done
        [ $rc -ne 0 ] && grep -qF "$again" "/tmp/$name.log" && mine=again
        f=/tmp/vm-pair/$name.$try
        VM_RSH_WAIT=30 /vm/bin/vm-rsh "$VM_PEER" \
            "mkdir -p /tmp/vm-pair && echo $mine > $f.$VM_ROLE" || break
        theirs=
        for ((i = 0; i < 2000; ++i)); do
            theirs=$(cat "$f.$other" 2>/dev/null)
            [ -n "$theirs" ] && break
            sleep 0.1
        done
        [ "$mine" = again ] || [ "$theirs" = again ] || break
        [ $try -lt "$tries" ] || break
        vm_show "$name" "$side" "/tmp/$name.log" | tail -3
        echo "   $name: again ($([ "$mine" = again ] && echo here ||
                                echo on guest "$other"): $again)"
        try=$((try + 1))
    done
    vm_show "$name" "$side" "/tmp/$name.log"
    echo "   $name: $rc ($((SECONDS - t)) s), $(vm_rxe_counters)"
    return $rc
}

# vm_barrier NAME [SEC]: each guest leaves its mark on the other
# (through vm-rsh) and waits for the other's mark on itself, so neither
# passes, nor powers off, before both have arrived. Default 300 s.
vm_barrier() {
    local name=$1 sec=${2:-300} other i
    other=$([ "$VM_ROLE" = a ] && echo b || echo a)
    mkdir -p /tmp/vm-barrier
    VM_RSH_WAIT=$sec /vm/bin/vm-rsh "$VM_PEER" \
        "mkdir -p /tmp/vm-barrier && touch /tmp/vm-barrier/$name.$VM_ROLE" ||
        { echo "   barrier $name: cannot reach $VM_PEER"; return 1; }
    for ((i = 0; i < sec * 10; ++i)); do
        [ -e "/tmp/vm-barrier/$name.$other" ] && return 0
        sleep 0.1
    done
    echo "   barrier $name: guest $other did not arrive in $sec s"
    return 1
}

# vm_mpich NP PROG [ARG...]: MPICH's hydra across vm-a and vm-b, one rank
# after the other on each (-ppn 1 for two ranks), its proxies started by
# vm-rsh; the environment is passed on by hydra
vm_mpich() {
    local np=$1
    shift
    timeout "${VM_MPI_TIMEOUT:-120}" mpiexec.mpich -launcher rsh \
        -launcher-exec /vm/bin/vm-rsh -hosts vm-a,vm-b -n "$np" -ppn 1 "$@"
}

# vm_ompi NP PROG [ARG...]: Open MPI across vm-a and vm-b with pml ucx, its
# orted on b started by vm-rsh. Open MPI passes on only what -x names: the
# UCX_* and LD_PRELOAD of this environment are named.
vm_ompi() {
    local np=$1 x=() v
    shift
    for v in $(compgen -e | grep -E '^(UCX_|LD_PRELOAD$)'); do
        x+=(-x "$v")
    done
    timeout "${VM_MPI_TIMEOUT:-120}" mpirun.openmpi --allow-run-as-root \
        -H vm-a,vm-b -np "$np" --map-by node \
        --mca plm_rsh_agent /vm/bin/vm-rsh --mca oob_tcp_if_include eth0 \
        --mca btl self --mca pml ucx --mca pml_ucx_tls any \
        --mca pml_ucx_devices any "${x[@]}" "$@"
}

# vm_mpi_check MPI PROG LANE [ARG...]: from guest a, PROG with two ranks,
# one on each guest, by vm_mpich (MPI mpich) or vm_ompi (ompi), with the
# environment as it is (UCX_LOG_LEVEL=info is added: each rank's UCX
# endpoints are printed); true if the ranks passed (a line "PASS") and each
# guest's rank has an endpoint whose lanes contain LANE (e.g. tcp/eth0).
# MPICH 4.0.2 sometimes hangs in MPI_Finalize between the guests, waiting
# for its UCX endpoints to close without progressing the peer (about 1 run
# in 10 over tcp, see test/apps/mpi_hello.c): when the ranks passed, that
# is said and not counted.
vm_mpi_check() {
    local mpi=$1 prog=$2 lane=$3 st h ok=0 t=$SECONDS
    shift 3
    vm_note "MPI $(basename "$prog"), $mpi, vm-a and vm-b, UCX_TLS=${UCX_TLS:-}"
    case $mpi in
    mpich) (export UCX_LOG_LEVEL=info VM_MPI_TIMEOUT=${VM_MPI_TIMEOUT:-60}
            vm_mpich 2 "$prog" "$@") > /tmp/mpi.log 2>&1 ;;
    ompi)  (export UCX_LOG_LEVEL=info; vm_ompi 2 "$prog" "$@") \
               > /tmp/mpi.log 2>&1 ;;
    *)     echo "   unknown MPI $mpi"; return 1 ;;
    esac
    st=$?
    grep -v 'UCX  INFO' /tmp/mpi.log | sed "s/^/   $mpi: /"
    echo "   $mpi: status $st ($((SECONDS - t)) s)"
    if [ "$mpi:$st" = mpich:124 ] && grep -q '^PASS' /tmp/mpi.log; then
        echo "   $mpi: the ranks passed but MPI_Finalize hung (MPICH 4.0.2" \
             "over UCX 1.13); not counted"
    elif [ $st -ne 0 ] || ! grep -q '^PASS' /tmp/mpi.log; then
        echo "   $mpi: FAILED"
        ok=1
    fi
    for h in vm-a vm-b; do
        if ! grep "\[$h:.*ep_cfg.*$lane" /tmp/mpi.log | head -1 |
                sed "s/.*INFO */   $mpi: $h: /" | grep .; then
            echo "   $mpi: no UCX endpoint over $lane on $h"
            ok=1
        fi
    done
    return $ok
}
