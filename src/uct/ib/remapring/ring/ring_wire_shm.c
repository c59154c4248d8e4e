/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <uct/ib/remapring/ring/ring.h>
#include <uct/ib/remapring/ring/ring_pool.h>
#include <uct/ib/remapring/ring/ring_wire.h>

#include <ucs/arch/bitops.h>
#include <ucs/debug/log_def.h>
#include <ucs/sys/math.h>

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>


/*
 * The writer maps the reader's whole pool (its memfd) and finds the block
 * under a slot in the reader's slot table, which the reader mirrors into
 * shared memory: the table plays the NIC's page table. The reader changes a
 * slot's entry only before it credits the slot (release), and the writer
 * writes a slot only after it saw that credit (acquire), so an entry read
 * here is the one the reader will read the record from. An entry naming no
 * block of the pool is refused, never followed. The pool only grows, and
 * its memfd is sealed against shrinking (checked before we map it), so a
 * block below the file's end stays there; a block beyond the end we knew is
 * looked up once more (fstat) before it is refused: a store there would
 * raise SIGBUS in the writer.
 */
typedef struct remapring_wire_shm {
    remapring_wire_t super; /* super.direct: the reader's
                                              pool mapped here, its slot
                                              table, the memfd's blocks
                                              last seen, log2(B) */
    size_t                   pool_size;    /* pool_blocks << block_shift */
    uint32_t pool_blocks; /* entries must be below this */
    int pool_fd; /* our copy of the reader's fd */
    remapring_ring_ctl_t *ctl; /* shared control words */
} remapring_wire_shm_t;


/* Whether @a block is inside the reader's memfd: it grew since we looked */
static UCS_F_NOINLINE int
remapring_wire_shm_grown_to(remapring_wire_shm_t *shm, uint32_t block)
{
    remapring_wire_direct_t *direct = &shm->super.direct;
    struct stat st;

    if ((block >= shm->pool_blocks) || (fstat(shm->pool_fd, &st) != 0)) {
        return 0;
    }

    direct->file_blocks = ucs_min(st.st_size >> direct->block_shift,
                                  shm->pool_blocks);
    return block < direct->file_blocks;
}

static ucs_status_t remapring_wire_shm_write(remapring_wire_t *wire,
                                             const remapring_wire_seg_t *segs,
                                             unsigned nsegs)
{
    remapring_wire_shm_t *shm                 = (remapring_wire_shm_t *)wire;
    const remapring_wire_direct_t *direct     = &wire->direct;
    size_t block_mask                         = UCS_MASK(direct->block_shift);
    size_t pos, in_block;
    uint32_t block;
    unsigned i;

    for (i = 0; i < nsegs; ++i) {
        pos      = remapring_wire_view_pos(wire, segs[i].offset);
        block = __atomic_load_n(&direct->slot_table[pos >> direct->block_shift],
                                __ATOMIC_RELAXED);
        in_block = pos & block_mask;
        if (ucs_unlikely(((block >= direct->file_blocks) &&
                          !remapring_wire_shm_grown_to(shm, block)) ||
                         (in_block + segs[i].length > block_mask + 1))) {
            ucs_error("shm wire %p: slot %zu names block %u (the pool has"
                      " %u) for %u bytes at %zu: not in the pool",
                      shm, pos >> direct->block_shift, block,
                      direct->file_blocks, segs[i].length, in_block);
            return UCS_ERR_INVALID_ADDR;
        }

        remapring_wire_copy_seg(direct->base +
                                        ((size_t)block << direct->block_shift) +
                                        in_block,
                                &segs[i]);
    }

    return UCS_OK;
}

static void
remapring_wire_shm_publish_tail(remapring_wire_t *wire, uint64_t tail)
{
    /* plain stores to shared memory above; the release store orders the
     * tail after them for the reader's load-acquire */
    remapring_ring_ctl_store_tail(((remapring_wire_shm_t *)wire)->ctl, tail);
}

static uint64_t remapring_wire_shm_limit(remapring_wire_t *wire)
{
    return remapring_ring_ctl_load_limit(((remapring_wire_shm_t *)wire)->ctl);
}

