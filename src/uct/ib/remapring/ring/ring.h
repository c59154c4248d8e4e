/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef REMAPRING_RING_H_
#define REMAPRING_RING_H_

/*
 * The endless remapped ring: the records, the reader and the writer. The
 * protocol, with the argument for each ordering, is docs/ring-protocol.md.
 *
 * Invariants. Blocks are B bytes (a power of two, at least a page), nslots
 * slots (a power of two, at least 2), the window W = nslots * B. Ring
 * offsets are 64-bit and only grow; offset o is in slot (o / B) % nslots
 * at byte o % B. Records start on multiples of 64 (or of the wire's record
 * alignment), never cross a slot, and carry their own offset XOR the ring's
 * nonce as their first word (the stamp): a header whose stamp is not the
 * expected one is not a record of this lap and is never followed. For the
 * writer, tail <= limit; for the reader, credited <= head <= tail and
 * limit <= backed <= credited + grant <= credited + W, where the slots in
 * [credited, backed) have blocks and no other slot has one. A held record's
 * block is never written again until its last hold is released: a slot is
 * credited only once a block without holds backs it.
 *
 * Threads: the writer side (remapring_ring_writer_*) runs in one thread,
 * possibly another process. Every reader-side call (poll, consume, release,
 * create, destroy) on the rings of one pool is serialised by the caller.
 */

#include <uct/ib/remapring/ring/ring_pool.h>
#include <uct/ib/remapring/ring/ring_wire.h>

#include <ucs/datastruct/list.h>
#include <ucs/sys/compiler_def.h>
#include <ucs/type/status.h>

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* the base a transport of ours in another module calls (ring_api.h) */
REMAPRING_API_BEGIN

BEGIN_C_DECLS


#define REMAPRING_RING_ALIGN         64 /* record alignment */
#define REMAPRING_RING_PAYLOAD_ALIGN 16 /* payload alignment */
#define REMAPRING_RING_SLOTS_MAX     65536 /* slots of one ring */
#define REMAPRING_RING_BLOCK_MAX                                               \
    REMAPRING_POOL_BLOCK_MAX /* and
                                                 a record's length, a PAD's
                                                 and the info's block size
                                                 are 32-bit */
#define REMAPRING_RING_CTL_MAGIC 0x676e697270616d72ull /* "rmapring" */
#define REMAPRING_RING_MAX_IOV   16 /* payload pieces per record */


/**
 * Record types.
 */
typedef enum {
    REMAPRING_RING_REC_DATA = 0xd1, /* a message */
    REMAPRING_RING_REC_PAD  = 0xa5 /* skip to the end of the slot */
} remapring_ring_rec_type_t;


/**
 * How records become visible; see the top of this file.
 */
typedef enum {
    REMAPRING_RING_COMMIT_TAIL  = 1,
    REMAPRING_RING_COMMIT_STAMP = 2
} remapring_ring_commit_t;


/**
 * Record header, at the start of every record.
 */
typedef struct remapring_ring_hdr {
    uint64_t stamp; /* ring offset of this record ^ nonce; stored last */
    uint32_t length; /* DATA: payload bytes; PAD: bytes to the slot end */
    uint8_t type; /* remapring_ring_rec_type_t */
    uint8_t am_id; /* user field */
    uint8_t flags; /* user field */
    uint8_t reserved;
} UCS_S_PACKED remapring_ring_hdr_t;


/**
 * Ring geometry, which the writer and the reader must agree on.
 */
typedef struct remapring_ring_info {
    uint64_t magic;
    uint64_t view_addr; /* ring view in the reader's address space */
    uint64_t nonce; /* stamps are ring offsets ^ nonce */
    uint32_t block_size; /* B */
    uint32_t nslots;
    uint32_t reserve; /* descriptor records: bytes after the header */
    uint32_t inline_max; /* largest payload of an inline record */
    uint32_t align; /* descriptor payload alignment, power of two <= page */
    uint32_t align_offset; /* payload + align_offset is aligned */
    uint32_t commit; /* remapring_ring_commit_t */
    uint32_t rec_align; /* records start on multiples of it; 0: 64 */
} remapring_ring_info_t;


