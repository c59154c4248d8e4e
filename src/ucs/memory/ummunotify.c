/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "ummunotify_int.h"

#include <ucs/memory/range_table.h>

#include <ucs/config/parser.h>
#include <ucs/debug/log_def.h>
#include <ucs/sys/compiler_def.h>
#include <ucs/sys/math.h>
#include <ucs/sys/preprocessor.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


/*
 * Core of the notifier: clients, the registration table, engine selection,
 * the worker thread that runs deferred work, and fork handling.
 *
 * The registration table (range_table.h) holds the active registrations.
 * They may overlap: several clients, or one client watching overlapping
 * ranges.
 */


#define UCS_UMMUNOTIFY_QUEUE_LEN_DEFAULT 1024
#define UCS_UMMUNOTIFY_DISPATCH_BATCH    32


struct ucs_ummunotify_reg {
    ucs_range_t             range;    /* page aligned */
    uint64_t                cookie;
    ucs_ummunotify_t        *client;
    ucs_list_link_t         list;     /* in client->regs */
    int                     valid;    /* cleared by the first event */
    int                     in_table;
};


struct ucs_ummunotify {
    ucs_list_link_t         list;     /* in global clients */
    ucs_ummunotify_params_t params;
    ucs_list_link_t         regs;
    ucs_ummunotify_event_t  *ring;    /* QUEUE, DEFERRED */
    unsigned                ring_mask;
    unsigned                head;     /* next to read */
    unsigned                tail;     /* next to write */
    int                     overflow;
    ucs_ummunotify_work_t   dispatch; /* DEFERRED: runs the callbacks */
};


typedef struct {
    pthread_mutex_t         state_lock;
    pthread_mutex_t         lock;
    ucs_ummunotify_state_t  state;
    const ucs_ummunotify_ops_t *ops;
    ucs_status_t            config_status;
    unsigned                nclients;
    ucs_list_link_t         clients;

    /* registration table, protected by lock */
    ucs_range_table_t       table;

    /* worker thread */
    pthread_mutex_t         wlock;
    pthread_cond_t          wcond;
    pthread_cond_t          wdone;
    pthread_t               worker;
    int                     worker_running;
    int                     worker_stop;
    ucs_ummunotify_work_t   *whead;
    ucs_ummunotify_work_t   *wtail;
    uint64_t                wscheduled;
    uint64_t                wcompleted;
} ucs_ummunotify_global_t;


volatile uint64_t ucs_ummunotify_seq        = 0;
volatile uint64_t ucs_ummunotify_fork_count = 0;
ucs_ummunotify_config_t ucs_ummunotify_config;

static ucs_ummunotify_global_t ucs_ummunotify_global = {
    .state_lock = PTHREAD_MUTEX_INITIALIZER,
    .lock       = PTHREAD_MUTEX_INITIALIZER,
    .state      = UCS_UMMUNOTIFY_STATE_IDLE,
    .clients    = UCS_LIST_INITIALIZER(&ucs_ummunotify_global.clients,
                                       &ucs_ummunotify_global.clients),
    .wlock      = PTHREAD_MUTEX_INITIALIZER,
    .wcond      = PTHREAD_COND_INITIALIZER,
    .wdone      = PTHREAD_COND_INITIALIZER
};



static const char *ucs_ummunotify_engine_names[] = {
    [UCS_UMMUNOTIFY_ENGINE_AUTO] = "auto",
    [UCS_UMMUNOTIFY_ENGINE_UFFD] = "uffd",
    [UCS_UMMUNOTIFY_ENGINE_UCM]  = "ucm",
    [UCS_UMMUNOTIFY_ENGINE_SECCOMP] = "seccomp",
    [UCS_UMMUNOTIFY_ENGINE_LAST] = NULL
};