static void remapring_wire_shm_stalled(remapring_wire_t *wire)
{
    remapring_wire_ctl_stalled(((remapring_wire_shm_t *)wire)->ctl);
}

static uint64_t remapring_wire_shm_reclaim(remapring_wire_t *wire)
{
    return remapring_wire_ctl_reclaim(((remapring_wire_shm_t *)wire)->ctl);
}

static void
remapring_wire_shm_yield(remapring_wire_t *wire, uint64_t seq, uint64_t bound)
{
    remapring_wire_ctl_yield(((remapring_wire_shm_t *)wire)->ctl, seq, bound);
}

static void remapring_wire_shm_destroy(remapring_wire_t *wire)
{
    remapring_wire_shm_t *shm = (remapring_wire_shm_t *)wire;

    munmap(shm->super.direct.base, shm->pool_size);
    close(shm->pool_fd);
    free(shm);
}

static const remapring_wire_ops_t remapring_wire_shm_ops = {
        .write        = remapring_wire_shm_write,
        .publish_tail = remapring_wire_shm_publish_tail,
        .limit        = remapring_wire_shm_limit,
        .stalled      = remapring_wire_shm_stalled,
        .reclaim      = remapring_wire_shm_reclaim,
        .yield        = remapring_wire_shm_yield,
        .destroy      = remapring_wire_shm_destroy};

ucs_status_t
remapring_wire_shm_create(int pool_fd, size_t block_size, uint32_t pool_blocks,
                          const uint32_t *slot_table, size_t window_size,
                          remapring_ring_ctl_t *ctl, remapring_wire_t **wire_p)
{
    remapring_wire_shm_t *shm;
    size_t file_size;

    if (!ucs_is_pow2(block_size) || (window_size < block_size) ||
        (pool_blocks == 0) ||
        (pool_blocks > (SIZE_MAX >> ucs_ilog2(block_size)))) {
        ucs_error("shm wire: invalid geometry: block size %zu window %zu "
                  "pool blocks %u", block_size, window_size, pool_blocks);
        return UCS_ERR_INVALID_PARAM;
    }

    if (remapring_pool_check_fd(pool_fd, &file_size) != UCS_OK) {
        ucs_error("shm wire: pool fd %d is not a pool sealed against"
                  " shrinking", pool_fd);
        return UCS_ERR_UNSUPPORTED;
    }

    shm = calloc(1, sizeof(*shm));
    if (shm == NULL) {
        ucs_error("failed to allocate shm wire");
        return UCS_ERR_NO_MEMORY;
    }

    shm->pool_fd = fcntl(pool_fd, F_DUPFD_CLOEXEC, 0);
    if (shm->pool_fd < 0) {
        ucs_error("shm wire: dup of pool fd %d failed: %m", pool_fd);
        free(shm);
        return UCS_ERR_IO_ERROR;
    }

    shm->super.ops                = &remapring_wire_shm_ops;
    shm->super.window_size        = window_size;
    shm->super.can_stamp          = 1;
    shm->super.direct.block_shift = ucs_ilog2(block_size);
    shm->super.direct.file_blocks = ucs_min(file_size >> ucs_ilog2(block_size),
                                            pool_blocks);
    shm->super.direct.slot_table  = slot_table;
    shm->pool_blocks              = pool_blocks;
    shm->pool_size         = (size_t)pool_blocks << ucs_ilog2(block_size);
    shm->ctl               = ctl;
    shm->super.direct.base = mmap(NULL, shm->pool_size, PROT_READ | PROT_WRITE,
                                  MAP_SHARED | MAP_NORESERVE, pool_fd, 0);
    if (shm->super.direct.base == MAP_FAILED) {
        ucs_error("shm wire: mmap(pool fd %d, %zu) failed: %m", pool_fd,
                  shm->pool_size);
        close(shm->pool_fd);
        free(shm);
        return UCS_ERR_NO_MEMORY;
    }

    *wire_p = &shm->super;
    ucs_debug("shm wire %p pool %p size %zu window %zu", shm,
              shm->super.direct.base, shm->pool_size, window_size);
    return UCS_OK;
}
