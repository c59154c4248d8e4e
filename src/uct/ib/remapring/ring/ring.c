/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <uct/ib/remapring/ring/ring.h>

#include <ucs/arch/bitops.h>
#include <ucs/debug/log_def.h>
#include <ucs/sys/math.h>
#include <ucs/sys/string.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/random.h>


int remapring_ring_geometry_valid(size_t block_size, unsigned nslots,
                                  const remapring_ring_layout_t *layout)
{
    if (!ucs_is_pow2(block_size) || (block_size < 4096) ||
        (block_size > REMAPRING_RING_BLOCK_MAX) || !ucs_is_pow2(nslots) ||
        (nslots < 2) || (nslots > REMAPRING_RING_SLOTS_MAX) ||
        (layout->align == 0) || !ucs_is_pow2(layout->align) ||
        (layout->align > 4096) || (layout->align_offset >= layout->align) ||
        !ucs_is_pow2(layout->rec_align) ||
        (layout->rec_align < REMAPRING_RING_ALIGN) ||
        (layout->rec_align > 4096) || (layout->inline_max > 4096) ||
        (layout->reserve > block_size) ||
        /* what max_payload takes off the block must fit in it: an
         * alignment of a whole block after the reserve would wrap it */
        (sizeof(remapring_ring_hdr_t) + (uint64_t)layout->reserve +
                 layout->align - 1 >=
         block_size)) {
        return 0;
    }

    return remapring_ring_max_payload(block_size, layout) >= block_size / 2;
}

void remapring_ring_params_default(remapring_ring_params_t *params)
{
    params->nslots       = 16;
    params->headroom     = 256;
    params->inline_max   = 0;
    params->align        = 1;
    params->align_offset = 0;
    params->rec_align    = REMAPRING_RING_ALIGN;
    params->credit_batch = 4;
    params->grant_min    = 0;
    params->commit       = REMAPRING_RING_COMMIT_TAIL;
    params->shared_slots = NULL;
    params->remap_view   = 1;
    params->reclaim      = 0;
    params->name         = NULL;
    params->on_publish   = NULL;
    params->publish_arg  = NULL;
    params->on_detach    = NULL;
}

/* Back @a slot with @a block. The writer's mirror is stored before the slot
 * is credited, and crediting is a store-release: a writer that saw the
 * credit (load-acquire) reads the new block */
static void
remapring_ring_set_slot(remapring_ring_t *ring, unsigned slot, uint32_t block)
{
    ring->slots[slot] = block;
    if (ring->shared_slots != NULL) {
        __atomic_store_n(&ring->shared_slots[slot], block, __ATOMIC_RELAXED);
    }
}

/* What a quiet ring keeps when it reclaims: its quiet grant, at least the
 * head's slot. A record that does not fit the rest of it makes the writer
 * write the slot's PAD alone (remapring_ring_writer_pad_out()), and the
 * reader credits the next slot once its head is past it */
static inline uint64_t
remapring_ring_reclaim_grant(const remapring_ring_t *ring)
{
    return ucs_max(ring->grant_min, ring->block_size);
}

static void remapring_ring_publish(remapring_ring_t *ring)
{
    /* cancels an open reclaim: the writer may now read a limit past the
     * bound it would answer with (see the top of ring.h) */
    ring->reclaim_open = 0;
    remapring_ring_ctl_store_limit(ring->ctl, ring->backed);
    ring->limit = ring->backed;
    ring->stats.ncredits++;
    if (ring->on_publish != NULL) {
        ring->on_publish(ring->publish_arg, ring->limit);
    }
}

static void remapring_ring_wait(remapring_ring_t *ring)
{
    if (!ring->waiting) {
        ucs_list_add_tail(&ring->pool->waiters, &ring->list);
        ring->waiting = 1;
        ring->stats.nwaits++;
    }
}

static void remapring_ring_unwait(remapring_ring_t *ring)
{
    if (ring->waiting) {
        ucs_list_del(&ring->list);
        ring->waiting = 0;
    }
}

/* @a block leaves @a slot for the pool: free, or detached while records in
 * it are held (the wire is told first) */
static void
remapring_ring_detach(remapring_ring_t *ring, unsigned slot, uint32_t block)
{
    if (ring->on_detach != NULL) {
        ring->on_detach(ring->publish_arg, slot, block);
    }
    remapring_pool_block_detach(ring->pool, block);
}

/* The slot the head has left: its block goes back to the pool, or stays
 * detached while records in it are held */
static void remapring_ring_retire(remapring_ring_t *ring)
{
    unsigned slot = remapring_ring_slot(ring, ring->credited);

    remapring_ring_detach(ring, slot, ring->slots[slot]);
    remapring_ring_set_slot(ring, slot, REMAPRING_POOL_BLOCK_NONE);
    ring->credited += ring->block_size;
}

