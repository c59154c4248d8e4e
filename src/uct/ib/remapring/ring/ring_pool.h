/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef REMAPRING_RING_POOL_H_
#define REMAPRING_RING_POOL_H_

/*
 * The receive pool: physical memory in one memfd, cut into blocks of
 * block_size bytes (a power of two, at least a page).
 *
 * - The whole pool is mapped once, the CPU view. Virtual space for max_blocks
 *   is reserved PROT_NONE at create; growing ftruncate()s the memfd and maps
 *   the new chunk in place, so a block's CPU address never changes and
 *   block = (addr - cpu_base) / block_size holds for any address in it.
 * - A block is FREE (on the free list), ATTACHED (backs one slot of one ring
 *   view) or DETACHED (left its slot while records in it were held; it
 *   returns to the free list when its last hold is released).
 * - nholds counts the held records in a block. The block's state, owner and
 *   holds change only through the functions below, which keep the counters.
 * - Memory: a block detached with holds keeps only the pages its held
 *   records touch; the rest are punched out of the memfd
 *   (fallocate(PUNCH_HOLE)), so a held record costs its pages, not its
 *   block. The pool counts, per page, the held records that touch it, and
 *   keeps each hold's extent (in its own memory, out of a sender's reach):
 *   when a record of a punched block is released while others are still
 *   held, the pages only it touched are punched at the next detach (not at
 *   once: a drain that releases a block's records one after another in
 *   a burst would make a system call of each).
 * - A detached block is punched at once only if holds of late outlasted
 *   punch_age_ns: the newest detached blocks wait whole, up to punch_after
 *   of them and for at most punch_age_ns, in proportion to the share of
 *   detached blocks whose holds all ended within punch_age_ns (a moving
 *   average over the blocks released last, punched or not, and over
 *   those that waited punch_age_ns whole). Holds that end soon (a receive posted right after)
 *   cost no punch and no page faults; holds that last cost their pages,
 *   not blocks waiting in vain.
 * - Folding (ring_fold.h): when a detached block is punched, the partly
 *   used held pages (where a held record starts or ends) are folded into
 *   pages they share with those of other held records, so that a held
 *   record costs about its bytes. A block that had pages folded goes, when
 *   its last hold is released, to a list of free blocks that are mapped
 *   back onto their own memfd pages before use: in batches from
 *   remapring_pool_punch_aged(), or one when the free list is empty
 *   (a drain of kept messages makes no system call for each).
 * - Two limits apply: max_blocks blocks of address space, and max_bytes of
 *   memory, counting free and attached blocks whole, detached ones by their
 *   held pages, and the fold pages that hold memory.
 *   Nothing here is thread safe: all calls on one pool, and on the rings
 *   made from it, are serialised by the caller (the receiver).
 */

#include <uct/ib/remapring/ring/ring_fold.h>

#include <ucs/datastruct/list.h>
#include <ucs/sys/compiler_def.h>
#include <ucs/type/status.h>

#include <stddef.h>
#include <stdint.h>
#include <uct/ib/remapring/ring/ring_api.h>

/* the base a transport of ours in another module calls (ring_api.h) */
REMAPRING_API_BEGIN

BEGIN_C_DECLS


#define REMAPRING_POOL_BLOCK_NONE UINT32_MAX
#define REMAPRING_POOL_BLOCK_MAX                                               \
    (1ul << 30) /* block size; hold extents
                                                     are 32-bit */

typedef struct remapring_ring remapring_ring_t;


/**
 * State of a pool block.
 */
typedef enum {
    REMAPRING_POOL_BLOCK_FREE, /* on the free list */
    REMAPRING_POOL_BLOCK_ATTACHED, /* backs a slot of a ring view */
    REMAPRING_POOL_BLOCK_DETACHED /* off its slot, held records in it */
} remapring_pool_block_state_t;


/**
 * Per-block bookkeeping.
 */
/**
 * A held record: bytes [start, end) of its block. On its block's list while
 * held, on the pool's free list of entries otherwise.
 */
typedef struct remapring_pool_hold {
    uint32_t start;
    uint32_t end;
    uint32_t next; /* next entry of the list, or NONE */
} remapring_pool_hold_t;


