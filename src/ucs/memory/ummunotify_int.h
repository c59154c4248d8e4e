/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef UCS_UMMUNOTIFY_INT_H_
#define UCS_UMMUNOTIFY_INT_H_

/*
 * Private interface between the notifier core (ummunotify.c), its engines
 * (ummunotify_uffd.c, ummunotify_ucm.c) and the UCM bridge (ucm_bridge.c).
 *
 * Lock order: state_lock -> lock -> (client locks taken by SYNC callbacks)
 *             -> worker lock.
 * Nobody calls malloc() or free() with 'lock' held: free() may trim the heap
 * (brk shrink / munmap), and if that memory is watched the kernel makes the
 * caller wait for the monitor, which waits for 'lock'.
 */

#include <ucs/memory/ummunotify.h>
#include <ucs/datastruct/list.h>
#include <pthread.h>
#include <sys/mman.h>


#ifndef MADV_DONTNEED_LOCKED
#  define MADV_DONTNEED_LOCKED 24 /* Linux 5.18 */
#endif


/**
 * @return Nonzero if madvise() with ADVICE takes memory away (what the
 *         sources report; other advice leaves the pages in place).
 */
static inline int ucs_ummunotify_madv_discards(long advice)
{
    return (advice == MADV_DONTNEED) || (advice == MADV_FREE) ||
           (advice == MADV_REMOVE) || (advice == MADV_DONTNEED_LOCKED);
}


/* Engine operations: the shape of libfabric's memory monitors. */
typedef struct ucs_ummunotify_ops {
    const char              *name;
    ucs_ummunotify_engine_t type;

    /* Start the engine. On failure, write why into @a why (one line, no
     * logging: the core logs the decision once). Called with state_lock. */
    ucs_status_t            (*start)(char *why, size_t max);

    /* Stop the engine; called with state_lock but without lock. */
    void                    (*stop)(void);

    /* Watch / stop watching page-aligned [start, end). Called with lock.
     * subscribe logs its own failure. */
    ucs_status_t            (*subscribe)(uintptr_t start, uintptr_t end);
    void                    (*unsubscribe)(uintptr_t start, uintptr_t end);

    /* In a fork() child (single threaded, all locks held by the caller):
     * drop what belongs to the parent. Return nonzero if the engine is still
     * usable in the child, zero if it must be started again. */
    int                     (*fork_child)(void);
} ucs_ummunotify_ops_t;


/* Engine state. */
typedef enum {
    UCS_UMMUNOTIFY_STATE_IDLE,    /* not started, or stopped */
    UCS_UMMUNOTIFY_STATE_RUNNING,
    UCS_UMMUNOTIFY_STATE_FORKED,  /* fork child: start again on first use */
    UCS_UMMUNOTIFY_STATE_FAILED   /* no engine could start; retried on open */
} ucs_ummunotify_state_t;


/* Settings (UCX_REMAPRING_*), see the table in ummunotify.c. */
typedef struct {
    ucs_ummunotify_engine_t engine;
    double                  spin;          /* monitor busy-poll, seconds */
    int                     cpu;           /* monitor affinity, -1: none */
    int                     ucm_report;
    int                     ucm_external;
    double                  seccomp_timeout; /* seconds */
    int                     seccomp_inthread;
} ucs_ummunotify_config_t;


extern const ucs_ummunotify_ops_t ucs_ummunotify_uffd_ops;
extern const ucs_ummunotify_ops_t ucs_ummunotify_ucm_ops;
extern const ucs_ummunotify_ops_t ucs_ummunotify_seccomp_ops;
extern ucs_ummunotify_config_t    ucs_ummunotify_config;


/* A range the monitor should report to UCM after applying a batch. */
typedef struct {
    uintptr_t start;
    uintptr_t end;
} ucs_ummunotify_range_t;


/**
 * Begin applying invalidations: make the generation counter odd. Called by
 * the only writer at a time (uffd: the monitor, ucm: under lock).
 */
static inline void ucs_ummunotify_seq_begin(void)
{
    __atomic_fetch_add(&ucs_ummunotify_seq, 1, __ATOMIC_SEQ_CST);
}


/**
 * End applying invalidations: make the generation counter even again.
 */
static inline void ucs_ummunotify_seq_end(void)
{
    __atomic_fetch_add(&ucs_ummunotify_seq, 1, __ATOMIC_RELEASE);
}


/**
 * Take / release the notifier lock (engines applying events).
 */
void ucs_ummunotify_lock(void);
void ucs_ummunotify_unlock(void);


/**
 * Apply one invalidation of [start, end) to every registration it touches:
 * unlink them, mark them invalid, deliver the events. Called with the lock
 * held and the counter odd.
 *
 * @return Nonzero if any registration was touched.
 */
int ucs_ummunotify_apply(ucs_ummunotify_event_type_t type, uintptr_t start,
                         uintptr_t end);


/**
 * UCM bridge: report [start, end) as unmapped to UCM (ucm_vm_munmap), so UCS
 * caches drop it. Called by the monitor without lock, counter odd.
 */
void ucs_ummunotify_ucm_report(uintptr_t start, uintptr_t end);


