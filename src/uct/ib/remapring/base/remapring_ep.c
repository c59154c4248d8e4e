/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "remapring_ep.inl"

#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/string.h>
#include <uct/base/uct_worker.h>

#include <stdarg.h>


enum {
    UCT_REMAPRING_EP_ERR_NONE,
    UCT_REMAPRING_EP_ERR_QUEUED,
    UCT_REMAPRING_EP_ERR_DELIVERED
};


/* ---------------------------------------------------------------- failure */

static unsigned uct_remapring_ep_err_progress(void *arg)
{
    uct_remapring_ep_t *ep       = arg;
    uct_remapring_iface_t *iface = uct_remapring_ep_iface(ep);
    ucs_status_t peer_status     = ep->peer->status;
    ucs_status_t cause           = ep->peer->cause;
    const char *reason           = ep->peer->reason;
    char name[sizeof(ep->peer->name)];
    ucs_status_t status;

    ucs_strncpy_zero(name, ep->peer->name, sizeof(name));
    ep->err_state = UCT_REMAPRING_EP_ERR_DELIVERED;
    --iface->tx.nerrs_queued;
    /* the handler may destroy the endpoint: nothing of it is used after */
    status = uct_iface_handle_ep_err(&iface->super.super, &ep->super.super,
                                     peer_status);
    ucs_log(uct_base_iface_failure_log_level(&iface->super, status,
                                             peer_status),
            "ep %p to %s: %s (%s)", arg, name, reason,
            ucs_status_string(cause));
    return 1;
}

static int uct_remapring_ep_err_match(const ucs_callbackq_elem_t *elem,
                                      void *arg)
{
    return (elem->cb == uct_remapring_ep_err_progress) && (elem->arg == arg);
}

/* Call the error handler for @a ep from the worker's progress, once */
static void uct_remapring_ep_schedule_err(uct_remapring_ep_t *ep)
{
    uct_remapring_iface_t *iface = uct_remapring_ep_iface(ep);

    if (ep->err_state != UCT_REMAPRING_EP_ERR_NONE) {
        return;
    }

    if (iface->super.err_handler == NULL) {
        ep->err_state = UCT_REMAPRING_EP_ERR_DELIVERED;
        ucs_diag("ep %p to %s: %s, and no error handler", ep, ep->peer->name,
                 ep->peer->reason);
        return;
    }

    ep->err_state = UCT_REMAPRING_EP_ERR_QUEUED;
    ++iface->tx.nerrs_queued;
    ucs_callbackq_add_safe(&iface->super.worker->super.progress_q,
                           uct_remapring_ep_err_progress, ep,
                           UCS_CALLBACKQ_FLAG_ONESHOT);
}

static void uct_remapring_ep_unblock(uct_remapring_ep_t *ep)
{
    if (ep->blocked) {
        ucs_list_del(&ep->list);
        ep->blocked = 0;
    }
}

/* Expected failures (the receiver went away) are logged by the error
 * callback at the interface's failure level; the caller logs what it found
 * wrong beyond that. */
void uct_remapring_peer_failed(uct_remapring_peer_t *peer, ucs_status_t cause,
                               const char *reason)
{
    uct_remapring_ep_t *ep;

    ucs_assert(UCS_STATUS_IS_ERR(cause));
    if (peer->status != UCS_OK) {
        return;
    }

    ucs_debug("connection to %s failed: %s (%s)", peer->name, reason,
              ucs_status_string(cause));
    peer->status = UCS_ERR_ENDPOINT_TIMEOUT;
    peer->cause  = cause;
    peer->reason = reason;
    ucs_list_for_each(ep, &peer->eps, peer_list) {
        /* pending requests stay for the user to purge */
        uct_remapring_ep_unblock(ep);
        uct_remapring_ep_schedule_err(ep);
    }
}


/* ----------------------------------------------------------------- peers */

