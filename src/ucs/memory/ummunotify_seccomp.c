/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "ummunotify_int.h"
#include "seccomp_compat.h"

#include <ucm/api/ucm.h>
#include <ucs/debug/log_def.h>
#include <ucs/sys/compiler_def.h>
#include <ucs/sys/math.h>

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/futex.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>


/*
 * The whole-process source: seccomp user notification.
 *
 * A seccomp filter on every thread of the process turns each call that can
 * take memory away - munmap, mremap, madvise(DONTNEED/FREE/REMOVE/
 * DONTNEED_LOCKED), mmap and shmat over an existing mapping (MAP_FIXED,
 * SHM_REMAP), shmdt, brk other than the query brk(0) - into a notification.
 * The calling thread waits in the kernel while a worker thread reads the
 * call's arguments, invalidates the range in the notifier table and
 * reports it to UCM (ucm_vm_munmap: every UCS registration cache and the
 * memtype cache drop it), and only then tells the kernel to run the call
 * (SECCOMP_USER_NOTIF_FLAG_CONTINUE). Nothing is patched: raw system calls,
 * static runtimes and any allocator are seen.
 *
 * Threads: two workers, both waiting for notifications. The one that takes
 * a call of the process reports it itself - one wake-up per call, on the
 * calling thread's CPU where the kernel has SYNC_WAKE_UP (6.6) - unless
 * the other is reporting, in which case it queues the call for it. Only
 * one reports at a time, so the other one is always free to take the
 * reporter's own calls (UCX's callbacks, or the allocator they use,
 * freeing memory): those it lets through at once and keeps their ranges
 * for the reporter to report after its current one. While not reporting a
 * worker never allocates and makes no call the filter catches, so it never
 * waits on itself. A call of another process (a fork() child: the filter
 * and the listener are inherited) is let through at once.
 *  If a report runs longer than UCX_REMAPRING_SECCOMP_TIMEOUT, the other
 *  worker lets the waiting calls through without it and says so in one
 *  line on stderr (written raw: it must not allocate, and the log might),
 *  the reporter in an error line when the callback returns: a thread is
 *  never blocked forever by a stuck callback.
 *
 * The guard: a process forked before the filter exists (so it is not
 * filtered itself) holds a copy of the listener. While this process lives
 * it only waits on a socket; when the socket closes (this process exited,
 * or called execve(): the descriptors are close-on-exec), it answers every
 * notification left with "continue" until no task uses the filter any more.
 * Without it, programs this process exec()s or fork() children that outlive
 * it would get ENOSYS from munmap() and mmap(MAP_FIXED) - the dynamic loader
 * itself fails.
 *
 * The filter is irrevocable and inherited across fork() and execve(); a
 * process can have only one listener in its filter chain, so a fork() child
 * or an exec()'d program that wants this source too cannot have it (it gets
 * EBUSY and says so).
 */


#define UCS_SECCOMP_QUEUE_LEN   256   /* pending calls of the process */
#define UCS_SECCOMP_OWN_LEN     1024  /* reporter's own calls, per report */
#define UCS_SECCOMP_TICK_MS     100
#define UCS_SECCOMP_KNOWN_TIDS  64    /* a worker's cache of our threads */


#if defined(__x86_64__)
#  define UCS_SECCOMP_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#  define UCS_SECCOMP_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif


/* ucs_seccomp_syscall(nr, a0, ..., a5), the one instruction the filter
 * lets through (the in-thread path has reported the call), and
 * ucs_seccomp_syscall_ip, the address the filter compares */
#if REMAPRING_SECCOMP_HAVE_SYSCALL
REMAPRING_SECCOMP_SYSCALL_ASM(ucs_seccomp_syscall, ".hidden");
long ucs_seccomp_syscall(long nr, long a0, long a1, long a2, long a3,
                         long a4, long a5);
extern const char ucs_seccomp_syscall_ip[];
#endif

/* ummunotify_inthread.c, where it is linked in: nonzero if the process
 * calls its munmap() */
int ucs_ummunotify_inthread_interposed(void) __attribute__((weak));


typedef struct {
    uint64_t id;
    uint32_t pid;
    int32_t  nr;
    uint64_t args[6];
} ucs_seccomp_call_t;


static struct {
    int                     state; /* 0 off, 1 running, -1 failed */
    char                    why[400];
    int                     listener;
    int                     guard_sock;
    pid_t                   guard;
    pid_t                   tgid;
    struct seccomp_notif_sizes sizes;

    pthread_t               workers[2];
    volatile pid_t          worker_tid[2];
    volatile int            go;    /* futex: threads may start */
    int                     ready; /* threads past their own start-up */
    volatile pid_t          reporter; /* the worker reporting, or 0 */
    int                     sync_wake; /* SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP */

    /* calls waiting for the reporter */
    ucs_seccomp_call_t      queue[UCS_SECCOMP_QUEUE_LEN];
    volatile unsigned       qhead; /* the reporter's */
    volatile unsigned       qtail;
    volatile int            qlock; /* between the two workers' enqueues */

    /* the reporter's own calls, kept by the other worker */
    ucs_ummunotify_range_t  own[UCS_SECCOMP_OWN_LEN];
    volatile unsigned       own_tail;
    volatile unsigned       own_lost;

    /* stuck detection: nonzero while a report runs */
    volatile uint64_t       busy_since_ns;
    volatile int            degraded;
    int                     inherited; /* EBUSY: a listener in the chain */
    int                     inthread;  /* the in-thread path is on */
    size_t                  page;
    uintptr_t               tsan_start; /* ThreadSanitizer's code */
    uintptr_t               tsan_end;

    ucs_ummunotify_seccomp_stats_t stats;
} ucs_seccomp = {
    .listener   = -1,
    .guard_sock = -1
};


static uint64_t ucs_seccomp_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static void ucs_seccomp_futex_wait(volatile int *word, int val, int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000l};

    syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, val,
            (ms < 0) ? NULL : &ts, NULL, 0);
}

static void ucs_seccomp_futex_wake(volatile int *word)
{
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
}

/* Threads say they are ready - past their start-up, which under a
 * sanitizer maps memory at fixed addresses: the filter must not exist
 * yet - then wait until the filter is installed (go 1) or was not (-1). */
static int ucs_seccomp_wait_go(void)
{
    int go;

    __atomic_fetch_add(&ucs_seccomp.ready, 1, __ATOMIC_RELEASE);
    while ((go = __atomic_load_n(&ucs_seccomp.go, __ATOMIC_ACQUIRE)) == 0) {
        ucs_seccomp_futex_wait(&ucs_seccomp.go, 0, -1);
    }
    return go > 0;
}

static void ucs_seccomp_set_go(int go)
{
    __atomic_store_n(&ucs_seccomp.go, go, __ATOMIC_RELEASE);
    ucs_seccomp_futex_wake(&ucs_seccomp.go);
}

static void ucs_seccomp_stat_add(uint64_t *counter, uint64_t value)
{
    __atomic_fetch_add(counter, value, __ATOMIC_RELAXED);
}

/* ---------------------------------------------------------------- filter */

#define UCS_SECCOMP_ARG_LO(_n) \
    (offsetof(struct seccomp_data, args) + (_n) * sizeof(uint64_t))
#define UCS_SECCOMP_IP_LO \
    offsetof(struct seccomp_data, instruction_pointer)