/**
 * Control area shared by writer and reader; each word in its own cache line.
 */
struct remapring_ring_ctl {
    remapring_ring_info_t info UCS_V_ALIGNED(64); /* set by the reader */
    uint64_t tail UCS_V_ALIGNED(64); /* writer -> reader, TAIL commit */
    uint64_t stalls; /* writer -> reader: times it ran out of credit */
    uint64_t yielded; /* writer -> reader: last reclaim request answered */
    uint64_t bound; /* writer -> reader: the limit it keeps to since */
    uint64_t limit UCS_V_ALIGNED(64); /* reader -> writer */
    uint64_t reclaim; /* reader -> writer: last request to give back credit */
} UCS_V_ALIGNED(64);


/**
 * Where payloads go in records; both sides compute it from ring info.
 */
typedef struct remapring_ring_layout {
    uint32_t reserve; /* descriptor records: bytes after the header */
    uint32_t inline_max; /* largest inline payload */
    uint32_t align; /* descriptor payload alignment (1: none) */
    uint32_t align_offset;
    uint32_t rec_align; /* record start alignment, 64 unless a wire needs
                           more (a power of two of at most a page) */
} remapring_ring_layout_t;


/**
 * Writer: make every record below @a tail visible (TAIL commit). Call after
 * their bytes are written.
 */
static inline void
remapring_ring_ctl_store_tail(remapring_ring_ctl_t *ctl, uint64_t tail)
{
    __atomic_store_n(&ctl->tail, tail, __ATOMIC_RELEASE);
}


/**
 * Reader: load the tail; the bytes below it may be read after this.
 */
static inline uint64_t remapring_ring_ctl_load_tail(remapring_ring_ctl_t *ctl)
{
    return __atomic_load_n(&ctl->tail, __ATOMIC_ACQUIRE);
}


/**
 * Reader: let the writer write below @a limit. Call after the slots below it
 * are mapped to blocks without holds.
 */
static inline void
remapring_ring_ctl_store_limit(remapring_ring_ctl_t *ctl, uint64_t limit)
{
    __atomic_store_n(&ctl->limit, limit, __ATOMIC_RELEASE);
}


/**
 * Writer: load the limit; bytes below it may be written after this.
 */
static inline uint64_t remapring_ring_ctl_load_limit(remapring_ring_ctl_t *ctl)
{
    return __atomic_load_n(&ctl->limit, __ATOMIC_ACQUIRE);
}


/**
 * Reserve a descriptor record leaves after its header, for @a headroom bytes
 * in front of the payload (the header may be overwritten). Either side.
 */
static inline uint32_t remapring_ring_reserve(uint32_t headroom)
{
    uint32_t room = (headroom + REMAPRING_RING_PAYLOAD_ALIGN - 1) &
                    ~(REMAPRING_RING_PAYLOAD_ALIGN - 1);

    return (room > sizeof(remapring_ring_hdr_t)) ?
                   (room - sizeof(remapring_ring_hdr_t)) :
                   0;
}


/**
 * Layout of a ring for @a headroom bytes in front of a descriptor payload,
 * inline payloads up to @a inline_max, and descriptor payload alignment.
 * Either side.
 */
static inline void
remapring_ring_layout_init(remapring_ring_layout_t *layout, uint32_t headroom,
                           uint32_t inline_max, uint32_t align,
                           uint32_t align_offset)
{
    layout->reserve      = remapring_ring_reserve(headroom);
    layout->inline_max   = inline_max;
    layout->align        = align;
    layout->align_offset = align_offset;
    layout->rec_align    = REMAPRING_RING_ALIGN;
}


/**
 * Whether a record of @a length payload bytes is inline. Either side.
 */
static inline int
remapring_ring_is_inline(const remapring_ring_layout_t *layout, uint64_t length)
{
    return length <= layout->inline_max;
}


/**
 * Ring offset of the payload of a record of @a length bytes that starts at
 * @a offset. Either side.
 */
