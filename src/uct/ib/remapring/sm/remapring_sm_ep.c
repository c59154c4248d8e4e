/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "remapring_sm_conn.h"
#include "remapring_sm_md.h"

#include <uct/ib/remapring/base/remapring_ep.inl>

#include <ucs/debug/log.h>

#include <errno.h>


/*
 * Put and get move the bytes with one process_vm_writev/readv loop
 * (remapring_proc_vm_xfer(), shared with the cma wire), or from
 * UCX_REMAPRING_SHARE_MIN on with the receiver's progress copying a share
 * of the chunks (remapring_sm_share.c), and complete when they return, as
 * UCX's cma transport does for its zcopy operations. Not
 * UCT's scopy base (uct_scopy_iface_t): it splits every operation into
 * segments that progress from a pending queue and completes them later,
 * and it is the base of an interface class of its own; here put and get
 * are operations of the ring's interface, and a short or bcopy one must
 * complete at once.
 */


/* After a record is published: ring the receiver's doorbell if it sleeps */
static UCS_F_ALWAYS_INLINE void
uct_remapring_sm_published(uct_remapring_peer_t *peer)
{
    uct_remapring_remote_ring_bell(
            &ucs_derived_of(peer, uct_remapring_sm_peer_t)->remote);
}

ucs_status_t uct_remapring_sm_ep_am_short(uct_ep_h tl_ep, uint8_t id,
                                          uint64_t header, const void *payload,
                                          unsigned length)
{
    return uct_remapring_ep_am_short_inl(tl_ep, id, header, payload, length,
                                         uct_remapring_sm_published);
}

ucs_status_t uct_remapring_sm_ep_am_short_iov(uct_ep_h tl_ep, uint8_t id,
                                              const uct_iov_t *iov,
                                              size_t iovcnt)
{
    return uct_remapring_ep_am_short_iov_inl(tl_ep, id, iov, iovcnt,
                                             uct_remapring_sm_published);
}

ssize_t uct_remapring_sm_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id,
                                     uct_pack_callback_t pack_cb, void *arg,
                                     unsigned flags)
{
    return uct_remapring_ep_am_bcopy_inl(tl_ep, id, pack_cb, arg, flags,
                                         uct_remapring_sm_published);
}

ucs_status_t
uct_remapring_sm_ep_am_zcopy(uct_ep_h tl_ep, uint8_t id, const void *header,
                             unsigned header_length, const uct_iov_t *iov,
                             size_t iovcnt, unsigned flags,
                             uct_completion_t *comp)
{
    return uct_remapring_ep_am_zcopy_inl(tl_ep, id, header, header_length, iov,
                                         iovcnt, flags, comp,
                                         uct_remapring_sm_published);
}


/* --------------------------------------------------------------------- RMA */

static UCS_F_ALWAYS_INLINE uct_remapring_sm_peer_t *
uct_remapring_sm_ep_peer(uct_ep_h tl_ep)
{
    return ucs_derived_of(ucs_derived_of(tl_ep, uct_remapring_ep_t)->peer,
                          uct_remapring_sm_peer_t);
}

/* Move @a length bytes of @a local to or from [@a remote_addr, + length) of
 * the receiver, which @a rkey must cover */
