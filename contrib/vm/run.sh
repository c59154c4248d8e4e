#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# Boot one test bed guest, or a pair joined by a qemu socket network, each
# with soft-RoCE (rxe0) on its own virtio NIC, run a job script in it, power
# off, and return the job's verdict. qemu runs with TCG (no KVM needed).
# The guest image is made by contrib/vm/setup.sh.
#
# usage: contrib/vm/run.sh [options] JOB [ARG...]
#   JOB runs in each guest with bash, with ARGs, in /vm/run, once eth0 and
#   rxe0 are up; contrib/vm/guest/init lists what it finds in its
#   environment (VM_ROLE, VM_IP, VM_PEER, VM_GID_INDEX, VM_ODP, ...), and
#   it may source /vm/lib.sh (contrib/vm/guest/lib.sh) for helpers. What it
#   writes to /vm/out lands in OUT/<role>/ on the host, its output in
#   OUT/<role>/job.log, the console in OUT/<role>/console.log.
#   -k KERNEL    odp (default): the current trixie-backports 7.x kernel,
#                whose rxe has ODP; pinned: Debian 12's 6.1, no ODP; or a
#                directory made by contrib/vm/mkkernel.sh
#   -2           boot two guests, a (10.0.3.1, host vm-a) and b (10.0.3.2,
#                vm-b), their NICs joined by a qemu socket netdev on this
#                host; alone, a is 10.0.3.1 with no peer
#   -n LINK      the pair's link: unix (default): a listens on the stream
#                socket OUT/link, b connects; tcp: the same on 127.0.0.1,
#                where qemu's socket delays small frames (Nagle's
#                algorithm), so that a verbs round trip takes 55-70 ms
#                instead of 15-40 ms and rxe retransmits; udp: a datagram
#                socket each way (may drop frames under load)
#   -M           add Open MPI and MPICH (up to a second more per boot)
#   -a SRC[:DST] add a file or directory to each guest, at DST (absolute)
#                or by default /payload/<name of SRC>; repeatable
#   -e NAME=VAL  set NAME in the job's environment; repeatable
#   -o OUT       keep the outputs in OUT (default: a new directory
#                /tmp/remapring-vm.XXXXXX)
#   -t SEC       bound on the whole run (default 600); the job is stopped
#                30 s before, so that the guest still reports
#   -g SEC       once one guest of a pair is off, the other gets SEC more
#                (default 60)
#   -m MB, -c N  guest memory (default 2048) and vCPUs (default 2)
#   -q           do not stream the consoles, print only the summary
#   -i           interactive: one guest, a shell on this terminal instead of
#                a job (JOB is not needed); exit the shell to power off
#   Environment: REMAPRING_VM_CACHE (default /var/cache/remapring/vm),
#   VM_ACCEL (default tcg,thread=single), VM_LOGLEVEL (kernel console
#   log level, default 4), VM_KARGS (more kernel arguments).
#   A guest whose kernel stops before it starts init (seen once: a panic
#   in the emulated CPU's early interrupts, before any of the job's code
#   ran), or has not started it after VM_INIT_WAIT s (default 180; seen
#   once: no line past the firmware's), is not a verdict on the job: the
#   run boots the guests once more, saying so (VM_BOOT_TRIES, default 2,
#   is how many boots in all).
#   Exit status: 0 when every guest's job exited 0; else the first failing
#   job's status (1 for a guest that gave none, e.g. timed out); 77 (skip)
#   when qemu cannot run here, the image is missing, or a job exited 77.
#   e.g.     contrib/vm/run.sh -a build/.libs/libuct_remapring.so job.sh
#            contrib/vm/run.sh -2 -k pinned pair-job.sh 100
#
set -euo pipefail
orig_args=("$@")
here=$(cd "$(dirname "$0")" && pwd)
cache=${REMAPRING_VM_CACHE:-/var/cache/remapring/vm}
accel=${VM_ACCEL:-tcg,thread=single}