void uct_remapring_peer_init(uct_remapring_peer_t *peer,
                             uct_remapring_iface_t *iface, const char *fmt, ...)
{
    va_list ap;

    peer->iface       = iface;
    peer->key         = 0;
    peer->wire        = NULL;
    peer->status      = UCS_OK;
    peer->cause       = UCS_OK;
    peer->reset       = 0;
    peer->reason      = NULL;
    peer->early       = 0;
    peer->backlog     = NULL;
    peer->backlog_len = 0;
    peer->backlog_pos = 0;
    ucs_list_head_init(&peer->eps);

    va_start(ap, fmt);
    vsnprintf(peer->name, sizeof(peer->name), fmt, ap);
    va_end(ap);
}

void uct_remapring_peer_cleanup(uct_remapring_peer_t *peer)
{
    if (peer->backlog_pos < peer->backlog_len) {
        ucs_debug("%zu bytes of active messages to %s dropped: the"
                  " connection never came up",
                  peer->backlog_len - peer->backlog_pos, peer->name);
    }

    ucs_free(peer->backlog);
    if (peer->wire != NULL) {
        remapring_wire_destroy(peer->wire);
    }
}

ucs_status_t uct_remapring_peer_set_wire(uct_remapring_peer_t *peer,
                                         const remapring_ring_info_t *info,
                                         remapring_wire_t *wire)
{
    ucs_status_t status;

    status = remapring_ring_writer_init(&peer->writer, info, wire);
    if (status != UCS_OK) {
        remapring_wire_destroy(wire);
        uct_remapring_peer_failed(peer, status, "its ring is not valid");
        return peer->status;
    }

    peer->wire = wire;
    return UCS_OK;
}

uct_remapring_peer_t *
uct_remapring_iface_find_peer(uct_remapring_iface_t *iface, uint64_t key)
{
    khiter_t iter = kh_get(uct_remapring_peers, &iface->tx.peers, key);

    if ((iter == kh_end(&iface->tx.peers)) ||
        (kh_val(&iface->tx.peers, iter)->status != UCS_OK)) {
        return NULL;
    }

    return kh_val(&iface->tx.peers, iter);
}

static void uct_remapring_peer_destroy(uct_remapring_peer_t *peer)
{
    uct_remapring_iface_t *iface = peer->iface;
    khiter_t iter;

    iter = kh_get(uct_remapring_peers, &iface->tx.peers, peer->key);
    if ((iter != kh_end(&iface->tx.peers)) &&
        (kh_val(&iface->tx.peers, iter) == peer)) {
        kh_del(uct_remapring_peers, &iface->tx.peers, iter);
    }

    iface->ops->peer_destroy(peer);
}

/* The peer for the receiver @a params names: the one this interface has, or
 * a new connection. A failed peer stays with its endpoints, and a new
 * endpoint gets a new connection. */
static ucs_status_t uct_remapring_peer_get(uct_remapring_iface_t *iface,
                                           const uct_ep_params_t *params,
                                           uct_remapring_peer_t **peer_p)
{
    uct_remapring_peer_t *peer;
    ucs_status_t status;
    uint64_t key;
    khiter_t iter;
    int ret;

    status = iface->ops->peer_key(iface, params, &key);
    if (status != UCS_OK) {
        return status;
    }

    iter = kh_get(uct_remapring_peers, &iface->tx.peers, key);
    if (iter != kh_end(&iface->tx.peers)) {
        peer = kh_val(&iface->tx.peers, iter);
        if (iface->ops->peer_match != NULL) {
            status = iface->ops->peer_match(peer, params);
            if (status != UCS_OK) {
                return status;
            }
        }

        if (peer->status == UCS_OK) {
            *peer_p = peer;
            return UCS_OK;
        }

        kh_del(uct_remapring_peers, &iface->tx.peers, iter);
    }

    status = iface->ops->peer_create(iface, params, &peer);
    if (status != UCS_OK) {
        return status;
    }

    peer->key = key;
    iter      = kh_put(uct_remapring_peers, &iface->tx.peers, key, &ret);
    if (ret == UCS_KH_PUT_FAILED) {
        ucs_error("failed to add a peer to the hash");
        iface->ops->peer_destroy(peer);
        return UCS_ERR_NO_MEMORY;
    }

    kh_val(&iface->tx.peers, iter) = peer;
    *peer_p                        = peer;
    return UCS_OK;
}