static inline uint64_t
remapring_ring_payload_pos(const remapring_ring_layout_t *layout,
                           uint64_t offset, uint64_t length)
{
    uint64_t pos = offset + sizeof(remapring_ring_hdr_t);

    if (remapring_ring_is_inline(layout, length)) {
        return pos;
    }

    pos += layout->reserve;
    if (layout->align == 1) {
        return pos;
    }

    return ((pos + layout->align_offset + layout->align - 1) &
            ~(uint64_t)(layout->align - 1)) -
           layout->align_offset;
}


/**
 * Bytes a record with @a length payload bytes takes in the ring when it
 * starts at @a offset. Either side.
 */
static inline uint64_t
remapring_ring_record_size(const remapring_ring_layout_t *layout,
                           uint64_t offset, uint64_t length)
{
    return ((remapring_ring_payload_pos(layout, offset, length) - offset) +
            length + layout->rec_align - 1) &
           ~(uint64_t)(layout->rec_align - 1);
}


/**
 * Both of the above at once: the record's size, and in *@a payload_off_p
 * where its payload starts from the record's start. Either side.
 */
static UCS_F_ALWAYS_INLINE uint64_t remapring_ring_record_geometry(
        const remapring_ring_layout_t *layout, uint64_t offset, uint64_t length,
        uint64_t *payload_off_p)
{
    uint64_t payload_off;

    if (ucs_likely(remapring_ring_is_inline(layout, length))) {
        payload_off = sizeof(remapring_ring_hdr_t);
    } else {
        payload_off = remapring_ring_payload_pos(layout, offset, length) -
                      offset;
    }

    *payload_off_p = payload_off;
    return (payload_off + length + layout->rec_align - 1) &
           ~(uint64_t)(layout->rec_align - 1);
}


/**
 * Largest payload a ring with this block size and layout carries: what fits
 * in a slot after the longest prefix a descriptor record may have.
 */
static inline size_t
remapring_ring_max_payload(size_t block_size,
                           const remapring_ring_layout_t *layout)
{
    return block_size - sizeof(remapring_ring_hdr_t) - layout->reserve -
           (layout->align - 1);
}


/**
 * Whether a ring geometry is valid: B a power of two of at least a page,
 * nslots a power of two of at least 2, the alignment a power of two of at
 * most a page with the offset below it, inline payloads of at most a page,
 * and room for a payload of at least half a block. Either side.
 */
int remapring_ring_geometry_valid(size_t block_size, unsigned nslots,
                                  const remapring_ring_layout_t *layout);


/* ------------------------------------------------------------------------ */
/* Reader                                                                   */
/* ------------------------------------------------------------------------ */

/**
 * Ring creation parameters.
 */
typedef struct remapring_ring_params {
    unsigned nslots; /* power of two, >= 2 */
    unsigned headroom; /* bytes free in front of a descriptor payload */
    unsigned inline_max; /* largest inline payload */
    unsigned align; /* descriptor payload alignment (1: none) */
    unsigned align_offset; /* see remapring_ring_info_t */
    unsigned rec_align; /* record start alignment: 64, or up to a page */
    unsigned credit_batch; /* slots credited per limit update */
    unsigned grant_min; /* slots granted while the writer is quiet, the
                           grant doubles when it runs out, up to nslots;
                           0: always nslots. A writer through the view
                           (remap_view) always gets nslots */
    remapring_ring_commit_t commit; /* what the writer's wire can do */
    uint32_t *shared_slots; /* NULL, or nslots words the writer reads: a
                               mirror of the slot table (shm wire) */
    int remap_view; /* 1: a held block is replaced in the ring view too
                       (mmap); 0: only in the slot tables, for a writer
                       that writes through shared_slots and never through
                       the view */
    int reclaim; /* 1: the writer reads the control words and answers
                    requests to give back credit (see the top of this file):
                    an idle ring keeps only its quiet grant */
    const char *name; /* for the log, e.g. the writer's pid; or NULL */
    /* called after each store of a new limit, for a wire that must send
     * it (verbs); or NULL */
    void (*on_publish)(void *arg, uint64_t limit);
    void *publish_arg;
    /* called with publish_arg when a block leaves slot @a slot (the head
     * left it, or a fresh block replaced it one whose records are held),
     * before the pool takes it (its nholds tells which): a wire whose
     * writer reaches each block through a key of its own (verbs, pinned)
     * revokes it; or NULL */
    void (*on_detach)(void *arg, unsigned slot, uint32_t block);
} remapring_ring_params_t;