/* clang-format off */
static ucs_config_field_t ucs_ummunotify_config_table[] = {
    {"NOTIFIER", "auto",
     "Engine that reports unmapped and remapped memory to the remapring\n"
     "memory cache:\n"
     " auto    - seccomp where UCM's mmap hooks are off\n"
     "           (UCX_MEM_MMAP_HOOK_MODE=none) and the process may install a\n"
     "           filter without no_new_privs (CAP_SYS_ADMIN, or the flag is\n"
     "           set already); otherwise userfaultfd if it can be opened,\n"
     "           UCM's hooks otherwise.\n"
     " uffd    - userfaultfd only (one monitor thread per process); fail if\n"
     "           it cannot be opened.\n"
     " ucm     - UCM's VM_UNMAPPED events only (needs UCM's mmap hooks).\n"
     " seccomp - every unmap of the whole process, learned from a seccomp\n"
     "           filter with user notification (Linux 5.7+) and reported to\n"
     "           UCM (UCM_EVENT_VM_UNMAPPED becomes an external event), so\n"
     "           UCX's own registration caches stay coherent without hooks.\n"
     "           Starts when the library is loaded; sets no_new_privs unless\n"
     "           the process has CAP_SYS_ADMIN; see the README for its costs\n"
     "           and limits.\n"
     "One log line (level info, or diag on fallback) says which runs and why.",
     ucs_offsetof(ucs_ummunotify_config_t, engine),
     UCS_CONFIG_TYPE_ENUM(ucs_ummunotify_engine_names)},

    {"NOTIFIER_SPIN", "0",
     "How long the userfaultfd monitor keeps polling without sleeping after\n"
     "an event (e.g. 20us). munmap() of watched memory waits for the monitor;\n"
     "a monitor that is already awake may answer sooner when a core is idle,\n"
     "but on a busy machine the spinning monitor takes CPU from the thread\n"
     "it should answer (measured slower on 2 busy cores). 0 disables it.",
     ucs_offsetof(ucs_ummunotify_config_t, spin), UCS_CONFIG_TYPE_TIME},

    {"NOTIFIER_CPU", "-1",
     "Pin the userfaultfd monitor thread to this CPU; -1 leaves it unpinned.",
     ucs_offsetof(ucs_ummunotify_config_t, cpu), UCS_CONFIG_TYPE_INT},

    {"UCM_REPORT", "y",
     "Also report every invalidation the userfaultfd monitor sees to UCM\n"
     "(ucm_vm_munmap), so that UCS registration caches and the UCS memtype\n"
     "cache drop the range too. Additive: caches still get UCM's own events.",
     ucs_offsetof(ucs_ummunotify_config_t, ucm_report), UCS_CONFIG_TYPE_BOOL},

    {"UCM_EXTERNAL", "n",
     "Declare UCM_EVENT_VM_UNMAPPED external (ucm_set_external_event), for\n"
     "processes where UCM's hooks cannot work (static binaries, conflicting\n"
     "allocators, UCX_MEM_MMAP_HOOK_MODE=none). UCS caches created afterwards\n"
     "then install no munmap hooks and learn about unmapped memory only from\n"
     "the userfaultfd monitor. Covers: every change to memory watched by a\n"
     "notifier client (all memory the remapring memory domain registered).\n"
     "Does not cover: memory no notifier client watches, e.g. what other\n"
     "memory domains (ib, ...) register in their own caches; hooks already\n"
     "installed stay installed. Timing: the monitor reports the range to UCM\n"
     "before the unmapping call returns, taken from the blocked call's\n"
     "arguments in /proc/self/task/<tid>/syscall; when two threads unmap\n"
     "watched memory at the same moment, one of them may be reported only\n"
     "after its call returned (microseconds later). Requires the uffd engine\n"
     "and is read once, when the library is loaded.",
     ucs_offsetof(ucs_ummunotify_config_t, ucm_external),
     UCS_CONFIG_TYPE_BOOL},

    {"SECCOMP_TIMEOUT", "10s",
     "With the seccomp notifier: how long an invalidation callback may run\n"
     "before the unmapping calls waiting for it are let through without it\n"
     "(one error line; caches may then go stale). A thread is never blocked\n"
     "forever by a stuck callback.",
     ucs_offsetof(ucs_ummunotify_config_t, seccomp_timeout),
     UCS_CONFIG_TYPE_TIME},

    {"SECCOMP_INTHREAD", "y",
     "With the seccomp notifier: report munmap(), madvise() and mremap()\n"
     "calls made through the C library in the calling thread, before the\n"
     "call, and make them from an instruction the filter lets through, with\n"
     "no notification and no other thread (about the cost of UCM's hooks).\n"
     "Takes effect where this library's definitions of those functions are\n"
     "the ones the process calls: the module preloaded (LD_PRELOAD, as UCX\n"
     "1.13-1.21 load it), or linked into the program; the start line in the\n"
     "log says whether they are. Everything else (raw system calls, the C\n"
     "library's own calls such as free() unmapping, mmap(MAP_FIXED), shmdt,\n"
     "brk, static programs) still stops at the filter. With n, every call\n"
     "does.",
     ucs_offsetof(ucs_ummunotify_config_t, seccomp_inthread),
     UCS_CONFIG_TYPE_BOOL},

    {NULL}
};
/* clang-format on */

UCS_CONFIG_REGISTER_TABLE(ucs_ummunotify_config_table, "Remapring notifier",
                          "REMAPRING_", ucs_ummunotify_config_t,
                          &ucs_config_global_list)


