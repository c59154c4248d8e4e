#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# Make the test bed guests' userland: a Debian 12 (bookworm) minbase with
# rdma-core, the verbs and perftest tools and Debian's UCX, as a cpio archive
# the kernel unpacks as its initramfs, and Open MPI and MPICH as a second
# archive laid over it on request (run.sh -M), since unpacking it costs
# seconds of each boot. Called by contrib/vm/setup.sh, which keys the
# result on this file.
#
# usage: contrib/vm/mkrootfs.sh MIRROR OUTDIR
#   MIRROR               a Debian mirror, e.g. http://deb.debian.org/debian
#   OUTDIR/rootfs.cpio   the userland
#   OUTDIR/mpi.cpio      what installing the MPI packages adds or changes
#   OUTDIR/packages      package and version of each, "mpi" marking the layer
#
set -euo pipefail

die() { echo "mkrootfs: $*" >&2; exit 1; }

[ $# -eq 2 ] || die "usage: mkrootfs.sh MIRROR OUTDIR"
mirror=$1
out=$2
suite=bookworm

# perftest: ib_write_bw and friends; procps: ps and pkill for the jobs.
# libnuma1 and libgomp1 are what Debian's UCX needs at run time.
packages=(
    rdma-core ibverbs-utils ibverbs-providers rdmacm-utils perftest
    iproute2 kmod procps
    libucx0 ucx-utils libnuma1 libgomp1
)
mpi_packages=(openmpi-bin libopenmpi3 mpich)

# what no guest reads: documentation, locales, apt's and dpkg's state,
# the udev hardware database, iconv modules, perl (nothing here runs it)
strip_paths=(
    usr/share/doc usr/share/man usr/share/info usr/share/locale
    usr/share/i18n usr/share/zoneinfo usr/share/lintian usr/share/bug
    var/cache/apt var/lib/apt/lists var/cache/debconf var/log
    var/lib/dpkg/info usr/lib/udev/hwdb.bin usr/lib/udev/hwdb.d
    etc/udev/hwdb.d usr/lib/x86_64-linux-gnu/gconv
    usr/lib/x86_64-linux-gnu/perl-base usr/share/perl5 usr/bin/perl
)

work=$(mktemp -d "${TMPDIR:-/tmp}/mkrootfs.XXXXXX")
trap 'umount "$work/full/proc" 2>/dev/null || true; rm -rf "$work"' EXIT

debootstrap --variant=minbase --include="$(IFS=,; echo "${packages[*]}")" \
    "$suite" "$work/base" "$mirror" > "$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log" >&2; die "debootstrap failed"; }

# The MPI layer: install into a copy, keep what differs. Unchanged files
# keep their size and time stamp (cp -a), so a listing tells them apart.
cp -a "$work/base" "$work/full"
cp /etc/resolv.conf "$work/full/etc/resolv.conf"
mount -t proc proc "$work/full/proc"
chroot "$work/full" apt-get update -q > "$work/apt.log" 2>&1 ||
    { tail -20 "$work/apt.log" >&2; die "apt-get update in the userland"; }
chroot "$work/full" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${mpi_packages[@]}" \
    >> "$work/apt.log" 2>&1 ||
    { tail -20 "$work/apt.log" >&2; die "installing ${mpi_packages[*]}"; }
umount "$work/full/proc"
cp "$work/base/etc/resolv.conf" "$work/full/etc/resolv.conf"

{
    chroot "$work/base" dpkg-query -W -f '${Package} ${Version}\n'
    chroot "$work/full" dpkg-query -W -f '${Package} ${Version}\n' |
        grep -vxFf <(chroot "$work/base" dpkg-query -W \
                     -f '${Package} ${Version}\n') | sed 's/$/ mpi/'
} > "$work/packages"

for t in base full; do
    for p in "${strip_paths[@]}"; do
        rm -rf "${work:?}/$t/$p"
    done
    # the guest has no resolver to ask
    : > "$work/$t/etc/resolv.conf"
done

listing() {
    (cd "$1" && find . -mindepth 1 ! -type d -printf '%p\t%s\t%T@\t%l\n') |
        LC_ALL=C sort
}
comm -13 <(listing "$work/base") <(listing "$work/full") | cut -f1 \
    > "$work/changed"
# and the directories above them: the kernel's unpacker creates no parents
awk -F/ '{ p = $1; for (i = 2; i < NF; ++i) { p = p "/" $i; print p } }' \
    "$work/changed" | LC_ALL=C sort -u > "$work/dirs"

mkdir -p "$out"
(cd "$work/base" && find . -mindepth 1 | LC_ALL=C sort |
 cpio -o -H newc --quiet --owner 0:0) > "$out/rootfs.cpio"
(cd "$work/full" && cat "$work/dirs" "$work/changed" |
 cpio -o -H newc --quiet --owner 0:0) > "$out/mpi.cpio"
cp "$work/packages" "$out/packages"
echo "mkrootfs: $suite, $(grep -vc ' mpi$' "$out/packages") packages" \
     "($(du -m "$out/rootfs.cpio" | cut -f1) MiB), MPI layer" \
     "$(grep -c ' mpi$' "$out/packages") packages" \
     "($(du -m "$out/mpi.cpio" | cut -f1) MiB)" >&2