/* clang-format off */
static struct sock_filter ucs_seccomp_program[] = {
    /*  0 */ BPF_STMT(BPF_LD  | BPF_W   | BPF_ABS, offsetof(struct seccomp_data, arch)),
    /*  1 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, UCS_SECCOMP_AUDIT_ARCH, 1, 0),
    /*  2 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    /*  3 */ BPF_STMT(BPF_LD  | BPF_W   | BPF_ABS, offsetof(struct seccomp_data, nr)),
    /*  4 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_munmap,  22, 0),
    /*  5 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_mremap,  21, 0),
    /*  6 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_shmdt,   20, 0),
    /*  7 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_madvise,  4, 0),
    /*  8 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_mmap,     9, 0),
    /*  9 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_shmat,   10, 0),
    /* 10 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_brk,     11, 0),
    /* 11 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    /* 12: madvise(addr, len, advice) */
    /* 12 */ BPF_STMT(BPF_LD  | BPF_W   | BPF_ABS, UCS_SECCOMP_ARG_LO(2)),
    /* 13 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, MADV_DONTNEED,        13, 0),
    /* 14 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, MADV_FREE,            12, 0),
    /* 15 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, MADV_REMOVE,          11, 0),
    /* 16 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, MADV_DONTNEED_LOCKED, 10, 0),
    /* 17 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    /* 18: mmap(addr, len, prot, flags, fd, off) over what is there */
    /* 18 */ BPF_STMT(BPF_LD  | BPF_W   | BPF_ABS, UCS_SECCOMP_ARG_LO(3)),
    /* 19 */ BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, MAP_FIXED, 7, 6),
    /* 20: shmat(id, addr, flags) over what is there */
    /* 20 */ BPF_STMT(BPF_LD  | BPF_W   | BPF_ABS, UCS_SECCOMP_ARG_LO(2)),
    /* 21 */ BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, SHM_REMAP, 5, 4),
    /* 22: brk(addr); brk(0) only asks where the break is */
    /* 22 */ BPF_STMT(BPF_LD  | BPF_W   | BPF_ABS, UCS_SECCOMP_ARG_LO(0)),
    /* 23 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 3),
    /* 24 */ BPF_STMT(BPF_LD  | BPF_W   | BPF_ABS, UCS_SECCOMP_ARG_LO(0) + 4),
    /* 25 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 1),
    /* 26 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    /* 27: made from ucs_seccomp_syscall (the in-thread path reported it);
     * the address is set at install, 0 (never a caller's) without it */
    /* 27 */ BPF_STMT(BPF_LD  | BPF_W   | BPF_ABS, UCS_SECCOMP_IP_LO),
    /* 28 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 3),
    /* 29 */ BPF_STMT(BPF_LD  | BPF_W   | BPF_ABS, UCS_SECCOMP_IP_LO + 4),
    /* 30 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 1),
    /* 31 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    /* 32: made by ThreadSanitizer's runtime from its own code (its shadow,
     * its allocator's memory); the range is set at install, empty (no
     * address is at or above 0 and below 0) without it */
    /* 32 */ BPF_STMT(BPF_LD  | BPF_W   | BPF_ABS, UCS_SECCOMP_IP_LO + 4),
    /* 33 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 4),
    /* 34 */ BPF_STMT(BPF_LD  | BPF_W   | BPF_ABS, UCS_SECCOMP_IP_LO),
    /* 35 */ BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0, 0, 2),
    /* 36 */ BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0, 1, 0),
    /* 37 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    /* 38 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
};
/* clang-format on */

/* the instructions that hold the addresses */
#define UCS_SECCOMP_PROG_IP_LO   28
#define UCS_SECCOMP_PROG_IP_HI   30
#define UCS_SECCOMP_PROG_TSAN_HI 33
#define UCS_SECCOMP_PROG_TSAN_LO 35
#define UCS_SECCOMP_PROG_TSAN_END 36

/* ------------------------------------------------------------ the report */

/* What one call takes away, as at most two ranges. */
static unsigned ucs_seccomp_ranges(const ucs_seccomp_call_t *call,
                                   int may_allocate, ucs_ummunotify_range_t *r,
                                   ucs_ummunotify_event_type_t *type);

static void ucs_seccomp_report(ucs_ummunotify_event_type_t type,
                               uintptr_t start, uintptr_t end)
{
    size_t page = ucs_seccomp.page;

    start &= ~(page - 1);
    end    = (end + page - 1) & ~(page - 1);
    if (end <= start) {
        return;
    }

    if (ucs_ummunotify_engine() == UCS_UMMUNOTIFY_ENGINE_SECCOMP) {
        ucs_ummunotify_lock();
        ucs_ummunotify_seq_begin();
        ucs_ummunotify_apply(type, start, end);
        ucs_ummunotify_seq_end();
        ucs_ummunotify_unlock();
    }

    ucm_vm_munmap((void*)start, end - start);
    ucs_seccomp_stat_add(&ucs_seccomp.stats.reported, 1);
}