void uct_remapring_iface_warn_peers(uct_remapring_iface_t *iface)
{
    uct_remapring_peer_t *peer;

    kh_foreach_value(&iface->tx.peers, peer, {
        ucs_warn("iface %p closed with endpoints to %s", iface, peer->name);
    })
}


/* ------------------------------------------------------------- endpoints */

static UCS_CLASS_INIT_FUNC(uct_remapring_ep_t, const uct_ep_params_t *params)
{
    uct_remapring_iface_t *iface = ucs_derived_of(params->iface,
                                                  uct_remapring_iface_t);
    ucs_status_t status;

    UCT_EP_PARAMS_CHECK_DEV_IFACE_ADDRS(params);
    UCS_CLASS_CALL_SUPER_INIT(uct_base_ep_t, &iface->super);

    status = uct_remapring_peer_get(iface, params, &self->peer);
    if (status != UCS_OK) {
        return status;
    }

    self->blocked   = 0;
    self->err_state = UCT_REMAPRING_EP_ERR_NONE;
    self->cancelled = 0;
    ucs_arbiter_group_init(&self->arb_group);
    ucs_list_add_tail(&self->peer->eps, &self->peer_list);
    ucs_debug("ep %p to %s", self, self->peer->name);
    return UCS_OK;
}

static UCS_CLASS_CLEANUP_FUNC(uct_remapring_ep_t)
{
    uct_remapring_iface_t *iface = uct_remapring_ep_iface(self);

    /* requests the user left queued are dropped, as UCT's other transports
     * do, and said so */
    uct_remapring_ep_pending_purge(&self->super.super, NULL, NULL);
    ucs_arbiter_group_cleanup(&self->arb_group);
    if (self->err_state == UCT_REMAPRING_EP_ERR_QUEUED) {
        ucs_callbackq_remove_if(&iface->super.worker->super.progress_q,
                                uct_remapring_ep_err_match, self);
        --iface->tx.nerrs_queued;
    }

    ucs_list_del(&self->peer_list);
    if (ucs_list_is_empty(&self->peer->eps)) {
        self->peer->reset = self->cancelled;
        uct_remapring_peer_destroy(self->peer);
    }
}

UCS_CLASS_DEFINE(uct_remapring_ep_t, uct_base_ep_t);
UCS_CLASS_DEFINE_NEW_FUNC(uct_remapring_ep_t, uct_ep_t, const uct_ep_params_t*);
UCS_CLASS_DEFINE_DELETE_FUNC(uct_remapring_ep_t, uct_ep_t);


/* ------------------------------------------------------------ slow paths */

/*
 * Before the ring of a transport that takes early sends is ready (an RDMA
 * sender waits for the receiver's reply to know its ring), active messages
 * are copied to the peer's backlog, as UCX's connect-to-iface transports
 * accept sends before their handshake: up to twice the largest bcopy, then
 * UCS_ERR_NO_RESOURCE. Once the ring is ready they are written in order
 * before anything newer.
 */
typedef struct {
    uint32_t length;
    uint8_t  am_id;
} UCS_S_PACKED uct_remapring_backlog_hdr_t;

#define UCT_REMAPRING_BACKLOG_ALIGN 8

ucs_status_t
uct_remapring_peer_send_failed(uct_remapring_peer_t *peer, ucs_status_t status)
{
    if (status == UCS_ERR_NO_RESOURCE) {
        return peer->iface->ops->peer_stalled(peer);
    } else if (status != UCS_ERR_EXCEEDS_LIMIT) {
        uct_remapring_peer_failed(peer, status, "a write into its ring failed");
        return peer->status;
    }

    return status;
}

