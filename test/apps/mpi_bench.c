/*
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * mpi_bench: point-to-point and collective figures between ranks 0 and 1
 * (the other ranks, if any, only join the allreduce), for each message size:
 *   lat        one-way latency of a ping-pong (round trip / 2), usec
 *   bw         bandwidth of windows of nonblocking sends from rank 0 to 1,
 *              each window acknowledged by a zero-byte message; MB/s
 *              (2^20 bytes, as ucx_perftest counts)
 *   rate       messages per second of the same windows (sizes <= 4 KiB)
 *   bibw       both ranks send a window to each other at once; MB/s of
 *              both directions together
 *   mbw        multi-pair bandwidth: every rank of the first half sends
 *              windows to its partner in the second half (rank i to
 *              i + n/2; an even number of ranks), all pairs at once, as
 *              osu_mbw_mr does; MB/s of all pairs together
 *   allreduce  time of one MPI_Allreduce (MPI_SUM) over all ranks of
 *              size / 8 doubles (at least one), usec
 *   fresh      the ping-pong of lat, with both buffers malloc()ed for each
 *              message and freed after it: what a program that does not
 *              keep its buffers pays (above the allocator's mmap threshold,
 *              an munmap() per buffer, which every registration cache must
 *              hear of); checks every message's bytes, so a stale cache
 *              shows as wrong data; usec
 * Rank 0 prints one line per figure, "mpi_bench: TEST SIZE METRIC VALUE",
 * and "PASS" at the end. A benchmark, not a test: it checks only that the
 * first and last byte of each ping-pong arrived.
 *
 * usage: mpirun -np 2 mpi_bench [-s SIZES] [-n ITERS] [-N ITERS] [-t TESTS]
 *   -s  comma separated sizes in bytes (default 8,64,1024,4096,65536,
 *       1048576,4194304)
 *   -n  iterations below 64 KiB (default 10000): round trips, messages
 *       sent, allreduce calls; -N the same from 64 KiB on (default 200)
 *   -t  comma separated tests (default lat,bw,bibw,allreduce; rate comes
 *       with bw; mbw and fresh only when asked)
 */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_SIZES   32
#define MAX_WINDOW  64
#define WINDOW_MEM  (16ul << 20)  /* bytes of one window, at most */
#define LARGE       65536
#define SMALL_RATE  4096          /* largest size with a message rate */

enum {
    TEST_LAT       = 1 << 0,
    TEST_BW        = 1 << 1,
    TEST_BIBW      = 1 << 2,
    TEST_ALLREDUCE = 1 << 3,
    TEST_MBW       = 1 << 4,
    TEST_FRESH     = 1 << 5
};

static int rank, nranks;

static void usage(void)
{
    if (rank == 0) {
        fprintf(stderr, "usage: mpi_bench [-s SIZES] [-n ITERS] [-N ITERS] "
                        "[-t lat,bw,bibw,allreduce,mbw,fresh]\n");
    }
    MPI_Finalize();
    exit(2);
}

static void report(const char *test, size_t size, const char *metric,
                   double value)
{
    printf("mpi_bench: %s %zu %s %.3f\n", test, size, metric, value);
    fflush(stdout);
}

static size_t window_of(size_t size)
{
    size_t w = WINDOW_MEM / (size ? size : 1);

    return w > MAX_WINDOW ? MAX_WINDOW : (w < 2 ? 2 : w);
}

