/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <uct/ib/remapring/ring/ring_pool.h>

#include <ucs/arch/atomic.h>
#include <ucs/debug/log_def.h>
#include <ucs/sys/math.h>

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>


/* Blocks of all the pools of the process that are off their free lists
 * (attached or detached), and their bytes: remapring_pool_blocks_in_use().
 * Each pool is serialised by its receiver, but not with the others:
 * atomics. */
static volatile uint64_t remapring_pool_used_blocks = 0;
static volatile uint64_t remapring_pool_used_bytes  = 0;

/* @a count blocks of @a pool went off (positive) or back on (negative)
 * their free list */
static void remapring_pool_count_used(remapring_pool_t *pool, int64_t count)
{
    ucs_atomic_add64(&remapring_pool_used_blocks, count);
    ucs_atomic_add64(&remapring_pool_used_bytes, count * pool->block_size);
}


/* Free blocks with folded pages mapped back per call of
 * remapring_pool_punch_aged() */
#define REMAPRING_POOL_UNFOLD_BATCH 64


/* Seals of the pool memfd: it never shrinks, and no one adds a seal that
 * would stop it growing. A writer that maps the pool checks them first. */
#define REMAPRING_POOL_SEALS (F_SEAL_SHRINK | F_SEAL_SEAL)


static uint64_t remapring_pool_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

void remapring_pool_params_default(remapring_pool_params_t *params)
{
    params->block_size   = 64 * 1024;
    params->init_blocks  = 64;
    params->grow_blocks  = 64;
    params->max_blocks   = 4096;
    params->max_bytes    = 0;
    params->name         = "remapring-pool";
    params->punch        = 1;
    params->punch_after  = 16;
    params->punch_age_ns = 1000000; /* 1 ms */
    params->fold_pages   = 8192;
    params->grow_cb      = NULL;
    params->grow_arg     = NULL;
}

/* Pages counted against max_bytes: free and attached blocks whole, detached
 * ones by their held pages, and the fold pages that hold memory */
static uint64_t remapring_pool_mem_pages(const remapring_pool_t *pool)
{
    return ((uint64_t)(pool->nblocks - pool->stats.ndetached) *
            pool->pages_per_block) +
           pool->stats.held_pages + remapring_fold_resident(&pool->fold);
}

static void remapring_pool_update_mem(remapring_pool_t *pool)
{
    pool->stats.mem_bytes = remapring_pool_mem_pages(pool) << pool->page_shift;
}

/* Blocks the pool may still make under both limits */
static uint64_t remapring_pool_growable(const remapring_pool_t *pool)
{
    uint64_t used = remapring_pool_mem_pages(pool);
    uint64_t by_mem;

    by_mem = (used >= pool->max_pages) ?
             0 : ((pool->max_pages - used) / pool->pages_per_block);
    return ucs_min(by_mem, pool->max_blocks - pool->nblocks);
}

uint64_t remapring_pool_available(const remapring_pool_t *pool)
{
    return pool->stats.nfree + remapring_pool_growable(pool);
}

/* Held records touching each page of @a block */
static inline uint16_t *
remapring_pool_page_holds(const remapring_pool_t *pool, uint32_t block)
{
    return &pool->page_holds[(size_t)block * pool->pages_per_block];
}

/* Whether page @a page of the block whose first CPU-view page is
 * @a cpu_page keeps its memfd page: held records touch it, and it is not
 * folded */
static UCS_F_ALWAYS_INLINE int
remapring_pool_page_kept(const remapring_pool_t *pool, const uint16_t *holds,
                         uint64_t cpu_page, unsigned page)
{
    return (holds[page] > 0) &&
           !remapring_fold_is_folded(&pool->fold, cpu_page + page);
}

/* Units of page @a page of its block that held record @a hold uses */
static uint64_t remapring_pool_hold_mask(const remapring_pool_t *pool,
                                         const remapring_pool_hold_t *hold,
                                         size_t page)
{
    size_t start = (size_t)page << pool->page_shift;
    size_t end   = start + (1ul << pool->page_shift);

    return remapring_fold_mask(&pool->fold, ucs_max(hold->start, start) - start,
                               ucs_min(hold->end, end) - start);
}

/* Fold the partly used held pages of detached block @a index: those where
 * a held record starts or ends (the pages between are its alone, whole) */
