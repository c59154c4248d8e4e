/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <uct/ib/remapring/ring.h>
#include <uct/ib/remapring/ring_wire.h>

#include <ucs/debug/log_def.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>


typedef struct uct_remapring_wire_cma {
    uct_remapring_wire_t super;
    pid_t pid; /* reader process */
    uint64_t remote_view; /* its ring view */
    uct_remapring_ring_ctl_t *ctl; /* shared control words */
} uct_remapring_wire_cma_t;


static ucs_status_t
uct_remapring_wire_cma_error(uct_remapring_wire_cma_t *cma, size_t length)
{
    switch (errno) {
    case ESRCH:
        /* The peer is gone: an ordinary failure for the transport to report
         * through its error handling, not a bug here */
        ucs_debug("cma wire %p: peer pid %d is gone", cma, cma->pid);
        return UCS_ERR_CONNECTION_RESET;
    case EFAULT:
        ucs_error("cma wire %p: ring view 0x%lx of pid %d not mapped for "
                  "%zu bytes: %m",
                  cma, cma->remote_view, cma->pid, length);
        return UCS_ERR_INVALID_ADDR;
    case EPERM:
        ucs_error("cma wire %p: no permission to write into pid %d: %m", cma,
                  cma->pid);
        return UCS_ERR_UNSUPPORTED;
    default:
        ucs_error("cma wire %p: process_vm_writev(pid %d, %zu bytes) "
                  "failed: %m",
                  cma, cma->pid, length);
        return UCS_ERR_IO_ERROR;
    }
}

static ucs_status_t
uct_remapring_wire_cma_write(uct_remapring_wire_t *wire,
                             const uct_remapring_wire_seg_t *segs,
                             unsigned nsegs)
{
    uct_remapring_wire_cma_t *cma = (uct_remapring_wire_cma_t *)wire;
    struct iovec local[UCT_REMAPRING_WIRE_MAX_SEGS];
    struct iovec remote[UCT_REMAPRING_WIRE_MAX_SEGS];
    size_t length = 0;
    unsigned i, first;
    ssize_t ret;

    for (i = 0; i < nsegs; ++i) {
        local[i].iov_base  = (void *)segs[i].buffer;
        local[i].iov_len   = segs[i].length;
        remote[i].iov_base = (void *)(uintptr_t)(cma->remote_view +
                                                 uct_remapring_wire_view_pos(
                                                         wire, segs[i].offset));
        remote[i].iov_len  = segs[i].length;
        length += segs[i].length;
    }

    /* The kernel walks the reader's page tables now, so the bytes land in
     * whatever block is mapped under the slot at this moment. A short count
     * means it stopped at an unmapped page; continue from there so that the
     * retry reports the fault. Local and remote pieces have equal lengths,
     * so they advance together. */
    first = 0;
    while (length > 0) {
        ret = process_vm_writev(cma->pid, local + first, nsegs - first,
                                remote + first, nsegs - first, 0);
        if (ret < 0) {
            if (errno == EINTR) {
                continue;
            }
            return uct_remapring_wire_cma_error(cma, length);
        } else if (ret == 0) {
            errno = EFAULT;
            return uct_remapring_wire_cma_error(cma, length);
        }

        length -= ret;
        while ((ret > 0) && (first < nsegs)) {
            if ((size_t)ret >= local[first].iov_len) {
                ret -= local[first].iov_len;
                ++first;
            } else {
                local[first].iov_base = (char *)local[first].iov_base + ret;
                local[first].iov_len -= ret;
                remote[first].iov_base = (char *)remote[first].iov_base + ret;
                remote[first].iov_len -= ret;
                ret = 0;
            }
        }
    }

    return UCS_OK;
}

static void
uct_remapring_wire_cma_publish_tail(uct_remapring_wire_t *wire, uint64_t tail)
{
    /* process_vm_writev() has returned, so its stores are done; the release
     * store orders the tail after them for the reader's load-acquire */
    uct_remapring_ring_ctl_store_tail(((uct_remapring_wire_cma_t *)wire)->ctl,
                                      tail);
}

static uint64_t uct_remapring_wire_cma_limit(uct_remapring_wire_t *wire)
{
    return uct_remapring_ring_ctl_load_limit(
            ((uct_remapring_wire_cma_t *)wire)->ctl);
}

static void uct_remapring_wire_cma_stalled(uct_remapring_wire_t *wire)
{
    uct_remapring_wire_ctl_stalled(((uct_remapring_wire_cma_t*)wire)->ctl);
}

static uint64_t uct_remapring_wire_cma_reclaim(uct_remapring_wire_t *wire)
{
    return uct_remapring_wire_ctl_reclaim(((uct_remapring_wire_cma_t*)wire)->ctl);
}

static void uct_remapring_wire_cma_yield(uct_remapring_wire_t *wire,
                                         uint64_t seq, uint64_t bound)
{
    uct_remapring_wire_ctl_yield(((uct_remapring_wire_cma_t*)wire)->ctl, seq, bound);
}

static void uct_remapring_wire_cma_destroy(uct_remapring_wire_t *wire)
{
    free(wire);
}

static const uct_remapring_wire_ops_t uct_remapring_wire_cma_ops = {
        .write         = uct_remapring_wire_cma_write,
        .publish_tail  = uct_remapring_wire_cma_publish_tail,
        .limit         = uct_remapring_wire_cma_limit,
        .stalled       = uct_remapring_wire_cma_stalled,
        .reclaim       = uct_remapring_wire_cma_reclaim,
        .yield         = uct_remapring_wire_cma_yield,
        .destroy       = uct_remapring_wire_cma_destroy};

ucs_status_t uct_remapring_wire_cma_create(pid_t pid, uint64_t remote_view,
                                           size_t window_size,
                                           uct_remapring_ring_ctl_t *ctl,
                                           uct_remapring_wire_t **wire_p)
{
    uct_remapring_wire_cma_t *cma;

    cma = calloc(1, sizeof(*cma));
    if (cma == NULL) {
        ucs_error("failed to allocate cma wire");
        return UCS_ERR_NO_MEMORY;
    }

    cma->super.ops         = &uct_remapring_wire_cma_ops;
    cma->super.window_size = window_size;
    cma->super.can_stamp   = 0; /* the kernel copies in no promised order */
    cma->pid               = pid;
    cma->remote_view       = remote_view;
    cma->ctl               = ctl;
    *wire_p                = &cma->super;
    ucs_debug("cma wire %p pid %d view 0x%lx window %zu", cma, pid, remote_view,
              window_size);
    return UCS_OK;
}
