/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <uct/ib/remapring/ring/ring.h>
#include <uct/ib/remapring/ring/ring_wire.h>

#include <ucs/debug/log_def.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>


typedef struct remapring_wire_cma {
    remapring_wire_t super;
    pid_t pid; /* reader process */
    uint64_t remote_view; /* its ring view */
    remapring_ring_ctl_t *ctl; /* shared control words */
} remapring_wire_cma_t;


static ucs_status_t
remapring_wire_cma_error(remapring_wire_cma_t *cma, size_t length)
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

/* Drop the first @a consumed bytes of the pieces from *@a idx_p on. As
 * ucs_iov_advance() does; the engine builds on UCX's installed headers
 * alone, which do not declare it */
static void remapring_iov_advance(struct iovec *iov, size_t cnt, size_t *idx_p,
                                  size_t consumed)
{
    size_t i;

    for (i = *idx_p; (i < cnt) && (consumed >= iov[i].iov_len); ++i) {
        consumed -= iov[i].iov_len;
    }

    if (i < cnt) {
        iov[i].iov_base = (char *)iov[i].iov_base + consumed;
        iov[i].iov_len -= consumed;
    }

    *idx_p = i;
}

int remapring_proc_vm_xfer(pid_t pid, struct iovec *local, size_t nlocal,
                           struct iovec *remote, size_t nremote, size_t length,
                           int write)
{
    size_t local_idx = 0, remote_idx = 0;
    ssize_t ret;

    while (length > 0) {
        ret = write ? process_vm_writev(pid, local + local_idx,
                                        nlocal - local_idx, remote + remote_idx,
                                        nremote - remote_idx, 0) :
                      process_vm_readv(pid, local + local_idx,
                                       nlocal - local_idx, remote + remote_idx,
                                       nremote - remote_idx, 0);
        if (ret < 0) {
            if (errno == EINTR) {
                continue;
            }
            return errno;
        } else if (ret == 0) {
            /* stopped at an unmapped page */
            return EFAULT;
        }

        length -= ret;
        remapring_iov_advance(local, nlocal, &local_idx, ret);
        remapring_iov_advance(remote, nremote, &remote_idx, ret);
    }

    return 0;
}

static ucs_status_t remapring_wire_cma_write(remapring_wire_t *wire,
                                             const remapring_wire_seg_t *segs,
                                             unsigned nsegs)
{
    remapring_wire_cma_t *cma = (remapring_wire_cma_t *)wire;
    struct iovec local[REMAPRING_WIRE_MAX_SEGS];
    struct iovec remote[REMAPRING_WIRE_MAX_SEGS];
    size_t length = 0;
    unsigned i;
    int err;

    for (i = 0; i < nsegs; ++i) {
        local[i].iov_base  = (void *)segs[i].buffer;
        local[i].iov_len   = segs[i].length;
        remote[i].iov_base = (void *)(uintptr_t)(cma->remote_view +
                                                 remapring_wire_view_pos(
                                                         wire, segs[i].offset));
        remote[i].iov_len  = segs[i].length;
        length += segs[i].length;
    }

    /* The kernel walks the reader's page tables now, so the bytes land in
     * whatever block is mapped under the slot at this moment */
    err = remapring_proc_vm_xfer(cma->pid, local, nsegs, remote, nsegs, length,
                                 1);
    if (err != 0) {
        errno = err;
        return remapring_wire_cma_error(cma, length);
    }

    return UCS_OK;
}

static void
remapring_wire_cma_publish_tail(remapring_wire_t *wire, uint64_t tail)
{
    /* process_vm_writev() has returned, so its stores are done; the release
     * store orders the tail after them for the reader's load-acquire */
    remapring_ring_ctl_store_tail(((remapring_wire_cma_t *)wire)->ctl, tail);
}

static uint64_t remapring_wire_cma_limit(remapring_wire_t *wire)
{
    return remapring_ring_ctl_load_limit(((remapring_wire_cma_t *)wire)->ctl);
}

static void remapring_wire_cma_stalled(remapring_wire_t *wire)
{
    remapring_wire_ctl_stalled(((remapring_wire_cma_t *)wire)->ctl);
}

static uint64_t remapring_wire_cma_reclaim(remapring_wire_t *wire)
{
    return remapring_wire_ctl_reclaim(((remapring_wire_cma_t *)wire)->ctl);
}

static void
remapring_wire_cma_yield(remapring_wire_t *wire, uint64_t seq, uint64_t bound)
{
    remapring_wire_ctl_yield(((remapring_wire_cma_t *)wire)->ctl, seq, bound);
}

static void remapring_wire_cma_destroy(remapring_wire_t *wire)
{
    free(wire);
}

static const remapring_wire_ops_t remapring_wire_cma_ops = {
        .write        = remapring_wire_cma_write,
        .publish_tail = remapring_wire_cma_publish_tail,
        .limit        = remapring_wire_cma_limit,
        .stalled      = remapring_wire_cma_stalled,
        .reclaim      = remapring_wire_cma_reclaim,
        .yield        = remapring_wire_cma_yield,
        .destroy      = remapring_wire_cma_destroy};

ucs_status_t
remapring_wire_cma_create(pid_t pid, uint64_t remote_view, size_t window_size,
                          remapring_ring_ctl_t *ctl, remapring_wire_t **wire_p)
{
    remapring_wire_cma_t *cma;

    cma = calloc(1, sizeof(*cma));
    if (cma == NULL) {
        ucs_error("failed to allocate cma wire");
        return UCS_ERR_NO_MEMORY;
    }

    cma->super.ops         = &remapring_wire_cma_ops;
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