static void remapring_pool_fold_block(remapring_pool_t *pool, uint32_t index)
{
    remapring_pool_block_t *block = &pool->blocks[index];
    const uint16_t *holds         = remapring_pool_page_holds(pool, index);
    uint64_t *masks       = pool->fold_masks;
    uint64_t cpu_page     = (uint64_t)index * pool->pages_per_block;
    const remapring_pool_hold_t *hold;
    size_t pages[2];
    uint32_t entry;
    unsigned i;

    if ((pool->fold.max_pages == 0) || (block->nuntracked > 0)) {
        return; /* off, or some extents unknown */
    }

    for (entry = block->holds; entry != REMAPRING_POOL_BLOCK_NONE;
         entry = pool->holds[entry].next) {
        hold                                       = &pool->holds[entry];
        masks[hold->start >> pool->page_shift]     = 0;
        masks[(hold->end - 1) >> pool->page_shift] = 0;
    }

    for (entry = block->holds; entry != REMAPRING_POOL_BLOCK_NONE;
         entry = pool->holds[entry].next) {
        hold     = &pool->holds[entry];
        pages[0] = hold->start >> pool->page_shift;
        pages[1] = (hold->end - 1) >> pool->page_shift;
        masks[pages[0]] |= remapring_pool_hold_mask(pool, hold, pages[0]);
        masks[pages[1]] |= remapring_pool_hold_mask(pool, hold, pages[1]);
    }

    for (entry = block->holds; entry != REMAPRING_POOL_BLOCK_NONE;
         entry = pool->holds[entry].next) {
        hold     = &pool->holds[entry];
        pages[0] = hold->start >> pool->page_shift;
        pages[1] = (hold->end - 1) >> pool->page_shift;
        for (i = 0; i < 2; ++i) {
            /* a page's mask is cleared once it was tried */
            if ((masks[pages[i]] != 0) && (holds[pages[i]] != UINT16_MAX) &&
                remapring_fold_page(
                        &pool->fold, cpu_page + pages[i],
                        UCS_PTR_BYTE_OFFSET(remapring_pool_block_addr(pool,
                                                                      index),
                                            pages[i] << pool->page_shift),
                        masks[pages[i]], pool->fd,
                        ((off_t)index << pool->block_shift) +
                                ((off_t)pages[i] << pool->page_shift))) {
                block->folded = 1;
            }
            masks[pages[i]] = 0;
        }
    }
}

/* Give back the memory of pages [first, first + count) of @a block that no
 * held record touches, or whose held records moved to a fold page: the
 * held ones stay, at their CPU-view addresses. Returns how many stay. */
static unsigned remapring_pool_punch_pages(remapring_pool_t *pool,
                                           uint32_t block, unsigned first,
                                           unsigned count)
{
    const uint16_t *holds = remapring_pool_page_holds(pool, block);
    off_t base            = (off_t)block << pool->block_shift;
    uint64_t cpu_page     = (uint64_t)block * pool->pages_per_block;
    unsigned end          = first + count;
    unsigned page, run, held = 0;

    for (page = first; page < end; page += run) {
        if (remapring_pool_page_kept(pool, holds, cpu_page, page)) {
            run = 1;
            ++held;
            continue;
        }

        for (run = 1;
             (page + run < end) &&
             !remapring_pool_page_kept(pool, holds, cpu_page, page + run);
             ++run) {
        }

        /* failure only costs memory: the pages stay as they are */
        if (fallocate(pool->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                      base + ((off_t)page << pool->page_shift),
                      (off_t)run << pool->page_shift) == 0) {
            pool->stats.npunches++;
        } else {
            ucs_debug("pool %p punch of block %u pages %u+%u failed: %m",
                      pool, block, page, run);
        }
    }

    return held;
}

/* Give back the memory of the pages of a detached block that no held record
 * touches */
static void remapring_pool_punch(remapring_pool_t *pool, uint32_t block)
{
    unsigned held;

    if (!pool->punch) {
        /* every page stays */
        held = pool->pages_per_block;
    } else {
        remapring_pool_fold_block(pool, block);
        held = remapring_pool_punch_pages(pool, block, 0,
                                          pool->pages_per_block);
    }

    pool->blocks[block].held_pages = held;
    pool->stats.held_pages        += held;
}

unsigned remapring_pool_block_punch(remapring_pool_t *pool, uint32_t block)
{
    if (!pool->punch) {
        return 0;
    }

    return pool->pages_per_block -
           remapring_pool_punch_pages(pool, block, 0, pool->pages_per_block);
}

unsigned remapring_pool_trim_free(remapring_pool_t *pool, unsigned keep)
{
    unsigned n = 0, pages = 0;
    remapring_pool_block_t *block;
    uint32_t index;

    if (!pool->punch) {
        return 0;
    }

    for (index = pool->free_head; index != REMAPRING_POOL_BLOCK_NONE;
         index = block->next_free) {
        block = &pool->blocks[index];
        if ((n++ < keep) || block->empty) {
            continue;
        }

        pages += pool->pages_per_block -
                 remapring_pool_punch_pages(pool, index, 0,
                                            pool->pages_per_block);
        block->empty = 1;
    }

    return pages;
}

