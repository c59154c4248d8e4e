/*
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * One core's memcpy() bandwidth at each size, the yardstick of bench.sh's
 * large-message table: usage memcpy_bw [-c] SIZES RUN, SIZES in bytes,
 * comma separated. For each size it copies one buffer into another of the
 * same size, over and over, as ucx_perftest sends one buffer over and over
 * (so the data stays in cache where it fits, as there), until about 2 GiB
 * have moved (at least 20 copies), and prints one line of a contrib/bench
 * raw CSV: memcpy,SIZE,bw,memcpy,RUN,MB/s (2^20 bytes a second).
 *
 * With -c it prints instead what two processes of this machine move at
 * each size with nothing of a transport around the copies, for each way a
 * transport can move the bytes (rows "plain copy,SIZE,bw,WAY,RUN,MB/s"):
 *   1copy-cma  one process_vm_readv() of the whole message from the other
 *              process's buffer into its own, over and over: one copy, the
 *              kernel pinning the other process's pages each call (what
 *              cma's rendezvous does, and remapring's shared copies in two
 *              halves)
 *   2copy-shm  the sender copies each message in 256 KiB pieces into 4
 *              slots of a shared mapping, the receiver copies each piece
 *              out as it lands: two copies on two cores, overlapped (what
 *              a ring does, remapring's eager messages)
 * Both use buffers reused from message to message, as memcpy and
 * ucx_perftest do, and whatever cores the scheduler gives them; the
 * receiver of 2copy-shm and the sender waiting for a free slot spin, as the
 * transports poll, so a run in which the two are not on two cores at once
 * moves less.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PLAIN_SLOT_SIZE (256ul << 10)
#define PLAIN_NSLOTS    4
#define PLAIN_LINE      64

static double now_sec(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* How many messages of @a size a run moves: about 2 GiB, at least 20 */
static size_t run_count(size_t size)
{
    size_t count = ((size_t)2 << 30) / size;

    return (count < 20) ? 20 : count;
}

/* A buffer of @a size bytes on whole pages, faulted in, or NULL */
static void *buffer(size_t size, int fill)
{
    void *p = aligned_alloc(4096, (size + 4095) & ~(size_t)4095);

    if (p != NULL) {
        memset(p, fill, size);
    }
    return p;
}

/* A raw CSV row: @a count copies of @a size bytes in @a elapsed seconds,
 * in MB/s (2^20 bytes a second) */
static void report(const char *bench, const char *way, size_t size,
                   size_t count, double elapsed, const char *run)
{
    printf("%s,%zu,bw,%s,%s,%.1f\n", bench, size, way, run,
           (double)size * count / elapsed / (1 << 20));
}

static int measure(size_t size, const char *run)
{
    size_t count = run_count(size), i;
    char *src    = buffer(size, 0x5a);
    char *dst    = buffer(size, 0); /* both faulted in before the clock */
    double start, elapsed;

    if ((src == NULL) || (dst == NULL)) {
        fprintf(stderr, "memcpy_bw: cannot allocate 2 x %zu bytes\n", size);
        free(src);
        free(dst);
        return -1;
    }

    start = now_sec();
    for (i = 0; i < count; ++i) {
        memcpy(dst, src, size);
        /* the copy is used: the compiler may not drop or merge it */
        __asm__ volatile("" : : "r"(dst) : "memory");
    }
    elapsed = now_sec() - start;

    report("memcpy", "memcpy", size, count, elapsed, run);
    free(src);
    free(dst);
    return 0;
}

static void spin(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    __asm__ volatile("" : : : "memory");
#endif
}

/* 1copy-cma: one process_vm_readv() a message from a child's buffer */
static int plain_cma(size_t size, const char *run)
{
    size_t count = run_count(size), i;
    volatile uint64_t *shared;
    struct iovec local, remote;
    double start, elapsed;
    int fds[2], rc = -1;
    ssize_t n;
    pid_t pid;
    char c;

    shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if ((shared == MAP_FAILED) || (pipe(fds) != 0)) {
        perror("memcpy_bw: 1copy-cma");
        return -1;
    }

    pid = fork();
    if (pid == 0) {
        /* the child's buffer stays put until the pipe closes */
        char *src = buffer(size, 0x5a);

        close(fds[1]);
        shared[0] = (uintptr_t)src;
        __atomic_store_n(&shared[1], (src != NULL) ? 1 : 2, __ATOMIC_RELEASE);
        while (read(fds[0], &c, 1) > 0) {
        }
        _exit(0);
    }
    close(fds[0]);
    if (pid < 0) {
        perror("memcpy_bw: fork");
        goto out;
    }

    local.iov_base = buffer(size, 0);
    local.iov_len  = size;
    while (__atomic_load_n(&shared[1], __ATOMIC_ACQUIRE) == 0) {
        usleep(100);
    }
    if ((shared[1] != 1) || (local.iov_base == NULL)) {
        fprintf(stderr, "memcpy_bw: 1copy-cma: cannot allocate %zu bytes\n",
                size);
        goto out_child;
    }
    remote.iov_base = (void*)(uintptr_t)shared[0];
    remote.iov_len  = size;

    start = now_sec();
    for (i = 0; i < count; ++i) {
        n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
        if (n != (ssize_t)size) {
            perror("memcpy_bw: 1copy-cma: process_vm_readv");
            goto out_child;
        }
    }
    elapsed = now_sec() - start;
    report("plain copy", "1copy-cma", size, count, elapsed, run);
    rc = 0;

out_child:
    free(local.iov_base);
out:
    close(fds[1]);
    if (pid > 0) {
        waitpid(pid, NULL, 0);
    }
    munmap((void*)shared, 4096);
    return rc;
}

