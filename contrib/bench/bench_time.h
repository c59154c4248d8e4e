/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * Time and percentiles for the notifier's benchmarks.
 */

#ifndef REMAPRING_BENCH_TIME_H_
#define REMAPRING_BENCH_TIME_H_

#include <stdint.h>
#include <time.h>

static inline uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* for qsort() of uint64_t */
static inline int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;

    return (x > y) - (x < y);
}

#endif