/**
 * Reader counters.
 */
typedef struct remapring_ring_stats {
    uint64_t nrecords; /* DATA records delivered */
    uint64_t npads; /* PAD records skipped */
    uint64_t nholds; /* records held */
    uint64_t nreuse; /* slots reused in place */
    uint64_t nremaps; /* slots remapped to a fresh block */
    uint64_t nwaits; /* times a slot had to wait for a free block */
    uint64_t ncredits; /* limit updates */
    uint64_t nreclaims; /* requests to give back credit */
    uint64_t nreclaimed; /* slots given back */
} remapring_ring_stats_t;


/**
 * A delivered record.
 */
typedef struct remapring_ring_rx {
    void *payload; /* CPU-view address */
    uint32_t length; /* payload bytes */
    uint8_t am_id; /* user fields of the header */
    uint8_t flags;
    uint8_t is_inline; /* inline record: no room in front of the payload */
    uint64_t offset; /* ring offset of the record */
    uint64_t next; /* ring offset after it */
} remapring_ring_rx_t;


/**
 * Reader side of one ring: the ring view, its slot table and the head.
 */
struct remapring_ring {
    remapring_pool_t *pool;
    remapring_ring_ctl_t *ctl;
    void *view; /* ring view, W bytes */
    uint32_t *slots; /* slot -> pool block, NONE outside the window */
    uint32_t *view_blocks; /* slot -> block mapped there in the view */
    uint32_t *shared_slots; /* mirror of slots for the writer, or NULL */
    int remap_view; /* see remapring_ring_params_t */
    remapring_ring_commit_t commit;
    size_t block_size;
    unsigned block_shift;
    unsigned nslots;
    size_t window_size;
    remapring_ring_layout_t layout;
    uint64_t nonce;
    uint64_t credit_batch; /* in bytes */
    uint64_t head; /* next record to read */
    char *head_block; /* CPU view of the block under the head's slot, while
                         head < head_end: a slot's block changes only once
                         the head has left it */
    uint64_t head_end; /* end of the slot head_block is for; 0: none */
    uint64_t tail; /* last tail loaded (TAIL commit) */
    uint64_t credited; /* slots below went back to the pool */
    uint64_t backed; /* slots in [credited, backed) have blocks */
    uint64_t limit; /* last limit stored; <= backed */
    uint64_t grant; /* backed - credited, at most, in bytes */
    uint64_t grant_min;
    uint64_t seen_stalls; /* of the writer, at the last grant change */
    int reclaim; /* may ask the writer to give back credit */
    int reclaim_open; /* a request is open */
    uint64_t reclaim_seq; /* number of the last request */
    uint64_t reclaim_to; /* the limit it asked for */
    ucs_status_t status; /* sticky error */
    char name[48]; /* for the log */
    void (*on_publish)(void *arg, uint64_t limit);
    void *publish_arg;
    void (*on_detach)(void *arg, unsigned slot, uint32_t block);
    int waiting; /* on pool->waiters */
    ucs_list_link_t list; /* in pool->waiters */
    remapring_ring_stats_t stats;
};


/**
 * Defaults: 16 slots, 256 bytes of headroom, no inline records, no
 * alignment, TAIL commit, credit batch of 4 slots.
 */
void remapring_ring_params_default(remapring_ring_params_t *params);


