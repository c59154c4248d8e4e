/*
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * mpi_e2e: MPI end to end, every byte checked. Runs the sub-tests named on
 * the command line, in that order ("all", the default, is all five):
 *
 *   pingpong   pairs of ranks (0-1, 2-3, ...) exchange messages of 0 B to
 *              8 MiB, on either side of the short, block and rendezvous
 *              limits, every other iteration from an odd address; rank 0
 *              prints the median round trip of pair 0-1
 *   alltoallv  MPI_Alltoallv rounds with random counts (0 B to 1 MiB per
 *              pair) and random gaps between the blocks, drawn from the
 *              seed; the gaps of the receive buffer must stay untouched
 *   halo       2-D periodic halo exchange on an MPI_Cart grid: columns
 *              (a vector type, non-contiguous) to the left and right, then
 *              whole rows with the corners, contiguous, up and down, with
 *              MPI_Irecv/MPI_Isend; every cell, halo and interior, is
 *              checked against the value of its global coordinates
 *   storm      every rank sends many messages of several sizes to every
 *              other rank before any receive is posted (MPI_Isend, then a
 *              barrier), waits until the last one from each sender is
 *              visible, then drains them in reverse order of sending with
 *              MPI_Probe (by source, and MPI_ANY_SOURCE) and MPI_Iprobe
 *   threads    MPI_THREAD_MULTIPLE: two threads per rank send to and
 *              receive from their ring neighbours concurrently, on one
 *              communicator; skipped, with the reason, if the MPI does not
 *              grant MPI_THREAD_MULTIPLE (asked for only with this test)
 *
 * Each rank's content is a pattern of (test, source, destination, message);
 * a mismatch is reported with its offset and the number of bytes that
 * differ. Rank 0 prints one header line (ranks, seed, thread level), the
 * pid of every rank ("rank R pid P"), one result line per sub-test and
 * "PASS" or "FAIL"; the exit status is non-zero on any error.
 *
 * usage: mpirun -np N mpi_e2e [-s seed] [-i iterations] [-r rounds]
 *                             [-n messages] [-t iterations] [-p prefix]
 *                             [test...]
 *   -s  seed of the random sizes (default: from the clock, printed)
 *   -i  ping-pong iterations per size (default 4)
 *   -r  alltoallv rounds (default 6)
 *   -n  storm messages each rank receives, shared among its senders
 *       (default 240)
 *   -t  thread iterations per size (default 4)
 *   -p  at the end, each rank lists the numbers N of its mappings named
 *       <prefix>N in /proc/self/maps (with memfd:remapring-ctl-, the pids
 *       whose remapring control area it mapped to send to them); rank 0
 *       prints "rank R maps <prefix>: N..." for every rank
 */
#include <mpi.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define POISON 0xa5

enum {
    T_PINGPONG = 1,
    T_ALLTOALLV,
    T_HALO,
    T_STORM,
    T_THREADS
};

typedef struct {
    uint64_t seed;
    int      iters;
    int      rounds;
    int      storm;
    int      thr_iters;
} opts_t;

static int rank, nranks;
static int report_budget = 10;

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x  = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x  = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t key_of(uint64_t a, uint64_t b, uint64_t c, uint64_t d,
                       uint64_t e)
{
    return mix(mix(mix(mix(mix(a) ^ b) ^ c) ^ d) ^ e);
}

static uint64_t word_of(uint64_t key, size_t index)
{
    return mix(key + index);
}

/* one line on stderr, at most report_budget per rank (threads share it) */
static void report(const char *fmt, ...)
{
    char    line[512];
    va_list ap;

    if (__atomic_fetch_sub(&report_budget, 1, __ATOMIC_RELAXED) <= 0) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    /* one write, so that the lines of ranks sharing a stream stay whole */
    fprintf(stderr, "rank %d: %s", rank, line);
}

static void fill(void *buf, size_t size, uint64_t key)
{
    unsigned char *p = buf;
    uint64_t      w;
    size_t        i;

    for (i = 0; i + 8 <= size; i += 8) {
        w = word_of(key, i / 8);
        memcpy(p + i, &w, 8);
    }
    if (i < size) {
        w = word_of(key, i / 8);
        memcpy(p + i, &w, size - i);
    }
}