/* Report what the reporter's own calls took, in the order they came. */
static void ucs_seccomp_report_own(void)
{
    unsigned idx = 0, tail, lost;

    for (;;) {
        tail = __atomic_load_n(&ucs_seccomp.own_tail, __ATOMIC_ACQUIRE);
        if (idx == tail) {
            break;
        }
        for (; idx < tail; ++idx) {
            ucs_seccomp_report(UCS_UMMUNOTIFY_EVENT_UNMAP,
                               ucs_seccomp.own[idx].start,
                               ucs_seccomp.own[idx].end);
        }
        /* reset only if no new one came meanwhile */
        if (__atomic_compare_exchange_n(&ucs_seccomp.own_tail, &tail, 0, 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            break;
        }
    }

    lost = __atomic_exchange_n(&ucs_seccomp.own_lost, 0, __ATOMIC_ACQ_REL);
    if (lost > 0) {
        ucs_error("notifier seccomp: %u unmaps of the notifier's own thread "
                  "exceeded its list of %u and were not reported", lost,
                  UCS_SECCOMP_OWN_LEN);
    }
}

/* Answer a call: let the kernel run it. ENOENT (counted when 'counted'):
 * the caller was interrupted or killed, or a worker let it through after a
 * timeout; it will call again if it wants. */
static void ucs_seccomp_continue(uint64_t id, int counted)
{
    struct seccomp_notif_resp resp;

    memset(&resp, 0, sizeof(resp));
    resp.id    = id;
    resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
    if ((ioctl(ucs_seccomp.listener, SECCOMP_IOCTL_NOTIF_SEND, &resp) < 0) &&
        counted) {
        ucs_seccomp_stat_add(&ucs_seccomp.stats.abandoned, 1);
    }
}

/* ------------------------------------------------- the in-thread path */

/*
 * Where this library's munmap(), madvise() and mremap() are the ones the
 * process calls (ummunotify_inthread.c, in the module: preloaded, its
 * symbols come before the C library's), a call through them is reported
 * in the calling thread, before it is made, and then made from
 * ucs_seccomp_syscall, which the filter lets through: no notification, no
 * other thread. A call a thread makes while it reports (a callback freeing
 * memory) is made at once and its range reported when that report ends, as
 * the workers do with the reporter's own calls; so is one made while the
 * thread holds the notifier lock (a SYNC client's callback). Everything
 * else still stops at the filter.
 */
#define UCS_SECCOMP_LATER_LEN     32
#define UCS_SECCOMP_REPORTING_LEN 64 /* threads reporting in-thread at once */

/* what a thread unmapped while it reported, for the report's end */
typedef struct {
    ucs_ummunotify_range_t r[UCS_SECCOMP_LATER_LEN];
    unsigned               count;
    unsigned               lost;
} ucs_seccomp_later_t;

/* one thread-local object: one lookup of its address per function */
typedef struct {
    unsigned            depth; /* reports under way in this thread */
    pid_t               tid;
    ucs_seccomp_later_t later;
} ucs_seccomp_thread_t;

static __thread ucs_seccomp_thread_t ucs_seccomp_thread;

/* The threads reporting in-thread now. A call of theirs that stops at the
 * filter (the C library's own munmap() in a free() of a callback) must not
 * wait for a worker's report, which may need what the thread holds (the
 * notifier lock, in a SYNC client's callback): a worker that finds the
 * caller here lets it through at once and keeps its range in the caller's
 * list - the caller is stopped in that call meanwhile. */
static struct {
    volatile pid_t       tid;
    ucs_seccomp_later_t *later;
} ucs_seccomp_reporting[UCS_SECCOMP_REPORTING_LEN];

static void ucs_seccomp_later_add(ucs_seccomp_later_t *later,
                                  const ucs_seccomp_call_t *call)
{
    ucs_ummunotify_range_t r[2];
    ucs_ummunotify_event_type_t type;
    unsigned n, i, count;

    /* atomics: a worker adds to a thread's list while the thread waits
     * in a call, which orders the two for the kernel but not for TSan */
    n = ucs_seccomp_ranges(call, 0, r, &type);
    for (i = 0; i < n; ++i) {
        count = __atomic_load_n(&later->count, __ATOMIC_ACQUIRE);
        if (count == UCS_SECCOMP_LATER_LEN) {
            __atomic_fetch_add(&later->lost, 1, __ATOMIC_RELAXED);
            return;
        }
        later->r[count] = r[i];
        __atomic_store_n(&later->count, count + 1, __ATOMIC_RELEASE);
    }
}

/* The end of a report of this thread: report what it kept meanwhile (the
 * calls those reports make are kept again, until none is left). */
static void ucs_seccomp_report_later(void)
{
    ucs_seccomp_later_t *later = &ucs_seccomp_thread.later;
    ucs_ummunotify_range_t r;
    unsigned count, lost;

    while ((count = __atomic_load_n(&later->count, __ATOMIC_ACQUIRE)) > 0) {
        r = later->r[count - 1];
        __atomic_store_n(&later->count, count - 1, __ATOMIC_RELEASE);
        ucs_seccomp_report(UCS_UMMUNOTIFY_EVENT_UNMAP, r.start, r.end);
    }
    lost = __atomic_exchange_n(&later->lost, 0, __ATOMIC_ACQ_REL);
    if (lost > 0) {
        ucs_error("notifier seccomp: %u unmaps made during one report in "
                  "their own thread exceeded its list of %u and were not "
                  "reported", lost, UCS_SECCOMP_LATER_LEN);
    }
}

/* This thread starts reporting in-thread: a slot in the table, or -1 if
 * all are taken (then the call goes to the filter). */
static int ucs_seccomp_reporting_enter(ucs_seccomp_thread_t *self)
{
    pid_t none;
    int i, slot;

    if (self->tid == 0) {
        self->tid = (pid_t)syscall(SYS_gettid);
    }
    for (i = 0; i < UCS_SECCOMP_REPORTING_LEN; ++i) {
        slot = (self->tid + i) % UCS_SECCOMP_REPORTING_LEN;
        none = 0;
        if ((ucs_seccomp_reporting[slot].tid == 0) &&
            __atomic_compare_exchange_n(&ucs_seccomp_reporting[slot].tid,
                                        &none, self->tid, 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
            __atomic_store_n(&ucs_seccomp_reporting[slot].later,
                             &self->later, __ATOMIC_RELEASE);
            return slot;
        }
    }
    return -1;
}

static void ucs_seccomp_reporting_leave(int slot)
{
    __atomic_store_n(&ucs_seccomp_reporting[slot].later, NULL,
                     __ATOMIC_RELEASE);
    __atomic_store_n(&ucs_seccomp_reporting[slot].tid, 0, __ATOMIC_RELEASE);
}

/* In a worker: if the caller reports in-thread, keep its call's range for
 * it and return nonzero. The caller waits in this call until it is let
 * through, so its list is the worker's meanwhile. */
static int ucs_seccomp_keep_for_reporter(const struct seccomp_notif *notif)
{
    ucs_seccomp_later_t *later;
    ucs_seccomp_call_t call;
    int i;

    for (i = 0; i < UCS_SECCOMP_REPORTING_LEN; ++i) {
        if (__atomic_load_n(&ucs_seccomp_reporting[i].tid,
                            __ATOMIC_ACQUIRE) != (pid_t)notif->pid) {
            continue;
        }
        later = __atomic_load_n(&ucs_seccomp_reporting[i].later,
                                __ATOMIC_ACQUIRE);
        if (later == NULL) {
            continue; /* taking or leaving the slot: not in its report */
        }
        call.nr = notif->data.nr;
        memcpy(call.args, notif->data.args, sizeof(call.args));
        ucs_seccomp_later_add(later, &call);
        ucs_seccomp_stat_add(&ucs_seccomp.stats.own, 1);
        return 1;
    }
    return 0;
}

int ucs_ummunotify_seccomp_call(int nr, const uint64_t *args, long *ret,
                                uintptr_t caller)
{
#if REMAPRING_SECCOMP_HAVE_SYSCALL
    ucs_ummunotify_range_t r[2];
    ucs_ummunotify_event_type_t type;
    ucs_seccomp_thread_t *self;
    ucs_seccomp_call_t call;
    unsigned n, i;
    int slot;

    if (!__atomic_load_n(&ucs_seccomp.inthread, __ATOMIC_ACQUIRE)) {
        return 0;
    }

    if ((caller >= ucs_seccomp.tsan_start) && (caller < ucs_seccomp.tsan_end)) {
        /* ThreadSanitizer's runtime (its symbolizer, in a report): its own
         * memory, unreported, as the filter lets its system calls through;
         * a report would run instrumented callbacks inside TSan's */
        *ret = ucs_seccomp_syscall(nr, args[0], args[1], args[2], args[3],
                                   args[4], 0);
        return 1;
    }

    self    = &ucs_seccomp_thread;
    call.nr = nr;
    memcpy(call.args, args, 5 * sizeof(*args));
    call.args[5] = 0;
    if (self->depth > 0) {
        ucs_seccomp_later_add(&self->later, &call);
        ucs_seccomp_stat_add(&ucs_seccomp.stats.inthread_later, 1);
    } else if (ucs_ummunotify_locked_here()) {
        /* not in a report of ours, yet under the lock a report takes:
         * leave it to the filter, as without this path */
        return 0;
    } else {
        slot = ucs_seccomp_reporting_enter(self);
        if (slot < 0) {
            return 0;
        }
        ++self->depth;
        n = ucs_seccomp_ranges(&call, 1, r, &type);
        for (i = 0; i < n; ++i) {
            ucs_seccomp_report(type, r[i].start, r[i].end);
        }
        ucs_seccomp_report_later();
        --self->depth;
        ucs_seccomp_reporting_leave(slot);
    }
    ucs_seccomp_stat_add(&ucs_seccomp.stats.inthread, 1);
    *ret = ucs_seccomp_syscall(nr, args[0], args[1], args[2], args[3],
                               args[4], 0);
    return 1;
#else
    return 0;
#endif
}

int ucs_ummunotify_seccomp_call_unreported(int nr, const uint64_t *args,
                                           long *ret)
{
#if REMAPRING_SECCOMP_HAVE_SYSCALL
    if (__atomic_load_n(&ucs_seccomp.inthread, __ATOMIC_ACQUIRE)) {
        *ret = ucs_seccomp_syscall(nr, args[0], args[1], args[2], args[3],
                                   args[4], 0);
        return 1;
    }
#endif
    return 0;
}

/* Report one call, then the reporter's own calls it caused, then let it
 * run. Only the reporter runs this. */
static void ucs_seccomp_report_call(const ucs_seccomp_call_t *call)
{
    ucs_ummunotify_range_t r[2];
    ucs_ummunotify_event_type_t type;
    unsigned n, i;
    uint64_t took;

    __atomic_store_n(&ucs_seccomp.busy_since_ns, ucs_seccomp_now_ns(),
                     __ATOMIC_RELEASE);
    /* its callbacks' calls through the in-thread path wait for the end */
    ++ucs_seccomp_thread.depth;
    n = ucs_seccomp_ranges(call, 1, r, &type);
    for (i = 0; i < n; ++i) {
        ucs_seccomp_report(type, r[i].start, r[i].end);
    }
    ucs_seccomp_report_own();
    ucs_seccomp_report_later();
    --ucs_seccomp_thread.depth;
    took = ucs_seccomp_now_ns() -
           __atomic_exchange_n(&ucs_seccomp.busy_since_ns, 0,
                               __ATOMIC_ACQ_REL);
    if (took > ucs_ummunotify_config.seccomp_timeout * 1e9) {
        ucs_error("notifier seccomp: the invalidation callbacks for "
                  "0x%lx..0x%lx (system call %d of thread %u) ran for "
                  "%.1f s; the calls that waited meanwhile went through "
                  "unreported", (n > 0) ? r[0].start : 0,
                  (n > 0) ? r[0].end : 0, call->nr, call->pid, took / 1e9);
    }

    ucs_seccomp_continue(call->id, 1);
}

/* Become the reporter unless the other worker is, and report everything
 * queued. Whoever enqueued a call calls this after: either it reports,
 * or the reporter (checking the queue again after it stepped down, both
 * sides sequentially consistent) sees the call. */
static void ucs_seccomp_report_queued(pid_t self)
{
    ucs_seccomp_call_t call;
    unsigned head;
    pid_t none;

    do {
        none = 0;
        if (!__atomic_compare_exchange_n(&ucs_seccomp.reporter, &none, self,
                                         0, __ATOMIC_SEQ_CST,
                                         __ATOMIC_SEQ_CST)) {
            return; /* the other worker reports; it drains the queue */
        }
        for (head = ucs_seccomp.qhead;
             head != __atomic_load_n(&ucs_seccomp.qtail, __ATOMIC_ACQUIRE);
             ++head) {
            call = ucs_seccomp.queue[head % UCS_SECCOMP_QUEUE_LEN];
            ucs_seccomp_report_call(&call);
            __atomic_store_n(&ucs_seccomp.qhead, head + 1, __ATOMIC_RELEASE);
        }
        __atomic_store_n(&ucs_seccomp.reporter, 0, __ATOMIC_SEQ_CST);
    } while (__atomic_load_n(&ucs_seccomp.qtail, __ATOMIC_SEQ_CST) != head);
}

/* Queue a call for the reporter; a full queue (more threads waiting than
 * slots) waits for room. The two workers may both enqueue. */
static void ucs_seccomp_enqueue(const struct seccomp_notif *notif)
{
    ucs_seccomp_call_t *call;
    unsigned tail;

    for (;;) {
        while (__atomic_exchange_n(&ucs_seccomp.qlock, 1, __ATOMIC_ACQUIRE)) {
            sched_yield();
        }
        tail = ucs_seccomp.qtail;
        if (tail - __atomic_load_n(&ucs_seccomp.qhead, __ATOMIC_ACQUIRE) <
            UCS_SECCOMP_QUEUE_LEN) {
            break;
        }
        __atomic_store_n(&ucs_seccomp.qlock, 0, __ATOMIC_RELEASE);
        usleep(100);
    }

    call      = &ucs_seccomp.queue[tail % UCS_SECCOMP_QUEUE_LEN];
    call->id  = notif->id;
    call->pid = notif->pid;
    call->nr  = notif->data.nr;
    memcpy(call->args, notif->data.args, sizeof(call->args));
    __atomic_store_n(&ucs_seccomp.qtail, tail + 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&ucs_seccomp.qlock, 0, __ATOMIC_RELEASE);
}

/* A report has run for longer than the timeout: let every queued call
 * through without waiting for it. Runs in the worker that is not
 * reporting; it must not allocate. */
static int ucs_seccomp_check_stuck(void)
{
    uint64_t since = __atomic_load_n(&ucs_seccomp.busy_since_ns,
                                     __ATOMIC_ACQUIRE);
    uint64_t limit = (uint64_t)(ucs_ummunotify_config.seccomp_timeout * 1e9);
    unsigned head, tail;
    char msg[320];
    int len;

    if ((since == 0) || (ucs_seccomp_now_ns() - since < limit)) {
        /* either worker may be the one that is not reporting */
        if ((since == 0) &&
            __atomic_load_n(&ucs_seccomp.degraded, __ATOMIC_RELAXED)) {
            __atomic_store_n(&ucs_seccomp.degraded, 0, __ATOMIC_RELAXED);
        }
        return 0;
    }

    if (!__atomic_exchange_n(&ucs_seccomp.degraded, 1, __ATOMIC_RELAXED)) {
        ucs_seccomp_stat_add(&ucs_seccomp.stats.timeouts, 1);
        /* this worker must not allocate (its own unmap would wait for
         * itself), and UCS's log may: one raw line now, the reporter's
         * ucs_error() when the callback returns */
        len = snprintf(msg, sizeof(msg),
                       "[remapring] notifier seccomp: an invalidation "
                       "callback has run for more than %u ms "
                       "(UCX_REMAPRING_SECCOMP_TIMEOUT); letting unmaps "
                       "proceed without reporting them until it returns: "
                       "registration caches may go stale\n",
                       (unsigned)(limit / 1000000));
        if (len > 0) {
            (void)!write(STDERR_FILENO, msg, ucs_min((size_t)len,
                                                     sizeof(msg) - 1));
        }
    }

    head = __atomic_load_n(&ucs_seccomp.qhead, __ATOMIC_ACQUIRE);
    tail = __atomic_load_n(&ucs_seccomp.qtail, __ATOMIC_ACQUIRE);
    for (; head != tail; ++head) {
        ucs_seccomp_continue(
                ucs_seccomp.queue[head % UCS_SECCOMP_QUEUE_LEN].id, 0);
    }
    return 1;
}

/* Keep the range of a call of the reporter itself, for it to report after
 * its current report. No allocation here. */
static void ucs_seccomp_keep_own(const struct seccomp_notif *notif)
{
    ucs_ummunotify_range_t r[2];
    ucs_ummunotify_event_type_t type;
    ucs_seccomp_call_t call;
    unsigned n, i, own;

    call.nr = notif->data.nr;
    memcpy(call.args, notif->data.args, sizeof(call.args));
    n = ucs_seccomp_ranges(&call, 0, r, &type);
    ucs_seccomp_stat_add(&ucs_seccomp.stats.own, 1);
    for (i = 0; i < n; ++i) {
        own = __atomic_load_n(&ucs_seccomp.own_tail, __ATOMIC_ACQUIRE);
        if (own >= UCS_SECCOMP_OWN_LEN) {
            __atomic_fetch_add(&ucs_seccomp.own_lost, 1, __ATOMIC_RELAXED);
            return;
        }
        ucs_seccomp.own[own] = r[i];
        __atomic_store_n(&ucs_seccomp.own_tail, own + 1, __ATOMIC_RELEASE);
    }
}

/* Whether thread TID belongs to this process. A system call (tgkill)
 * answers; KNOWN, the worker's own cache, keeps the threads it found ours,
 * so the answer costs no system call for a thread that unmaps again. A
 * cached thread that has ended and whose id a fork() child's thread now
 * has is taken for ours: its call is then reported here too, an
 * invalidation for nothing, never a missed one. */
static int ucs_seccomp_is_ours(pid_t *known, pid_t tid)
{
    pid_t *slot = &known[(unsigned)tid % UCS_SECCOMP_KNOWN_TIDS];

    if (*slot == tid) {
        return 1;
    }
    if (syscall(SYS_tgkill, ucs_seccomp.tgid, tid, 0) < 0) {
        return 0;
    }
    *slot = tid;
    return 1;
}

/*
 * A worker. While it is not the reporter it never allocates and makes no
 * call the filter catches, so the other worker can report - and run
 * callbacks that unmap - while it takes notifications.
 */
static void *ucs_seccomp_worker_main(void *arg)
{
    int idx = (int)(uintptr_t)arg;
    union {
        struct seccomp_notif notif;
        char                buf[512];
    } u;
    pid_t known[UCS_SECCOMP_KNOWN_TIDS] = {0};
    struct pollfd pfd;
    pid_t self, other;
    int ret;

    self = (pid_t)syscall(SYS_gettid);
    __atomic_store_n(&ucs_seccomp.worker_tid[idx], self, __ATOMIC_RELEASE);
    /* glibc sets up a thread's allocator cache (and maybe an arena, which
     * it trims with munmap) at its first malloc: here, before the filter,
     * not later in a libc call */
    free(malloc(1));
    if (!ucs_seccomp_wait_go()) {
        return NULL;
    }
    other = __atomic_load_n(&ucs_seccomp.worker_tid[!idx], __ATOMIC_ACQUIRE);

    pfd.fd     = ucs_seccomp.listener;
    pfd.events = POLLIN;
    for (;;) {
        /* while calls wait for a report, tick to see a stuck one; else
         * wait in RECV itself (the kernel wakes a waiter there on the
         * calling thread's CPU, with SYNC_WAKE_UP) */
        if (__atomic_load_n(&ucs_seccomp.qtail, __ATOMIC_ACQUIRE) !=
            __atomic_load_n(&ucs_seccomp.qhead, __ATOMIC_ACQUIRE)) {
            ret = poll(&pfd, 1, UCS_SECCOMP_TICK_MS);
            if (ret <= 0) {
                ucs_seccomp_check_stuck(); /* also on EINTR: harmless */
                continue;
            }
        }

        memset(&u, 0, ucs_seccomp.sizes.seccomp_notif);
        if (ioctl(ucs_seccomp.listener, SECCOMP_IOCTL_NOTIF_RECV, &u) < 0) {
            continue; /* ENOENT: the caller went away; EINTR */
        }
        ucs_seccomp_stat_add(&ucs_seccomp.stats.calls, 1);

        if ((pid_t)u.notif.pid == other) {
            /* the reporter's own call: through at once, reported after */
            ucs_seccomp_keep_own(&u.notif);
            ucs_seccomp_continue(u.notif.id, 0);
            continue;
        }

        if (ucs_seccomp_keep_for_reporter(&u.notif)) {
            /* a call of a thread reporting in-thread: the same */
            ucs_seccomp_continue(u.notif.id, 0);
            continue;
        }

        if (!ucs_seccomp_is_ours(known, (pid_t)u.notif.pid)) {
            /* not a thread of this process: a fork() child or a program it
             * exec()'d, which share the filter but not our memory */
            ucs_seccomp_stat_add(&ucs_seccomp.stats.foreign, 1);
            ucs_seccomp_continue(u.notif.id, 0);
            continue;
        }

        if (ucs_seccomp_check_stuck()) {
            ucs_seccomp_stat_add(&ucs_seccomp.stats.unreported, 1);
            ucs_seccomp_continue(u.notif.id, 0);
            continue;
        }

        ucs_seccomp_enqueue(&u.notif);
        ucs_seccomp_report_queued(self);
    }

    return NULL;
}

/* --------------------------------------------------- ranges of one call */

/* Size of the mapping that starts at addr, from /proc/self/maps (shmdt). */
static size_t ucs_seccomp_mapping_size(uintptr_t addr)
{
    unsigned long start, end;
    char line[256];
    size_t size = 0;
    FILE *maps;

    maps = fopen("/proc/self/maps", "r");
    if (maps == NULL) {
        return 0;
    }
    while (fgets(line, sizeof(line), maps) != NULL) {
        if ((sscanf(line, "%lx-%lx", &start, &end) == 2) &&
            (start == addr)) {
            size = end - start;
            break;
        }
        /* a long path name: skip the rest of the line */
        while ((strchr(line, '\n') == NULL) &&
               (fgets(line, sizeof(line), maps) != NULL)) {
        }
    }
    fclose(maps);
    return size;
}

static unsigned ucs_seccomp_ranges(const ucs_seccomp_call_t *call,
                                   int may_allocate, ucs_ummunotify_range_t *r,
                                   ucs_ummunotify_event_type_t *type)
{
    const uint64_t *a = call->args;
    struct shmid_ds ds;
    uintptr_t cur;

    *type = UCS_UMMUNOTIFY_EVENT_UNMAP;
    switch (call->nr) {
    case SYS_munmap:
    case SYS_mmap: /* MAP_FIXED over what is there */
        r[0].start = a[0];
        r[0].end   = a[0] + a[1];
        return 1;
    case SYS_madvise:
        *type      = UCS_UMMUNOTIFY_EVENT_REMOVE;
        r[0].start = a[0];
        r[0].end   = a[0] + a[1];
        return 1;
    case SYS_mremap: /* (old, old_size, new_size, flags, new_addr) */
        *type      = UCS_UMMUNOTIFY_EVENT_REMAP;
        r[0].start = a[0];
        r[0].end   = a[0] + a[1]; /* old_size 0: duplicates, takes none */
        if (a[3] & MREMAP_FIXED) {
            r[1].start = a[4];
            r[1].end   = a[4] + a[2];
            return 2;
        }
        return 1;
    case SYS_shmdt:
        if (!may_allocate) {
            /* the reporter detaching a segment: never happens in UCX's
             * callbacks; counted, not sized */
            ucs_seccomp_stat_add(&ucs_seccomp.stats.unreported, 1);
            return 0;
        }
        r[0].start = a[0];
        r[0].end   = a[0] + ucs_seccomp_mapping_size(a[0]);
        return 1;
    case SYS_shmat: /* SHM_REMAP over what is there */
        if (shmctl((int)a[0], IPC_STAT, &ds) < 0) {
            return 0; /* the call will fail the same way */
        }
        r[0].start = a[1];
        r[0].end   = a[1] + ds.shm_segsz;
        return 1;
    case SYS_brk:
        cur = (uintptr_t)syscall(SYS_brk, 0);
        if (a[0] >= cur) {
            return 0; /* growing */
        }
        r[0].start = a[0];
        r[0].end   = cur;
        return 1;
    default:
        return 0;
    }
}

/* ------------------------------------------------------------- the guard */

/*
 * Runs in a process cloned before the filter exists: only system calls,
 * nothing that may hold a lock another thread of the parent held.
 */
static UCS_F_NOINLINE void ucs_seccomp_guard_main(int sock)
{
    struct seccomp_notif_resp resp;
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct pollfd pfd;
    struct msghdr msg;
    struct iovec iov;
    char byte, nbuf[512];
    int listener = -1;
    ssize_t ret;

    memset(&msg, 0, sizeof(msg));
    iov.iov_base       = &byte;
    iov.iov_len        = 1;
    msg.msg_iov        = &iov;
    msg.msg_iovlen     = 1;
    msg.msg_control    = cbuf;
    msg.msg_controllen = sizeof(cbuf);
    if ((recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) <= 0) ||
        (CMSG_FIRSTHDR(&msg) == NULL)) {
        syscall(SYS_exit_group, 0); /* the filter was not installed */
    }
    memcpy(&listener, CMSG_DATA(CMSG_FIRSTHDR(&msg)), sizeof(int));

    /* wait until the socket closes: exit or execve() of the parent, or
     * the parent's fork() children exiting or exec()ing */
    pfd.fd     = sock;
    pfd.events = POLLIN;
    for (;;) {
        ret = read(sock, &byte, 1);
        if ((ret == 0) || ((ret < 0) && (errno != EINTR))) {
            break;
        }
    }

    pfd.fd = listener;
    for (;;) {
        if (poll(&pfd, 1, -1) < 0) {
            continue;
        }
        if (pfd.revents & (POLLHUP | POLLERR | POLLNVAL)) {
            syscall(SYS_exit_group, 0); /* nobody uses the filter */
        }
        memset(nbuf, 0, sizeof(nbuf));
        if (ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, nbuf) < 0) {
            continue;
        }
        memset(&resp, 0, sizeof(resp));
        resp.id    = ((struct seccomp_notif*)nbuf)->id;
        resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
        (void)ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp);
    }
}

