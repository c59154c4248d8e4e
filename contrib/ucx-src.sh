#!/bin/bash
#
# Prepare a configured source tree of the *installed* UCX version, whose
# internal headers (uct/base/*.h, config.h) the remapring module builds against.
#
# usage: contrib/ucx-src.sh [--private-apt] [DIR]
#   DIR defaults to $REMAPRING_UCX_SRC or /var/cache/remapring/ucx-<version>.
#   Prints the directory on stdout (last line). Idempotent: with the tree
#   present and configured it only checks the version and returns.
#   --private-apt  write nothing outside DIR: 'apt-get source' runs with an
#                  apt state of its own in DIR, whose deb-src entries mirror
#                  the system's deb entries (what a package build needs; the
#                  default when not root). Without it, as root, a system
#                  deb-src entry is added if there is none.
#
# The tree holds the Debian source package (with undo-upstream.patch applied,
# as Debian's own build does) and an out-of-tree configured build in
# DIR/build, configured with the flags `ucx_info -v` reports, so config.h
# matches the installed libraries. Nothing is compiled.
#
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)

die() { echo "ucx-src: $*" >&2; exit 1; }

private_apt=
if [ "${1:-}" = --private-apt ]; then
    private_apt=1
    shift
fi
[ "$(id -u)" = 0 ] || private_apt=1

command -v ucx_info >/dev/null || die "ucx_info not found: apt-get install ucx-utils libucx-dev"
ver=$("$here/../config/ucx-version.sh")
[ -n "$ver" ] || die "cannot read the UCX version from 'ucx_info -v'"
pkgver=$(dpkg-query -W -f='${Version}' libucx0 2>/dev/null || true)
[ -n "$pkgver" ] || die "libucx0 is not installed"
# the source package's version: a binary rebuild (binNMU, "+b1") has none
srcpkgver=$(dpkg-query -W -f='${source:Version}' libucx0)

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
if [ -z "$private_apt" ] &&
   ! grep -rqsE '^(deb-src|Types:.*deb-src)' /etc/apt/sources.list \
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
dir=$(cd "$dir" && pwd)
work=$(mktemp -d "$dir/.get.XXXX")

apt_opts=()
if [ -n "$private_apt" ]; then
    # Source entries mirroring every enabled binary entry of the system
    # (deb822 and one-line), read through an apt state in $work/apt. The
    # archive keys are the system's (Signed-By, trusted.gpg.d), so the
    # downloads are checked as apt checks the system's own.
    apt=$work/apt
    mkdir -p "$apt/sources.list.d" "$apt/lists/partial" \
             "$apt/cache/archives/partial"
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        sed 's/^Types:.*/Types: deb-src/' "$f" > \
            "$apt/sources.list.d/$(basename "$f")"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        sed -n 's/^deb\(-src\)\{0,1\}\([[:space:]]\)/deb-src\2/p' "$f"
    done > "$apt/sources.list"
    apt_opts=(-o "Dir::Etc::SourceList=$apt/sources.list"
              -o "Dir::Etc::SourceParts=$apt/sources.list.d"
              -o "Dir::State::Lists=$apt/lists"
              -o "Dir::Cache=$apt/cache")
    # apt's download sandbox user cannot enter a private directory of root
    [ "$(id -u)" = 0 ] && apt_opts+=(-o "APT::Sandbox::User=root")
    # an entry whose archive has no sources (a third-party one) may fail;
    # what counts is that the archive holding UCX answered
    apt-get -qq "${apt_opts[@]}" update >"$work/update.log" 2>&1 || true
    if ! ls "$apt/lists/"*_Sources* >/dev/null 2>&1; then
        why=$(grep -m3 -E '^(E|W):' "$work/update.log" | tr '\n' ' ')
        rm -rf "$work"
        die "cannot fetch the archive's source indexes (no network?): $why"
    fi
fi
(cd "$work" && apt-get source -qq "${apt_opts[@]}" --download-only \
     "ucx=$srcpkgver" >/dev/null &&
 dpkg-source -x --skip-patches ucx_*.dsc src >/dev/null) ||
    die "apt-get source ucx=$srcpkgver failed (is a deb-src entry reachable, and does the archive still serve that version's source?)"
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
