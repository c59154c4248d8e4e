/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef UCT_REMAPRING_EP_H_
#define UCT_REMAPRING_EP_H_

/*
 * The send side every transport on the ring shares. A peer is a sending
 * interface's connection to one receiving interface; every endpoint to that
 * interface shares it, and so its ring: UCT orders sends per endpoint, one
 * ring orders them all.
 *
 * A peer fails when its transport finds the receiver gone or its ring bad
 * (uct_remapring_peer_failed()). From then on every endpoint of the peer
 * returns the failure from its operations, keeps its pending requests for
 * the user to purge, and has the interface's error handler called for it
 * once, from the worker's progress.
 *
 * The failure is UCS_ERR_ENDPOINT_TIMEOUT whatever its cause (logged with
 * the reason): it is what UCP 1.13 completes every operation with once it
 * has set an endpoint's lanes failed, so the handler and every later
 * operation agree only if the transport reports it too, as UCX's tcp does
 * and its shared-memory transports' keepalive; later UCP versions complete
 * them with the handler's status, whatever it is.
 *
 * Active messages go through the peer's ring writer, inline
 * (remapring_ep.inl): each transport instantiates them with what it does
 * after a record is published (a doorbell, or nothing).
 */

#include "remapring_iface.h"

/* the base a transport of ours in another module calls (ring_api.h) */
REMAPRING_API_BEGIN


/**
 * A sending interface's connection to one receiving interface, shared by
 * every endpoint from the one to the other: they write into one ring. A
 * transport embeds it first in its own peer.
 */
struct uct_remapring_peer {
    uct_remapring_iface_t *iface; /* the sending interface */
    uint64_t key; /* in iface->tx.peers */
    remapring_wire_t *wire; /* NULL until the ring is ready */
    remapring_ring_writer_t writer;
    ucs_status_t status; /* sticky failure: UCS_ERR_ENDPOINT_TIMEOUT */
    ucs_status_t cause; /* what the transport found, for the log */
    const char *reason; /* what failed */
    /* its last endpoint went after a cancelling flush: the upper layer
     * dropped the endpoint (UCP's force close, or its failure handling)
     * rather than closing it; the transport may tell the receiver */
    int reset;
    ucs_list_link_t eps; /* endpoints using it */
    char name[64]; /* the receiver, for the log */
    /* active messages sent before the ring was ready, where the transport
     * takes them (early), in order, written once it is ready
     * (uct_remapring_peer_replay) */
    int early;
    char *backlog;
    size_t backlog_len, backlog_pos;
};


/**
 * Endpoint: a sender's handle on a peer.
 */
struct uct_remapring_ep {
    uct_base_ep_t        super;
    uct_remapring_peer_t *peer;
    ucs_list_link_t      peer_list;   /* in peer->eps */
    ucs_arbiter_group_t  arb_group;   /* pending requests */
    int                  blocked;     /* on iface->tx.blocked */
    ucs_list_link_t      list;        /* in iface->tx.blocked */
    int                  err_state;   /* error callback: 0 none, 1 queued,
                                         2 delivered */
    int                  cancelled;   /* flushed with UCT_FLUSH_FLAG_CANCEL */
};


UCS_CLASS_DECLARE_NEW_FUNC(uct_remapring_ep_t, uct_ep_t, const uct_ep_params_t*);
UCS_CLASS_DECLARE_DELETE_FUNC(uct_remapring_ep_t, uct_ep_t);


/**
 * Initialize the base of a new peer of @a iface, named @a fmt for the log.
 */
void uct_remapring_peer_init(uct_remapring_peer_t *peer,
                             uct_remapring_iface_t *iface, const char *fmt, ...)
        UCS_F_PRINTF(3, 4);


/**
 * Free what the base of a peer holds (a backlog never sent is dropped, as a
 * destroyed endpoint's sends in flight are on any transport); the
 * transport frees the peer.
 */