ucs_status_t uct_remapring_peer_replay(uct_remapring_peer_t *peer)
{
    uct_remapring_backlog_hdr_t hdr;
    ucs_status_t status;
    struct iovec iov;

    if ((peer->wire == NULL) || (peer->status != UCS_OK)) {
        return (peer->status != UCS_OK) ? peer->status : UCS_ERR_NO_RESOURCE;
    }

    while (peer->backlog_pos < peer->backlog_len) {
        memcpy(&hdr, peer->backlog + peer->backlog_pos, sizeof(hdr));
        iov.iov_base = peer->backlog + peer->backlog_pos + sizeof(hdr);
        iov.iov_len  = hdr.length;
        status = remapring_ring_writer_send(&peer->writer, hdr.am_id, 0, &iov,
                                            1);
        if (status != UCS_OK) {
            return uct_remapring_peer_send_failed(peer, status);
        }

        peer->backlog_pos += ucs_align_up_pow2(sizeof(hdr) + hdr.length,
                                               UCT_REMAPRING_BACKLOG_ALIGN);
    }

    ucs_free(peer->backlog);
    peer->backlog     = NULL;
    peer->backlog_len = peer->backlog_pos = 0;
    return UCS_OK;
}

ucs_status_t uct_remapring_ep_not_ready(uct_remapring_ep_t *ep)
{
    uct_remapring_peer_t *peer   = ep->peer;
    uct_remapring_iface_t *iface = peer->iface;
    ucs_status_t status;

    if (peer->status != UCS_OK) {
        return peer->status;
    }

    if (peer->wire == NULL) {
        status = iface->ops->peer_connect(peer);
        if (status != UCS_OK) {
            return status;
        }
    }

    if (uct_remapring_ep_behind_pending(iface, ep)) {
        return UCS_ERR_NO_RESOURCE;
    }

    /* what was kept before the connection goes first */
    if (peer->backlog != NULL) {
        return uct_remapring_peer_replay(peer);
    }

    return UCS_OK;
}

/* Whether a send that found @a ep not ready with @a status may be kept for
 * the connection: the transport takes early sends, its ring is on its way
 * and nothing waits before it */
static int
uct_remapring_ep_may_keep(uct_remapring_ep_t *ep, ucs_status_t status)
{
    uct_remapring_peer_t *peer = ep->peer;

    return (status == UCS_ERR_NO_RESOURCE) && peer->early &&
           (peer->wire == NULL) && (peer->status == UCS_OK) &&
           !uct_remapring_ep_behind_pending(peer->iface, ep);
}

/* Room for @a max_length bytes of message in the backlog, or NULL */
static void *
uct_remapring_backlog_reserve(uct_remapring_peer_t *peer, size_t max_length)
{
    size_t size = 2 * (peer->iface->tx.max_bcopy +
                       sizeof(uct_remapring_backlog_hdr_t) +
                       UCT_REMAPRING_BACKLOG_ALIGN);

    if (peer->backlog == NULL) {
        peer->backlog = ucs_malloc(size, "remapring_backlog");
        if (peer->backlog == NULL) {
            return NULL;
        }
    }

    if (peer->backlog_len + sizeof(uct_remapring_backlog_hdr_t) + max_length >
        size) {
        return NULL;
    }

    return peer->backlog + peer->backlog_len +
           sizeof(uct_remapring_backlog_hdr_t);
}

static void uct_remapring_backlog_commit(uct_remapring_peer_t *peer, uint8_t id,
                                         size_t length)
{
    uct_remapring_backlog_hdr_t hdr = {.length = length, .am_id = id};

    memcpy(peer->backlog + peer->backlog_len, &hdr, sizeof(hdr));
    peer->backlog_len += ucs_align_up_pow2(sizeof(hdr) + length,
                                           UCT_REMAPRING_BACKLOG_ALIGN);
}