die() { echo "vm: $*" >&2; exit 1; }
skip() { echo "vm: SKIP: $*"; exit 77; }
usage() { sed -n '/^# usage:/,/^set -euo/{/^set/d;s/^# \{0,1\}//;p}' "$0"; }
# seconds since the guests started, with hundredths
elapsed() {
    local t=$(( ${EPOCHREALTIME/./} - t0 ))
    printf '%d.%02d' $((t / 1000000)) $((t % 1000000 / 10000))
}

kernel=odp pair=0 net_kind=unix mpi=0 out= timeout=600 grace=60 mem=2048
cpus=2 quiet=0 interactive=0
adds=() envs=()
while getopts "k:2n:Ma:e:o:t:g:m:c:qih" opt; do
    case $opt in
    k) kernel=$OPTARG ;;
    2) pair=1 ;;
    n) net_kind=$OPTARG ;;
    M) mpi=1 ;;
    a) adds+=("$OPTARG") ;;
    e) [[ $OPTARG == [A-Za-z_]*=* ]] || die "-e wants NAME=VALUE: $OPTARG"
       envs+=("$OPTARG") ;;
    o) out=$OPTARG ;;
    t) timeout=$OPTARG ;;
    g) grace=$OPTARG ;;
    m) mem=$OPTARG ;;
    c) cpus=$OPTARG ;;
    q) quiet=1 ;;
    i) interactive=1 ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
for v in "$timeout" "$grace" "$mem" "$cpus"; do
    [[ $v =~ ^[0-9]+$ ]] || die "not a number: $v"
done
[ "$timeout" -gt 60 ] || die "-t must be more than 60 s"
case $net_kind in
tcp|udp|unix) ;;
*) die "-n tcp, udp or unix" ;;
esac
job=
if [ "$interactive" = 0 ]; then
    [ $# -ge 1 ] || { usage >&2; exit 2; }
    job=$1
    shift
    [ -f "$job" ] || die "no job script $job"
elif [ "$pair" = 1 ]; then
    die "-i boots one guest"
fi

command -v qemu-system-x86_64 >/dev/null ||
    skip "qemu-system-x86_64 is not installed (contrib/vm/setup.sh installs it)"
qemu-system-x86_64 -accel help 2>/dev/null | grep -qx "${accel%%,*}" ||
    skip "this qemu has no ${accel%%,*} accelerator"

case $kernel in
odp|pinned) kdir=$cache/$kernel ;;
*) kdir=$kernel ;;
esac
layers=("$cache/rootfs/rootfs.cpio")
[ "$mpi" = 1 ] && layers+=("$cache/rootfs/mpi.cpio")
for f in "$kdir/kernel" "$kdir/modules.cpio" "${layers[@]}" \
         "$cache/bin/vm-rsh" "$cache/.lock"; do
    [ -f "$f" ] || skip "no $f: run contrib/vm/setup.sh"
done

if [ -z "$out" ]; then
    out=$(mktemp -d /tmp/remapring-vm.XXXXXX)
else
    mkdir -p "$out"
fi
out=$(cd "$out" && pwd)
[[ $out != *,* ]] || die "the output directory's path may not hold a comma"
roles=(a)
[ "$pair" = 1 ] && roles=(a b)