/* how many times this thread holds the notifier lock (0 or 1): the seccomp
 * source's in-thread path must not report from under it */
static __thread unsigned ucs_ummunotify_lock_depth;

void ucs_ummunotify_lock(void)
{
    pthread_mutex_lock(&ucs_ummunotify_global.lock);
    ++ucs_ummunotify_lock_depth;
}

void ucs_ummunotify_unlock(void)
{
    --ucs_ummunotify_lock_depth;
    pthread_mutex_unlock(&ucs_ummunotify_global.lock);
}

int ucs_ummunotify_locked_here(void)
{
    return ucs_ummunotify_lock_depth > 0;
}

const char *ucs_ummunotify_engine_name(ucs_ummunotify_engine_t engine)
{
    if (engine >= UCS_UMMUNOTIFY_ENGINE_LAST) {
        return "invalid";
    }
    return ucs_ummunotify_engine_names[engine];
}

ucs_ummunotify_engine_t ucs_ummunotify_engine(void)
{
    const ucs_ummunotify_ops_t *ops;

    ops = __atomic_load_n(&ucs_ummunotify_global.ops, __ATOMIC_ACQUIRE);
    return (ops == NULL) ? UCS_UMMUNOTIFY_ENGINE_AUTO : ops->type;
}

/* ---------------------------------------------------------------- worker */

static void *ucs_ummunotify_worker_main(void *arg)
{
    ucs_ummunotify_work_t *work;

    pthread_mutex_lock(&ucs_ummunotify_global.wlock);
    for (;;) {
        work = ucs_ummunotify_global.whead;
        if (work == NULL) {
            if (ucs_ummunotify_global.worker_stop) {
                break;
            }
            pthread_cond_wait(&ucs_ummunotify_global.wcond,
                              &ucs_ummunotify_global.wlock);
            continue;
        }

        ucs_ummunotify_global.whead = work->next;
        if (ucs_ummunotify_global.whead == NULL) {
            ucs_ummunotify_global.wtail = NULL;
        }
        work->next   = NULL;
        work->queued = 0; /* may be scheduled again while it runs */
        pthread_mutex_unlock(&ucs_ummunotify_global.wlock);

        work->func(work);

        pthread_mutex_lock(&ucs_ummunotify_global.wlock);
        ++ucs_ummunotify_global.wcompleted;
        pthread_cond_broadcast(&ucs_ummunotify_global.wdone);
    }
    pthread_mutex_unlock(&ucs_ummunotify_global.wlock);
    return NULL;
}

