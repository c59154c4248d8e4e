/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef UCT_REMAPRING_RING_H_
#define UCT_REMAPRING_RING_H_

/*
 * The endless remapped ring.
 *
 * Geometry: blocks of B bytes (power of two, >= page), nslots slots (power of
 * two, >= 2), window W = nslots * B. Ring offsets are 64-bit and only grow;
 * offset o lands in slot (o / B) % nslots at byte o % B of the slot. The
 * ring view is W bytes of virtual space, each slot mapped to some pool block
 * (the slot table says which).
 *
 * Records start on 64-byte boundaries (or on the larger record alignment a
 * wire asked for, rec_align) and never cross a slot. Each begins
 * with a header (uct_remapring_ring_hdr_t, 16 bytes) whose first word, the
 * stamp, is the record's own ring offset XOR the ring's nonce; then
 * - an inline record (payload of at most inline_max bytes, for the reader to
 *   copy what it keeps): the payload at once, so that header and a small
 *   payload share one cache line;
 * - a descriptor record (the reader may keep it in place): reserve bytes the
 *   writer never writes, then the payload. The reserve and the header before
 *   it are the receiver's, once the header is read: its descriptor and the
 *   upper layer's headroom go there. If the receiver asked for an alignment,
 *   the payload moves on to the first position p with
 *   (p + align_offset) % align == 0 (align is a power of two of at most a
 *   page, and blocks are page aligned in the CPU view, so the ring offset
 *   decides the CPU address's alignment).
 * A record ends at the next 64-byte boundary after its payload; both sides
 * compute where the payload goes from the same layout
 * (uct_remapring_ring_payload_pos). A record that would cross a slot is
 * preceded by a PAD record covering the rest of the slot. A header whose
 * stamp is not the one expected where it was read is not a record of this
 * lap, and is never followed.
 *
 * Commit: how a record becomes visible, chosen by the reader for the
 * writer's wire.
 *   STAMP  the writer stores the payload and the rest of the header, then the
 *          stamp with release (a store to shared memory: the shm wire); the
 *          reader load-acquires the stamp at its head, and reads nothing of
 *          a record until the stamp is the expected one. A stamp of an
 *          earlier lap cannot match (its offset differs), nor bytes the upper
 *          layer wrote over a consumed header (the nonce is random).
 *          A writer whose wire stores into the reader's blocks itself
 *          (shm) writes a record that fits in its slot the direct way
 *          (uct_remapring_ring_writer_direct_begin and _commit): the same
 *          stores in the same order, the stamp last with release, without
 *          a call.
 *   TAIL   the bytes of one write may land in any order (process_vm_writev,
 *          RDMA WRITE): the writer stores the tail word with release after
 *          its write returned; the reader load-acquires it, reads nothing at
 *          or past it, and checks the stamps.
 *
 * Control words (uct_remapring_ring_ctl_t, shared, one cache line each):
 *   tail   written by the writer only (TAIL commit): every record below it
 *          is in the reader's memory.
 *   stalls written by the writer only: how often it ran out of credit.
 *   limit  written by the reader only, store-release, after every slot below
 *          it is backed by a block the writer may overwrite; the writer
 *          load-acquires it and writes nothing at or past it.
 * So, for the writer: tail <= limit; for the reader: credited <= head <=
 * tail, and limit <= backed <= credited + grant <= credited + W, where the
 * slots in [credited, backed) have blocks (multiples of B) and no other
 * slot has one.
 *
 * Grant: a writer through the shared slot table (shm) is granted grant_min
 * slots while quiet, so that an idle sender holds few blocks; each time it
 * ran out of credit (stalls changed) the grant doubles, up to W, while the
 * pool has room, and it falls back to grant_min when the ring sleeps
 * (uct_remapring_ring_idle). A writer through the ring view (cma) is always
 * granted W: moving a slot to another block costs it an mmap.
 *
 * Reclaim: when a ring that may reclaim (params.reclaim: the writer reads
 * the control words in shared memory) sleeps with more backed than the
 * quiet grant, the reader asks for the rest back. The writer alone knows
 * whether it is writing below its limit, so it answers:
 *   reader  stores limit = r (r = credited + the quiet grant, at least two
 *           slots, so that any record fits past the head), then reclaim =
 *           n (a new request number), with release; ring->limit stays the
 *           old limit L: the writer may still write below it.
 *   writer  (uct_remapring_ring_writer_yield, when idle and before it
 *           reloads the limit) load-acquires reclaim; if it is a new n, it
 *           loads the limit and keeps from then on to bound = max(that
 *           limit, its tail), stores bound, then yielded = n with release,
 *           and wakes the reader.
 *   reader  when it finds the ring empty and yielded == n (load-acquire),
 *           checks r <= bound <= L, head <= bound, and (TAIL) tail <=
 *           bound, else the ring fails; takes back the slots at and past
 *           bound rounded up to a slot, but keeps the quiet grant past the
 *           credited slot (no record of this lap can be in those taken:
 *           the writer keeps below bound, and they were never read); then
 *           publishes what stays backed as the new limit, and lets rings
 *           waiting for a block take the freed ones.
 * A limit the reader publishes while a request is open cancels it (a later
 * answer to it is ignored), and it is the only store that raises the limit
 * again, so a writer never reads a limit above its bound that the reader
 * has not backed since. A writer that never answers keeps its slots.
 *
 * Holds: a delivered record may be held. When head leaves a slot, its block
 * is reused in place if no record in it is held (no system call), otherwise
 * it is detached and a free block is mmap(MAP_FIXED)ed under the slot; the
 * detached block returns to the pool when its last hold is released. A slot
 * is credited only once it is backed by a block without holds, in slot
 * order: held data is never overwritten, and with no free block the writer
 * waits (back-pressure) until a hold is released. A writer that finds blocks
 * through a shared copy of the slot table (the shm wire) needs no mmap at
 * all: the table entry changes before the slot is credited, and the ring
 * view is left as it was (remap_view = 0).
 *
 * Threads: the writer side (uct_remapring_ring_writer_*) runs in one thread,
 * possibly another process. Every reader-side call (poll, consume, release,
 * create, destroy) on the rings of one pool is serialised by the caller.
 */

