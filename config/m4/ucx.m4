#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#

# REMAPRING_CHECK_UCX
# Find the installed UCX with pkg-config and read its version.
AC_DEFUN([REMAPRING_CHECK_UCX], [
    PKG_CHECK_MODULES([UCX], [ucx >= 1.13],
        [],
        [AC_MSG_ERROR([UCX not found by pkg-config: apt-get install libucx-dev ucx-utils])])
    UCX_VERSION=$($PKG_CONFIG --modversion ucx)
    UCX_PREFIX=$($PKG_CONFIG --variable=prefix ucx)
    UCX_LIBDIR=$($PKG_CONFIG --variable=libdir ucx)
    UCX_MODULEDIR=$UCX_LIBDIR/ucx
    AC_SUBST([UCX_VERSION])
    AC_SUBST([UCX_LIBDIR])
    AC_SUBST([UCX_MODULEDIR])
    AC_DEFINE_UNQUOTED([REMAPRING_UCX_VERSION], ["$UCX_VERSION"],
                       [UCX version the module is built for])
])

# REMAPRING_CHECK_UCX_SOURCE
# UCX's internal headers (uct/base/*.h) are not installed: take them from a
# configured source tree of exactly the installed version.
AC_DEFUN([REMAPRING_CHECK_UCX_SOURCE], [
    AC_ARG_WITH([ucx-src],
        [AS_HELP_STRING([--with-ucx-src=DIR],
            [configured source tree of the installed UCX version, as
             contrib/ucx-src.sh prepares it (DIR/source, DIR/build);
             default: /var/cache/remapring/ucx-VERSION])],
        [], [with_ucx_src=/var/cache/remapring/ucx-$UCX_VERSION])

    ucx_src_howto="run contrib/ucx-src.sh (it fetches the Debian source of UCX $UCX_VERSION and configures it), then configure --with-ucx-src=<the directory it prints>"
    AS_IF([test -f "$with_ucx_src/source/src/uct/base/uct_iface.h"],
          [UCX_SRC_DIR=$(cd "$with_ucx_src/source" && pwd)
           UCX_BUILD_DIR=$(cd "$with_ucx_src/build" 2>/dev/null && pwd)],
          [test -f "$with_ucx_src/src/uct/base/uct_iface.h"],
          [UCX_SRC_DIR=$(cd "$with_ucx_src" && pwd)
           UCX_BUILD_DIR=$UCX_SRC_DIR],
          [AC_MSG_ERROR([no UCX source tree at '$with_ucx_src': $ucx_src_howto])])

    AC_MSG_CHECKING([UCX source version in $UCX_SRC_DIR])
    ucx_src_version=$($SHELL "$srcdir/config/ucx-src-version.sh" "$UCX_SRC_DIR")
    AC_MSG_RESULT([$ucx_src_version])
    AS_IF([test "x$ucx_src_version" != "x$UCX_VERSION"],
          [AC_MSG_ERROR([UCX source is version '$ucx_src_version' but the installed UCX is $UCX_VERSION; internal structures differ between versions: $ucx_src_howto])])
    AS_IF([test ! -f "$UCX_BUILD_DIR/config.h"],
          [AC_MSG_ERROR([UCX source at '$UCX_SRC_DIR' is not configured (no config.h): $ucx_src_howto])])

    UCX_INT_CPPFLAGS="-I$UCX_BUILD_DIR -I$UCX_BUILD_DIR/src -I$UCX_SRC_DIR/src"
    AC_SUBST([UCX_SRC_DIR])
    AC_SUBST([UCX_BUILD_DIR])
    AC_SUBST([UCX_INT_CPPFLAGS])
])
