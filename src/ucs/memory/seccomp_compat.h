/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * What newer kernels' <linux/seccomp.h> has and older headers lack; the
 * seccomp source and contrib/bench/trap_cost.c test at run time whether the
 * kernel takes them.
 */

#ifndef REMAPRING_SECCOMP_COMPAT_H_
#define REMAPRING_SECCOMP_COMPAT_H_

#include <linux/seccomp.h>

#ifndef SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
#  define SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (1UL << 5)  /* 5.19 */
#endif
#ifndef SECCOMP_IOCTL_NOTIF_SET_FLAGS
#  define SECCOMP_IOCTL_NOTIF_SET_FLAGS      SECCOMP_IOW(4, __u64) /* 6.6 */
#endif
#ifndef SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP
#  define SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP (1UL << 0)      /* 6.6 */
#endif

#endif