static ucs_status_t ucs_seccomp_guard_start(int *sock_p)
{
    int sv[2];
    long pid;

    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
        snprintf(ucs_seccomp.why, sizeof(ucs_seccomp.why),
                 "socketpair() for the guard failed: %m");
        return UCS_ERR_IO_ERROR;
    }

    /* a plain clone: no fork handlers run (ours take locks), and with no
     * exit signal it is a "clone child" that wait() and waitpid(-1) do not
     * see, so it does not disturb the application's children */
    pid = syscall(SYS_clone, 0, NULL, NULL, NULL, NULL);
    if (pid < 0) {
        snprintf(ucs_seccomp.why, sizeof(ucs_seccomp.why),
                 "clone() of the guard failed: %m");
        close(sv[0]);
        close(sv[1]);
        return UCS_ERR_IO_ERROR;
    } else if (pid == 0) {
        close(sv[0]);
        ucs_seccomp_guard_main(sv[1]);
        syscall(SYS_exit_group, 0);
    }

    close(sv[1]);
    ucs_seccomp.guard = (pid_t)pid;
    *sock_p           = sv[0];
    return UCS_OK;
}

static void ucs_seccomp_guard_send(int sock, int listener)
{
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr *cmsg;
    struct msghdr msg;
    struct iovec iov;
    char byte = 0;

    memset(&msg, 0, sizeof(msg));
    memset(cbuf, 0, sizeof(cbuf));
    iov.iov_base       = &byte;
    iov.iov_len        = 1;
    msg.msg_iov        = &iov;
    msg.msg_iovlen     = 1;
    msg.msg_control    = cbuf;
    msg.msg_controllen = sizeof(cbuf);
    cmsg               = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level   = SOL_SOCKET;
    cmsg->cmsg_type    = SCM_RIGHTS;
    cmsg->cmsg_len     = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cmsg), &listener, sizeof(int));
    if (sendmsg(sock, &msg, MSG_NOSIGNAL) < 0) {
        ucs_warn("notifier seccomp: cannot hand the listener to the guard: "
                 "%m; programs this process exec()s after it exits may get "
                 "ENOSYS from munmap()");
    }
}