static ucs_status_t
uct_remapring_sm_ep_rma_vec(uct_ep_h tl_ep, struct iovec *local, size_t iovcnt,
                            size_t length, uint64_t remote_addr,
                            uct_rkey_t rkey, int write)
{
    uct_remapring_sm_peer_t *peer = uct_remapring_sm_ep_peer(tl_ep);
    pid_t pid                     = peer->remote.proc.pid;
    struct iovec remote;
    ucs_status_t status;
    int err;

    if (ucs_unlikely(peer->super.status != UCS_OK)) {
        return peer->super.status;
    } else if (length == 0) {
        return UCS_OK; /* nothing to move, whatever the key */
    }

    status = uct_remapring_rkey_check(rkey, pid, remote_addr, length);
    if (status != UCS_OK) {
        return status;
    }

    err = -1;
    if ((iovcnt == 1) && (length >= ucs_derived_of(peer->super.iface,
                                                   uct_remapring_sm_iface_t)
                                           ->share.min)) {
        /* long enough for the receiver's core to take a share */
        err = uct_remapring_sm_share_rma(peer, local->iov_base, length,
                                         remote_addr, write);
    }

    if (err < 0) {
        remote.iov_base = (void *)remote_addr;
        remote.iov_len  = length;
        err = remapring_proc_vm_xfer(pid, local, iovcnt, &remote, 1, length,
                                     write);
    }

    if (ucs_likely(err == 0)) {
        return UCS_OK;
    } else if (err == ESRCH) {
        /* an ordinary peer failure, reported as such */
        uct_remapring_peer_failed(&peer->super, UCS_ERR_CONNECTION_RESET,
                                  "the receiver process exited");
        return peer->super.status;
    } else if ((err == ETIMEDOUT) || (err == EPROTO)) {
        /* the receiver failed its share of a shared copy (logged) */
        uct_remapring_peer_failed(&peer->super, UCS_ERR_IO_ERROR,
                                  "a shared copy failed");
        return peer->super.status;
    }

    ucs_error("process_vm_%s(pid %d, 0x%" PRIx64 ", %zu) failed: %s",
              write ? "writev" : "readv", pid, remote_addr, length,
              strerror(err));
    return UCS_ERR_IO_ERROR;
}

static ucs_status_t
uct_remapring_sm_ep_rma(uct_ep_h tl_ep, const uct_iov_t *iov, size_t iovcnt,
                        uint64_t remote_addr, uct_rkey_t rkey, int write)
{
    struct iovec local[UCT_REMAPRING_MAX_IOV];
    size_t veccnt = UCT_REMAPRING_MAX_IOV;
    ucs_iov_iter_t iter;
    size_t length;

    UCT_CHECK_IOV_SIZE(iovcnt, UCT_REMAPRING_MAX_IOV, "rma");
    ucs_iov_iter_init(&iter);
    length = uct_iov_to_iovec(local, &veccnt, iov, iovcnt, SIZE_MAX, &iter);
    return uct_remapring_sm_ep_rma_vec(tl_ep, local, veccnt, length,
                                       remote_addr, rkey, write);
}

/* One piece of local memory to or from the peer */
static ucs_status_t
uct_remapring_sm_ep_rma_buf(uct_ep_h tl_ep, void *buffer, size_t length,
                            uint64_t remote_addr, uct_rkey_t rkey, int write)
{
    struct iovec local = {.iov_base = buffer, .iov_len = length};

    return uct_remapring_sm_ep_rma_vec(tl_ep, &local, 1, length, remote_addr,
                                       rkey, write);
}

ucs_status_t uct_remapring_sm_ep_put_short(uct_ep_h tl_ep, const void *buffer,
                                           unsigned length,
                                           uint64_t remote_addr,
                                           uct_rkey_t rkey)
{
    uct_remapring_ep_t *ep       = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    uct_remapring_iface_t *iface = uct_remapring_ep_iface(ep);
    ucs_status_t status;

    UCT_REMAPRING_CHECK_MAX(length, iface->tx.max_short, "put_short");
    status = uct_remapring_sm_ep_rma_buf(tl_ep, (void *)buffer, length,
                                         remote_addr, rkey, 1);
    if (status == UCS_OK) {
        UCT_TL_EP_STAT_OP(&ep->super, PUT, SHORT, length);
    }

    return status;
}