static ucs_status_t ucs_ummunotify_worker_start(void)
{
    sigset_t all, old;
    int ret;

    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    ucs_ummunotify_global.worker_stop = 0;
    ret           = pthread_create(&ucs_ummunotify_global.worker, NULL,
                                   ucs_ummunotify_worker_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (ret != 0) {
        ucs_error("notifier: failed to create worker thread: %s",
                  strerror(ret));
        return UCS_ERR_IO_ERROR;
    }

    ucs_ummunotify_global.worker_running = 1;
    return UCS_OK;
}

static void ucs_ummunotify_worker_stop(void)
{
    if (!ucs_ummunotify_global.worker_running) {
        return;
    }

    pthread_mutex_lock(&ucs_ummunotify_global.wlock);
    ucs_ummunotify_global.worker_stop = 1;
    pthread_cond_broadcast(&ucs_ummunotify_global.wcond);
    pthread_mutex_unlock(&ucs_ummunotify_global.wlock);
    pthread_join(ucs_ummunotify_global.worker, NULL);

    pthread_mutex_lock(&ucs_ummunotify_global.wlock);
    ucs_ummunotify_global.worker_running = 0;
    pthread_cond_broadcast(&ucs_ummunotify_global.wdone);
    pthread_mutex_unlock(&ucs_ummunotify_global.wlock);
}

void ucs_ummunotify_defer(ucs_ummunotify_work_t *work)
{
    pthread_mutex_lock(&ucs_ummunotify_global.wlock);
    if (!work->queued) {
        work->queued = 1;
        work->next   = NULL;
        if (ucs_ummunotify_global.wtail == NULL) {
            ucs_ummunotify_global.whead = work;
        } else {
            ucs_ummunotify_global.wtail->next = work;
        }
        ucs_ummunotify_global.wtail = work;
        ++ucs_ummunotify_global.wscheduled;
        pthread_cond_signal(&ucs_ummunotify_global.wcond);
    }
    pthread_mutex_unlock(&ucs_ummunotify_global.wlock);
}

void ucs_ummunotify_flush(void)
{
    uint64_t target;

    /* let an invalidation that is being applied finish first */
    (void)ucs_ummunotify_read_begin();

    pthread_mutex_lock(&ucs_ummunotify_global.wlock);
    target = ucs_ummunotify_global.wscheduled;
    while ((ucs_ummunotify_global.wcompleted < target) &&
           ucs_ummunotify_global.worker_running) {
        pthread_cond_wait(&ucs_ummunotify_global.wdone,
                          &ucs_ummunotify_global.wlock);
    }
    pthread_mutex_unlock(&ucs_ummunotify_global.wlock);
}

/* ----------------------------------------------------------------- table */

static void ucs_ummunotify_table_lock(void *arg)
{
    ucs_ummunotify_lock();
}

static void ucs_ummunotify_table_unlock(void *arg)
{
    ucs_ummunotify_unlock();
}

static inline ucs_ummunotify_reg_t *ucs_ummunotify_table_at(size_t idx)
{
    return ucs_container_of(ucs_ummunotify_global.table.ranges[idx],
                            ucs_ummunotify_reg_t, range);
}

static void ucs_ummunotify_table_insert(ucs_ummunotify_reg_t *reg)
{
    ucs_range_table_insert(&ucs_ummunotify_global.table, &reg->range);
    reg->in_table = 1;
}

static void ucs_ummunotify_table_remove(ucs_ummunotify_reg_t *reg)
{
    ucs_range_table_remove(&ucs_ummunotify_global.table, &reg->range);
    reg->in_table = 0;
}

/*
 * Stop watching the parts of [start, end) that no active registration
 * covers any more. Called with lock.
 */
static void ucs_ummunotify_table_unsubscribe_gaps(uintptr_t start,
                                                  uintptr_t end)
{
    const ucs_range_table_t *table = &ucs_ummunotify_global.table;
    uintptr_t cursor               = start;
    ucs_ummunotify_reg_t *reg;
    size_t idx;

    for (idx = ucs_range_table_first_overlap(table, start);
         (idx < table->count) && (table->ranges[idx]->start < end); ++idx) {
        reg = ucs_ummunotify_table_at(idx);
        if (reg->range.end <= cursor) {
            continue;
        }
        if (reg->range.start > cursor) {
            ucs_ummunotify_global.ops->unsubscribe(cursor, reg->range.start);
        }
        cursor = reg->range.end;
        if (cursor >= end) {
            return;
        }
    }
    ucs_ummunotify_global.ops->unsubscribe(cursor, end);
}

/* --------------------------------------------------------------- events */

static void ucs_ummunotify_queue_push(ucs_ummunotify_t *client,
                                      const ucs_ummunotify_event_t *event)
{
    if ((client->tail - client->head) > client->ring_mask) {
        client->overflow = 1;
        return;
    }
    client->ring[client->tail++ & client->ring_mask] = *event;
}

static void ucs_ummunotify_deliver(ucs_ummunotify_reg_t *reg,
                                   ucs_ummunotify_event_type_t type,
                                   uintptr_t start, uintptr_t end)
{
    ucs_ummunotify_t *client = reg->client;
    ucs_ummunotify_event_t event;

    event.cookie = reg->cookie;
    event.start  = ucs_max(start, reg->range.start);
    event.end    = ucs_min(end, reg->range.end);
    event.type   = type;

    switch (client->params.mode) {
    case UCS_UMMUNOTIFY_MODE_SYNC:
        client->params.cb(client->params.arg, &event);
        break;
    case UCS_UMMUNOTIFY_MODE_DEFERRED:
        ucs_ummunotify_queue_push(client, &event);
        ucs_ummunotify_defer(&client->dispatch);
        break;
    default:
        ucs_ummunotify_queue_push(client, &event);
        break;
    }
}

/* A registration the event overlaps: one-shot, it left the table before the
 * callback, which so sees the final state */
static void ucs_ummunotify_apply_one(ucs_range_t *range, void *arg)
{
    const ucs_ummunotify_event_t *event = arg;
    ucs_ummunotify_reg_t *reg = ucs_container_of(range, ucs_ummunotify_reg_t,
                                                 range);

    reg->in_table = 0;
    __atomic_store_n(&reg->valid, 0, __ATOMIC_RELEASE);
    ucs_ummunotify_deliver(reg, event->type, event->start, event->end);
}

int ucs_ummunotify_apply(ucs_ummunotify_event_type_t type, uintptr_t start,
                         uintptr_t end)
{
    ucs_ummunotify_event_t event = {.start = start, .end = end, .type = type};

    return ucs_range_table_remove_overlapping(&ucs_ummunotify_global.table,
                                              start, end,
                                              ucs_ummunotify_apply_one,
                                              &event) > 0;
}

static void ucs_ummunotify_dispatch(ucs_ummunotify_work_t *work)
{
    ucs_ummunotify_t *client = ucs_container_of(work, ucs_ummunotify_t,
                                                dispatch);
    ucs_ummunotify_event_t events[UCS_UMMUNOTIFY_DISPATCH_BATCH];
    unsigned i, count;

    do {
        count = ucs_ummunotify_read(client, events,
                                    UCS_UMMUNOTIFY_DISPATCH_BATCH);
        for (i = 0; i < count; ++i) {
            client->params.cb(client->params.arg, &events[i]);
        }
    } while (count == UCS_UMMUNOTIFY_DISPATCH_BATCH);
}

unsigned ucs_ummunotify_read(ucs_ummunotify_t *client,
                             ucs_ummunotify_event_t *events, unsigned max)
{
    unsigned count = 0;

    /* an unmap that returned before this call has been read by the
     * monitor; wait until that batch is applied */
    (void)ucs_ummunotify_read_begin();

    ucs_ummunotify_lock();
    while ((count < max) && (client->head != client->tail)) {
        events[count++] = client->ring[client->head++ & client->ring_mask];
    }
    if ((count < max) && client->overflow) {
        memset(&events[count], 0, sizeof(events[count]));
        events[count].type  = UCS_UMMUNOTIFY_EVENT_OVERFLOW;
        events[count].end   = UINTPTR_MAX;
        client->overflow    = 0;
        ++count;
    }
    ucs_ummunotify_unlock();
    return count;
}

/* --------------------------------------------------------------- engine */

static ucs_status_t
ucs_ummunotify_try_start(const ucs_ummunotify_ops_t *ops, char *why,
                         size_t max)
{
    ucs_status_t status;

    status = ops->start(why, max);
    if (status != UCS_OK) {
        return status;
    }

    if (!ucs_ummunotify_global.worker_running) {
        status = ucs_ummunotify_worker_start();
        if (status != UCS_OK) {
            ops->stop();
            snprintf(why, max, "no worker thread");
            return status;
        }
    }

    __atomic_store_n(&ucs_ummunotify_global.ops, ops, __ATOMIC_RELEASE);
    ucs_ummunotify_global.state = UCS_UMMUNOTIFY_STATE_RUNNING;
    return UCS_OK;
}

/* Start an engine as configured. Called with state_lock. */
static ucs_status_t ucs_ummunotify_engine_start(void)
{
    ucs_ummunotify_engine_t want = ucs_ummunotify_config.engine;
    char why_uffd[160]           = "";
    char why_ucm[160]            = "";
    ucs_status_t status;

    if (ucs_ummunotify_global.state == UCS_UMMUNOTIFY_STATE_RUNNING) {
        return UCS_OK;
    }

    if (ucs_ummunotify_global.config_status != UCS_OK) {
        /* the parser has logged the bad value */
        return ucs_ummunotify_global.config_status;
    }

    /* the whole-process source, if it runs, sees everything the others
     * would: it is the engine, unless another one was chosen */
    if (((want == UCS_UMMUNOTIFY_ENGINE_AUTO) ||
         (want == UCS_UMMUNOTIFY_ENGINE_SECCOMP)) &&
        ucs_ummunotify_seccomp_wanted()) {
        ucs_ummunotify_seccomp_start();
    }
    if (((want == UCS_UMMUNOTIFY_ENGINE_AUTO) ||
         (want == UCS_UMMUNOTIFY_ENGINE_SECCOMP)) &&
        ucs_ummunotify_seccomp_running()) {
        status = ucs_ummunotify_try_start(&ucs_ummunotify_seccomp_ops,
                                          why_uffd, sizeof(why_uffd));
        if (status == UCS_OK) {
            ucs_info("notifier engine seccomp: %s", why_uffd);
            return UCS_OK;
        }
    }
    if (want == UCS_UMMUNOTIFY_ENGINE_SECCOMP) {
        /* the constructor said why, once */
        goto failed;
    }

    if (want != UCS_UMMUNOTIFY_ENGINE_UCM) {
        status = ucs_ummunotify_try_start(&ucs_ummunotify_uffd_ops, why_uffd,
                                          sizeof(why_uffd));
        if (status == UCS_OK) {
            ucs_info("notifier engine uffd: %s", why_uffd);
            return UCS_OK;
        }
        if (want == UCS_UMMUNOTIFY_ENGINE_UFFD) {
            ucs_error("notifier engine uffd requested "
                      "(UCX_REMAPRING_NOTIFIER=uffd) but unavailable: %s",
                      why_uffd);
            goto failed;
        }
    }

    status = ucs_ummunotify_try_start(&ucs_ummunotify_ucm_ops, why_ucm,
                                      sizeof(why_ucm));
    if (status == UCS_OK) {
        if (want == UCS_UMMUNOTIFY_ENGINE_UCM) {
            ucs_info("notifier engine ucm: requested by "
                     "UCX_REMAPRING_NOTIFIER=ucm");
        } else {
            ucs_diag("notifier engine ucm: userfaultfd unavailable (%s)",
                     why_uffd);
        }
        return UCS_OK;
    }

    if (want == UCS_UMMUNOTIFY_ENGINE_UCM) {
        ucs_error("notifier engine ucm requested (UCX_REMAPRING_NOTIFIER=ucm)"
                  " but unavailable: %s", why_ucm);
    } else {
        ucs_error("notifier: no engine available: uffd: %s; ucm: %s",
                  why_uffd, why_ucm);
    }

failed:
    ucs_ummunotify_global.state = UCS_UMMUNOTIFY_STATE_FAILED;
    return UCS_ERR_UNSUPPORTED;
}

/* Stop the engine. Called with state_lock. */
static void ucs_ummunotify_engine_stop(void)
{
    if (ucs_ummunotify_global.state == UCS_UMMUNOTIFY_STATE_RUNNING) {
        ucs_ummunotify_global.ops->stop();
    }
    ucs_ummunotify_worker_stop();
    __atomic_store_n(&ucs_ummunotify_global.ops, NULL, __ATOMIC_RELEASE);
    ucs_ummunotify_global.state = UCS_UMMUNOTIFY_STATE_IDLE;
}

/* ---------------------------------------------------------------- clients */

ucs_status_t ucs_ummunotify_open(const ucs_ummunotify_params_t *params,
                                 ucs_ummunotify_t **notifier_p)
{
    ucs_ummunotify_t *client;
    unsigned queue_len;
    ucs_status_t status;

    if ((params->mode != UCS_UMMUNOTIFY_MODE_QUEUE) && (params->cb == NULL)) {
        ucs_error("notifier: callback mode %d without a callback",
                  params->mode);
        return UCS_ERR_INVALID_PARAM;
    }

    client = calloc(1, sizeof(*client));
    if (client == NULL) {
        ucs_error("notifier: failed to allocate client");
        return UCS_ERR_NO_MEMORY;
    }

    client->params        = *params;
    client->dispatch.func = ucs_ummunotify_dispatch;
    ucs_list_head_init(&client->regs);

    if (params->mode != UCS_UMMUNOTIFY_MODE_SYNC) {
        queue_len = (params->queue_len == 0) ?
                    UCS_UMMUNOTIFY_QUEUE_LEN_DEFAULT : params->queue_len;
        queue_len = 1u << (32 - __builtin_clz(ucs_max(queue_len, 2) - 1));
        client->ring = calloc(queue_len, sizeof(*client->ring));
        if (client->ring == NULL) {
            ucs_error("notifier: failed to allocate queue of %u events",
                      queue_len);
            status = UCS_ERR_NO_MEMORY;
            goto err_free;
        }
        client->ring_mask = queue_len - 1;
    }

    pthread_mutex_lock(&ucs_ummunotify_global.state_lock);
    status = ucs_ummunotify_engine_start();
    if (status != UCS_OK) {
        goto err_unlock;
    }

    ucs_ummunotify_lock();
    ucs_list_add_tail(&ucs_ummunotify_global.clients, &client->list);
    ++ucs_ummunotify_global.nclients;
    ucs_ummunotify_unlock();
    pthread_mutex_unlock(&ucs_ummunotify_global.state_lock);

    *notifier_p = client;
    return UCS_OK;

err_unlock:
    pthread_mutex_unlock(&ucs_ummunotify_global.state_lock);
    free(client->ring);
err_free:
    free(client);
    return status;
}

void ucs_ummunotify_close(ucs_ummunotify_t *client)
{
    ucs_ummunotify_reg_t *reg;

    /* stop watching what is left; the handles stay the owners' to
     * unregister (which then only frees them) */
    ucs_ummunotify_lock();
    while (!ucs_list_is_empty(&client->regs)) {
        reg = ucs_list_head(&client->regs, ucs_ummunotify_reg_t, list);
        if (reg->in_table) {
            ucs_ummunotify_table_remove(reg);
            if (ucs_ummunotify_global.state == UCS_UMMUNOTIFY_STATE_RUNNING) {
                ucs_ummunotify_table_unsubscribe_gaps(reg->range.start,
                                                      reg->range.end);
            }
        }
        __atomic_store_n(&reg->valid, 0, __ATOMIC_RELEASE);
        ucs_list_del(&reg->list);
        ucs_list_head_init(&reg->list); /* unregister's del is a no-op */
        reg->client = NULL;
    }
    ucs_list_del(&client->list);
    --ucs_ummunotify_global.nclients;
    ucs_ummunotify_unlock();

    /* nothing new reaches the client; let its queued dispatch finish */
    ucs_ummunotify_flush();

    pthread_mutex_lock(&ucs_ummunotify_global.state_lock);
    if (ucs_ummunotify_global.nclients == 0) {
        ucs_ummunotify_engine_stop();
    }
    pthread_mutex_unlock(&ucs_ummunotify_global.state_lock);

    free(client->ring);
    free(client);
}

/* Start the engine again in a fork() child. Takes state_lock. */
static ucs_status_t ucs_ummunotify_ensure_running(void)
{
    ucs_status_t status;

    if (ucs_likely(ucs_ummunotify_global.state ==
                   UCS_UMMUNOTIFY_STATE_RUNNING)) {
        return UCS_OK;
    }

    pthread_mutex_lock(&ucs_ummunotify_global.state_lock);
    status = ucs_ummunotify_engine_start();
    pthread_mutex_unlock(&ucs_ummunotify_global.state_lock);
    return status;
}

ucs_status_t ucs_ummunotify_register(ucs_ummunotify_t *client,
                                     void *address, size_t length,
                                     uint64_t cookie,
                                     ucs_ummunotify_reg_t **reg_p)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    ucs_ummunotify_reg_t *reg;
    ucs_status_t status;
    void *old;

    if (length == 0) {
        return UCS_ERR_INVALID_PARAM;
    }

    status = ucs_ummunotify_ensure_running();
    if (status != UCS_OK) {
        return status;
    }

    reg = malloc(sizeof(*reg));
    if (reg == NULL) {
        ucs_error("notifier: failed to allocate registration");
        return UCS_ERR_NO_MEMORY;
    }

    reg->range.start = (uintptr_t)address & ~(page - 1);
    reg->range.end   = ((uintptr_t)address + length + page - 1) &
                       ~(page - 1);
    reg->cookie   = cookie;
    reg->client   = client;
    reg->valid    = 1;
    reg->in_table = 0;

    status = ucs_range_table_reserve(&ucs_ummunotify_global.table,
                                     ucs_ummunotify_table_lock,
                                     ucs_ummunotify_table_unlock, NULL, &old);
    if (status != UCS_OK) {
        goto err_free;
    }

    status = ucs_ummunotify_global.ops->subscribe(reg->range.start,
                                                  reg->range.end);
    if (status != UCS_OK) {
        ucs_ummunotify_unlock();
        goto err_free;
    }

    ucs_ummunotify_table_insert(reg);
    ucs_list_add_tail(&client->regs, &reg->list);
    ucs_ummunotify_unlock();

    free(old);
    *reg_p = reg;
    return UCS_OK;

err_free:
    free(old);
    free(reg);
    return status;
}