/* ----------------------------------------------------------------- start */

/* Whether starting is safe without being asked: the process may already
 * hold no_new_privs, or may install filters without it. */
static int ucs_seccomp_privileged(void)
{
    struct __user_cap_header_struct {
        uint32_t version;
        int      pid;
    } hdr = {0x20080522, 0};
    struct {
        uint32_t effective, permitted, inheritable;
    } data[2];

    if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1) {
        return 1;
    }
    if (syscall(SYS_capget, &hdr, data) < 0) {
        return 0;
    }
    return !!(data[0].effective & (1u << 21)); /* CAP_SYS_ADMIN */
}

static int ucs_seccomp_hooks_off(void)
{
    const char *mode = getenv("UCX_MEM_MMAP_HOOK_MODE");

    return (mode != NULL) && !strcasecmp(mode, "none");
}

static ucs_status_t ucs_seccomp_install(void)
{
    struct sock_fprog prog;
    unsigned long flags;
    int fd;

    prog.len    = sizeof(ucs_seccomp_program) / sizeof(ucs_seccomp_program[0]);
    prog.filter = ucs_seccomp_program;
    if (ucs_seccomp.tsan_end > ucs_seccomp.tsan_start) {
        ucs_seccomp_program[UCS_SECCOMP_PROG_TSAN_HI].k =
                (uint32_t)((uint64_t)ucs_seccomp.tsan_start >> 32);
        ucs_seccomp_program[UCS_SECCOMP_PROG_TSAN_LO].k =
                (uint32_t)ucs_seccomp.tsan_start;
        ucs_seccomp_program[UCS_SECCOMP_PROG_TSAN_END].k =
                (uint32_t)ucs_seccomp.tsan_end;
    }
#if REMAPRING_SECCOMP_HAVE_SYSCALL
    if (ucs_ummunotify_config.seccomp_inthread) {
        ucs_seccomp_program[UCS_SECCOMP_PROG_IP_LO].k =
                (uint32_t)(uintptr_t)ucs_seccomp_syscall_ip;
        ucs_seccomp_program[UCS_SECCOMP_PROG_IP_HI].k =
                (uint32_t)((uint64_t)(uintptr_t)ucs_seccomp_syscall_ip >> 32);
    }
#endif

    if (!ucs_seccomp_privileged() &&
        (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)) {
        snprintf(ucs_seccomp.why, sizeof(ucs_seccomp.why),
                 "prctl(PR_SET_NO_NEW_PRIVS) failed: %m");
        return UCS_ERR_UNSUPPORTED;
    }

    flags = SECCOMP_FILTER_FLAG_NEW_LISTENER | SECCOMP_FILTER_FLAG_TSYNC |
            SECCOMP_FILTER_FLAG_TSYNC_ESRCH |
            SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV;
    fd    = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog);
    if ((fd < 0) && (errno == EINVAL)) {
        /* before Linux 5.19: a signal may interrupt a waiting call, which
         * the kernel then restarts */
        flags &= ~SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV;
        fd     = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags,
                              &prog);
    }
    if (fd < 0) {
        ucs_seccomp.inherited = (errno == EBUSY);
        snprintf(ucs_seccomp.why, sizeof(ucs_seccomp.why),
                 "seccomp(SET_MODE_FILTER, NEW_LISTENER|TSYNC) failed: %m%s",
                 (errno == EBUSY) ? " (a filter with a listener exists "
                                    "already: inherited from a parent that "
                                    "runs this source?)" :
                 (errno == EINVAL) ? " (kernel older than 5.7?)" : "");
        return UCS_ERR_UNSUPPORTED;
    }

    /* Linux 6.6: the kernel wakes the worker on the calling thread's CPU
     * and the caller on the worker's, which waits for it anyway: no
     * cross-CPU wake-up per call */
    ucs_seccomp.sync_wake = (ioctl(fd, SECCOMP_IOCTL_NOTIF_SET_FLAGS,
                                   SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP) == 0);
    ucs_seccomp.listener  = fd;
    return UCS_OK;
}

