/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * ring_bench: the ring engine alone, writer and reader in one process.
 * For each message size and hold rate it prints messages/s and GB/s through
 * the engine, remaps/s and the cost of one remap, and the bytes of pool kept
 * per byte of held payload, next to what fixed 8 KiB receive descriptors
 * (UCX rc: 4095 x 8 KiB per interface) would keep for the same messages.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <uct/ib/remapring/ring/ring.h>
#include <uct/ib/remapring/ring/ring_copy.h>
#include <uct/ib/remapring/ring/ring_wire.h>

#include <ucs/sys/math.h>

#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>


#define RING_BENCH_MAX_LIST 32
#define RING_BENCH_DESC_8K  8192
#define RING_BENCH_SAMPLE   32 /* releases per sample of held memory */


typedef struct {
    double seconds; /* per point */
    size_t block_size;
    unsigned nslots;
    unsigned headroom;
    unsigned credit_batch;
    unsigned max_blocks;
    unsigned hold_depth; /* records held at once, at most */
    int punch_after; /* detached blocks kept whole; -1: the pool's default */
    double punch_age_us; /* and for how long; < 0: the pool's default */
    long fold_pages; /* pages folded at most; -1: the pool's default */
    unsigned copy_max; /* records up to this inline, held ones copied */
    int fifo; /* release oldest first, else random */
    int threads; /* writer in its own thread */
    int cma; /* process_vm_writev into our own ring view */
    int touch; /* reader reads every payload byte */
    size_t sizes[RING_BENCH_MAX_LIST];
    unsigned nsizes;
    double holds[RING_BENCH_MAX_LIST];
    unsigned nholds;
} ring_bench_opts_t;


typedef struct {
    void *payload; /* in the pool, or in a copy (copy) */
    int copy;
    uint32_t length;
} ring_bench_held_t;


typedef struct {
    remapring_ring_writer_t *writer;
    size_t size;
    volatile int stop;
    uint64_t nsent;
} ring_bench_writer_arg_t;


static double ring_bench_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t ring_bench_rand(uint64_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}

static void *ring_bench_writer_thread(void *arg)
{
    ring_bench_writer_arg_t *w = arg;
    static char buf[1 << 20];
    struct iovec iov = {buf, w->size};

    while (!w->stop) {
        if (remapring_ring_writer_send(w->writer, 1, 0, &iov, 1) == UCS_OK) {
            __atomic_store_n(&w->nsent, w->nsent + 1, __ATOMIC_RELAXED);
        } else {
            sched_yield();
        }
    }

    return NULL;
}

/* What the memfds hold for the holds: the pool memfd's pages, less those of
 * the blocks under the ring's slots and on the free lists (mincore() through
 * the CPU view), plus the fold memfd's */
static double ring_bench_held_memfd(remapring_pool_t *pool)
{
    static unsigned char vec[1 << 22];
    size_t page_size = 1ul << pool->page_shift;
    size_t npages    = (size_t)pool->nblocks * pool->pages_per_block;
    double bytes     = 0;
    struct stat st;
    size_t page;

    if ((npages > sizeof(vec)) || (fstat(pool->fd, &st) != 0) ||
        (mincore(pool->cpu_base, npages * page_size, vec) != 0)) {
        return 0;
    }

    /* a free block waiting to be mapped back after a fold may still map
     * fold pages, counted below: its pages that do are not its own */
    bytes = (double)st.st_blocks * 512;
    for (page = 0; page < npages; ++page) {
        if ((vec[page] & 1) &&
            (pool->blocks[page / pool->pages_per_block].state !=
             REMAPRING_POOL_BLOCK_DETACHED) &&
            ((pool->fold.of == NULL) || (pool->fold.of[page] == 0))) {
            bytes -= page_size;
        }
    }

    if ((pool->fold.fd >= 0) && (fstat(pool->fold.fd, &st) == 0)) {
        bytes += (double)st.st_blocks * 512;
    }

    return ucs_max(bytes, 0.0);
}

static void ring_bench_release(remapring_pool_t *pool,
                               remapring_copies_t *copies,
                               const ring_bench_held_t *held)
{
    if (held->copy) {
        remapring_copy_put(copies, held->payload);
    } else {
        remapring_ring_release(pool, held->payload);
    }
}

