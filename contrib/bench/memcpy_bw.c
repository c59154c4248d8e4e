/*
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * One core's memcpy() bandwidth at each size, the yardstick of bench.sh's
 * large-message table: usage memcpy_bw SIZES RUN, SIZES in bytes, comma
 * separated. For each size it copies one buffer into another of the same
 * size, over and over, as ucx_perftest sends one buffer over and over (so
 * the data stays in cache where it fits, as there), until about 2 GiB have
 * moved (at least 20 copies), and prints one line of a contrib/bench raw
 * CSV: memcpy,SIZE,bw,memcpy,RUN,MB/s (2^20 bytes a second).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_sec(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int measure(size_t size, const char *run)
{
    size_t count = (size_t)2 << 30;
    char *src, *dst;
    double start, elapsed;
    size_t i;

    count = (count / size < 20) ? 20 : count / size;
    src   = aligned_alloc(4096, (size + 4095) & ~(size_t)4095);
    dst   = aligned_alloc(4096, (size + 4095) & ~(size_t)4095);
    if ((src == NULL) || (dst == NULL)) {
        fprintf(stderr, "memcpy_bw: cannot allocate 2 x %zu bytes\n", size);
        return -1;
    }
    memset(src, 0x5a, size);
    memset(dst, 0, size); /* both faulted in before the clock starts */

    start = now_sec();
    for (i = 0; i < count; ++i) {
        memcpy(dst, src, size);
        /* the copy is used: the compiler may not drop or merge it */
        __asm__ volatile("" : : "r"(dst) : "memory");
    }
    elapsed = now_sec() - start;

    printf("memcpy,%zu,bw,memcpy,%s,%.1f\n", size, run,
           (double)size * count / elapsed / (1 << 20));
    free(src);
    free(dst);
    return 0;
}

int main(int argc, char **argv)
{
    char *list, *tok, *end;
    unsigned long long size;

    if (argc != 3) {
        fprintf(stderr, "usage: memcpy_bw SIZES RUN\n");
        return 2;
    }

    list = argv[1];
    for (tok = strtok(list, ","); tok != NULL; tok = strtok(NULL, ",")) {
        size = strtoull(tok, &end, 10);
        if ((*end != '\0') || (size == 0) || (size > ((size_t)1 << 34))) {
            fprintf(stderr,
                    "memcpy_bw: '%s' is not a size in bytes "
                    "(1 to 16 GiB)\n",
                    tok);
            return 2;
        }
        if (measure(size, argv[2]) != 0) {
            return 1;
        }
    }
    return 0;
}