void uct_remapring_peer_cleanup(uct_remapring_peer_t *peer);


/**
 * The peer failed: every endpoint of it fails, once, and has the
 * interface's error handler called from progress. @a cause and @a reason
 * say why (in the log; the endpoints report UCS_ERR_ENDPOINT_TIMEOUT).
 */
void uct_remapring_peer_failed(uct_remapring_peer_t *peer, ucs_status_t cause,
                               const char *reason);


/**
 * The peer's ring is ready: make its writer for the ring @a info describes,
 * written through @a wire (which the peer owns from now on, also on error).
 * Fails the peer if the ring is not valid.
 */
ucs_status_t uct_remapring_peer_set_wire(uct_remapring_peer_t *peer,
                                         const remapring_ring_info_t *info,
                                         remapring_wire_t *wire);


/**
 * Write the active messages kept before the peer's ring was ready, in
 * order, as far as credit and send resources go: UCS_OK when none is left,
 * UCS_ERR_NO_RESOURCE when some are (again on the next credit or
 * completion), or the peer's failure.
 */
ucs_status_t uct_remapring_peer_replay(uct_remapring_peer_t *peer);


/**
 * The live peer of @a iface whose key is @a key, or NULL.
 */
uct_remapring_peer_t *
uct_remapring_iface_find_peer(uct_remapring_iface_t *iface, uint64_t key);


/**
 * Send-side progress: reschedule endpoints whose ring got credit back and
 * dispatch their pending requests.
 */
unsigned uct_remapring_ep_progress_pending(uct_remapring_iface_t *iface);


/**
 * Say which peers are left when the interface closes (endpoints the user
 * did not destroy).
 */
void uct_remapring_iface_warn_peers(uct_remapring_iface_t *iface);


/** See uct_ep_pending_add(): queued until the ring has credit again. */
ucs_status_t uct_remapring_ep_pending_add(uct_ep_h tl_ep,
                                          uct_pending_req_t *req,
                                          unsigned flags);

/** See uct_ep_pending_purge(). */
void uct_remapring_ep_pending_purge(uct_ep_h tl_ep,
                                    uct_pending_purge_callback_t cb, void *arg);

/** See uct_ep_flush(): sends complete when they return; a flush waits only
 *  behind pending requests. */
ucs_status_t
uct_remapring_ep_flush(uct_ep_h tl_ep, unsigned flags, uct_completion_t *comp);


/* The slow paths of the inline sends (remapring_ep.inl) */

/** A send that found @a ep not ready with @a status: kept for the
 *  connection if the transport takes early sends, else @a status */
ucs_status_t
uct_remapring_ep_send_early(uct_remapring_ep_t *ep, ucs_status_t status,
                            uint8_t id, const struct iovec *iov, size_t iovcnt);

/** am_bcopy on an endpoint that is not ready: packed into the backlog if
 *  it may be kept, else @a status */
ssize_t uct_remapring_ep_bcopy_early(uct_remapring_ep_t *ep,
                                     ucs_status_t status, uint8_t id,
                                     uct_pack_callback_t pack_cb, void *arg);

/** Not ready: connect, or wait behind pending requests, or replay */
ucs_status_t uct_remapring_ep_not_ready(uct_remapring_ep_t *ep);

/** A write into the ring of @a peer returned @a status, not UCS_OK */
ucs_status_t
uct_remapring_peer_send_failed(uct_remapring_peer_t *peer, ucs_status_t status);


/* UCT_CHECK_LENGTH for an unsigned length, which has no lower bound */
#define UCT_REMAPRING_CHECK_MAX(_length, _max, _name)                          \
    UCT_CHECK_PARAM((size_t)(_length) <= (size_t)(_max),                       \
                    "Invalid %s length: %zu (expected: <= %zu)", _name,        \
                    (size_t)(_length), (size_t)(_max))

REMAPRING_API_END

#endif