/**
 * Create the reader side of a ring: reserve the ring view, back every slot
 * with a pool block and initialise @a ctl (info, tail = 0, limit = W).
 *
 * @param [in]  pool    Pool to take blocks from (its B is the ring's B).
 * @param [in]  params  Geometry.
 * @param [in]  ctl     Control area, shared with the writer.
 * @param [out] ring_p  New ring.
 *
 * @return UCS_OK; UCS_ERR_NO_RESOURCE, not logged, if the pool has no room
 *         for the ring; another error, logged.
 */
ucs_status_t remapring_ring_create(remapring_pool_t *pool,
                                   const remapring_ring_params_t *params,
                                   remapring_ring_ctl_t *ctl,
                                   remapring_ring_t **ring_p);


/**
 * Destroy a ring. Blocks with held records stay in the pool, detached,
 * until released; the rest go back to the free list.
 */
void remapring_ring_destroy(remapring_ring_t *ring);


/* Slot of ring offset @a offset */
static UCS_F_ALWAYS_INLINE unsigned
remapring_ring_slot(const remapring_ring_t *ring, uint64_t offset)
{
    return (unsigned)(offset >> ring->block_shift) & (ring->nslots - 1);
}


/* CPU-view address of ring offset @a offset, in the block under its slot */
static UCS_F_ALWAYS_INLINE void *
remapring_ring_cpu_addr(const remapring_ring_t *ring, uint64_t offset)
{
    uint32_t block = ring->slots[remapring_ring_slot(ring, offset)];

    return (char *)remapring_pool_block_addr(ring->pool, block) +
           (offset & (ring->block_size - 1));
}


/**
 * remapring_ring_poll() whole: PADs, TAIL commit, descriptor records,
 * bad records, and the credit an empty ring publishes.
 */
ucs_status_t
remapring_ring_poll_slow(remapring_ring_t *ring, remapring_ring_rx_t *rx);


/* Whether a poll that finds the ring empty has credit to publish or a
 * reclaim to finish (remapring_ring_flush_credits) */
static UCS_F_ALWAYS_INLINE int
remapring_ring_credit_due(const remapring_ring_t *ring)
{
    return ring->reclaim_open || (ring->backed != ring->limit) ||
           ((ring->grant != ring->window_size) &&
            (__atomic_load_n(&ring->ctl->stalls, __ATOMIC_RELAXED) !=
             ring->seen_stalls));
}


/**
 * Next record, if any; reader side. PAD records are consumed on the way.
 * Call remapring_ring_consume() on the record before polling again.
 * Finding nothing, it publishes the credit not yet published.
 *
 * The common case inline: STAMP commit, a DATA record committed at the
 * head, or nothing there and no credit due. The stamp is load-acquired
 * before anything else of the record is read, and the length and type are
 * read once and checked as remapring_ring_poll_slow() checks them;
 * anything else goes there.
 *
 * @return UCS_OK with @a rx filled, UCS_ERR_NO_PROGRESS if nothing new, or
 *         UCS_ERR_IO_ERROR if the ring holds a bad record or tail (logged
 *         once; the ring then stays in error).
 */