#include <uct/ib/remapring/ring_pool.h>
#include <uct/ib/remapring/ring_wire.h>

#include <ucs/datastruct/list.h>
#include <ucs/sys/compiler_def.h>
#include <ucs/type/status.h>

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

BEGIN_C_DECLS


#define UCT_REMAPRING_RING_ALIGN         64 /* record alignment */
#define UCT_REMAPRING_RING_PAYLOAD_ALIGN 16 /* payload alignment */
#define UCT_REMAPRING_RING_SLOTS_MAX     65536 /* slots of one ring */
#define UCT_REMAPRING_RING_BLOCK_MAX     UCT_REMAPRING_POOL_BLOCK_MAX /* and
                                                 a record's length, a PAD's
                                                 and the info's block size
                                                 are 32-bit */
#define UCT_REMAPRING_RING_CTL_MAGIC     0x676e697270616d72ull /* "rmapring" */
#define UCT_REMAPRING_RING_MAX_IOV       16 /* payload pieces per record */


/**
 * Record types.
 */
typedef enum {
    UCT_REMAPRING_RING_REC_DATA = 0xd1, /* a message */
    UCT_REMAPRING_RING_REC_PAD  = 0xa5 /* skip to the end of the slot */
} uct_remapring_ring_rec_type_t;


/**
 * How records become visible; see the top of this file.
 */
typedef enum {
    UCT_REMAPRING_RING_COMMIT_TAIL  = 1,
    UCT_REMAPRING_RING_COMMIT_STAMP = 2
} uct_remapring_ring_commit_t;


/**
 * Record header, at the start of every record.
 */
