/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef UCT_REMAPRING_VERBS_H_
#define UCT_REMAPRING_VERBS_H_

/*
 * The RDMA transport ("remaprdma"): the ring over RDMA, between hosts.
 *
 * Devices are the ports of the verbs devices that carry an IP address
 * (RoCE: an IPv4-mapped GID), "rxe0:1"; each has its memory domain (the
 * device's protection domain, registrations through the memory cache) and
 * interfaces of its own, with their own receive pool and rings. Connection
 * setup is rdma_cm's: an interface listens on its port's address (the
 * device address) and an ephemeral port (in the interface address); a
 * sender resolves the address, creates its RC QP and connects with its
 * wishes in the request's private data; the receiver makes the ring, its
 * QP, and accepts with the ring's geometry in the reply. No other transport
 * is needed. One CQ and one SRQ per interface serve every QP of it, both
 * directions: progress is O(active peers).
 *
 * Records: the writer copies a record into its staging buffer (registered)
 * and RDMA-WRITEs it to its ring offset; the last write of a send carries
 * the new tail in its immediate data (in 64-byte units), so the reader sees
 * the tail only from a completion, once every byte below it is placed:
 * TAIL commit, never a poll of the last byte (an HCA may place the bytes of
 * one write in any order). A PAD record is its own write, before the
 * record. Credits come back as a WRITE with immediate from the receiver
 * (the new limit in slots); a writer out of credit tells the receiver with
 * an empty write whose immediate carries the STALL bit, and its grant
 * doubles as on the shm wire.
 *
 * Receive requests: every immediate takes one of the receiver's SRQ,
 * reposted only by its progress. A sender has at most imm_window (from the
 * reply: the receiver's IMM_WINDOW while its SRQ has room for many more
 * connections, less as it fills, uct_remapring_verbs_imm_window) immediates
 * in flight on a connection: a record that finds them
 * all in flight is written without one and its tail waits; the receiver
 * acknowledges the immediates it took, every half window, with a write
 * whose immediate has IMM_ACK set, and the held tail goes then (until then
 * the connection's later sends and flushes wait as pending). The SRQ keeps a
 * window posted for each connection (a sending connection's share: the
 * credits and acknowledgements it can be sent), growing with them, so a
 * receiver that stops progressing makes its senders hold their tails, not
 * meet RNR NAKs.
 *
 * Quiet rings: a ring that took no immediate for IDLE_TIME asks its sender
 * to keep to IDLE_SLOTS slots from its tail (uct_remapring_vconn_quiet_t);
 * in odp mode (the view is credited whole) the receiver then gives back
 * the memory of the other slots, which the device faults in again when the
 * sender next writes them; the sender's staging goes back to its first
 * size.
 *
 * Modes, chosen from what the device reports (UCX_REMAPRDMA_MODE):
 *   odp     the ring view is registered with explicit On-Demand Paging; the
 *           writer writes to view + (offset % W), and a block the receiver
 *           remaps under a slot (mmap MAP_FIXED) is followed by the device
 *           through the kernel's MMU notifier, as the CPU follows it.
 *   pinned  each block behind a slot of a connection's ring is registered
 *           for that connection alone (remote write on the block, nothing
 *           around it); with each credit the receiver writes the address
 *           and rkey of the block behind each newly credited slot into the
 *           sender's slot table (a small registered array), before the
 *           immediate that credits them; the writer writes there. A slot
 *           that keeps its block keeps the registration, no system call; a
 *           block with held records that leaves its slot loses it at once,
 *           and one registered for another connection's slot earlier loses
 *           it before the block is credited again: a sender reaches only
 *           the blocks behind its own ring's slots (its other writes fail
 *           with a remote access error). No copy, no remap, and no page of
 *           the pool is ever punched out (a pinned page stays the
 *           device's).
 *
 * The mode is each connection's, named in the reply: an odp interface on a
 * device that places ODP packets at page starts (rxe) takes a connection
 * whose path MTU is under a page in pinned mode.
 *
 * Ordering: RC executes the requests of a QP in order, and a completion
 * for a receive (the immediate) is reported only after the data of that
 * write and of every earlier one on the QP is placed. A staging byte is
 * reused only after the signaled request that covers it completed. The
 * slot table entries of a credit are written by the same QP's earlier
 * bytes of the credit's own write, so the writer reads them after the
 * credit's completion.
 *
 * A connection fails on a completion in error, a QP or CM error, or the
 * peer's DISCONNECTED (the kernel of a process that exits disconnects its
 * QPs): the sender's endpoints get UCT's error handling, the receiver
 * drains what arrived and frees the ring.
 */

