/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * What newer kernels' <linux/seccomp.h> has and older headers lack; the
 * seccomp source and contrib/bench/trap_cost.c test at run time whether the
 * kernel takes them. And the one system call instruction a filter of
 * theirs lets through, which both define.
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

/*
 * REMAPRING_SECCOMP_SYSCALL_ASM(name, visibility), at file scope, defines
 * long name(nr, a0, a1, a2, a3, a4, a5): the system call NR, made from one
 * instruction whose address a filter can compare, and name_ip, the address
 * the kernel gives the filter for it (the instruction after the system
 * call); the kernel's result, a negative errno on failure. @a visibility:
 * ".hidden" or ".globl". REMAPRING_SECCOMP_HAVE_SYSCALL is 0 where the
 * architecture has none here.
 */
#define REMAPRING_SECCOMP_ASM_BEGIN(_name, _vis, _type) \
    ".text\n" \
    ".globl " #_name "\n" \
    _vis " " #_name "\n" \
    ".type " #_name ", " _type "\n" \
    #_name ":\n"
#define REMAPRING_SECCOMP_ASM_END(_name, _vis) \
    ".globl " #_name "_ip\n" \
    _vis " " #_name "_ip\n" \
    #_name "_ip:\n" \
    "    ret\n" \
    ".size " #_name ", . - " #_name "\n"

#if defined(__x86_64__)
#  if defined(__CET__)
#    define REMAPRING_SECCOMP_ENDBR "    endbr64\n"
#  else
#    define REMAPRING_SECCOMP_ENDBR
#  endif
#  define REMAPRING_SECCOMP_SYSCALL_ASM(_name, _vis) \
    __asm__(REMAPRING_SECCOMP_ASM_BEGIN(_name, _vis, "@function") \
            REMAPRING_SECCOMP_ENDBR \
            "    mov %rdi, %rax\n" \
            "    mov %rsi, %rdi\n" \
            "    mov %rdx, %rsi\n" \
            "    mov %rcx, %rdx\n" \
            "    mov %r8, %r10\n" \
            "    mov %r9, %r8\n" \
            "    mov 8(%rsp), %r9\n" \
            "    syscall\n" \
            REMAPRING_SECCOMP_ASM_END(_name, _vis))
#  define REMAPRING_SECCOMP_HAVE_SYSCALL 1
#elif defined(__aarch64__)
#  define REMAPRING_SECCOMP_SYSCALL_ASM(_name, _vis) \
    __asm__(REMAPRING_SECCOMP_ASM_BEGIN(_name, _vis, "%function") \
            "    mov x8, x0\n" \
            "    mov x0, x1\n" \
            "    mov x1, x2\n" \
            "    mov x2, x3\n" \
            "    mov x3, x4\n" \
            "    mov x4, x5\n" \
            "    mov x5, x6\n" \
            "    svc #0\n" \
            REMAPRING_SECCOMP_ASM_END(_name, _vis))
#  define REMAPRING_SECCOMP_HAVE_SYSCALL 1
#else
#  define REMAPRING_SECCOMP_HAVE_SYSCALL 0
#endif

#endif