typedef struct remapring_pool_block {
    uint32_t nholds; /* held records in this block */
    uint32_t holds; /* list of its held records (pool->holds), oldest
                       first (most are released in turn), or NONE */
    uint32_t holds_last; /* the newest, while there are any */
    uint32_t dirty; /* on pool->dirty: released pages to punch */
    uint32_t nuntracked; /* held records not on that list (no memory for an
                            entry): their pages stay until the last hold of
                            the block is released */
    uint32_t next_free; /* free list link, while FREE */
    uint32_t state; /* remapring_pool_block_state_t */
    uint32_t slot; /* slot it backs, while ATTACHED */
    uint32_t held_pages; /* pages kept, while DETACHED (not folded ones) */
    uint32_t folded; /* pages of it were folded since it left its slot: its
                        CPU view is to be mapped back before reuse */
    uint32_t aged; /* punched after waiting punch_age_ns whole: already
                      counted as a block whose holds outlasted it */
    uint32_t empty; /* FREE and punched whole (remapring_pool_trim_free) */
    uint32_t punch_prev; /* list of DETACHED blocks not punched yet */
    uint32_t punch_next;
    uint64_t detached_ns; /* when it was detached, while DETACHED */
    remapring_ring_t *owner; /* ring it backs, while ATTACHED */
} remapring_pool_block_t;


/**
 * Pool creation parameters.
 */
typedef struct remapring_pool_params {
    size_t block_size; /* B: power of two, >= page size */
    unsigned init_blocks; /* blocks made at create */
    unsigned grow_blocks; /* blocks added per growth step */
    unsigned max_blocks; /* limit of blocks (address space) */
    size_t max_bytes; /* limit of memory; 0: max_blocks * B */
    const char *name; /* memfd name, for /proc/<pid>/maps */
    int punch; /* give back the unheld pages of detached blocks; 0 where
                  a device pins the pool's pages (they would stay its) */
    unsigned punch_after; /* detached blocks kept whole at most, the
                             latest ones: a block released soon costs no
                             punch and no page faults when reused. How many
                             are is scaled by the share of blocks released
                             soon of late (punch_window) */
    uint64_t punch_age_ns; /* and only for so long: a hold that lasts is
                              not one that ends soon */
    uint32_t fold_pages; /* CPU-view pages folded at a time at most
                            (ring_fold.h); 0: never. Only with punch */
    /* called for each chunk of blocks made, before any is handed out (a
     * device registers it); an error fails the growth. Or NULL */
    ucs_status_t (*grow_cb)(void *arg, uint32_t first, unsigned count,
                            void *addr);
    void *grow_arg;
} remapring_pool_params_t;


/**
 * Pool counters, for tests and benchmarks.
 */
typedef struct remapring_pool_stats {
    unsigned nblocks; /* blocks made so far */
    unsigned max_blocks; /* limit */
    unsigned nfree; /* on the free list */
    unsigned ndetached; /* detached, waiting for their holds */
    unsigned nheld_blocks; /* blocks with nholds > 0 (attached or not) */
    uint64_t nholds; /* held records in all blocks */
    uint64_t nremaps; /* mmap(MAP_FIXED) of one block under a slot */
    uint64_t remap_ns; /* time spent in those mmap calls */
    uint64_t ngrows; /* growth steps */
    uint64_t held_pages; /* pages kept by detached blocks */
    uint64_t npunches; /* fallocate(PUNCH_HOLE) calls */
    uint64_t mem_bytes; /* memory counted against max_bytes */
    uint64_t fold_pages; /* fold pages holding memory */
    uint64_t nfolded; /* CPU-view pages folded now */
    uint64_t nfolds; /* folds done */
    uint64_t nfold_merged; /* words a store racing a fold changed */
    unsigned punch_window; /* detached blocks kept whole now, at most */
    double brief; /* share of detached blocks whose holds all ended
                     within punch_age_ns, of late */
} remapring_pool_stats_t;


/**
 * Receive pool. Fields are read by the ring engine; change them only
 * through the functions below and ring.c.
 */