#include <uct/ib/remapring/base/remapring_ep.h>
#include <uct/ib/remapring/base/remapring_iface.h>
#include <uct/ib/remapring/base/remapring_md.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <ucs/datastruct/khash.h>
#include <ucs/datastruct/list.h>
#include <ucs/datastruct/queue.h>

#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>


#define UCT_REMAPRING_VERBS_MAGIC      0x726d7662u /* "bvmr" */
#define UCT_REMAPRING_VERBS_VERSION    3
#define UCT_REMAPRING_VERBS_RKEY_MAGIC 0x79656b7362726576ull /* "verbskey" */
/* Immediate data of a record write: the tail in 64-byte units (mod 2^30),
 * a bit for "out of credit" and one for "I keep to what you asked me to
 * keep to" (the answer to IMM_QUIET) */
#define UCT_REMAPRING_VERBS_IMM_STALL     0x80000000u
#define UCT_REMAPRING_VERBS_IMM_YIELD     0x40000000u
#define UCT_REMAPRING_VERBS_IMM_TAIL_MASK 0x3fffffffu
/* Immediate data from a receiver: with IMM_ACK the number of the sender's
 * immediates it took (mod 2^31); else with IMM_QUIET a request to keep to
 * the slots from the one of its tail on, as many as the low bits say, until
 * the next credit; else its limit in slots (mod 2^30) */
#define UCT_REMAPRING_VERBS_IMM_ACK        0x80000000u
#define UCT_REMAPRING_VERBS_IMM_QUIET      0x40000000u
#define UCT_REMAPRING_VERBS_IMM_LIMIT_MASK 0x3fffffffu
/* Counts of immediates (mod 2^31) */
#define UCT_REMAPRING_VERBS_IMM_MASK       0x7fffffffu


/**
 * How the ring is placed in a receiver's memory on a verbs device.
 */
typedef enum {
    UCT_REMAPRING_VERBS_MODE_AUTO, /* odp if the device has it */
    UCT_REMAPRING_VERBS_MODE_ODP,
    UCT_REMAPRING_VERBS_MODE_PINNED,
    UCT_REMAPRING_VERBS_MODE_LAST
} uct_remapring_verbs_mode_t;


/**
 * Transport configuration (UCX_REMAPRDMA_*; the ring's settings are read
 * under UCX_REMAPRING_* first, for both transports on it).
 */
typedef struct uct_remapring_verbs_iface_config {
    uct_remapring_iface_config_t super;
    int mode; /* uct_remapring_verbs_mode_t */
    unsigned sq_size;
    unsigned srq_size;
    size_t staging;
    unsigned timeout;
    double rnr_timer;   /* seconds */
    size_t max_inline;  /* UCS_MEMUNITS_AUTO: UCT_REMAPRING_VERBS_MAX_INLINE_AUTO */
    unsigned max_conns; /* connections an interface accepts */
    unsigned imm_window; /* a sender's immediates in flight, at most */
    double idle_time;   /* seconds before an odp ring gives back memory */
} uct_remapring_verbs_iface_config_t;


/**
 * What a device and its port allow an interface, and what it takes of the
 * settings (uct_remapring_verbs_limits()).
 */
typedef struct uct_remapring_verbs_limits {
    unsigned sq_size;  /* send requests per connection (QP) */
    unsigned srq_size; /* receive requests of the interface (SRQ) */
    unsigned srq_max;  /* what the SRQ may grow to, as connections come */
    unsigned send_sge; /* gather entries of a WRITE: put_zcopy's iov */
    unsigned read_sge; /* scatter entries of a READ: get_zcopy's iov */
    size_t   max_msg;  /* largest message of the port */
} uct_remapring_verbs_limits_t;


