#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# Prepare the test bed that contrib/vm/run.sh boots: install qemu and the
# tools with apt, make the guests' userland (mkrootfs.sh: a bookworm
# minbase with rdma-core, perftest and Debian's UCX, and an MPI layer),
# fetch two Debian kernels through a private apt configuration (the
# host's apt sources are left alone) and keep what the guests need of them
# (mkkernel.sh), and build vm-rsh. Everything is cached in
# REMAPRING_VM_CACHE (default /var/cache/remapring/vm), keyed by its
# inputs, and made again only when they change.
#
# usage: contrib/vm/setup.sh [-n | -u]
#   -n   no network: use what the cache holds, do not look for newer kernels
#   -u   look for newer kernels now (by default once a day)
#
# Kernels, resolved through the linux-image-amd64 metapackage (superseded
# kernel packages leave the archive), once a day:
#   odp     trixie-backports' current kernel (7.x): rxe has ODP
#   pinned  Debian 12's own (6.1): rxe without ODP
# Without network, the kernels last resolved are used.
#
# The host must be Debian 12: binaries built here run in the bookworm guests.
# Exit status 77 (skip) with the reason when the bed cannot be set up here.
#
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${REMAPRING_VM_CACHE:-/var/cache/remapring/vm}
online=0

skip() { echo "vm-setup: SKIP: $*"; exit 77; }
note() { echo "vm-setup: $*"; }
key_of() { cat "$@" | sha256sum | cut -c1-12; }
since() { echo "$((SECONDS - $1)) s"; }

offline=0 refresh=1440
case "${1:-}" in
-n) offline=1 ;;
-u) refresh=0 ;;
"") ;;
*) sed -n '/^# usage:/,/^$/p' "$0" >&2; exit 2 ;;
esac

t_all=$SECONDS
grep -qs '^12\.' /etc/debian_version ||
    skip "the host is not Debian 12 ($(cat /etc/debian_version 2>/dev/null ||
          echo unknown)): binaries built here would not run in the guests"
[ "$(dpkg --print-architecture 2>/dev/null)" = amd64 ] ||
    skip "the guests are amd64, this host is not"

# Host tools. python3: run.sh picks a free port with it.
packages=(qemu-system-x86 debootstrap cpio kmod xz-utils zstd binutils
          python3 gcc libc6-dev)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
        missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    [ "$(id -u)" = 0 ] || skip "missing ${missing[*]}; run as root to install"
    note "installing ${missing[*]}"
    { apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
          -o DPkg::Lock::Timeout=300 --no-install-recommends \
          "${missing[@]}" >/dev/null; } ||
        skip "cannot install ${missing[*]} with apt"
fi

mkdir -p "$cache" 2>/dev/null ||
    skip "cannot create $cache (run as root, or set REMAPRING_VM_CACHE)"
cache=$(cd "$cache" && pwd)
# One setup at a time; run.sh reads under the shared lock.
exec 9> "$cache/.lock"
flock 9