static ucs_status_t ucs_seccomp_start_threads(void)
{
    pthread_attr_t attr;
    char name[16];
    int ret = 0, i, n;

    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    for (n = 0; (n < 2) && (ret == 0); ++n) {
        ret = pthread_create(&ucs_seccomp.workers[n], &attr,
                             ucs_seccomp_worker_main, (void*)(uintptr_t)n);
    }
    pthread_attr_destroy(&attr);
    if (ret != 0) {
        ucs_seccomp_set_go(-1);
        for (i = 0; i < n - 1; ++i) {
            pthread_join(ucs_seccomp.workers[i], NULL);
        }
        snprintf(ucs_seccomp.why, sizeof(ucs_seccomp.why),
                 "pthread_create() failed: %s", strerror(ret));
        return UCS_ERR_NO_RESOURCE;
    }

    for (i = 0; i < 2; ++i) {
        snprintf(name, sizeof(name), "rmr-seccomp-%d", i);
        pthread_setname_np(ucs_seccomp.workers[i], name);
    }
    while (__atomic_load_n(&ucs_seccomp.ready, __ATOMIC_ACQUIRE) < 2) {
        sched_yield();
    }
    return UCS_OK;
}

typedef struct {
    uintptr_t addr;  /* an address in the code looked for */
    uintptr_t start;
    uintptr_t end;
} ucs_seccomp_segment_t;

