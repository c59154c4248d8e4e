#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# Unpack a Debian kernel's packages and keep what a test bed guest boots
# with: the kernel and a cpio archive of only the modules soft-RoCE,
# the virtio NIC and the 9p output share need, with their dependencies and
# a modules.dep made for them. Called by contrib/vm/setup.sh, which keys
# the result on this file and the package versions.
#
# usage: contrib/vm/mkkernel.sh OUTDIR DEB...
#   OUTDIR/kernel        the kernel: its uncompressed vmlinux if it has a PVH
#                        entry, else the bzImage
#   OUTDIR/modules.cpio  newc archive: usr/lib/modules/<version>/...
#   OUTDIR/version       the kernel version (uname -r)
#
set -euo pipefail

die() { echo "mkkernel: $*" >&2; exit 1; }

[ $# -ge 2 ] || die "usage: mkkernel.sh OUTDIR DEB..."
out=$1
shift

# Loaded by the guest's init in this order. 6.1's rdma_rxe needs crc32 and
# does not pull it in by itself, hence the crc32 modules named here.
modules=(
    crc32_generic crc32-pclmul crc32-cryptoapi
    virtio_pci virtio_net
    rdma_rxe ib_uverbs rdma_ucm
    9p 9pnet_virtio
)

work=$(mktemp -d "${TMPDIR:-/tmp}/mkkernel.XXXXXX")
trap 'rm -rf "$work"' EXIT

for deb in "$@"; do
    dpkg-deb -x "$deb" "$work/x" || die "cannot unpack $deb"
done

# 6.1 ships /lib/modules and /boot/vmlinuz-*, 7.x /usr/lib/modules with
# the image inside
moddir=$(ls -d "$work"/x/lib/modules/* "$work"/x/usr/lib/modules/* \
         2>/dev/null | head -1 || true)
[ -n "$moddir" ] || die "no modules directory in $*"
kver=$(basename "$moddir")
image=$(ls "$work/x/boot/vmlinuz-$kver" "$moddir/vmlinuz" 2>/dev/null |
        head -1 || true)
[ -n "$image" ] || die "no kernel image for $kver in $*"
mv "$image" "$work/vmlinuz"

# modprobe -d and depmod -b look under ROOT/lib/modules
mkdir -p "$work/full/lib/modules" "$work/keep/lib/modules/$kver"
mv "$moddir" "$work/full/lib/modules/$kver"
depmod -b "$work/full" "$kver"

for m in "${modules[@]}"; do
    deps=$(modprobe -d "$work/full" -S "$kver" --show-depends "$m" \
           2>/dev/null) || continue
    awk '$1 == "insmod" { print $2 }' <<< "$deps"
done | sort -u > "$work/list"
grep -q '/rdma_rxe\.ko' "$work/list" || die "kernel $kver has no rdma_rxe"

while read -r f; do
    rel=${f#"$work/full/"}
    mkdir -p "$work/keep/$(dirname "$rel")"
    cp "$f" "$work/keep/$rel"
done < "$work/list"
# Unpacked here once rather than by kmod at each boot, which costs
# seconds under TCG
find "$work/keep" -name '*.ko.xz' -exec xz -d {} +
find "$work/keep" -name '*.ko.zst' -exec zstd -q -d --rm {} +
# modules.builtin keeps modprobe quiet about built-in drivers (virtio_pci)
for f in modules.order modules.builtin modules.builtin.modinfo; do
    [ -f "$work/full/lib/modules/$kver/$f" ] &&
        cp "$work/full/lib/modules/$kver/$f" "$work/keep/lib/modules/$kver/"
done
depmod -b "$work/keep" "$kver"

# qemu boots an uncompressed vmlinux with a PVH entry note straight into
# 64-bit code, without the real-mode setup and the decompressor, which
# take seconds under TCG. The payload of the bzImage is at
# (setup_sects + 1) * 512 + payload_offset, payload_length long, its last
# four bytes the uncompressed size (boot protocol 2.08 and later).
u32() { od -An -t u4 -j "$2" -N 4 "$1" | tr -d ' '; }
setup_sects=$(od -An -t u1 -j $((0x1f1)) -N 1 "$work/vmlinuz" | tr -d ' ')
payload_off=$(( (setup_sects + 1) * 512 + $(u32 "$work/vmlinuz" $((0x248))) ))
payload_len=$(u32 "$work/vmlinuz" $((0x24c)))
dd if="$work/vmlinuz" of="$work/payload" iflag=skip_bytes,count_bytes \
   skip="$payload_off" count=$((payload_len - 4)) status=none
case $(od -An -t x1 -N 4 "$work/payload" | tr -d ' ') in
28b52ffd) zstd -q -d -c "$work/payload" > "$work/vmlinux" 2>/dev/null ;;
fd377a58) xz -d -c "$work/payload" > "$work/vmlinux" 2>/dev/null ;;
1f8b*)    gzip -d -c "$work/payload" > "$work/vmlinux" 2>/dev/null ;;
esac || rm -f "$work/vmlinux"
if [ -s "$work/vmlinux" ] &&
   readelf -n "$work/vmlinux" 2>/dev/null | grep -q 'Xen.*0x00000012'; then
    mv "$work/vmlinux" "$work/kernel"
    boot=pvh
else
    mv "$work/vmlinuz" "$work/kernel"
    boot=bzimage
fi

mkdir -p "$out"
mkdir -p "$work/cpio/usr/lib"
mv "$work/keep/lib/modules" "$work/cpio/usr/lib/modules"
(cd "$work/cpio" && find . -mindepth 1 | LC_ALL=C sort |
 cpio -o -H newc --quiet --owner 0:0) > "$out/modules.cpio"
mv "$work/kernel" "$out/kernel"
echo "$kver" > "$out/version"
echo "mkkernel: $kver, $boot boot, $(wc -l < "$work/list") modules" >&2