static UCS_F_ALWAYS_INLINE ucs_status_t
remapring_ring_poll(remapring_ring_t *ring, remapring_ring_rx_t *rx)
{
    uint64_t head = ring->head;
    uint64_t size, pos, payload_off;
    remapring_ring_hdr_t hdr;
    const char *rec;

    if (ucs_unlikely((ring->commit != REMAPRING_RING_COMMIT_STAMP) ||
                     (head >= ring->limit) || (ring->status != UCS_OK))) {
        return remapring_ring_poll_slow(ring, rx);
    }

    if (ucs_unlikely(head >= ring->head_end)) {
        /* the head entered a slot (head < limit: it is backed) */
        ring->head_block = (char *)remapring_ring_cpu_addr(
                ring, head & ~(uint64_t)(ring->block_size - 1));
        ring->head_end = (head | (ring->block_size - 1)) + 1;
    }

    rec = ring->head_block + (head & (ring->block_size - 1));
    if (__atomic_load_n((const uint64_t *)rec, __ATOMIC_ACQUIRE) !=
        (head ^ ring->nonce)) {
        return ucs_unlikely(remapring_ring_credit_due(ring)) ?
                       remapring_ring_poll_slow(ring, rx) :
                       UCS_ERR_NO_PROGRESS;
    }

    /* committed: the rest of the header, once (the peer may still write
     * it); the stamp was checked above */
    memcpy((char *)&hdr + sizeof(hdr.stamp), rec + sizeof(hdr.stamp),
           sizeof(hdr) - sizeof(hdr.stamp));
    if (ucs_unlikely(hdr.type != REMAPRING_RING_REC_DATA)) {
        return remapring_ring_poll_slow(ring, rx); /* a PAD, or bad */
    }

    size = remapring_ring_record_geometry(&ring->layout, head, hdr.length,
                                          &payload_off);
    pos  = head & (ring->block_size - 1);
    if (ucs_unlikely((pos + size > ring->block_size) ||
                     (head + size > ring->limit))) {
        return remapring_ring_poll_slow(ring, rx); /* logs it */
    }

    rx->payload   = (void *)(rec + payload_off);
    rx->length    = hdr.length;
    rx->am_id     = hdr.am_id;
    rx->flags     = hdr.flags;
    rx->is_inline = remapring_ring_is_inline(&ring->layout, hdr.length);
    rx->offset    = head;
    rx->next      = head + size;
    return UCS_OK;
}


/**
 * Whether nothing new is visible at the head; reader side, no side effects.
 */
int remapring_ring_is_empty(remapring_ring_t *ring);


/* Keep a polled record's block (remapring_ring_consume) */
void remapring_ring_hold(remapring_ring_t *ring, const remapring_ring_rx_t *rx);


/* The head left a slot: credit it, or wait for its block */
void remapring_ring_credit(remapring_ring_t *ring);


/**
 * Move the head past a polled record; reader side. If @a hold, the record
 * stays valid (its block is kept) until remapring_ring_release().
 */
static UCS_F_ALWAYS_INLINE void
remapring_ring_consume(remapring_ring_t *ring, const remapring_ring_rx_t *rx,
                       int hold)
{
    if (hold) {
        remapring_ring_hold(ring, rx);
    }

    ring->head = rx->next;
    ring->stats.nrecords++;
    if (ucs_unlikely((ring->head & (ring->block_size - 1)) == 0)) {
        remapring_ring_credit(ring);
    }
}


/**
 * Release a held record; reader side, any order, also after its ring was
 * destroyed. @a addr is any address inside the record in the CPU view (the
 * payload pointer, or a descriptor in front of it). May credit slots of
 * rings that were waiting for a free block.
 *
 * @return UCS_OK, or UCS_ERR_INVALID_PARAM if @a addr is not in a block with
 *         held records (logged).
 */
ucs_status_t remapring_ring_release(remapring_pool_t *pool, const void *addr);


/**
 * Publish every credit not yet published, regardless of the batch; reader
 * side.
 */
void remapring_ring_flush_credits(remapring_ring_t *ring);


/**
 * The ring went quiet: grant only grant_min from now on, and ask the writer
 * to give back what is backed past it (a ring made with params.reclaim);
 * reader side. The slots come back when a poll or
 * remapring_ring_flush_credits() finds the ring empty after the writer
 * answered.
 */
void remapring_ring_idle(remapring_ring_t *ring);


/**
 * Copy the ring's geometry (also in ctl->info) into @a info.
 */
void remapring_ring_get_info(const remapring_ring_t *ring,
                             remapring_ring_info_t *info);


/**
 * Copy the reader counters into @a stats.
 */
void remapring_ring_get_stats(const remapring_ring_t *ring,
                              remapring_ring_stats_t *stats);


/* ------------------------------------------------------------------------ */
/* Writer                                                                   */
/* ------------------------------------------------------------------------ */

/**
 * Writer counters.
 */
typedef struct remapring_ring_writer_stats {
    uint64_t nrecords; /* records written */
    uint64_t npads; /* PAD records written */
    uint64_t nno_resource; /* sends refused for lack of credit */
    uint64_t ncredit_reads; /* limit loads */
    uint64_t nyields; /* requests to give back credit answered */
} remapring_ring_writer_stats_t;


