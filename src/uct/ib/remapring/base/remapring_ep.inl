/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef UCT_REMAPRING_EP_INL_
#define UCT_REMAPRING_EP_INL_

/*
 * Active messages through the peer's ring writer, the fast path of every
 * transport on the ring. Each transport instantiates the sends below with
 * its own uct_remapring_ep_published_func_t, a constant the compiler
 * inlines: what it does once a record is visible to the receiver (the
 * shared-memory transport rings the receiver's doorbell if it sleeps; the
 * RDMA transport's write-with-immediate is its own doorbell).
 */

#include "remapring_ep.h"

#include <uct/base/uct_iov.inl>

#include <sys/uio.h>


/** What a transport does after a record of @a peer is published */
typedef void (*uct_remapring_ep_published_func_t)(uct_remapring_peer_t *peer);


static UCS_F_ALWAYS_INLINE uct_remapring_iface_t *
uct_remapring_ep_iface(const uct_remapring_ep_t *ep)
{
    return ucs_derived_of(ep->super.super.iface, uct_remapring_iface_t);
}

/* Whether @a ep must stay behind its pending requests: UCT sends in order,
 * except the requests being dispatched */
static UCS_F_ALWAYS_INLINE int
uct_remapring_ep_behind_pending(const uct_remapring_iface_t *iface,
                                uct_remapring_ep_t *ep)
{
    return ucs_unlikely(!ucs_arbiter_group_is_empty(&ep->arb_group)) &&
           (iface->tx.dispatching != ep);
}

/* UCS_OK once the peer's ring is ready and nothing waits before this send;
 * else the status to return, or to keep the send for (early) */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_remapring_ep_ready(uct_remapring_iface_t *iface, uct_remapring_ep_t *ep)
{
    uct_remapring_peer_t *peer = ep->peer;

    if (ucs_likely((peer->wire != NULL) && (peer->status == UCS_OK) &&
                   !uct_remapring_ep_behind_pending(iface, ep) &&
                   (peer->backlog == NULL))) {
        return UCS_OK;
    }

    return uct_remapring_ep_not_ready(ep);
}

/* Send through the writer's general path on a ready endpoint */
static UCS_F_ALWAYS_INLINE ucs_status_t uct_remapring_ep_send_ready(
        uct_remapring_ep_t *ep, uint8_t id, const struct iovec *iov,
        size_t iovcnt, uct_remapring_ep_published_func_t published)
{
    uct_remapring_peer_t *peer = ep->peer;
    ucs_status_t status;

    status = remapring_ring_writer_send(&peer->writer, id, 0, iov, iovcnt);
    if (ucs_likely(status == UCS_OK)) {
        published(peer);
        return UCS_OK;
    }

    return uct_remapring_peer_send_failed(peer, status);
}

/* Send @a iovcnt pieces of @a length bytes in all on a ready endpoint: the
 * direct way if the record goes that way, else the general way */
static UCS_F_ALWAYS_INLINE ucs_status_t uct_remapring_ep_send_iov_ready(
        uct_remapring_ep_t *ep, uint8_t id, const struct iovec *iov,
        size_t iovcnt, size_t length,
        uct_remapring_ep_published_func_t published)
{
    remapring_ring_direct_t d;
    size_t i, pos;

    if (ucs_unlikely(!remapring_ring_writer_direct_begin(&ep->peer->writer,
                                                         length, &d))) {
        return uct_remapring_ep_send_ready(ep, id, iov, iovcnt, published);
    }

    /* an empty piece may have no buffer: memcpy must not see it */
    for (i = 0, pos = 0; i < iovcnt; ++i) {
        if (iov[i].iov_len != 0) {
            remapring_wire_copy(d.payload + pos, iov[i].iov_base,
                                iov[i].iov_len);
            pos += iov[i].iov_len;
        }
    }

    remapring_ring_writer_direct_commit(&ep->peer->writer, &d, id, length);
    published(ep->peer);
    return UCS_OK;
}

/* Send @a iovcnt pieces of @a length bytes in all: kept for the connection
 * if the endpoint is not ready and the transport takes early sends, else
 * the direct or the general way */