/* 0 if buf holds the pattern of key, else 1 with one report line saying
 * where and how much differs */
static int check(const void *buf, size_t size, uint64_t key,
                 const char *what, int peer, long msg)
{
    const unsigned char *p   = buf;
    size_t              bad  = 0, first = 0, last = 0;
    unsigned char       want[8], got_first = 0, want_first = 0;
    uint64_t            w;

    for (size_t i = 0; i < size; i += 8) {
        size_t n = (size - i < 8) ? size - i : 8;

        w = word_of(key, i / 8);
        if (!memcmp(p + i, &w, n)) {
            continue;
        }
        memcpy(want, &w, 8);
        for (size_t j = 0; j < n; ++j) {
            if (p[i + j] == want[j]) {
                continue;
            }
            if (!bad) {
                first      = i + j;
                got_first  = p[i + j];
                want_first = want[j];
            }
            last = i + j;
            ++bad;
        }
    }
    if (!bad) {
        return 0;
    }
    report("%s from rank %d message %ld size %zu: %zu bytes differ, first "
           "at offset %zu (0x%02x, not 0x%02x), last at %zu\n", what, peer,
           msg, size, bad, first, got_first, want_first, last);
    return 1;
}

/* 0 if buf[0..size) is all POISON (memory MPI must not have written) */
static int check_untouched(const unsigned char *buf, size_t size,
                           const char *what, size_t where)
{
    for (size_t i = 0; i < size; ++i) {
        if (buf[i] != POISON) {
            report("%s: byte %zu written (0x%02x), outside every message\n",
                   what, where + i, buf[i]);
            return 1;
        }
    }
    return 0;
}

static int count_of(MPI_Status *st)
{
    int count;

    MPI_Get_count(st, MPI_BYTE, &count);
    return count;
}

static void *xmalloc(size_t size)
{
    void *p = malloc(size ? size : 1);

    if (p == NULL) {
        fprintf(stderr, "rank %d: cannot allocate %zu bytes\n", rank, size);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return p;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double*)a, y = *(const double*)b;

    return (x > y) - (x < y);
}

/* either side of the short (16 KiB, less UCP's 8-byte header), block
 * (128 KiB; 64 KiB before) and rendezvous limits, and of the earlier 2 KiB
 * short limit */
static const size_t pp_sizes[] = {
    0, 1, 7, 8, 63, 64, 1000, 2047, 2048, 2049, 4095, 4096, 8192, 16375,
    16376, 16377, 16384, 32768, 65535, 65536, 65537, 130000, 131071, 131072,
    131073, 262144, 300000, 524288, 1 << 20, 2 << 20, 4 << 20, 8 << 20
};
#define PP_NSIZES (sizeof(pp_sizes) / sizeof(pp_sizes[0]))

static int test_pingpong(const opts_t *o, MPI_Comm comm)
{
    const size_t  max   = pp_sizes[PP_NSIZES - 1];
    int           peer  = rank ^ 1, errors = 0;
    unsigned char *sbuf = xmalloc(max + 1), *rbuf = xmalloc(max + 1);
    double        *rtt  = xmalloc(o->iters * sizeof(*rtt));
    MPI_Status    st;

    if (peer >= nranks) {
        peer = MPI_PROC_NULL; /* the last of an odd number of ranks */
    }
    for (size_t s = 0; s < PP_NSIZES; ++s) {
        size_t size = pp_sizes[s];

        for (int it = 0; (it < o->iters) && (peer != MPI_PROC_NULL); ++it) {
            /* odd iterations send from and receive into odd addresses */
            unsigned char *sp = sbuf + (it & 1), *rp = rbuf + (it & 1);
            uint64_t      skey = key_of(T_PINGPONG, rank, peer, it, size);
            uint64_t      rkey = key_of(T_PINGPONG, peer, rank, it, size);
            double        t0;

            fill(sp, size, skey);
            memset(rp, POISON, size);
            t0 = MPI_Wtime();
            if (rank < peer) {
                MPI_Send(sp, size, MPI_BYTE, peer, it, comm);
                MPI_Recv(rp, size, MPI_BYTE, peer, it, comm, &st);
            } else {
                MPI_Recv(rp, size, MPI_BYTE, peer, it, comm, &st);
                MPI_Send(sp, size, MPI_BYTE, peer, it, comm);
            }
            rtt[it] = (MPI_Wtime() - t0) * 1e6;
            if ((size_t)count_of(&st) != size) {
                report("pingpong: size %zu received as %d bytes\n", size,
                       count_of(&st));
                ++errors;
            }
            errors += check(rp, size, rkey, "pingpong", peer, it);
        }
        if (rank == 0) {
            qsort(rtt, o->iters, sizeof(*rtt), cmp_double);
            printf("   pingpong %8zu B: median round trip %9.1f us, "
                   "%8.1f MB/s\n", size, rtt[o->iters / 2],
                   2.0 * size / rtt[o->iters / 2]);
            fflush(stdout);
        }
    }
    free(rtt);
    free(rbuf);
    free(sbuf);
    return errors;
}

