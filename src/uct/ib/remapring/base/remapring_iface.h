/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef UCT_REMAPRING_IFACE_H_
#define UCT_REMAPRING_IFACE_H_

/*
 * The base of every transport on the ring (UCX's mm base and rc base are the
 * model): an interface has a receive pool shared by the rings of its senders
 * and by the messages the upper layer keeps, delivers the records of any
 * ring to the active message handlers (in place, or out of a copy), and
 * sends through one ring writer per receiver. A transport derives its
 * interface from this one, adds its connection model (how a sender finds a
 * receiver's ring, and how it learns that the receiver failed), and fills
 * in the operations below; generic code never asks which transport it is.
 */

#include <uct/base/uct_iface.h>
#include <uct/ib/remapring/ring/ring.h>
#include <uct/ib/remapring/ring/ring_copy.h>

#include <ucs/datastruct/arbiter.h>
#include <ucs/datastruct/khash.h>
#include <ucs/datastruct/list.h>

/* the base a transport of ours in another module calls (ring_api.h) */
REMAPRING_API_BEGIN


/** Largest UCX_REMAPRING_RX_INLINE */
#define UCT_REMAPRING_RX_INLINE_MAX 4096

/** UCX_REMAPRING_MAX_SHORT=auto, unless half a block is less: UCP sends tag
 *  and AM messages up to it the short way, without a request */
#define UCT_REMAPRING_MAX_SHORT_AUTO (16 * UCS_KBYTE)

/** Address space of one receive pool, at most */
#define UCT_REMAPRING_POOL_SPACE_MAX (64ull << 30)

/** Most address space for copies of small messages (ring_copy.h) */
#define UCT_REMAPRING_COPY_SPACE_MAX (1ull << 30)

/** The headroom in front of a payload that sizes the largest message an
 *  interface sends: every receiver with at most this much takes it */
#define UCT_REMAPRING_HEADROOM_MAX 256

/** The largest AM alignment an interface takes. What an interface sends
 *  leaves room for it too, or for a 32nd of a block if less (3 % of what it
 *  could send), so that a receiver that asked for alignment takes what one
 *  that did not sends; with smaller blocks a larger alignment is reached
 *  only by senders with the same alignment */
#define UCT_REMAPRING_AM_ALIGN_MAX     4096
#define UCT_REMAPRING_AM_ALIGN_SHARE   32

/** BLOCK_SIZE's auto, in KiB: the shared-memory transport's, where a 128 KiB
 *  message goes eager in one record, and the RDMA transport's, whose pinned
 *  staging and idle window grow with the block (uct_remapring_iface_config_
 *  resolve()) */
#define UCT_REMAPRING_SM_BLOCK_SIZE_K   256
#define UCT_REMAPRING_RDMA_BLOCK_SIZE_K 128

/** From blocks of this many KiB, RING_SLOTS's auto is 4 and IDLE_SLOTS's 1,
 *  else 8 and 2: a 1 MiB window and 256 KiB idle */
#define UCT_REMAPRING_IDLE_BYTES_K 256

/** Largest am_zcopy header, and pieces of an am_zcopy/put/get iov */
#define UCT_REMAPRING_AM_MAX_HDR 128
#define UCT_REMAPRING_MAX_IOV    ((size_t)REMAPRING_RING_MAX_IOV - 1)

/** The active message id of the transports' own control records, past the
 *  upper layer's ids: a receiving interface gives them to its transport
 *  (uct_remapring_iface_ops_t::rx_control) */
#define UCT_REMAPRING_AM_ID_CONTROL UCT_AM_ID_MAX

/** Largest control record */
#define UCT_REMAPRING_CONTROL_MAX 64

/** Records delivered from one ring per progress call, so that one busy
 *  sender cannot starve the others */
#define UCT_REMAPRING_RX_BURST 16


/**
 * The settings every transport on the ring shares (UCX_REMAPRING_*).
 */
typedef struct uct_remapring_iface_config {
    uct_iface_config_t super;
    size_t block_size; /* pool block and ring slot */
    size_t ring_slots; /* slots per sender's window */
    size_t pool_max; /* upper bound of the pool */
    size_t credit_batch; /* slots released per credit */
    size_t idle_slots; /* granted to a quiet sender */
    size_t max_short; /* largest am_short payload */
    size_t rx_inline; /* delivered to be copied */
    size_t rx_copy; /* ... out of a copy it may keep */
    unsigned fold_pages; /* kept pages folded, at most */
    double bandwidth; /* reported to UCP, or auto */
    ucs_time_t latency; /* reported to UCP, or auto */
    ucs_time_t overhead; /* reported to UCP, or auto */
} uct_remapring_iface_config_t;