/**
 * A verbs device, as its memory domain opened it.
 */
typedef struct uct_remapring_verbs_dev {
    struct ibv_context *ctx;  /* rdma_cm's context of the device */
    struct ibv_pd      *pd;
    int                odp;   /* explicit ODP for RC WRITE and READ */
    unsigned           odp_rec_align; /* record alignment in odp mode */
    int                odp_probed; /* uct_remapring_verbs_dev_probe_odp() */
    unsigned           max_rd_atomic;
    int                gid_index; /* UCX_REMAPRDMA_GID_INDEX; -1: auto */
    char               name[IBV_SYSFS_NAME_MAX];
} uct_remapring_verbs_dev_t;


/**
 * Memory domain configuration (UCX_REMAPRDMA_*, and UCX_REMAPRING_* for the
 * settings both transports share).
 */
typedef struct uct_remapring_verbs_md_config {
    uct_remapring_md_config_t super;
    unsigned long             gid_index; /* UCS_ULUNITS_AUTO: auto */
} uct_remapring_verbs_md_config_t;


/**
 * The memory domain of a verbs device.
 */
typedef struct uct_remapring_verbs_md {
    uct_remapring_md_t super;
    uct_remapring_verbs_dev_t *dev;
} uct_remapring_verbs_md_t;


/**
 * Memory handle of a verbs registration.
 */
typedef struct uct_remapring_verbs_memh {
    uct_remapring_memh_t super;
    struct ibv_mr *mr;
} uct_remapring_verbs_memh_t;


/**
 * Device address: the IP address of the port, which rdma_cm resolves.
 */
typedef struct uct_remapring_verbs_dev_addr {
    uint32_t magic;  /* UCT_REMAPRING_VERBS_MAGIC */
    uint8_t  family; /* AF_INET or AF_INET6 */
    uint8_t  reserved[3];
    uint8_t  ip[16];
} UCS_S_PACKED uct_remapring_verbs_dev_addr_t;


/**
 * Interface address. It starts with a word that no shm interface address
 * starts with (a pid of -1), so that the shm transport refuses it.
 */
typedef struct uct_remapring_verbs_iface_addr {
    uint32_t magic;       /* ~0: not a pid */
    uint16_t port;        /* rdma_cm port, network order */
    uint16_t version;
    uint64_t iface_id;
    uint32_t max_payload; /* largest payload the receiver's rings take */
} UCS_S_PACKED uct_remapring_verbs_iface_addr_t;

#define UCT_REMAPRING_VERBS_ADDR_MAGIC 0xffffffffu


/**
 * Remote key of a verbs registration.
 */
typedef struct uct_remapring_verbs_rkey {
    uint64_t magic;   /* UCT_REMAPRING_VERBS_RKEY_MAGIC */
    uint64_t address;
    uint64_t length;
    uint32_t rkey;
    uint32_t check;
} UCS_S_PACKED uct_remapring_verbs_rkey_t;


/**
 * Entry of a sender's slot table (pinned mode): where the block behind a
 * slot is in the receiver's memory.
 */
typedef struct uct_remapring_verbs_slot {
    uint64_t addr;
    uint32_t rkey;
    uint32_t reserved;
} uct_remapring_verbs_slot_t;


/**
 * Private data of a connection request (sender -> receiver).
 */
typedef struct uct_remapring_verbs_req {
    uint32_t magic;
    uint16_t version;
    uint16_t reserved;
    uint64_t iface_id;    /* the receiving interface the sender wants */
    uint64_t sender_id;
    uint64_t table_addr;  /* sender's slot table, for pinned mode */
    uint32_t table_rkey;
    uint32_t max_payload; /* largest payload the sender sends */
} UCS_S_PACKED uct_remapring_verbs_req_t;


