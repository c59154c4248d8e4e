/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef UCS_UMMUNOTIFY_H_
#define UCS_UMMUNOTIFY_H_

/*
 * ummunotify on a stock kernel.
 *
 * A client opens a notifier, registers address ranges, each with a 64-bit
 * cookie, and learns about every change the kernel makes to them (munmap,
 * mmap(MAP_FIXED) over, mremap, madvise(DONTNEED/FREE/REMOVE), brk shrink)
 * as events (cookie, range), delivered to a callback or read from a queue.
 *
 * The generation counter is one 64-bit word that the engine makes odd before
 * it reads invalidations from the kernel and even again after it has applied
 * them to every client (removed the registrations, run the synchronous
 * callbacks, queued the events). A reader that wants a consistent view:
 *
 *     do {
 *         gen = ucs_ummunotify_read_begin();
 *         ... look up own data structures ...
 *     } while (ucs_ummunotify_read_retry(gen));
 *
 * Guarantee: once munmap() (or any other call that invalidates a registered
 * range) has returned, such a reader never observes the state from before
 * the invalidation.
 *
 * A registration is one-shot, as in ummunotify: the first event that touches
 * it delivers the event and marks it invalid; no further events are
 * delivered for it. It must still be released with
 * @ref ucs_ummunotify_unregister.
 *
 * Engines (selected by UCX_REMAPRING_NOTIFIER, see ummunotify.c):
 *  - uffd: one userfaultfd per process with non-cooperative UNMAP, REMOVE and
 *    REMAP events, and a monitor thread;
 *  - ucm:  UCM's UCM_EVENT_VM_UNMAPPED hooks, for kernels or sandboxes where
 *    userfaultfd cannot be opened;
 *  - seccomp: a seccomp filter with user notification on every call that
 *    can unmap memory, in every thread; a dispatcher thread invalidates
 *    and reports each range to UCM before the call runs. Started when the
 *    library is loaded, see ummunotify_seccomp.c.
 *
 * All functions are thread safe.
 */

#include <ucs/type/status.h>
#include <ucs/sys/compiler_def.h>
#include <stddef.h>
#include <stdint.h>

BEGIN_C_DECLS


#if defined(__x86_64__) || defined(__i386__)
#  define UCS_UMMUNOTIFY_CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#  define UCS_UMMUNOTIFY_CPU_RELAX() __asm__ __volatile__("yield" ::: "memory")
#else
#  define UCS_UMMUNOTIFY_CPU_RELAX() __asm__ __volatile__("" ::: "memory")
#endif

typedef struct ucs_ummunotify     ucs_ummunotify_t;     /* a client */
typedef struct ucs_ummunotify_reg ucs_ummunotify_reg_t; /* a registration */
typedef struct ucs_ummunotify_work ucs_ummunotify_work_t;


/**
 * Which engine delivers the events.
 */
typedef enum {
    UCS_UMMUNOTIFY_ENGINE_AUTO, /**< uffd, falling back to ucm */
    UCS_UMMUNOTIFY_ENGINE_UFFD, /**< userfaultfd monitor thread */
    UCS_UMMUNOTIFY_ENGINE_UCM,  /**< UCM VM_UNMAPPED hooks */
    UCS_UMMUNOTIFY_ENGINE_SECCOMP, /**< seccomp user notification: every
                                        unmap of the process, to UCM too */
    UCS_UMMUNOTIFY_ENGINE_LAST
} ucs_ummunotify_engine_t;


/**
 * What the kernel did to a registered range.
 */
typedef enum {
    UCS_UMMUNOTIFY_EVENT_UNMAP    = 1, /**< munmap, MAP_FIXED over, shrink */
    UCS_UMMUNOTIFY_EVENT_REMOVE   = 2, /**< madvise DONTNEED/FREE/REMOVE */
    UCS_UMMUNOTIFY_EVENT_REMAP    = 3, /**< mremap moved the pages away */
    UCS_UMMUNOTIFY_EVENT_FORK     = 4, /**< the process is a fork() child */
    UCS_UMMUNOTIFY_EVENT_OVERFLOW = 5  /**< queue overflowed: events lost,
                                            treat every range as invalid */
} ucs_ummunotify_event_type_t;


/**
 * An invalidation event.
 */
typedef struct {
    uint64_t                    cookie; /**< cookie of the registration */
    uintptr_t                   start;  /**< invalidated part, inclusive */
    uintptr_t                   end;    /**< invalidated part, exclusive */
    ucs_ummunotify_event_type_t type;   /**< what happened */
} ucs_ummunotify_event_t;