/* the random count (bytes) rank src sends to rank dst in round r, and the
 * random gap before it in the sender's and the receiver's buffer */
static void a2a_draw(const opts_t *o, int r, int src, int dst, int *count_p,
                     int *sgap_p, int *rgap_p)
{
    uint64_t x = key_of(o->seed, T_ALLTOALLV, r, src, dst);

    if ((x & 7) == 0) {
        *count_p = 0;
    } else {
        *count_p = (int)(mix(x) % (1ull << ((x >> 3) % 21))) + 1;
    }
    *sgap_p = (int)((x >> 16) % 64);
    *rgap_p = (int)((x >> 24) % 64);
}

static int test_alltoallv(const opts_t *o, MPI_Comm comm, size_t *bytes_p)
{
    int *scount = xmalloc(4 * nranks * sizeof(int));
    int *sdispl = scount + nranks, *rcount = sdispl + nranks;
    int *rdispl = rcount + nranks;
    int errors  = 0;

    *bytes_p = 0;
    for (int r = 0; r < o->rounds; ++r) {
        size_t        stotal = 0, rtotal = 0, at;
        unsigned char *sbuf, *rbuf;
        int           count, sgap, rgap;

        for (int j = 0; j < nranks; ++j) {
            a2a_draw(o, r, rank, j, &count, &sgap, &rgap);
            scount[j] = count;
            sdispl[j] = stotal + sgap;
            stotal   += sgap + count;
            a2a_draw(o, r, j, rank, &count, &sgap, &rgap);
            rcount[j] = count;
            rdispl[j] = rtotal + rgap;
            rtotal   += rgap + count;
        }
        rtotal += 64; /* a tail MPI must not write either */
        sbuf    = xmalloc(stotal);
        rbuf    = xmalloc(rtotal);
        memset(sbuf, POISON, stotal);
        memset(rbuf, POISON, rtotal);
        for (int j = 0; j < nranks; ++j) {
            fill(sbuf + sdispl[j], scount[j],
                 key_of(T_ALLTOALLV, rank, j, r, 0));
        }
        MPI_Alltoallv(sbuf, scount, sdispl, MPI_BYTE, rbuf, rcount, rdispl,
                      MPI_BYTE, comm);
        at = 0;
        for (int i = 0; i < nranks; ++i) {
            errors   += check_untouched(rbuf + at, rdispl[i] - at,
                                        "alltoallv", at);
            errors   += check(rbuf + rdispl[i], rcount[i],
                              key_of(T_ALLTOALLV, i, rank, r, 0),
                              "alltoallv", i, r);
            at        = rdispl[i] + rcount[i];
            *bytes_p += rcount[i];
        }
        at      = rdispl[nranks - 1] + rcount[nranks - 1];
        errors += check_untouched(rbuf + at, rtotal - at, "alltoallv", at);
        free(rbuf);
        free(sbuf);
    }
    free(scount);
    return errors;
}

/* halo: each rank holds an nx x ny block of the global grid and a halo w
 * cells wide around it; cell (x, y) of the array, 0 <= x < nx + 2w, is
 * global cell (cx * nx + x - w, cy * ny + y - w) wrapped around */
enum { HALO_NX = 1500, HALO_NY = 300, HALO_W = 12, HALO_STEPS = 12 };