static int ucs_seccomp_find_segment(struct dl_phdr_info *info, size_t size,
                                    void *arg)
{
    ucs_seccomp_segment_t *seg = arg;
    uintptr_t start;
    int i;

    for (i = 0; i < info->dlpi_phnum; ++i) {
        if ((info->dlpi_phdr[i].p_type != PT_LOAD) ||
            !(info->dlpi_phdr[i].p_flags & PF_X)) {
            continue;
        }
        start = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
        if ((seg->addr >= start) &&
            (seg->addr < start + info->dlpi_phdr[i].p_memsz)) {
            seg->start = start;
            seg->end   = start + info->dlpi_phdr[i].p_memsz;
            return 1;
        }
    }
    return 0;
}

/*
 * Under ThreadSanitizer: the range of its runtime's code, whose own system
 * calls (its shadow memory, the memory of its allocator, which serves the
 * program's malloc()) the filter lets through unreported - else a worker
 * that TSan's code, running inside the worker's own calls, makes map or
 * unmap waits for itself. The price: what TSan's allocator gives back of
 * the heap goes unreported, in a TSan build. Returns 0 if TSan runs and
 * its code was not found (or crosses a 4 GiB boundary, which the filter's
 * 32-bit comparisons cannot take); 1 otherwise, the range empty without
 * TSan.
 */
static int ucs_seccomp_tsan_code(uintptr_t *start, uintptr_t *end)
{
    ucs_seccomp_segment_t seg = {0, 0, 0};

    *start = *end = 0;
    seg.addr      = (uintptr_t)dlsym(RTLD_DEFAULT, "__tsan_init");
    if (seg.addr == 0) {
        return 1;
    }
    if (!dl_iterate_phdr(ucs_seccomp_find_segment, &seg) ||
        ((seg.start >> 32) != ((seg.end - 1) >> 32))) {
        return 0;
    }
    *start = seg.start;
    *end   = seg.end;
    return 1;
}

/* Start the source (once). */
static void ucs_seccomp_start_source(void)
{
    ucs_ummunotify_engine_t want = ucs_ummunotify_config.engine;
    ucs_status_t status;
    int sock;

    ucs_seccomp.tgid = getpid();
    ucs_seccomp.page = (size_t)sysconf(_SC_PAGESIZE);
    if (!ucs_seccomp_tsan_code(&ucs_seccomp.tsan_start,
                               &ucs_seccomp.tsan_end)) {
        /* seen: a worker waiting in TSan's own mmap(MAP_FIXED) while the
         * other reported, every call of the process stuck behind them */
        snprintf(ucs_seccomp.why, sizeof(ucs_seccomp.why),
                 "ThreadSanitizer's runtime maps and unmaps memory at fixed "
                 "addresses from within any thread's calls, the source's "
                 "own threads too, and its code could not be found to let "
                 "those calls through");
        goto failed;
    }
    if (syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &ucs_seccomp.sizes) <
        0) {
        snprintf(ucs_seccomp.why, sizeof(ucs_seccomp.why),
                 "seccomp(GET_NOTIF_SIZES) failed: %m (kernel older than "
                 "5.0, or seccomp disabled)");
        goto failed;
    }
    if (ucs_seccomp.sizes.seccomp_notif > 512) {
        snprintf(ucs_seccomp.why, sizeof(ucs_seccomp.why),
                 "the kernel's notification is %u bytes, more than 512",
                 ucs_seccomp.sizes.seccomp_notif);
        goto failed;
    }

    /* threads and guard first: once the filter is there, whoever unmaps
     * waits for a worker */
    if (ucs_seccomp_start_threads() != UCS_OK) {
        goto failed;
    }
    if (ucs_seccomp_guard_start(&sock) != UCS_OK) {
        goto failed_threads;
    }

    status = ucs_seccomp_install();
    if (status != UCS_OK) {
        close(sock); /* the guard exits: reap it */
        waitpid(ucs_seccomp.guard, NULL, __WCLONE);
        goto failed_threads;
    }

    ucs_seccomp_guard_send(sock, ucs_seccomp.listener);
    ucs_seccomp.guard_sock = sock;
    ucs_seccomp_set_go(1);

    /* before any UCS cache subscribes: they install no hooks for it */
    ucm_set_external_event(UCM_EVENT_VM_UNMAPPED);
    __atomic_store_n(&ucs_seccomp.state, 1, __ATOMIC_RELEASE);
    if (ucs_ummunotify_config.seccomp_inthread) {
        __atomic_store_n(&ucs_seccomp.inthread,
                         REMAPRING_SECCOMP_HAVE_SYSCALL, __ATOMIC_RELEASE);
    }
    snprintf(ucs_seccomp.why, sizeof(ucs_seccomp.why),
             "seccomp user notification on munmap, mremap, madvise, "
             "mmap/shmat over, shmdt, brk (guard pid %d, %s wake-up); "
             "in-thread path for the C library's munmap, madvise, mremap: "
             "%s", ucs_seccomp.guard,
             ucs_seccomp.sync_wake ? "same-CPU" : "cross-CPU",
             !ucs_seccomp.inthread ?
                     (REMAPRING_SECCOMP_HAVE_SYSCALL ?
                              "off (UCX_REMAPRING_SECCOMP_INTHREAD=n)" :
                              "none on this architecture") :
             ((ucs_ummunotify_inthread_interposed != NULL) &&
              ucs_ummunotify_inthread_interposed()) ?
                     "on" :
                     "on, but the process calls the C library's own (this "
                     "library is not preloaded)");
    ucs_info("notifier: seccomp source started: %s; UCM_EVENT_VM_UNMAPPED "
             "is external", ucs_seccomp.why);
    return;

