/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "ummunotify_int.h"

#include <ucm/api/ucm.h>
#include <ucs/debug/log_def.h>


/*
 * The plug into UCS.
 *
 * 1. Report (UCX_REMAPRING_UCM_REPORT=y, default): every invalidation the
 *    userfaultfd monitor reads is passed to ucm_vm_munmap(), which runs the
 *    UCM_EVENT_VM_UNMAPPED (and MEM_TYPE_FREE) handlers of the process: every
 *    ucs_rcache queues the range for invalidation and the UCS memtype cache
 *    drops it. It is additive: UCM's own hooks keep reporting what they see,
 *    so no cache is less coherent than with UCM alone; a range may simply be
 *    reported twice. The monitor reports right after read() and before it
 *    applies anything else, but read() is what lets munmap() return: a
 *    ucs_rcache_get() racing right behind the munmap() can still run before
 *    the report (measured: up to ~3% of immediate munmap+mmap+get cycles
 *    on a loaded 2-CPU VM). UCS caches do not look at our generation
 *    counter; a caller that does - ucs_ummunotify_read_begin() before
 *    ucs_rcache_get(), one load - gets the full guarantee (0 stale). The
 *    handlers UCS installs do not unmap memory (a handler that did would
 *    deadlock the monitor). The UCM engine does not report: UCM itself
 *    already told everybody.
 *
 * 2. External (UCX_REMAPRING_UCM_EXTERNAL=y, default n): at load time,
 *    ucm_set_external_event(UCM_EVENT_VM_UNMAPPED). UCS caches created
 *    afterwards install no munmap/mremap/madvise/brk/shmdt hooks for it and
 *    ucs_rcache_create() succeeds with UCX_MEM_MMAP_HOOK_MODE=none.
 *    What it covers: every change the kernel reports for memory some
 *    notifier client watches - all memory the remapring memory domain
 *    registered through its cache - reaches every UCS cache.
 *    What it does not cover:
 *      - memory no notifier client watches: a UCS rcache of another memory
 *        domain (ib, ...) over memory we don't watch goes stale when it is
 *        unmapped;
 *      - hooks installed before the declaration stay installed;
 *      - UCM_EVENT_VM_MAPPED and the memory-type (cuda/rocm) events;
 *      - ucm_test_external_events() cannot see our reports (its probe
 *        mapping is not watched), so nothing may rely on it;
 *      - the UCM engine (which then refuses to start).
 *    It needs the uffd engine running: open a notifier (or a memcache)
 *    before the first ucs_rcache_get() on watched memory.
 */


static int ucs_ummunotify_ucm_external;


void ucs_ummunotify_ucm_report(uintptr_t start, uintptr_t end)
{
    ucm_vm_munmap((void*)start, end - start);
}

void ucs_ummunotify_ucm_bridge_init(void)
{
    if (ucs_ummunotify_seccomp_wanted()) {
        /* the seccomp source declares it when it starts and reports every
         * unmap */
        return;
    }

    if (!ucs_ummunotify_config.ucm_external) {
        return;
    }

    if (ucs_ummunotify_config.engine == UCS_UMMUNOTIFY_ENGINE_UCM) {
        ucs_error("UCX_REMAPRING_UCM_EXTERNAL=y needs the uffd engine, "
                  "but UCX_REMAPRING_NOTIFIER=ucm: not declaring "
                  "UCM_EVENT_VM_UNMAPPED external");
        return;
    }

    ucm_set_external_event(UCM_EVENT_VM_UNMAPPED);
    ucs_ummunotify_ucm_external = 1;
    ucs_debug("notifier: declared UCM_EVENT_VM_UNMAPPED external");
}

int ucs_ummunotify_ucm_is_external(void)
{
    return ucs_ummunotify_ucm_external || ucs_ummunotify_seccomp_running();
}
