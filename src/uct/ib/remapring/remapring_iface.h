/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef UCT_REMAPRING_IFACE_H_
#define UCT_REMAPRING_IFACE_H_

#include "remapring_md.h"

#include <uct/base/uct_iface.h>
#include <uct/ib/remapring/ring.h>
#include <ucs/datastruct/arbiter.h>
#include <ucs/datastruct/list.h>
#include <ucs/sys/math.h>

#include <sys/types.h>


/** The one device the transport offers: this host's memory. */
#define UCT_REMAPRING_DEVICE_NAME "memory"

/** Receive headroom every ring leaves in front of a payload: the upper
 *  layer's rx_headroom and the release descriptor pointer must fit in it.
 *  Fixed, so that both sides know the largest payload without asking. */
#define UCT_REMAPRING_RING_HEADROOM 256

#define UCT_REMAPRING_CTL_MAGIC   0x6c74636972616d72ull /* "rmaric tl" */
#define UCT_REMAPRING_CTL_VERSION 2
#define UCT_REMAPRING_MAX_PEERS   4096 /* largest MAX_PEERS */


/**
 * Transport configuration (UCX_REMAPRING_*).
 */
/**
 * How a sender puts records into a receiver's ring.
 */
typedef enum {
    UCT_REMAPRING_WIRE_SHM, /* stores into the receiver's mapped pool */
    UCT_REMAPRING_WIRE_CMA, /* process_vm_writev into its ring view */
    UCT_REMAPRING_WIRE_LAST
} uct_remapring_wire_type_t;


typedef struct uct_remapring_iface_config {
    uct_iface_config_t super;
    uct_remapring_wire_type_t wire;  /* how this process sends */
    size_t             block_size;   /* bytes per pool block and ring slot */
    unsigned           ring_slots;   /* slots per sender's ring window */
    size_t             pool_max;     /* upper bound of the receive pool */
    unsigned           credit_batch; /* slots released before crediting */
    unsigned           max_peers;    /* senders one interface accepts */
    size_t             max_short;    /* largest am_short payload */
    double             bandwidth;    /* reported to UCP, or auto */
    ucs_time_t         latency;      /* reported to UCP, or auto */
    ucs_time_t         overhead;     /* reported to UCP, or auto */
} uct_remapring_iface_config_t;


/**
 * State of a connection slot in the receiver's shared control area.
 * FREE -> CLAIMED (sender) -> READY (receiver) -> CLOSED (sender) -> FREE
 * (receiver). A receiver that finds the sender dead, or its ring corrupt,
 * moves the slot to FAILED and frees it once the sender is gone.
 */
typedef enum {
    UCT_REMAPRING_CONN_FREE    = 0,
    UCT_REMAPRING_CONN_CLAIMED = 1,
    UCT_REMAPRING_CONN_READY   = 2,
    UCT_REMAPRING_CONN_CLOSED  = 3,
    UCT_REMAPRING_CONN_FAILED  = 4
} uct_remapring_conn_state_t;


/**
 * One sender's connection slot, in the receiver's shared control area. The
 * sender maps it through /proc/<pid>/fd/<n>.
 */
typedef struct uct_remapring_conn {
    uint32_t                 state      UCS_V_ALIGNED(64); /* both sides */
    int32_t                  sender_pid;                   /* sender */
    uint64_t                 sender_id;                    /* sender */
    uint32_t                 wire;     /* sender: uct_remapring_wire_type_t */
    uint32_t                 armed      UCS_V_ALIGNED(64); /* receiver */
    uct_remapring_ring_ctl_t ring;
} UCS_V_ALIGNED(64) uct_remapring_conn_t;


/**
 * The receiver's shared control area: a header, max_peers connections and
 * their slot tables (the mirror of each ring's slot -> pool block map,
 * which the shm wire writes through).
 *
 * Doorbells: a sender that finds its connection armed disarms it (exchange)
 * and sets its bit in @a active, then the word's bit in @a summary. The
 * receiver exchanges @a summary, then each flagged word, and polls the rings
 * of the bits it took. It arms a connection only when its ring is empty,
 * then looks at the tail once more: a sender that published before it saw
 * the arming is not missed. Progress therefore costs O(active senders).
 */
typedef struct uct_remapring_ctl {
    uint64_t magic;
    uint32_t version;
    uint32_t max_peers;
    uint64_t iface_id;
    int32_t  owner_pid;
    uint32_t block_size;
    int32_t  pool_fd;     /* pool memfd: /proc/<owner_pid>/fd/<pool_fd> */
    uint32_t pool_blocks; /* largest number of blocks of the pool */
    uint32_t ring_slots;  /* slots per ring, words per slot table */
    uint32_t reserved;
    uint64_t summary UCS_V_ALIGNED(64);
    uint64_t active[0] UCS_V_ALIGNED(64); /* max_peers bits, then conns,
                                             then one slot table each */
} uct_remapring_ctl_t;


/**
 * Interface address: where a sender finds the receiver's control area.
 */
typedef struct uct_remapring_iface_addr {
    int32_t  pid;      /* receiver */
    int32_t  ctl_fd;   /* its control memfd: /proc/<pid>/fd/<ctl_fd> */
    uint64_t iface_id; /* guards against pid and fd reuse */
    uint64_t pid_ns;   /* pid namespace of @a pid */
    uint32_t block_size; /* receiver's BLOCK_SIZE: the largest record */
} UCS_S_PACKED uct_remapring_iface_addr_t;