static uint32_t halo_value(uint64_t seed, long gx, long gy, long gnx,
                           long gny, int step)
{
    gx = (gx + gnx) % gnx;
    gy = (gy + gny) % gny;
    return (uint32_t)mix(seed ^ mix((uint64_t)step << 40 ^
                                    (uint64_t)gy << 20 ^ (uint64_t)gx));
}

static int test_halo(const opts_t *o, int *dims)
{
    const int    nx = HALO_NX, ny = HALO_NY, w = HALO_W;
    const int    ax = nx + 2 * w, ay = ny + 2 * w;
    int          periods[2] = {1, 1}, coords[2], me, left, right, down, up;
    int          errors = 0;
    long         gnx, gny;
    uint32_t     *a = xmalloc((size_t)ax * ay * sizeof(*a));
    MPI_Comm     cart;
    MPI_Datatype col;
    MPI_Request  req[4];
    MPI_Status   st[4];

    dims[0] = dims[1] = 0;
    MPI_Dims_create(nranks, 2, dims);
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart);
    MPI_Comm_rank(cart, &me);
    MPI_Cart_coords(cart, me, 2, coords);
    MPI_Cart_shift(cart, 0, 1, &left, &right);
    MPI_Cart_shift(cart, 1, 1, &down, &up);
    gnx = (long)dims[0] * nx;
    gny = (long)dims[1] * ny;
    /* w columns of the ny interior rows */
    MPI_Type_vector(ny, w, ax, MPI_UINT32_T, &col);
    MPI_Type_commit(&col);

    for (int step = 0; step < HALO_STEPS; ++step) {
        int bad = 0;

        for (int y = 0; y < ay; ++y) {
            for (int x = 0; x < ax; ++x) {
                int inside = (x >= w) && (x < w + nx) && (y >= w) &&
                             (y < w + ny);

                a[(size_t)y * ax + x] = inside ?
                    halo_value(o->seed, (long)coords[0] * nx + x - w,
                               (long)coords[1] * ny + y - w, gnx, gny,
                               step) :
                    0xa5a5a5a5u;
            }
        }
        /* tag: direction of travel, 0 -x, 1 +x, 2 -y, 3 +y */
        MPI_Irecv(&a[(size_t)w * ax + w + nx], 1, col, right, 0, cart,
                  &req[0]);
        MPI_Irecv(&a[(size_t)w * ax], 1, col, left, 1, cart, &req[1]);
        MPI_Isend(&a[(size_t)w * ax + w], 1, col, left, 0, cart, &req[2]);
        MPI_Isend(&a[(size_t)w * ax + nx], 1, col, right, 1, cart, &req[3]);
        MPI_Waitall(4, req, st);
        /* whole rows, with the columns just received: the corners */
        MPI_Irecv(&a[(size_t)(w + ny) * ax], w * ax, MPI_UINT32_T, up, 2,
                  cart, &req[0]);
        MPI_Irecv(&a[0], w * ax, MPI_UINT32_T, down, 3, cart, &req[1]);
        MPI_Isend(&a[(size_t)w * ax], w * ax, MPI_UINT32_T, down, 2, cart,
                  &req[2]);
        MPI_Isend(&a[(size_t)ny * ax], w * ax, MPI_UINT32_T, up, 3, cart,
                  &req[3]);
        MPI_Waitall(4, req, st);

        for (int y = 0; y < ay; ++y) {
            for (int x = 0; x < ax; ++x) {
                uint32_t want = halo_value(o->seed,
                                           (long)coords[0] * nx + x - w,
                                           (long)coords[1] * ny + y - w,
                                           gnx, gny, step);
                uint32_t got  = a[(size_t)y * ax + x];

                if ((got != want) && !bad++) {
                    report("halo step %d: cell (%d, %d) of the %dx%d array "
                           "is 0x%08x, not 0x%08x\n", step, x, y, ax, ay,
                           got, want);
                }
            }
        }
        if (bad) {
            report("halo step %d: %d of %d cells wrong\n", step, bad,
                   ax * ay);
            ++errors;
        }
    }
    MPI_Type_free(&col);
    MPI_Comm_free(&cart);
    free(a);
    return errors;
}

