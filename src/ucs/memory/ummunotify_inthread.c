/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * The C library's munmap(), madvise() and mremap(), defined here for the
 * seccomp source's in-thread path (ummunotify_seccomp.c). Only the module
 * (libuct_remapring.so, which exports them) and the programs that test
 * them link this file: where the module is preloaded its definitions come
 * before the C library's, and a call through them is reported in the
 * calling thread instead of stopping at the filter. While the source does
 * not run, each passes the call on to the next definition (the C library's,
 * or a sanitizer's in front of it) and costs a function call.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "ummunotify_int.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define UCS_INTHREAD_EXPORT __attribute__((visibility("default")))
#define UCS_INTHREAD_CALLER \
    ((uintptr_t)__builtin_extract_return_addr(__builtin_return_address(0)))

typedef int (*ucs_inthread_munmap_t)(void*, size_t);
typedef int (*ucs_inthread_madvise_t)(void*, size_t, int);
typedef void *(*ucs_inthread_mremap_t)(void*, size_t, size_t, int, ...);

static ucs_inthread_munmap_t  ucs_inthread_next_munmap;
static ucs_inthread_madvise_t ucs_inthread_next_madvise;
static ucs_inthread_mremap_t  ucs_inthread_next_mremap;
static __thread int           ucs_inthread_resolving;

/* The next definition of NAME after this one, once; NULL while it is being
 * looked up in this thread (dlsym() may call back) or if there is none:
 * then the caller makes the system call itself. */
static void *ucs_inthread_next(void **cache, const char *name)
{
    void *fn = __atomic_load_n(cache, __ATOMIC_ACQUIRE);

    if ((fn == NULL) && !ucs_inthread_resolving) {
        ucs_inthread_resolving = 1;
        fn                     = dlsym(RTLD_NEXT, name);
        ucs_inthread_resolving = 0;
        __atomic_store_n(cache, fn, __ATOMIC_RELEASE);
    }
    return fn;
}

/* the C library's convention: -1 (or MAP_FAILED) and errno */
static long ucs_inthread_result(long ret)
{
    if ((ret < 0) && (ret > -4096)) {
        errno = (int)-ret;
        return -1;
    }
    return ret;
}

/* at load, so that no call (one from a signal handler, say) is the first
 * and looks them up */
static void __attribute__((constructor)) ucs_inthread_resolve(void)
{
    (void)ucs_inthread_next((void**)&ucs_inthread_next_munmap, "munmap");
    (void)ucs_inthread_next((void**)&ucs_inthread_next_madvise, "madvise");
    (void)ucs_inthread_next((void**)&ucs_inthread_next_mremap, "mremap");
}

int ucs_ummunotify_inthread_interposed(void)
{
    return dlsym(RTLD_DEFAULT, "munmap") == (void*)munmap;
}

UCS_INTHREAD_EXPORT int munmap(void *addr, size_t length)
{
    uint64_t args[5] = {(uintptr_t)addr, length, 0, 0, 0};
    ucs_inthread_munmap_t next;
    long ret;

    if (ucs_ummunotify_seccomp_call(SYS_munmap, args, &ret,
                                    UCS_INTHREAD_CALLER)) {
        return (int)ucs_inthread_result(ret);
    }
    next = (ucs_inthread_munmap_t)ucs_inthread_next(
            (void**)&ucs_inthread_next_munmap, "munmap");
    if (next == NULL) {
        return (int)syscall(SYS_munmap, addr, length);
    }
    return next(addr, length);
}

UCS_INTHREAD_EXPORT int madvise(void *addr, size_t length, int advice)
{
    uint64_t args[5] = {(uintptr_t)addr, length, (unsigned)advice, 0, 0};
    ucs_inthread_madvise_t next;
    long ret;

    /* what the filter stops; other advice takes no memory away */
    if (ucs_ummunotify_madv_discards(advice) &&
        ucs_ummunotify_seccomp_call(SYS_madvise, args, &ret,
                                    UCS_INTHREAD_CALLER)) {
        return (int)ucs_inthread_result(ret);
    }
    next = (ucs_inthread_madvise_t)ucs_inthread_next(
            (void**)&ucs_inthread_next_madvise, "madvise");
    if (next == NULL) {
        return (int)syscall(SYS_madvise, addr, length, advice);
    }
    return next(addr, length, advice);
}

UCS_INTHREAD_EXPORT void *mremap(void *old_address, size_t old_size,
                                 size_t new_size, int flags, ...)
{
    uint64_t args[5] = {(uintptr_t)old_address, old_size, new_size,
                        (unsigned)flags, 0};
    void *new_address = NULL;
    ucs_inthread_mremap_t next;
    va_list ap;
    long ret;

    /* as the C library: the fifth argument only with MREMAP_FIXED */
    if (flags & MREMAP_FIXED) {
        va_start(ap, flags);
        new_address = va_arg(ap, void*);
        va_end(ap);
        args[4] = (uintptr_t)new_address;
    }
    if (ucs_ummunotify_seccomp_call(SYS_mremap, args, &ret,
                                    UCS_INTHREAD_CALLER)) {
        return (void*)ucs_inthread_result(ret);
    }
    next = (ucs_inthread_mremap_t)ucs_inthread_next(
            (void**)&ucs_inthread_next_mremap, "mremap");
    if (next == NULL) {
        return (void*)syscall(SYS_mremap, old_address, old_size, new_size,
                              flags, new_address);
    }
    return next(old_address, old_size, new_size, flags, new_address);
}