ssize_t uct_remapring_sm_ep_put_bcopy(uct_ep_h tl_ep,
                                      uct_pack_callback_t pack_cb, void *arg,
                                      uint64_t remote_addr, uct_rkey_t rkey)
{
    uct_remapring_ep_t *ep       = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    uct_remapring_iface_t *iface = uct_remapring_ep_iface(ep);
    ucs_status_t status;
    size_t length;

    length = pack_cb(iface->tx.bounce, arg);
    UCT_CHECK_LENGTH(length, 0, iface->tx.max_bcopy, "put_bcopy");
    status = uct_remapring_sm_ep_rma_buf(tl_ep, iface->tx.bounce, length,
                                         remote_addr, rkey, 1);
    if (status != UCS_OK) {
        return status;
    }

    UCT_TL_EP_STAT_OP(&ep->super, PUT, BCOPY, length);
    return length;
}

ucs_status_t
uct_remapring_sm_ep_get_short(uct_ep_h tl_ep, void *buffer, unsigned length,
                              uint64_t remote_addr, uct_rkey_t rkey)
{
    uct_remapring_ep_t *ep       = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    uct_remapring_iface_t *iface = uct_remapring_ep_iface(ep);
    ucs_status_t status;

    UCT_REMAPRING_CHECK_MAX(length, iface->tx.max_short, "get_short");
    status = uct_remapring_sm_ep_rma_buf(tl_ep, buffer, length, remote_addr,
                                         rkey, 0);
    if (status == UCS_OK) {
        UCT_TL_EP_STAT_OP(&ep->super, GET, SHORT, length);
    }

    return status;
}

ucs_status_t
uct_remapring_sm_ep_get_bcopy(uct_ep_h tl_ep, uct_unpack_callback_t unpack_cb,
                              void *arg, size_t length, uint64_t remote_addr,
                              uct_rkey_t rkey, uct_completion_t *comp)
{
    uct_remapring_ep_t *ep       = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    uct_remapring_iface_t *iface = uct_remapring_ep_iface(ep);
    ucs_status_t status;

    UCT_CHECK_LENGTH(length, 0, iface->tx.max_bcopy, "get_bcopy");
    status = uct_remapring_sm_ep_rma_buf(tl_ep, iface->tx.bounce, length,
                                         remote_addr, rkey, 0);
    if (status != UCS_OK) {
        return status;
    }

    /* the bytes are here: complete at once */
    unpack_cb(arg, iface->tx.bounce, length);
    UCT_TL_EP_STAT_OP(&ep->super, GET, BCOPY, length);
    return UCS_OK;
}

ucs_status_t uct_remapring_sm_ep_put_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                           size_t iovcnt, uint64_t remote_addr,
                                           uct_rkey_t rkey,
                                           uct_completion_t *comp)
{
    ucs_status_t status;

    status = uct_remapring_sm_ep_rma(tl_ep, iov, iovcnt, remote_addr, rkey, 1);
    if (status == UCS_OK) {
        UCT_TL_EP_STAT_OP(&ucs_derived_of(tl_ep, uct_remapring_ep_t)->super,
                          PUT, ZCOPY, uct_iov_total_length(iov, iovcnt));
    }

    return status;
}

ucs_status_t uct_remapring_sm_ep_get_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                           size_t iovcnt, uint64_t remote_addr,
                                           uct_rkey_t rkey,
                                           uct_completion_t *comp)
{
    ucs_status_t status;

    status = uct_remapring_sm_ep_rma(tl_ep, iov, iovcnt, remote_addr, rkey, 0);
    if (status == UCS_OK) {
        UCT_TL_EP_STAT_OP(&ucs_derived_of(tl_ep, uct_remapring_ep_t)->super,
                          GET, ZCOPY, uct_iov_total_length(iov, iovcnt));
    }

    return status;
}

ucs_status_t uct_remapring_sm_ep_check(uct_ep_h tl_ep, unsigned flags,
                                       uct_completion_t *comp)
{
    UCT_EP_KEEPALIVE_CHECK_PARAM(flags, comp);
    uct_remapring_sm_peer_check(uct_remapring_sm_ep_peer(tl_ep));
    return UCS_OK;
}