typedef struct uct_remapring_ring_hdr {
    uint64_t stamp; /* ring offset of this record ^ nonce; stored last */
    uint32_t length; /* DATA: payload bytes; PAD: bytes to the slot end */
    uint8_t type; /* uct_remapring_ring_rec_type_t */
    uint8_t am_id; /* user field */
    uint8_t flags; /* user field */
    uint8_t reserved;
} UCS_S_PACKED uct_remapring_ring_hdr_t;


/**
 * Ring geometry, which the writer and the reader must agree on.
 */
typedef struct uct_remapring_ring_info {
    uint64_t magic;
    uint64_t view_addr; /* ring view in the reader's address space */
    uint64_t nonce; /* stamps are ring offsets ^ nonce */
    uint32_t block_size; /* B */
    uint32_t nslots;
    uint32_t reserve; /* descriptor records: bytes after the header */
    uint32_t inline_max; /* largest payload of an inline record */
    uint32_t align; /* descriptor payload alignment, power of two <= page */
    uint32_t align_offset; /* payload + align_offset is aligned */
    uint32_t commit; /* uct_remapring_ring_commit_t */
    uint32_t rec_align; /* records start on multiples of it; 0: 64 */
} uct_remapring_ring_info_t;


/**
 * Control area shared by writer and reader; each word in its own cache line.
 */
