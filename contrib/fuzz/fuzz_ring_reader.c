/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * Fuzz target: the reader side of a ring, as a hostile writer sees it.
 *
 * A writer on the shm wire maps the receiver's whole pool and the ring's
 * control words: it can store any bytes into the slots, any tail and any
 * stall count, at any time. Each input is a ring geometry (commit, wire,
 * inline records, alignment, slots, credit batch, grant) and then a program
 * of steps that mixes an honest writer (remapring_ring_writer_send
 * through the local or the shm wire) with a hostile one (raw bytes into the
 * blocks under the slots or anywhere in the pool, forged headers with the
 * right stamp, tails and stall counts of any value), and the reader's calls
 * (poll, consume with or without a hold, release, flush, idle, is_empty),
 * and the writer's answers to the reader's requests to give back credit
 * (honest, or any bound and request number).
 *
 * What must hold, else the target aborts:
 * - a delivered record lies in the block under its slot, starts at the
 *   head, ends at or before the tail (TAIL) or the limit (STAMP), and
 *   never crosses its slot; the reader's words keep
 *   credited <= head, limit <= backed <= credited + window;
 * - while only the honest writer wrote, nothing is refused and every
 *   record is delivered whole, in order, with its bytes;
 * - an error is sticky;
 * - after the ring is destroyed and its holds released, every block is
 *   back on the pool's free list.
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
#define FUZZ_MAX_BLOCKS 64
#define FUZZ_MAX_HELD   64
#define FUZZ_MAX_SENT   1024
#define FUZZ_MAX_STEPS  512

static remapring_pool_t *pool;
static remapring_ring_ctl_t *ctl;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    remapring_pool_params_t params;

    /* every refused input is logged otherwise */
    if (getenv("UCX_LOG_LEVEL") == NULL) {
        ucs_global_opts.log_component.log_level = UCS_LOG_LEVEL_FATAL;
    }

    remapring_pool_params_default(&params);
    params.block_size  = FUZZ_BLOCK_SIZE;
    params.init_blocks = FUZZ_MAX_BLOCKS;
    params.grow_blocks = 8;
    params.max_blocks  = FUZZ_MAX_BLOCKS;
    params.name        = "fuzz-ring-reader";
    if (remapring_pool_create(&params, &pool) != UCS_OK) {
        abort();
    }

    ctl = mmap(NULL, sizeof(*ctl), PROT_READ | PROT_WRITE,
               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (ctl == MAP_FAILED) {
        abort();
    }
    return 0;
}

/* The reader's words, after every step */
static void fuzz_check_ring(const remapring_ring_t *ring)
{
    FUZZ_CHECK(ring->credited <= ring->head);
    FUZZ_CHECK(ring->limit <= ring->backed);
    FUZZ_CHECK(ring->backed <= ring->credited + ring->window_size);
    FUZZ_CHECK((ring->commit != REMAPRING_RING_COMMIT_TAIL) ||
               (ring->status != UCS_OK) || (ring->head <= ring->tail));
    FUZZ_CHECK(ring->head <= ring->limit);
}