# The Debian mirror this host's apt uses
mirror=$(awk '/^URIs:/ && $2 !~ /security/ { print $2; exit }' \
         /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
[ -n "$mirror" ] ||
    mirror=$(awk '$1 == "deb" && $2 !~ /security/ { print $2; exit }' \
             /etc/apt/sources.list 2>/dev/null || true)
mirror=${mirror:-http://deb.debian.org/debian}
mirror=${mirror%/}

# apt_private KIND ARGS...: apt-get or apt-cache (first of ARGS) with the
# private configuration of KIND in cache/apt/KIND
apt_private() {
    local kind=$1 tool=$2 d=$cache/apt/$1
    shift 2
    "$tool" -o Dir::Etc::sourcelist="$d/sources.list" \
        -o Dir::Etc::sourceparts="$d/sources.list.d" \
        -o Dir::Etc::preferences=/dev/null \
        -o Dir::Etc::preferencesparts="$d/preferences.d" \
        -o Dir::State::Lists="$d/lists" -o Dir::Cache="$d/cache" \
        -o Dir::State::status=/dev/null -o APT::Architecture=amd64 \
        -o APT::Sandbox::User=root "$@"
}

# kernel KIND SUITES...: resolve, fetch and unpack the kernel of KIND
kernel() {
    local kind=$1 d=$cache/apt/$1 t=$SECONDS abi ver pkgs key dir s
    shift
    mkdir -p "$d"/{lists/partial,cache/archives/partial,sources.list.d} \
             "$d/preferences.d" "$d/debs"
    : > "$d/sources.list"
    for s in "$@"; do
        echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]" \
             "$mirror $s main" >> "$d/sources.list"
    done
    if [ -f "$cache/$kind/kernel" ] && [ "$refresh" -gt 0 ] &&
       [ -n "$(find "$d/resolved" -mmin -"$refresh" 2>/dev/null)" ]; then
        note "$kind kernel: $(cat "$cache/$kind/package") (cached, resolved" \
             "at $(date -r "$d/resolved" '+%F %R'))"
        return
    fi
    if [ "$offline" = 1 ] || ! apt_private "$kind" apt-get update -qq \
            > "$d/update.log" 2>&1; then
        [ -f "$cache/$kind/kernel" ] ||
            skip "cannot fetch the $kind kernel's package lists from" \
                 "$mirror ($*) and none is cached"
        note "$kind kernel: $(cat "$cache/$kind/package") (cached; not" \
             "checked for a newer one)"
        return
    fi
    online=1
    # Depends: linux-image-ABI (= VERSION), ...; and 7.x splits the
    # kernel into linux-{image,binary,modules,base}-ABI
    abi=$(apt_private "$kind" apt-cache show --no-all-versions \
          linux-image-amd64 | sed -n 's/^Depends: //p' | tr ',' '\n' |
          sed -n 's/^ *linux-image-\([0-9][^ ]*\) .*/\1/p' | head -1)
    [ -n "$abi" ] ||
        skip "linux-image-amd64 in $* depends on no linux-image-<version>"
    apt_private "$kind" apt-cache show --no-all-versions \
        "linux-image-$abi" > "$d/image.info"
    ver=$(sed -n 's/^Version: //p' "$d/image.info")
    pkgs=("linux-image-$abi"
          $(sed -n 's/^Depends: //p' "$d/image.info" | tr ',|' '\n\n' |
            sed -n "s/^ *\(linux-[a-z]*-$abi\)\( .*\)\{0,1\}$/\1/p"))
    key=$(key_of "$here/mkkernel.sh" <(echo "${pkgs[*]} $ver"))
    dir=$cache/kernel/$abi-$key
    if [ ! -f "$dir/kernel" ]; then
        note "$kind kernel: fetching ${pkgs[*]} $ver"
        rm -f "$d/debs"/*.deb
        if ! (cd "$d/debs" && apt_private "$kind" apt-get download -qq \
                "${pkgs[@]}" > "$d/download.log" 2>&1); then
            [ -f "$cache/$kind/kernel" ] ||
                skip "cannot download ${pkgs[*]} (see $d/download.log)"
            note "$kind kernel: cannot download ${pkgs[*]} $ver; using" \
                 "$(cat "$cache/$kind/package")"
            return
        fi
        rm -rf "$dir.tmp"
        "$here/mkkernel.sh" "$dir.tmp" "$d/debs"/*.deb
        echo "linux-image-$abi $ver" > "$dir.tmp/package"
        mv "$dir.tmp" "$dir"
        rm -f "$d/debs"/*.deb
        note "$kind kernel: $abi $ver made in $(since "$t")"
    else
        note "$kind kernel: $abi $ver (cached)"
    fi
    ln -sfn "kernel/$(basename "$dir")" "$cache/$kind"
    touch "$d/resolved"
}

rootfs() {
    local t=$SECONDS key dir
    key=$(key_of "$here/mkrootfs.sh")
    dir=$cache/rootfs-$key
    if [ ! -f "$dir/rootfs.cpio" ]; then
        # the kernels may have come from the cache without asking the mirror
        [ "$online" = 1 ] || [ "$offline" = 1 ] ||
            ! apt_private pinned apt-get update -qq > /dev/null 2>&1 ||
            online=1
        [ "$online" = 1 ] ||
            skip "no guest userland cached, and $mirror cannot be reached"
        [ "$(id -u)" = 0 ] || skip "debootstrap needs root"
        note "userland: debootstrap bookworm from $mirror"
        rm -rf "$dir.tmp"
        "$here/mkrootfs.sh" "$mirror" "$dir.tmp"
        mv "$dir.tmp" "$dir"
        note "userland: made in $(since "$t")"
    else
        note "userland: $(basename "$dir") (cached)"
    fi
    ln -sfn "$(basename "$dir")" "$cache/rootfs"
    # host-built programs link against the host's UCX: the same in the guest
    local guest host
    guest=$(awk '$1 == "libucx0" { print $2 }' "$dir/packages")
    host=$(dpkg-query -W -f='${Version}' libucx0 2>/dev/null || true)
    [ -z "$host" ] || [ "$host" = "$guest" ] ||
        note "warning: host libucx0 $host, guest $guest"
}

rsh() {
    local key
    key=$(key_of "$here/vm-rsh.c" <(gcc --version))
    if [ "$(cat "$cache/bin/vm-rsh.key" 2>/dev/null)" != "$key" ]; then
        mkdir -p "$cache/bin"
        gcc -O2 -Wall -Wextra -Werror -o "$cache/bin/vm-rsh.tmp" \
            "$here/vm-rsh.c"
        mv "$cache/bin/vm-rsh.tmp" "$cache/bin/vm-rsh"
        echo "$key" > "$cache/bin/vm-rsh.key"
    fi
}

kernel odp trixie-backports
kernel pinned bookworm
rootfs
rsh

# what no link names any more: superseded kernels and userlands
keep=" $(readlink -f "$cache/rootfs") $(readlink -f "$cache/odp")"
keep+=" $(readlink -f "$cache/pinned") "
for d in "$cache"/rootfs-* "$cache"/kernel/*; do
    if [ -e "$d" ] && [[ $keep != *" $d "* ]]; then
        rm -rf "$d"
    fi
done
note "ready in $(since "$t_all"): $cache"