static UCS_F_ALWAYS_INLINE ucs_status_t uct_remapring_ep_send(
        uct_remapring_iface_t *iface, uct_remapring_ep_t *ep, uint8_t id,
        const struct iovec *iov, size_t iovcnt, size_t length,
        uct_remapring_ep_published_func_t published)
{
    ucs_status_t status = uct_remapring_ep_ready(iface, ep);

    if (ucs_unlikely(status != UCS_OK)) {
        return uct_remapring_ep_send_early(ep, status, id, iov, iovcnt);
    }

    return uct_remapring_ep_send_iov_ready(ep, id, iov, iovcnt, length,
                                           published);
}

/* See uct_ep_am_short() */
static UCS_F_ALWAYS_INLINE ucs_status_t uct_remapring_ep_am_short_inl(
        uct_ep_h tl_ep, uint8_t id, uint64_t header, const void *payload,
        unsigned length, uct_remapring_ep_published_func_t published)
{
    uct_remapring_ep_t *ep       = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    uct_remapring_iface_t *iface = uct_remapring_ep_iface(ep);
    struct iovec iov[2] = {{.iov_base = &header, .iov_len = sizeof(header)},
                           {.iov_base = (void *)payload, .iov_len = length}};
    remapring_ring_direct_t d;
    ucs_status_t status;

    UCT_CHECK_AM_ID(id);
    UCT_CHECK_LENGTH(sizeof(header) + length, 0, iface->tx.max_short,
                     "am_short");
    status = uct_remapring_ep_ready(iface, ep);
    if (ucs_unlikely(status != UCS_OK)) {
        status = uct_remapring_ep_send_early(ep, status, id, iov, 2);
    } else if (ucs_likely(remapring_ring_writer_direct_begin(
                       &ep->peer->writer, sizeof(header) + length, &d))) {
        memcpy(d.payload, &header, sizeof(header));
        if (length != 0) { /* no payload may come with no buffer */
            remapring_wire_copy(d.payload + sizeof(header), payload,
                                length);
        }
        remapring_ring_writer_direct_commit(&ep->peer->writer, &d, id,
                                            sizeof(header) + length);
        published(ep->peer);
    } else {
        status = uct_remapring_ep_send_ready(ep, id, iov, 2, published);
    }

    if (ucs_likely(status == UCS_OK)) {
        UCT_TL_EP_STAT_OP(&ep->super, AM, SHORT, sizeof(header) + length);
        uct_iface_trace_am(&iface->super, UCT_AM_TRACE_TYPE_SEND, id, &header,
                           sizeof(header) + length, "TX: AM_SHORT");
    }

    return status;
}

/* See uct_ep_am_short_iov() */
static UCS_F_ALWAYS_INLINE ucs_status_t uct_remapring_ep_am_short_iov_inl(
        uct_ep_h tl_ep, uint8_t id, const uct_iov_t *iov, size_t iovcnt,
        uct_remapring_ep_published_func_t published)
{
    uct_remapring_ep_t *ep       = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    uct_remapring_iface_t *iface = uct_remapring_ep_iface(ep);
    struct iovec vec[UCT_REMAPRING_MAX_IOV];
    size_t veccnt = UCT_REMAPRING_MAX_IOV;
    ucs_iov_iter_t iter;
    ucs_status_t status;
    size_t length;

    UCT_CHECK_AM_ID(id);
    UCT_CHECK_IOV_SIZE(iovcnt, UCT_REMAPRING_MAX_IOV, "am_short_iov");
    ucs_iov_iter_init(&iter);
    length = uct_iov_to_iovec(vec, &veccnt, iov, iovcnt, SIZE_MAX, &iter);
    UCT_CHECK_LENGTH(length, 0, iface->tx.max_short, "am_short_iov");
    status = uct_remapring_ep_send(iface, ep, id, vec, veccnt, length,
                                   published);
    if (ucs_likely(status == UCS_OK)) {
        UCT_TL_EP_STAT_OP(&ep->super, AM, SHORT, length);
        uct_iface_trace_am(&iface->super, UCT_AM_TRACE_TYPE_SEND, id,
                           (veccnt > 0) ? vec[0].iov_base : NULL,
                           (veccnt > 0) ? vec[0].iov_len : 0,
                           "TX: AM_SHORT_IOV");
    }

    return status;
}

