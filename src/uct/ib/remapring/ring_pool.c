/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <uct/ib/remapring/ring_pool.h>

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
 * (attached or detached): uct_remapring_pool_total_used(). Each pool is
 * serialised by its receiver, but not with the others: atomics. */
static volatile uint64_t uct_remapring_pool_used_blocks = 0;


/* Seals of the pool memfd: it never shrinks, and no one adds a seal that
 * would stop it growing. A writer that maps the pool checks them first. */
#define UCT_REMAPRING_POOL_SEALS (F_SEAL_SHRINK | F_SEAL_SEAL)


static uint64_t uct_remapring_pool_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

void uct_remapring_pool_params_default(uct_remapring_pool_params_t *params)
{
    params->block_size  = 64 * 1024;
    params->init_blocks = 64;
    params->grow_blocks = 64;
    params->max_blocks  = 4096;
    params->max_bytes   = 0;
    params->name        = "remapring-pool";
    params->punch       = 1;
    params->punch_after = 16;
    params->grow_cb     = NULL;
    params->grow_arg    = NULL;
}

/* Pages counted against max_bytes: free and attached blocks whole, detached
 * ones by their held pages */
static uint64_t uct_remapring_pool_mem_pages(const uct_remapring_pool_t *pool)
{
    return ((uint64_t)(pool->nblocks - pool->stats.ndetached) *
            pool->pages_per_block) +
           pool->stats.held_pages;
}

static void uct_remapring_pool_update_mem(uct_remapring_pool_t *pool)
{
    pool->stats.mem_bytes = uct_remapring_pool_mem_pages(pool)
                            << pool->page_shift;
}

/* Blocks the pool may still make under both limits */
static uint64_t uct_remapring_pool_growable(const uct_remapring_pool_t *pool)
{
    uint64_t used = uct_remapring_pool_mem_pages(pool);
    uint64_t by_mem;

    by_mem = (used >= pool->max_pages) ?
             0 : ((pool->max_pages - used) / pool->pages_per_block);
    return ucs_min(by_mem, pool->max_blocks - pool->nblocks);
}

uint64_t uct_remapring_pool_available(const uct_remapring_pool_t *pool)
{
    return pool->stats.nfree + uct_remapring_pool_growable(pool);
}

static inline uint64_t *
uct_remapring_pool_held_map(const uct_remapring_pool_t *pool, uint32_t block)
{
    return &pool->held_map[(size_t)block * pool->map_words];
}

/* Give back the memory of the pages of a detached block that no held record
 * touches: the held ones stay, at their CPU-view addresses */