/**
 * Event callback.
 *
 * @param [in] arg    Argument from @ref ucs_ummunotify_params_t.
 * @param [in] event  The event; valid only during the call.
 */
typedef void (*ucs_ummunotify_cb_t)(void *arg,
                                    const ucs_ummunotify_event_t *event);


/**
 * How a client receives its events.
 */
typedef enum {
    /** Events are queued; the client reads them with
     *  @ref ucs_ummunotify_read. */
    UCS_UMMUNOTIFY_MODE_QUEUE,
    /** The callback runs on the notifier's worker thread, outside the
     *  monitor: it may free memory, unmap memory and call the notifier. */
    UCS_UMMUNOTIFY_MODE_DEFERRED,
    /** The callback runs inside the monitor, before the generation counter
     *  becomes even, with the notifier lock held. It must not free or unmap
     *  memory (the kernel would make it wait for the monitor, which is
     *  itself: deadlock), must not block, and must not call any
     *  ucs_ummunotify_ function. Meant for dropping entries from a lookup
     *  table; use @ref ucs_ummunotify_defer for the rest. */
    UCS_UMMUNOTIFY_MODE_SYNC
} ucs_ummunotify_mode_t;


/**
 * Client parameters.
 */
typedef struct {
    ucs_ummunotify_mode_t mode;      /**< event delivery */
    ucs_ummunotify_cb_t   cb;        /**< callback (DEFERRED and SYNC) */
    void                  *arg;      /**< callback argument */
    unsigned              queue_len; /**< queued events before overflow
                                          (QUEUE and DEFERRED); 0: 1024 */
    /** Optional fork hooks, run by the pthread_atfork handlers with the
     *  notifier lock held (prepare: take your locks, parent/child: release
     *  or re-initialize them). In the child, every registration has been
     *  invalidated before fork_child runs; no callbacks are made for it,
     *  the client learns it from @ref ucs_ummunotify_fork_epoch. */
    void                  (*fork_prepare)(void *arg);
    void                  (*fork_parent)(void *arg);
    void                  (*fork_child)(void *arg);
} ucs_ummunotify_params_t;


/**
 * A unit of work to run on the notifier's worker thread. Embed it in your
 * own structure, zero it and set 'func'; it is never allocated by the
 * notifier, so it may be scheduled from a SYNC callback.
 */
struct ucs_ummunotify_work {
    ucs_ummunotify_work_t *next;   /* private */
    int                   queued;  /* private */
    void                  (*func)(ucs_ummunotify_work_t *work); /**< to run */
};


/*
 * Process-wide state read on fast paths. Private: use the inline functions.
 */
extern volatile uint64_t ucs_ummunotify_seq;
extern volatile uint64_t ucs_ummunotify_fork_count;


/**
 * Open a notifier client. Starts the engine on first use (logs once which
 * engine runs and why).
 *
 * @param [in]  params      Client parameters.
 * @param [out] notifier_p  Filled with the new client.
 *
 * @return UCS_OK, or the error that kept every allowed engine from starting.
 */
ucs_status_t ucs_ummunotify_open(const ucs_ummunotify_params_t *params,
                                 ucs_ummunotify_t **notifier_p);


/**
 * Close a client. Its remaining registrations stop being watched and become
 * invalid; their handles must still be released with
 * @ref ucs_ummunotify_unregister. After it returns no callback of the
 * client runs anymore and its deferred work has run. The engine stops when the
 * last client closes. Must not be called from a SYNC callback.
 *
 * @param [in] notifier  Client to close.
 */
void ucs_ummunotify_close(ucs_ummunotify_t *notifier);


/**
 * Watch an address range. The range is widened to whole pages. Parts of it
 * that are not mapped are not watched (Linux 6.x registers the mapped parts
 * of a range with holes, older kernels refuse it with ENOMEM); the memcache
 * checks coverage itself. Every mapping in it must be registrable (anonymous, heap, memfd,
 * shmem, hugetlb; a regular file only if the kernel has
 * UFFD_FEATURE_WP_ASYNC).
 *
 * @param [in]  notifier  Client.
 * @param [in]  address   Start of the range.
 * @param [in]  length    Length of the range.
 * @param [in]  cookie    Reported in the events of this registration.
 * @param [out] reg_p     Filled with the registration handle.
 *
 * @return UCS_OK, UCS_ERR_INVALID_ADDR if part of the range is not mapped,
 *         UCS_ERR_UNSUPPORTED if the kernel can't watch this memory,
 *         UCS_ERR_NO_MEMORY.
 */
