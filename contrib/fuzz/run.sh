#!/bin/bash
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# Build the fuzz targets (libFuzzer, with AddressSanitizer and
# UndefinedBehaviorSanitizer) and run them. Each target drives one parser of
# bytes a peer or a user hands us through the project's own code, built
# with clang in FUZZ_BUILD_DIR; the header of each fuzz_*.c says what it
# reaches and what must hold.
#
# usage: contrib/fuzz/run.sh [--build | --replay] [target...]
#   (none)    build, then fuzz each target for FUZZ_SECONDS (default 10),
#             starting from its saved corpus (contrib/fuzz/corpus/<target>);
#             new inputs go to FUZZ_BUILD_DIR/corpus/<target>, crashes to
#             FUZZ_BUILD_DIR/crashes/<target>/
#   --replay  build, then run each target on its saved corpus alone
#             (every file once) and then fuzz for FUZZ_SECONDS (default 3):
#             the check the test suite runs (test/scripts/test_fuzz.sh)
#   --build   build only
#   target    fuzz_ring_reader, fuzz_ring_writer, fuzz_rkey, fuzz_ep_addr,
#             fuzz_ctl_rx, fuzz_settings (default: all)
# Environment:
#   FUZZ_SECONDS     seconds per target
#   FUZZ_BUILD_DIR   default <source>/build-fuzz
#   FUZZ_ARGS        more libFuzzer options, e.g. "-jobs=2 -workers=2"
# Exit status: 0 if no target crashed, 1 if one did, 77 if clang or
# libFuzzer is missing and cannot be installed (not root), with the reason.
# At the end it prints, per target, the inputs run and executions per second
# (libFuzzer's "Done N runs in S second(s)").
#
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
here=$top/contrib/fuzz
build=${FUZZ_BUILD_DIR:-$top/build-fuzz}
all_targets=(fuzz_ring_reader fuzz_ring_writer fuzz_rkey fuzz_ep_addr fuzz_ctl_rx
             fuzz_settings)

mode=fuzz
case "${1:-}" in
--replay) mode=replay; shift ;;
--build)  mode=build; shift ;;
-h|--help) sed -n '2,/^set -euo/p' "$0" | sed -n 's/^# \{0,1\}//p'; exit 0 ;;
esac
if [ "$mode" = replay ]; then
    seconds=${FUZZ_SECONDS:-3}
else
    seconds=${FUZZ_SECONDS:-10}
fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")

# --- clang and libFuzzer (Debian 12: clang-14, libclang-rt-14-dev) --------
CLANG_VERSION=${CLANG_VERSION:-14}
cc=clang-$CLANG_VERSION
cxx=clang++-$CLANG_VERSION
fuzz_packages=(clang-$CLANG_VERSION libclang-rt-$CLANG_VERSION-dev)

have_fuzzer() {
    command -v "$cc" >/dev/null 2>&1 &&
        [ -n "$("$cc" -print-file-name=libclang_rt.fuzzer-x86_64.a |
                grep /)" ] &&
        [ -f "$("$cc" -print-file-name=libclang_rt.fuzzer-x86_64.a)" ]
}

if ! have_fuzzer; then
    if [ "$(id -u)" != 0 ]; then
        echo "fuzz: $cc with libFuzzer is missing (apt-get install" \
             "${fuzz_packages[*]}, as root); skipped"
        exit 77
    fi
    echo "fuzz: installing ${fuzz_packages[*]}" >&2
    if ! { apt-get update -qq &&
           DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
               --no-install-recommends "${fuzz_packages[@]}" >/dev/null; } ||
       ! have_fuzzer; then
        echo "fuzz: could not install ${fuzz_packages[*]}; skipped"
        exit 77
    fi
fi

# --- build -----------------------------------------------------------------
# The project's own libraries, built with clang and instrumented for
# coverage (fuzzer-no-link) and the sanitizers, then each target linked
# against them and libFuzzer's main.
# UBSan's null and object-size checks are left out: UCX's ucs_offsetof(),
# under every ucs_container_of(), ucs_derived_of() and list walk, is a
# member access through a null pointer, which both report in every file;
# a real null dereference still stops the run (SIGSEGV, caught by ASan),
# and ASan checks object bounds.
san="-fsanitize=address,undefined -fno-sanitize=null,object-size"
san+=" -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cflags="-O1 -g $san -fsanitize=fuzzer-no-link"

"$top/contrib/setup.sh"
if [ ! -x "$top/configure" ] || [ "$top/configure.ac" -nt "$top/configure" ]
then
    (cd "$top" && ./autogen.sh >/dev/null 2>&1)
fi
mkdir -p "$build"
if [ ! -f "$build/Makefile" ] ||
   [ "$(cat "$build/fuzz-flags" 2>/dev/null)" != "$cc $cflags" ]; then
    rm -f "$build/fuzz-flags"
    (cd "$build" &&
     "$top/configure" --prefix=/usr --enable-asan --disable-werror \
         CC="$cc" CXX="$cxx" CFLAGS="$cflags" CXXFLAGS="$cflags" \
         >configure.out) || { tail -20 "$build/configure.out"; exit 1; }
    make -C "$build" clean >/dev/null
    echo "$cc $cflags" >"$build/fuzz-flags"
