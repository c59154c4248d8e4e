#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# The Debian package (debian/). Builds it with dpkg-buildpackage -b from a
# copy of the source tree (the files git knows, no build directory), and a
# source package from the same copy; inspects the binary package with
# dpkg-deb: the files it ships and no other (no test program), Depends on
# exactly the installed libucx0, the version configure.ac's AC_INIT names
# plus a Debian revision; runs lintian on both, which must report nothing
# (error, warning, info or pedantic) that debian/*lintian-overrides does
# not override with a reason. Then, as root, installs it with apt-get,
# checks that 'UCX_TLS=remapring remapring-run ucx_info -d' through the
# installed wrapper lists the transport, removes it (with no conffile that
# purges it), and checks that no file is left behind and the system is as
# before: a remapring package installed before is repacked (dpkg-repack)
# and reinstalled, files of a 'make install' that the package replaces are
# saved and put back.
# Not root: the install and removal are skipped (exit 77) after the rest.
#
# The UCX source tree the build needs is the one contrib/setup.sh prepared
# (REMAPRING_UCX_SRC or /var/cache/remapring/ucx-<version>), when it is
# ready, so the build downloads nothing; else, or with
# REMAPRING_PKG_FETCH=1, the build fetches it as on a fresh machine
# (apt-get source, see debian/README.source). Each step prints its time.
#
. "$(dirname "$0")/common.sh"
set -uo pipefail

: "${REMAPRING_SRCDIR:=$(cd "$(dirname "$0")/../.." && pwd)}"
src=$REMAPRING_SRCDIR
# what runs here is the installed package, not the module of the build tree
unset REMAPRING_MODULE LD_PRELOAD UCX_TLS

t_last=$(date +%s%N)
t_first=$t_last
took() {  # took WHAT: prints how long WHAT, the step just done, took
    local now
    now=$(date +%s%N)
    printf '   %s: %d.%d s\n' "$1" $(((now - t_last) / 1000000000)) \
           $(((now - t_last) / 100000000 % 10))
    t_last=$now
}

[ -f "$src/debian/control" ] || skip "no debian/ in $src"
for c in dpkg-buildpackage dpkg-checkbuilddeps dpkg-source dh lintian; do
    command -v $c >/dev/null ||
        skip "$c is missing (contrib/setup.sh installs it)"
done

tmp=$(mktemp -d)
chmod 755 "$tmp"    # apt reads the package as its sandbox user
cleanup=()
trap 'for c in "${cleanup[@]}"; do eval "$c"; done; rm -rf "$tmp"' EXIT

ver=$(sed -n 's/^AC_INIT(\[remapring\], *\[\([^]]*\)\].*/\1/p' \
          "$src/configure.ac")
[ -n "$ver" ] || fail "no version in configure.ac's AC_INIT"
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
ucx_deb=$(dpkg-query -W -f='${Version}' libucx0) || fail "libucx0 not installed"
ucx_ver=${ucx_deb%%-*}
moduledir=$(pkg-config --variable=libdir ucx)/ucx
module=$moduledir/libuct_remapring.so
rdma_module=$moduledir/libuct_remaprdma.so

note "copy the source tree"
tree=$tmp/remapring-$ver
mkdir "$tree"
# tracked and new files, none that .gitignore names (build trees, autogen's
# output); read only, so a tree of another owner is fine
git=(git -c safe.directory='*' -C "$src")
"${git[@]}" rev-parse --is-inside-work-tree >/dev/null 2>&1 ||
    skip "$src is not a git work tree: the copy takes the files git knows"
"${git[@]}" ls-files -z -co --exclude-standard |
    (cd "$src" && tar --null --ignore-failed-read -T - -cf - 2>/dev/null) |
    tar -C "$tree" -xf - || fail "copy of $src"
[ -z "$(find "$tree" \( -name '*.o' -o -name .libs -o -name Makefile \
            -o -name configure -o -name config.status \) -print -quit)" ] ||
    fail "the copy holds build output"