static const size_t storm_sizes[] = {
    0, 1, 8, 100, 1000, 2048, 2049, 4096, 10000, 65535, 65536, 65537,
    150000, 1 << 20
};
#define STORM_NSIZES (sizeof(storm_sizes) / sizeof(storm_sizes[0]))

static size_t storm_size(int src, int i)
{
    return storm_sizes[(size_t)(i * 5 + src) % STORM_NSIZES];
}

static int storm_recv(MPI_Comm comm, MPI_Status *pst, int i,
                      unsigned char *buf, char *seen, int per_peer)
{
    int        src = pst->MPI_SOURCE, count = count_of(pst), errors = 0;
    size_t     size = storm_size(src, i);
    MPI_Status st;

    if (seen[(size_t)src * per_peer + i]++) {
        report("storm: message %d from rank %d probed twice\n", i, src);
        return 1;
    }
    if (pst->MPI_TAG != i || (size_t)count != size) {
        report("storm: probe of message %d from rank %d says tag %d size "
               "%d, not %zu\n", i, src, pst->MPI_TAG, count, size);
        return 1;
    }
    buf[size] = POISON;
    MPI_Recv(buf, count, MPI_BYTE, src, i, comm, &st);
    if ((st.MPI_SOURCE != src) || (count_of(&st) != count)) {
        report("storm: message %d from rank %d received from %d, %d "
               "bytes\n", i, src, st.MPI_SOURCE, count_of(&st));
        ++errors;
    }
    errors += check(buf, size, key_of(T_STORM, src, rank, i, 0), "storm",
                    src, i);
    errors += check_untouched(buf + size, 1, "storm", size);
    return errors;
}

static int test_storm(const opts_t *o, MPI_Comm comm, int *per_peer_p,
                      size_t *bytes_p)
{
    int           npeers   = nranks - 1, errors = 0, flag;
    int           per_peer = (o->storm + npeers - 1) / npeers;
    MPI_Request   *sreq    = xmalloc(sizeof(*sreq) * per_peer * npeers);
    unsigned char **sbuf   = xmalloc(sizeof(*sbuf) * per_peer * npeers);
    unsigned char *rbuf    = xmalloc((1 << 20) + 1);
    char          *seen    = calloc((size_t)nranks * per_peer, 1);
    MPI_Status    st, *sst;
    int           n = 0;

    *per_peer_p = per_peer;
    *bytes_p    = 0;
    if (seen == NULL) {
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (int i = 0; i < per_peer; ++i) {
        for (int d = 1; d <= npeers; ++d) {
            int    dst  = (rank + d) % nranks;
            size_t size = storm_size(rank, i);

            sbuf[n] = xmalloc(size);
            fill(sbuf[n], size, key_of(T_STORM, rank, dst, i, 0));
            MPI_Isend(sbuf[n], size, MPI_BYTE, dst, i, comm, &sreq[n]);
            ++n;
        }
    }
    /* every message has been sent before any receive is posted */
    MPI_Barrier(comm);
    /* messages from one sender match in order: once its last one is
     * visible, all of them have arrived unexpected */
    for (int d = 1; d <= npeers; ++d) {
        int src = (rank - d + nranks) % nranks;

        do {
            MPI_Iprobe(src, per_peer - 1, comm, &flag, &st);
        } while (!flag);
    }
    for (int i = per_peer - 1; i >= 0; --i) {
        switch (i % 3) {
        case 0: /* MPI_Probe by source, the senders in reverse order too */
            for (int d = npeers; d >= 1; --d) {
                MPI_Probe((rank - d + nranks) % nranks, i, comm, &st);
                errors += storm_recv(comm, &st, i, rbuf, seen, per_peer);
            }
            break;
        case 1: /* MPI_Iprobe by source */
            for (int d = 1; d <= npeers; ++d) {
                do {
                    MPI_Iprobe((rank - d + nranks) % nranks, i, comm, &flag,
                               &st);
                } while (!flag);
                errors += storm_recv(comm, &st, i, rbuf, seen, per_peer);
            }
            break;
        default: /* MPI_Probe of any source */
            for (int d = 1; d <= npeers; ++d) {
                MPI_Probe(MPI_ANY_SOURCE, i, comm, &st);
                errors += storm_recv(comm, &st, i, rbuf, seen, per_peer);
            }
            break;
        }
        for (int d = 1; d <= npeers; ++d) {
            *bytes_p += storm_size((rank - d + nranks) % nranks, i);
        }
    }
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &flag, &st);
    if (flag) {
        report("storm: a message from rank %d tag %d is left over\n",
               st.MPI_SOURCE, st.MPI_TAG);
        ++errors;
    }
    /* an array, not MPI_STATUSES_IGNORE: gcc 12 misreads MPICH's */
    sst = xmalloc(sizeof(*sst) * n);
    MPI_Waitall(n, sreq, sst);
    free(sst);
    for (int k = 0; k < n; ++k) {
        free(sbuf[k]);
    }
    free(seen);
    free(rbuf);
    free(sbuf);
    free(sreq);
    return errors;
}