struct uct_remapring_ring_ctl {
    uct_remapring_ring_info_t info UCS_V_ALIGNED(64); /* set by the reader */
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
typedef struct uct_remapring_ring_layout {
    uint32_t reserve; /* descriptor records: bytes after the header */
    uint32_t inline_max; /* largest inline payload */
    uint32_t align; /* descriptor payload alignment (1: none) */
    uint32_t align_offset;
    uint32_t rec_align; /* record start alignment, 64 unless a wire needs
                           more (a power of two of at most a page) */
} uct_remapring_ring_layout_t;


/**
 * Writer: make every record below @a tail visible (TAIL commit). Call after
 * their bytes are written.
 */
static inline void
uct_remapring_ring_ctl_store_tail(uct_remapring_ring_ctl_t *ctl, uint64_t tail)
{
    __atomic_store_n(&ctl->tail, tail, __ATOMIC_RELEASE);
}


/**
 * Reader: load the tail; the bytes below it may be read after this.
 */
static inline uint64_t
uct_remapring_ring_ctl_load_tail(uct_remapring_ring_ctl_t *ctl)
{
    return __atomic_load_n(&ctl->tail, __ATOMIC_ACQUIRE);
}


/**
 * Reader: let the writer write below @a limit. Call after the slots below it
 * are mapped to blocks without holds.
 */
static inline void
uct_remapring_ring_ctl_store_limit(uct_remapring_ring_ctl_t *ctl,
                                   uint64_t limit)
{
    __atomic_store_n(&ctl->limit, limit, __ATOMIC_RELEASE);
}


/**
 * Writer: load the limit; bytes below it may be written after this.
 */
static inline uint64_t
uct_remapring_ring_ctl_load_limit(uct_remapring_ring_ctl_t *ctl)
{
    return __atomic_load_n(&ctl->limit, __ATOMIC_ACQUIRE);
}


/**
 * Reserve a descriptor record leaves after its header, for @a headroom bytes
 * in front of the payload (the header may be overwritten). Either side.
 */
static inline uint32_t uct_remapring_ring_reserve(uint32_t headroom)
{
    uint32_t room = (headroom + UCT_REMAPRING_RING_PAYLOAD_ALIGN - 1) &
                    ~(UCT_REMAPRING_RING_PAYLOAD_ALIGN - 1);

    return (room > sizeof(uct_remapring_ring_hdr_t)) ?
           (room - sizeof(uct_remapring_ring_hdr_t)) : 0;
}


/**
 * Layout of a ring for @a headroom bytes in front of a descriptor payload,
 * inline payloads up to @a inline_max, and descriptor payload alignment.
 * Either side.
 */
static inline void
uct_remapring_ring_layout_init(uct_remapring_ring_layout_t *layout,
                               uint32_t headroom, uint32_t inline_max,
                               uint32_t align, uint32_t align_offset)
{
    layout->reserve      = uct_remapring_ring_reserve(headroom);
    layout->inline_max   = inline_max;
    layout->align        = align;
    layout->align_offset = align_offset;
    layout->rec_align    = UCT_REMAPRING_RING_ALIGN;
}


/**
 * Whether a record of @a length payload bytes is inline. Either side.
 */
static inline int
uct_remapring_ring_is_inline(const uct_remapring_ring_layout_t *layout,
                             uint64_t length)
{
    return length <= layout->inline_max;
}


/**
 * Ring offset of the payload of a record of @a length bytes that starts at
 * @a offset. Either side.
 */
static inline uint64_t
uct_remapring_ring_payload_pos(const uct_remapring_ring_layout_t *layout,
                               uint64_t offset, uint64_t length)
{
    uint64_t pos = offset + sizeof(uct_remapring_ring_hdr_t);

    if (uct_remapring_ring_is_inline(layout, length)) {
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
uct_remapring_ring_record_size(const uct_remapring_ring_layout_t *layout,
                               uint64_t offset, uint64_t length)
{
    return ((uct_remapring_ring_payload_pos(layout, offset, length) - offset) +
            length + layout->rec_align - 1) &
           ~(uint64_t)(layout->rec_align - 1);
}


/**
 * Both of the above at once: the record's size, and in *@a payload_off_p
 * where its payload starts from the record's start. Either side.
 */
static UCS_F_ALWAYS_INLINE uint64_t uct_remapring_ring_record_geometry(
        const uct_remapring_ring_layout_t *layout, uint64_t offset,
        uint64_t length, uint64_t *payload_off_p)
{
    uint64_t payload_off;

    if (ucs_likely(uct_remapring_ring_is_inline(layout, length))) {
        payload_off = sizeof(uct_remapring_ring_hdr_t);
    } else {
        payload_off = uct_remapring_ring_payload_pos(layout, offset, length) -
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
uct_remapring_ring_max_payload(size_t block_size,
                               const uct_remapring_ring_layout_t *layout)
{
    return block_size - sizeof(uct_remapring_ring_hdr_t) - layout->reserve -
           (layout->align - 1);
}


/**
 * Whether a ring geometry is valid: B a power of two of at least a page,
 * nslots a power of two of at least 2, the alignment a power of two of at
 * most a page with the offset below it, inline payloads of at most a page,
 * and room for a payload of at least half a block. Either side.
 */
int uct_remapring_ring_geometry_valid(size_t block_size, unsigned nslots,
                                      const uct_remapring_ring_layout_t *layout);


/* ------------------------------------------------------------------------ */
/* Reader                                                                   */
/* ------------------------------------------------------------------------ */

/**
 * Ring creation parameters.
 */
typedef struct uct_remapring_ring_params {
    unsigned nslots; /* power of two, >= 2 */
    unsigned headroom; /* bytes free in front of a descriptor payload */
    unsigned inline_max; /* largest inline payload */
    unsigned align; /* descriptor payload alignment (1: none) */
    unsigned align_offset; /* see uct_remapring_ring_info_t */
    unsigned rec_align; /* record start alignment: 64, or up to a page */
    unsigned credit_batch; /* slots credited per limit update */
    unsigned grant_min; /* slots granted while the writer is quiet, the
                           grant doubles when it runs out, up to nslots;
                           0: always nslots. A writer through the view
                           (remap_view) always gets nslots */
    uct_remapring_ring_commit_t commit; /* what the writer's wire can do */
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
} uct_remapring_ring_params_t;


/**
 * Reader counters.
 */
typedef struct uct_remapring_ring_stats {
    uint64_t nrecords; /* DATA records delivered */
    uint64_t npads; /* PAD records skipped */
    uint64_t nholds; /* records held */
    uint64_t nreuse; /* slots reused in place */
    uint64_t nremaps; /* slots remapped to a fresh block */
    uint64_t nwaits; /* times a slot had to wait for a free block */
    uint64_t ncredits; /* limit updates */
    uint64_t nreclaims; /* requests to give back credit */
    uint64_t nreclaimed; /* slots given back */
} uct_remapring_ring_stats_t;


/**
 * A delivered record.
 */
typedef struct uct_remapring_ring_rx {
    void *payload; /* CPU-view address */
    uint32_t length; /* payload bytes */
    uint8_t am_id; /* user fields of the header */
    uint8_t flags;
    uint8_t is_inline; /* inline record: no room in front of the payload */
    uint64_t offset; /* ring offset of the record */
    uint64_t next; /* ring offset after it */
} uct_remapring_ring_rx_t;


/**
 * Reader side of one ring: the ring view, its slot table and the head.
 */
struct uct_remapring_ring {
    uct_remapring_pool_t *pool;
    uct_remapring_ring_ctl_t *ctl;
    void *view; /* ring view, W bytes */
    uint32_t *slots; /* slot -> pool block, NONE outside the window */
    uint32_t *view_blocks; /* slot -> block mapped there in the view */
    uint32_t *shared_slots; /* mirror of slots for the writer, or NULL */
    int remap_view; /* see uct_remapring_ring_params_t */
    uct_remapring_ring_commit_t commit;
    size_t block_size;
    unsigned block_shift;
    unsigned nslots;
    size_t window_size;
    uct_remapring_ring_layout_t layout;
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
    int waiting; /* on pool->waiters */
    ucs_list_link_t list; /* in pool->waiters */
    uct_remapring_ring_stats_t stats;
};


/**
 * Defaults: 16 slots, 256 bytes of headroom, no inline records, no
 * alignment, TAIL commit, credit batch of 4 slots.
 */
void uct_remapring_ring_params_default(uct_remapring_ring_params_t *params);


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
ucs_status_t
uct_remapring_ring_create(uct_remapring_pool_t *pool,
                          const uct_remapring_ring_params_t *params,
                          uct_remapring_ring_ctl_t *ctl,
                          uct_remapring_ring_t **ring_p);


/**
 * Destroy a ring. Blocks with held records stay in the pool, detached,
 * until released; the rest go back to the free list.
 */
void uct_remapring_ring_destroy(uct_remapring_ring_t *ring);


/* Slot of ring offset @a offset */
static UCS_F_ALWAYS_INLINE unsigned
uct_remapring_ring_slot(const uct_remapring_ring_t *ring, uint64_t offset)
{
    return (unsigned)(offset >> ring->block_shift) & (ring->nslots - 1);
}


/* CPU-view address of ring offset @a offset, in the block under its slot */
static UCS_F_ALWAYS_INLINE void *
uct_remapring_ring_cpu_addr(const uct_remapring_ring_t *ring, uint64_t offset)
{
    uint32_t block = ring->slots[uct_remapring_ring_slot(ring, offset)];

    return (char *)uct_remapring_pool_block_addr(ring->pool, block) +
           (offset & (ring->block_size - 1));
}


/**
 * uct_remapring_ring_poll() whole: PADs, TAIL commit, descriptor records,
 * bad records, and the credit an empty ring publishes.
 */
ucs_status_t uct_remapring_ring_poll_slow(uct_remapring_ring_t *ring,
                                          uct_remapring_ring_rx_t *rx);


/* Whether a poll that finds the ring empty has credit to publish or a
 * reclaim to finish (uct_remapring_ring_flush_credits) */
static UCS_F_ALWAYS_INLINE int
uct_remapring_ring_credit_due(const uct_remapring_ring_t *ring)
{
    return ring->reclaim_open || (ring->backed != ring->limit) ||
           ((ring->grant != ring->window_size) &&
            (__atomic_load_n(&ring->ctl->stalls, __ATOMIC_RELAXED) !=
             ring->seen_stalls));
}


/**
 * Next record, if any; reader side. PAD records are consumed on the way.
 * Call uct_remapring_ring_consume() on the record before polling again.
 * Finding nothing, it publishes the credit not yet published.
 *
 * The common case inline: STAMP commit, a DATA record committed at the
 * head, or nothing there and no credit due. The stamp is load-acquired
 * before anything else of the record is read, and the length and type are
 * read once and checked as uct_remapring_ring_poll_slow() checks them;
 * anything else goes there.
 *
 * @return UCS_OK with @a rx filled, UCS_ERR_NO_PROGRESS if nothing new, or
 *         UCS_ERR_IO_ERROR if the ring holds a bad record or tail (logged
 *         once; the ring then stays in error).
 */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_remapring_ring_poll(uct_remapring_ring_t *ring, uct_remapring_ring_rx_t *rx)
{
    uint64_t head = ring->head;
    uint64_t size, pos, payload_off;
    uct_remapring_ring_hdr_t hdr;
    const char *rec;

    if (ucs_unlikely((ring->commit != UCT_REMAPRING_RING_COMMIT_STAMP) ||
                     (head >= ring->limit) || (ring->status != UCS_OK))) {
        return uct_remapring_ring_poll_slow(ring, rx);
    }

    if (ucs_unlikely(head >= ring->head_end)) {
        /* the head entered a slot (head < limit: it is backed) */
        ring->head_block = (char *)uct_remapring_ring_cpu_addr(
                ring, head & ~(uint64_t)(ring->block_size - 1));
        ring->head_end = (head | (ring->block_size - 1)) + 1;
    }

    rec = ring->head_block + (head & (ring->block_size - 1));
    if (__atomic_load_n((const uint64_t *)rec, __ATOMIC_ACQUIRE) !=
        (head ^ ring->nonce)) {
        return ucs_unlikely(uct_remapring_ring_credit_due(ring)) ?
                       uct_remapring_ring_poll_slow(ring, rx) :
                       UCS_ERR_NO_PROGRESS;
    }

    /* committed: the rest of the header, once (the peer may still write
     * it); the stamp was checked above */
    memcpy((char *)&hdr + sizeof(hdr.stamp), rec + sizeof(hdr.stamp),
           sizeof(hdr) - sizeof(hdr.stamp));
    if (ucs_unlikely(hdr.type != UCT_REMAPRING_RING_REC_DATA)) {
        return uct_remapring_ring_poll_slow(ring, rx); /* a PAD, or bad */
    }

    size = uct_remapring_ring_record_geometry(&ring->layout, head, hdr.length,
                                              &payload_off);
    pos  = head & (ring->block_size - 1);
    if (ucs_unlikely((pos + size > ring->block_size) ||
                     (head + size > ring->limit))) {
        return uct_remapring_ring_poll_slow(ring, rx); /* logs it */
    }

    rx->payload   = (void *)(rec + payload_off);
    rx->length    = hdr.length;
    rx->am_id     = hdr.am_id;
    rx->flags     = hdr.flags;
    rx->is_inline = uct_remapring_ring_is_inline(&ring->layout, hdr.length);
    rx->offset    = head;
    rx->next      = head + size;
    return UCS_OK;
}


/**
 * Whether nothing new is visible at the head; reader side, no side effects.
 */
int uct_remapring_ring_is_empty(uct_remapring_ring_t *ring);


/* Keep a polled record's block (uct_remapring_ring_consume) */
void uct_remapring_ring_hold(uct_remapring_ring_t *ring,
                             const uct_remapring_ring_rx_t *rx);


/* The head left a slot: credit it, or wait for its block */
void uct_remapring_ring_credit(uct_remapring_ring_t *ring);


/**
 * Move the head past a polled record; reader side. If @a hold, the record
 * stays valid (its block is kept) until uct_remapring_ring_release().
 */
static UCS_F_ALWAYS_INLINE void
uct_remapring_ring_consume(uct_remapring_ring_t *ring,
                           const uct_remapring_ring_rx_t *rx, int hold)
{
    if (hold) {
        uct_remapring_ring_hold(ring, rx);
    }

    ring->head = rx->next;
    ring->stats.nrecords++;
    if (ucs_unlikely((ring->head & (ring->block_size - 1)) == 0)) {
        uct_remapring_ring_credit(ring);
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
ucs_status_t
uct_remapring_ring_release(uct_remapring_pool_t *pool, const void *addr);


/**
 * Publish every credit not yet published, regardless of the batch; reader
 * side.
 */
void uct_remapring_ring_flush_credits(uct_remapring_ring_t *ring);


/**
 * The ring went quiet: grant only grant_min from now on, and ask the writer
 * to give back what is backed past it (a ring made with params.reclaim);
 * reader side. The slots come back when a poll or
 * uct_remapring_ring_flush_credits() finds the ring empty after the writer
 * answered.
 */
void uct_remapring_ring_idle(uct_remapring_ring_t *ring);


/**
 * Copy the ring's geometry (also in ctl->info) into @a info.
 */
void uct_remapring_ring_get_info(const uct_remapring_ring_t *ring,
                                 uct_remapring_ring_info_t *info);


/**
 * Copy the reader counters into @a stats.
 */
void uct_remapring_ring_get_stats(const uct_remapring_ring_t *ring,
                                  uct_remapring_ring_stats_t *stats);


/* ------------------------------------------------------------------------ */
/* Writer                                                                   */
/* ------------------------------------------------------------------------ */

/**
 * Writer counters.
 */
typedef struct uct_remapring_ring_writer_stats {
    uint64_t nrecords; /* records written */
    uint64_t npads; /* PAD records written */
    uint64_t nno_resource; /* sends refused for lack of credit */
    uint64_t ncredit_reads; /* limit loads */
    uint64_t nyields; /* requests to give back credit answered */
} uct_remapring_ring_writer_stats_t;


/**
 * Writer side of one ring. Plain struct: embed it in an endpoint.
 */
typedef struct uct_remapring_ring_writer {
    uct_remapring_wire_t *wire;
    uint64_t tail; /* next record offset */
    uint64_t limit; /* the reader's limit, as last loaded, or the bound
                       the writer keeps to since it answered a reclaim */
    uint64_t yielded; /* last reclaim request answered */
    uint64_t nonce;
    size_t block_size;
    size_t window_size;
    uct_remapring_ring_layout_t layout;
    uct_remapring_ring_commit_t commit;
    uint32_t max_payload;
    int direct; /* the direct path: the wire stores into the reader's
                   blocks itself (direct.base), STAMP commit */
    uct_remapring_ring_writer_stats_t stats;
} uct_remapring_ring_writer_t;


/**
 * Initialise a writer for a ring with geometry @a info (read from the
 * reader's ctl, or exchanged in an address) writing through @a wire.
 *
 * @return UCS_ERR_INVALID_PARAM if @a info is not a valid ring geometry, or
 *         does not match the wire, or asks for a commit the wire cannot do.
 */
ucs_status_t
uct_remapring_ring_writer_init(uct_remapring_ring_writer_t *writer,
                               const uct_remapring_ring_info_t *info,
                               uct_remapring_wire_t *wire);


/**
 * Write one record from @a iovcnt payload pieces and publish it; writer
 * side. Not logged on failure (data path).
 *
 * @return UCS_OK; UCS_ERR_NO_RESOURCE if the reader has not released enough
 *         of the ring (retry later); UCS_ERR_EXCEEDS_LIMIT if the payload is
 *         larger than uct_remapring_ring_writer_max_payload() or has too
 *         many pieces; a wire error (the record was not published).
 */
ucs_status_t uct_remapring_ring_writer_send(uct_remapring_ring_writer_t *writer,
                                            uint8_t am_id, uint8_t flags,
                                            const struct iovec *iov,
                                            size_t iovcnt);


/* A header of @a type at ring offset @a offset; writer side */
static UCS_F_ALWAYS_INLINE void
uct_remapring_ring_writer_hdr(const uct_remapring_ring_writer_t *writer,
                              uct_remapring_ring_hdr_t *hdr, uint64_t offset,
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
typedef struct uct_remapring_ring_direct {
    char *rec; /* the record, in the reader's block */
    char *payload; /* its payload: the caller stores it there */
    uint64_t size; /* bytes it takes in the ring */
} uct_remapring_ring_direct_t;


/**
 * The direct path, for a record of @a length payload bytes: where it goes
 * in the reader's block, if the writer may store it there itself. The
 * caller stores the payload at @a d->payload, then commits the record with
 * uct_remapring_ring_writer_direct_commit(); nothing else of the ring may
 * happen in between. The direct way is straight into the reader's block
 * (the wire's direct stores, STAMP commit): the same bytes at the same
 * places in the same order as uct_remapring_ring_writer_send() (see Commit
 * at the top of this file), without a call; only when credit is in hand and
 * the record fits in the rest of its slot; writer side.
 *
 * @return 1 with @a d filled; 0 if nothing may be written there: send it
 *         with uct_remapring_ring_writer_send(), which reloads the limit,
 *         pads to the next slot, or asks the wire.
 */
static UCS_F_ALWAYS_INLINE int uct_remapring_ring_writer_direct_begin(
        const uct_remapring_ring_writer_t *writer, size_t length,
        uct_remapring_ring_direct_t *d)
{
    const uct_remapring_wire_direct_t *direct = &writer->wire->direct;
    uint64_t offset                           = writer->tail;
    uint64_t in_block = offset & (writer->block_size - 1);
    uint64_t payload_off;
    uint32_t block;

    if (ucs_unlikely(!writer->direct || (length > writer->max_payload))) {
        return 0;
    }

    d->size = uct_remapring_ring_record_geometry(&writer->layout, offset,
                                                 length, &payload_off);
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
 * Commit the record @a d (from uct_remapring_ring_writer_direct_begin()
 * with the same @a length), whose payload is stored: the rest of its
 * header, then its stamp with release; writer side.
 */
static UCS_F_ALWAYS_INLINE void
uct_remapring_ring_writer_direct_commit(uct_remapring_ring_writer_t *writer,
                                        const uct_remapring_ring_direct_t *d,
                                        uint8_t am_id, size_t length)
{
    uct_remapring_ring_hdr_t hdr;

    uct_remapring_ring_writer_hdr(writer, &hdr, writer->tail,
                                  UCT_REMAPRING_RING_REC_DATA, length, am_id,
                                  0);
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
int uct_remapring_ring_writer_yield(uct_remapring_ring_writer_t *writer);


/**
 * Whether a record with @a length payload bytes would fit now, without
 * reloading the limit; writer side.
 */
static inline int
uct_remapring_ring_writer_has_credit(const uct_remapring_ring_writer_t *writer,
                                     size_t length)
{
    uint64_t size = uct_remapring_ring_record_size(&writer->layout,
                                                   writer->tail, length);
    uint64_t room = writer->block_size -
                    (writer->tail & (writer->block_size - 1));

    if (size > room) {
        /* a PAD to the slot's end, then the record at the next slot */
        size = room + uct_remapring_ring_record_size(&writer->layout,
                                                     writer->tail + room,
                                                     length);
    }

    return writer->tail + size <= writer->limit;
}


/**
 * Whether a record with @a length payload bytes fits, reloading the limit if
 * the credit known so far is not enough; writer side.
 */
static inline int
uct_remapring_ring_writer_can_send(uct_remapring_ring_writer_t *writer,
                                   size_t length)
{
    if (uct_remapring_ring_writer_has_credit(writer, length)) {
        return 1;
    }

    /* a reclaim is answered before the limit is reloaded: the reader may
     * have lowered it under the tail */
    if (!uct_remapring_ring_writer_yield(writer)) {
        writer->stats.ncredit_reads++;
        writer->limit = uct_remapring_wire_limit(writer->wire);
    }
    if (uct_remapring_ring_writer_has_credit(writer, length)) {
        return 1;
    }

    /* asks for a larger grant */
    uct_remapring_wire_stalled(writer->wire);
    return 0;
}


/**
 * Largest payload of one record.
 */
static inline size_t
uct_remapring_ring_writer_max_payload(const uct_remapring_ring_writer_t *writer)
{
    return writer->max_payload;
}

END_C_DECLS

#endif
