/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef UCT_REMAPRING_SM_H_
#define UCT_REMAPRING_SM_H_

/*
 * The shared-memory transport ("remapring"): the ring between processes of
 * one host; its types and the operations its files share. A receiver's control area (remapring_sm_ctl.h) is where its
 * senders find their rings; each sender writes with one of two wires, shm
 * (stores into the receiver's mapped pool, through the slot table it
 * shares) or cma (process_vm_writev into its ring view). The connection
 * state machine, both halves, is in remapring_sm_conn.c.
 */

#include "remapring_sm_ctl.h"

#include <uct/ib/remapring/base/remapring_ep.h>
#include <uct/ib/remapring/base/remapring_iface.h>

#include <ucs/time/time_def.h>


/** The one device the transport offers: this host's memory. */
#define UCT_REMAPRING_SM_DEVICE_NAME "memory"


/**
 * Transport configuration (UCX_REMAPRING_*).
 */
typedef struct uct_remapring_sm_iface_config {
    uct_remapring_iface_config_t super;
    uct_remapring_wire_type_t wire; /* how this process sends */
    unsigned max_peers; /* senders one iface accepts */
    size_t share_min; /* shortest put/get whose copy is shared */
} uct_remapring_sm_iface_config_t;


/** Empty polls of a ring before it sleeps on its doorbell: some
 *  microseconds of progress, longer than a round trip between two
 *  processes */
#define UCT_REMAPRING_RX_ARM_AFTER 256


/* Where a receiver's connection is polled */
enum {
    UCT_REMAPRING_RX_IDLE   = 0, /* not polled: no ring, failed, closing */
    UCT_REMAPRING_RX_ACTIVE = 1, /* polled by every progress call */
    UCT_REMAPRING_RX_ASLEEP = 2 /* waits for its doorbell, and the sweep */
};


typedef struct uct_remapring_sm_iface uct_remapring_sm_iface_t;


/**
 * Receiver's state of one connection.
 */
typedef struct uct_remapring_rx_conn {
    uct_remapring_sm_iface_t *iface;
    remapring_ring_t *ring; /* NULL until the sender claimed
                                           it */
    uct_remapring_proc_t sender; /* watched while the ring exists */
    uint64_t sender_id; /* of the sender it accepted */
    int failed; /* FAILED by us: never drained */
    int offered; /* ring made in advance, no sender
                                           yet */
    int active; /* UCT_REMAPRING_RX_{IDLE,ACTIVE,
                                           ASLEEP} */
    unsigned idle_polls; /* empty polls since the last
                                            record */
    ucs_list_link_t list; /* in iface->rx.active or
                                           rx.asleep */
} uct_remapring_rx_conn_t;


/**
 * Whether shared copies of one size class (the log2 of the length) pay
 * (remapring_sm_share.c): measured against the same operations copied
 * alone, now and then.
 */
typedef struct {
    uint32_t skip; /* operations still to copy alone */
    uint32_t backoff; /* skip after the next loss; 0: sharing paid last */
    uint32_t since_alone; /* shared ones since the last alone */
    uint32_t fresh; /* the next alone one is the first of its run */
    uint32_t shared_warm; /* 0: the next shared one is the first, or
                               the first after a run alone */
    double shared_rate; /* bytes a tick, moving average; 0: none yet */
    double alone_rate; /* the same of alone ones, the first of each
                               run left out; 0: none yet */
} uct_remapring_share_class_t;


#define UCT_REMAPRING_SHARE_CLASSES 64 /* a class per bit of a length */


/**
 * Interface of the shared-memory transport.
 */
struct uct_remapring_sm_iface {
    uct_remapring_iface_t super;
    uct_remapring_wire_type_t wire; /* how this process sends */
    uct_remapring_watch_t watch; /* processes of both sides */
    unsigned progress_calls; /* since the last checks */
    struct {
        uct_remapring_ctl_area_t ctl;
        uct_remapring_rx_conn_t *conns; /* [max_peers] */
        ucs_list_link_t active; /* conns with data */
        ucs_list_link_t asleep; /* conns on their doorbell,
                                                   swept in turn */
        uint64_t nswept; /* woken by the sweep */
        unsigned nconns; /* rings of senders */
        unsigned noffered; /* rings made in advance */
        unsigned offer_cursor; /* where to look for more */
    } rx;
    struct {
        khiter_t yield_cursor; /* next peer to look at for
                                                   a reclaim request */
    } tx;
    struct {
        size_t min; /* UCX_REMAPRING_SHARE_MIN, SIZE_MAX: off */
        uint64_t asked; /* operations we asked a receiver to share */
        uint64_t given; /* chunks of ours a receiver copied */
        uint64_t helped; /* chunks of senders' operations we copied */
        uint64_t lost; /* shared ones slower than alone ones */
        uint64_t alone; /* copied alone instead, or to measure */
        uct_remapring_share_class_t cls[UCT_REMAPRING_SHARE_CLASSES];
    } share;
};


/**
 * A sending interface's connection to a receiver on this host.
 */
typedef struct uct_remapring_sm_peer {
    uct_remapring_peer_t super;
    uct_remapring_remote_t remote; /* control area and connection */
    int pool_fd; /* shm wire: the receiver's pool until
                                       the wire maps it, or -1 */
    unsigned stalls; /* sends refused for credit */
    /* the receiving interface closed its own connection to ours with RESET
     * (its endpoints to us were dropped) and has not connected again */
    int reverse_reset;
    uint32_t share_gen; /* of our last shared copy */
} uct_remapring_sm_peer_t;


