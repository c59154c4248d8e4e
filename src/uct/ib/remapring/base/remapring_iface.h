/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef UCT_REMAPRING_IFACE_H_
#define UCT_REMAPRING_IFACE_H_

#include "remapring_conn.h"
#include "remapring_md.h"

#include <uct/base/uct_iface.h>
#include <uct/ib/remapring/ring.h>
#include <uct/ib/remapring/ring_copy.h>
#include <ucs/datastruct/arbiter.h>
#include <ucs/datastruct/khash.h>
#include <ucs/datastruct/list.h>


/**
 * How the ring is placed in a receiver's memory on a verbs device.
 */
typedef enum {
    UCT_REMAPRING_VERBS_MODE_AUTO,   /* odp if the device has it */
    UCT_REMAPRING_VERBS_MODE_ODP,
    UCT_REMAPRING_VERBS_MODE_PINNED,
    UCT_REMAPRING_VERBS_MODE_LAST
} uct_remapring_verbs_mode_t;


/** The one device the transport offers: this host's memory. */
#define UCT_REMAPRING_DEVICE_NAME "memory"

/** Largest UCX_REMAPRING_RX_INLINE */
#define UCT_REMAPRING_RX_INLINE_MAX 4096

/** Address space of one receive pool, at most */
#define UCT_REMAPRING_POOL_SPACE_MAX (64ull << 30)

/** Most address space for copies of small messages (ring_copy.h) */
#define UCT_REMAPRING_COPY_SPACE_MAX (1ull << 30)

/** The headroom in front of a payload that sizes the largest message an
 *  interface sends: every receiver with at most this much takes it */
#define UCT_REMAPRING_HEADROOM_MAX  256

/* Empty polls of a ring before it sleeps on its doorbell: some microseconds
 * of progress, longer than a round trip between two processes */
#define UCT_REMAPRING_RX_ARM_AFTER 256


/**
 * Transport configuration (UCX_REMAPRING_*).
 */
typedef struct uct_remapring_iface_config {
    uct_iface_config_t        super;
    uct_remapring_wire_type_t wire;         /* how this process sends */
    size_t                    block_size;   /* pool block and ring slot */
    unsigned                  ring_slots;   /* slots per sender's window */
    size_t                    pool_max;     /* upper bound of the pool */
    unsigned                  credit_batch; /* slots released per credit */
    unsigned                  idle_slots;   /* granted to a quiet sender */
    unsigned                  max_peers;    /* senders one iface accepts */
    size_t                    max_short;    /* largest am_short payload */
    size_t                    rx_inline;    /* delivered to be copied */
    size_t                    rx_copy;      /* ... out of a copy it may
                                               keep, up to */
    unsigned                  fold_pages;   /* kept pages folded, at most */
    double                    bandwidth;    /* reported to UCP, or auto */
    ucs_time_t                latency;      /* reported to UCP, or auto */
    ucs_time_t                overhead;     /* reported to UCP, or auto */
    int                       verbs_mode;   /* uct_remapring_verbs_mode_t */
    unsigned                  verbs_sq_size;
    unsigned                  verbs_srq_size;
    size_t                    verbs_staging;
    unsigned                  verbs_timeout;
} uct_remapring_iface_config_t;


/**
 * Receiver's state of one connection.
 */
typedef struct uct_remapring_iface uct_remapring_iface_t;


/* Where a receiver's connection is polled */
enum {
    UCT_REMAPRING_RX_IDLE   = 0, /* not polled: no ring, failed, closing */
    UCT_REMAPRING_RX_ACTIVE = 1, /* polled by every progress call */
    UCT_REMAPRING_RX_ASLEEP = 2  /* waits for its doorbell, and the sweep */
};

typedef struct uct_remapring_rx_conn {
    uct_remapring_iface_t *iface;
    uct_remapring_ring_t *ring;   /* NULL until the sender claimed it */
    uct_remapring_proc_t sender;  /* watched while the ring exists */
    uint64_t             sender_id; /* of the sender it accepted */
    int                  failed;  /* FAILED by us: never drained */
    int                  offered; /* ring made in advance, no sender yet */
    int                  active;  /* UCT_REMAPRING_RX_{IDLE,ACTIVE,ASLEEP} */
    unsigned             idle_polls; /* empty polls since the last record */
    ucs_list_link_t      list;    /* in iface->rx.active or rx.asleep */
} uct_remapring_rx_conn_t;


