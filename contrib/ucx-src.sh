#!/bin/bash
#
# Prepare a configured source tree of the *installed* UCX version, whose
# internal headers (uct/base/*.h, config.h) the remapring module builds against.
#
# usage: contrib/ucx-src.sh [DIR]
#   DIR defaults to $REMAPRING_UCX_SRC or /var/cache/remapring/ucx-<version>.
#   Prints the directory on stdout (last line). Idempotent: with the tree
#   present and configured it only checks the version and returns.
#
# The tree holds the Debian source package (with undo-upstream.patch applied,
# as Debian's own build does) and an out-of-tree configured build in
# DIR/build, configured with the flags `ucx_info -v` reports, so config.h
# matches the installed libraries. Nothing is compiled.
#
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)

die() { echo "ucx-src: $*" >&2; exit 1; }

command -v ucx_info >/dev/null || die "ucx_info not found: apt-get install ucx-utils libucx-dev"
ver=$(ucx_info -v | sed -n 's/^# Version //p')
[ -n "$ver" ] || die "cannot read the UCX version from 'ucx_info -v'"
pkgver=$(dpkg-query -W -f='${Version}' libucx0 2>/dev/null || true)
[ -n "$pkgver" ] || die "libucx0 is not installed"

dir=${1:-${REMAPRING_UCX_SRC:-/var/cache/remapring/ucx-$ver}}
stamp=$dir/.remapring-ready

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$pkgver" ] &&
   [ -f "$dir/build/config.h" ]; then
    echo "$dir"
    exit 0
fi

echo "ucx-src: preparing UCX $ver ($pkgver) source in $dir" >&2

# A deb-src entry is needed for 'apt-get source'. Add one that mirrors the
# first deb822 or one-line entry, only if none exists.
if ! grep -rqsE '^(deb-src|Types:.*deb-src)' /etc/apt/sources.list \
        /etc/apt/sources.list.d/; then
    src=/etc/apt/sources.list.d/remapring-deb-src.sources
    first=$(ls /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1 || true)
    if [ -n "$first" ]; then
        sed 's/^Types:.*/Types: deb-src/' "$first" > "$src"
    else
        sed -n 's/^deb /deb-src /p' /etc/apt/sources.list > \
            /etc/apt/sources.list.d/remapring-deb-src.list
    fi
    apt-get update -qq
fi
command -v dpkg-source >/dev/null || die "dpkg-dev is missing: apt-get install dpkg-dev"

rm -rf "$dir"
mkdir -p "$dir"
work=$(mktemp -d "$dir/.get.XXXX")
(cd "$work" && apt-get source -qq --download-only "ucx=$pkgver" >/dev/null &&
 dpkg-source -x --skip-patches ucx_*.dsc src >/dev/null) ||
    die "apt-get source ucx=$pkgver failed (is a deb-src entry reachable?)"
mv "$work/src" "$dir/source"
rm -rf "$work"

cd "$dir/source"
# Debian's patch series starts by undoing upstream changes it does not ship;
# the installed binaries were built with it applied.
if [ -f debian/patches/undo-upstream.patch ]; then
    patch -p1 -s < debian/patches/undo-upstream.patch ||
        die "undo-upstream.patch does not apply"
fi
./autogen.sh >/dev/null 2>&1 || die "autogen.sh failed in $dir/source"

srcver=$("$here/../config/ucx-src-version.sh" .)
[ "$srcver" = "$ver" ] || die "source version $srcver differs from installed $ver"

flags=$(ucx_info -v | sed -n 's/^# Configured with: //p')
mkdir -p "$dir/build"
cd "$dir/build"
# The flags are passed literally: configure itself expands ${prefix} in them.
read -r -a args <<< "$flags"
../source/configure "${args[@]}" >configure.log 2>&1 ||
    die "configure failed, see $dir/build/configure.log"
[ -f config.h ] || die "configure produced no config.h"
echo "$pkgver" > "$stamp"
echo "$dir"
