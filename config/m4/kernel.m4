#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#

# REMAPRING_CHECK_KERNEL
# Kernel interfaces the ring and the notifier use. Missing ones are reported
# at run time by the tests that need them (skipped), not here, except the
# ones the code cannot be compiled without.
AC_DEFUN([REMAPRING_CHECK_KERNEL], [
    AC_CHECK_HEADERS([linux/userfaultfd.h], [have_uffd_h=yes], [have_uffd_h=no])
    AC_CHECK_FUNCS([memfd_create process_vm_writev process_vm_readv], [],
        [AC_MSG_ERROR([memfd_create and process_vm_readv/writev are required])])
    AC_CHECK_DECLS([PROCMAP_QUERY], [], [], [[#include <linux/fs.h>]])
])

# REMAPRING_CHECK_GTEST
# GoogleTest from Debian (libgtest-dev): headers and prebuilt libraries.
AC_DEFUN([REMAPRING_CHECK_GTEST], [
    AC_LANG_PUSH([C++])
    save_LIBS=$LIBS
    LIBS="-lgtest -pthread $LIBS"
    AC_MSG_CHECKING([for GoogleTest])
    AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <gtest/gtest.h>]],
                                    [[testing::InitGoogleTest();]])],
                   [have_gtest=yes], [have_gtest=no])
    AC_MSG_RESULT([$have_gtest])
    LIBS=$save_LIBS
    AC_LANG_POP([C++])
    GTEST_CPPFLAGS=""
    GTEST_LIBS="-lgtest -lgtest_main -pthread"
    AC_SUBST([GTEST_CPPFLAGS])
    AC_SUBST([GTEST_LIBS])
    AM_CONDITIONAL([HAVE_GTEST], [test "x$have_gtest" = xyes])
])