/**
 * Writer side of one ring. Plain struct: embed it in an endpoint.
 */
typedef struct remapring_ring_writer {
    remapring_wire_t *wire;
    uint64_t tail; /* next record offset */
    uint64_t limit; /* the reader's limit, as last loaded, or the bound
                       the writer keeps to since it answered a reclaim */
    uint64_t yielded; /* last reclaim request answered */
    uint64_t nonce;
    size_t block_size;
    size_t window_size;
    remapring_ring_layout_t layout;
    remapring_ring_commit_t commit;
    uint32_t max_payload;
    int direct; /* the direct path: the wire stores into the reader's
                   blocks itself (direct.base), STAMP commit */
    remapring_ring_writer_stats_t stats;
} remapring_ring_writer_t;


/**
 * Initialise a writer for a ring with geometry @a info (read from the
 * reader's ctl, or exchanged in an address) writing through @a wire.
 *
 * @return UCS_ERR_INVALID_PARAM if @a info is not a valid ring geometry, or
 *         does not match the wire, or asks for a commit the wire cannot do.
 */
ucs_status_t remapring_ring_writer_init(remapring_ring_writer_t *writer,
                                        const remapring_ring_info_t *info,
                                        remapring_wire_t *wire);


/**
 * Write one record from @a iovcnt payload pieces and publish it; writer
 * side. Not logged on failure (data path).
 *
 * @return UCS_OK; UCS_ERR_NO_RESOURCE if the reader has not released enough
 *         of the ring (retry later); UCS_ERR_EXCEEDS_LIMIT if the payload is
 *         larger than remapring_ring_writer_max_payload() or has too
 *         many pieces; a wire error (the record was not published).
 */
ucs_status_t remapring_ring_writer_send(remapring_ring_writer_t *writer,
                                        uint8_t am_id, uint8_t flags,
                                        const struct iovec *iov, size_t iovcnt);


/* A header of @a type at ring offset @a offset; writer side */
static UCS_F_ALWAYS_INLINE void
remapring_ring_writer_hdr(const remapring_ring_writer_t *writer,
                          remapring_ring_hdr_t *hdr, uint64_t offset,
                          uint8_t type, uint32_t length, uint8_t am_id,
                          uint8_t flags)
{
    hdr->stamp    = offset ^ writer->nonce;
    hdr->length   = length;
    hdr->type     = type;
    hdr->am_id    = am_id;
    hdr->flags    = flags;
    hdr->reserved = 0;
}


/**
 * A record on its way the direct path (uct_remapring_ring_writer_direct_*).
 */
typedef struct remapring_ring_direct {
    char *rec; /* the record, in the reader's block */
    char *payload; /* its payload: the caller stores it there */
    uint64_t size; /* bytes it takes in the ring */
} remapring_ring_direct_t;


/**
 * The direct path, for a record of @a length payload bytes: where it goes
 * in the reader's block, if the writer may store it there itself. The
 * caller stores the payload at @a d->payload, then commits the record with
 * remapring_ring_writer_direct_commit(); nothing else of the ring may
 * happen in between. The direct way is straight into the reader's block
 * (the wire's direct stores, STAMP commit): the same bytes at the same
 * places in the same order as remapring_ring_writer_send() (see Commit
 * at the top of this file), without a call; only when credit is in hand and
 * the record fits in the rest of its slot; writer side.
 *
 * @return 1 with @a d filled; 0 if nothing may be written there: send it
 *         with remapring_ring_writer_send(), which reloads the limit,
 *         pads to the next slot, or asks the wire.
 */