echo "   $(find "$tree" -type f | wc -l) files"
debver=$(dpkg-parsechangelog -l "$tree/debian/changelog" -S Version)
case $debver in
"$ver"-[0-9]*) ;;
*) fail "debian/changelog version $debver is not $ver (AC_INIT)-revision" ;;
esac
took copy

note "build dependencies"
(cd "$tree" && dpkg-checkbuilddeps) > "$tmp/deps" 2>&1 ||
    skip "$(cat "$tmp/deps") (contrib/setup.sh installs them)"
took "dpkg-checkbuilddeps"

note "source package (dpkg-source -b), orig tarball: the tree without debian/"
tar -C "$tmp" --exclude="remapring-$ver/debian" \
    -cJf "$tmp/remapring_$ver.orig.tar.xz" "remapring-$ver" ||
    fail "orig tarball"
(cd "$tmp" && dpkg-source -b "remapring-$ver") > "$tmp/source.log" 2>&1 ||
    { cat "$tmp/source.log"; fail "dpkg-source -b"; }
dsc=$tmp/remapring_$debver.dsc
[ -f "$dsc" ] || fail "no $dsc"
took "dpkg-source -b"

ucx_tree=${REMAPRING_UCX_SRC:-/var/cache/remapring/ucx-$ucx_ver}
if [ "${REMAPRING_PKG_FETCH:-0}" != 1 ] &&
   [ "$(cat "$ucx_tree/.remapring-ready" 2>/dev/null)" = "$ucx_deb" ] &&
   [ -f "$ucx_tree/build/config.h" ]; then
    note "dpkg-buildpackage -b -uc -us (UCX source: $ucx_tree)"
    export REMAPRING_UCX_SRC=$ucx_tree
else
    note "dpkg-buildpackage -b -uc -us (UCX source fetched by the build)"
    unset REMAPRING_UCX_SRC
fi
(cd "$tree" && dpkg-buildpackage -b -uc -us -J2) > "$tmp/build.log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
    why=$(grep -m1 "^ucx-src: cannot fetch the archive's source" \
              "$tmp/build.log")
    [ -n "$why" ] && skip "the build could not fetch UCX's source: $why"
    tail -40 "$tmp/build.log"
    fail "dpkg-buildpackage -b -uc -us"
fi
deb=$tmp/remapring_${debver}_$arch.deb
changes=$tmp/remapring_${debver}_$arch.changes
[ -f "$deb" ] && [ -f "$changes" ] || fail "no $deb or $changes"
grep -q "^ucx-src: preparing" "$tmp/build.log" &&
    echo "   UCX source fetched into debian/ucx-src"
took "dpkg-buildpackage -b"

note "dpkg-deb -c: the files"
dpkg-deb -c "$deb" > "$tmp/contents" || fail "dpkg-deb -c"
awk '$6 !~ /\/$/ {print $6}' "$tmp/contents" | sort > "$tmp/files"
sort > "$tmp/expected" <<EOF
./usr/bin/remapring-run
.$module
.$rdma_module
./usr/lib/$multiarch/pkgconfig/remapring.pc
./usr/share/doc/remapring/README.md.gz
./usr/share/doc/remapring/changelog.Debian.gz
./usr/share/doc/remapring/changelog.gz
./usr/share/doc/remapring/copyright
./usr/share/lintian/overrides/remapring
./usr/share/man/man1/remapring-run.1.gz
./usr/share/man/man7/remapring.7.gz
EOF
sed 's/^/   /' "$tmp/files"
diff -u "$tmp/expected" "$tmp/files" || fail "the package's files differ"
grep -E 'gtest|bench|/test' "$tmp/files" && fail "a test program in the package"
dpkg-deb -x "$deb" "$tmp/root" || fail "dpkg-deb -x"
elves=$(find "$tmp/root" -type f -exec sh -c \
            'head -c4 "$1" | grep -q "^.ELF" && echo "${1#$2}"' _ {} \
            "$tmp/root" \;)