/**
 * Private data of the reply (receiver -> sender): the ring's geometry.
 */
typedef struct uct_remapring_verbs_rep {
    uint32_t magic;
    uint16_t version;
    uint16_t mode;        /* uct_remapring_verbs_mode_t, ODP or PINNED */
    uint64_t view_addr;   /* odp: the ring view */
    uint64_t nonce;
    uint32_t view_rkey;
    uint32_t block_size;
    uint32_t nslots;
    uint32_t reserve;
    uint32_t inline_max;
    uint32_t align;
    uint32_t align_offset;
    uint32_t rec_align;   /* records start on multiples of it */
    uint32_t imm_window;  /* immediates the sender may have in flight */
} UCS_S_PACKED uct_remapring_verbs_rep_t;


/**
 * Private data of a reject: why.
 */
typedef struct uct_remapring_verbs_rej {
    uint32_t magic;
    int32_t  status;      /* ucs_status_t */
} UCS_S_PACKED uct_remapring_verbs_rej_t;


/**
 * An odp receiver's ring that went quiet gives back the memory of its slots
 * past IDLE_SLOTS from the sender's tail: it asks the sender to keep to
 * them (IMM_QUIET), punches the pages of the others once the sender says
 * it does (IMM_YIELD, with its tail), then credits them again; a page is
 * made again when the sender next writes it.
 */
typedef enum {
    UCT_REMAPRING_VCONN_BUSY, /* written since last looked */
    UCT_REMAPRING_VCONN_QUIET_ASKED, /* credits wait for the answer */
    UCT_REMAPRING_VCONN_QUIET /* given back; BUSY at the next record */
} uct_remapring_vconn_quiet_t;


typedef enum {
    UCT_REMAPRING_VCONN_RESOLVING, /* sender: address and route */
    UCT_REMAPRING_VCONN_CONNECTING, /* request sent, or accepted */
    UCT_REMAPRING_VCONN_READY,
    UCT_REMAPRING_VCONN_CLOSED,    /* disconnected or failed */
} uct_remapring_vconn_state_t;


/**
 * A signaled send request and what completes with it.
 */
/**
 * Pinned mode: a receiver's registration of one pool block for one slot of
 * one connection's ring, the only key that sender has to it.
 */
typedef struct uct_remapring_verbs_slot_mr {
    struct ibv_mr *mr;    /* remote write on the block alone, or NULL */
    uint32_t      block;  /* the block it covers */
} uct_remapring_verbs_slot_mr_t;


typedef struct uct_remapring_verbs_op {
    unsigned              nwr;          /* requests it completes */
    uint64_t              staging_end;  /* staging freed up to here */
    uct_completion_t      *comp;        /* or NULL */
    uct_unpack_callback_t unpack_cb;    /* get_bcopy: data to unpack */
    void                  *unpack_arg;
    void                  *unpack_data;
    size_t                unpack_length;
} uct_remapring_verbs_op_t;


typedef struct uct_remapring_vconn uct_remapring_vconn_t;
KHASH_MAP_INIT_INT(uct_remapring_vconns, uct_remapring_vconn_t*);


/**
 * A sending interface's connection to a receiver on another host.
 */
typedef struct uct_remapring_verbs_peer {
    uct_remapring_peer_t super;
    uct_remapring_vconn_t *vconn; /* its RC connection */
    uint64_t iface_id; /* of the receiving interface */
} uct_remapring_verbs_peer_t;


/**
 * One RC connection, either side: a sender's to a receiving interface, or
 * a receiver's from one sender.
 */
struct uct_remapring_vconn {
    uct_remapring_iface_t      *iface;
    int                        is_rx;
    uct_remapring_vconn_state_t state;
    struct rdma_cm_id          *id;
    struct ibv_qp              *qp;
    uint32_t                   qp_num;
    int                        qp_num_valid; /* in the iface's hash */
    int                        zombie;    /* freed once the CQ drained */
    char                       name[64]; /* peer's address, for the log */