static UCS_F_ALWAYS_INLINE int
remapring_ring_writer_direct_begin(const remapring_ring_writer_t *writer,
                                   size_t length, remapring_ring_direct_t *d)
{
    const remapring_wire_direct_t *direct     = &writer->wire->direct;
    uint64_t offset                           = writer->tail;
    uint64_t in_block = offset & (writer->block_size - 1);
    uint64_t payload_off;
    uint32_t block;

    if (ucs_unlikely(!writer->direct || (length > writer->max_payload))) {
        return 0;
    }

    d->size = remapring_ring_record_geometry(&writer->layout, offset, length,
                                             &payload_off);
    if (ucs_unlikely((offset + d->size > writer->limit) ||
                     (in_block + d->size > writer->block_size))) {
        return 0;
    }

    /* the limit was load-acquired after the slot's entry was stored */
    block = __atomic_load_n(
            &direct->slot_table[(offset & (writer->window_size - 1)) >>
                                direct->block_shift],
            __ATOMIC_RELAXED);
    if (ucs_unlikely(block >= direct->file_blocks)) {
        return 0; /* the pool grew, or a bad entry: the wire looks */
    }

    d->rec = direct->base + ((size_t)block << direct->block_shift) + in_block;
    d->payload = d->rec + payload_off;
    return 1;
}


/**
 * Commit the record @a d (from remapring_ring_writer_direct_begin()
 * with the same @a length), whose payload is stored: the rest of its
 * header, then its stamp with release; writer side.
 */
static UCS_F_ALWAYS_INLINE void
remapring_ring_writer_direct_commit(remapring_ring_writer_t *writer,
                                    const remapring_ring_direct_t *d,
                                    uint8_t am_id, size_t length)
{
    remapring_ring_hdr_t hdr;

    remapring_ring_writer_hdr(writer, &hdr, writer->tail,
                              REMAPRING_RING_REC_DATA, length, am_id, 0);
    memcpy(d->rec + sizeof(hdr.stamp), (const char *)&hdr + sizeof(hdr.stamp),
           sizeof(hdr) - sizeof(hdr.stamp));
    __atomic_store_n((uint64_t *)d->rec, hdr.stamp, __ATOMIC_RELEASE);

    writer->tail += d->size;
    writer->stats.nrecords++;
}


/**
 * Answer the reader's request to give back credit, if there is a new one
 * (see the top of this file); writer side: from time to time while there is
 * nothing to send, and before the limit is reloaded. From then on the
 * writer keeps below the limit the reader lowered, or below its tail if it
 * already wrote past that.
 *
 * @return 1 if it answered: the reader should be woken to take the slots
 *         back; 0 if there was no new request, or the wire has none.
 */
int remapring_ring_writer_yield(remapring_ring_writer_t *writer);


/**
 * Whether a record with @a length payload bytes would fit now, without
 * reloading the limit; writer side.
 */
static inline int
remapring_ring_writer_has_credit(const remapring_ring_writer_t *writer,
                                 size_t length)
{
    uint64_t size = remapring_ring_record_size(&writer->layout, writer->tail,
                                               length);
    uint64_t room = writer->block_size -
                    (writer->tail & (writer->block_size - 1));

    if (size > room) {
        /* a PAD to the slot's end, then the record at the next slot */
        size = room + remapring_ring_record_size(&writer->layout,
                                                 writer->tail + room, length);
    }

    return writer->tail + size <= writer->limit;
}


/**
 * Whether a record with @a length payload bytes fits, reloading the limit if
 * the credit known so far is not enough; writer side.
 */
static inline int
remapring_ring_writer_can_send(remapring_ring_writer_t *writer, size_t length)
{
    if (remapring_ring_writer_has_credit(writer, length)) {
        return 1;
    }

    /* a reclaim is answered before the limit is reloaded: the reader may
     * have lowered it under the tail */
    if (!remapring_ring_writer_yield(writer)) {
        writer->stats.ncredit_reads++;
        writer->limit = remapring_wire_limit(writer->wire);
    }
    if (remapring_ring_writer_has_credit(writer, length)) {
        return 1;
    }

    /* asks for a larger grant */
    remapring_wire_stalled(writer->wire);
    return 0;
}


/**
 * Largest payload of one record.
 */
static inline size_t
remapring_ring_writer_max_payload(const remapring_ring_writer_t *writer)
{
    return writer->max_payload;
}

END_C_DECLS

REMAPRING_API_END

#endif