[ "$(echo "$elves" | sort | paste -sd' ')" = "$rdma_module $module" ] ||
    fail "ELF files other than the modules: $elves"
# the shared-memory module does not link rdma-core; the RDMA one finds it
# next to itself, and nowhere else
readelf -d "$tmp/root$module" | grep -q 'NEEDED.*lib\(ibverbs\|rdmacm\)' &&
    fail "$module links rdma-core"
[ "$(readelf -d "$tmp/root$rdma_module" |
     sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')" = '$ORIGIN' ] ||
    fail "$rdma_module: RUNPATH is not \$ORIGIN alone"
grep -qxF "module=\${REMAPRING_MODULE:-$module}" \
    "$tmp/root/usr/bin/remapring-run" || fail "remapring-run loads another path"
grep -qxF "module=\${moduledir}/libuct_remapring.so" \
    "$tmp/root/usr/lib/$multiarch/pkgconfig/remapring.pc" &&
    grep -qxF "moduledir=$moduledir" \
        "$tmp/root/usr/lib/$multiarch/pkgconfig/remapring.pc" ||
    fail "remapring.pc names another module"
sections=$(zcat "$tmp/root/usr/share/man/man1/remapring-run.1.gz" |
               sed -n 's/^\.SH "*\([^"]*\)"*$/\1/p' | paste -sd,)
for s in NAME SYNOPSIS DESCRIPTION ENVIRONMENT EXAMPLES "SEE ALSO"; do
    [[ ",$sections," == *",$s,"* ]] || fail "the man page has no $s: $sections"
done
# remapring(7): its settings made from the configuration tables, every one
zcat "$tmp/root/usr/share/man/man7/remapring.7.gz" > "$tmp/remapring.7"
for v in UCX_REMAPRING_BLOCK_SIZE UCX_REMAPRING_WIRE UCX_REMAPRING_MEMCACHE \
         UCX_REMAPRING_NOTIFIER UCX_REMAPRDMA_MODE; do
    grep -qx "\.B $v" "$tmp/remapring.7" || fail "remapring(7) has no $v"
done
grep -q '@SETTINGS@' "$tmp/remapring.7" && fail "remapring(7) was not filled in"
took "dpkg-deb -c"

note "dpkg-deb -I: the fields"
for f in Package Version Architecture Depends; do
    val=$(dpkg-deb -f "$deb" "$f") || fail "dpkg-deb -f $f"
    echo "   $f: $val"
    printf -v "field_$f" '%s' "$val"
done
[ "$field_Package" = remapring ] || fail "Package $field_Package"
[ "$field_Version" = "$debver" ] || fail "Version $field_Version"
[ "$field_Architecture" = "$arch" ] || fail "Architecture $field_Architecture"
[[ ", $field_Depends," == *", libucx0 (= $ucx_deb),"* ]] ||
    fail "Depends does not name libucx0 (= $ucx_deb)"
dpkg-deb -I "$deb" > "$tmp/info" || fail "dpkg-deb -I"
echo "   control members: $(awk '/ bytes, .* lines / {print $NF}' "$tmp/info" |
                             paste -sd' ')"
took "dpkg-deb -I"

note "lintian (binary and source)"
# every override says why, in a comment above it
for o in "$tree/debian/remapring.lintian-overrides" \
         "$tree/debian/source/lintian-overrides"; do
    [ -f "$o" ] || continue
    awk -v f="${o#$tree/}" '
        /^#/ { why = 1; next }
        /^[[:space:]]*$/ { why = 0; next }
        !why { print f ": no reason for " $0; bad = 1 }
        END { exit bad }' "$o" || fail "an override without a reason"
done
# with --show-overrides, --fail-on counts overridden tags too: judge by the
# tags printed (O: overridden, N: the reason)
lintian --fail-on none -I -E --pedantic --show-overrides \
    --tag-display-limit 0 "$changes" "$dsc" > "$tmp/lintian" 2>&1 ||
    { cat "$tmp/lintian"; fail "lintian did not run"; }