failed_threads:
    /* the threads wait for 'go'; with no listener they must not run */
    ucs_seccomp_set_go(-1);
    pthread_join(ucs_seccomp.workers[0], NULL);
    pthread_join(ucs_seccomp.workers[1], NULL);
failed:
    ucs_seccomp.state = -1;
    if (ucs_seccomp.inherited) {
        /* a program exec()'d by a process that runs the source, or its
         * fork() child: expected, said once at diag level */
        ucs_diag("notifier: seccomp source not started: %s",
                 ucs_seccomp.why);
    } else if (want == UCS_UMMUNOTIFY_ENGINE_SECCOMP) {
        ucs_error("notifier engine seccomp requested "
                  "(UCX_REMAPRING_NOTIFIER=seccomp) but unavailable: %s",
                  ucs_seccomp.why);
    } else {
        ucs_diag("notifier: UCM's mmap hooks are off, but the seccomp "
                 "source is unavailable: %s", ucs_seccomp.why);
    }
}

/*
 * When it starts. The source must run before the first UCS cache
 * subscribes to UCM_EVENT_VM_UNMAPPED, and a process that never uses a
 * cache (an MPI launcher, a shell, with the same environment) should not
 * get a filter at all: its children would inherit it, and a process can
 * have only one listener, so the ranks could not start their own. So this
 * library defines ucm_set_event_handler(): where that definition is the
 * one the process uses (the module preloaded, or linked into the program)
 * the source starts in the first call that asks for VM_UNMAPPED, then the
 * call goes on to UCM's. Where it is not (the module dlopen()ed by UCX's
 * own loader, RTLD_LOCAL), the source starts when the library is loaded,
 * which is before UCX opens any memory domain.
 */
static pthread_mutex_t ucs_seccomp_start_lock = PTHREAD_MUTEX_INITIALIZER;
static int             ucs_seccomp_wanted;

typedef ucs_status_t (*ucs_seccomp_set_handler_t)(int, int,
                                                  ucm_event_callback_t,
                                                  void*);

static void ucs_seccomp_start_once(void)
{
    pthread_mutex_lock(&ucs_seccomp_start_lock);
    if (ucs_seccomp_wanted && (ucs_seccomp.state == 0)) {
        ucs_seccomp_start_source();
    }
    pthread_mutex_unlock(&ucs_seccomp_start_lock);
}

__attribute__((visibility("default"))) ucs_status_t
ucm_set_event_handler(int events, int priority, ucm_event_callback_t cb,
                      void *arg)
{
    static ucs_seccomp_set_handler_t real;

    if (real == NULL) {
        real = (ucs_seccomp_set_handler_t)dlsym(RTLD_NEXT,
                                                "ucm_set_event_handler");
        if (real == NULL) {
            return UCS_ERR_UNSUPPORTED;
        }
    }
    if ((events & UCM_EVENT_VM_UNMAPPED) && ucs_seccomp_wanted) {
        ucs_seccomp_start_once();
    }
    return real(events, priority, cb, arg);
}

void ucs_ummunotify_seccomp_init(void)
{
    ucs_ummunotify_engine_t want = ucs_ummunotify_config.engine;

    if (want == UCS_UMMUNOTIFY_ENGINE_AUTO) {
        /* only where UCX's caches would otherwise go stale, and without
         * changing what the process may do (no_new_privs) */
        if (!ucs_seccomp_hooks_off() ||
            !ucs_seccomp_privileged()) {
            return;
        }
    } else if (want != UCS_UMMUNOTIFY_ENGINE_SECCOMP) {
        return;
    }

    ucs_seccomp_wanted = 1;
    if (dlsym(RTLD_DEFAULT, "ucm_set_event_handler") !=
        (void*)ucm_set_event_handler) {
        ucs_seccomp_start_once();
    }
}

void ucs_ummunotify_seccomp_start(void)
{
    ucs_seccomp_start_once();
}

int ucs_ummunotify_seccomp_wanted(void)
{
    return ucs_seccomp_wanted;
}

int ucs_ummunotify_seccomp_running(void)
{
    return __atomic_load_n(&ucs_seccomp.state, __ATOMIC_ACQUIRE) == 1;
}

void ucs_ummunotify_seccomp_get_stats(ucs_ummunotify_seccomp_stats_t *stats)
{
    /* the counters are uint64_t, one after the other */
    const uint64_t *src = (const uint64_t*)&ucs_seccomp.stats;
    uint64_t *dst       = (uint64_t*)stats;
    size_t i;

    UCS_STATIC_ASSERT(sizeof(*stats) % sizeof(uint64_t) == 0);
    for (i = 0; i < sizeof(*stats) / sizeof(uint64_t); ++i) {
        dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
    }
}

/* ------------------------------------------------------- engine for core */

static ucs_status_t ucs_seccomp_start(char *why, size_t max)
{
    snprintf(why, max, "%s", ucs_seccomp.why[0] ? ucs_seccomp.why :
                             "not started when the library was loaded");
    return ucs_ummunotify_seccomp_running() ? UCS_OK : UCS_ERR_UNSUPPORTED;
}

static void ucs_seccomp_stop(void)
{
    /* the source runs until the process exits: calls made after a stop
     * would otherwise wait for nobody */
}

static ucs_status_t ucs_seccomp_subscribe(uintptr_t start, uintptr_t end)
{
    return UCS_OK; /* every call of the process is seen */
}

static void ucs_seccomp_unsubscribe(uintptr_t start, uintptr_t end)
{
}

static int ucs_seccomp_fork_child(void)
{
    /* no worker here, and a listener cannot be installed again (EBUSY):
     * the child's calls are let through by the parent's workers, or by the
     * guard once the parent is gone - which needs these closed */
    if (ucs_seccomp.listener >= 0) {
        close(ucs_seccomp.listener);
        ucs_seccomp.listener = -1;
    }
    if (ucs_seccomp.guard_sock >= 0) {
        close(ucs_seccomp.guard_sock);
        ucs_seccomp.guard_sock = -1;
    }
    ucs_seccomp.state    = -1;
    ucs_seccomp.inthread = 0; /* nothing to report to here */
    snprintf(ucs_seccomp.why, sizeof(ucs_seccomp.why),
             "a fork() child cannot have its own listener (the parent's "
             "filter is inherited)");
    return 0;
}

/* fork() children of a process whose notifier core never started still
 * must close the copies */
void ucs_ummunotify_seccomp_atfork_child(void)
{
    if (ucs_seccomp.state == 1) {
        (void)ucs_seccomp_fork_child();
    }
}

const ucs_ummunotify_ops_t ucs_ummunotify_seccomp_ops = {
    .name        = "seccomp",
    .type        = UCS_UMMUNOTIFY_ENGINE_SECCOMP,
    .start       = ucs_seccomp_start,
    .stop        = ucs_seccomp_stop,
    .subscribe   = ucs_seccomp_subscribe,
    .unsubscribe = ucs_seccomp_unsubscribe,
    .fork_child  = ucs_seccomp_fork_child
};