typedef struct uct_remapring_ep   uct_remapring_ep_t;
typedef struct uct_remapring_peer uct_remapring_peer_t;


KHASH_MAP_INIT_INT64(uct_remapring_peers, uct_remapring_peer_t*);


/**
 * Interface: the receive side (pool, control area, rings of connected
 * senders) and the send side (connections to receivers, pending sends).
 */
struct uct_remapring_iface {
    uct_base_iface_t             super;
    uint64_t                     id;
    struct uct_remapring_verbs_iface *verbs;  /* verbs wire, or NULL */
    uct_remapring_watch_t        watch;      /* processes of both sides */
    unsigned                     progress_calls; /* since the last checks */
    struct {
        uct_remapring_ctl_area_t ctl;
        uct_remapring_pool_t     *pool;
        uct_remapring_rx_conn_t  *rx_conns;  /* [max_peers] */
        ucs_list_link_t          active;     /* rx_conns with data */
        ucs_list_link_t          asleep;     /* rx_conns on their doorbell,
                                                swept in turn */
        uint64_t                 nswept;     /* woken by the sweep */
        unsigned                 nconns;     /* rings of senders */
        unsigned                 noffered;   /* rings made in advance */
        unsigned                 offer_cursor; /* where to look for more */
        uct_recv_desc_t          release_desc;
        uct_recv_desc_t          copy_release_desc; /* of copies */
        uct_remapring_copies_t   copies;     /* small messages, copied */
        unsigned                 copy_offset; /* of the payload in a copy,
                                                 0: no copies */
        size_t                   copy_max;    /* largest message copied */
        uint32_t                 copy_kept;   /* share of copies the upper
                                                 layer kept of late, of
                                                 2^24 */
        unsigned                 copy_probe;  /* small messages since the
                                                 last copy, while off */
        unsigned                 rx_headroom;
        unsigned                 credit_batch;
        unsigned                 idle_slots;
        unsigned                 nslots;
        unsigned                 headroom;    /* in front of a payload */
        uct_remapring_ring_layout_t layout;   /* of our rings' records */
        size_t                   max_payload;
    } rx;
    struct {
        khash_t(uct_remapring_peers) peers;  /* by receiver iface id */
        ucs_arbiter_t            arbiter;    /* eps with pending requests */
        ucs_list_link_t          blocked;    /* eps waiting for credit */
        khiter_t                 yield_cursor; /* next peer to look at for
                                                  a reclaim request */
        uct_remapring_ep_t       *dispatching; /* ep whose pending run */
        unsigned                 nerrs_queued; /* error callbacks to run */
        void                     *bounce;    /* am_bcopy packs here */
        size_t                   max_short;
        size_t                   max_bcopy;
        uct_remapring_wire_type_t wire;
    } tx;
    struct {
        double                   bandwidth;
        double                   latency;
        double                   overhead;
    } perf;
};


/**
 * Deliver up to a burst of records of @a ring to the active message
 * handlers. Sets @a *failed_p (and logs) if the ring went bad, or its
 * sender sent an AM id out of range.
 */
unsigned uct_remapring_iface_rx_ring(uct_remapring_iface_t *iface,
                                     uct_remapring_ring_t *ring,
                                     int *failed_p);

/**
 * Check a transport configuration; logs and returns UCS_ERR_INVALID_PARAM
 * naming the first bad setting.
 */
ucs_status_t
uct_remapring_iface_config_check(const uct_remapring_iface_config_t *config);


/**
 * Whether a receiver's address takes every record this interface sends (its
 * largest payload is at least ours); logs the difference at @a log_level and
 * returns UCS_ERR_UNREACHABLE if not.
 */
ucs_status_t
uct_remapring_iface_check_peer(uct_remapring_iface_t *iface,
                               const uct_remapring_iface_addr_t *addr,
                               ucs_log_level_t log_level);

/** The active message capabilities, the same on every wire (one ring
 *  writer) */
void uct_remapring_iface_query_am(const uct_remapring_iface_t *iface,
                                  uct_iface_attr_t *iface_attr);

#endif