/* The mapping the two processes of 2copy-shm share: each counter on a line
 * of its own, then the slots */
typedef struct {
    uint64_t produced; /* pieces written, by the sender */
    char     pad1[PLAIN_LINE - sizeof(uint64_t)];
    uint64_t consumed; /* pieces read, by the receiver */
    char     pad2[PLAIN_LINE - sizeof(uint64_t)];
    uint64_t ready;    /* 1: the receiver is set; 2: it could not be */
    char     pad3[4096 - 2 * PLAIN_LINE - sizeof(uint64_t)];
    char     slots[PLAIN_NSLOTS][PLAIN_SLOT_SIZE];
} plain_ring_t;

/* The bytes of the piece of a @a size message at @a off: a slot's, or
 * what is left */
static size_t plain_piece(size_t size, size_t off)
{
    return ((size - off) < PLAIN_SLOT_SIZE) ? (size - off) : PLAIN_SLOT_SIZE;
}

/* 2copy-shm: a sender copies into 4 slots, a receiver copies out */
static int plain_shm(size_t size, const char *run)
{
    size_t count = run_count(size), piece = PLAIN_SLOT_SIZE;
    size_t per_msg = (size + piece - 1) / piece;
    uint64_t total = (uint64_t)count * per_msg, i;
    double start, elapsed;
    plain_ring_t *ring;
    size_t off, len;
    char *src;
    pid_t pid;

    ring = mmap(NULL, sizeof(*ring), PROT_READ | PROT_WRITE,
                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (ring == MAP_FAILED) {
        perror("memcpy_bw: 2copy-shm");
        return -1;
    }
    memset(ring, 0, sizeof(*ring));

    pid = fork();
    if (pid == 0) {
        char *dst = buffer(size, 0);

        __atomic_store_n(&ring->ready, (dst != NULL) ? 1 : 2,
                         __ATOMIC_RELEASE);
        for (i = 0; (dst != NULL) && (i < total); ++i) {
            while (__atomic_load_n(&ring->produced, __ATOMIC_ACQUIRE) <= i) {
                spin();
            }
            off = (i % per_msg) * piece;
            len = plain_piece(size, off);
            memcpy(dst + off, ring->slots[i % PLAIN_NSLOTS], len);
            __atomic_store_n(&ring->consumed, i + 1, __ATOMIC_RELEASE);
        }
        _exit(0);
    } else if (pid < 0) {
        perror("memcpy_bw: fork");
        munmap(ring, sizeof(*ring));
        return -1;
    }

    src = buffer(size, 0x5a);
    while (__atomic_load_n(&ring->ready, __ATOMIC_ACQUIRE) == 0) {
        usleep(100);
    }
    if ((src == NULL) || (ring->ready != 1)) {
        fprintf(stderr, "memcpy_bw: 2copy-shm: cannot allocate %zu bytes\n",
                size);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        free(src);
        munmap(ring, sizeof(*ring));
        return -1;
    }

    start = now_sec();
    for (i = 0; i < total; ++i) {
        while ((i - __atomic_load_n(&ring->consumed, __ATOMIC_ACQUIRE)) >=
               PLAIN_NSLOTS) {
            spin();
        }
        off = (i % per_msg) * piece;
        len = plain_piece(size, off);
        memcpy(ring->slots[i % PLAIN_NSLOTS], src + off, len);
        __atomic_store_n(&ring->produced, i + 1, __ATOMIC_RELEASE);
    }
    while (__atomic_load_n(&ring->consumed, __ATOMIC_ACQUIRE) < total) {
        spin();
    }
    elapsed = now_sec() - start;
    report("plain copy", "2copy-shm", size, count, elapsed, run);

    waitpid(pid, NULL, 0);
    free(src);
    munmap(ring, sizeof(*ring));
    return 0;
}

int main(int argc, char **argv)
{
    int plain = (argc == 4) && (strcmp(argv[1], "-c") == 0);
    char *list, *tok, *end;
    unsigned long long size;

    if (argc != 3 + plain) {
        fprintf(stderr, "usage: memcpy_bw [-c] SIZES RUN\n");
        return 2;
    }

    argv += plain;
    list  = argv[1];
    for (tok = strtok(list, ","); tok != NULL; tok = strtok(NULL, ",")) {
        size = strtoull(tok, &end, 10);
        if ((*end != '\0') || (size == 0) || (size > ((size_t)1 << 34))) {
            fprintf(stderr,
                    "memcpy_bw: '%s' is not a size in bytes "
                    "(1 to 16 GiB)\n",
                    tok);
            return 2;
        }
        if (plain ? ((plain_cma(size, argv[2]) != 0) ||
                        (plain_shm(size, argv[2]) != 0)) :
                       (measure(size, argv[2]) != 0)) {
            return 1;
        }
    }
    return 0;
}