/**
 * UCM bridge: declare UCM_EVENT_VM_UNMAPPED external if configured. Called
 * once from the library constructor.
 */
void ucs_ummunotify_ucm_bridge_init(void);


/**
 * @return Nonzero if this process declared UCM_EVENT_VM_UNMAPPED external.
 */
int ucs_ummunotify_ucm_is_external(void);


/* What the pre-report did (ummunotify_prereport.c); written by the monitor
 * only, read with relaxed loads. */
typedef struct {
    uint64_t scans;    /* scans of the task list, one per event read */
    uint64_t covered;  /* events whose range a scan had reported */
    uint64_t missed;   /* events reported only after read() */
} ucs_ummunotify_prereport_stats_t;

extern ucs_ummunotify_prereport_stats_t ucs_ummunotify_prereport_stats;


/**
 * Pre-report: open /proc/self/task. Called by the uffd engine's start when
 * UCM_EVENT_VM_UNMAPPED is external and reports go to UCM.
 *
 * @return Nonzero if the pre-report is active; zero (logged at debug) if
 *         the task list cannot be read: events are then reported after
 *         read() only.
 */
int ucs_ummunotify_prereport_open(void);


/**
 * Pre-report: close what open() and the scans opened. Called by the uffd
 * engine's stop and in a fork() child; safe when not active.
 */
void ucs_ummunotify_prereport_close(void);


/**
 * @return Nonzero between a successful open() and close().
 */
int ucs_ummunotify_prereport_active(void);


/**
 * Pre-report: report to UCM the range every other thread of the process is
 * unmapping or remapping in a system call, as its arguments say. Called by
 * the monitor when the userfaultfd is readable, before read(), active only.
 *
 * @param [in] woken  Nonzero if the userfaultfd was readable right after the
 *                    last read(): threads waiting on an event may have been
 *                    woken by its completion; look again at running ones.
 */
void ucs_ummunotify_prereport(int woken);


/**
 * Pre-report: count whether [start, end), an event read after the last
 * scan, was within a range that scan reported.
 */
void ucs_ummunotify_prereport_check(uintptr_t start, uintptr_t end);


/* What the seccomp source did since it started (relaxed counters). */
typedef struct {
    uint64_t calls;      /* notifications read */
    uint64_t reported;   /* ranges reported (table and UCM) */
    uint64_t own;        /* calls of the reporting worker, reported after */
    uint64_t foreign;    /* calls of other processes (fork children, exec) */
    uint64_t unreported; /* let through unreported (timeout, own shmdt) */
    uint64_t timeouts;   /* times a report ran past the timeout */
    uint64_t abandoned;  /* answers the kernel no longer wanted */
    uint64_t inthread;   /* calls reported in their own thread */
    uint64_t inthread_later; /* of those, made during a report, after it */
} ucs_ummunotify_seccomp_stats_t;


/**
 * Seccomp source: start it if configured (UCX_REMAPRING_NOTIFIER=seccomp,
 * or auto with UCM's mmap hooks off in a process that may install filters
 * without changing its privileges). Called once from the constructor,
 * after the settings are read and before any UCS cache can subscribe.
 */
void ucs_ummunotify_seccomp_init(void);


/**
 * @return Nonzero if the seccomp source is configured to start here (it
 *         starts with the first UCS cache, see ummunotify_seccomp.c).
 */
int ucs_ummunotify_seccomp_wanted(void);


/**
 * Start the seccomp source now if it is wanted and not yet started (the
 * notifier's first client, before any UCS cache).
 */
void ucs_ummunotify_seccomp_start(void);


/**
 * @return Nonzero if the seccomp source runs in this process.
 */
int ucs_ummunotify_seccomp_running(void);


/**
 * Copy the seccomp source's counters.
 */
void ucs_ummunotify_seccomp_get_stats(ucs_ummunotify_seccomp_stats_t *stats);


/**
 * The seccomp source's in-thread path, for the C library's munmap(),
 * madvise() and mremap() this library defines (ummunotify_inthread.c):
 * where the source runs with it, report the call NR with ARGS in this
 * thread, make it from the one instruction the filter lets through and
 * give the kernel's result (a negative errno on failure) in *RET. CALLER,
 * the address the call came from, tells ThreadSanitizer's own calls.
 *
 * @return Nonzero if the call was made; zero if the caller must make it
 *         as usual (then the filter stops it, where the source runs).
 */
int ucs_ummunotify_seccomp_call(int nr, const uint64_t *args, long *ret,
                                uintptr_t caller);


/**
 * For benchmarks: where the in-thread path runs, make the call NR from the
 * instruction the filter lets through without reporting it (what the
 * report costs is the difference). Returns nonzero if it was made.
 */
int ucs_ummunotify_seccomp_call_unreported(int nr, const uint64_t *args,
                                           long *ret);


/**
 * @return Nonzero if this thread holds the notifier lock.
 */
int ucs_ummunotify_locked_here(void);


/**
 * In a fork() child: close the copies of the listener and of the guard's
 * socket (the child has no reader). Run by a pthread_atfork handler.
 */
void ucs_ummunotify_seccomp_atfork_child(void);

#endif