grep -v "^running with root privileges" "$tmp/lintian" | sed 's/^/   /'
grep -qE '^[EWIPX]:' "$tmp/lintian" && fail "lintian reports tags not overridden"
took lintian

[ "$(id -u)" = 0 ] ||
    skip "not root: installing and removing the package was not tried"

# one run at a time changes the system's packages
exec 9> /run/lock/remapring-test-package.lock
flock -w 300 9 || fail "another test_package.sh holds the lock"

apt_get() {
    DEBIAN_FRONTEND=noninteractive apt-get -y -q -o DPkg::Lock::Timeout=300 \
        "$@" > "$tmp/apt.log" 2>&1 || { cat "$tmp/apt.log"; return 1; }
}

# snapshot NAME: the entries of every directory the package has files in,
# and dpkg's records of remapring with their checksums, into $tmp/NAME
pkgdirs=$(awk '$6 ~ /\/$/ {print substr($6, 2)}' "$tmp/contents")
snapshot() {
    { for d in $pkgdirs; do
          [ -d "$d" ] && find "$d" -mindepth 1 -maxdepth 1
      done
      find /var/lib/dpkg/info -name 'remapring[._]*' -print0 |
          xargs -0r md5sum
    } | sort -u > "$tmp/$1"
}
# compare NAME [missing]: takes a snapshot NAME and fails for an entry new
# since "before" that no package owns, and with "missing" for an entry of
# "before" that is gone; an entry another package installed or removed
# meanwhile is only named
compare() {
    local p owner
    snapshot "$1"
    for p in $(comm -13 "$tmp/before" "$tmp/$1" | awk '{print $NF}'); do
        owner=$(dpkg-query -S "$p" 2>/dev/null | cut -d: -f1)
        [ -n "$owner" ] && [ "$owner" != remapring ] &&
            { echo "   (new meanwhile, from $owner: $p)"; continue; }
        fail "left behind after $1: $p"
    done
    [ "${2:-}" = missing ] || return 0
    for p in $(comm -23 "$tmp/before" "$tmp/$1" | awk '{print $NF}'); do
        [ -e "$p" ] && [[ $p != /var/lib/dpkg/info/* ]] &&
            { echo "   (changed meanwhile: $p)"; continue; }
        fail "missing or changed after $1: $p"
    done
}

note "install with apt-get (previous state saved)"
prev=$(dpkg-query -W -f='${db:Status-Abbrev}' remapring 2>/dev/null)
prev_ver=$(dpkg-query -W -f='${Version}' remapring 2>/dev/null)
prev_deb= prev_auto=
case $prev in
ii*)
    mkdir "$tmp/prev"
    (cd "$tmp/prev" && dpkg-repack remapring) > "$tmp/repack.log" 2>&1 ||
        { cat "$tmp/repack.log"; fail "dpkg-repack remapring"; }
    prev_deb=$(ls "$tmp/prev/"remapring_*.deb)
    apt-mark showauto remapring | grep -qx remapring && prev_auto=1
    echo "   installed before: $(dpkg-query -W remapring), repacked"
    ;;
""|un*|pn*) ;;
*) skip "remapring is in dpkg state '$prev': not touching it" ;;
esac
saved=()
while read -r p; do
    p=${p#.}
    [ -e "$p" ] || continue
    dpkg-query -S "$p" >/dev/null 2>&1 && continue
    saved+=("${p#/}")
done < "$tmp/files"
if [ ${#saved[@]} -gt 0 ]; then
    tar -C / -cpf "$tmp/saved.tar" "${saved[@]}" || fail "saving ${saved[*]}"
    echo "   saved files no package owns: ${saved[*]}"
fi
snapshot before
restore() {
    if dpkg-query -W -f='${Status}' remapring 2>/dev/null |
       grep -q 'ok installed'; then
        apt_get purge remapring
    fi
    if [ -n "$prev_deb" ]; then
        apt_get install "$prev_deb" || return 1
        [ -n "$prev_auto" ] && apt-mark auto remapring >/dev/null
    fi
    [ ! -f "$tmp/saved.tar" ] || tar -C / -xpf "$tmp/saved.tar"
    restored=1
}
cleanup+=('[ -n "${restored:-}" ] || restore')
# --reinstall: the same version may be installed already
apt_get install --reinstall --no-install-recommends "$deb" ||
    fail "apt-get install $deb"
[ "$(dpkg-query -W -f='${Version}' remapring)" = "$debver" ] ||
    fail "remapring $debver is not installed"
cmp -s "$module" "$tmp/root$module" || fail "$module is not the one built"
took "apt-get install"

note "UCX_TLS=remapring remapring-run ucx_info -d (installed)"
[ "$(command -v remapring-run)" = /usr/bin/remapring-run ] ||
    fail "remapring-run is $(command -v remapring-run)"
UCX_TLS=remapring remapring-run ucx_info -d > "$tmp/ucx_info" 2>&1 ||
    { cat "$tmp/ucx_info"; fail "remapring-run ucx_info -d"; }
grep -q "Transport: remapring" "$tmp/ucx_info" ||
    { cat "$tmp/ucx_info"; fail "the transport is not listed"; }
grep -q "Memory domain: remapring" "$tmp/ucx_info" ||
    fail "the memory domain is not listed"
grep -E "(Memory domain|Transport): remapring" "$tmp/ucx_info" |
    sed 's/^#* */   /'
# the RDMA module loaded too (no device here: its settings show it)
remapring-run ucx_info -c > "$tmp/ucx_config" 2>&1 &&
    grep -q '^UCX_REMAPRDMA_MODE=' "$tmp/ucx_config" ||
    { cat "$tmp/ucx_config"; fail "remapring-run does not load the RDMA module"; }
[ "$(remapring-run --print-module)" = "$module" ] ||
    fail "remapring-run --print-module: $(remapring-run --print-module)"
[ "$(pkg-config --variable=module remapring)" = "$module" ] ||
    fail "pkg-config --variable=module remapring"
man_page=/usr/share/man/man1/remapring-run.1.gz
[ "$(dpkg-query -S "$man_page" 2>/dev/null)" = "remapring: $man_page" ] &&
    man -w remapring-run >/dev/null || fail "man remapring-run finds no page"
man -w 7 remapring >/dev/null || fail "man 7 remapring finds no page"
took "the installed package"

note "apt-get remove (and purge): no file left behind"
apt_get remove remapring || fail "apt-get remove remapring"
while read -r p; do
    [ ! -e "${p#.}" ] || fail "${p#.} is left after apt-get remove"
done < "$tmp/files"
compare removed
# with no conffile, removing purges: dpkg forgets the package at once
st=$(dpkg-query -W -f='${db:Status-Abbrev}' remapring 2>/dev/null)
echo "   dpkg state after remove: '${st:-unknown}'"
case $st in
""|un*|pn*) ;;
*) apt_get purge remapring || fail "apt-get purge remapring"
   st=$(dpkg-query -W -f='${db:Status-Abbrev}' remapring 2>/dev/null)
   case $st in ""|un*|pn*) ;; *) fail "dpkg state after purge: '$st'" ;; esac
   compare purged
   ;;
esac
took "apt-get remove"

if [ -n "$prev_deb" ] || [ ${#saved[@]} -gt 0 ]; then
    note "put back the previous state"
    restore || fail "restoring the previous state"
    compare restored missing
    [ -z "$prev_deb" ] ||
        [ "$(dpkg-query -W -f='${db:Status-Abbrev}${Version}' remapring)" = \
          "$prev$prev_ver" ] ||
        fail "remapring is not back in its previous state"
    took "restore"
fi
restored=1

echo "   total: $((($(date +%s%N) - t_first) / 1000000000)) s"
echo "PASS"