void ucs_ummunotify_unregister(ucs_ummunotify_reg_t *reg)
{
    ucs_ummunotify_lock();
    if (reg->in_table) {
        ucs_ummunotify_table_remove(reg);
        reg->valid = 0;
        if (ucs_ummunotify_global.state == UCS_UMMUNOTIFY_STATE_RUNNING) {
            ucs_ummunotify_table_unsubscribe_gaps(reg->range.start,
                                                      reg->range.end);
        }
    }
    ucs_list_del(&reg->list);
    ucs_ummunotify_unlock();

    free(reg);
}

int ucs_ummunotify_reg_is_valid(const ucs_ummunotify_reg_t *reg)
{
    /* an unmap that already returned may still be being applied */
    (void)ucs_ummunotify_read_begin();
    return __atomic_load_n(&reg->valid, __ATOMIC_ACQUIRE);
}

int ucs_ummunotify_reg_test(const ucs_ummunotify_reg_t *reg)
{
    return __atomic_load_n(&reg->valid, __ATOMIC_ACQUIRE);
}

/* ------------------------------------------------------------------ fork */

static void ucs_ummunotify_atfork_prepare(void)
{
    ucs_ummunotify_t *client;

    pthread_mutex_lock(&ucs_ummunotify_global.state_lock);
    ucs_ummunotify_lock();
    ucs_list_for_each(client, &ucs_ummunotify_global.clients, list) {
        if (client->params.fork_prepare != NULL) {
            client->params.fork_prepare(client->params.arg);
        }
    }
    pthread_mutex_lock(&ucs_ummunotify_global.wlock);
}