ucs_status_t ucs_ummunotify_register(ucs_ummunotify_t *notifier,
                                     void *address, size_t length,
                                     uint64_t cookie,
                                     ucs_ummunotify_reg_t **reg_p);


/**
 * Stop watching a range and release the handle (valid or invalidated).
 * After it returns, no SYNC callback runs for it; events queued before may
 * still be read. Must not be called from a SYNC callback.
 *
 * @param [in] reg  Registration handle.
 */
void ucs_ummunotify_unregister(ucs_ummunotify_reg_t *reg);


/**
 * @return Zero if the registration has been invalidated, nonzero if it is
 *         still valid. One load (after waiting while an invalidation is
 *         being applied, so an unmap that returned is always seen). Must
 *         not be called from a SYNC callback or with a lock held that a
 *         SYNC callback takes: see @ref ucs_ummunotify_reg_test.
 */
int ucs_ummunotify_reg_is_valid(const ucs_ummunotify_reg_t *reg);


/**
 * The validity flag as it is now, without waiting: for use under a lock
 * that the client's SYNC callback also takes (where waiting for the counter
 * would deadlock with the monitor, and where the callback ordering makes
 * the answer exact: the flag is cleared before the callback runs).
 *
 * @return Zero if invalidated.
 */
int ucs_ummunotify_reg_test(const ucs_ummunotify_reg_t *reg);


/**
 * Read queued events (QUEUE mode; DEFERRED clients have theirs taken by the
 * worker). Never blocks.
 *
 * @param [in]  notifier  Client.
 * @param [out] events    Filled with up to @a max events.
 * @param [in]  max       Capacity of @a events.
 *
 * @return Number of events read.
 */
unsigned ucs_ummunotify_read(ucs_ummunotify_t *notifier,
                             ucs_ummunotify_event_t *events, unsigned max);


/**
 * Schedule @a work->func on the notifier's worker thread (never the
 * monitor). Scheduling an already queued item does nothing. Safe from SYNC
 * callbacks: takes no memory.
 *
 * @param [in] work  Work item; must stay valid until it has run.
 */
void ucs_ummunotify_defer(ucs_ummunotify_work_t *work);


/**
 * Wait until everything deferred so far, and every DEFERRED callback of
 * events applied so far, has run. Must not be called from the worker.
 */
void ucs_ummunotify_flush(void);


/**
 * @return The engine that runs, or UCS_UMMUNOTIFY_ENGINE_AUTO if none does.
 */
ucs_ummunotify_engine_t ucs_ummunotify_engine(void);


/**
 * @return Engine name ("uffd", "ucm", "auto").
 */
const char *ucs_ummunotify_engine_name(ucs_ummunotify_engine_t engine);


/**
 * @return Pointer to the generation counter (ummunotify's mapped counter).
 *         Odd while invalidations are being applied; it changes whenever
 *         an invalidation has been applied.
 */
static inline const volatile uint64_t *ucs_ummunotify_generation_ptr(void)
{
    return &ucs_ummunotify_seq;
}


/**
 * Begin a consistent read: wait while the counter is odd, return it.
 * One load (plus spinning while an invalidation is being applied).
 */
static inline uint64_t ucs_ummunotify_read_begin(void)
{
    uint64_t gen;

    while ((gen = __atomic_load_n(&ucs_ummunotify_seq, __ATOMIC_ACQUIRE)) &
           1) {
        UCS_UMMUNOTIFY_CPU_RELAX();
    }
    return gen;
}


/**
 * End a consistent read.
 *
 * @return Nonzero if an invalidation was applied since @a gen was read:
 *         whatever was looked up must be looked up again.
 */
static inline int ucs_ummunotify_read_retry(uint64_t gen)
{
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return __atomic_load_n(&ucs_ummunotify_seq, __ATOMIC_RELAXED) != gen;
}


/**
 * @return Number of fork() calls this process descends from since it
 *         loaded the notifier; a client caches it and treats a change as
 *         "every registration is invalid". One load.
 */
static inline uint64_t ucs_ummunotify_fork_epoch(void)
{
    return __atomic_load_n(&ucs_ummunotify_fork_count, __ATOMIC_ACQUIRE);
}

END_C_DECLS

#endif