stage=$(mktemp -d "$out/.stage.XXXXXX")
pids=()
# stop_guests: ends the qemu processes still running (through timeout)
stop_guests() {
    local f
    for f in "$out"/[ab]/qemu.pid; do
        [ -f "$f" ] || continue
        [ -f "${f%.pid}.status" ] && continue
        if kill "$(cat "$f")" 2>/dev/null; then
            touch "${f%.pid}.stopped"
        fi
    done
}
cleanup() {
    [ ${#pids[@]} -eq 0 ] || stop_guests
    rm -rf "$stage"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The bed's own archive: init, the job, its arguments and environment,
# the helpers, the payload.
mkdir -p "$stage/root/vm/bin" "$stage/root/payload"
cp "$here/guest/init" "$stage/root/init"
chmod 755 "$stage/root/init"
cp "$here/guest/lib.sh" "$stage/root/vm/lib.sh"
cp "$cache/bin/vm-rsh" "$stage/root/vm/bin/"
[ -n "$job" ] && cp "$job" "$stage/root/vm/job"
: > "$stage/root/vm/args"
[ $# -eq 0 ] || printf '%s\0' "$@" > "$stage/root/vm/args"
: > "$stage/root/vm/env"
for e in "${envs[@]}"; do
    printf '%s=%q\n' "${e%%=*}" "${e#*=}" >> "$stage/root/vm/env"
done
for a in "${adds[@]}"; do
    src=${a%%:*} dst=
    [ "$src" != "$a" ] && dst=${a#*:}
    [ -e "$src" ] || die "no such file to add: $src"
    [ -n "$dst" ] || dst=/payload/$(basename "$src")
    [[ $dst == /* ]] || die "the destination must be absolute: $a"
    mkdir -p "$stage/root$(dirname "$dst")"
    cp -a "$src" "$stage/root$dst"
done
(cd "$stage/root" && find . -mindepth 1 | LC_ALL=C sort |
 cpio -o -H newc --quiet --owner 0:0) > "$stage/bed.cpio"

# The initramfs is the archives concatenated: the kernel unpacks each in
# turn, later files replacing earlier ones. Under the cache's lock, so
# that a setup.sh running meanwhile replaces nothing half-read.
(
    flock -s 9 || true
    cat "${layers[@]}" "$kdir/modules.cpio" "$stage/bed.cpio" \
        > "$stage/initrd.cpio"
    cp "$kdir/kernel" "$stage/kernel"
    cat "$kdir/version" > "$stage/version" 2>/dev/null ||
        echo "?" > "$stage/version"
) 9< "$cache/.lock"

# guest_args ROLE INDEX: the qemu arguments of one guest, in qargs
guest_args() {
    local role=$1 idx=$2 peer= mac
    [ "$pair" = 1 ] && peer=10.0.3.$((2 - idx))
    # qemu gives every NIC the same MAC unless told
    mac=52:54:00:12:34:0$((idx + 1))
    qargs=(-accel "$accel" -cpu max -smp "$cpus" -m "$mem"
           -nographic -nodefaults -no-reboot -monitor none
           -kernel "$stage/kernel" -initrd "$stage/initrd.cpio"
           -device "virtio-net-pci,netdev=n0,mac=$mac,romfile="
           -fsdev "local,id=vmout,path=$out/$role,security_model=none"
           -device virtio-9p-pci,fsdev=vmout,mount_tag=vmout
           -append "console=ttyS0 rdinit=/init panic=-1
loglevel=${VM_LOGLEVEL:-4} VM_ROLE=$role VM_IP=10.0.3.$((idx + 1))
VM_PEER=$peer VM_TIMEOUT=$((timeout - 30)) VM_INTERACTIVE=$interactive
${VM_KARGS:-}")
    qargs[-1]=${qargs[-1]//$'\n'/ }
}

echo "vm: kernel $(cat "$stage/version") ($kernel), ${#roles[@]} guest(s)," \
     "output in $out"
t0=${EPOCHREALTIME/./}

if [ "$interactive" = 1 ]; then
    mkdir -p "$out/a"
    guest_args a 0
    qemu-system-x86_64 "${qargs[@]}" -serial mon:stdio \
        -netdev user,id=n0,restrict=on && exit 0 || exit $?
fi

# console ROLE: keeps each console line, stamped with the time since the
# start, in OUT/ROLE/console.log, and shows it with the role unless -q
console() {
    local role=$1 line t esc=$'\e'
    while IFS= read -r line || [ -n "$line" ]; do
        line=${line%$'\r'}
        # the firmware's terminal control sequences
        [[ $line == *$esc* ]] &&
            line=$(sed 's/\x1b\[[0-9;?]*[A-Za-z]//g' <<< "$line")
        t=$(elapsed)
        printf '[%7s] %s\n' "$t" "$line" >> "$out/$role/console.log"
        [ "$quiet" = 1 ] || printf '[%s %7s] %s\n' "$role" "$t" "$line"
    done
}

# two free ports for the tcp and udp links: a's, and b's for udp
port= port_b=
[ "$net_kind" != unix ] || [ ${#out} -lt 100 ] ||
    die "the output directory's path is too long for a socket in it"
if [ "$pair" = 1 ] && [ "$net_kind" != unix ]; then
    read -r port port_b < <(python3 -c 'import socket
s, t = socket.socket(), socket.socket(type=socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 0)); t.bind(("127.0.0.1", 0))
print(s.getsockname()[1], t.getsockname()[1])')
fi
rm -f "$out/link"
for i in "${!roles[@]}"; do
    role=${roles[$i]}
    mkdir -p "$out/$role"
    rm -f "$out/$role"/qemu.{pid,status,stopped}
    : > "$out/$role/console.log"
    # alone, user networking only gives the NIC a link (restrict: no
    # way out of the host)
    lo=127.0.0.1
    case "$pair:$net_kind:$role" in
    0:*)     net=user,id=n0,restrict=on ;;
    1:tcp:a) net=socket,id=n0,listen=$lo:$port ;;
    1:tcp:b) net=socket,id=n0,connect=$lo:$port ;;
    1:udp:a) net=socket,id=n0,udp=$lo:$port_b,localaddr=$lo:$port ;;
    1:udp:b) net=socket,id=n0,udp=$lo:$port,localaddr=$lo:$port_b ;;
    1:unix:a) net=stream,id=n0,server=on,addr.type=unix,addr.path=$out/link ;;
    1:unix:b) net=stream,id=n0,server=off,addr.type=unix,addr.path=$out/link ;;
    esac
    guest_args "$role" "$i"
    # qemu under timeout, its console through console(); the subshell
    # leaves timeout's pid (to stop the guest) and qemu's status
    (
        timeout -k 5 "$timeout" qemu-system-x86_64 "${qargs[@]}" \
            -netdev "$net" -serial stdio 2> "$out/$role/qemu.err" &
        echo $! > "$out/$role/qemu.pid"
        wait $! && st=0 || st=$?
        echo "$st" > "$out/$role/qemu.status"
    ) < /dev/null | console "$role" &
    pids[$i]=$!
    if [ "$role" = a ] && [ "$pair" = 1 ] && [ "$net_kind" != udp ]; then
        # b connects only once a listens
        for _ in $(seq 100); do
            case $net_kind in
            tcp)  ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break ;;
            unix) [ -S "$out/link" ] && break ;;
            esac
            kill -0 "${pids[0]}" 2>/dev/null || break
            sleep 0.1
        done
    fi
done

# Wait for the guests; once one is off, the other gets the grace period.
# A guest whose kernel has not started init after VM_INIT_WAIT s (default
# 180; a boot takes 5-20 s under TCG) hangs in its early boot (seen: no
# line past the firmware's for 14 minutes): the guests are stopped, and
# booted again below.
first_off= ended=() init_wait=$((SECONDS + ${VM_INIT_WAIT:-180}))
while :; do
    if [ -n "$init_wait" ] && [ "$SECONDS" -ge "$init_wait" ]; then
        init_wait=
        for role in "${roles[@]}"; do
            grep -q '@@VM-T init' "$out/$role/console.log" && continue
            echo "vm: guest $role: no init after ${VM_INIT_WAIT:-180} s:" \
                 "stopping the guests"
            stop_guests
            break
        done
    fi
    running=0
    for i in "${!roles[@]}"; do
        [ -n "${ended[$i]:-}" ] && continue
        if kill -0 "${pids[$i]}" 2>/dev/null; then
            running=$((running + 1))
        else
            ended[$i]=1
            [ -n "$first_off" ] || first_off=$SECONDS
        fi
    done
    [ $running = 0 ] && break
    if [ -n "$first_off" ] && [ $((SECONDS - first_off)) -gt "$grace" ]; then
        echo "vm: a guest is still up $grace s after the other powered" \
             "off: stopping it"
        stop_guests
        first_off=$((SECONDS + timeout))
    fi
    sleep 0.2
done
wait 2>/dev/null || true
pids=()

# The verdict and the timings, per guest
rc=0 skip_rc=0 no_init=
for i in "${!roles[@]}"; do
    role=${roles[$i]}
    log=$out/$role/console.log
    qst=$(cat "$out/$role/qemu.status" 2>/dev/null || echo "?")
    res=$(sed -n 's/.*@@VM-RESULT \([0-9]*\).*/\1/p' "$log" | tail -1)
    if [ ! -s "$log" ] && [ "$qst" != 0 ] && [ "$qst" != 124 ]; then
        # not one line from the firmware or the kernel: qemu cannot run
        sed 's/^/  /' "$out/$role/qemu.err"
        skip "qemu cannot boot a guest here (status $qst)"
    fi
    if ! grep -q '@@VM-T init' "$log"; then
        echo "vm: guest $role: the kernel did not start init (see $log)"
        no_init="$no_init $role"
    fi
    # the run's time when the console showed a marker
    host_at() {
        sed -n "s/^\[ *\([0-9.]*\)\] .*@@VM-T $1 .*/\1/p" "$log" | tail -1
    }
    ready=$(host_at ready) done_at=$(host_at end) job_s="?"
    [ -n "$ready" ] && [ -n "$done_at" ] &&
        job_s=$(awk -v a="$ready" -v b="$done_at" 'BEGIN { printf "%.1f", b - a }')
    printf 'vm: guest %s: init at %s s, ready at %s s, job %s s,' "$role" \
        "$(host_at init)" "${ready:-?}" "$job_s"
    echo " off at $(tail -1 "$log" | sed 's/^\[ *\([0-9.]*\)\].*/\1/') s" \
         "(qemu status $qst)"
    if [ -z "$res" ]; then
        if [ -f "$out/$role/qemu.stopped" ]; then
            echo "vm: guest $role: no result, stopped"
        elif [ "$qst" = 124 ] || [ "$qst" = 137 ]; then
            echo "vm: guest $role: no result, stopped after $timeout s"
        else
            echo "vm: guest $role: no result (see $log)"
        fi
        res=1
    fi
    echo "vm: guest $role: job status $res"
    if [ "$res" = 77 ]; then
        skip_rc=77
    elif [ "$res" != 0 ] && [ "$rc" = 0 ]; then
        rc=$res
    fi
done
echo "vm: wall time $(elapsed) s"
[ "$rc" = 0 ] && rc=$skip_rc
boot=${VM_BOOT_TRY:-1}
if [ "$rc" != 0 ] && [ -n "$no_init" ] && [ "$interactive" = 0 ] &&
   [ "$boot" -lt "${VM_BOOT_TRIES:-2}" ]; then
    # None of the job's code ran in that guest: boot the run again.
    for role in $no_init; do
        why=$(grep -m1 -E 'Kernel panic|BUG:|Oops|invalid opcode|general protection' \
              "$out/$role/console.log" | sed 's/^\[ *[0-9.]*\] *//' || true)
        echo "vm: guest $role stopped before init (${why:-no kernel message}):" \
             "booting the guests again, boot $((boot + 1)) of ${VM_BOOT_TRIES:-2}"
        cp "$out/$role/console.log" "$out/$role/console.boot$boot.log"
    done
    cleanup
    trap - EXIT
    VM_BOOT_TRY=$((boot + 1)) exec "$0" -o "$out" "${orig_args[@]}"
fi
exit "$rc"
