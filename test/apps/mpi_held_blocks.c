/*
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * mpi_held_blocks: a few small unexpected messages pin a whole receive pool.
 *
 * Rank 1 sends rank 0, count times, a small message (tag 1) that rank 0
 * does not receive yet, then a large one (tag 0) that rank 0 receives at
 * once. Only when all have been sent does rank 0 receive the small ones,
 * checking every byte. MPI must complete this: the small messages wait in
 * rank 0's unexpected queue, count * small bytes in all (160 KB by
 * default).
 *
 * Over a transport whose receiver lends the upper layer its ring memory for
 * every unexpected eager message and waits for it back before it credits
 * the sender (remapring: the block of a ring slot holding a kept record is
 * detached and a free pool block takes its place; with none free the sender
 * waits), each small message pins a whole block, as the large one after it
 * does not fit in the rest of the slot: past UCX_REMAPRING_POOL_MAX / block
 * (1 GiB / 64 KiB = 16384 with the defaults, less the sender's ring) the
 * sender waits for credit that only rank 0's later receives could return,
 * and both ranks wait forever.
 *
 * Rank 0 prints progress every 4096 messages and "PASS" at the end.
 *
 * usage: mpirun -np 2 mpi_held_blocks [count [small [large]]]
 *        (20000, 8, 60000 bytes)
 */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char byte_of(long i, size_t off)
{
    return (unsigned char)(i * 131 + off * 7 + 1);
}

int main(int argc, char **argv)
{
    long          count = (argc > 1) ? atol(argv[1]) : 20000;
    size_t        small = (argc > 2) ? strtoul(argv[2], NULL, 0) : 8;
    size_t        large = (argc > 3) ? strtoul(argv[3], NULL, 0) : 60000;
    int           rank, nranks, errors = 0;
    unsigned char *buf;
    double        t0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if ((nranks != 2) || (count < 1) || (small < 1) || (large < 1)) {
        if (rank == 0) {
            fprintf(stderr, "usage: mpirun -np 2 mpi_held_blocks [count "
                    "[small [large]]]\n");
        }
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    buf = malloc((small > large) ? small : large);
    if (buf == NULL) {
        MPI_Abort(MPI_COMM_WORLD, 2);
    }

    t0 = MPI_Wtime();
    for (long i = 0; i < count; ++i) {
        if (rank == 1) {
            for (size_t k = 0; k < small; ++k) {
                buf[k] = byte_of(i, k);
            }
            MPI_Send(buf, small, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
            memset(buf, 0x5a, large);
            MPI_Send(buf, large, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
        } else {
            MPI_Recv(buf, large, MPI_BYTE, 1, 0, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
            if (((i + 1) % 4096) == 0) {
                printf("rank 0: %ld large messages received, %ld small "
                       "ones unexpected, %.1f s\n", i + 1, i + 1,
                       MPI_Wtime() - t0);
                fflush(stdout);
            }
        }
    }

    if (rank == 0) {
        for (long i = 0; i < count; ++i) {
            MPI_Recv(buf, small, MPI_BYTE, 1, 1, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
            for (size_t k = 0; k < small; ++k) {
                if (buf[k] != byte_of(i, k)) {
                    if (errors++ < 10) {
                        fprintf(stderr, "small message %ld byte %zu is "
                                "0x%02x, not 0x%02x\n", i, k, buf[k],
                                byte_of(i, k));
                    }
                    break;
                }
            }
        }
        printf("%s: %ld small messages received after %ld large ones, "
               "%d wrong, %.1f s\n", errors ? "FAIL" : "PASS", count,
               count, errors, MPI_Wtime() - t0);
    }
    free(buf);
    MPI_Finalize();
    return errors ? 1 : 0;
}