/* Put @a block under @a slot: in the slot tables, and in the ring view for
 * a writer through it (an mmap) if another block was mapped there */
static ucs_status_t
remapring_ring_place(remapring_ring_t *ring, unsigned slot, uint32_t block)
{
    remapring_pool_t *pool = ring->pool;
    ucs_status_t status;

    if (ring->view_blocks[slot] != block) {
        /* a writer through the slot table follows the table alone */
        if (ring->remap_view) {
            status = remapring_pool_remap(pool, block,
                                          (char *)ring->view +
                                                  ((size_t)slot
                                                   << ring->block_shift));
            if (status != UCS_OK) {
                /* A failed MAP_FIXED may leave the slot unmapped: the ring
                 * is unusable, the writer is never credited past here */
                remapring_pool_block_put(pool, block);
                ring->status = status;
                return status;
            }
        }

        ring->view_blocks[slot] = block;
        ring->stats.nremaps++;
    }

    remapring_pool_block_attach(pool, block, ring, slot);
    remapring_ring_set_slot(ring, slot, block);
    return UCS_OK;
}

/* Back the next slot past the window with a free block */
static ucs_status_t remapring_ring_back(remapring_ring_t *ring)
{
    unsigned slot = remapring_ring_slot(ring, ring->backed);
    ucs_status_t status;
    uint32_t block;

    status = remapring_pool_block_get(ring->pool, &block);
    if (status != UCS_OK) {
        return status;
    }

    status = remapring_ring_place(ring, slot, block);
    if (status != UCS_OK) {
        return status;
    }

    ring->backed += ring->block_size;
    return UCS_OK;
}

/* A fresh block under @a slot, whose block has holds and is detached */
static ucs_status_t
remapring_ring_replace(remapring_ring_t *ring, unsigned slot)
{
    uint32_t held = ring->slots[slot];
    ucs_status_t status;
    uint32_t block;

    status = remapring_pool_block_get(ring->pool, &block);
    if (status != UCS_OK) {
        return status;
    }

    status = remapring_ring_place(ring, slot, block);
    if (status != UCS_OK) {
        return status;
    }

    remapring_ring_detach(ring, slot, held);
    return UCS_OK;
}

/* How far ahead of the credited point the writer may write: the grant,
 * doubled when the writer ran out of credit since last time and the pool
 * has room, down to the minimum once the ring sleeps */
static void remapring_ring_adjust_grant(remapring_ring_t *ring)
{
    uint64_t stalls = __atomic_load_n(&ring->ctl->stalls, __ATOMIC_RELAXED);

    if ((stalls == ring->seen_stalls) || (ring->grant == ring->window_size)) {
        return;
    }

    ring->seen_stalls = stalls;
    if (remapring_pool_available(ring->pool) >= 2 * ring->nslots) {
        ring->grant = ucs_min(ring->grant * 2, ring->window_size);
    }
}

/*
 * Give back every slot the head has left, in order, and back the window
 * ahead up to the grant. With the whole window granted, a slot whose block
 * holds nothing is the next to back again: it keeps its block, no system
 * call. A slot whose block holds records gets a fresh block; with none to
 * be had the ring waits on the pool, and release() calls back here when a
 * block frees.
 */
void remapring_ring_credit(remapring_ring_t *ring)
{
    remapring_pool_t *pool = ring->pool;
    uint64_t done = ring->head & ~(uint64_t)(ring->block_size - 1);
    uint64_t batch;
    unsigned slot;

    remapring_ring_adjust_grant(ring);
    while (ring->credited < done) {
        slot = remapring_ring_slot(ring, ring->credited);
        if ((ring->backed != ring->credited + ring->window_size) ||
            (ring->grant != ring->window_size)) {
            remapring_ring_retire(ring);
            continue;
        }

        /* the whole window: the slot's next lap is the next one to back */
        if (pool->blocks[ring->slots[slot]].nholds > 0) {
            if (remapring_ring_replace(ring, slot) != UCS_OK) {
                break; /* waits for a free block, or for its own */
            }
        } else {
            ring->stats.nreuse++;
        }

        ring->credited += ring->block_size;
        ring->backed   += ring->block_size;
    }

    while (ring->backed < ring->credited + ring->grant) {
        if (remapring_ring_back(ring) != UCS_OK) {
            break;
        }
    }

    if ((ring->credited < done) ||
        (ring->backed < ring->credited + ring->grant_min)) {
        /* a block must free before the writer gets its minimum */
        if (ring->status == UCS_OK) {
            remapring_ring_wait(ring);
        }
    } else {
        remapring_ring_unwait(ring);
    }

    /* Publish a full batch; what is left goes when a poll finds the ring
     * empty: nothing more would complete a slot until the writer writes
     * again, and it may be waiting for exactly these credits */
    batch = ucs_max(ucs_min(ring->credit_batch, ring->grant / 2),
                    ring->block_size);
    if (ring->backed - ring->limit >= batch) {
        remapring_ring_publish(ring);
    }
}

