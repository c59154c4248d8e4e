/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef UCT_REMAPRING_SM_CTL_H_
#define UCT_REMAPRING_SM_CTL_H_

/*
 * The connection protocol between sending interfaces and a receiving
 * interface on one host.
 *
 * Control area: a memfd of the receiver that senders map through
 * /proc/<pid>/fd/<n>, sealed so that its size never changes (a sender
 * refuses one that is not); the receiver's interface address names pid, fd
 * and a random interface id (pids and fd numbers are reused). It holds a
 * header (uct_remapring_ctl_t), the doorbell bits, one connection slot per
 * sender (uct_remapring_conn_t, with the ring's control words) and one slot
 * table per connection: the mirror of the ring's slot -> pool block map
 * that the shm wire writes through, as a NIC follows its page table.
 *
 * A connection joins one sending interface to one receiving interface; all
 * endpoints from that sender to that receiver share it. Its state word:
 *   FREE    -> OFFERING receiver, compare-and-swap: it takes the slot to
 *                       make a ring in advance; no sender claims it
 *                       meanwhile, and a sender that claimed it first keeps
 *                       it (an offer never overwrites a claim)
 *   OFFERING -> OFFERED receiver: the ring is made (ring words valid), for
 *                       a sender on the shm wire to take at once
 *   OFFERING -> FREE    receiver: no ring could be made
 *   OFFERED -> READY    sender on the shm wire, compare-and-swap: it writes
 *                       at once; it fills in its pid, id and wire and rings
 *                       the doorbell, and the receiver adopts the ring
 *   FREE or OFFERED -> CLAIMED  sender, compare-and-swap, then it fills in
 *                       its id, wire and, last, its pid (release), and rings
 *                       the doorbell. The receiver clears the pid when it
 *                       frees a slot, and ignores a doorbell of a claimed
 *                       or taken slot whose pid reads 0: that bit was rung
 *                       for the slot's previous sender, and the claimant's
 *                       own doorbell follows
 *   CLAIMED -> READY    receiver, once the ring is made (ring words valid)
 *   any     -> CLOSED   sender, when its last endpoint goes; the receiver
 *                       drains what was published, then frees the slot
 *   any     -> RESET    sender, instead of CLOSED, when its last endpoint
 *                       went after a cancelling flush (UCP's force close):
 *                       as CLOSED, and the receiving interface's own
 *                       connection to that sender fails at its next check
 *                       (uct_ep_check), unless the sender connected again
 *   CLAIMED, READY -> FAILED  receiver: the sender was refused (no room,
 *                       gone) or its ring went bad; the sender fails
 *   CLOSED, FAILED -> FREE    receiver, once it let go of the ring
 * The receiver moves a slot a sender may write (to READY, FAILED) by
 * compare-and-swap, so that a sender's CLOSED is never overwritten.
 * Once it accepted a sender, it holds it to the moves above: a slot of a
 * live ring found in another state than READY, CLOSED or its own FAILED, or
 * READY with another sender's pid or id, was written out of turn (by the
 * sender itself, or by a new sender that claimed a slot the old one
 * rewrote as FREE or OFFERED); the receiver fails the connection with one
 * log line, and whoever holds the slot sees FAILED and fails too, instead
 * of waiting for a ring that never comes.
 * A sender reads the state and the header's state (OPEN -> CLOSED when the
 * receiving interface closes, though its process may live on): anything but
 * READY or CLAIMED under an OPEN header is a failed connection.
 *
 * Doorbells: a receiver that found a ring empty arms its connection, fences,
 * and looks at the ring once more; a sender that published reads armed
 * (no fence), and if it finds the connection armed, disarms it (exchange),
 * sets its bit in active[] and then the word's bit in summary. The
 * receiver takes summary, then each flagged word (exchange), and wakes
 * those connections: progress costs O(active senders).
 * The sender does not fence between its publish and its read of armed: a
 * full fence there waits for every store of the record to reach the
 * receiver's cache, and cost most of a sender's time per message. So a
 * record published while the receiver was arming can be missed by both
 * looks (each side's load passing its own store), and the bell not rung.
 * The receiver covers that case itself: now and then (every
 * UCT_REMAPRING_RX_SWEEP_PERIOD progress calls) it looks at one of its
 * sleeping rings, in turn, and wakes it if it is not empty. A record is
 * thus never lost; in that rare race it waits for the sweep (at most
 * sleeping rings x the period, in progress calls). A close or a reclaim
 * answer rings unconditionally or is found the same way.
 */