/* threads: thread 0 sends to rank + 1 and receives from rank - 1, thread 1
 * the other way round, THR_DEPTH messages of each size in flight at once */
enum { THR_DEPTH = 4 };

static const size_t thr_sizes[] = {
    0, 8, 2048, 2049, 4096, 65536, 65537, 300000, 1 << 20
};
#define THR_NSIZES  (sizeof(thr_sizes) / sizeof(thr_sizes[0]))
#define THR_MAXSIZE (1 << 20)

typedef struct {
    const opts_t      *o;
    MPI_Comm          comm;
    pthread_barrier_t *start;
    int               t;
    int               errors;
    long              messages;
} thr_arg_t;

static void *thr_main(void *p)
{
    thr_arg_t     *a   = p;
    int           to   = (rank + (a->t ? nranks - 1 : 1)) % nranks;
    int           from = (rank + (a->t ? 1 : nranks - 1)) % nranks;
    unsigned char *sbuf = xmalloc(THR_DEPTH * (size_t)THR_MAXSIZE);
    unsigned char *rbuf = xmalloc(THR_DEPTH * (size_t)THR_MAXSIZE);
    MPI_Request   req[2 * THR_DEPTH];
    MPI_Status    st[2 * THR_DEPTH];

    pthread_barrier_wait(a->start);
    for (int it = 0; it < a->o->thr_iters; ++it) {
        for (size_t s = 0; s < THR_NSIZES; ++s) {
            size_t size = thr_sizes[s];

            for (int k = 0; k < THR_DEPTH; ++k) {
                long     msg = ((long)it * THR_NSIZES + s) * THR_DEPTH + k;
                int      tag = a->t * THR_DEPTH + k;
                uint64_t key = key_of(T_THREADS, rank, to, a->t, msg);

                MPI_Irecv(rbuf + k * THR_MAXSIZE, size, MPI_BYTE, from, tag,
                          a->comm, &req[k]);
                fill(sbuf + k * THR_MAXSIZE, size, key);
                MPI_Isend(sbuf + k * THR_MAXSIZE, size, MPI_BYTE, to, tag,
                          a->comm, &req[THR_DEPTH + k]);
            }
            MPI_Waitall(2 * THR_DEPTH, req, st);
            for (int k = 0; k < THR_DEPTH; ++k) {
                long     msg = ((long)it * THR_NSIZES + s) * THR_DEPTH + k;
                uint64_t key = key_of(T_THREADS, from, rank, a->t, msg);

                if ((size_t)count_of(&st[k]) != size) {
                    report("threads: thread %d size %zu received as %d "
                           "bytes\n", a->t, size, count_of(&st[k]));
                    ++a->errors;
                }
                a->errors += check(rbuf + k * THR_MAXSIZE, size, key,
                                   a->t ? "threads (thread 1)" :
                                          "threads (thread 0)", from, msg);
                ++a->messages;
            }
        }
    }
    free(rbuf);
    free(sbuf);
    return NULL;
}