static int
ring_bench_point(const ring_bench_opts_t *opts, size_t size, double hold_pct)
{
    static char buf[1 << 20];
    remapring_pool_params_t pool_params;
    remapring_ring_params_t ring_params;
    remapring_pool_stats_t pool_stats;
    remapring_ring_writer_t writer;
    remapring_ring_ctl_t *ctl;
    remapring_pool_t *pool;
    remapring_ring_t *ring;
    remapring_wire_t *wire;
    remapring_ring_info_t info;
    remapring_ring_rx_t rx;
    ring_bench_writer_arg_t warg;
    ring_bench_held_t *held;
    pthread_t thread;
    struct iovec iov        = {buf, size};
    uint64_t rng            = 0x9e3779b97f4a7c15ull;
    uint64_t hold_threshold = (uint64_t)(hold_pct * 1e4 / 100.0);
    uint64_t nmsgs = 0, bytes = 0, sink = 0, nsamples = 0, nreleases = 0;
    double held_pool = 0, held_payload = 0, held_payload_now = 0;
    double held_memfd  = 0;
    double held_window = 0;
    remapring_copies_t copies;
    unsigned copy_offset = (opts->headroom + 8 + 15) & ~15u;
    void *copy;
    struct stat st;
    double start, elapsed, desc_ratio, per_msg;
    unsigned nheld = 0, i, bursts = 0;
    int ret = -1;
    ucs_status_t status;

    remapring_pool_params_default(&pool_params);
    pool_params.block_size  = opts->block_size;
    pool_params.init_blocks = opts->nslots * 2;
    pool_params.grow_blocks = opts->nslots;
    pool_params.max_blocks  = opts->max_blocks;
    if (opts->punch_after >= 0) {
        pool_params.punch_after = opts->punch_after;
    }
    if (opts->punch_age_us >= 0) {
        pool_params.punch_age_ns = (uint64_t)(opts->punch_age_us * 1e3);
    }
    if (opts->fold_pages >= 0) {
        pool_params.fold_pages = opts->fold_pages;
    }

    remapring_ring_params_default(&ring_params);
    ring_params.nslots       = opts->nslots;
    ring_params.headroom     = opts->headroom;
    ring_params.credit_batch = opts->credit_batch;
    ring_params.inline_max   = opts->copy_max;

    ctl  = mmap(NULL, sizeof(*ctl), PROT_READ | PROT_WRITE,
                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    held = calloc(opts->hold_depth + 1, sizeof(*held));
    if ((ctl == MAP_FAILED) || (held == NULL)) {
        fprintf(stderr, "out of memory\n");
        return -1;
    }

    if (remapring_copy_init(&copies, "ring_bench-copies",
                            opts->copy_max ? (256ul << 20) : 0) != UCS_OK) {
        goto out_free;
    }

    if (remapring_pool_create(&pool_params, &pool) != UCS_OK) {
        goto out_copies;
    }

    if (remapring_ring_create(pool, &ring_params, ctl, &ring) != UCS_OK) {
        goto out_pool;
    }

    if (opts->cma) {
        status = remapring_wire_cma_create(getpid(), (uintptr_t)ring->view,
                                           ring->window_size, ctl, &wire);
    } else {
        status = remapring_wire_local_create(ring->view, ring->window_size, ctl,
                                             &wire);
    }
    if (status != UCS_OK) {
        goto out_ring;
    }

    remapring_ring_get_info(ring, &info);
    if (remapring_ring_writer_init(&writer, &info, wire) != UCS_OK) {
        goto out_wire;
    }

    if (size > remapring_ring_writer_max_payload(&writer)) {
        size        = remapring_ring_writer_max_payload(&writer);
        iov.iov_len = size;
    }

    memset(buf, 0x5a, sizeof(buf));
    warg.writer = &writer;
    warg.size   = size;
    warg.stop   = 0;
    warg.nsent  = 0;
    if (opts->threads &&
        (pthread_create(&thread, NULL, ring_bench_writer_thread, &warg) != 0)) {
        perror("pthread_create");
        goto out_wire;
    }

    start   = ring_bench_now();
    elapsed = 0;
    while (elapsed < opts->seconds) {
        if (!opts->threads) {
            /* writer: fill what credit allows */
            while (remapring_ring_writer_send(&writer, 1, 0, &iov, 1) ==
                   UCS_OK) {
            }
        }

        /* reader: drain */
        while ((status = remapring_ring_poll(ring, &rx)) == UCS_OK) {
            int hold = (ring_bench_rand(&rng) % 10000) < hold_threshold;

            if (opts->touch) {
                for (i = 0; i < rx.length; i += 8) {
                    sink += *(volatile uint64_t *)((char *)rx.payload + i);
                }
            }

            copy = NULL;
            if (hold && rx.is_inline) {
                /* kept out of a right-sized copy (UCX_REMAPRING_RX_COPY),
                 * after the headroom and a pointer */
                copy = remapring_copy_get(&copies, copy_offset + rx.length);
                if (copy == NULL) {
                    fprintf(stderr, "out of copies\n");
                    break;
                }
                memcpy((char *)copy + copy_offset, rx.payload, rx.length);
            }

            remapring_ring_consume(ring, &rx, hold && (copy == NULL));
            ++nmsgs;
            bytes += rx.length;
            if (!hold) {
                continue;
            }

            held[nheld].payload = (copy != NULL) ? copy : rx.payload;
            held[nheld].copy    = (copy != NULL);
            held[nheld].length  = rx.length;
            held_payload_now += rx.length;
            ++nheld;
            if (nheld <= opts->hold_depth) {
                continue;
            }

            /* steady state: sample what the holds keep (one release in
             * RING_BENCH_SAMPLE: a sample costs system calls), then let
             * one go */
            if ((nreleases++ % RING_BENCH_SAMPLE) == 0) {
                remapring_pool_get_stats(pool, &pool_stats);
                held_pool += (double)pool_stats.nheld_blocks * opts->block_size;
                held_memfd += ring_bench_held_memfd(pool);
                if ((copies.fd >= 0) && (fstat(copies.fd, &st) == 0)) {
                    held_memfd += (double)st.st_blocks * 512;
                }
                held_window += pool_stats.punch_window;
                held_payload += held_payload_now;
                ++nsamples;
            }

            i = opts->fifo ? 0 : (unsigned)(ring_bench_rand(&rng) % nheld);
            ring_bench_release(pool, &copies, &held[i]);
            held_payload_now -= held[i].length;
            if (opts->fifo) {
                memmove(&held[0], &held[1], (nheld - 1) * sizeof(*held));
            } else {
                held[i] = held[nheld - 1];
            }
            --nheld;
        }

        if (status != UCS_ERR_NO_PROGRESS) {
            fprintf(stderr, "poll failed: %s\n", ucs_status_string(status));
            break;
        }

        if ((++bursts & 63) == 0) {
            elapsed = ring_bench_now() - start;
        }
    }
    elapsed = ring_bench_now() - start;

    if (opts->threads) {
        warg.stop = 1;
        pthread_join(thread, NULL);
    }

    remapring_pool_get_stats(pool, &pool_stats);
    per_msg = remapring_ring_record_size(&writer.layout, 0, size);
    /* a held message keeps ceil(size / 8 KiB) whole descriptors */
    desc_ratio = (size == 0) ? 0 :
                               (double)((size + RING_BENCH_DESC_8K - 1) /
                                        RING_BENCH_DESC_8K) *
                                       RING_BENCH_DESC_8K / size;

    printf("%7zu %6.1f %12.0f %8.2f %10.0f %9.2f ", size, hold_pct,
           nmsgs / elapsed, bytes / elapsed / 1e9, pool_stats.nremaps / elapsed,
           pool_stats.nremaps ? pool_stats.remap_ns / 1e3 / pool_stats.nremaps :
                                0.0);
    if ((nsamples > 0) && (held_payload > 0)) {
        printf("%11.2f %11.2f %11.2f", held_pool / held_payload,
               held_memfd / held_payload, desc_ratio);
    } else {
        printf("%11s %11s %11.2f", "-", "-", desc_ratio);
    }
    printf(" %9.0f %8u", per_msg, pool_stats.nblocks);
    if (nsamples > 0) {
        printf(" %6.1f\n", held_window / nsamples);
    } else {
        printf(" %6s\n", "-");
    }
    fflush(stdout);
    ret = (sink == 1) ? 1 : 0; /* keep the reads */

    for (i = 0; i < nheld; ++i) {
        ring_bench_release(pool, &copies, &held[i]);
    }
out_wire:
    remapring_wire_destroy(wire);
out_ring:
    remapring_ring_destroy(ring);
out_pool:
    remapring_pool_destroy(pool);
out_copies:
    remapring_copy_cleanup(&copies);
out_free:
    free(held);
    munmap(ctl, sizeof(*ctl));
    return (ret < 0) ? -1 : 0;
}

static remapring_pool_params_t ring_bench_pool_defaults(void)
{
    remapring_pool_params_t params;

    remapring_pool_params_default(&params);
    return params;
}

static void ring_bench_usage(const char *prog)
{
    printf("Usage: %s [options]\n"
           "\n"
           "Measure the remapped ring engine alone (writer and reader in one\n"
           "process, through the in-process wire unless --cma).\n"
           "\n"
           "For each size and hold rate it prints:\n"
           "  msgs/s, GB/s   records through the engine (write + poll)\n"
           "  remaps/s       blocks remapped under a slot because records in\n"
           "                 it were held\n"
           "  remap_us       cost of one remap (mmap MAP_FIXED)\n"
           "  pool/held      bytes of pool kept by holds per byte of held\n"
           "                 payload (sampled in steady state, at one\n"
           "                 release in 32), in whole\n"
           "                 blocks\n"
           "  memfd/held     what the pool memfds hold for the holds, per\n"
           "                 byte of held payload: the resident pages of\n"
           "                 blocks that left their slots (those holds keep\n"
           "                 once the rest of their blocks is punched, and\n"
           "                 kept blocks not punched yet), the fold\n"
           "                 pages that partly used ones share, and with\n"
           "                 -i the copies\n"
           "  8K/held        the same for fixed 8 KiB receive descriptors\n"
           "  ring_B/msg     ring bytes one message takes (header, headroom,\n"
           "                 payload, 64-byte alignment)\n"
           "  blocks         pool size at the end\n"
           "  wait           detached blocks kept whole before they are\n"
           "                 punched (sampled as pool/held): -p scaled by\n"
           "                 the share of blocks whose holds all ended\n"
           "                 within -a, of late\n"
           "\n"
           "Options:\n"
           "  -t SEC     seconds per point (default 0.4)\n"
           "  -s LIST    message sizes, comma separated; 'max' is the slot\n"
           "             capacity (default 64,256,1024,4096,16384,max)\n"
           "  -H LIST    hold rates in percent (default 0,1,50)\n"
           "  -b BYTES   block size B (default 65536)\n"
           "  -n SLOTS   slots per ring (default 16)\n"
           "  -r BYTES   headroom (default 256; UCP 1.13 asks 80, to which\n"
           "             the transport adds 8: '-r 88' is what UCP pays)\n"
           "  -c SLOTS   credit batch (default 4)\n"
           "  -m BLOCKS  pool limit (default 4096)\n"
           "  -d N       records held at once before one is released\n"
           "             (default 256)\n"
           "  -p N       detached blocks kept whole before they are punched,\n"
           "             the newest ones, at most (default: the pool's, %u)\n"
           "  -a USEC    and for at most so long (default: the pool's, %.0f)\n"
           "  -F PAGES   pages folded at most (0: no folding; default: the\n"
           "             pool's, %u)\n"
           "  -i BYTES   records up to BYTES are inline, and a held one is\n"
           "             kept out of a right-sized copy (headroom, a pointer\n"
           "             and payload), as UCX_REMAPRING_RX_COPY does\n"
           "             (default 0: none)\n"
           "  -f         release the oldest held record (default: random)\n"
           "  -T         writer in its own thread\n"
           "  -C         write with process_vm_writev (cma wire, to self)\n"
           "  -R         reader reads every payload byte\n"
           "  -h         this help\n"
           "\n"
           "The default run takes about 10 s; e.g. '-t 5 -T' for a longer,\n"
           "two-thread run.\n",
           prog, ring_bench_pool_defaults().punch_after,
           ring_bench_pool_defaults().punch_age_ns / 1e3,
           ring_bench_pool_defaults().fold_pages);
}

static int
ring_bench_parse_list(const char *arg, int sizes, void *out, unsigned *count_p)
{
    char *copy = strdup(arg), *tok, *save = NULL;
    unsigned count = 0;

    for (tok = strtok_r(copy, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        if (count == RING_BENCH_MAX_LIST) {
            break;
        }
        if (sizes) {
            ((size_t *)out)[count++] = !strcmp(tok, "max") ?
                                               SIZE_MAX :
                                               strtoull(tok, NULL, 0);
        } else {
            ((double *)out)[count++] = strtod(tok, NULL);
        }
    }

    free(copy);
    *count_p = count;
    return (count > 0) ? 0 : -1;
}

int main(int argc, char **argv)
{
    ring_bench_opts_t opts = {.seconds      = 0.4,
                              .block_size   = 65536,
                              .nslots       = 16,
                              .headroom     = 256,
                              .credit_batch = 4,
                              .max_blocks   = 4096,
                              .hold_depth   = 256,
                              .punch_after  = -1,
                              .punch_age_us = -1,
                              .fold_pages   = -1,
                              .sizes  = {64, 256, 1024, 4096, 16384, SIZE_MAX},
                              .nsizes = 6,
                              .holds  = {0, 1, 50},
                              .nholds = 3};
    unsigned i, j;
    int c;

    while ((c = getopt(argc, argv, "t:s:H:b:n:r:c:m:d:p:a:F:i:fTCRh")) != -1) {
        switch (c) {
        case 't':
            opts.seconds = strtod(optarg, NULL);
            break;
        case 's':
            if (ring_bench_parse_list(optarg, 1, opts.sizes, &opts.nsizes)) {
                goto err_usage;
            }
            break;
        case 'H':
            if (ring_bench_parse_list(optarg, 0, opts.holds, &opts.nholds)) {
                goto err_usage;
            }
            break;
        case 'b':
            opts.block_size = strtoull(optarg, NULL, 0);
            break;
        case 'n':
            opts.nslots = strtoul(optarg, NULL, 0);
            break;
        case 'r':
            opts.headroom = strtoul(optarg, NULL, 0);
            break;
        case 'i':
            opts.copy_max = strtoul(optarg, NULL, 0);
            break;
        case 'c':
            opts.credit_batch = strtoul(optarg, NULL, 0);
            break;
        case 'm':
            opts.max_blocks = strtoul(optarg, NULL, 0);
            break;
        case 'd':
            opts.hold_depth = strtoul(optarg, NULL, 0);
            break;
        case 'p':
            opts.punch_after = atoi(optarg);
            break;
        case 'a':
            opts.punch_age_us = strtod(optarg, NULL);
            break;
        case 'F':
            opts.fold_pages = atol(optarg);
            break;
        case 'f':
            opts.fifo = 1;
            break;
        case 'T':
            opts.threads = 1;
            break;
        case 'C':
            opts.cma = 1;
            break;
        case 'R':
            opts.touch = 1;
            break;
        case 'h':
            ring_bench_usage(argv[0]);
            return 0;
        default:
            goto err_usage;
        }
    }

    if ((opts.block_size > (1 << 20)) || (opts.hold_depth == 0)) {
        fprintf(stderr, "block size at most 1 MiB, hold depth at least 1\n");
        return 1;
    }

    printf("# ring_bench: B %zu, %u slots (window %zu KiB), headroom %u, "
           "credit batch %u, pool max %u blocks, hold depth %u (%s), "
           "punch after %d or %.0f us, fold %ld pages, copies up to %u, "
           "%.2f s per point, %s wire%s%s\n",
           opts.block_size, opts.nslots, opts.block_size * opts.nslots / 1024,
           opts.headroom, opts.credit_batch, opts.max_blocks, opts.hold_depth,
           opts.fifo ? "fifo" : "random",
           (opts.punch_after >= 0) ?
                   opts.punch_after :
                   (int)ring_bench_pool_defaults().punch_after,
           (opts.punch_age_us >= 0) ?
                   opts.punch_age_us :
                   ring_bench_pool_defaults().punch_age_ns / 1e3,
           (opts.fold_pages >= 0) ? opts.fold_pages :
                                    (long)ring_bench_pool_defaults().fold_pages,
           opts.copy_max, opts.seconds, opts.cma ? "cma" : "local",
           opts.threads ? ", writer thread" : "",
           opts.touch ? ", reader touches payload" : "");
    printf("# fixed 8 KiB descriptors: 4095 x 8 KiB = %.1f MiB posted per "
           "interface; this ring: %zu KiB per peer + shared pool\n",
           4095 * 8192.0 / (1 << 20), opts.block_size * opts.nslots / 1024);
    printf("#  size  hold%%       msgs/s     GB/s   remaps/s  remap_us "
           "  pool/held  memfd/held     8K/held ring_B/msg   blocks   wait\n");

    for (i = 0; i < opts.nsizes; ++i) {
        for (j = 0; j < opts.nholds; ++j) {
            if (ring_bench_point(&opts, opts.sizes[i], opts.holds[j]) != 0) {
                return 1;
            }
        }
    }

    return 0;

err_usage:
    ring_bench_usage(argv[0]);
    return 1;
}