/* See uct_ep_am_bcopy() */
static UCS_F_ALWAYS_INLINE ssize_t uct_remapring_ep_am_bcopy_inl(
        uct_ep_h tl_ep, uint8_t id, uct_pack_callback_t pack_cb, void *arg,
        unsigned flags, uct_remapring_ep_published_func_t published)
{
    uct_remapring_ep_t *ep       = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    uct_remapring_iface_t *iface = uct_remapring_ep_iface(ep);
    struct iovec iov;
    ucs_status_t status;

    UCT_CHECK_AM_ID(id);
    status = uct_remapring_ep_ready(iface, ep);
    if (ucs_unlikely(status != UCS_OK)) {
        return uct_remapring_ep_bcopy_early(ep, status, id, pack_cb, arg);
    }

    /* the packer cannot write into another process: pack here, then check
     * credit for the real size */
    if (!remapring_ring_writer_can_send(&ep->peer->writer, 0)) {
        return uct_remapring_peer_send_failed(ep->peer, UCS_ERR_NO_RESOURCE);
    }

    iov.iov_base = iface->tx.bounce;
    iov.iov_len  = pack_cb(iface->tx.bounce, arg);
    UCT_CHECK_LENGTH(iov.iov_len, 0, iface->tx.max_bcopy, "am_bcopy");

    status = uct_remapring_ep_send_iov_ready(ep, id, &iov, 1, iov.iov_len,
                                             published);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    UCT_TL_EP_STAT_OP(&ep->super, AM, BCOPY, iov.iov_len);
    uct_iface_trace_am(&iface->super, UCT_AM_TRACE_TYPE_SEND, id, iov.iov_base,
                       iov.iov_len, "TX: AM_BCOPY");
    return iov.iov_len;
}

/* See uct_ep_am_zcopy(): the bytes are in the receiver's ring when it
 * returns, so it completes at once */
static UCS_F_ALWAYS_INLINE ucs_status_t uct_remapring_ep_am_zcopy_inl(
        uct_ep_h tl_ep, uint8_t id, const void *header, unsigned header_length,
        const uct_iov_t *iov, size_t iovcnt, unsigned flags,
        uct_completion_t *comp, uct_remapring_ep_published_func_t published)
{
    uct_remapring_ep_t *ep       = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    uct_remapring_iface_t *iface = uct_remapring_ep_iface(ep);
    struct iovec vec[UCT_REMAPRING_MAX_IOV + 1];
    size_t veccnt = UCT_REMAPRING_MAX_IOV;
    ucs_iov_iter_t iter;
    ucs_status_t status;
    size_t length;

    UCT_CHECK_AM_ID(id);
    UCT_CHECK_IOV_SIZE(iovcnt, UCT_REMAPRING_MAX_IOV, "am_zcopy");
    UCT_REMAPRING_CHECK_MAX(header_length, UCT_REMAPRING_AM_MAX_HDR,
                            "am_zcopy header");

    vec[0].iov_base = (void *)header;
    vec[0].iov_len  = header_length;
    ucs_iov_iter_init(&iter);
    length = uct_iov_to_iovec(vec + 1, &veccnt, iov, iovcnt, SIZE_MAX, &iter);
    UCT_CHECK_LENGTH(length, 0, iface->tx.max_bcopy - UCT_REMAPRING_AM_MAX_HDR,
                     "am_zcopy");
    status = uct_remapring_ep_send(iface, ep, id, vec, veccnt + 1,
                                   header_length + length, published);
    if (ucs_likely(status == UCS_OK)) {
        UCT_TL_EP_STAT_OP(&ep->super, AM, ZCOPY, header_length + length);
        uct_iface_trace_am(&iface->super, UCT_AM_TRACE_TYPE_SEND, id, header,
                           header_length, "TX: AM_ZCOPY");
    }

    return status;
}

#endif