    /* send queue, both sides */
    unsigned                   sq_avail;
    unsigned                   max_inline; /* records sent inline, bytes */
    unsigned                   unsignaled;
    uct_remapring_verbs_op_t   *ops;      /* [sq_size], a FIFO */
    unsigned                   ops_head, ops_count;

    /* sender */
    uct_remapring_peer_t       *peer;
    char                       *staging;
    size_t                     staging_size;
    struct ibv_mr              *staging_mr;
    uint64_t                   staging_head, staging_tail;
    uint64_t                   staging_signaled; /* staging_end of the last
                                                    signaled request */
    uint64_t                   staging_posted; /* staging_end of the last
                                                  request posted */
    int                        staging_grow; /* a send found it full */
    int                        staging_shrink; /* the receiver found us quiet */
    uct_remapring_verbs_slot_t *table;    /* pinned: written by the receiver */
    struct ibv_mr              *table_mr;
    uint64_t                   limit;     /* credit, from the receiver */
    int                        stall_sent;
    uint32_t                   imm_posted; /* immediates sent, */
    uint32_t                   imm_acked;  /* of them taken (mod 2^31) */
    int                        tail_held; /* tail not sent: no window */
    int                        flush_held; /* a flush waits for that tail */
    int                        stall_held; /* the same, a stall */
    int                        yield_held; /* the same, a yield */
    uct_remapring_verbs_rep_t  rep;
    struct {
        uint64_t               start, end; /* ring range */
        uint64_t               staging;    /* its staging position */
        int                    valid;
    } pending;                           /* last run, for publish_tail */
    uint64_t                   tail;      /* published */
    uint64_t                   view_addr; /* odp */
    uint32_t                   view_rkey;
    unsigned                   block_shift;
    int                        pinned;    /* both sides: the connection's
                                             mode is pinned, not odp */

    /* receiver */
    remapring_ring_t *ring;
    remapring_ring_ctl_t ctl; /* private: no one else maps it */
    uint32_t                   *slots;    /* the ring's slot table mirror */
    struct ibv_mr              *view_mr;  /* odp */
    uct_remapring_verbs_slot_t *credit_table; /* pinned: source of credits */
    uct_remapring_verbs_slot_mr_t *slot_mrs; /* pinned: [nslots] */
    struct ibv_mr              *credit_table_mr;
    uint64_t                   remote_table;
    uint32_t                   remote_table_rkey;
    uint64_t                   credited;  /* limit last sent */
    int                        credit_asked; /* the sender stalled since */
    uint64_t                   prefetched; /* odp: ring offsets faulted in */
    uint64_t                   populated; /* odp: and present in both views */
    uint64_t                   rx_tail;   /* from the immediates */
    unsigned                   imm_window; /* given to the sender */
    uint32_t                   imm_taken; /* the sender's immediates, */
    uint32_t                   imm_told;  /* of them acknowledged */
    int                        quiet;     /* odp: uct_remapring_vconn_quiet_t */
    uint32_t                   quiet_seen; /* imm_taken when last looked */
    ucs_time_t                 quiet_since; /* and since when the same */
    int                        active;
    int                        failed;
    unsigned                   srq_share; /* receive requests counted */
    ucs_list_link_t            list;      /* iface's rx conns, zombies */
    ucs_list_link_t            active_list;
};


/**
 * Interface of the RDMA transport.
 */