ucs_status_t uct_remapring_ep_send_early(uct_remapring_ep_t *ep,
                                         ucs_status_t status, uint8_t id,
                                         const struct iovec *iov, size_t iovcnt)
{
    size_t i, length = 0;
    char *p;

    if (!uct_remapring_ep_may_keep(ep, status)) {
        return status;
    }

    for (i = 0; i < iovcnt; ++i) {
        length += iov[i].iov_len;
    }

    p = uct_remapring_backlog_reserve(ep->peer, length);
    if (p == NULL) {
        return UCS_ERR_NO_RESOURCE;
    }

    for (i = 0; i < iovcnt; ++i) {
        if (iov[i].iov_len != 0) { /* an empty piece may have no buffer */
            memcpy(p, iov[i].iov_base, iov[i].iov_len);
            p += iov[i].iov_len;
        }
    }

    uct_remapring_backlog_commit(ep->peer, id, length);
    return UCS_OK;
}

ssize_t uct_remapring_ep_bcopy_early(uct_remapring_ep_t *ep,
                                     ucs_status_t status, uint8_t id,
                                     uct_pack_callback_t pack_cb, void *arg)
{
    uct_remapring_iface_t *iface = uct_remapring_ep_iface(ep);
    void *p;
    size_t length;

    if (!uct_remapring_ep_may_keep(ep, status) ||
        ((p = uct_remapring_backlog_reserve(ep->peer, iface->tx.max_bcopy)) ==
         NULL)) {
        return status;
    }

    /* kept for the connection, packed in place */
    length = pack_cb(p, arg);
    UCT_CHECK_LENGTH(length, 0, iface->tx.max_bcopy, "am_bcopy");
    uct_remapring_backlog_commit(ep->peer, id, length);
    UCT_TL_EP_STAT_OP(&ep->super, AM, BCOPY, length);
    uct_iface_trace_am(&iface->super, UCT_AM_TRACE_TYPE_SEND, id, p, length,
                       "TX: AM_BCOPY");
    return length;
}


/* ---------------------------------------------------------------- pending */

/* Whether a record of @a length (SIZE_MAX: the largest) could go now, the
 * receiver's released head reloaded. pending_add asks for the largest: the
 * caller's send may need that much, and UCP retries a BUSY answer without
 * progressing, so a wrong BUSY locks two senders up. */
static int uct_remapring_ep_can_send(uct_remapring_ep_t *ep, size_t length)
{
    uct_remapring_peer_t *peer   = ep->peer;
    uct_remapring_iface_t *iface = peer->iface;

    if ((peer->wire == NULL) && (iface->ops->peer_connect(peer) != UCS_OK)) {
        return 0;
    }

    if (length == SIZE_MAX) {
        length = remapring_ring_writer_max_payload(&peer->writer);
    }

    /* the transport's own send resources, freed by its completions only,
     * and what was kept before the connection sent */
    if (((iface->ops->peer_can_post != NULL) &&
         !iface->ops->peer_can_post(peer, length)) ||
        ((peer->backlog != NULL) &&
         (uct_remapring_peer_replay(peer) != UCS_OK))) {
        return 0;
    }

    if (remapring_ring_writer_can_send(&peer->writer, length)) {
        return 1;
    }

    iface->ops->peer_stalled(peer);
    return 0;
}

static void uct_remapring_ep_block(uct_remapring_iface_t *iface,
                                   uct_remapring_ep_t *ep)
{
    if (!ep->blocked && (ep->peer->status == UCS_OK)) {
        ep->blocked = 1;
        ucs_list_add_tail(&iface->tx.blocked, &ep->list);
    }
}

ucs_status_t uct_remapring_ep_pending_add(uct_ep_h tl_ep,
                                          uct_pending_req_t *req,
                                          unsigned flags)
{
    uct_remapring_ep_t *ep       = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    uct_remapring_iface_t *iface = uct_remapring_ep_iface(ep);

    if (ucs_arbiter_group_is_empty(&ep->arb_group) && !ep->blocked &&
        (ep->peer->status == UCS_OK) &&
        uct_remapring_ep_can_send(ep, SIZE_MAX)) {
        return UCS_ERR_BUSY;
    }

    /* dispatched once the ring has credit again; on a failed peer, kept for
     * the user to purge */
    uct_pending_req_arb_group_push(&ep->arb_group, req);
    uct_remapring_ep_block(iface, ep);
    UCT_TL_EP_STAT_PEND(&ep->super);
    return UCS_OK;
}

