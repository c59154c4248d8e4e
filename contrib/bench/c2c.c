/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * c2c: the round trip of one cache line between two CPUs, in ns. Two
 * threads, pinned one per CPU, hand a counter back and forth through one
 * 64-byte aligned word; the median of 7 rounds of 20000 round trips is
 * printed. What small messages cost between two processes on these CPUs
 * follows it: bench.sh prints it with each run, because on a VM the same
 * two vCPUs can be close (sharing a cache) or far apart from one run to
 * the next.
 *
 * usage: c2c [cpu_a cpu_b]   (default: the first two CPUs we may run on)
 * Prints "c2c: cpus A,B round trip N ns"; exit status 2 on bad arguments,
 * 77 with fewer than two CPUs.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define C2C_ROUNDS 7
#define C2C_TRIPS  20000

static struct {
    volatile uint64_t word __attribute__((aligned(64)));
    char pad[64 - sizeof(uint64_t)];
} c2c_line;

static int c2c_pin(int cpu)
{
    cpu_set_t set;

    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

/* The other side: answers every odd value with the next even one */
static void *c2c_echo(void *arg)
{
    uint64_t total = 2ull * C2C_ROUNDS * C2C_TRIPS, v;

    if (c2c_pin(*(int *)arg) != 0) {
        return NULL;
    }
    for (v = 1; v < total; v += 2) {
        while (__atomic_load_n(&c2c_line.word, __ATOMIC_ACQUIRE) != v) {
        }
        __atomic_store_n(&c2c_line.word, v + 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

static double c2c_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int c2c_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    double ns[C2C_ROUNDS], start;
    int cpus[2], n = 0, cpu, round, i;
    cpu_set_t set;
    pthread_t thread;
    uint64_t v = 0;

    if (argc == 3) {
        cpus[0] = atoi(argv[1]);
        cpus[1] = atoi(argv[2]);
    } else if (argc == 1) {
        if (sched_getaffinity(0, sizeof(set), &set) != 0) {
            perror("c2c: sched_getaffinity");
            return 1;
        }
        for (cpu = 0; (cpu < CPU_SETSIZE) && (n < 2); ++cpu) {
            if (CPU_ISSET(cpu, &set)) {
                cpus[n++] = cpu;
            }
        }
        if (n < 2) {
            printf("c2c: fewer than two CPUs, nothing to measure\n");
            return 77;
        }
    } else {
        fprintf(stderr, "usage: c2c [cpu_a cpu_b]\n");
        return 2;
    }

    if (cpus[0] == cpus[1]) {
        fprintf(stderr, "c2c: two different cpus, not %d twice\n", cpus[0]);
        return 2;
    }

    if ((c2c_pin(cpus[0]) != 0) ||
        (pthread_create(&thread, NULL, c2c_echo, &cpus[1]) != 0)) {
        fprintf(stderr, "c2c: cannot run on cpus %d and %d\n", cpus[0],
                cpus[1]);
        return 2;
    }

    for (round = 0; round < C2C_ROUNDS; ++round) {
        start = c2c_now();
        for (i = 0; i < C2C_TRIPS; ++i) {
            __atomic_store_n(&c2c_line.word, ++v, __ATOMIC_RELEASE);
            ++v;
            while (__atomic_load_n(&c2c_line.word, __ATOMIC_ACQUIRE) != v) {
            }
        }
        ns[round] = (c2c_now() - start) / C2C_TRIPS;
    }
    pthread_join(thread, NULL);

    qsort(ns, C2C_ROUNDS, sizeof(ns[0]), c2c_cmp);
    printf("c2c: cpus %d,%d round trip %.0f ns\n", cpus[0], cpus[1],
           ns[C2C_ROUNDS / 2]);
    return 0;
}
