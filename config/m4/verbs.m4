#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
# REMAPRING_CHECK_VERBS: rdma-core's libibverbs and librdmacm, for the verbs
# wire. --without-verbs builds the module without it; with neither option
# the wire is built when both libraries and their headers are there.
# Sets HAVE_VERBS (AC_DEFINE and AM_CONDITIONAL) and VERBS_LIBS.
#
AC_DEFUN([REMAPRING_CHECK_VERBS], [
    AC_ARG_WITH([verbs],
        [AS_HELP_STRING([--with-verbs],
                        [build the verbs wire (libibverbs-dev and
                         librdmacm-dev; default: when found)])],
        [], [with_verbs=check])

    have_verbs=no
    VERBS_LIBS=""
    AS_IF([test "x$with_verbs" != xno], [
        have_verbs=yes
        AC_CHECK_HEADERS([infiniband/verbs.h rdma/rdma_cma.h], [],
                         [have_verbs=no])
        AC_CHECK_LIB([ibverbs], [ibv_open_device], [:], [have_verbs=no])
        AC_CHECK_LIB([rdmacm], [rdma_set_option], [:], [have_verbs=no])
        AS_IF([test "x$have_verbs" = xyes],
              [AC_CHECK_DECLS([IBV_ACCESS_ON_DEMAND], [], [],
                              [[#include <infiniband/verbs.h>]])])
        AS_IF([test "x$have_verbs" = xno && test "x$with_verbs" = xyes],
              [AC_MSG_ERROR([--with-verbs: libibverbs-dev and librdmacm-dev are needed])])
    ])

    AS_IF([test "x$have_verbs" = xyes],
          [VERBS_LIBS="-lrdmacm -libverbs"
           AC_DEFINE([HAVE_VERBS], [1], [Build the verbs wire])])
    AC_SUBST([VERBS_LIBS])
    AM_CONDITIONAL([HAVE_VERBS], [test "x$have_verbs" = xyes])
])