/** The rows of uct_remapring_iface_config_t, for a transport's own table */
extern ucs_config_field_t uct_remapring_iface_config_table[];


typedef struct uct_remapring_iface uct_remapring_iface_t;
typedef struct uct_remapring_ep uct_remapring_ep_t;
typedef struct uct_remapring_peer uct_remapring_peer_t;


/**
 * What a transport adds to the base: its connection model. A peer is a
 * sending interface's connection to one receiving interface, shared by
 * every endpoint from the one to the other; the transport allocates it with
 * its own state after the base peer (uct_remapring_peer_init()).
 */
typedef struct uct_remapring_iface_ops {
    /** The receiving interface @a params names, as a key of the peers of
     *  this interface; logs and fails if the address is not one we reach */
    ucs_status_t (*peer_key)(uct_remapring_iface_t *iface,
                             const uct_ep_params_t *params, uint64_t *key_p);

    /** Whether the live peer found for @a params is that receiver's (or
     *  NULL: any is) */
    ucs_status_t (*peer_match)(uct_remapring_peer_t *peer,
                               const uct_ep_params_t *params);

    /** A new connection to the receiver at @a params */
    ucs_status_t (*peer_create)(uct_remapring_iface_t *iface,
                                const uct_ep_params_t *params,
                                uct_remapring_peer_t **peer_p);

    /** Close and free a peer whose last endpoint went */
    void (*peer_destroy)(uct_remapring_peer_t *peer);

    /** A send found no ring writer yet (peer->wire NULL): make it if the
     *  receiver is ready (UCS_OK), else UCS_ERR_NO_RESOURCE, or fail the
     *  peer */
    ucs_status_t (*peer_connect)(uct_remapring_peer_t *peer);

    /** A send found no credit: UCS_ERR_NO_RESOURCE, or the peer's failure
     *  if the transport finds one now */
    ucs_status_t (*peer_stalled)(uct_remapring_peer_t *peer);

    /** Whether a send of @a length payload bytes would find the transport's
     *  own send resources (beyond ring credit); NULL: always */
    int (*peer_can_post)(uct_remapring_peer_t *peer, size_t length);

    /** A control record (UCT_REMAPRING_AM_ID_CONTROL) arrived in @a ring, a
     *  ring of this receiving interface: its payload, copied out, the
     *  record consumed. UCS_OK once handled, or an error (logged) that
     *  fails the ring. NULL: the transport sends none, and one is a bad
     *  record */
    ucs_status_t (*rx_control)(uct_remapring_iface_t *iface,
                               remapring_ring_t *ring, const void *payload,
                               size_t length);
} uct_remapring_iface_ops_t;


/**
 * What a transport gives the base interface at construction.
 */
typedef struct uct_remapring_iface_init_params {
    uct_iface_ops_t *tl_ops;
    const uct_remapring_iface_ops_t *ops;
    /* figures reported when BW, LATENCY and OVERHEAD are auto */
    double bandwidth; /* bytes per second */
    double latency; /* seconds */
    double overhead; /* seconds */
    /* a device that pins the pool registers each chunk of blocks as it is
     * made, from the interface's first ring on (none is made before), and
     * no page of the pool is ever punched; or NULL. Its argument is the
     * interface. */
    ucs_status_t (*pool_pin_cb)(void *arg, uint32_t first, unsigned count,
                                void *addr);
} uct_remapring_iface_init_params_t;


KHASH_MAP_INIT_INT64(uct_remapring_peers, uct_remapring_peer_t*);


/**
 * Interface: the receive side (pool, copies, delivery) and the send side
 * (peers, pending sends) every transport on the ring has.
 */