static void ucs_ummunotify_atfork_parent(void)
{
    ucs_ummunotify_t *client;

    pthread_mutex_unlock(&ucs_ummunotify_global.wlock);
    ucs_list_for_each(client, &ucs_ummunotify_global.clients, list) {
        if (client->params.fork_parent != NULL) {
            client->params.fork_parent(client->params.arg);
        }
    }
    ucs_ummunotify_unlock();
    pthread_mutex_unlock(&ucs_ummunotify_global.state_lock);
}

/*
 * Without UFFD_FEATURE_EVENT_FORK the kernel clears the userfaultfd context
 * of every VMA the child inherits: nothing is watched in the child, and its
 * munmap() calls never wait. The child does hold a copy of the parent's
 * userfaultfd, and UFFDIO_REGISTER on it would succeed and attach the
 * child's memory to the parent's monitor. So the engine drops it here and
 * opens its own on first use; every registration is invalid in the child.
 */
static void ucs_ummunotify_atfork_child(void)
{
    ucs_ummunotify_t *client;
    size_t idx;

    for (idx = 0; idx < ucs_ummunotify_global.table.count; ++idx) {
        ucs_ummunotify_table_at(idx)->in_table = 0;
        ucs_ummunotify_table_at(idx)->valid    = 0;
    }
    ucs_range_table_clear(&ucs_ummunotify_global.table);

    /* the monitor may have been between its two increments */
    if (ucs_ummunotify_seq & 1) {
        ++ucs_ummunotify_seq;
    }
    __atomic_fetch_add(&ucs_ummunotify_fork_count, 1, __ATOMIC_RELEASE);

    if ((ucs_ummunotify_global.state == UCS_UMMUNOTIFY_STATE_RUNNING) &&
        !ucs_ummunotify_global.ops->fork_child()) {
        __atomic_store_n(&ucs_ummunotify_global.ops, NULL, __ATOMIC_RELEASE);
        ucs_ummunotify_global.state = UCS_UMMUNOTIFY_STATE_FORKED;
    }

    /* threads do not survive fork(); queued work runs when we restart */
    ucs_ummunotify_global.worker_running = 0;
    pthread_cond_init(&ucs_ummunotify_global.wcond, NULL);
    pthread_cond_init(&ucs_ummunotify_global.wdone, NULL);
    pthread_mutex_init(&ucs_ummunotify_global.wlock, NULL);

    ucs_list_for_each(client, &ucs_ummunotify_global.clients, list) {
        if (client->params.fork_child != NULL) {
            client->params.fork_child(client->params.arg);
        }
    }

    pthread_mutex_init(&ucs_ummunotify_global.lock, NULL);
    ucs_ummunotify_lock_depth = 0; /* held by the prepare handler */
    pthread_mutex_init(&ucs_ummunotify_global.state_lock, NULL);
}