static void bench_lat(char *sbuf, char *rbuf, size_t size, int iters)
{
    int warmup = iters / 10 + 1, i;
    double t0 = 0;

    if (rank > 1) {
        return;
    }
    sbuf[0] = sbuf[size - 1] = (char)(0x5a + rank);
    for (i = 0; i < warmup + iters; ++i) {
        if (i == warmup) {
            t0 = MPI_Wtime();
        }
        if (rank == 0) {
            MPI_Send(sbuf, size, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(rbuf, size, MPI_BYTE, 1, 1, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(rbuf, size, MPI_BYTE, 0, 1, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
            MPI_Send(sbuf, size, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
        }
    }
    if (rank == 0) {
        if ((rbuf[0] != 0x5b) || (rbuf[size - 1] != 0x5b)) {
            fprintf(stderr, "mpi_bench: lat %zu: wrong data\n", size);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        report("lat", size, "lat",
               (MPI_Wtime() - t0) * 1e6 / (2.0 * iters));
    }
}

/* rank 0 sends windows to rank 1 (bi: and rank 1 to rank 0 at once) */
static void bench_bw(char *sbuf, char *rbuf, size_t size, int iters, int bi)
{
    size_t window = window_of(size), w;
    int loops = (iters + window - 1) / window, warmup = loops / 10 + 1, i;
    MPI_Request req[2 * MAX_WINDOW];
    /* not MPI_STATUSES_IGNORE: gcc 12 warns about MPICH's prototype */
    MPI_Status st[2 * MAX_WINDOW];
    int peer = 1 - rank, n;
    double t0 = 0, t;

    if (rank > 1) {
        return;
    }
    for (i = 0; i < warmup + loops; ++i) {
        if (i == warmup) {
            t0 = MPI_Wtime();
        }
        n = 0;
        for (w = 0; w < window; ++w) {
            if ((rank == 1) || bi) {
                MPI_Irecv(rbuf + w * size, size, MPI_BYTE, peer, 2,
                          MPI_COMM_WORLD, &req[n++]);
            }
        }
        for (w = 0; w < window; ++w) {
            if ((rank == 0) || bi) {
                MPI_Isend(sbuf + w * size, size, MPI_BYTE, peer, 2,
                          MPI_COMM_WORLD, &req[n++]);
            }
        }
        MPI_Waitall(n, req, st);
        /* the window is done when the receiver says so */
        if (rank == 0) {
            MPI_Recv(NULL, 0, MPI_BYTE, 1, 3, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        } else {
            MPI_Send(NULL, 0, MPI_BYTE, 0, 3, MPI_COMM_WORLD);
        }
    }
    t = MPI_Wtime() - t0;
    if (rank == 0) {
        double msgs = (double)loops * window * (bi ? 2 : 1);

        report(bi ? "bibw" : "bw", size, "bw",
               msgs * size / t / (1024.0 * 1024.0));
        if (!bi && (size <= SMALL_RATE)) {
            report("bw", size, "rate", msgs / t);
        }
    }
}

/* every rank of the first half sends windows to its partner in the second
 * half, all pairs at once; the time is the slowest pair's (a barrier before
 * and after) */
static void bench_mbw(char *sbuf, char *rbuf, size_t size, int iters)
{
    size_t window = window_of(size), w;
    int loops = (iters + window - 1) / window, warmup = loops / 10 + 1, i;
    int pairs = nranks / 2, sender = rank < pairs;
    int peer = sender ? rank + pairs : rank - pairs;
    MPI_Request req[MAX_WINDOW];
    MPI_Status st[MAX_WINDOW];
    double t0 = 0, t;

    for (i = 0; i < warmup + loops; ++i) {
        if (i == warmup) {
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = MPI_Wtime();
        }
        for (w = 0; w < window; ++w) {
            if (sender) {
                MPI_Isend(sbuf + w * size, size, MPI_BYTE, peer, 4,
                          MPI_COMM_WORLD, &req[w]);
            } else {
                MPI_Irecv(rbuf + w * size, size, MPI_BYTE, peer, 4,
                          MPI_COMM_WORLD, &req[w]);
            }
        }
        MPI_Waitall(window, req, st);
        if (sender) {
            MPI_Recv(NULL, 0, MPI_BYTE, peer, 5, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        } else {
            MPI_Send(NULL, 0, MPI_BYTE, peer, 5, MPI_COMM_WORLD);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    t = MPI_Wtime() - t0;
    if (!sender && ((rbuf[0] != (char)(0x5a + peer)) ||
                    (rbuf[window * size - 1] != (char)(0x5a + peer)))) {
        fprintf(stderr, "mpi_bench: mbw %zu: wrong data on rank %d\n", size,
                rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (rank == 0) {
        report("mbw", size, "bw",
               (double)pairs * loops * window * size / t / (1024.0 * 1024.0));
    }
}

static char *fresh_buf(size_t size)
{
    char *buf = malloc(size);

    if (buf == NULL) {
        fprintf(stderr, "mpi_bench: no memory for %zu bytes\n", size);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return buf;
}

/* the ping-pong of bench_lat with new buffers for every message; each
 * message's bytes say which message it is, and its receiver checks them */
static void bench_fresh(size_t size, int iters)
{
    int warmup = iters / 10 + 1, i, peer = 1 - rank;
    char *sbuf, *rbuf, want;
    double t0 = 0;

    if (rank > 1) {
        return;
    }
    for (i = 0; i < warmup + iters; ++i) {
        if (i == warmup) {
            t0 = MPI_Wtime();
        }
        rbuf = fresh_buf(size);
        want = (char)(2 * i + 1 - rank); /* what the peer sends now */
        if (rank == 1) {
            MPI_Recv(rbuf, size, MPI_BYTE, 0, 6, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        }
        sbuf = fresh_buf(size);
        memset(sbuf, (char)(2 * i + rank), size);
        MPI_Send(sbuf, size, MPI_BYTE, peer, 6, MPI_COMM_WORLD);
        free(sbuf);
        if (rank == 0) {
            MPI_Recv(rbuf, size, MPI_BYTE, 1, 6, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        }
        if ((rbuf[0] != want) || (rbuf[size / 2] != want) ||
            (rbuf[size - 1] != want)) {
            fprintf(stderr,
                    "mpi_bench: fresh %zu: message %d: wrong data "
                    "on rank %d (0x%02x, want 0x%02x)\n",
                    size, i, rank, (unsigned char)rbuf[size / 2],
                    (unsigned char)want);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        free(rbuf);
    }
    if (rank == 0) {
        report("fresh", size, "lat", (MPI_Wtime() - t0) * 1e6 / (2.0 * iters));
    }
}

static void bench_allreduce(size_t size, int iters)
{
    int count = size / sizeof(double) ? size / sizeof(double) : 1;
    int warmup = iters / 10 + 1, i;
    double *in, *out, t0 = 0;

    in  = calloc(count, sizeof(double));
    out = calloc(count, sizeof(double));
    if ((in == NULL) || (out == NULL)) {
        fprintf(stderr, "mpi_bench: no memory for %d doubles\n", count);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* every element written, as an application's data is: a buffer
     * calloc() left untouched reads the one zero page at every address
     * (several times slower than memory on some CPUs) */
    for (i = 0; i < count; ++i) {
        in[i] = rank + 1;
    }
    for (i = 0; i < warmup + iters; ++i) {
        if (i == warmup) {
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = MPI_Wtime();
        }
        MPI_Allreduce(in, out, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    if (rank == 0) {
        if ((out[0] != nranks * (nranks + 1) / 2.0) ||
            (out[count - 1] != out[0])) {
            fprintf(stderr, "mpi_bench: allreduce %zu: wrong sum\n", size);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        report("allreduce", size, "lat", (MPI_Wtime() - t0) * 1e6 / iters);
    }
    free(in);
    free(out);
}

static int parse_tests(const char *arg)
{
    char *copy = strdup(arg), *save = NULL, *tok;
    int tests  = 0;

    for (tok = strtok_r(copy, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        if (!strcmp(tok, "lat")) {
            tests |= TEST_LAT;
        } else if (!strcmp(tok, "bw") || !strcmp(tok, "rate")) {
            tests |= TEST_BW;
        } else if (!strcmp(tok, "bibw")) {
            tests |= TEST_BIBW;
        } else if (!strcmp(tok, "allreduce")) {
            tests |= TEST_ALLREDUCE;
        } else if (!strcmp(tok, "mbw")) {
            tests |= TEST_MBW;
        } else if (!strcmp(tok, "fresh")) {
            tests |= TEST_FRESH;
        } else {
            free(copy);
            usage();
        }
    }
    free(copy);
    return tests;
}

int main(int argc, char **argv)
{
    size_t sizes[MAX_SIZES] = {8, 64, 1024, 4096, 65536, 1 << 20, 4 << 20};
    int nsizes = 7, small = 10000, large = 200, c, s, iters;
    int tests = TEST_LAT | TEST_BW | TEST_BIBW | TEST_ALLREDUCE;
    size_t max_size = 0, buf_size;
    char *sbuf, *rbuf, *p, *end;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);

    while ((c = getopt(argc, argv, "s:n:N:t:h")) != -1) {
        switch (c) {
        case 's':
            for (nsizes = 0, p = optarg; *p != '\0'; p = end + (*end == ',')) {
                if (nsizes == MAX_SIZES) {
                    usage();
                }
                sizes[nsizes] = strtoul(p, &end, 10);
                if ((end == p) || (sizes[nsizes++] == 0)) {
                    usage();
                }
            }
            break;
        case 'n':
            small = atoi(optarg);
            break;
        case 'N':
            large = atoi(optarg);
            break;
        case 't':
            tests = parse_tests(optarg);
            break;
        default:
            usage();
        }
    }
    if ((tests & TEST_MBW) && (nranks % 2)) {
        if (rank == 0) {
            fprintf(stderr, "mpi_bench: mbw pairs the ranks: %d is odd\n",
                    nranks);
        }
        usage();
    }
    if ((nranks < 2) || (small <= 0) || (large <= 0) || (nsizes == 0)) {
        usage();
    }

    for (s = 0; s < nsizes; ++s) {
        buf_size = sizes[s] * window_of(sizes[s]);
        max_size = buf_size > max_size ? buf_size : max_size;
    }
    sbuf = malloc(max_size);
    rbuf = malloc(max_size);
    if ((sbuf == NULL) || (rbuf == NULL)) {
        fprintf(stderr, "mpi_bench: no memory for %zu bytes\n", max_size);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(sbuf, 0x5a + rank, max_size);
    memset(rbuf, 0, max_size);

    for (s = 0; s < nsizes; ++s) {
        iters = sizes[s] < LARGE ? small : large;
        if (tests & TEST_LAT) {
            bench_lat(sbuf, rbuf, sizes[s], iters);
        }
        if (tests & TEST_BW) {
            bench_bw(sbuf, rbuf, sizes[s], iters, 0);
        }
        if (tests & TEST_BIBW) {
            bench_bw(sbuf, rbuf, sizes[s], iters, 1);
        }
        if (tests & TEST_ALLREDUCE) {
            bench_allreduce(sizes[s], iters);
        }
        if (tests & TEST_MBW) {
            bench_mbw(sbuf, rbuf, sizes[s], iters);
        }
        if (tests & TEST_FRESH) {
            bench_fresh(sizes[s], iters);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }

    free(sbuf);
    free(rbuf);
    if (rank == 0) {
        printf("PASS\n");
    }
    MPI_Finalize();
    return 0;
}