typedef struct remapring_pool {
    int fd; /* memfd holding all blocks */
    void *cpu_base; /* CPU view, max_blocks long */
    size_t block_size; /* B */
    unsigned block_shift; /* log2(B) */
    unsigned nblocks; /* blocks made so far */
    unsigned max_blocks;
    unsigned grow_blocks;
    unsigned page_shift; /* log2(page size) */
    unsigned pages_per_block;
    uint64_t max_pages; /* max_bytes in pages */
    int punch;
    unsigned punch_after;
    uint64_t punch_age_ns;
    unsigned punch_window; /* punch_after scaled by brief_q16 */
    uint32_t brief_q16; /* share of detached blocks whose holds all ended
                           within punch_age_ns (65536: all), a moving
                           average over the blocks released last */
    uint32_t punch_head; /* oldest detached block not punched yet */
    uint32_t punch_tail;
    unsigned nunpunched;
    ucs_status_t (*grow_cb)(void *arg, uint32_t first, unsigned count,
                            void *addr);
    void *grow_arg;
    uint32_t free_head; /* first free block or NONE */
    uint32_t unfold_head; /* free blocks whose CPU view still maps fold
                             pages: mapped back before use */
    remapring_pool_block_t *blocks; /* [max_blocks] */
    size_t meta_size; /* the arrays below, one mapping */
    uint32_t *dirty; /* [max_blocks]: punched detached blocks in which
                        released records left pages no hold touches */
    uint32_t ndirty;
    uint16_t *page_holds; /* [max_blocks][pages_per_block]: held records
                             touching each page (a ring puts records 64
                             bytes apart, so at most 65); UINT16_MAX sticks
                             until the block's last release */
    uint64_t *fold_masks; /* [pages_per_block]: scratch of a fold */
    remapring_fold_t fold; /* the pages held records share */
    remapring_pool_hold_t *holds; /* entries, holds_size of them */
    uint32_t holds_size;
    uint32_t hold_free; /* free entries, or NONE */
    ucs_list_link_t waiters; /* rings waiting for a block */
    remapring_pool_stats_t stats;
} remapring_pool_t;


/**
 * Fill @a params with defaults: 64 KiB blocks, 64 initial, grow by 64, at
 * most 4096 blocks (256 MiB), no lower memory limit, up to 8192 pages
 * folded.
 */
void remapring_pool_params_default(remapring_pool_params_t *params);


/**
 * Create a pool: make the memfd, reserve the CPU view for max_blocks and
 * make init_blocks blocks.
 *
 * @param [in]  params  Pool geometry and limits.
 * @param [out] pool_p  New pool.
 */
ucs_status_t remapring_pool_create(const remapring_pool_params_t *params,
                                   remapring_pool_t **pool_p);


/**
 * Destroy a pool. Rings made from it must be destroyed first; blocks that
 * are still held are reported and unmapped anyway.
 */
void remapring_pool_destroy(remapring_pool_t *pool);


/**
 * Take a free block, growing the pool by grow_blocks if the free list is
 * empty and max_blocks allows.
 *
 * @return UCS_OK, or UCS_ERR_NO_RESOURCE when the pool is at its limit and
 *         every block is in use, or UCS_ERR_NO_MEMORY if growing failed.
 */
ucs_status_t
remapring_pool_block_get(remapring_pool_t *pool, uint32_t *block_p);


/**
 * Return a block with no holds to the free list.
 */
void remapring_pool_block_put(remapring_pool_t *pool, uint32_t block);


/**
 * A block taken with remapring_pool_block_get() now backs slot @a slot
 * of @a ring.
 */
void remapring_pool_block_attach(remapring_pool_t *pool, uint32_t block,
                                 remapring_ring_t *ring, unsigned slot);


/**
 * A block leaves its slot: to the free list if nothing in it is held, else
 * DETACHED until its last hold is released.
 */
void remapring_pool_block_detach(remapring_pool_t *pool, uint32_t block);


/**
 * Give back the memory of the pages of @a block, which backs a slot of a
 * ring, that no held record touches: their bytes are lost, and a page is
 * made again (zeroed) when it is next written. Only for a slot the ring's
 * writer may not write while this runs (one past what it agreed to keep
 * to). Returns the pages given back (0 in a pool that punches nothing).
 */
unsigned remapring_pool_block_punch(remapring_pool_t *pool, uint32_t block);


/**
 * Give back the memory of the free blocks past the first @a keep of the
 * free list (the ones used last, taken first), those not given back yet:
 * for an interface whose rings went quiet. Returns the pages given back (0
 * in a pool that punches nothing).
 */
unsigned remapring_pool_trim_free(remapring_pool_t *pool, unsigned keep);


