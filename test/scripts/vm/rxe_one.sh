#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# Job for one test bed guest (contrib/vm/run.sh), run by test_vm_rxe.sh:
# soft-RoCE is up and what the kernel promises.
#
# usage: rxe_one.sh odp|pinned UCX_VERSION [MODULE]
#   odp     ibv_devinfo -v reports ODP for RC SEND/RECV/WRITE/READ;
#           ibv_rc_pingpong plain and --odp pass; UCX's ucx_perftest UCT
#           am_lat over rc_verbs on rxe0:1 passes
#   pinned  no ODP reported; ibv_rc_pingpong plain passes, --odp refuses
#   both    ucx_info -d lists rxe0:1 for rc_verbs; the guest's UCX is
#           UCX_VERSION (the host's); MODULE (libuct_remaprdma.so, with
#           libuct_remapring.so next to it), if given, loads under
#           LD_PRELOAD and ucx_info -d lists both transports
#
. /vm/lib.sh

mode=$1 ucx_version=$2 module=${3:-}
case $mode in
odp|pinned) ;;
*) vm_fail "mode $mode: odp or pinned" ;;
esac
[ -n "$ucx_version" ] || vm_fail "no UCX version given"
errors=0
check() { echo "   ok: $1"; }
bad() { echo "   BAD: $1"; errors=$((errors + 1)); }

vm_note "rxe0 on $VM_KERNEL"
ibv_devinfo -d rxe0 > /tmp/devinfo 2>&1
grep -q 'state:.*PORT_ACTIVE' /tmp/devinfo && check "rxe0 port 1 active" ||
    { cat /tmp/devinfo; bad "rxe0 port 1 is not active"; }

# ibv_devinfo -v: a "<kind>_odp_caps:" line, then one capability a line
ibv_devinfo -v -d rxe0 > /tmp/devinfo.v 2>&1
caps() {
    awk -v k="$1_odp_caps:" '$1 == k { on = 1; next }
                             on && /:/ { exit }
                             on { $1 = $1; print }' /tmp/devinfo.v
}
general=$(caps general) rc=$(caps rc)
echo "   general_odp_caps: $(echo $general)"
echo "   rc_odp_caps: $(echo $rc)"
if [ "$mode" = odp ]; then
    [ "$general" = ODP_SUPPORT ] && check "ODP reported" ||
        bad "no ODP_SUPPORT in general_odp_caps"
    for c in SEND RECV WRITE READ; do
        grep -qx "SUPPORT_$c" <<< "$rc" && check "RC $c with ODP" ||
            bad "no SUPPORT_$c in rc_odp_caps"
    done
    [ "$VM_ODP" = 1 ] || bad "the guest's init found no ODP (VM_ODP=$VM_ODP)"
else
    [ "$general" != ODP_SUPPORT ] && [ "$rc" = "NO SUPPORT" ] &&
        check "no ODP reported" || bad "ODP reported on $VM_KERNEL"
    [ "$VM_ODP" = 0 ] || bad "the guest's init found ODP (VM_ODP=$VM_ODP)"
fi

pp=(ibv_rc_pingpong -d rxe0 -g "$VM_GID_INDEX" -n 100)
vm_loopback rc_pingpong 18515 "${pp[@]}" -p 18515 ||
    bad "ibv_rc_pingpong"
if [ "$mode" = odp ]; then
    vm_loopback rc_pingpong_odp 18516 "${pp[@]}" -p 18516 --odp ||
        bad "ibv_rc_pingpong --odp"
else
    # refused before it listens
    if timeout 30 "${pp[@]}" -p 18516 --odp > /tmp/odp 2>&1; then
        bad "ibv_rc_pingpong --odp ran without ODP"
    else
        sed 's/^/   rc_pingpong_odp: /' /tmp/odp
        check "ibv_rc_pingpong --odp refused"
    fi
fi

vm_note "UCX"
have=$(ucx_info -v | sed -n -e 's/^# Version //p' \
                          -e 's/^# Library version: //p')
[ "$have" = "$ucx_version" ] && check "UCX $have, as on the host" ||
    bad "UCX $have in the guest, $ucx_version on the host"
ucx_info -d > /tmp/ucx_info 2>&1 || bad "ucx_info -d: status $?"
if awk '/Transport: rc_verbs/ { t = 1; next }
        t && /Device:/ { print $3; t = 0 }' /tmp/ucx_info | grep -qx 'rxe0:1'
then
    check "ucx_info -d: rc_verbs on rxe0:1"
else
    grep -E 'Transport|Device' /tmp/ucx_info
    bad "ucx_info -d lists no rxe0:1"
fi
if [ "$mode" = odp ]; then
    vm_loopback am_lat_rc_verbs 13337 ucx_perftest -t am_lat -x rc_verbs \
        -d rxe0:1 -n 1000 -w 100 -p 13337 || bad "ucx_perftest am_lat rc_verbs"
fi

if [ -n "$module" ]; then
    vm_note "$module preloaded"
    LD_PRELOAD=$module UCX_TLS=remapring,remaprdma ucx_info -d \
        > /tmp/module 2>&1
    st=$?
    sed -n '/Memory domain: \(memory\|rxe0\)/,/Device:/p' /tmp/module |
        sed 's/^/   /'
    grep -E 'UCX  (ERROR|WARN)' /tmp/module | sed 's/^/   /'
    [ $st -eq 0 ] || bad "ucx_info -d with the module: status $st"
    grep -q 'UCX  ERROR\|cannot open\|undefined symbol' /tmp/module &&
        bad "errors while loading the module"
    # the RDMA module, and the shared-memory one it links
    for tl in remapring remaprdma; do
        grep -q "Transport: $tl\$" /tmp/module &&
            check "the modules load, ucx_info -d lists $tl" ||
            bad "ucx_info -d lists no $tl transport"
    done
fi

[ $errors -eq 0 ] || vm_fail "$errors check(s) failed on $VM_KERNEL"
echo "PASS: $mode on $VM_KERNEL"