/**
 * Check the transport's settings, the shared ones included; logs and
 * returns UCS_ERR_INVALID_PARAM naming the first bad one.
 */
ucs_status_t uct_remapring_sm_iface_config_check(
        const uct_remapring_sm_iface_config_t *config);


/**
 * Move @a length bytes between @a local and [@a remote_addr, + length) of
 * the receiver (@a write: to it), with the receiver's progress copying some
 * of the chunks if it runs (remapring_sm_share.c); the caller checked the
 * key. Returns 0 when every byte moved, the errno of the copy that failed
 * (ESRCH: the receiver exited), as remapring_proc_vm_xfer(), or -1 if it
 * could not ask the receiver now (nothing moved: the caller copies alone).
 * Where sharing did not pay at this size lately, it copies alone itself.
 */
int uct_remapring_sm_share_rma(uct_remapring_sm_peer_t *peer, void *local,
                               size_t length, uint64_t remote_addr, int write);


/**
 * Judge one shared operation of @a length bytes of a size class: @a own, the
 * ticks the requester took for its @a own_bytes; @a total, until the
 * helper's chunks were done too. It lost if the class's alone operations
 * moved over 1.5 times as much a tick as its shared ones (moving averages,
 * this one included): then the class's next operations go alone, 4 after a
 * first loss, twice as many after each loss in a row (up to 1024). With no
 * alone figure, or one 256 shared operations old, an operation that took
 * longer than the requester's own rate would have for the whole length
 * makes the next three go alone, to measure (the first is not counted). The
 * class's first shared operation, and the first after each run alone, are
 * not counted either. Returns whether it lost.
 */
int uct_remapring_share_judge(uct_remapring_share_class_t *cls,
                              ucs_time_t own, ucs_time_t total,
                              size_t own_bytes, size_t length);


/**
 * Count an operation of @a length bytes of the class copied alone in
 * @a ticks.
 */
void uct_remapring_share_alone_done(uct_remapring_share_class_t *cls,
                                    ucs_time_t ticks, size_t length);


/**
 * A control record in the ring of one of our connections (see
 * uct_remapring_iface_ops_t::rx_control): a sender's request to share a
 * copy, whose chunks it leaves we copy (remapring_sm_share.c).
 */
ucs_status_t uct_remapring_sm_rx_control(uct_remapring_iface_t *iface,
                                         remapring_ring_t *ring,
                                         const void *payload, size_t length);


/** The operations of a peer of this transport (remapring_sm_conn.c) */
extern const uct_remapring_iface_ops_t uct_remapring_sm_iface_ops;


/* ------------------------------------------------- endpoint operations */

/** Active messages; see uct_ep_am_short() and friends. */
ucs_status_t uct_remapring_sm_ep_am_short(uct_ep_h tl_ep, uint8_t id,
                                          uint64_t header, const void *payload,
                                          unsigned length);

/** See uct_ep_am_short_iov(). */
ucs_status_t uct_remapring_sm_ep_am_short_iov(uct_ep_h tl_ep, uint8_t id,
                                              const uct_iov_t *iov,
                                              size_t iovcnt);

/** See uct_ep_am_bcopy(). */
ssize_t uct_remapring_sm_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id,
                                     uct_pack_callback_t pack_cb, void *arg,
                                     unsigned flags);

/** See uct_ep_am_zcopy(); completes at once. */
ucs_status_t
uct_remapring_sm_ep_am_zcopy(uct_ep_h tl_ep, uint8_t id, const void *header,
                             unsigned header_length, const uct_iov_t *iov,
                             size_t iovcnt, unsigned flags,
                             uct_completion_t *comp);

/** Put and get with process_vm_writev/readv, through a buffer or from the
 *  caller's bytes; they complete at once. See uct_ep_put_short(). */
ucs_status_t uct_remapring_sm_ep_put_short(uct_ep_h tl_ep, const void *buffer,
                                           unsigned length,
                                           uint64_t remote_addr,
                                           uct_rkey_t rkey);

/** See uct_ep_put_bcopy(). */
ssize_t uct_remapring_sm_ep_put_bcopy(uct_ep_h tl_ep,
                                      uct_pack_callback_t pack_cb, void *arg,
                                      uint64_t remote_addr, uct_rkey_t rkey);

/** See uct_ep_put_zcopy(). */
ucs_status_t uct_remapring_sm_ep_put_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                           size_t iovcnt, uint64_t remote_addr,
                                           uct_rkey_t rkey,
                                           uct_completion_t *comp);

/** See uct_ep_get_short(). */
ucs_status_t
uct_remapring_sm_ep_get_short(uct_ep_h tl_ep, void *buffer, unsigned length,
                              uint64_t remote_addr, uct_rkey_t rkey);

/** See uct_ep_get_bcopy(). */
ucs_status_t
uct_remapring_sm_ep_get_bcopy(uct_ep_h tl_ep, uct_unpack_callback_t unpack_cb,
                              void *arg, size_t length, uint64_t remote_addr,
                              uct_rkey_t rkey, uct_completion_t *comp);

/** See uct_ep_get_zcopy(). */
ucs_status_t uct_remapring_sm_ep_get_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                           size_t iovcnt, uint64_t remote_addr,
                                           uct_rkey_t rkey,
                                           uct_completion_t *comp);

/** Keepalive: fails the peer if the receiver or its interface is gone. */
ucs_status_t uct_remapring_sm_ep_check(uct_ep_h tl_ep, unsigned flags,
                                       uct_completion_t *comp);

#endif
