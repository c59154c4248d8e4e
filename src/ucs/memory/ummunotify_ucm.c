/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "ummunotify_int.h"

#include <ucm/api/ucm.h>
#include <ucs/debug/log_def.h>
#include <stdio.h>


/*
 * Fallback engine on UCM's UCM_EVENT_VM_UNMAPPED, for where userfaultfd
 * cannot be opened (old kernel, seccomp, vm.unprivileged_userfaultfd=0
 * without /dev/userfaultfd access).
 *
 * UCM calls the handler in the thread that unmaps, *before* the memory is
 * released (munmap, mremap, shmdt, madvise, brk shrink through its hooks),
 * so applying the invalidation there, between the two counter increments,
 * keeps the same guarantee as the uffd monitor. Several threads may unmap
 * at once: the lock serializes them and so makes each the only writer of the
 * counter. What it sees is only what UCM's hooks see: not static binaries,
 * not raw syscalls, not calls made before the hooks were installed, and
 * nothing if the event was declared external (then it would only be fed by
 * ourselves: refused).
 */


#define UCS_UMMUNOTIFY_UCM_PRIORITY 1000


static void ucs_ummunotify_ucm_callback(ucm_event_type_t event_type,
                                        ucm_event_t *event, void *arg)
{
    uintptr_t start = (uintptr_t)event->vm_unmapped.address;
    uintptr_t end   = start + event->vm_unmapped.size;

    ucs_ummunotify_lock();
    ucs_ummunotify_seq_begin();
    ucs_ummunotify_apply(UCS_UMMUNOTIFY_EVENT_UNMAP, start, end);
    ucs_ummunotify_seq_end();
    ucs_ummunotify_unlock();
}

static ucs_status_t ucs_ummunotify_ucm_start(char *why, size_t max)
{
    ucs_status_t status;

    if (ucs_ummunotify_ucm_is_external()) {
        snprintf(why, max, "UCM_EVENT_VM_UNMAPPED was declared external "
                 "(UCX_REMAPRING_UCM_EXTERNAL=y): UCM would only echo our "
                 "own reports");
        return UCS_ERR_UNSUPPORTED;
    }

    status = ucm_set_event_handler(UCM_EVENT_VM_UNMAPPED,
                                   UCS_UMMUNOTIFY_UCM_PRIORITY,
                                   ucs_ummunotify_ucm_callback, NULL);
    if (status != UCS_OK) {
        snprintf(why, max, "ucm_set_event_handler(VM_UNMAPPED) failed: %s "
                 "(UCM mmap hooks off?)", ucs_status_string(status));
        return status;
    }

    snprintf(why, max, "UCM VM_UNMAPPED hooks");
    return UCS_OK;
}

static void ucs_ummunotify_ucm_stop(void)
{
    ucm_unset_event_handler(UCM_EVENT_VM_UNMAPPED,
                            ucs_ummunotify_ucm_callback, NULL);
}

static ucs_status_t ucs_ummunotify_ucm_subscribe(uintptr_t start,
                                                 uintptr_t end)
{
    return UCS_OK; /* UCM reports every unmap in the process */
}

static void ucs_ummunotify_ucm_unsubscribe(uintptr_t start, uintptr_t end)
{
}

static int ucs_ummunotify_ucm_fork_child(void)
{
    return 1; /* the hooks are inherited and keep working */
}

const ucs_ummunotify_ops_t ucs_ummunotify_ucm_ops = {
    .name        = "ucm",
    .type        = UCS_UMMUNOTIFY_ENGINE_UCM,
    .start       = ucs_ummunotify_ucm_start,
    .stop        = ucs_ummunotify_ucm_stop,
    .subscribe   = ucs_ummunotify_ucm_subscribe,
    .unsubscribe = ucs_ummunotify_ucm_unsubscribe,
    .fork_child  = ucs_ummunotify_ucm_fork_child
};