#include "remapring_sm_proc.h"

#include <uct/ib/remapring/ring/ring.h>

#include <ucs/datastruct/list.h>
#include <ucs/sys/compiler_def.h>
#include <ucs/sys/math.h>
#include <ucs/type/status.h>

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>


#define UCT_REMAPRING_CTL_MAGIC   0x6c74636972616d72ull /* "rmaric tl" */
#define UCT_REMAPRING_CTL_VERSION 9
#define UCT_REMAPRING_MAX_PEERS   4096 /* largest MAX_PEERS */


/**
 * How a sender puts records into a receiver's ring.
 */
typedef enum {
    UCT_REMAPRING_WIRE_SHM, /* stores into the receiver's mapped pool */
    UCT_REMAPRING_WIRE_CMA, /* process_vm_writev into its ring view */
    UCT_REMAPRING_WIRE_LAST
} uct_remapring_wire_type_t;


/**
 * State of a connection slot; see the top of this file.
 */
typedef enum {
    UCT_REMAPRING_CONN_FREE     = 0,
    UCT_REMAPRING_CONN_CLAIMED  = 1,
    UCT_REMAPRING_CONN_READY    = 2,
    UCT_REMAPRING_CONN_CLOSED   = 3,
    UCT_REMAPRING_CONN_FAILED   = 4,
    UCT_REMAPRING_CONN_OFFERED  = 5,
    UCT_REMAPRING_CONN_OFFERING = 6,
    UCT_REMAPRING_CONN_RESET    = 7  /* read as CLOSED, but by
                                        uct_remapring_conn_was_reset() */
} uct_remapring_conn_state_t;


/**
 * State of a receiving interface, in its control area's header.
 */
typedef enum {
    UCT_REMAPRING_CTL_OPEN   = 1,
    UCT_REMAPRING_CTL_CLOSED = 2
} uct_remapring_ctl_state_t;


/**
 * The words of a shared copy (remapring_sm_share.c): the connection's sender
 * asks the receiver to copy some chunks of one of its put or get operations.
 */
typedef struct uct_remapring_share {
    uint64_t claim; /* gen << 32 | next chunk: both take chunks here */
    uint64_t done;  /* chunks the receiver copied or gave back */
    uint64_t back;  /* 1 + the chunk the receiver could not copy, or 0 */
} uct_remapring_share_t;


/** Most chunks of one shared copy; a helper refuses a request with more */
#define UCT_REMAPRING_SHARE_MAX_CHUNKS 64


/** Control record kinds (the first byte of its payload) */
enum {
    UCT_REMAPRING_CONTROL_SHARE = 1
};


/**
 * A request to share a copy: the payload of the control record a sender
 * writes into its ring (remapring_sm_share.c).
 */
typedef struct uct_remapring_share_req {
    uint8_t kind; /* UCT_REMAPRING_CONTROL_SHARE */
    uint8_t helper_writes; /* 1: the helper writes into the requester (a
                              get); 0: it reads from it (a put) */
    uint16_t reserved;
    uint32_t gen;
    uint32_t nchunks;
    uint32_t chunk; /* bytes of each chunk but the last */
    uint64_t length;
    uint64_t helper_addr; /* the helper's side of the operation */
    uint64_t requester_addr; /* the requester's side */
} UCS_S_PACKED uct_remapring_share_req_t;