static int test_threads(const opts_t *o, MPI_Comm comm, long *messages_p)
{
    pthread_barrier_t start;
    pthread_t         th[2];
    thr_arg_t         arg[2];

    pthread_barrier_init(&start, NULL, 2);
    for (int t = 0; t < 2; ++t) {
        arg[t] = (thr_arg_t){ .o = o, .comm = comm, .start = &start, .t = t };
        if (pthread_create(&th[t], NULL, thr_main, &arg[t])) {
            fprintf(stderr, "rank %d: pthread_create failed\n", rank);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    for (int t = 0; t < 2; ++t) {
        pthread_join(th[t], NULL);
    }
    pthread_barrier_destroy(&start);
    *messages_p = arg[0].messages + arg[1].messages;
    return arg[0].errors + arg[1].errors;
}

static const char *level_name(int level)
{
    switch (level) {
    case MPI_THREAD_SINGLE:     return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:   return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:   return "MPI_THREAD_MULTIPLE";
    default:                    return "unknown";
    }
}

/* the numbers N of this process's mappings named <prefix>N, each once, in
 * nums[0..MAX_MAPPED) (0 after the last one); rank 0 prints every rank's */
enum { MAX_MAPPED = 64 };

static void print_mappings(const char *prefix)
{
    int  nums[MAX_MAPPED] = {0}, *all = NULL, n = 0;
    char line[4096];
    FILE *f = fopen("/proc/self/maps", "r");

    while ((f != NULL) && (fgets(line, sizeof(line), f) != NULL)) {
        char *at = strstr(line, prefix);
        int  num, k;

        if ((at == NULL) ||
            (sscanf(at + strlen(prefix), "%d", &num) != 1)) {
            continue;
        }
        for (k = 0; (k < n) && (nums[k] != num); ++k) {
        }
        if ((k == n) && (n < MAX_MAPPED)) {
            nums[n++] = num;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    if (rank == 0) {
        all = xmalloc(sizeof(nums) * nranks);
    }
    MPI_Gather(nums, MAX_MAPPED, MPI_INT, all, MAX_MAPPED, MPI_INT, 0,
               MPI_COMM_WORLD);
    if (rank != 0) {
        return;
    }
    for (int r = 0; r < nranks; ++r) {
        printf("rank %d maps %s:", r, prefix);
        for (int k = 0; (k < MAX_MAPPED) && all[r * MAX_MAPPED + k]; ++k) {
            printf(" %d", all[r * MAX_MAPPED + k]);
        }
        printf("\n");
    }
    fflush(stdout);
    free(all);
}

static void usage(void)
{
    fprintf(stderr, "usage: mpi_e2e [-s seed] [-i iterations] [-r rounds] "
            "[-n messages] [-t iterations] [-p prefix]\n"
            "               [pingpong|alltoallv|halo|storm|threads|all]...\n");
}

int main(int argc, char **argv)
{
    static const char *names[] = {
        NULL, "pingpong", "alltoallv", "halo", "storm", "threads"
    };
    opts_t   o = { .seed = 0, .iters = 4, .rounds = 6, .storm = 240,
                   .thr_iters = 4 };
    const char *prefix = NULL;
    int      tests[64], ntests = 0, want_threads = 0, seeded = 0;
    int      failed = 0, c, provided;
    char     version[MPI_MAX_LIBRARY_VERSION_STRING];
    int      len, pid, *pids;
    MPI_Comm comm;

    while ((c = getopt(argc, argv, "s:i:r:n:t:p:h")) != -1) {
        switch (c) {
        case 's': o.seed = strtoull(optarg, NULL, 0); seeded = 1; break;
        case 'i': o.iters = atoi(optarg); break;
        case 'r': o.rounds = atoi(optarg); break;
        case 'n': o.storm = atoi(optarg); break;
        case 't': o.thr_iters = atoi(optarg); break;
        case 'p': prefix = optarg; break;
        default:  usage(); return 2;
        }
    }
    for (; optind < argc; ++optind) {
        int found = 0;

        for (int t = T_PINGPONG; t <= T_THREADS; ++t) {
            if (!strcmp(argv[optind], "all") ||
                !strcmp(argv[optind], names[t])) {
                if (ntests < 64) {
                    tests[ntests++] = t;
                }
                want_threads |= (t == T_THREADS);
                found = 1;
            }
        }
        if (!found) {
            fprintf(stderr, "mpi_e2e: no test '%s'\n", argv[optind]);
            usage();
            return 2;
        }
    }
    if (ntests == 0) {
        for (int t = T_PINGPONG; t <= T_THREADS; ++t) {
            tests[ntests++] = t;
        }
        want_threads = 1;
    }
    if ((o.iters < 1) || (o.rounds < 1) || (o.storm < 1) ||
        (o.thr_iters < 1)) {
        usage();
        return 2;
    }

    MPI_Init_thread(&argc, &argv,
                    want_threads ? MPI_THREAD_MULTIPLE : MPI_THREAD_SINGLE,
                    &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (nranks < 2) {
        if (rank == 0) {
            fprintf(stderr, "mpi_e2e: needs 2 ranks or more\n");
        }
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (!seeded && (rank == 0)) {
        o.seed = mix((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32)) &
                 0xffffffffull;
    }
    MPI_Bcast(&o.seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);

    pid  = getpid();
    pids = xmalloc(nranks * sizeof(*pids));
    MPI_Gather(&pid, 1, MPI_INT, pids, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        MPI_Get_library_version(version, &len);
        version[strcspn(version, "\n,")] = '\0';
        printf("mpi_e2e: %d ranks, seed %llu, thread level %s (asked %s), "
               "%s\n", nranks, (unsigned long long)o.seed,
               level_name(provided), want_threads ? "MPI_THREAD_MULTIPLE" :
               "MPI_THREAD_SINGLE", version);
        for (int r = 0; r < nranks; ++r) {
            printf("rank %d pid %d\n", r, pids[r]);
        }
        fflush(stdout);
    }
    free(pids);

    for (int k = 0; k < ntests; ++k) {
        int    t = tests[k], errors = 0, total, dims[2], per_peer = 0;
        size_t bytes = 0;
        long   messages = 0;
        double t0;
        char   what[160] = "";

        if ((t == T_THREADS) && (provided < MPI_THREAD_MULTIPLE)) {
            if (rank == 0) {
                printf("threads: SKIP: the MPI granted %s, not "
                       "MPI_THREAD_MULTIPLE\n", level_name(provided));
                fflush(stdout);
            }
            continue;
        }
        if (rank == 0) {
            printf("%s: start\n", names[t]);
            fflush(stdout);
        }
        MPI_Comm_dup(MPI_COMM_WORLD, &comm);
        MPI_Barrier(comm);
        t0 = MPI_Wtime();
        switch (t) {
        case T_PINGPONG:
            errors = test_pingpong(&o, comm);
            snprintf(what, sizeof(what), "%d pairs, %zu sizes 0 B to %zu "
                     "MiB, %d iterations", nranks / 2, PP_NSIZES,
                     pp_sizes[PP_NSIZES - 1] >> 20, o.iters);
            break;
        case T_ALLTOALLV:
            errors = test_alltoallv(&o, comm, &bytes);
            snprintf(what, sizeof(what), "%d rounds, seed %llu, rank 0 "
                     "received %zu bytes", o.rounds,
                     (unsigned long long)o.seed, bytes);
            break;
        case T_HALO:
            errors = test_halo(&o, dims);
            snprintf(what, sizeof(what), "%dx%d ranks, %dx%d cells each, "
                     "halo %d, %d steps", dims[0], dims[1], HALO_NX,
                     HALO_NY, HALO_W, HALO_STEPS);
            break;
        case T_STORM:
            errors = test_storm(&o, comm, &per_peer, &bytes);
            snprintf(what, sizeof(what), "%d messages from each of %d "
                     "senders, rank 0 drained %zu bytes", per_peer,
                     nranks - 1, bytes);
            break;
        case T_THREADS:
            errors = test_threads(&o, comm, &messages);
            snprintf(what, sizeof(what), "2 threads, rank 0 received %ld "
                     "messages", messages);
            break;
        }
        MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, comm);
        MPI_Comm_free(&comm);
        if (rank == 0) {
            printf("%s: %s, %d errors, %.2f s (%s)\n", names[t],
                   total ? "FAIL" : "ok", total, MPI_Wtime() - t0, what);
            fflush(stdout);
        }
        failed += (total != 0);
    }

    if (prefix != NULL) {
        print_mappings(prefix);
    }
    if (rank == 0) {
        printf("%s\n", failed ? "FAIL" : "PASS");
    }
    MPI_Finalize();
    return failed ? 1 : 0;
}