typedef struct uct_remapring_verbs_iface {
    uct_remapring_iface_t super;
    uct_remapring_verbs_dev_t  *dev;
    uint8_t                    port_num;
    uct_remapring_verbs_mode_t mode;     /* ODP or PINNED */
    struct ibv_cq              *cq;
    struct ibv_srq             *srq;
    unsigned                   srq_size, srq_posted; /* posted: target */
    unsigned                   srq_min;  /* UCX_REMAPRDMA_SRQ_SIZE */
    unsigned                   srq_max;  /* the SRQ's capacity */
    unsigned                   imm_window; /* a connection's, at most */
    unsigned                   srq_need;  /* the connections' shares */
    int                        srq_short; /* said it cannot bound them */
    unsigned                   sq_size;
    unsigned                   sig_every;
    size_t                     staging_size; /* a connection's, at most */
    size_t                     staging_min;  /* and at first */
    uint8_t                    timeout;  /* QP ACK timeout exponent */
    uint8_t                    rnr_code; /* QP RNR NAK timer, IB's code */
    uct_remapring_verbs_limits_t limits;
    int                        prefetch; /* odp: ibv_advise_mr works */
    int                        populate; /* odp: MADV_POPULATE_WRITE works */
    uint64_t                   populate_calls; /* odp: madvise calls made */
    unsigned                   max_inline; /* asked of each QP */
    struct rdma_event_channel  *channel;
    struct rdma_cm_id          *listen_id;
    struct sockaddr_storage    addr;     /* the port's, listening */
    int                        ifindex;  /* its network interface, or 0 */
    uint16_t                   cm_port;  /* network order */
    khash_t(uct_remapring_vconns) qps;   /* by QP number */
    ucs_list_link_t            rx_conns;
    ucs_list_link_t            rx_active;
    ucs_list_link_t            zombies;  /* QPs destroyed, CQ not drained */
    size_t                     pool_block_size;
    unsigned                   nrx;      /* receiving connections */
    unsigned                   max_conns; /* of them, at most */
    unsigned                   cm_calls; /* progress calls since CM poll */
    unsigned                   check_calls; /* since the pool's upkeep */
    ucs_time_t                 idle_time; /* UCX_REMAPRDMA_IDLE_TIME; 0: never */
    ucs_time_t                 quiet_next; /* when to look at the rings next */
    /* pinned: per pool block, the registration that covers it (a slot's
     * of a connection, current or left over from an earlier lap), or NULL */
    uct_remapring_verbs_slot_mr_t **block_mrs;
    unsigned                   nblocks;
    struct {
        uint64_t               regs;      /* blocks registered for a slot */
        uint64_t               reuses;    /* credits that kept one */
        uint64_t               revoked;   /* deregistered while held */
    } pinned_stats;
    struct {
        uint64_t               held;      /* tails held for an ack */
        uint64_t               acks;      /* acknowledgements sent */
    } imm_stats;
    struct {
        uint64_t               asked;     /* quiet rings asked to keep to less */
        uint64_t               yields;    /* answers */
        uint64_t               pages;     /* pages given back then */
    } quiet_stats;
    struct {
        uint64_t               records;   /* writes of records */
        uint64_t               tails;     /* empty writes with a tail */
        uint64_t               markers;   /* empty signaled writes */
        uint64_t               signaled;  /* requests that complete */
        uint64_t               full;      /* sends that found staging full */
    } tx_stats;
} uct_remapring_verbs_iface_t;


/* --------------------------------------------------------- memory domain */

/** Name of the RDMA transport, of its component and of its module
 *  (libuct_remaprdma.so): a transport of its own (UCX_TLS=remaprdma), beside
 *  the shared-memory one (UCX_TLS=remapring); at most 9 characters, UCT's
 *  limit for a transport's name */
#define UCT_REMAPRING_VERBS_NAME "remaprdma"

/** Prefix of its settings (UCX_REMAPRDMA_*); the ring's and the memory
 *  domain's are read under UCX_REMAPRING_* first, for both transports, then
 *  under UCX_REMAPRDMA_*, for this one */
#define UCT_REMAPRING_VERBS_CONFIG_PREFIX "REMAPRDMA_"

/** The component of the verbs memory domains and of the RDMA transport */
extern uct_component_t uct_remapring_verbs_component;

/** The ports of a verbs memory domain's device that carry an address */
ucs_status_t
uct_remapring_verbs_query_tl_devices(uct_md_h md,
                                     uct_tl_device_resource_t **devices_p,
                                     unsigned *num_devices_p);

/** Once per device, where it reports ODP: where its ODP writes land
 *  (sets odp_rec_align, or clears odp when they land elsewhere) */
void uct_remapring_verbs_dev_probe_odp(uct_remapring_verbs_dev_t *dev);