/* Detached block @a index waits whole on the list of blocks to punch */
static void remapring_pool_punch_later(remapring_pool_t *pool, uint32_t index)
{
    remapring_pool_block_t *block = &pool->blocks[index];

    block->held_pages       = pool->pages_per_block;
    pool->stats.held_pages += pool->pages_per_block;
    block->punch_prev       = pool->punch_tail;
    block->punch_next       = REMAPRING_POOL_BLOCK_NONE;
    if (pool->punch_tail == REMAPRING_POOL_BLOCK_NONE) {
        pool->punch_head = index;
    } else {
        pool->blocks[pool->punch_tail].punch_next = index;
    }
    pool->punch_tail = index;
    ++pool->nunpunched;
}

/* Take detached block @a index off the list of blocks to punch */
static void remapring_pool_punch_unlist(remapring_pool_t *pool, uint32_t index)
{
    remapring_pool_block_t *block = &pool->blocks[index];

    if (block->punch_prev == REMAPRING_POOL_BLOCK_NONE) {
        pool->punch_head = block->punch_next;
    } else {
        pool->blocks[block->punch_prev].punch_next = block->punch_next;
    }
    if (block->punch_next == REMAPRING_POOL_BLOCK_NONE) {
        pool->punch_tail = block->punch_prev;
    } else {
        pool->blocks[block->punch_next].punch_prev = block->punch_prev;
    }
    block->punch_prev = REMAPRING_POOL_BLOCK_NONE;
    block->punch_next = REMAPRING_POOL_BLOCK_NONE;
    --pool->nunpunched;
}

/* Is detached block @a index on the list of blocks to punch */
static int
remapring_pool_punch_listed(const remapring_pool_t *pool, uint32_t index)
{
    const remapring_pool_block_t *block = &pool->blocks[index];

    return (block->punch_prev != REMAPRING_POOL_BLOCK_NONE) ||
           (pool->punch_head == index);
}

/* Weight of one released block in the moving average brief_q16: 1/16 */
#define REMAPRING_POOL_BRIEF_SHIFT 4

/* A detached block's holds all ended within punch_age_ns (@a brief), or
 * not: into the share of such blocks, which the number of detached blocks
 * kept whole follows */
static void remapring_pool_brief_sample(remapring_pool_t *pool, int brief)
{
    int32_t share = (int32_t)pool->brief_q16;

    share += ((brief ? 65536 : 0) - share) / (1 << REMAPRING_POOL_BRIEF_SHIFT);
    pool->brief_q16    = share;
    pool->punch_window = (((uint64_t)pool->punch_after * share) + 32768) >>
                         16; /* to the nearest: 0 and punch_after reached */
}

/* Punch the oldest waiting blocks beyond the newest punch_window, and those
 * that waited longer than punch_age_ns (at time @a now) */
static void remapring_pool_punch_due(remapring_pool_t *pool, uint64_t now)
{
    uint32_t index;

    while ((pool->nunpunched > pool->punch_window) ||
           ((pool->nunpunched > 0) &&
            (now - pool->blocks[pool->punch_head].detached_ns >=
             pool->punch_age_ns))) {
        index = pool->punch_head;
        if (pool->nunpunched <= pool->punch_window) {
            /* its holds outlasted the age: known now, not at its release
             * (a storm keeps its blocks until it drains) */
            pool->blocks[index].aged = 1;
            remapring_pool_brief_sample(pool, 0);
        }
        remapring_pool_punch_unlist(pool, index);
        pool->stats.held_pages -= pool->blocks[index].held_pages;
        remapring_pool_punch(pool, index);
    }
}

