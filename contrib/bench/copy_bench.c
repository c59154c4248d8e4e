/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * copy_bench: what a sender's copy into the reader's memory costs when the
 * destination lands a few bytes past the source modulo a page. Two threads
 * on the first two cpus play ping-pong through a shared buffer of 8 slots,
 * as a ring does: each copies its message from a private buffer into the
 * next slot (at page offset 0x68, where the first record of a slot puts an
 * eager UCP payload), then the other copies it out into its own buffer and
 * answers. For each size it prints the one-way time with memcpy and with
 * remapring_wire_copy() (ring_wire.h), for a source at page offset 0x40
 * (the destination 40 bytes past it) and at 0 (104 bytes past it).
 *
 * usage: copy_bench [-n ITERATIONS] [-s SIZE,SIZE,...]
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <uct/ib/remapring/ring/ring_wire.h>

#include <ucs/sys/math.h>

#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>


#define COPY_BENCH_SLOTS    8
#define COPY_BENCH_DST_OFF  0x68
#define COPY_BENCH_MAX_SIZE (4ul << 20)
#define COPY_BENCH_MAX_LIST 16


typedef struct {
    char *slots; /* shared, COPY_BENCH_SLOTS of slot_size */
    size_t slot_size;
    size_t size;
    size_t src_off;
    int wire_copy; /* remapring_wire_copy(), else memcpy */
    long iters;
    uint64_t seq; /* messages sent so far, both ways */
} copy_bench_t;


typedef struct {
    copy_bench_t *bench;
    int side;
    char *src; /* private */
    char *dst; /* private */
} copy_bench_side_t;


static double copy_bench_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void copy_bench_pin(int cpu)
{
    cpu_set_t set;

    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static char *copy_bench_slot(copy_bench_t *bench, uint64_t seq)
{
    return bench->slots + (seq % COPY_BENCH_SLOTS) * bench->slot_size +
           COPY_BENCH_DST_OFF;
}

/* message 2i goes from side 0 to side 1, message 2i + 1 back */
static void *copy_bench_run(void *arg)
{
    copy_bench_side_t *side = arg;
    copy_bench_t *bench     = side->bench;
    uint64_t seq;
    long i;

    copy_bench_pin(side->side);
    for (i = 0; i < bench->iters; ++i) {
        seq = 2 * i + side->side;
        if (side->side == 1) {
            while (__atomic_load_n(&bench->seq, __ATOMIC_ACQUIRE) != seq) {
            }
            memcpy(side->dst, copy_bench_slot(bench, seq - 1), bench->size);
        }

        if (bench->wire_copy) {
            remapring_wire_copy(copy_bench_slot(bench, seq),
                                side->src + bench->src_off, bench->size);
        } else {
            memcpy(copy_bench_slot(bench, seq), side->src + bench->src_off,
                   bench->size);
        }
        __atomic_store_n(&bench->seq, seq + 1, __ATOMIC_RELEASE);

        if (side->side == 0) {
            while (__atomic_load_n(&bench->seq, __ATOMIC_ACQUIRE) != seq + 2) {
            }
            memcpy(side->dst, copy_bench_slot(bench, seq + 1), bench->size);
        }
    }

    return NULL;
}

/* one-way time in microseconds */
static double copy_bench_point(copy_bench_t *bench, copy_bench_side_t *sides)
{
    pthread_t threads[2];
    double start;
    int i;

    bench->seq = 0;
    start      = copy_bench_now();
    for (i = 0; i < 2; ++i) {
        if (pthread_create(&threads[i], NULL, copy_bench_run, &sides[i])) {
            perror("pthread_create");
            exit(1);
        }
    }
    for (i = 0; i < 2; ++i) {
        pthread_join(threads[i], NULL);
    }

    return (copy_bench_now() - start) / (2.0 * bench->iters) * 1e6;
}

static void *copy_bench_map(size_t length, int shared)
{
    void *addr = mmap(NULL, length, PROT_READ | PROT_WRITE,
                      (shared ? MAP_SHARED : MAP_PRIVATE) | MAP_ANONYMOUS, -1,
                      0);

    if (addr == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }

    memset(addr, 1, length);
    return addr;
}

int main(int argc, char **argv)
{
    size_t sizes[COPY_BENCH_MAX_LIST] = {4096, 16384, 65536, 131072, 1048576};
    static const size_t src_offs[]    = {0x40, 0};
    unsigned nsizes                   = 5;
    long iters                        = 0;
    copy_bench_side_t sides[2];
    copy_bench_t bench;
    double t_memcpy, t_wire;
    char *list, *tok;
    unsigned i, j;
    int opt;

    while ((opt = getopt(argc, argv, "n:s:h")) != -1) {
        switch (opt) {
        case 'n':
            iters = atol(optarg);
            break;
        case 's':
            list = optarg;
            for (nsizes = 0; (tok = strtok(list, ",")) != NULL; list = NULL) {
                if ((nsizes == COPY_BENCH_MAX_LIST) ||
                    ((sizes[nsizes++] = strtoul(tok, NULL, 0)) == 0) ||
                    (sizes[nsizes - 1] > COPY_BENCH_MAX_SIZE)) {
                    fprintf(stderr,
                            "bad size list (1 to %lu bytes, at most"
                            " %d sizes)\n",
                            COPY_BENCH_MAX_SIZE, COPY_BENCH_MAX_LIST);
                    return 1;
                }
            }
            break;
        default:
            fprintf(stderr, "usage: %s [-n ITERATIONS] [-s SIZE,...]\n",
                    argv[0]);
            return opt == 'h' ? 0 : 1;
        }
    }

    bench.slot_size = COPY_BENCH_MAX_SIZE + 4096;
    bench.slots     = copy_bench_map(COPY_BENCH_SLOTS * bench.slot_size, 1);
    for (i = 0; i < 2; ++i) {
        sides[i].bench = &bench;
        sides[i].side  = i;
        sides[i].src   = copy_bench_map(bench.slot_size, 0);
        sides[i].dst   = copy_bench_map(bench.slot_size, 0);
    }

    printf("%-9s %-11s %-8s %12s %12s %7s\n", "size", "src offset", "distance",
           "memcpy us", "wire us", "ratio");
    for (i = 0; i < nsizes; ++i) {
        bench.size  = sizes[i];
        bench.iters = (iters > 0) ?
                              iters :
                              ucs_max(200l,
                                      (long)((1ul << 31) / bench.size / 2));
        for (j = 0; j < sizeof(src_offs) / sizeof(src_offs[0]); ++j) {
            bench.src_off   = src_offs[j];
            bench.wire_copy = 0;
            t_memcpy        = copy_bench_point(&bench, sides);
            bench.wire_copy = 1;
            t_wire          = copy_bench_point(&bench, sides);
            printf("%-9zu %#-11zx %-8d %12.2f %12.2f %7.2f\n", bench.size,
                   bench.src_off,
                   (int)((COPY_BENCH_DST_OFF - bench.src_off) & 4095), t_memcpy,
                   t_wire, t_wire / t_memcpy);
        }
    }

    return 0;
}
