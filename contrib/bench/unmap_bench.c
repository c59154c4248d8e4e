/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * unmap_bench: what keeping UCX's caches coherent costs the application's
 * own unmapping calls. One source per process, chosen by the environment
 * (contrib/bench/unmap_cost.sh runs each):
 *   none     UCX_MEM_MMAP_HOOK_MODE=none, nothing reported: the baseline
 *   ucm      UCM's hooks (UCX's default), a VM_UNMAPPED handler installed
 *            as UCX's registration caches install theirs
 *   uffd     hooks off, UCX_REMAPRING_NOTIFIER=uffd,
 *            UCX_REMAPRING_UCM_EXTERNAL=y: the userfaultfd
 *            monitor, which sees only the ranges it watches; the buffers
 *            are watched (a notifier registration each), as remapring's
 *            own cache watches what it registered
 *   seccomp  hooks off, UCX_REMAPRING_NOTIFIER=seccomp: every unmap of the
 *            process, reported to UCM; munmap() through the C library in
 *            the calling thread (this program links the module's
 *            munmap(), ummunotify_inthread.c, as a preloaded module puts it
 *            before the C library's), the raw system call by a worker
 *            thread (UCX_REMAPRING_SECCOMP_INTHREAD=n: both by a worker)
 * Prints, per source: munmap() of a touched LEN-byte mapping, p50 and p99
 * in microseconds; the same for syscall(SYS_munmap), timed in turn with
 * munmap() in the same loop (UCM's hooks do not see it, the seccomp source
 * does: under UCM's hooks the difference is what the hooks add, measured
 * in one process rather than against another process's baseline);
 * malloc()+free() of an LEN-byte block above glibc's mmap threshold (a
 * fixed one: the dynamic threshold keeps large blocks in the heap after
 * the first free), p50 and p99; and how many VM_UNMAPPED events the
 * handler got (each call must give at least one, except none). Where the
 * seccomp source's in-thread path runs, also munmap() made from the
 * instruction its filter lets through, unreported, timed in turn with the
 * others: munmap() less that is what the report costs in the calling
 * thread (the filter's own cost is in both; contrib/bench/trap_cost.c
 * measures it).
 *
 * usage: unmap_bench SOURCE [-n ITERS] [-s LEN]
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <ucs/memory/ummunotify_int.h>
#include <ucm/api/ucm.h>

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "bench_time.h"


static unsigned long events;

static void handler(ucm_event_type_t type, ucm_event_t *event, void *arg)
{
    __atomic_fetch_add(&events, 1, __ATOMIC_RELAXED);
}

static void report(const char *what, uint64_t *t, unsigned n)
{
    qsort(t, n, sizeof(*t), cmp_u64);
    printf("%s p50_us=%.2f p99_us=%.2f\n", what, t[n / 2] / 1e3,
           t[(size_t)n * 99 / 100] / 1e3);
}

int main(int argc, char **argv)
{
    unsigned iters = 2000, i;
    size_t len     = 1 << 20;
    ucs_ummunotify_params_t nparams = {};
    ucs_ummunotify_t *notifier      = NULL;
    ucs_ummunotify_reg_t *reg       = NULL;
    const char *source;
    uint64_t args[5] = {0, 0, 0, 0, 0};
    uint64_t *t, *traw, *tunrep, *tw[3], t0, d;
    int c, watch, ways, way, k;
    char *p;
    long ret;

    if (argc < 2) {
        fprintf(stderr, "usage: unmap_bench none|ucm|uffd|seccomp "
                        "[-n ITERS] [-s LEN]\n");
        return 2;
    }
    source = argv[1];
    optind = 2;
    while ((c = getopt(argc, argv, "n:s:")) != -1) {
        switch (c) {
        case 'n': iters = strtoul(optarg, NULL, 0); break;
        case 's': len = strtoull(optarg, NULL, 0); break;
        default: return 2;
        }
    }
    watch = !strcmp(source, "uffd");
    t      = calloc(iters, sizeof(*t));
    traw   = calloc(iters, sizeof(*traw));
    tunrep = calloc(iters, sizeof(*tunrep));
    if ((t == NULL) || (traw == NULL) || (tunrep == NULL)) {
        fprintf(stderr, "unmap_bench: no memory for %u times\n", iters);
        return 1;
    }
    tw[0] = t;
    tw[1] = traw;
    tw[2] = tunrep;

    if (strcmp(source, "none") &&
        (ucm_set_event_handler(UCM_EVENT_VM_UNMAPPED, 1000, handler, NULL) !=
         UCS_OK)) {
        fprintf(stderr, "unmap_bench: %s: ucm_set_event_handler failed\n",
                source);
        return 1;
    }
    if (watch) {
        nparams.mode      = UCS_UMMUNOTIFY_MODE_QUEUE;
        nparams.queue_len = 16;
        if (ucs_ummunotify_open(&nparams, &notifier) != UCS_OK) {
            return 1;
        }
    }

    /* the seccomp source's in-thread path: also a munmap() from the
     * instruction its filter lets through, unreported */
    args[1] = len;
    ways    = ucs_ummunotify_seccomp_call_unreported(SYS_munmap, args, &ret) ?
              3 : 2;
    for (i = 0; i < iters + iters / 10; ++i) {
        for (k = 0; k < ways; ++k) {
            way = (k + i) % ways; /* which goes first rotates */
            p   = mmap(NULL, len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            memset(p, 1, len);
            if (watch) {
                ucs_ummunotify_register(notifier, p, len, 0, &reg);
            }
            args[0] = (uintptr_t)p;
            t0      = now_ns();
            if (way == 1) {
                syscall(SYS_munmap, p, len);
            } else if (way == 2) {
                ucs_ummunotify_seccomp_call_unreported(SYS_munmap, args,
                                                       &ret);
            } else {
                munmap(p, len);
            }
            d = now_ns() - t0;
            if (i >= iters / 10) { /* the first tenth warms up */
                tw[way][i - iters / 10] = d;
            }
            if (watch) {
                ucs_ummunotify_unregister(reg);
            }
        }
    }
    report("munmap", t, iters);
    report("munmap_raw", traw, iters);
    if (ways == 3) {
        report("munmap_unreported", tunrep, iters);
    }

    mallopt(M_MMAP_THRESHOLD, (int)(len / 2));
    for (i = 0; i < iters + iters / 10; ++i) {
        uint64_t m;

        t0   = now_ns();
        p    = malloc(len);
        p[0] = p[len - 1] = 1;
        m    = now_ns() - t0;
        if (watch) { /* not counted: remapring's cache's own cost */
            ucs_ummunotify_register(notifier, p, len, 0, &reg);
        }
        t0 = now_ns();
        free(p);
        if (i >= iters / 10) {
            t[i - iters / 10] = m + now_ns() - t0;
        }
        if (watch) {
            ucs_ummunotify_unregister(reg);
        }
    }
    report("malloc_free", t, iters);
    printf("events %lu calls %u\n", events, 3 * (iters + iters / 10));

    if (notifier != NULL) {
        ucs_ummunotify_close(notifier);
    }
    free(tunrep);
    free(traw);
    free(t);
    return 0;
}