/**
 * One connection slot in the receiver's control area.
 */
typedef struct uct_remapring_conn {
    uint32_t                 state      UCS_V_ALIGNED(64); /* both sides */
    int32_t                  sender_pid;                   /* sender */
    uint64_t                 sender_id;                    /* sender */
    uint32_t                 wire;     /* sender: uct_remapring_wire_type_t */
    uint32_t                 armed      UCS_V_ALIGNED(64); /* receiver */
    remapring_ring_ctl_t ring;
    uct_remapring_share_t    share      UCS_V_ALIGNED(64); /* both sides */
} UCS_V_ALIGNED(64) uct_remapring_conn_t;


/**
 * Header of the receiver's control area, then max_peers doorbell bits,
 * max_peers connections and max_peers slot tables of ring_slots words.
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
    uint32_t state;       /* uct_remapring_ctl_state_t */
    uint64_t summary UCS_V_ALIGNED(64);
    uint64_t active[0] UCS_V_ALIGNED(64);
} uct_remapring_ctl_t;


/**
 * Interface address: where a sender finds the receiver's control area.
 */
typedef struct uct_remapring_iface_addr {
    int32_t  pid;        /* receiver */
    int32_t  ctl_fd;     /* its control memfd: /proc/<pid>/fd/<ctl_fd> */
    uint64_t iface_id;   /* guards against pid and fd reuse */
    uint64_t pid_ns;     /* pid namespace of @a pid */
    uint32_t max_payload; /* largest payload the receiver's rings take */
} UCS_S_PACKED uct_remapring_iface_addr_t;


/**
 * The receiver's own control area.
 */
typedef struct uct_remapring_ctl_area {
    int                  fd;
    uct_remapring_ctl_t  *ctl;
    size_t               size;
    uct_remapring_conn_t *conns;      /* [max_peers] */
    unsigned             max_peers;
    unsigned             ring_slots;
} uct_remapring_ctl_area_t;


/**
 * A receiver's control area as one sender sees it, and its connection in it.
 */
typedef struct uct_remapring_remote {
    uct_remapring_proc_t proc;        /* the receiver process */
    uct_remapring_ctl_t  *ctl;        /* mapped here */
    size_t               ctl_size;
    uint64_t             iface_id;
    /* the header as it was checked: the receiver may write the mapping */
    unsigned             max_peers;
    unsigned             ring_slots;
    uint32_t             block_size;
    uint32_t             pool_blocks;
    int                  pool_fd;
    uct_remapring_conn_t *conn;       /* ours, once claimed */
    unsigned             index;       /* of @a conn */
} uct_remapring_remote_t;


/* ------------------------------------------------------------------------ */
/* Layout                                                                   */
/* ------------------------------------------------------------------------ */

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
static inline size_t
uct_remapring_ctl_size(unsigned max_peers, unsigned ring_slots)
{
    return uct_remapring_ctl_tables_offset(max_peers) +
           ((size_t)max_peers * uct_remapring_ctl_table_size(ring_slots));
}


/**
 * Connection array of a control area of @a max_peers. The geometry comes
 * from the caller's own copy, never from the shared header, which the
 * other side can write.
 */
static inline uct_remapring_conn_t *
uct_remapring_ctl_conns(uct_remapring_ctl_t *ctl, unsigned max_peers)
{
    return (uct_remapring_conn_t*)UCS_PTR_BYTE_OFFSET(
            ctl, uct_remapring_ctl_conns_offset(max_peers));
}


/**
 * Slot table of connection @a index of a control area of @a max_peers
 * connections of @a ring_slots (the caller's copy, as above).
 */
static inline uint32_t *
uct_remapring_ctl_slot_table(uct_remapring_ctl_t *ctl, unsigned max_peers,
                             unsigned ring_slots, unsigned index)
{
    return (uint32_t*)UCS_PTR_BYTE_OFFSET(
            ctl, uct_remapring_ctl_tables_offset(max_peers) +
                         (index * uct_remapring_ctl_table_size(ring_slots)));
}