static ucs_status_t remapring_pool_grow(remapring_pool_t *pool, unsigned count)
{
    unsigned first = pool->nblocks;
    size_t size    = (size_t)(first + count) << pool->block_shift;
    void *addr     = remapring_pool_block_addr(pool, first);
    remapring_pool_block_t *block;
    ucs_status_t status;
    void *ptr;
    unsigned i;

    if (ftruncate(pool->fd, size) != 0) {
        ucs_error("pool %p ftruncate(%zu) failed: %m", pool, size);
        return UCS_ERR_NO_MEMORY;
    }

    /* The chunk lands inside the PROT_NONE reservation: the CPU view stays
     * one contiguous range and earlier blocks never move */
    ptr = mmap(addr, (size_t)count << pool->block_shift, PROT_READ | PROT_WRITE,
               MAP_SHARED | MAP_FIXED, pool->fd,
               (off_t)first << pool->block_shift);
    if (ptr == MAP_FAILED) {
        ucs_error("pool %p mmap of blocks %u..%u failed: %m", pool, first,
                  first + count - 1);
        return UCS_ERR_NO_MEMORY;
    }

    /* the file cannot shrink back (sealed): a failed chunk is tried again
     * by the next growth */
    if (pool->grow_cb != NULL) {
        status = pool->grow_cb(pool->grow_arg, first, count, addr);
        if (status != UCS_OK) {
            return status;
        }
    }

    /* Push in reverse so the lowest index is taken first: consecutive
     * blocks tend to back consecutive slots and share one VMA */
    for (i = count; i > 0; --i) {
        block             = &pool->blocks[first + i - 1];
        block->state      = REMAPRING_POOL_BLOCK_FREE;
        block->nholds     = 0;
        block->holds      = REMAPRING_POOL_BLOCK_NONE;
        block->holds_last = REMAPRING_POOL_BLOCK_NONE;
        block->dirty      = 0;
        block->folded     = 0;
        block->empty      = 1; /* never written */
        block->nuntracked = 0;
        block->owner      = NULL;
        block->punch_prev = REMAPRING_POOL_BLOCK_NONE;
        block->punch_next = REMAPRING_POOL_BLOCK_NONE;
        block->next_free  = pool->free_head;
        pool->free_head   = first + i - 1;
    }

    pool->nblocks += count;
    pool->stats.nblocks = pool->nblocks;
    remapring_pool_update_mem(pool);
    pool->stats.nfree += count;
    pool->stats.ngrows++;
    ucs_debug("pool %p grew to %u blocks of %zu bytes", pool, pool->nblocks,
              pool->block_size);
    return UCS_OK;
}