static ucs_arbiter_cb_result_t
uct_remapring_ep_process_pending(ucs_arbiter_t *arbiter,
                                 ucs_arbiter_group_t *group,
                                 ucs_arbiter_elem_t *elem, void *arg)
{
    uct_remapring_iface_t *iface = arg;
    uct_remapring_ep_t *ep       = ucs_container_of(group, uct_remapring_ep_t,
                                                    arb_group);
    uct_pending_req_t *req       = ucs_container_of(elem, uct_pending_req_t,
                                                    priv);
    ucs_status_t status;

    iface->tx.dispatching = ep;
    status                = req->func(req);
    iface->tx.dispatching = NULL;

    if (status == UCS_OK) {
        return UCS_ARBITER_CB_RESULT_REMOVE_ELEM;
    } else if (status == UCS_INPROGRESS) {
        return UCS_ARBITER_CB_RESULT_NEXT_GROUP;
    }

    uct_remapring_ep_block(iface, ep);
    return UCS_ARBITER_CB_RESULT_DESCHED_GROUP;
}

unsigned uct_remapring_ep_progress_pending(uct_remapring_iface_t *iface)
{
    uct_remapring_ep_t *ep, *tmp;
    unsigned count = 0;

    if (ucs_likely(ucs_list_is_empty(&iface->tx.blocked))) {
        return 0;
    }

    ucs_list_for_each_safe(ep, tmp, &iface->tx.blocked, list) {
        if (uct_remapring_ep_can_send(ep, 0)) {
            uct_remapring_ep_unblock(ep);
            ucs_arbiter_group_schedule(&iface->tx.arbiter, &ep->arb_group);
            ++count;
        }
    }

    if (count > 0) {
        ucs_arbiter_dispatch(&iface->tx.arbiter, 1,
                             uct_remapring_ep_process_pending, iface);
    }

    return count;
}

static ucs_arbiter_cb_result_t
uct_remapring_ep_purge_cb(ucs_arbiter_t *arbiter, ucs_arbiter_group_t *group,
                          ucs_arbiter_elem_t *elem, void *arg)
{
    uct_purge_cb_args_t *args = arg;
    uct_pending_req_t *req    = ucs_container_of(elem, uct_pending_req_t,
                                                 priv);

    if (args->cb != NULL) {
        args->cb(req, args->arg);
    } else {
        ucs_warn("ep %p cancelling user pending request %p",
                 ucs_container_of(group, uct_remapring_ep_t, arb_group), req);
    }

    return UCS_ARBITER_CB_RESULT_REMOVE_ELEM;
}

void uct_remapring_ep_pending_purge(uct_ep_h tl_ep,
                                    uct_pending_purge_callback_t cb,
                                    void *arg)
{
    uct_remapring_ep_t *ep       = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    uct_remapring_iface_t *iface = uct_remapring_ep_iface(ep);
    uct_purge_cb_args_t args     = {cb, arg};

    ucs_arbiter_group_purge(&iface->tx.arbiter, &ep->arb_group,
                            uct_remapring_ep_purge_cb, &args);
    uct_remapring_ep_unblock(ep);
}

ucs_status_t uct_remapring_ep_flush(uct_ep_h tl_ep, unsigned flags,
                                    uct_completion_t *comp)
{
    uct_remapring_ep_t *ep       = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    uct_remapring_iface_t *iface = uct_remapring_ep_iface(ep);

    if (flags & UCT_FLUSH_FLAG_CANCEL) {
        /* nothing is in flight; pending requests are the user's to purge */
        ep->cancelled = 1;
        return UCS_OK;
    }

    /* every send was in the receiver's memory when it returned; a flush
     * after pending requests waits its turn behind them */
    if (uct_remapring_ep_behind_pending(iface, ep)) {
        UCT_TL_EP_STAT_FLUSH_WAIT(&ep->super);
        return UCS_ERR_NO_RESOURCE;
    }

    UCT_TL_EP_STAT_FLUSH(&ep->super);
    return UCS_OK;
}