/**
 * Receiver's state of one connection.
 */
typedef struct uct_remapring_rx_conn {
    uct_remapring_ring_t *ring;     /* NULL until the sender claimed it */
    int                  pidfd;     /* sender, to see it exit */
    int                  active;    /* on the iface's active list */
    ucs_list_link_t      list;      /* in iface->rx.active */
} uct_remapring_rx_conn_t;


typedef struct uct_remapring_ep uct_remapring_ep_t;


/**
 * Interface: the receive side (pool, control area, rings of connected
 * senders) and the send side's shared state.
 */
typedef struct uct_remapring_iface {
    uct_base_iface_t        super;
    uint64_t                id;
    struct {
        int                     ctl_fd;
        uct_remapring_ctl_t     *ctl;
        size_t                  ctl_size;
        uct_remapring_conn_t    *conns;
        uct_remapring_pool_t    *pool;
        uct_remapring_rx_conn_t *rx_conns;  /* [max_peers] */
        ucs_list_link_t         active;     /* rx_conns with data */
        unsigned                max_peers;
        unsigned                nconns;     /* rings made */
        unsigned                idle_polls; /* since the last liveness scan */
        uct_recv_desc_t         release_desc;
        unsigned                rx_headroom;
        unsigned                credit_batch;
        unsigned                nslots;
    } rx;
    struct {
        ucs_arbiter_t           arbiter;    /* eps with pending requests */
        ucs_list_link_t         blocked;    /* eps waiting for credit */
        void                    *bounce;    /* am_bcopy packs here */
        size_t                  max_short;
        size_t                  max_bcopy;
        uct_remapring_wire_type_t wire;
    } tx;
    struct {
        double                  bandwidth;
        double                  latency;
        double                  overhead;
    } perf;
} uct_remapring_iface_t;


/**
 * Check a transport configuration; logs and returns UCS_ERR_INVALID_PARAM
 * naming the first bad setting.
 */
ucs_status_t
uct_remapring_iface_config_check(const uct_remapring_iface_config_t *config);


/**
 * Whether a peer's address announces the same block size as ours (a sender
 * sizes records by its own, the receiver's ring takes up to its own); logs
 * the difference at @a log_level and returns UCS_ERR_UNREACHABLE if not.
 */
ucs_status_t
uct_remapring_iface_check_block(uct_remapring_iface_t *iface,
                                const uct_remapring_iface_addr_t *addr,
                                ucs_log_level_t log_level);


/**
 * Offset of the connection array in a control area of @a max_peers.
 */
static inline size_t uct_remapring_ctl_conns_offset(unsigned max_peers)
{
    return ucs_offsetof(uct_remapring_ctl_t, active) +
           ucs_align_up(ucs_div_round_up(max_peers, 64) * sizeof(uint64_t),
                        64);
}


/**
 * Connection array of a control area of @a max_peers.
 */
static inline uct_remapring_conn_t *
uct_remapring_ctl_conns(uct_remapring_ctl_t *ctl, unsigned max_peers)
{
    return (uct_remapring_conn_t*)((char*)ctl +
                                   uct_remapring_ctl_conns_offset(max_peers));
}


/**
 * Bytes of one connection's slot table of @a ring_slots entries.
 */
static inline size_t uct_remapring_ctl_table_size(unsigned ring_slots)
{
    return ucs_align_up((size_t)ring_slots * sizeof(uint32_t), 64);
}


/**
 * Offset of the slot tables in a control area of @a max_peers.
 */
static inline size_t uct_remapring_ctl_tables_offset(unsigned max_peers)
{
    return uct_remapring_ctl_conns_offset(max_peers) +
           ((size_t)max_peers * sizeof(uct_remapring_conn_t));
}


/**
 * Size of a control area for @a max_peers connections of @a ring_slots.
 */
static inline size_t uct_remapring_ctl_size(unsigned max_peers,
                                            unsigned ring_slots)
{
    return uct_remapring_ctl_tables_offset(max_peers) +
           ((size_t)max_peers * uct_remapring_ctl_table_size(ring_slots));
}


/**
 * Slot table of connection @a index in a control area.
 */
static inline uint32_t *
uct_remapring_ctl_slot_table(uct_remapring_ctl_t *ctl, unsigned max_peers,
                             unsigned ring_slots, unsigned index)
{
    return (uint32_t*)((char*)ctl + uct_remapring_ctl_tables_offset(max_peers) +
                       (index * uct_remapring_ctl_table_size(ring_slots)));
}


/**
 * Whether the receiver of a connection must be woken; sender side, after it
 * published a tail. Full fence: the tail store must be visible before the
 * armed flag is read (the receiver does the mirror image).
 */
static inline void uct_remapring_ctl_ring_bell(uct_remapring_ctl_t *ctl,
                                               uct_remapring_conn_t *conn,
                                               unsigned index)
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (!__atomic_load_n(&conn->armed, __ATOMIC_RELAXED) ||
        !__atomic_exchange_n(&conn->armed, 0, __ATOMIC_ACQ_REL)) {
        return;
    }

    __atomic_fetch_or(&ctl->active[index / 64], UCS_BIT(index % 64),
                      __ATOMIC_RELEASE);
    __atomic_fetch_or(&ctl->summary, UCS_BIT(index / 64), __ATOMIC_RELEASE);
}

#endif