/* Random bits: a stamp must only be unlikely to appear by chance */
static uint64_t remapring_ring_make_nonce(const void *seed)
{
    struct timespec ts;
    uint64_t nonce;

    if (getrandom(&nonce, sizeof(nonce), GRND_NONBLOCK) != sizeof(nonce)) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        nonce = ((uint64_t)ts.tv_nsec << 32) ^ ts.tv_sec ^ (uintptr_t)seed;
        nonce *= 0x9e3779b97f4a7c15ull;
    }

    return nonce;
}

ucs_status_t remapring_ring_create(remapring_pool_t *pool,
                                   const remapring_ring_params_t *params,
                                   remapring_ring_ctl_t *ctl,
                                   remapring_ring_t **ring_p)
{
    remapring_ring_layout_t layout;
    remapring_ring_t *ring;
    ucs_status_t status;
    unsigned i, run;

    remapring_ring_layout_init(&layout, params->headroom, params->inline_max,
                               params->align, params->align_offset);
    layout.rec_align = params->rec_align;
    if (!remapring_ring_geometry_valid(pool->block_size, params->nslots,
                                       &layout) ||
        ((params->commit != REMAPRING_RING_COMMIT_TAIL) &&
         (params->commit != REMAPRING_RING_COMMIT_STAMP)) ||
        (!params->remap_view && (params->shared_slots == NULL)) ||
        (((uintptr_t)ctl % REMAPRING_RING_ALIGN) != 0)) {
        ucs_error("invalid ring parameters: nslots %u headroom %u inline %u"
                  " align %u offset %u commit %d block size %zu ctl %p",
                  params->nslots, params->headroom, params->inline_max,
                  params->align, params->align_offset, params->commit,
                  pool->block_size, ctl);
        return UCS_ERR_INVALID_PARAM;
    }

    ring = calloc(1, sizeof(*ring));
    if (ring == NULL) {
        ucs_error("failed to allocate ring");
        return UCS_ERR_NO_MEMORY;
    }

    ring->pool           = pool;
    ring->ctl            = ctl;
    ring->block_size     = pool->block_size;
    ring->block_shift    = pool->block_shift;
    ring->nslots         = params->nslots;
    ring->window_size    = (size_t)params->nslots << pool->block_shift;
    ring->layout         = layout;
    ring->commit         = params->commit;
    ring->nonce          = remapring_ring_make_nonce(ring);
    ring->credit_batch =
            (uint64_t)ucs_max(1u, ucs_min(params->credit_batch, params->nslots))
            << pool->block_shift;
    /* a writer through the ring view keeps the whole window: a slot that
     * moves to another block costs an mmap */
    ring->grant_min    = ((params->grant_min == 0) || params->remap_view) ?
                         ring->window_size :
                         ((size_t)ucs_min(params->grant_min, params->nslots)
                          << pool->block_shift);
    ring->grant        = ring->grant_min;
    ring->reclaim      = params->reclaim && !params->remap_view &&
                    (params->on_publish == NULL) &&
                    (remapring_ring_reclaim_grant(ring) < ring->window_size);
    ring->reclaim_open = 0;
    ring->reclaim_seq  = 0;
    ring->reclaim_to   = 0;
    ring->status       = UCS_OK;
    ring->shared_slots = params->shared_slots;
    ring->remap_view   = params->remap_view;
    ring->on_publish   = params->on_publish;
    ring->publish_arg  = params->publish_arg;
    ring->on_detach    = params->on_detach;
    if (params->name != NULL) {
        ucs_snprintf_zero(ring->name, sizeof(ring->name), "%s", params->name);
    } else {
        ucs_snprintf_zero(ring->name, sizeof(ring->name), "%p", ring);
    }
    ucs_list_head_init(&ring->list);

    /* the slot table, and the blocks mapped in the view */
    ring->slots = malloc(2 * (size_t)ring->nslots * sizeof(*ring->slots));
    if (ring->slots == NULL) {
        ucs_error("failed to allocate slot table of %u", ring->nslots);
        status = UCS_ERR_NO_MEMORY;
        goto err_free_ring;
    }

    ring->view_blocks = ring->slots + ring->nslots;
    for (i = 0; i < 2 * ring->nslots; ++i) {
        ring->slots[i] = REMAPRING_POOL_BLOCK_NONE;
    }
    /* the writer's mirror names no block of an earlier ring */
    for (i = 0; i < ring->nslots; ++i) {
        remapring_ring_set_slot(ring, i, REMAPRING_POOL_BLOCK_NONE);
    }

    ring->view = mmap(NULL, ring->window_size, PROT_NONE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (ring->view == MAP_FAILED) {
        ucs_error("failed to reserve ring view of %zu bytes: %m",
                  ring->window_size);
        status = UCS_ERR_NO_MEMORY;
        goto err_free_slots;
    }

    /* The first window: a full pool is the caller's to report, a failed
     * growth was logged by the pool */
    for (i = 0; i < (ring->grant >> ring->block_shift); ++i) {
        status = remapring_pool_block_get(pool, &ring->slots[i]);
        if (status != UCS_OK) {
            goto err_put_blocks;
        }

        remapring_pool_block_attach(pool, ring->slots[i], ring, i);
        remapring_ring_set_slot(ring, i, ring->slots[i]);
        ring->view_blocks[i] = ring->slots[i];
    }
    ring->backed = ring->grant;
    ring->limit  = ring->grant;

    /* One mmap per run of consecutive blocks: a fresh pool gives one run, so
     * a new ring usually costs one VMA. A writer through the slot table
     * never uses the view. */
    for (i = 0; ring->remap_view && (i < ring->nslots); i += run) {
        for (run = 1; (i + run < ring->nslots) &&
                      (ring->slots[i + run] == ring->slots[i] + run);
             ++run) {
        }

        status = remapring_pool_map(pool, ring->slots[i], run,
                                    (char *)ring->view +
                                            ((size_t)i << ring->block_shift));
        if (status != UCS_OK) {
            i = ring->grant >> ring->block_shift;
            goto err_put_blocks;
        }
    }

    /* a recycled block holds old records, never followed: their stamps
     * are of other offsets or of another ring's nonce */
    memset(ctl, 0, sizeof(*ctl));
    ctl->info.magic        = REMAPRING_RING_CTL_MAGIC;
    ctl->info.view_addr    = (uintptr_t)ring->view;
    ctl->info.nonce        = ring->nonce;
    ctl->info.block_size   = (uint32_t)ring->block_size;
    ctl->info.nslots       = ring->nslots;
    ctl->info.reserve      = ring->layout.reserve;
    ctl->info.inline_max   = ring->layout.inline_max;
    ctl->info.align        = ring->layout.align;
    ctl->info.align_offset = ring->layout.align_offset;
    ctl->info.commit       = ring->commit;
    ctl->info.rec_align    = ring->layout.rec_align;
    remapring_ring_ctl_store_tail(ctl, 0);
    remapring_ring_ctl_store_limit(ctl, ring->limit);

    ucs_debug("ring %s view %p slots %u of %zu bytes reserve %u inline %u"
              " commit %d pool %p", ring->name, ring->view, ring->nslots,
              ring->block_size, ring->layout.reserve, ring->layout.inline_max,
              ring->commit, pool);
    *ring_p = ring;
    return UCS_OK;

err_put_blocks:
    while (i-- > 0) {
        if (ring->slots[i] != REMAPRING_POOL_BLOCK_NONE) {
            remapring_pool_block_put(pool, ring->slots[i]);
        }
    }
    munmap(ring->view, ring->window_size);
err_free_slots:
    free(ring->slots);
err_free_ring:
    free(ring);
    return status;
}

void remapring_ring_destroy(remapring_ring_t *ring)
{
    unsigned i;

    remapring_ring_unwait(ring);
    for (i = 0; i < ring->nslots; ++i) {
        if (ring->slots[i] != REMAPRING_POOL_BLOCK_NONE) {
            remapring_pool_block_detach(ring->pool, ring->slots[i]);
        }
    }

    munmap(ring->view, ring->window_size);
    free(ring->slots);
    free(ring);
}

static ucs_status_t remapring_ring_bad(remapring_ring_t *ring, const char *what,
                                       const remapring_ring_hdr_t *hdr)
{
    ucs_error("ring %s: bad record at offset %lu (limit %lu): %s; stamp"
              " 0x%lx length %u type 0x%x",
              ring->name, ring->head, ring->limit, what,
              hdr->stamp ^ ring->nonce, hdr->length, hdr->type);
    ring->status = UCS_ERR_IO_ERROR;
    return ring->status;
}

/* TAIL commit: load a new tail when the head reached the last one; false if
 * there is none (or it is bad: ring->status says) */
static int remapring_ring_load_tail(remapring_ring_t *ring)
{
    uint64_t tail = remapring_ring_ctl_load_tail(ring->ctl);

    if (tail == ring->tail) {
        return 0;
    }

    if ((tail < ring->tail) || (tail > ring->limit) ||
        ((tail % REMAPRING_RING_ALIGN) != 0)) {
        ucs_error("ring %s: bad tail %lu: head %lu limit %lu", ring->name,
                  tail, ring->head, ring->limit);
        ring->status = UCS_ERR_IO_ERROR;
        return 0;
    }

    ring->tail = tail;
    return 1;
}

/* Whether a record is committed at the head; STAMP commit reads the stamp
 * with acquire: the rest of the record may be read after it */
static UCS_F_ALWAYS_INLINE int
remapring_ring_committed(remapring_ring_t *ring, const void *rec)
{
    if (ring->commit == REMAPRING_RING_COMMIT_STAMP) {
        return __atomic_load_n((const uint64_t*)rec, __ATOMIC_ACQUIRE) ==
               (ring->head ^ ring->nonce);
    }

    return (ring->head != ring->tail) || remapring_ring_load_tail(ring);
}

int remapring_ring_is_empty(remapring_ring_t *ring)
{
    const void *rec;

    if (ring->head >= ring->limit) {
        return 1;
    }

    rec = remapring_ring_cpu_addr(ring, ring->head);
    if (ring->commit == REMAPRING_RING_COMMIT_STAMP) {
        return __atomic_load_n((const uint64_t*)rec, __ATOMIC_ACQUIRE) !=
               (ring->head ^ ring->nonce);
    }

    return remapring_ring_ctl_load_tail(ring->ctl) == ring->head;
}

ucs_status_t
remapring_ring_poll_slow(remapring_ring_t *ring, remapring_ring_rx_t *rx)
{
    uint64_t pos_mask = ring->block_size - 1;
    uint64_t limit, pos, size, end;
    remapring_ring_hdr_t hdr;
    char *rec;

    if (ucs_unlikely(ring->status != UCS_OK)) {
        return ring->status;
    }

    for (;;) {
        /* nothing past the limit: its slot may have no block */
        rec = (ring->head < ring->limit) ?
                      remapring_ring_cpu_addr(ring, ring->head) :
                      NULL;
        if ((rec == NULL) || !remapring_ring_committed(ring, rec)) {
            if (ucs_unlikely(ring->status != UCS_OK)) {
                return ring->status;
            }

            remapring_ring_flush_credits(ring);
            return (ring->status != UCS_OK) ? ring->status :
                                              UCS_ERR_NO_PROGRESS;
        }

        /* The record is committed (above). Copy the header once: the peer
         * can still scribble on it, and a check must hold for the value
         * that is used */
        memcpy(&hdr, rec, sizeof(hdr));
        if (hdr.stamp != (ring->head ^ ring->nonce)) {
            return remapring_ring_bad(ring, "wrong offset stamp", &hdr);
        }

        /* the writer may have written below the tail (TAIL) or the limit */
        limit = (ring->commit == REMAPRING_RING_COMMIT_TAIL) ? ring->tail :
                                                               ring->limit;
        pos   = ring->head & pos_mask;
        if (hdr.type == REMAPRING_RING_REC_DATA) {
            size = remapring_ring_record_size(&ring->layout, ring->head,
                                              hdr.length);
            end  = ring->head + size;
            if (pos + size > ring->block_size) {
                return remapring_ring_bad(ring, "length past the slot", &hdr);
            } else if (end > limit) {
                return remapring_ring_bad(ring,
                                          "length past the tail or"
                                          " limit",
                                          &hdr);
            }

            rx->payload = rec +
                          (remapring_ring_payload_pos(&ring->layout, ring->head,
                                                      hdr.length) -
                           ring->head);
            rx->length    = hdr.length;
            rx->am_id     = hdr.am_id;
            rx->flags     = hdr.flags;
            rx->is_inline = remapring_ring_is_inline(&ring->layout, hdr.length);
            rx->offset    = ring->head;
            rx->next      = end;
            return UCS_OK;
        } else if (hdr.type == REMAPRING_RING_REC_PAD) {
            if ((hdr.length != ring->block_size - pos) ||
                (ring->head + hdr.length > limit)) {
                return remapring_ring_bad(ring, "bad pad length", &hdr);
            }

            ring->head += hdr.length;
            ring->stats.npads++;
            remapring_ring_credit(ring);
        } else {
            return remapring_ring_bad(ring, "unknown record type", &hdr);
        }
    }
}

void remapring_ring_hold(remapring_ring_t *ring, const remapring_ring_rx_t *rx)
{
    remapring_pool_block_hold(ring->pool,
                              ring->slots[remapring_ring_slot(ring, rx->offset)],
                              rx->offset & (ring->block_size - 1),
                              ((rx->next - 1) & (ring->block_size - 1)) + 1);
    ring->stats.nholds++;
}

/* Blocks became free: let the rings waiting for one (oldest first) take
 * them */
static void remapring_ring_wake_waiters(remapring_pool_t *pool)
{
    remapring_ring_t *ring, *tmp;

    ucs_list_for_each_safe(ring, tmp, &pool->waiters, list) {
        remapring_ring_credit(ring);
    }
}

ucs_status_t remapring_ring_release(remapring_pool_t *pool, const void *addr)
{
    uint32_t index = remapring_pool_block_of(pool, addr);
    remapring_pool_unhold_t result;

    result = (index == REMAPRING_POOL_BLOCK_NONE) ?
                     REMAPRING_POOL_UNHOLD_NONE :
                     remapring_pool_block_unhold(
                             pool, index,
                             UCS_PTR_BYTE_DIFF(remapring_pool_block_addr(pool,
                                                                         index),
                                               addr));
    switch (result) {
    case REMAPRING_POOL_UNHOLD_NONE:
        ucs_error("pool %p release of %p: not a held record", pool, addr);
        return UCS_ERR_INVALID_PARAM;
    case REMAPRING_POOL_UNHOLD_HELD:
        return UCS_OK;
    case REMAPRING_POOL_UNHOLD_ATTACHED:
        if (!pool->blocks[index].owner->waiting) {
            /* Still under its slot, and the ring is not stuck on it: the
             * slot is reused in place when the head leaves it */
            return UCS_OK;
        }
        break;
    case REMAPRING_POOL_UNHOLD_FREED:
        break;
    }

    /* A block became free, or a waiting ring's own block lost its holds */
    remapring_ring_wake_waiters(pool);
    return UCS_OK;
}

/* The writer answered the open reclaim: take back the slots at and past
 * its bound. Called with the ring empty */
static void remapring_ring_reclaimed(remapring_ring_t *ring)
{
    remapring_ring_ctl_t *ctl = ring->ctl;
    uint64_t bound, end;
    unsigned slot;

    if (__atomic_load_n(&ctl->yielded, __ATOMIC_ACQUIRE) !=
        ring->reclaim_seq) {
        return; /* not yet, or an answer to an earlier request */
    }

    ring->reclaim_open = 0;
    bound              = __atomic_load_n(&ctl->bound, __ATOMIC_RELAXED);
    if ((bound < ring->reclaim_to) || (bound < ring->head) ||
        (bound > ring->limit) ||
        ((ring->commit == REMAPRING_RING_COMMIT_TAIL) &&
         (bound < ring->tail))) {
        ucs_error("ring %s: bad reclaim answer: bound %lu, asked for %lu,"
                  " head %lu limit %lu", ring->name, bound, ring->reclaim_to,
                  ring->head, ring->limit);
        ring->status = UCS_ERR_IO_ERROR;
        return;
    }

    /* No record of this lap is at or past the bound; the slots past it were
     * never read (head <= bound) and hold nothing. The quiet grant past
     * the credited slot stays (the head may have moved past what was asked
     * for meanwhile), so that any record fits */
    end = ucs_max((bound + ring->block_size - 1) &
                          ~(uint64_t)(ring->block_size - 1),
                  ring->credited + remapring_ring_reclaim_grant(ring));
    while (ring->backed > end) {
        ring->backed -= ring->block_size;
        slot = remapring_ring_slot(ring, ring->backed);
        remapring_pool_block_detach(ring->pool, ring->slots[slot]);
        remapring_ring_set_slot(ring, slot, REMAPRING_POOL_BLOCK_NONE);
        ring->stats.nreclaimed++;
    }

    /* the writer keeps below its bound until it loads a new limit: what is
     * backed now, at once */
    ring->limit = bound;
    remapring_ring_publish(ring);
    remapring_ring_wake_waiters(ring->pool);
}

void remapring_ring_flush_credits(remapring_ring_t *ring)
{
    if (ucs_unlikely(ring->reclaim_open)) {
        remapring_ring_reclaimed(ring);
        if (ring->status != UCS_OK) {
            return;
        }
    }

    /* a writer that ran out may be waiting for more than the quiet grant
     * with nothing left to read: grow it now */
    if ((ring->grant != ring->window_size) &&
        (__atomic_load_n(&ring->ctl->stalls, __ATOMIC_RELAXED) !=
         ring->seen_stalls)) {
        remapring_ring_credit(ring);
    }

    if (ring->backed != ring->limit) {
        remapring_ring_publish(ring);
    }
}

void remapring_ring_idle(remapring_ring_t *ring)
{
    uint64_t to;

    ring->grant = ring->grant_min;
    if (!ring->reclaim || ring->reclaim_open || (ring->status != UCS_OK)) {
        return;
    }

    to = ring->credited + remapring_ring_reclaim_grant(ring);
    if ((ring->backed <= to) || (ring->limit != ring->backed) ||
        (ring->head >= to) || ring->waiting) {
        return; /* nothing to take back, or credit not all published */
    }

    /* the lower limit first, then the request (top of ring.h) */
    ring->reclaim_open = 1;
    ring->reclaim_to   = to;
    ring->stats.nreclaims++;
    remapring_ring_ctl_store_limit(ring->ctl, to);
    __atomic_store_n(&ring->ctl->reclaim, ++ring->reclaim_seq,
                     __ATOMIC_RELEASE);
}

void remapring_ring_get_info(const remapring_ring_t *ring,
                             remapring_ring_info_t *info)
{
    *info = ring->ctl->info;
}

void remapring_ring_get_stats(const remapring_ring_t *ring,
                              remapring_ring_stats_t *stats)
{
    *stats = ring->stats;
}


ucs_status_t remapring_ring_writer_init(remapring_ring_writer_t *writer,
                                        const remapring_ring_info_t *info,
                                        remapring_wire_t *wire)
{
    size_t window_size = (size_t)info->block_size * info->nslots;

    remapring_ring_layout_t layout = {.reserve      = info->reserve,
                                      .inline_max   = info->inline_max,
                                      .align        = info->align,
                                      .align_offset = info->align_offset,
                                      .rec_align    = (info->rec_align == 0) ?
                                                              REMAPRING_RING_ALIGN :
                                                              info->rec_align};

    if ((info->magic != REMAPRING_RING_CTL_MAGIC) ||
        !remapring_ring_geometry_valid(info->block_size, info->nslots,
                                       &layout) ||
        ((info->reserve % REMAPRING_RING_PAYLOAD_ALIGN) != 0) ||
        (window_size != wire->window_size) ||
        ((info->commit != REMAPRING_RING_COMMIT_TAIL) &&
         ((info->commit != REMAPRING_RING_COMMIT_STAMP) || !wire->can_stamp))) {
        ucs_error("invalid ring info: magic 0x%lx block size %u nslots %u "
                  "reserve %u inline %u align %u offset %u commit %u, wire"
                  " window %zu%s", info->magic, info->block_size,
                  info->nslots, info->reserve, info->inline_max, info->align,
                  info->align_offset, info->commit, wire->window_size,
                  wire->can_stamp ? "" : " (no stamp commit)");
        return UCS_ERR_INVALID_PARAM;
    }

    memset(writer, 0, sizeof(*writer));
    writer->wire           = wire;
    writer->tail           = 0;
    writer->block_size     = info->block_size;
    writer->window_size    = window_size;
    writer->layout      = layout;
    writer->nonce       = info->nonce;
    writer->commit         = (remapring_ring_commit_t)info->commit;
    writer->max_payload = remapring_ring_max_payload(info->block_size, &layout);
    /* the direct path stores straight into the reader's block, the stamp
     * last */
    writer->direct = (wire->direct.base != NULL) &&
                     (writer->commit == REMAPRING_RING_COMMIT_STAMP);
    writer->limit = remapring_wire_limit(wire);
    return UCS_OK;
}

int remapring_ring_writer_yield(remapring_ring_writer_t *writer)
{
    remapring_wire_t *wire = writer->wire;
    uint64_t seq;

    if (wire->ops->reclaim == NULL) {
        return 0;
    }

    seq = wire->ops->reclaim(wire);
    if (ucs_likely(seq == writer->yielded)) {
        return 0;
    }

    /* the limit the reader lowered before it asked, or one it published
     * since (which cancelled the request) */
    writer->limit   = ucs_max(remapring_wire_limit(wire), writer->tail);
    writer->yielded = seq;
    writer->stats.nyields++;
    wire->ops->yield(wire, seq, writer->limit);
    return 1;
}

uint64_t remapring_wire_ctl_reclaim(remapring_ring_ctl_t *ctl)
{
    return __atomic_load_n(&ctl->reclaim, __ATOMIC_ACQUIRE);
}

void remapring_wire_ctl_yield(remapring_ring_ctl_t *ctl, uint64_t seq,
                              uint64_t bound)
{
    __atomic_store_n(&ctl->bound, bound, __ATOMIC_RELAXED);
    __atomic_store_n(&ctl->yielded, seq, __ATOMIC_RELEASE);
}

void remapring_wire_ctl_stalled(remapring_ring_ctl_t *ctl)
{
    __atomic_store_n(&ctl->stalls,
                     __atomic_load_n(&ctl->stalls, __ATOMIC_RELAXED) + 1,
                     __ATOMIC_RELAXED);
}

/* A segment for @a length bytes of @a buffer at ring offset @a offset */
static UCS_F_ALWAYS_INLINE void
remapring_ring_seg(remapring_wire_seg_t *seg, uint64_t offset,
                   const void *buffer, size_t length, int commit)
{
    seg->offset = offset;
    seg->buffer = buffer;
    seg->length = (uint32_t)length;
    seg->commit = commit;
}

/* Write @a nsegs segments, then move the tail to @a tail, past them */
static UCS_F_ALWAYS_INLINE ucs_status_t remapring_ring_writer_put(
        remapring_ring_writer_t *writer, const remapring_wire_seg_t *segs,
        unsigned nsegs, uint64_t tail)
{
    ucs_status_t status = remapring_wire_write(writer->wire, segs, nsegs);

    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    /* The wire's write returned: the bytes are in the reader's memory. Only
     * now may the tail cover them */
    writer->tail = tail;
    if (writer->commit == REMAPRING_RING_COMMIT_TAIL) {
        remapring_wire_publish_tail(writer->wire, writer->tail);
    }
    return UCS_OK;
}

/* A record of @a length that must start at the next slot, with the limit
 * at or before the end of this one (a grant of one slot): the PAD alone, so
 * that the reader's head reaches the slot's end and the reader can credit
 * the next slot. Without it neither would move: the reader credits a slot
 * only once its head left it, and the writer writes a PAD only with the
 * record behind it. */
static ucs_status_t
remapring_ring_writer_pad_out(remapring_ring_writer_t *writer, size_t length)
{
    uint64_t offset = writer->tail;
    uint64_t room   = writer->block_size - (offset & (writer->block_size - 1));
    remapring_wire_seg_t seg;
    remapring_ring_hdr_t pad;
    ucs_status_t status;

    if ((room == writer->block_size) || (offset + room > writer->limit) ||
        (offset + room + writer->block_size <= writer->limit) ||
        (remapring_ring_record_size(&writer->layout, offset, length) <= room)) {
        return UCS_OK; /* none needed, none fits, or the record would fit */
    }

    remapring_ring_writer_hdr(writer, &pad, offset, REMAPRING_RING_REC_PAD,
                              room, 0, 0);
    remapring_ring_seg(&seg, offset, &pad, sizeof(pad), 1);
    status = remapring_ring_writer_put(writer, &seg, 1, offset + room);
    if (status == UCS_OK) {
        writer->stats.npads++;
    }

    return status;
}

ucs_status_t remapring_ring_writer_send(remapring_ring_writer_t *writer,
                                        uint8_t am_id, uint8_t flags,
                                        const struct iovec *iov, size_t iovcnt)
{
    remapring_wire_seg_t segs[REMAPRING_WIRE_MAX_SEGS];
    remapring_ring_hdr_t pad, hdr;
    uint64_t offset, size, room, pos;
    unsigned nsegs = 0;
    size_t i, length;
    ucs_status_t status;

    if (ucs_unlikely(iovcnt > REMAPRING_RING_MAX_IOV)) {
        return UCS_ERR_EXCEEDS_LIMIT;
    }

    for (i = 0, length = 0; i < iovcnt; ++i) {
        length += iov[i].iov_len;
    }

    if (ucs_unlikely(length > writer->max_payload)) {
        return UCS_ERR_EXCEEDS_LIMIT;
    }

    if (ucs_unlikely(!remapring_ring_writer_can_send(writer, length))) {
        writer->stats.nno_resource++;
        status = remapring_ring_writer_pad_out(writer, length);
        return (status == UCS_OK) ? UCS_ERR_NO_RESOURCE : status;
    }

    offset = writer->tail;
    size   = remapring_ring_record_size(&writer->layout, offset, length);
    room   = writer->block_size - (offset & (writer->block_size - 1));

    if (ucs_unlikely(size > room)) {
        remapring_ring_writer_hdr(writer, &pad, offset, REMAPRING_RING_REC_PAD,
                                  room, 0, 0);
        remapring_ring_seg(&segs[nsegs++], offset, &pad, sizeof(pad), 1);
        offset += room;
        size = remapring_ring_record_size(&writer->layout, offset, length);
        writer->stats.npads++;
    }

    /* the payload, then the header, whose stamp commits the record */
    pos = remapring_ring_payload_pos(&writer->layout, offset, length);
    for (i = 0; i < iovcnt; ++i) {
        if (iov[i].iov_len != 0) {
            remapring_ring_seg(&segs[nsegs++], pos, iov[i].iov_base,
                               iov[i].iov_len, 0);
            pos += iov[i].iov_len;
        }
    }

    remapring_ring_writer_hdr(writer, &hdr, offset, REMAPRING_RING_REC_DATA,
                              length, am_id, flags);
    remapring_ring_seg(&segs[nsegs++], offset, &hdr, sizeof(hdr), 1);

    status = remapring_ring_writer_put(writer, segs, nsegs, offset + size);
    if (ucs_likely(status == UCS_OK)) {
        writer->stats.nrecords++;
    }

    return status;
}
