/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * Fuzz target: the writer side of a ring, as a hostile reader sees it.
 *
 * A sender takes the ring's geometry from the receiver's control area
 * (remapring_ring_info_t), reads the limit the receiver publishes, and
 * on the shm wire stores into the block the receiver's shared slot table
 * names for each slot, in a pool whose size the receiver declares. All of
 * it is the receiver's to write. Each input is a ring info (a valid one
 * with fields replaced, or raw bytes), the pool size the receiver claims,
 * then a program of steps: set a slot table entry, set the limit, send a
 * record of some length in pieces.
 *
 * What must hold, else the target aborts (or the sanitizers, or a store
 * past the pool's end, SIGSEGV/SIGBUS, stop it):
 * - an info the writer accepts describes a ring whose largest record fits
 *   in a slot: header, reserve, alignment and max_payload bytes;
 * - a send that succeeds stored only inside the blocks its slot table
 *   entries name, inside the pool's memfd; one the wire refuses fails
 *   with an error, without a store.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "fuzz_input.h"

#include <uct/ib/remapring/ring/ring.h>
#include <uct/ib/remapring/ring/ring_pool.h>
#include <uct/ib/remapring/ring/ring_wire.h>

#include <ucs/config/global_opts.h>
#include <ucs/sys/math.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define FUZZ_BLOCK_SIZE 4096
#define FUZZ_MAX_BLOCKS 16
#define FUZZ_MAX_SLOTS  64
#define FUZZ_MAX_STEPS  256

static remapring_pool_t *pool;
static remapring_ring_ctl_t *ctl;
static uint32_t *slot_table;
static uint8_t payload[2 * FUZZ_BLOCK_SIZE];

static uint64_t fuzz_fake_limit(remapring_wire_t *wire)
{
    return 0;
}

/* a wire for writer_init alone: it reads the limit once */
static const remapring_wire_ops_t fuzz_fake_ops = {.limit = fuzz_fake_limit};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    remapring_pool_params_t params;
    uint32_t block;
    unsigned i;

    if (getenv("UCX_LOG_LEVEL") == NULL) {
        ucs_global_opts.log_component.log_level = UCS_LOG_LEVEL_FATAL;
    }

    /* the receiver's pool: a sealed memfd of FUZZ_MAX_BLOCKS blocks, all
     * made, so the file's end is known */
    remapring_pool_params_default(&params);
    params.block_size  = FUZZ_BLOCK_SIZE;
    params.init_blocks = FUZZ_MAX_BLOCKS;
    params.grow_blocks = FUZZ_MAX_BLOCKS;
    params.max_blocks  = FUZZ_MAX_BLOCKS;
    params.name        = "fuzz-ring-writer";
    if (remapring_pool_create(&params, &pool) != UCS_OK) {
        abort();
    }
    for (i = 0; i < FUZZ_MAX_BLOCKS; ++i) {
        if (remapring_pool_block_get(pool, &block) != UCS_OK) {
            abort();
        }
    }

    ctl        = mmap(NULL, sizeof(*ctl), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    slot_table = mmap(NULL, FUZZ_MAX_SLOTS * sizeof(*slot_table),
                      PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1,
                      0);
    if ((ctl == MAP_FAILED) || (slot_table == MAP_FAILED)) {
        abort();
    }

    for (i = 0; i < sizeof(payload); ++i) {
        payload[i] = (uint8_t)(i * 7 + 1);
    }
    return 0;
}

/* A valid info, then the fields the input replaces */
static void fuzz_info(fuzz_input_t *in, remapring_ring_info_t *info)
{
    uint8_t mask = fuzz_u8(in);

    memset(info, 0, sizeof(*info));
    if (mask == 0xff) {
        /* raw bytes */
        for (unsigned i = 0; i < sizeof(*info); ++i) {
            ((uint8_t *)info)[i] = fuzz_u8(in);
        }
        return;
    }

    info->magic        = REMAPRING_RING_CTL_MAGIC;
    info->view_addr    = 0;
    info->nonce        = 0x1234567890abcdefull;
    info->block_size   = FUZZ_BLOCK_SIZE;
    info->nslots       = 4;
    info->reserve      = 240;
    info->inline_max   = 256;
    info->align        = 1;
    info->align_offset = 0;
    info->commit       = REMAPRING_RING_COMMIT_STAMP;
    info->rec_align    = 0;
    if (mask & 0x01) {
        info->block_size = fuzz_u32(in);
    }
    if (mask & 0x02) {
        info->nslots = fuzz_u32(in);
    }
    if (mask & 0x04) {
        info->reserve = fuzz_u32(in);
    }
    if (mask & 0x08) {
        info->inline_max = fuzz_u32(in);
    }
    if (mask & 0x10) {
        info->align = fuzz_u32(in);
    }
    if (mask & 0x20) {
        info->align_offset = fuzz_u32(in);
    }
    if (mask & 0x40) {
        info->commit = fuzz_u32(in);
    }
    if (mask & 0x80) {
        info->rec_align = fuzz_u32(in);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input_t in = {data, size};
    remapring_ring_writer_t writer;
    remapring_ring_info_t info;
    remapring_ring_layout_t *layout;
    struct iovec iov[REMAPRING_RING_MAX_IOV + 1];
    remapring_wire_t *wire;
    uint32_t pool_blocks, length, piece, left;
    size_t window;
    ucs_status_t status;
    unsigned step, i, niov;
    uint8_t op;

    fuzz_info(&in, &info);
    /* the pool size the receiver's control area declares */
    pool_blocks = (fuzz_u8(&in) & 1) ? fuzz_u32(&in) : FUZZ_MAX_BLOCKS;
    window      = (size_t)info.block_size * info.nslots;
    if ((info.block_size != FUZZ_BLOCK_SIZE) || (info.nslots == 0) ||
        (info.nslots > FUZZ_MAX_SLOTS)) {
        /* a geometry the shm wire cannot be made for: the writer alone,
         * on a wire of that window, must refuse it or accept it whole */
        remapring_wire_t fake = {.ops         = &fuzz_fake_ops,
                                 .window_size = window,
                                 .can_stamp   = 1};

        if (remapring_ring_writer_init(&writer, &info, &fake) == UCS_OK) {
            layout = &writer.layout;
            FUZZ_CHECK(sizeof(remapring_ring_hdr_t) + layout->reserve +
                               layout->align - 1 +
                               (uint64_t)writer.max_payload <=
                       writer.block_size);
        }
        return 0;
    }

    memset(slot_table, 0, FUZZ_MAX_SLOTS * sizeof(*slot_table));
    for (i = 0; i < info.nslots; ++i) {
        slot_table[i] = i;
    }
    memset(ctl, 0, sizeof(*ctl));
    ctl->info  = info;
    ctl->limit = window;

    status = remapring_wire_shm_create(pool->fd, FUZZ_BLOCK_SIZE, pool_blocks,
                                       slot_table, window, ctl, &wire);
    if (status != UCS_OK) {
        return 0;
    }

    status = remapring_ring_writer_init(&writer, &info, wire);
    if (status != UCS_OK) {
        remapring_wire_destroy(wire);
        return 0;
    }

    layout = &writer.layout;
    FUZZ_CHECK(sizeof(remapring_ring_hdr_t) + layout->reserve + layout->align -
                       1 + (uint64_t)writer.max_payload <=
               writer.block_size);

    for (step = 0; (step < FUZZ_MAX_STEPS) && (in.size > 0); ++step) {
        op = fuzz_u8(&in);
        switch (op % 4) {
        case 0: /* a slot table entry */
            i = fuzz_u8(&in) % info.nslots;
            __atomic_store_n(&slot_table[i],
                             (op & 0x80) ? fuzz_u32(&in) :
                                           fuzz_u8(&in) % (FUZZ_MAX_BLOCKS + 4),
                             __ATOMIC_RELAXED);
            break;
        case 1: /* the limit */
            switch ((op >> 2) % 4) {
            case 0:
                ctl->limit = fuzz_u64(&in);
                break;
            case 1:
                ctl->limit = writer.tail + fuzz_u32(&in);
                break;
            case 2:
                ctl->limit = writer.tail - fuzz_u8(&in);
                break;
            default:
                ctl->limit = writer.tail + window;
                break;
            }
            break;
        default: /* a record in pieces */
            length = ((op & 0x80) ?
                              fuzz_u32(&in) :
                              (uint32_t)(fuzz_u8(&in) | (fuzz_u8(&in) << 8))) %
                     (2 * FUZZ_BLOCK_SIZE + 1);
            niov = fuzz_u8(&in) % (REMAPRING_RING_MAX_IOV + 2);
            for (i = 0, left = length; i < niov; ++i) {
                piece = (i == niov - 1) ? left : ucs_min(left, fuzz_u8(&in));
                iov[i].iov_base = payload + (length - left);
                iov[i].iov_len  = piece;
                left -= piece;
            }
            if (niov == 0) {
                length = 0;
            }
            status = remapring_ring_writer_send(&writer, op, 0, iov, niov);
            if (status == UCS_OK) {
                FUZZ_CHECK(length <= writer.max_payload);
                FUZZ_CHECK(writer.tail <= writer.limit);
            }
            break;
        }
    }

    remapring_wire_destroy(wire);
    return 0;
}