/**
 * A state as the state machine reads it: RESET is a CLOSED.
 */
static inline uct_remapring_conn_state_t
uct_remapring_conn_state_fold(uint32_t state)
{
    return (state == UCT_REMAPRING_CONN_RESET) ?
                   UCT_REMAPRING_CONN_CLOSED :
                   (uct_remapring_conn_state_t)state;
}


/**
 * State of a connection slot (acquire: what its owner wrote before is seen).
 */
static inline uct_remapring_conn_state_t
uct_remapring_conn_state(const uct_remapring_conn_t *conn)
{
    return uct_remapring_conn_state_fold(
            __atomic_load_n(&conn->state, __ATOMIC_ACQUIRE));
}


/**
 * The state word as it is (acquire), RESET not read as CLOSED: for the
 * receive fast path, where a RESET connection is polled as a live one until
 * it idles, and the slow path frees it.
 */
static UCS_F_ALWAYS_INLINE uint32_t
uct_remapring_conn_state_raw(const uct_remapring_conn_t *conn)
{
    return __atomic_load_n(&conn->state, __ATOMIC_ACQUIRE);
}


/**
 * Whether the sender closed the connection with RESET.
 */
static inline int uct_remapring_conn_was_reset(const uct_remapring_conn_t *conn)
{
    return __atomic_load_n(&conn->state, __ATOMIC_ACQUIRE) ==
           UCT_REMAPRING_CONN_RESET;
}


/**
 * Move a connection slot to @a state (release).
 */
static inline void uct_remapring_conn_set_state(uct_remapring_conn_t *conn,
                                                uct_remapring_conn_state_t state)
{
    __atomic_store_n(&conn->state, state, __ATOMIC_RELEASE);
}


/* ------------------------------------------------------------------------ */
/* Receiver                                                                 */
/* ------------------------------------------------------------------------ */

/**
 * Receiver control area parameters.
 */
typedef struct uct_remapring_ctl_params {
    unsigned max_peers;
    unsigned ring_slots;
    uint64_t iface_id;
    uint32_t block_size;
    int      pool_fd;
    uint32_t pool_blocks;
} uct_remapring_ctl_params_t;


/**
 * Make the control area: a memfd, mapped here, its header filled in, every
 * connection FREE, the header OPEN.
 */
ucs_status_t uct_remapring_ctl_create(const uct_remapring_ctl_params_t *params,
                                      uct_remapring_ctl_area_t *area);


/**
 * Mark the area CLOSED, so that every sender sees this interface gone, and
 * unmap and close it. Senders keep their own mappings until they let go.
 */
void uct_remapring_ctl_destroy(uct_remapring_ctl_area_t *area);


/**
 * Whether a doorbell may have rung since the last
 * uct_remapring_ctl_doorbells(): a relaxed load of the summary word, to skip
 * the call when it is 0.
 */
static UCS_F_ALWAYS_INLINE int
uct_remapring_ctl_rung(const uct_remapring_ctl_area_t *area)
{
    return __atomic_load_n(&area->ctl->summary, __ATOMIC_RELAXED) != 0;
}


/**
 * Take the doorbells rung since the last call and call @a cb with each
 * connection index that rang (every index below max_peers).
 */
void uct_remapring_ctl_doorbells(uct_remapring_ctl_area_t *area,
                                 void (*cb)(void *arg, unsigned index),
                                 void *arg);


/**
 * Arm connection @a index's doorbell and fence; then the caller looks at its
 * ring once more, and if the ring is still empty it may stop polling it.
 */
