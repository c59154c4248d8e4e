/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef UCT_REMAPRING_EP_H_
#define UCT_REMAPRING_EP_H_

#include "remapring_iface.h"


/** Largest am_zcopy header, and pieces of an am_zcopy/put/get iov */
#define UCT_REMAPRING_AM_MAX_HDR 128
#define UCT_REMAPRING_MAX_IOV    ((size_t)UCT_REMAPRING_RING_MAX_IOV - 1)


/**
 * A sending interface's connection to one receiving interface, shared by
 * every endpoint from the one to the other: they write into one ring.
 */
struct uct_remapring_peer {
    uct_remapring_iface_t       *iface;   /* the sending interface */
    uct_remapring_remote_t      remote;   /* control area and connection */
    uct_remapring_wire_t        *wire;    /* NULL until the ring is ready */
    uct_remapring_ring_writer_t writer;
    int                         pool_fd;  /* shm: the receiver's pool until
                                             the wire maps it, or -1 */
    ucs_status_t                status;   /* sticky failure */
    const char                  *reason;  /* what failed */
    unsigned                    stalls;   /* sends refused for credit */
    ucs_list_link_t             eps;      /* endpoints using it */
    struct uct_remapring_vconn  *vconn;   /* verbs wire: its connection */
    char                        name[64]; /* the receiver, for the log */
    /* verbs wire: active messages sent before the connection was up, in
     * order, replayed once it is (uct_remapring_peer_replay) */
    char                        *backlog;
    size_t                      backlog_len, backlog_pos;
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
};


UCS_CLASS_DECLARE_NEW_FUNC(uct_remapring_ep_t, uct_ep_t, const uct_ep_params_t*);
UCS_CLASS_DECLARE_DELETE_FUNC(uct_remapring_ep_t, uct_ep_t);

/** Active messages; see uct_ep_am_short() and friends. */
ucs_status_t uct_remapring_ep_am_short(uct_ep_h tl_ep, uint8_t id,
                                       uint64_t header, const void *payload,
                                       unsigned length);

/** See uct_ep_am_short_iov(). */
ucs_status_t uct_remapring_ep_am_short_iov(uct_ep_h tl_ep, uint8_t id,
                                           const uct_iov_t *iov,
                                           size_t iovcnt);

/** See uct_ep_am_bcopy(). */
ssize_t uct_remapring_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id,
                                  uct_pack_callback_t pack_cb, void *arg,
                                  unsigned flags);

/** See uct_ep_am_zcopy(); completes at once. */
ucs_status_t uct_remapring_ep_am_zcopy(uct_ep_h tl_ep, uint8_t id,
                                       const void *header,
                                       unsigned header_length,
                                       const uct_iov_t *iov, size_t iovcnt,
                                       unsigned flags, uct_completion_t *comp);

/** Put and get through a buffer, or from the caller's bytes, with
 *  process_vm_readv/writev; complete at once. */
ucs_status_t uct_remapring_ep_put_short(uct_ep_h tl_ep, const void *buffer,
                                        unsigned length, uint64_t remote_addr,
                                        uct_rkey_t rkey);

/** See uct_ep_put_bcopy(). */
ssize_t uct_remapring_ep_put_bcopy(uct_ep_h tl_ep, uct_pack_callback_t pack_cb,
                                   void *arg, uint64_t remote_addr,
                                   uct_rkey_t rkey);

/** See uct_ep_get_short(). */
ucs_status_t uct_remapring_ep_get_short(uct_ep_h tl_ep, void *buffer,
                                        unsigned length, uint64_t remote_addr,
                                        uct_rkey_t rkey);

/** See uct_ep_get_bcopy(). */
ucs_status_t uct_remapring_ep_get_bcopy(uct_ep_h tl_ep,
                                        uct_unpack_callback_t unpack_cb,
                                        void *arg, size_t length,
                                        uint64_t remote_addr, uct_rkey_t rkey,
                                        uct_completion_t *comp);

/** RDMA-style write with process_vm_writev; completes at once. */
ucs_status_t uct_remapring_ep_put_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                        size_t iovcnt, uint64_t remote_addr,
                                        uct_rkey_t rkey,
                                        uct_completion_t *comp);

/** RDMA-style read with process_vm_readv; completes at once. */
ucs_status_t uct_remapring_ep_get_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                        size_t iovcnt, uint64_t remote_addr,
                                        uct_rkey_t rkey,
                                        uct_completion_t *comp);

/** Queue a request until the ring has credit again. */
ucs_status_t uct_remapring_ep_pending_add(uct_ep_h tl_ep,
                                          uct_pending_req_t *req,
                                          unsigned flags);

/** Drop the pending requests, calling @a cb on each. */
void uct_remapring_ep_pending_purge(uct_ep_h tl_ep,
                                    uct_pending_purge_callback_t cb,
                                    void *arg);

/** Sends complete when they return: flush only waits for credit. */
ucs_status_t uct_remapring_ep_flush(uct_ep_h tl_ep, unsigned flags,
                                    uct_completion_t *comp);

/** Keepalive: fails the peer if the receiver or its interface is gone. */
ucs_status_t uct_remapring_ep_check(uct_ep_h tl_ep, unsigned flags,
                                    uct_completion_t *comp);

/**
 * The peer failed: every endpoint of it fails, once, and has the
 * interface's error handler called from progress. @a reason says why.
 */
void uct_remapring_peer_failed(uct_remapring_peer_t *peer,
                               ucs_status_t status, const char *reason);

/**
 * Send the active messages kept while the peer's verbs connection was not
 * up, in order, as far as credit and send resources go: UCS_OK when none
 * is left, UCS_ERR_NO_RESOURCE when some are (again on the next credit or
 * completion), or the peer's failure.
 */
ucs_status_t uct_remapring_peer_replay(uct_remapring_peer_t *peer);

/**
 * Send-side progress: reschedule endpoints whose ring got credit back and
 * dispatch their pending requests.
 */
unsigned uct_remapring_ep_progress_pending(uct_remapring_iface_t *iface);

/**
 * Look at the ring of the next receiver in turn (found among a bounded
 * number of hash buckets) for a request to give back credit; answer it, and
 * wake the receiver. Bounded work per call, whatever the number of
 * receivers.
 */
void uct_remapring_ep_yield_some(uct_remapring_iface_t *iface);

/**
 * Send-side checks, now and then from the interface's progress: fail the
 * peers whose receiver failed or released their connection or closed its
 * interface.
 */
void uct_remapring_ep_check_peers(uct_remapring_iface_t *iface);

/**
 * Destroy the peers left when the interface closes (endpoints the user did
 * not destroy).
 */
void uct_remapring_ep_cleanup_peers(uct_remapring_iface_t *iface);

#endif