struct uct_remapring_iface {
    uct_base_iface_t super;
    const uct_remapring_iface_ops_t *ops;
    uint64_t id; /* in the interface address */
    struct {
        remapring_pool_t *pool;
        uct_recv_desc_t release_desc;
        uct_recv_desc_t copy_release_desc; /* of copies */
        remapring_copies_t copies; /* small messages, copied */
        unsigned copy_offset; /* of the payload in a copy,
                                                0: no copies */
        size_t copy_max; /* largest message copied */
        uint32_t copy_kept; /* share of copies the upper
                                                layer kept of late, of
                                                2^24 */
        unsigned copy_probe; /* small messages since the
                                                last copy, while off */
        void *aligned; /* AM alignment asked: where a small
                                       message not aligned in its record
                                       is copied for the handler (NULL:
                                       none asked) */
        void *aligned_buf; /* its allocation */
        unsigned rx_headroom;
        unsigned credit_batch;
        unsigned idle_slots;
        unsigned nslots;
        unsigned headroom; /* in front of a payload */
        remapring_ring_layout_t layout; /* of our rings' records */
        size_t max_payload;
    } rx;
    struct {
        khash_t(uct_remapring_peers) peers; /* by receiving iface id */
        ucs_arbiter_t arbiter; /* eps with pending requests */
        ucs_list_link_t blocked; /* eps waiting for credit */
        uct_remapring_ep_t *dispatching; /* ep whose pending run */
        unsigned nerrs_queued; /* error callbacks to run */
        void *bounce; /* am_bcopy packs here */
        size_t max_short;
        size_t max_bcopy;
    } tx;
    struct {
        double bandwidth;
        double latency;
        double overhead;
    } perf;
};


UCS_CLASS_DECLARE(uct_remapring_iface_t,
                  const uct_remapring_iface_init_params_t *, uct_md_h,
                  uct_worker_h, const uct_iface_params_t *,
                  const uct_remapring_iface_config_t *);


/**
 * Make the auto settings of @a config the transport's: BLOCK_SIZE
 * @a block_size_auto; with blocks of UCT_REMAPRING_IDLE_BYTES_K KiB or more
 * RING_SLOTS 4 and IDLE_SLOTS 1, else 8 and 2; CREDIT_BATCH RING_SLOTS / 2.
 * A transport resolves a copy of its configuration before it checks it and
 * opens its interface with it.
 */
void uct_remapring_iface_config_resolve(uct_remapring_iface_config_t *config,
                                        size_t block_size_auto);


/**
 * Check the shared settings, resolved; logs and returns UCS_ERR_INVALID_PARAM
 * naming the first bad one.
 */
ucs_status_t
uct_remapring_iface_config_check(const uct_remapring_iface_config_t *config);


/**
 * The largest am_short message UCX_REMAPRING_MAX_SHORT sets.
 */
size_t
uct_remapring_iface_config_max_short(const uct_remapring_iface_config_t *config);


/**
 * Whether a receiver whose rings take payloads of up to @a max_payload takes
 * every record this interface sends; logs the difference at @a log_level,
 * naming the receiver @a peer_name, and returns UCS_ERR_UNREACHABLE if not.
 */
ucs_status_t uct_remapring_iface_check_peer(uct_remapring_iface_t *iface,
                                            uint32_t max_payload,
                                            const char *peer_name,
                                            ucs_log_level_t log_level);


/**
 * The parameters of a ring of this interface for a sender, as every
 * transport makes them; the transport sets its commit, slot table, remap and
 * reclaim choices.
 */
void uct_remapring_iface_ring_params(uct_remapring_iface_t *iface,
                                     remapring_ring_params_t *params);


/**
 * Fill in what every transport on the ring reports: the active message
 * capabilities (one ring writer on every transport), the base flags, the
 * figures reported to UCP.
 */
void uct_remapring_iface_query(uct_remapring_iface_t *iface,
                               uct_iface_attr_t *iface_attr);


/**
 * Now and then from progress: the pool's kept blocks that waited whole long
 * enough are punched, empty pages of copies given back.
 */
void uct_remapring_iface_maintain(uct_remapring_iface_t *iface);


/**
 * See uct_iface_flush(): every send completed when it returned; only
 * pending requests wait, and failures found, until they are reported.
 */
ucs_status_t uct_remapring_iface_flush(uct_iface_h tl_iface, unsigned flags,
                                       uct_completion_t *comp);


/** See uct_iface_fence(): sends are in order, each one complete on return */
ucs_status_t uct_remapring_iface_fence(uct_iface_h tl_iface, unsigned flags);


/** What every transport on the ring gives UCT's internal operations */
extern uct_iface_internal_ops_t uct_remapring_iface_internal_ops;

REMAPRING_API_END

#endif