/* A delivered record is where the reader may read it */
static void
fuzz_check_rx(const remapring_ring_t *ring, const remapring_ring_rx_t *rx)
{
    uint64_t end = (ring->commit == REMAPRING_RING_COMMIT_TAIL) ? ring->tail :
                                                                  ring->limit;
    uint32_t block;
    const char *base;

    FUZZ_CHECK(rx->offset == ring->head);
    FUZZ_CHECK(rx->offset % REMAPRING_RING_ALIGN == 0);
    FUZZ_CHECK(rx->next > rx->offset);
    FUZZ_CHECK(rx->next <= end);
    FUZZ_CHECK((rx->offset / ring->block_size) ==
               ((rx->next - 1) / ring->block_size));

    block = ring->slots[(rx->offset / ring->block_size) % ring->nslots];
    FUZZ_CHECK(block < pool->nblocks);
    base = remapring_pool_block_addr(pool, block);
    FUZZ_CHECK((const char *)rx->payload >=
               base + (rx->offset % ring->block_size) +
                       sizeof(remapring_ring_hdr_t));
    FUZZ_CHECK((const char *)rx->payload + rx->length <=
               base + ((rx->next - 1) % ring->block_size) + 1);
    FUZZ_CHECK(rx->is_inline ||
               ((const char *)rx->payload - ring->layout.reserve -
                        sizeof(remapring_ring_hdr_t) >=
                base + (rx->offset % ring->block_size)));

    /* the upper layer reads all of it */
    fuzz_read_all(rx->payload, rx->length);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input_t in = {data, size};
    remapring_ring_params_t params;
    remapring_ring_writer_t writer;
    remapring_ring_info_t info;
    remapring_ring_t *ring;
    remapring_wire_t *wire;
    remapring_ring_rx_t rx;
    remapring_pool_stats_t stats;
    uint32_t shared_slots[8];
    void *held[FUZZ_MAX_HELD];
    uint32_t sent_len[FUZZ_MAX_SENT];
    uint8_t buf[FUZZ_BLOCK_SIZE];
    remapring_ring_hdr_t hdr;
    unsigned nheld = 0, sent_head = 0, sent_tail = 0, step, i;
    uint64_t send_seq = 0, recv_seq = 0, offset, value;
    ucs_status_t status, sticky     = UCS_OK;
    int honest = 1, shm, hold;
    uint8_t cfg, op;
    uint16_t length;
    struct iovec iov;
    size_t pos;
    char *dst;

    cfg = fuzz_u8(&in);
    remapring_ring_params_default(&params);
    shm                 = !!(cfg & 0x02);
    params.commit       = (cfg & 0x01) ? REMAPRING_RING_COMMIT_STAMP :
                                         REMAPRING_RING_COMMIT_TAIL;
    params.inline_max   = (cfg & 0x04) ? 256 : 0;
    params.align        = (cfg & 0x08) ? 64 : 1;
    params.align_offset = (cfg & 0x10) ? 8 : 0;
    params.nslots       = 2 << ((cfg >> 5) & 0x3);
    if (params.nslots > 8) {
        params.nslots = 8;
    }
    params.rec_align    = (cfg & 0x80) ? 256 : REMAPRING_RING_ALIGN;
    cfg                 = fuzz_u8(&in);
    params.headroom     = (cfg & 0x7) * 32;
    params.credit_batch = 1 + ((cfg >> 3) & 0x3);
    params.grant_min    = (cfg >> 5) & 0x3;
    params.reclaim      = !!(cfg & 0x80);
    if (params.align_offset >= params.align) {
        params.align_offset = 0;
    }
    if (shm) {
        memset(shared_slots, 0xff, sizeof(shared_slots));
        params.shared_slots = shared_slots;
        params.remap_view   = 0;
    }

    status = remapring_ring_create(pool, &params, ctl, &ring);
    if (status != UCS_OK) {
        return 0;
    }

    if (shm) {
        status = remapring_wire_shm_create(pool->fd, FUZZ_BLOCK_SIZE,
                                           FUZZ_MAX_BLOCKS, shared_slots,
                                           ring->window_size, ctl, &wire);
    } else {
        status = remapring_wire_local_create(ring->view, ring->window_size, ctl,
                                             &wire);
    }
    FUZZ_CHECK(status == UCS_OK);
    remapring_ring_get_info(ring, &info);
    FUZZ_CHECK(remapring_ring_writer_init(&writer, &info, wire) == UCS_OK);

    for (step = 0; (step < FUZZ_MAX_STEPS) && (in.size > 0); ++step) {
        op = fuzz_u8(&in);
        switch (op % 12) {
        case 0: /* the honest writer */
        case 1:
            length       = fuzz_u16(&in) % (FUZZ_BLOCK_SIZE + 64);
            iov.iov_base = buf;
            iov.iov_len  = ucs_min(length, sizeof(buf));
            fuzz_pattern_fill(buf, send_seq, 0, iov.iov_len);
            if (sent_tail - sent_head == FUZZ_MAX_SENT) {
                break;
            }
            status = remapring_ring_writer_send(&writer, (uint8_t)send_seq, op,
                                                &iov, 1);
            if (status == UCS_OK) {
                sent_len[sent_tail++ % FUZZ_MAX_SENT] = iov.iov_len;
                ++send_seq;
            } else {
                FUZZ_CHECK(!honest || (status == UCS_ERR_NO_RESOURCE) ||
                           (status == UCS_ERR_EXCEEDS_LIMIT));
            }
            break;
        case 2: /* the reader */
        case 3:
        case 4:
            hold   = op & 0x10;
            status = remapring_ring_poll(ring, &rx);
            if (sticky != UCS_OK) {
                FUZZ_CHECK(status == sticky);
                break;
            } else if (status == UCS_ERR_NO_PROGRESS) {
                break;
            } else if (status != UCS_OK) {
                FUZZ_CHECK(!honest);
                FUZZ_CHECK(status == UCS_ERR_IO_ERROR);
                sticky = status;
                break;
            }

            fuzz_check_rx(ring, &rx);
            if (honest) {
                FUZZ_CHECK(sent_head != sent_tail);
                FUZZ_CHECK(rx.length == sent_len[sent_head % FUZZ_MAX_SENT]);
                FUZZ_CHECK(rx.am_id == (uint8_t)recv_seq);
                FUZZ_CHECK(
                        fuzz_pattern_match(rx.payload, recv_seq, 0, rx.length));
                ++sent_head;
                ++recv_seq;
            }

            if (hold && (nheld < FUZZ_MAX_HELD)) {
                if (!rx.is_inline) {
                    /* the descriptor and headroom in front are ours */
                    memset((char *)rx.payload - params.headroom, 0xee,
                           params.headroom);
                }
                held[nheld++] = rx.payload;
            } else {
                hold = 0;
            }
            remapring_ring_consume(ring, &rx, hold);
            break;
        case 5: /* release a held record */
            if (nheld > 0) {
                i = fuzz_u8(&in) % nheld;
                FUZZ_CHECK(remapring_ring_release(pool, held[i]) == UCS_OK);
                held[i] = held[--nheld];
            }
            break;
        case 6: /* raw bytes into the block under a slot, ahead of the head */
            honest = 0;
            offset = ring->head + (fuzz_u16(&in) % ring->window_size);
            length = fuzz_u8(&in) % 64 + 1;
            i      = ring->slots[(offset / ring->block_size) % ring->nslots];
            if (i == REMAPRING_POOL_BLOCK_NONE) {
                break;
            }
            pos = offset % ring->block_size;
            dst = (char *)remapring_pool_block_addr(pool, i) + pos;
            while ((length-- > 0) && (pos++ < ring->block_size)) {
                *dst++ = fuzz_u8(&in);
            }
            break;
        case 7: /* raw bytes anywhere in the pool: the shm wire maps it all */
            honest = 0;
            i      = fuzz_u8(&in) % pool->nblocks;
            pos    = fuzz_u16(&in) % FUZZ_BLOCK_SIZE;
            length = fuzz_u8(&in) % 32 + 1;
            dst    = (char *)remapring_pool_block_addr(pool, i) + pos;
            while ((length-- > 0) && (pos++ < FUZZ_BLOCK_SIZE)) {
                *dst++ = fuzz_u8(&in);
            }
            break;
        case 8: /* a forged header, with the stamp the reader expects */
            honest = 0;
            offset = writer.tail +
                     (uint64_t)(fuzz_u8(&in) % 64) * REMAPRING_RING_ALIGN;
            i         = ring->slots[(offset / ring->block_size) % ring->nslots];
            value     = fuzz_u8(&in);
            hdr.stamp = ((value & 0x80) ? offset + ring->window_size : offset) ^
                        writer.nonce;
            hdr.type     = (value & 0x40) ? REMAPRING_RING_REC_PAD :
                           (value & 0x20) ? fuzz_u8(&in) :
                                            REMAPRING_RING_REC_DATA;
            hdr.length   = (value & 0x10) ? (uint32_t)fuzz_u64(&in) :
                                            fuzz_u16(&in);
            hdr.am_id    = fuzz_u8(&in);
            hdr.flags    = 0;
            hdr.reserved = 0;
            if (i != REMAPRING_POOL_BLOCK_NONE) {
                memcpy((char *)remapring_pool_block_addr(pool, i) +
                               (offset % ring->block_size),
                       &hdr, sizeof(hdr));
            }
            if (value & 0x08) {
                /* the writer's tail covers it too */
                remapring_ring_ctl_store_tail(ctl,
                                              offset + (fuzz_u8(&in) + 1) * 64);
            }
            break;
        case 9: /* any tail */
            honest = 0;
            value  = fuzz_u8(&in);
            switch (value % 4) {
            case 0:
                offset = fuzz_u64(&in);
                break;
            case 1:
                offset = ring->head + (int8_t)fuzz_u8(&in) * 64;
                break;
            case 2:
                offset = ring->limit + (int8_t)fuzz_u8(&in);
                break;
            default:
                offset = writer.tail - fuzz_u16(&in);
                break;
            }
            remapring_ring_ctl_store_tail(ctl, offset);
            break;
        case 10: /* any stall count, limit, or answer to a reclaim */
            honest = 0;
            value  = fuzz_u8(&in);
            if (value & 1) {
                ctl->stalls = fuzz_u64(&in);
            } else if (value & 2) {
                ctl->limit = fuzz_u64(&in);
            } else {
                ctl->bound   = (value & 4) ? fuzz_u64(&in) :
                                             ring->reclaim_to +
                                                   (int8_t)fuzz_u8(&in) * 64;
                ctl->yielded = (value & 8) ? fuzz_u64(&in) : ctl->reclaim;
            }
            break;
        case 11:
            value = fuzz_u8(&in) % 4;
            if (value == 0) {
                remapring_ring_flush_credits(ring);
            } else if (value == 1) {
                remapring_ring_idle(ring);
            } else if (value == 2) {
                (void)remapring_ring_is_empty(ring);
            } else {
                /* the honest writer answers a request to give back */
                (void)remapring_ring_writer_yield(&writer);
            }
            break;
        }

        if (ring->status != UCS_OK) {
            FUZZ_CHECK(!honest);
            if (sticky == UCS_OK) {
                sticky = ring->status;
            }
        }
        fuzz_check_ring(ring);
    }

    /* holds outlive the ring; then every block is free again */
    remapring_wire_destroy(wire);
    remapring_ring_destroy(ring);
    while (nheld > 0) {
        FUZZ_CHECK(remapring_ring_release(pool, held[--nheld]) == UCS_OK);
    }
    remapring_pool_get_stats(pool, &stats);
    FUZZ_CHECK(stats.nheld_blocks == 0);
    FUZZ_CHECK(stats.ndetached == 0);
    FUZZ_CHECK(stats.nfree == stats.nblocks);
    return 0;
}