fi
make -C "$build" -j"$(nproc)" libuct_remapring.la >/dev/null

# the module's code as the tests link it: its convenience libraries (the
# constructors that register the components pulled in by name)
int_cppflags=$(sed -n 's/^UCX_INT_CPPFLAGS *= *//p' "$build/Makefile")
verbs_libs=$(sed -n 's/^VERBS_LIBS *= *//p' "$build/Makefile")
common="$cflags -std=gnu11 -I$top/src -I$build/src -I$here"
libs="$build/.libs/libremapring_ring.a $build/.libs/libremapring_ucs.a"
libs+=" -lucp -luct -lucs -lucm -lpthread"
core="-Wl,--undefined=uct_remapring_init $build/.libs/libuct_remapring_sm.a"
if [ -f "$build/.libs/libuct_remapring_verbs.a" ]; then
    core+=" -Wl,--undefined=uct_remaprdma_init"
    core+=" $build/.libs/libuct_remapring_verbs.a"
fi
core+=" $build/.libs/libuct_remapring_base.a"
mkdir -p "$build/fuzz"
link() { # target, extra flags...
    local t=$1; shift
    if [ ! -x "$build/fuzz/$t" ] ||
       [ -n "$(find "$here" "$build/.libs" "$build/src" -newer \
               "$build/fuzz/$t" \( -name '*.c' -o -name '*.h' -o \
               -name '*.a' -o -name '*.o' \) -print -quit)" ]; then
        "$cc" $common -fsanitize=fuzzer "$@" -o "$build/fuzz/$t"
    fi
}
for t in "${targets[@]}"; do
    case $t in
    fuzz_ring_reader|fuzz_ring_writer)
        link "$t" "$here/$t.c" $libs ;;
    fuzz_rkey|fuzz_ep_addr|fuzz_ctl_rx|fuzz_settings)
        # UCX's internal headers: its config.h and its own idioms
        link "$t" -DHAVE_CONFIG_H $int_cppflags \
             -Wno-unknown-attributes "$here/$t.c" "$here/fuzz_uct.c" \
             $core $libs $verbs_libs ;;
    *)
        echo "fuzz: no target $t (${all_targets[*]})" >&2
        exit 1 ;;
    esac
done
[ "$mode" = build ] && { echo "fuzz: built in $build/fuzz"; exit 0; }

# --- run -------------------------------------------------------------------
# UCX's own fault handler would catch the sanitizers' signals first; its log
# would print every refused input
export UCX_HANDLE_ERRORS=none UCX_LOG_LEVEL=${UCX_LOG_LEVEL:-fatal}
# UCM's malloc hooks would hand out memory ASan does not watch
export UCX_MEM_MALLOC_HOOKS=no
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$top/contrib/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

rc=0
summary=()
for t in "${targets[@]}"; do
    seeds=$here/corpus/$t
    work=$build/corpus/$t
    crashes=$build/crashes/$t
    log=$build/fuzz/$t.log
    mkdir -p "$work" "$crashes"
    if [ "$mode" = replay ]; then
        # a scratch copy: what the run adds is not kept
        work=$(mktemp -d)
        trap 'rm -rf "$work"' EXIT
    fi
    echo "fuzz: $t, $seconds s, corpus $seeds"
    set +e
    "$build/fuzz/$t" -max_total_time="$seconds" -print_final_stats=1 \
        -artifact_prefix="$crashes/" -timeout=10 -rss_limit_mb=4096 \
        ${FUZZ_ARGS:-} "$work" $([ -d "$seeds" ] && echo "$seeds") \
        >"$log" 2>&1
    trc=$?
    set -e
    grep -E '^#[0-9]+ +(INITED|DONE)|^Done [0-9]+ runs|^stat::' "$log" |
        grep -E 'INITED|DONE|Done|number_of_executed_units|average_exec' |
        sed "s/^/  $t: /" || true
    runs=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\1 \2/p' \
           "$log" | tail -1)
    if [ $trc -ne 0 ] || [ -z "$runs" ]; then
        echo "fuzz: $t FAILED (exit $trc), last lines of $log:"
        tail -40 "$log"
        ls "$crashes" | sed 's/^/  artifact: /'
        rc=1
        summary+=("$(printf '%-18s FAILED (exit %d), see %s' "$t" $trc "$log")")
    else
        set -- $runs
        summary+=("$(printf '%-18s %12d inputs in %5d s, %8d exec/s' \
                   "$t" "$1" "$2" $(( $1 / ($2 > 0 ? $2 : 1) )))")
    fi
    if [ "$mode" = replay ]; then
        rm -rf "$work"
        trap - EXIT
    fi
done

echo "fuzz: summary"
printf '  %s\n' "${summary[@]}"
exit $rc