/** The IP address of port @a port of @a ctx: on RoCE from GID entry
 *  @a gid_index (-1: the first that carries one, IPv4 RoCE v2 first), on
 *  InfiniBand its IPoIB interface's (whose hardware address carries GID
 *  @a gid_index, -1: 0); the index and value of that GID and the index of
 *  its network interface (0 where the device names none); false if it has
 *  none */
int uct_remapring_verbs_port_gid(struct ibv_context *ctx, uint8_t port,
                                 int gid_index, struct sockaddr_storage *ss,
                                 int *index_p, union ibv_gid *gid_p,
                                 int *ifindex_p);

/**
 * What device attributes @a dev and port attributes @a port allow an
 * interface of device @a name that asks for @a sq_size send requests per
 * connection and @a srq_size receive requests, with blocks (the largest
 * write of a record) of @a block_size: each figure is the setting's or the
 * device's, whichever is smaller, and a setting the device cannot meet is
 * named in one log line. UCS_ERR_UNSUPPORTED where the device cannot carry
 * the ring at all (no SRQ, blocks larger than its messages, fewer requests
 * than the least the transport needs).
 */
ucs_status_t uct_remapring_verbs_limits(const char *name,
                                        const struct ibv_device_attr *dev,
                                        const struct ibv_port_attr *port,
                                        unsigned sq_size, unsigned srq_size,
                                        size_t block_size,
                                        uct_remapring_verbs_limits_t *limits);

/**
 * InfiniBand's code for a receiver's RNR NAK timer (min_rnr_timer) of at
 * least @a seconds, the largest (491.52 ms) above it; 0, the code of the
 * longest (655.36 ms), is never returned.
 */
uint8_t uct_remapring_verbs_rnr_code(double seconds);

/**
 * The window of immediates a new connection's sender gets from a receiver
 * whose IMM_WINDOW is @a setting, whose SRQ may grow to @a srq_max receive
 * requests and whose connections (and progress) already count on
 * @a srq_need of them: @a setting while the SRQ could still grow by 32 such
 * windows, half of it for each halving of that room, down to 32 (or
 * @a setting, if lower).
 */
unsigned uct_remapring_verbs_imm_window(unsigned setting, unsigned srq_max,
                                        unsigned srq_need);

/**
 * The address of an InfiniBand port whose GID is @a gid: of the network
 * interfaces in @a ifaddrs that @a sysfs_net (/sys/class/net) says are
 * IPoIB (type 32) with @a gid in their hardware address, the first with an
 * IPv4 address, else the first with a global IPv6 one; its name in
 * @a ifname (@a max bytes). False if none.
 */
int uct_remapring_verbs_ipoib_addr(const char *sysfs_net,
                                   const union ibv_gid *gid,
                                   const struct ifaddrs *ifaddrs,
                                   struct sockaddr_storage *ss, char *ifname,
                                   size_t max);

/** uct_remapring_verbs_port_gid(), the address and network interface
 *  alone (@a ifindex_p may be NULL) */
int uct_remapring_verbs_port_addr(struct ibv_context *ctx, uint8_t port,
                                  int gid_index, struct sockaddr_storage *ss,
                                  int *ifindex_p);

/**
 * The kernel's route to @a dst (netlink RTM_GETROUTE): the index of the
 * interface it leaves by in *@a oif_p (0 if none is named), and in
 * *@a local_p whether @a dst is an address of this host. -1 where there is
 * no route, or netlink cannot be asked.
 */
int uct_remapring_verbs_route(const struct sockaddr_storage *dst, int *oif_p,
                              int *local_p);

/**
 * Whether a peer whose port has address @a peer is reachable from our port,
 * whose address is @a ours and whose network interface is @a ifindex: it is
 * our own address (the port loops back), or the kernel routes it out
 * through our port's interface, as UCX's RoCE transports decide. With no
 * interface known (@a ifindex 0), any peer of the same address family.
 */
int uct_remapring_verbs_routable(const struct sockaddr_storage *ours,
                                 int ifindex,
                                 const struct sockaddr_storage *peer);

#endif