static void uct_remapring_pool_punch(uct_remapring_pool_t *pool,
                                     uint32_t block)
{
    const uint64_t *map = uct_remapring_pool_held_map(pool, block);
    off_t base          = (off_t)block << pool->block_shift;
    unsigned page, run, held = 0;

    if (!pool->punch) {
        /* every page stays */
        pool->blocks[block].held_pages = pool->pages_per_block;
        pool->stats.held_pages        += pool->pages_per_block;
        return;
    }

    for (page = 0; page < pool->pages_per_block; page += run) {
        if (map[page / 64] & UCS_BIT(page % 64)) {
            run = 1;
            ++held;
            continue;
        }

        for (run = 1; (page + run < pool->pages_per_block) &&
                      !(map[(page + run) / 64] & UCS_BIT((page + run) % 64));
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

    pool->blocks[block].held_pages = held;
    pool->stats.held_pages        += held;
}

/* Detached block @a index waits whole on the list of blocks to punch */
static void uct_remapring_pool_punch_later(uct_remapring_pool_t *pool,
                                           uint32_t index)
{
    uct_remapring_pool_block_t *block = &pool->blocks[index];

    block->held_pages       = pool->pages_per_block;
    pool->stats.held_pages += pool->pages_per_block;
    block->punch_prev       = pool->punch_tail;
    block->punch_next       = UCT_REMAPRING_POOL_BLOCK_NONE;
    if (pool->punch_tail == UCT_REMAPRING_POOL_BLOCK_NONE) {
        pool->punch_head = index;
    } else {
        pool->blocks[pool->punch_tail].punch_next = index;
    }
    pool->punch_tail = index;
    ++pool->nunpunched;
}

/* Take detached block @a index off the list of blocks to punch */
static void uct_remapring_pool_punch_unlist(uct_remapring_pool_t *pool,
                                            uint32_t index)
{
    uct_remapring_pool_block_t *block = &pool->blocks[index];

    if (block->punch_prev == UCT_REMAPRING_POOL_BLOCK_NONE) {
        pool->punch_head = block->punch_next;
    } else {
        pool->blocks[block->punch_prev].punch_next = block->punch_next;
    }
    if (block->punch_next == UCT_REMAPRING_POOL_BLOCK_NONE) {
        pool->punch_tail = block->punch_prev;
    } else {
        pool->blocks[block->punch_next].punch_prev = block->punch_prev;
    }
    block->punch_prev = UCT_REMAPRING_POOL_BLOCK_NONE;
    block->punch_next = UCT_REMAPRING_POOL_BLOCK_NONE;
    --pool->nunpunched;
}

/* Is detached block @a index on the list of blocks to punch */
static int uct_remapring_pool_punch_listed(const uct_remapring_pool_t *pool,
                                           uint32_t index)
{
    const uct_remapring_pool_block_t *block = &pool->blocks[index];

    return (block->punch_prev != UCT_REMAPRING_POOL_BLOCK_NONE) ||
           (pool->punch_head == index);
}

/* Punch the oldest waiting blocks beyond the newest punch_after */
static void uct_remapring_pool_punch_due(uct_remapring_pool_t *pool)
{
    uint32_t index;

    while (pool->nunpunched > pool->punch_after) {
        index = pool->punch_head;
        uct_remapring_pool_punch_unlist(pool, index);
        pool->stats.held_pages -= pool->blocks[index].held_pages;
        uct_remapring_pool_punch(pool, index);
    }
}

static ucs_status_t
uct_remapring_pool_grow(uct_remapring_pool_t *pool, unsigned count)
{
    unsigned first = pool->nblocks;
    size_t size    = (size_t)(first + count) << pool->block_shift;
    void *addr     = uct_remapring_pool_block_addr(pool, first);
    uct_remapring_pool_block_t *block;
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
        block->state      = UCT_REMAPRING_POOL_BLOCK_FREE;
        block->nholds     = 0;
        block->owner      = NULL;
        block->punch_prev = UCT_REMAPRING_POOL_BLOCK_NONE;
        block->punch_next = UCT_REMAPRING_POOL_BLOCK_NONE;
        block->next_free  = pool->free_head;
        pool->free_head   = first + i - 1;
    }

    pool->nblocks += count;
    pool->stats.nblocks = pool->nblocks;
    uct_remapring_pool_update_mem(pool);
    pool->stats.nfree += count;
    pool->stats.ngrows++;
    ucs_debug("pool %p grew to %u blocks of %zu bytes", pool, pool->nblocks,
              pool->block_size);
    return UCS_OK;
}

ucs_status_t
uct_remapring_pool_create(const uct_remapring_pool_params_t *params,
                          uct_remapring_pool_t **pool_p)
{
    size_t page_size = sysconf(_SC_PAGESIZE);
    uct_remapring_pool_t *pool;
    ucs_status_t status;
    size_t reserve;

    if (!ucs_is_pow2(params->block_size) || (params->block_size < page_size) ||
        (params->max_blocks == 0) || (params->grow_blocks == 0) ||
        (params->init_blocks > params->max_blocks) ||
        (params->max_blocks >= UCT_REMAPRING_POOL_BLOCK_NONE)) {
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
    pool->map_words       = ucs_div_round_up(pool->pages_per_block, 64);
    pool->max_pages       = ((params->max_bytes == 0) ?
                             ((uint64_t)params->max_blocks *
                              params->block_size) :
                             params->max_bytes) / page_size;

    pool->blocks = calloc(params->max_blocks, sizeof(*pool->blocks));
    if (pool->blocks == NULL) {
        ucs_error("failed to allocate %u pool block descriptors",
                  params->max_blocks);
        status = UCS_ERR_NO_MEMORY;
        goto err_free_pool;
    }

    pool->held_map = calloc((size_t)params->max_blocks * pool->map_words,
                            sizeof(*pool->held_map));
    if (pool->held_map == NULL) {
        ucs_error("failed to allocate page maps of %u pool blocks",
                  params->max_blocks);
        status = UCS_ERR_NO_MEMORY;
        goto err_free_blocks;
    }

    pool->max_blocks       = params->max_blocks;
    pool->punch            = params->punch;
    pool->punch_after      = params->punch_after;
    pool->punch_head       = UCT_REMAPRING_POOL_BLOCK_NONE;
    pool->punch_tail       = UCT_REMAPRING_POOL_BLOCK_NONE;
    pool->nunpunched       = 0;
    pool->grow_cb          = params->grow_cb;
    pool->grow_arg         = params->grow_arg;
    pool->grow_blocks      = params->grow_blocks;
    pool->free_head        = UCT_REMAPRING_POOL_BLOCK_NONE;
    pool->nblocks          = 0;
    pool->stats.max_blocks = params->max_blocks;
    ucs_list_head_init(&pool->waiters);

    pool->fd = memfd_create(params->name ? params->name : "remapring-pool",
                            MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (pool->fd < 0) {
        ucs_error("memfd_create failed: %m");
        status = UCS_ERR_IO_ERROR;
        goto err_free_blocks;
    }

    /* The pool only grows: sealed, it cannot shrink under a writer that
     * maps it (a store beyond the end of a memfd raises SIGBUS) */
    if (fcntl(pool->fd, F_ADD_SEALS, UCT_REMAPRING_POOL_SEALS) != 0) {
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
        status = uct_remapring_pool_grow(
                pool, ucs_min(params->init_blocks,
                              uct_remapring_pool_growable(pool)));
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
err_free_blocks:
    free(pool->held_map);
    free(pool->blocks);
err_free_pool:
    free(pool);
    return status;
}

void uct_remapring_pool_destroy(uct_remapring_pool_t *pool)
{
    if (pool->stats.nheld_blocks > 0) {
        ucs_warn("pool %p destroyed with %u blocks still held", pool,
                 pool->stats.nheld_blocks);
    }

    ucs_atomic_sub64(&uct_remapring_pool_used_blocks,
                     pool->nblocks - pool->stats.nfree);

    munmap(pool->cpu_base, (size_t)pool->max_blocks << pool->block_shift);
    close(pool->fd);
    free(pool->held_map);
    free(pool->blocks);
    free(pool);
}

ucs_status_t
uct_remapring_pool_block_get(uct_remapring_pool_t *pool, uint32_t *block_p)
{
    uct_remapring_pool_block_t *block;
    ucs_status_t status;
    uint32_t index;

    if (pool->free_head == UCT_REMAPRING_POOL_BLOCK_NONE) {
        if (uct_remapring_pool_growable(pool) == 0) {
            return UCS_ERR_NO_RESOURCE;
        }

        status = uct_remapring_pool_grow(pool,
                                         ucs_min(pool->grow_blocks,
                                                 uct_remapring_pool_growable(
                                                         pool)));
        if (status != UCS_OK) {
            return status;
        }
    }

    index           = pool->free_head;
    block           = &pool->blocks[index];
    pool->free_head = block->next_free;
    block->state    = UCT_REMAPRING_POOL_BLOCK_ATTACHED;
    block->owner    = NULL;
    pool->stats.nfree--;
    ucs_atomic_add64(&uct_remapring_pool_used_blocks, 1);
    *block_p = index;
    return UCS_OK;
}

uint64_t uct_remapring_pool_total_used(void)
{
    return uct_remapring_pool_used_blocks;
}

void uct_remapring_pool_block_put(uct_remapring_pool_t *pool, uint32_t index)
{
    uct_remapring_pool_block_t *block = &pool->blocks[index];

    block->state     = UCT_REMAPRING_POOL_BLOCK_FREE;
    block->owner     = NULL;
    block->next_free = pool->free_head;
    pool->free_head  = index;
    pool->stats.nfree++;
    ucs_atomic_sub64(&uct_remapring_pool_used_blocks, 1);
}

void uct_remapring_pool_block_attach(uct_remapring_pool_t *pool,
                                     uint32_t index, uct_remapring_ring_t *ring,
                                     unsigned slot)
{
    uct_remapring_pool_block_t *block = &pool->blocks[index];

    block->state = UCT_REMAPRING_POOL_BLOCK_ATTACHED;
    block->owner = ring;
    block->slot  = slot;
}

void uct_remapring_pool_block_detach(uct_remapring_pool_t *pool,
                                     uint32_t index)
{
    uct_remapring_pool_block_t *block = &pool->blocks[index];

    if (block->nholds == 0) {
        uct_remapring_pool_block_put(pool, index);
        return;
    }

    block->state = UCT_REMAPRING_POOL_BLOCK_DETACHED;
    block->owner = NULL;
    pool->stats.ndetached++;
    if (pool->punch && (pool->punch_after > 0)) {
        /* most holds end soon (a receive posted right after): a block
         * punched now would fault its pages in again when reused */
        uct_remapring_pool_punch_later(pool, index);
        uct_remapring_pool_punch_due(pool);
    } else {
        uct_remapring_pool_punch(pool, index);
    }
    uct_remapring_pool_update_mem(pool);
}

void uct_remapring_pool_block_hold(uct_remapring_pool_t *pool, uint32_t index,
                                   size_t start, size_t end)
{
    uint64_t *map = uct_remapring_pool_held_map(pool, index);
    size_t page;

    for (page = start >> pool->page_shift;
         page <= ((end - 1) >> pool->page_shift); ++page) {
        map[page / 64] |= UCS_BIT(page % 64);
    }

    if (pool->blocks[index].nholds++ == 0) {
        pool->stats.nheld_blocks++;
    }
    pool->stats.nholds++;
}

uct_remapring_pool_unhold_t
uct_remapring_pool_block_unhold(uct_remapring_pool_t *pool, uint32_t index)
{
    uct_remapring_pool_block_t *block = &pool->blocks[index];

    pool->stats.nholds--;
    if (--block->nholds > 0) {
        return UCT_REMAPRING_POOL_UNHOLD_HELD;
    }

    pool->stats.nheld_blocks--;
    memset(uct_remapring_pool_held_map(pool, index), 0,
           pool->map_words * sizeof(uint64_t));
    if (block->state != UCT_REMAPRING_POOL_BLOCK_DETACHED) {
        return UCT_REMAPRING_POOL_UNHOLD_ATTACHED;
    }

    /* back whole: its punched pages fault in again when written */
    if (uct_remapring_pool_punch_listed(pool, index)) {
        uct_remapring_pool_punch_unlist(pool, index);
    }
    pool->stats.ndetached--;
    pool->stats.held_pages -= block->held_pages;
    block->held_pages       = 0;
    uct_remapring_pool_block_put(pool, index);
    uct_remapring_pool_update_mem(pool);
    return UCT_REMAPRING_POOL_UNHOLD_FREED;
}

ucs_status_t uct_remapring_pool_map(uct_remapring_pool_t *pool, uint32_t block,
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
uct_remapring_pool_remap(uct_remapring_pool_t *pool, uint32_t block, void *addr)
{
    uint64_t start = uct_remapring_pool_now_ns();
    ucs_status_t status;

    status = uct_remapring_pool_map(pool, block, 1, addr);
    if (status == UCS_OK) {
        pool->stats.remap_ns += uct_remapring_pool_now_ns() - start;
        pool->stats.nremaps++;
    }

    return status;
}

ucs_status_t uct_remapring_pool_check_fd(int fd, size_t *size_p)
{
    struct stat st;
    int seals;

    seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0) {
        ucs_debug("pool fd %d: F_GET_SEALS failed: %m", fd);
        return UCS_ERR_UNSUPPORTED;
    }

    if ((seals & UCT_REMAPRING_POOL_SEALS) != UCT_REMAPRING_POOL_SEALS) {
        ucs_debug("pool fd %d has seals 0x%x, not 0x%x", fd, seals,
                  UCT_REMAPRING_POOL_SEALS);
        return UCS_ERR_UNSUPPORTED;
    }

    if (fstat(fd, &st) != 0) {
        ucs_debug("pool fd %d: fstat failed: %m", fd);
        return UCS_ERR_UNSUPPORTED;
    }

    *size_p = st.st_size;
    return UCS_OK;
}

void uct_remapring_pool_get_stats(const uct_remapring_pool_t *pool,
                                  uct_remapring_pool_stats_t *stats)
{
    *stats = pool->stats;
}