/* ----------------------------------------------------------- load/unload */

UCS_STATIC_INIT {
    ucs_ummunotify_global.config_status = ucs_config_parser_fill_opts(
            &ucs_ummunotify_config, ucs_ummunotify_config_table, "UCX_",
            "REMAPRING_", 0);
    if (ucs_ummunotify_global.config_status != UCS_OK) {
        /* the parser logged which value is wrong; keep safe defaults */
        ucs_ummunotify_config.engine       = UCS_UMMUNOTIFY_ENGINE_AUTO;
        ucs_ummunotify_config.spin         = 0;
        ucs_ummunotify_config.cpu          = -1;
        ucs_ummunotify_config.ucm_report   = 1;
        ucs_ummunotify_config.ucm_external = 0;
        ucs_ummunotify_config.seccomp_timeout = 10;
        ucs_ummunotify_config.seccomp_inthread = 1;
    }

    /* before the UCM bridge and before any UCS cache subscribes */
    pthread_atfork(NULL, NULL, ucs_ummunotify_seccomp_atfork_child);
    ucs_ummunotify_seccomp_init();

    pthread_atfork(ucs_ummunotify_atfork_prepare,
                   ucs_ummunotify_atfork_parent,
                   ucs_ummunotify_atfork_child);
    ucs_ummunotify_ucm_bridge_init();
}

/* Process exit or dlclose(): stop the threads, close the userfaultfd. */
UCS_STATIC_CLEANUP {
    pthread_mutex_lock(&ucs_ummunotify_global.state_lock);
    ucs_ummunotify_engine_stop();
    pthread_mutex_unlock(&ucs_ummunotify_global.state_lock);

    if (ucs_ummunotify_global.config_status == UCS_OK) {
        ucs_config_parser_release_opts(&ucs_ummunotify_config,
                                       ucs_ummunotify_config_table);
    }
    ucs_range_table_cleanup(&ucs_ummunotify_global.table);
}