/**
 * One more record of @a block is held: the one at bytes [@a start, @a end)
 * of the block (records of one block do not overlap).
 */
void remapring_pool_block_hold(remapring_pool_t *pool, uint32_t block,
                               size_t start, size_t end);


/**
 * Punch the detached blocks that have waited whole for longer than
 * punch_age_ns (a detach does it too), map back a batch of free blocks that
 * had pages folded, and punch the free fold pages past the few kept: the
 * receiver calls it now and then.
 */
void remapring_pool_punch_aged(remapring_pool_t *pool);


/**
 * Blocks the pool could still hand out: free ones, and those it may still
 * make under both of its limits.
 */
uint64_t remapring_pool_available(const remapring_pool_t *pool);


/**
 * Result of releasing a hold.
 */
typedef enum {
    REMAPRING_POOL_UNHOLD_HELD, /* other records still held */
    REMAPRING_POOL_UNHOLD_ATTACHED, /* last hold; still under its slot */
    REMAPRING_POOL_UNHOLD_FREED, /* last hold of a detached block: the
                                        block went to the free list */
    REMAPRING_POOL_UNHOLD_NONE /* no held record there: nothing done */
} remapring_pool_unhold_t;


/**
 * Release the held record of @a block that contains byte @a offset of it.
 */
remapring_pool_unhold_t remapring_pool_block_unhold(remapring_pool_t *pool,
                                                    uint32_t block,
                                                    size_t offset);


/**
 * Map @a count consecutive blocks starting at @a block at @a addr with
 * mmap(MAP_FIXED | MAP_SHARED), replacing whatever was mapped there.
 */
ucs_status_t remapring_pool_map(remapring_pool_t *pool, uint32_t block,
                                unsigned count, void *addr);


/**
 * Map one block under a slot in place of the one there, and count it (and
 * its cost) as a remap.
 */
ucs_status_t
remapring_pool_remap(remapring_pool_t *pool, uint32_t block, void *addr);


/**
 * Check a pool memfd of another process before mapping it: it must carry
 * the pool's seals, so that it can never shrink under the mapping.
 *
 * @param [in]  fd      The memfd, opened through /proc/<pid>/fd/<n>.
 * @param [out] size_p  Its size now; it only grows from here.
 *
 * @return UCS_OK, or UCS_ERR_UNSUPPORTED if it is not sealed so (logged at
 *         debug level: the caller says what it does instead).
 */
ucs_status_t remapring_pool_check_fd(int fd, size_t *size_p);


/**
 * Copy the pool counters into @a stats.
 */
void remapring_pool_get_stats(const remapring_pool_t *pool,
                              remapring_pool_stats_t *stats);


/**
 * Blocks of all the pools of this process that are off their free lists
 * (backing a slot, or detached with held records), and in @a *bytes_p (if
 * not NULL) their bytes. Any thread may call it. The one symbol the module
 * exports besides UCX's entry, for tests and tools: test/apps find it with
 * dlsym() in the loaded module, to see that after a peer's connection is
 * gone the blocks of its ring are back.
 */
REMAPRING_EXPORT uint64_t remapring_pool_blocks_in_use(uint64_t *bytes_p);


/**
 * Blocks backing slots of rings now.
 */
static inline uint64_t remapring_pool_attached(const remapring_pool_t *pool)
{
    return pool->nblocks - pool->stats.nfree - pool->stats.ndetached;
}


/**
 * CPU-view address of a block.
 */
static inline void *
remapring_pool_block_addr(const remapring_pool_t *pool, uint32_t block)
{
    return (char *)pool->cpu_base + ((size_t)block << pool->block_shift);
}


/**
 * Block that holds the CPU-view address @a addr, or NONE if @a addr is not in
 * a block made so far.
 */
static inline uint32_t
remapring_pool_block_of(const remapring_pool_t *pool, const void *addr)
{
    uintptr_t off = (uintptr_t)addr - (uintptr_t)pool->cpu_base;

    if (((uintptr_t)addr < (uintptr_t)pool->cpu_base) ||
        ((off >> pool->block_shift) >= pool->nblocks)) {
        return REMAPRING_POOL_BLOCK_NONE;
    }

    return (uint32_t)(off >> pool->block_shift);
}

END_C_DECLS

REMAPRING_API_END

#endif
