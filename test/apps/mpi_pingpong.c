/*
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * mpi_pingpong: ranks 0 and 1 exchange messages of 0 B to 4 MiB (eager and
 * rendezvous sizes), each filled with a pattern of rank, size and
 * iteration, checked by the receiver byte for byte; then a nonblocking
 * burst of many messages outstanding at once, and an MPI_Allreduce over
 * all ranks. Prints the median round trip per size and "PASS"; exits
 * non-zero on any mismatch.
 *
 * usage: mpirun -np 2 mpi_pingpong [iterations [burst]]  (20, 64; burst <= 64)
 */
#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char pattern(int rank, size_t size, int iter, size_t off)
{
    uint64_t x = (uint64_t)rank * 0x9e3779b97f4a7c15ull ^ size * 31 ^
                 (uint64_t)iter * 0x100000001b3ull ^ (off / 8);

    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 32;
    return (unsigned char)(x >> (8 * (off % 8)));
}

static void fill(unsigned char *buf, int rank, size_t size, int iter)
{
    for (size_t i = 0; i < size; ++i) {
        buf[i] = pattern(rank, size, iter, i);
    }
}

static int check(const unsigned char *buf, int rank, size_t size, int iter)
{
    for (size_t i = 0; i < size; ++i) {
        if (buf[i] != pattern(rank, size, iter, i)) {
            fprintf(stderr, "mismatch: from rank %d size %zu iteration %d "
                    "offset %zu\n", rank, size, iter, i);
            return 1;
        }
    }
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double*)a, y = *(const double*)b;

    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    static const size_t sizes[] = {0, 1, 8, 1000, 4096, 65536, 300000,
                                   1 << 20, 4 << 20};
    int           nburst;
    const size_t  bsize  = 20000;
    int           rank, nranks, iters, errors = 0, peer, total;
    unsigned char *sbuf, *rbuf;
    double        *rtt;
    MPI_Request   reqs[2 * 64];
    MPI_Status    stats[2 * 64];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    iters  = (argc > 1) ? atoi(argv[1]) : 20;
    nburst = (argc > 2) ? atoi(argv[2]) : 64;
    if (nranks < 2 || iters < 1 || nburst < 0 || nburst > 64) {
        if (rank == 0) {
            fprintf(stderr, "needs 2 ranks or more, iterations >= 1, burst 0..64\n");
        }
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    sbuf = malloc(4 << 20);
    rbuf = malloc(4 << 20);
    rtt  = malloc(iters * sizeof(*rtt));
    if (!sbuf || !rbuf || !rtt) {
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    peer = 1 - rank;

    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); ++s) {
        size_t size = sizes[s];
        for (int it = 0; it < iters && rank < 2; ++it) {
            double t0 = MPI_Wtime();
            fill(sbuf, rank, size, it);
            if (rank == 0) {
                MPI_Send(sbuf, size, MPI_BYTE, peer, it, MPI_COMM_WORLD);
                MPI_Recv(rbuf, size, MPI_BYTE, peer, it, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(rbuf, size, MPI_BYTE, peer, it, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
                MPI_Send(sbuf, size, MPI_BYTE, peer, it, MPI_COMM_WORLD);
            }
            rtt[it] = (MPI_Wtime() - t0) * 1e6;
            errors += check(rbuf, peer, size, it);
        }
        if (rank == 0) {
            qsort(rtt, iters, sizeof(*rtt), cmp_double);
            printf("pingpong %8zu B: median round trip %9.1f usec\n", size,
                   rtt[iters / 2]);
            fflush(stdout);
        }
    }

    /* many messages in flight at once, both directions */
    if (rank < 2 && nburst > 0) {
        unsigned char *bs = malloc(nburst * bsize), *br = malloc(nburst * bsize);
        if (!bs || !br) {
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        for (int i = 0; i < nburst; ++i) {
            fill(bs + i * bsize, rank, bsize, 1000 + i);
            MPI_Irecv(br + i * bsize, bsize, MPI_BYTE, peer, 1000 + i,
                      MPI_COMM_WORLD, &reqs[i]);
        }
        for (int i = 0; i < nburst; ++i) {
            MPI_Isend(bs + i * bsize, bsize, MPI_BYTE, peer, 1000 + i,
                      MPI_COMM_WORLD, &reqs[nburst + i]);
        }
        MPI_Waitall(2 * nburst, reqs, stats);
        for (int i = 0; i < nburst; ++i) {
            errors += check(br + i * bsize, peer, bsize, 1000 + i);
        }
        free(bs);
        free(br);
        if (rank == 0) {
            printf("burst: %d x %zu B each way\n", nburst, bsize);
        }
    }

    /* allreduce of a vector large enough to take the rendezvous path */
    {
        const int n = 1 << 18;
        long      *v = malloc(n * sizeof(long)), *r = malloc(n * sizeof(long));
        if (!v || !r) {
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        for (int i = 0; i < n; ++i) {
            v[i] = (long)rank * n + i;
        }
        MPI_Allreduce(v, r, n, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        for (int i = 0; i < n; ++i) {
            long want = (long)n * nranks * (nranks - 1) / 2 +
                        (long)i * nranks;
            if (r[i] != want) {
                fprintf(stderr, "allreduce: element %d is %ld, not %ld\n",
                        i, r[i], want);
                ++errors;
                break;
            }
        }
        free(v);
        free(r);
        if (rank == 0) {
            printf("allreduce: %d longs over %d ranks\n", n, nranks);
        }
    }

    MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("%s (%d errors)\n", total ? "FAIL" : "PASS", total);
    }
    free(sbuf);
    free(rbuf);
    free(rtt);
    MPI_Finalize();
    return total ? 1 : 0;
}