ucs_status_t remapring_pool_create(const remapring_pool_params_t *params,
                                   remapring_pool_t **pool_p)
{
    size_t page_size = sysconf(_SC_PAGESIZE);
    remapring_pool_t *pool;
    ucs_status_t status;
    size_t reserve;

    if (!ucs_is_pow2(params->block_size) || (params->block_size < page_size) ||
        (params->block_size > REMAPRING_POOL_BLOCK_MAX) ||
        (params->max_blocks == 0) || (params->grow_blocks == 0) ||
        (params->init_blocks > params->max_blocks) ||
        (params->max_blocks >= REMAPRING_POOL_BLOCK_NONE)) {
        ucs_error("invalid pool parameters: block size %zu init %u grow %u "
                  "max %u",
                  params->block_size, params->init_blocks, params->grow_blocks,
                  params->max_blocks);
        return UCS_ERR_INVALID_PARAM;
    }

    pool = calloc(1, sizeof(*pool));
    if (pool == NULL) {
        ucs_error("failed to allocate pool");
        return UCS_ERR_NO_MEMORY;
    }

    pool->block_size      = params->block_size;
    pool->block_shift     = ucs_ilog2(params->block_size);
    pool->page_shift      = ucs_ilog2(page_size);
    pool->pages_per_block = params->block_size / page_size;
    pool->max_pages       = ((params->max_bytes == 0) ?
                             ((uint64_t)params->max_blocks *
                              params->block_size) :
                             params->max_bytes) / page_size;

    /* The block descriptors and the page hold counts, for max_blocks: in
     * memory that stays untouched, hence unbacked, until the blocks are
     * made (a malloc of it may be filled at once: sanitizers) */
    pool->meta_size = ucs_align_up(
            (size_t)params->max_blocks *
                            (sizeof(*pool->blocks) + sizeof(*pool->dirty) +
                             pool->pages_per_block *
                                     sizeof(*pool->page_holds)) +
                    pool->pages_per_block * sizeof(*pool->fold_masks),
            page_size);
    pool->blocks    = mmap(NULL, pool->meta_size, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (pool->blocks == MAP_FAILED) {
        ucs_error("failed to map %zu bytes of descriptors for %u pool blocks:"
                  " %m", pool->meta_size, params->max_blocks);
        status = UCS_ERR_NO_MEMORY;
        goto err_free_pool;
    }
    pool->fold_masks = (uint64_t *)(pool->blocks + params->max_blocks);
    pool->dirty      = (uint32_t *)(pool->fold_masks + pool->pages_per_block);
    pool->page_holds = (uint16_t *)(pool->dirty + params->max_blocks);
    pool->ndirty     = 0;

    pool->max_blocks       = params->max_blocks;
    pool->holds            = NULL;
    pool->holds_size       = 0;
    pool->hold_free        = REMAPRING_POOL_BLOCK_NONE;
    pool->punch            = params->punch;
    pool->punch_after      = params->punch_after;
    pool->punch_age_ns     = params->punch_age_ns;
    pool->punch_window     = params->punch_after;
    pool->brief_q16        = 65536; /* until blocks say otherwise */
    pool->punch_head       = REMAPRING_POOL_BLOCK_NONE;
    pool->punch_tail       = REMAPRING_POOL_BLOCK_NONE;
    pool->nunpunched       = 0;
    pool->grow_cb          = params->grow_cb;
    pool->grow_arg         = params->grow_arg;
    pool->grow_blocks      = params->grow_blocks;
    pool->free_head        = REMAPRING_POOL_BLOCK_NONE;
    pool->unfold_head      = REMAPRING_POOL_BLOCK_NONE;
    pool->nblocks          = 0;
    pool->stats.max_blocks = params->max_blocks;
    ucs_list_head_init(&pool->waiters);

    status = remapring_fold_init(&pool->fold, "remapring-pool-fold",
                                 pool->page_shift,
                                 (uint64_t)params->max_blocks *
                                         pool->pages_per_block,
                                 params->punch ? params->fold_pages : 0);
    if (status != UCS_OK) {
        goto err_free_blocks;
    }

    pool->fd = memfd_create(params->name ? params->name : "remapring-pool",
                            MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (pool->fd < 0) {
        ucs_error("memfd_create failed: %m");
        status = UCS_ERR_IO_ERROR;
        goto err_fold;
    }

    /* The pool only grows: sealed, it cannot shrink under a writer that
     * maps it (a store beyond the end of a memfd raises SIGBUS) */
    if (fcntl(pool->fd, F_ADD_SEALS, REMAPRING_POOL_SEALS) != 0) {
        ucs_error("pool %p: sealing memfd %d failed: %m", pool, pool->fd);
        status = UCS_ERR_IO_ERROR;
        goto err_close_fd;
    }

    reserve = (size_t)params->max_blocks << pool->block_shift;
    pool->cpu_base = mmap(NULL, reserve, PROT_NONE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (pool->cpu_base == MAP_FAILED) {
        ucs_error("failed to reserve %zu bytes for the pool: %m", reserve);
        status = UCS_ERR_NO_MEMORY;
        goto err_close_fd;
    }

    if (params->init_blocks > 0) {
        status = remapring_pool_grow(pool,
                                     ucs_min(params->init_blocks,
                                             remapring_pool_growable(pool)));
        if (status != UCS_OK) {
            goto err_unmap;
        }
    }

    ucs_debug("pool %p fd %d cpu view %p blocks %u/%u of %zu bytes", pool,
              pool->fd, pool->cpu_base, pool->nblocks, pool->max_blocks,
              pool->block_size);
    *pool_p = pool;
    return UCS_OK;

err_unmap:
    munmap(pool->cpu_base, reserve);
err_close_fd:
    close(pool->fd);
err_fold:
    remapring_fold_cleanup(&pool->fold);
err_free_blocks:
    munmap(pool->blocks, pool->meta_size);
err_free_pool:
    free(pool);
    return status;
}

void remapring_pool_destroy(remapring_pool_t *pool)
{
    if (pool->stats.nheld_blocks > 0) {
        ucs_warn("pool %p destroyed with %u blocks still held", pool,
                 pool->stats.nheld_blocks);
    }

    remapring_pool_count_used(pool,
                              -(int64_t)(pool->nblocks - pool->stats.nfree));

    munmap(pool->cpu_base, (size_t)pool->max_blocks << pool->block_shift);
    close(pool->fd);
    remapring_fold_cleanup(&pool->fold);
    free(pool->holds);
    munmap(pool->blocks, pool->meta_size);
    free(pool);
}

static void remapring_pool_unfold_some(remapring_pool_t *pool, unsigned count);

ucs_status_t remapring_pool_block_get(remapring_pool_t *pool, uint32_t *block_p)
{
    remapring_pool_block_t *block;
    ucs_status_t status;
    uint32_t index;

    if (pool->free_head == REMAPRING_POOL_BLOCK_NONE) {
        /* one that waits to be mapped back, before the pool grows */
        remapring_pool_unfold_some(pool, 1);
    }

    if (pool->free_head == REMAPRING_POOL_BLOCK_NONE) {
        if (remapring_pool_growable(pool) == 0) {
            return UCS_ERR_NO_RESOURCE;
        }

        status = remapring_pool_grow(pool,
                                     ucs_min(pool->grow_blocks,
                                             remapring_pool_growable(pool)));
        if (status != UCS_OK) {
            return status;
        }
    }

    index           = pool->free_head;
    block           = &pool->blocks[index];
    pool->free_head = block->next_free;
    block->empty    = 0;
    block->state    = REMAPRING_POOL_BLOCK_ATTACHED;
    block->owner    = NULL;
    pool->stats.nfree--;
    remapring_pool_count_used(pool, 1);
    *block_p = index;
    return UCS_OK;
}

uint64_t remapring_pool_blocks_in_use(uint64_t *bytes_p)
{
    if (bytes_p != NULL) {
        *bytes_p = remapring_pool_used_bytes;
    }

    return remapring_pool_used_blocks;
}

void remapring_pool_block_put(remapring_pool_t *pool, uint32_t index)
{
    remapring_pool_block_t *block = &pool->blocks[index];

    block->state = REMAPRING_POOL_BLOCK_FREE;
    block->owner = NULL;
    if (block->folded) {
        /* mapped back later, off the path of the release (a drain of kept
         * messages makes no system call of each) */
        block->next_free  = pool->unfold_head;
        pool->unfold_head = index;
    } else {
        block->next_free = pool->free_head;
        pool->free_head  = index;
    }
    pool->stats.nfree++;
    remapring_pool_count_used(pool, -1);
}

void remapring_pool_punch_aged(remapring_pool_t *pool)
{
    if ((pool->nunpunched == 0) &&
        (pool->unfold_head == REMAPRING_POOL_BLOCK_NONE) &&
        !remapring_fold_trimmable(&pool->fold)) {
        return;
    }

    if (pool->nunpunched > 0) {
        remapring_pool_punch_due(pool, remapring_pool_now_ns());
    }
    remapring_pool_unfold_some(pool, REMAPRING_POOL_UNFOLD_BATCH);
    remapring_fold_trim(&pool->fold);
    remapring_pool_update_mem(pool);
}

void remapring_pool_block_attach(remapring_pool_t *pool, uint32_t index,
                                 remapring_ring_t *ring, unsigned slot)
{
    remapring_pool_block_t *block = &pool->blocks[index];

    block->state = REMAPRING_POOL_BLOCK_ATTACHED;
    block->owner = ring;
    block->slot  = slot;
}

/* Punch the pages that released records left in punched blocks (a block
 * freed since, or taken again, is on the list at most once: the flag) */
static void remapring_pool_punch_dirty(remapring_pool_t *pool)
{
    remapring_pool_block_t *block;
    uint32_t i, index;
    unsigned held;

    for (i = 0; i < pool->ndirty; ++i) {
        index        = pool->dirty[i];
        block        = &pool->blocks[index];
        block->dirty = 0;
        if ((block->state != REMAPRING_POOL_BLOCK_DETACHED) ||
            remapring_pool_punch_listed(pool, index)) {
            continue;
        }

        remapring_pool_fold_block(pool, index);
        held = remapring_pool_punch_pages(pool, index, 0,
                                          pool->pages_per_block);
        pool->stats.held_pages -= block->held_pages - held;
        block->held_pages       = held;
    }
    pool->ndirty = 0;
}

void remapring_pool_block_detach(remapring_pool_t *pool, uint32_t index)
{
    remapring_pool_block_t *block = &pool->blocks[index];

    if (block->nholds == 0) {
        remapring_pool_block_put(pool, index);
        return;
    }

    block->state = REMAPRING_POOL_BLOCK_DETACHED;
    block->owner = NULL;
    pool->stats.ndetached++;
    if (pool->punch && (pool->punch_after > 0)) {
        /* holds that end soon (a receive posted right after): a block
         * punched now would fault its pages in again when reused */
        block->detached_ns = remapring_pool_now_ns();
        block->aged        = 0;
        remapring_pool_punch_later(pool, index);
        remapring_pool_punch_due(pool, block->detached_ns);
        remapring_pool_punch_dirty(pool);
    } else {
        remapring_pool_punch(pool, index);
        remapring_pool_punch_dirty(pool);
    }
    remapring_fold_trim(&pool->fold);
    remapring_pool_update_mem(pool);
}

/* An entry for a held record's extent, or NONE if there is no memory for
 * one */
static uint32_t remapring_pool_hold_alloc(remapring_pool_t *pool)
{
    remapring_pool_hold_t *holds;
    uint32_t index, size;

    if (pool->hold_free == REMAPRING_POOL_BLOCK_NONE) {
        size = ucs_max(pool->holds_size * 2, 64);
        if (size <= pool->holds_size) {
            return REMAPRING_POOL_BLOCK_NONE;
        }

        holds = realloc(pool->holds, (size_t)size * sizeof(*holds));
        if (holds == NULL) {
            return REMAPRING_POOL_BLOCK_NONE;
        }

        for (index = size; index > pool->holds_size; --index) {
            holds[index - 1].next = pool->hold_free;
            pool->hold_free       = index - 1;
        }
        pool->holds      = holds;
        pool->holds_size = size;
    }

    index           = pool->hold_free;
    pool->hold_free = pool->holds[index].next;
    return index;
}

void remapring_pool_block_hold(remapring_pool_t *pool, uint32_t index,
                               size_t start, size_t end)
{
    remapring_pool_block_t *block = &pool->blocks[index];
    uint16_t *holds               = remapring_pool_page_holds(pool, index);
    remapring_pool_hold_t *hold;
    uint32_t entry;
    size_t page;

    for (page = start >> pool->page_shift;
         page <= ((end - 1) >> pool->page_shift); ++page) {
        if (holds[page] != UINT16_MAX) {
            ++holds[page];
        }
    }

    entry = remapring_pool_hold_alloc(pool);
    if (entry == REMAPRING_POOL_BLOCK_NONE) {
        ++block->nuntracked;
    } else {
        hold        = &pool->holds[entry];
        hold->start = start;
        hold->end   = end;
        hold->next  = REMAPRING_POOL_BLOCK_NONE;
        if (block->holds == REMAPRING_POOL_BLOCK_NONE) {
            block->holds = entry;
        } else {
            pool->holds[block->holds_last].next = entry;
        }
        block->holds_last = entry;
    }

    if (block->nholds++ == 0) {
        pool->stats.nheld_blocks++;
    }
    pool->stats.nholds++;
}

/* Held record @a hold of @a block, not its last, is released: the pages only
 * it touched are given back if the block was punched already */
static void remapring_pool_unhold_pages(remapring_pool_t *pool, uint32_t index,
                                        const remapring_pool_hold_t *hold)
{
    remapring_pool_block_t *block = &pool->blocks[index];
    uint16_t *holds               = remapring_pool_page_holds(pool, index);
    unsigned first    = hold->start >> pool->page_shift;
    unsigned last     = (hold->end - 1) >> pool->page_shift;
    uint64_t cpu_page = (uint64_t)index * pool->pages_per_block;
    unsigned page, freed = 0;

    for (page = first; page <= last; ++page) {
        if (holds[page] == UINT16_MAX) {
            continue;
        } else if (--holds[page] > 0) {
            if (((page == first) || (page == last)) &&
                remapring_fold_is_folded(&pool->fold, cpu_page + page)) {
                /* its units of a folded page others still use */
                remapring_fold_shrink(&pool->fold, cpu_page + page,
                                      remapring_pool_hold_mask(pool, hold,
                                                               page));
            }
            continue;
        }

        if (remapring_fold_is_folded(&pool->fold, cpu_page + page)) {
            /* its memfd page is punched already: its units are free */
            remapring_fold_unpage(&pool->fold, cpu_page + page);
        } else {
            ++freed;
        }
    }

    if ((freed == 0) || (block->state != REMAPRING_POOL_BLOCK_DETACHED) ||
        !pool->punch || remapring_pool_punch_listed(pool, index) ||
        block->dirty) {
        /* whole under its slot, whole for now (punched later by the
         * counts), or due already */
        return;
    }

    block->dirty                 = 1;
    pool->dirty[pool->ndirty++] = index;
}


/* Free block @a index, which had pages folded: its CPU view maps its own
 * memfd pages again. If that fails the block is never handed out again. */
static ucs_status_t
remapring_pool_unfold(remapring_pool_t *pool, uint32_t index)
{
    if (remapring_fold_restore(&pool->fold,
                               (uint64_t)index * pool->pages_per_block,
                               pool->pages_per_block,
                               remapring_pool_block_addr(pool, index), pool->fd,
                               (off_t)index << pool->block_shift) != UCS_OK) {
        ucs_error("pool %p: block %u is lost: its CPU view cannot be mapped"
                  " back",
                  pool, index); /* and the mmap error above */
        /* neither free nor handed out: in use for good */
        pool->stats.nfree--;
        remapring_pool_count_used(pool, 1);
        return UCS_ERR_NO_MEMORY;
    }

    pool->blocks[index].folded = 0;
    return UCS_OK;
}

/* Map back up to @a count free blocks that had pages folded, onto the free
 * list */
static void remapring_pool_unfold_some(remapring_pool_t *pool, unsigned count)
{
    remapring_pool_block_t *block;
    uint32_t index;

    while ((count-- > 0) && (pool->unfold_head != REMAPRING_POOL_BLOCK_NONE)) {
        index             = pool->unfold_head;
        block             = &pool->blocks[index];
        pool->unfold_head = block->next_free;
        if (remapring_pool_unfold(pool, index) == UCS_OK) {
            block->next_free = pool->free_head;
            pool->free_head  = index;
        }
    }
}

remapring_pool_unhold_t remapring_pool_block_unhold(remapring_pool_t *pool,
                                                    uint32_t index,
                                                    size_t offset)
{
    remapring_pool_block_t *block = &pool->blocks[index];
    remapring_pool_hold_t *hold   = NULL;
    uint32_t prev                 = REMAPRING_POOL_BLOCK_NONE;
    uint32_t *link;

    for (link = &block->holds; *link != REMAPRING_POOL_BLOCK_NONE;
         prev = *link, link = &pool->holds[*link].next) {
        if ((offset >= pool->holds[*link].start) &&
            (offset < pool->holds[*link].end)) {
            hold = &pool->holds[*link];
            break;
        }
    }

    if (hold != NULL) {
        /* off the block's list, onto the free one */
        if (hold->next == REMAPRING_POOL_BLOCK_NONE) {
            block->holds_last = prev;
        }
        *link           = hold->next;
        hold->next      = pool->hold_free;
        pool->hold_free = hold - pool->holds;
    } else if (block->nuntracked > 0) {
        /* one of the records held without an entry: its pages stay */
        --block->nuntracked;
    } else {
        return REMAPRING_POOL_UNHOLD_NONE;
    }

    pool->stats.nholds--;
    if (--block->nholds > 0) {
        if (hold != NULL) {
            remapring_pool_unhold_pages(pool, index, hold);
        }
        return REMAPRING_POOL_UNHOLD_HELD;
    }

    pool->stats.nheld_blocks--;
    memset(remapring_pool_page_holds(pool, index), 0,
           pool->pages_per_block * sizeof(uint16_t));
    if (block->state != REMAPRING_POOL_BLOCK_DETACHED) {
        return REMAPRING_POOL_UNHOLD_ATTACHED;
    }

    if (block->folded) {
        /* its units go back now; its CPU view is mapped back before the
         * block is used again (remapring_pool_block_put) */
        remapring_fold_release(&pool->fold,
                               (uint64_t)index * pool->pages_per_block,
                               pool->pages_per_block);
    }

    if (pool->punch && (pool->punch_after > 0) && !block->aged) {
        remapring_pool_brief_sample(pool,
                                    (remapring_pool_now_ns() -
                                     block->detached_ns) < pool->punch_age_ns);
    }

    /* back whole: its punched pages fault in again when written */
    if (remapring_pool_punch_listed(pool, index)) {
        remapring_pool_punch_unlist(pool, index);
    }
    pool->stats.ndetached--;
    pool->stats.held_pages -= block->held_pages;
    block->held_pages       = 0;
    remapring_pool_block_put(pool, index);
    remapring_pool_update_mem(pool);
    return REMAPRING_POOL_UNHOLD_FREED;
}

ucs_status_t remapring_pool_map(remapring_pool_t *pool, uint32_t block,
                                unsigned count, void *addr)
{
    size_t length = (size_t)count << pool->block_shift;
    void *ptr;

    /* MAP_FIXED replaces the old mapping atomically: there is no moment when
     * the range is unmapped, so a peer writing into another slot of the same
     * window never faults. The old pages stay in the memfd (and in the CPU
     * view); only this window stops pointing at them. */
    ptr = mmap(addr, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
               pool->fd, (off_t)block << pool->block_shift);
    if (ptr == MAP_FAILED) {
        ucs_error("pool %p mmap of block %u (x%u) at %p failed: %m", pool,
                  block, count, addr);
        return UCS_ERR_NO_MEMORY;
    }

    return UCS_OK;
}

ucs_status_t
remapring_pool_remap(remapring_pool_t *pool, uint32_t block, void *addr)
{
    uint64_t start = remapring_pool_now_ns();
    ucs_status_t status;

    status = remapring_pool_map(pool, block, 1, addr);
    if (status == UCS_OK) {
        pool->stats.remap_ns += remapring_pool_now_ns() - start;
        pool->stats.nremaps++;
    }

    return status;
}

ucs_status_t remapring_pool_check_fd(int fd, size_t *size_p)
{
    struct stat st;
    int seals;

    seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0) {
        ucs_debug("pool fd %d: F_GET_SEALS failed: %m", fd);
        return UCS_ERR_UNSUPPORTED;
    }

    if ((seals & REMAPRING_POOL_SEALS) != REMAPRING_POOL_SEALS) {
        ucs_debug("pool fd %d has seals 0x%x, not 0x%x", fd, seals,
                  REMAPRING_POOL_SEALS);
        return UCS_ERR_UNSUPPORTED;
    }

    if (fstat(fd, &st) != 0) {
        ucs_debug("pool fd %d: fstat failed: %m", fd);
        return UCS_ERR_UNSUPPORTED;
    }

    *size_p = st.st_size;
    return UCS_OK;
}

void remapring_pool_get_stats(const remapring_pool_t *pool,
                              remapring_pool_stats_t *stats)
{
    *stats              = pool->stats;
    stats->fold_pages   = remapring_fold_resident(&pool->fold);
    stats->nfolded      = pool->fold.nfolded;
    stats->nfolds       = pool->fold.nfolds;
    stats->nfold_merged = pool->fold.nmerged;
    stats->punch_window = pool->punch_window;
    stats->brief        = pool->brief_q16 / 65536.0;
}