static inline void uct_remapring_ctl_arm(uct_remapring_ctl_area_t *area,
                                         unsigned index)
{
    __atomic_store_n(&area->conns[index].armed, 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}


/**
 * Receiver: move connection @a index to @a state (READY or FAILED) unless
 * its sender closed it meanwhile; a close is never overwritten, and its
 * doorbell follows. Returns the state the slot had.
 */
uct_remapring_conn_state_t
uct_remapring_ctl_set_unless_closed(uct_remapring_ctl_area_t *area,
                                    unsigned index,
                                    uct_remapring_conn_state_t state);


/**
 * Give connection @a index back: disarmed and FREE, for a new sender.
 */
void uct_remapring_ctl_release(uct_remapring_ctl_area_t *area, unsigned index);


/**
 * Take FREE connection @a index to make a ring to offer on it (OFFERING):
 * senders claim FREE slots at any time, so the slot is taken before its
 * ring words are written, never after.
 *
 * @return Whether it was taken; false if it is not FREE (a sender claimed
 *         it, and its doorbell follows).
 */
int uct_remapring_ctl_offer_begin(uct_remapring_ctl_area_t *area,
                                  unsigned index);


/**
 * End the offer of connection @a index taken by
 * uct_remapring_ctl_offer_begin(): OFFERED if its ring is made (@a made),
 * else FREE again.
 */
void uct_remapring_ctl_offer_end(uct_remapring_ctl_area_t *area,
                                 unsigned index, int made);


/* ------------------------------------------------------------------------ */
/* Sender                                                                   */
/* ------------------------------------------------------------------------ */

/**
 * Map the control area the address names and check that it is that
 * interface's; start watching the receiver process in @a watch.
 *
 * @return UCS_OK, or UCS_ERR_UNREACHABLE (logged).
 */
ucs_status_t uct_remapring_remote_attach(const uct_remapring_iface_addr_t *addr,
                                         uct_remapring_watch_t *watch,
                                         uct_remapring_proc_exit_cb_t exit_cb,
                                         uct_remapring_remote_t *remote);


/**
 * Claim a free connection slot for a sender of @a sender_id writing with
 * @a wire, and ring its doorbell: the receiver makes the ring on its next
 * progress.
 *
 * @return UCS_OK, or UCS_ERR_EXCEEDS_LIMIT (logged) if every slot is taken.
 */
ucs_status_t uct_remapring_remote_claim(uct_remapring_remote_t *remote,
                                        uint64_t sender_id,
                                        uct_remapring_wire_type_t wire);


/**
 * Where the connection stands, from the shared words alone (no system call):
 * UCS_OK ready, UCS_INPROGRESS claimed and not yet accepted, or
 * UCS_ERR_CONNECTION_RESET with @a reason_p set to what the receiver did.
 */
ucs_status_t uct_remapring_remote_state(const uct_remapring_remote_t *remote,
                                        const char **reason_p);


/**
 * Ring the receiver's doorbell if it armed our connection; after a publish.
 */
static inline void uct_remapring_remote_ring_bell(uct_remapring_remote_t *remote)
{
    uct_remapring_ctl_t *ctl   = remote->ctl;
    uct_remapring_conn_t *conn = remote->conn;
    unsigned index             = remote->index;

    /* no fence: see Doorbells at the top of this file */
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (!__atomic_load_n(&conn->armed, __ATOMIC_RELAXED) ||
        !__atomic_exchange_n(&conn->armed, 0, __ATOMIC_ACQ_REL)) {
        return;
    }

    __atomic_fetch_or(&ctl->active[index / 64], UCS_BIT(index % 64),
                      __ATOMIC_RELEASE);
    __atomic_fetch_or(&ctl->summary, UCS_BIT(index / 64), __ATOMIC_RELEASE);
}


/**
 * Close the connection (CLOSED, or RESET if @a reset, and a doorbell so the
 * receiver drains and frees it), unmap the control area, stop watching the
 * receiver.
 */
void uct_remapring_remote_detach(uct_remapring_remote_t *remote,
                                 uct_remapring_watch_t *watch, int reset);

#endif
