/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * notifier_bench: what the notifier and the memory cache cost.
 *  - cache hit (ucs_memcache_get + put) next to a ucs_rcache_get + put hit;
 *  - cache miss (classify + watch + register callback), and classification
 *    alone;
 *  - munmap() latency of unwatched memory and of watched memory (which waits
 *    for the monitor), median and p99, with the monitor sleeping between
 *    events (NOTIFIER_SPIN=0) and busy-polling after them (the default).
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <ucs/memory/memcache.h>
#include <ucs/memory/ummunotify_int.h>
#include <ucs/memory/rcache.h>
#include <ucm/api/ucm.h>

#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "bench_time.h"


static struct {
    unsigned hit_iters;
    unsigned miss_iters;
    unsigned unmap_iters;
    unsigned gap_us;
    size_t   len;
} opts = {
    .hit_iters   = 1000000,
    .miss_iters  = 1000,
    .unmap_iters = 2000,
    .gap_us      = 200,
    .len         = 16 * 1024
};


static void percentiles(uint64_t *v, unsigned n, double *median, double *p99)
{
    qsort(v, n, sizeof(*v), cmp_u64);
    *median = v[n / 2] / 1000.0;
    *p99    = v[(unsigned)(n * 0.99)] / 1000.0;
}

static void *map(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    memset(p, 1, len);
    return p;
}

static void spin_wait_us(unsigned us)
{
    uint64_t end = now_ns() + us * 1000ull;

    while (now_ns() < end) {
        /* keep the CPU: we measure the monitor's wake-up, not ours */
    }
}

/* ------------------------------------------------------------- hit/miss */

static ucs_status_t bench_reg(void *arg, ucs_memcache_region_t *region)
{
    region->memh = region;
    return UCS_OK;
}

static ucs_status_t rc_reg(void *ctx, ucs_rcache_t *rc, void *arg,
                           ucs_rcache_region_t *region, uint16_t flags)
{
    return UCS_OK;
}

static void rc_dereg(void *ctx, ucs_rcache_t *rc, ucs_rcache_region_t *region)
{
}

static void bench_hits(void)
{
    static const ucs_rcache_ops_t rc_ops = {rc_reg, rc_dereg, NULL};
    ucs_memcache_params_t params         = {.name = "bench",
                                            .reg  = bench_reg};
    ucs_rcache_params_t rparams          = {};
    ucs_memcache_region_t *region;
    ucs_rcache_region_t *rregion;
    ucs_memcache_info_t info;
    ucs_memcache_t *cache;
    ucs_rcache_t *rcache;
    double hit_ns, rc_ns, miss_ns, cls_ns;
    uint64_t t0, total;
    unsigned i;
    void *p;

    if (ucs_memcache_create(&params, &cache) != UCS_OK) {
        fprintf(stderr, "memcache: create failed\n");
        exit(1);
    }

    rparams.region_struct_size = sizeof(ucs_rcache_region_t);
    rparams.alignment          = UCS_PGT_ADDR_ALIGN;
    rparams.max_alignment      = sysconf(_SC_PAGESIZE);
    rparams.ucm_events         = UCM_EVENT_VM_UNMAPPED;
    rparams.ucm_event_priority = 1000;
    rparams.ops                = &rc_ops;
    rparams.max_regions        = ULONG_MAX;
    rparams.max_size           = SIZE_MAX;
    rparams.max_unreleased     = SIZE_MAX;
    if (ucs_rcache_create(&rparams, "bench", NULL, &rcache) != UCS_OK) {
        rcache = NULL;
    }

    p = map(opts.len);

    /* hits */
    ucs_memcache_get(cache, p, opts.len, &region);
    ucs_memcache_put(cache, region);
    t0 = now_ns();
    for (i = 0; i < opts.hit_iters; ++i) {
        ucs_memcache_get(cache, p, opts.len, &region);
        ucs_memcache_put(cache, region);
    }
    hit_ns = (double)(now_ns() - t0) / opts.hit_iters;

    rc_ns = 0;
    if (rcache != NULL) {
        ucs_rcache_get(rcache, p, opts.len, PROT_READ | PROT_WRITE, NULL,
                       &rregion);
        ucs_rcache_region_put(rcache, rregion);
        t0 = now_ns();
        for (i = 0; i < opts.hit_iters; ++i) {
            ucs_rcache_get(rcache, p, opts.len, PROT_READ | PROT_WRITE, NULL,
                           &rregion);
            ucs_rcache_region_put(rcache, rregion);
        }
        rc_ns = (double)(now_ns() - t0) / opts.hit_iters;
    }

    /* misses: a new mapping each time; munmap is not timed */
    total = 0;
    for (i = 0; i < opts.miss_iters; ++i) {
        void *q = map(opts.len);
        t0      = now_ns();
        ucs_memcache_get(cache, q, opts.len, &region);
        total  += now_ns() - t0;
        ucs_memcache_put(cache, region);
        munmap(q, opts.len);
    }
    miss_ns = (double)total / opts.miss_iters;

    t0 = now_ns();
    for (i = 0; i < opts.miss_iters; ++i) {
        ucs_memcache_classify(p, opts.len, &info);
    }
    cls_ns = (double)(now_ns() - t0) / opts.miss_iters;

    printf("lookup cost (%zu KiB buffer):\n", opts.len / 1024);
    printf("  memcache hit (get+put)            %8.1f ns\n", hit_ns);
    if (rcache != NULL) {
        printf("  ucs_rcache hit (get+put)          %8.1f ns\n", rc_ns);
    } else {
        printf("  ucs_rcache hit                    (rcache unavailable: "
               "UCM hooks off?)\n");
    }
    printf("  memcache miss (classify+watch+reg) %7.1f ns\n", miss_ns);
    printf("  classification alone (%s)  %7.1f ns\n",
           "PROCMAP_QUERY or maps", cls_ns);

    munmap(p, opts.len);
    if (rcache != NULL) {
        ucs_rcache_destroy(rcache);
    }
    ucs_memcache_destroy(cache);
}

/* --------------------------------------------------------------- munmap */

static void bench_munmap(const char *title, double spin, unsigned gap_us)
{
    ucs_ummunotify_params_t params = {.mode      = UCS_UMMUNOTIFY_MODE_QUEUE,
                                      .queue_len = 64};
    uint64_t *plain = calloc(opts.unmap_iters, sizeof(uint64_t));
    uint64_t *watch = calloc(opts.unmap_iters, sizeof(uint64_t));
    double pm, p99, wm, w99;
    ucs_ummunotify_event_t ev[64];
    ucs_ummunotify_reg_t *reg;
    ucs_ummunotify_t *n;
    uint64_t t0;
    unsigned i;
    void *p;

    /* the engine starts with the configuration of its first client */
    ucs_ummunotify_config.spin = spin;
    if (ucs_ummunotify_open(&params, &n) != UCS_OK) {
        fprintf(stderr, "notifier: open failed\n");
        exit(1);
    }

    for (i = 0; i < opts.unmap_iters; ++i) {
        p = map(opts.len);
        spin_wait_us(gap_us);
        t0       = now_ns();
        munmap(p, opts.len);
        plain[i] = now_ns() - t0;

        p = map(opts.len);
        if (ucs_ummunotify_register(n, p, opts.len, i, &reg) != UCS_OK) {
            fprintf(stderr, "notifier: register failed\n");
            exit(1);
        }
        spin_wait_us(gap_us);
        t0       = now_ns();
        munmap(p, opts.len);
        watch[i] = now_ns() - t0;
        ucs_ummunotify_read(n, ev, 64);
        ucs_ummunotify_unregister(reg);
    }

    percentiles(plain, opts.unmap_iters, &pm, &p99);
    percentiles(watch, opts.unmap_iters, &wm, &w99);
    if (ucs_ummunotify_prereport_active()) {
        printf("  pre-report to UCM before munmap() returns: %llu covered,"
               " %llu missed so far\n",
               (unsigned long long)ucs_ummunotify_prereport_stats.covered,
               (unsigned long long)ucs_ummunotify_prereport_stats.missed);
    }
    printf("  %-34s unwatched %6.1f / %6.1f us   watched %6.1f / %6.1f us"
           "   added %6.1f / %6.1f us\n", title, pm, p99, wm, w99, wm - pm,
           w99 - p99);

    ucs_ummunotify_close(n);
    free(plain);
    free(watch);
}

static void usage(const char *prog)
{
    printf("usage: %s [options]\n"
           "  -h, --help          this text\n"
           "  -n, --hits N        hit iterations (default %u)\n"
           "  -m, --misses N      miss iterations (default %u)\n"
           "  -u, --unmaps N      munmap iterations per case (default %u)\n"
           "  -g, --gap US        idle time before each munmap, so the monitor\n"
           "                      is past its spin window (default %u)\n"
           "  -l, --length BYTES  buffer length (default %zu)\n"
           "Figures: median / p99. The engine is forced to uffd. The monitor\n"
           "runs with spin 0 and with UCX_REMAPRING_NOTIFIER_SPIN (50 us if\n"
           "unset). With UCM's unmap event external\n"
           "(UCX_REMAPRING_UCM_EXTERNAL=y UCX_MEM_MMAP_HOOK_MODE=none\n"
           "UCX_MEM_MALLOC_HOOKS=n) the monitor reports to UCM before\n"
           "munmap() returns, which it then says.\n",
           prog, opts.hit_iters, opts.miss_iters,
           opts.unmap_iters, opts.gap_us, opts.len);
}

int main(int argc, char **argv)
{
    static const struct option lopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"hits", required_argument, NULL, 'n'},
        {"misses", required_argument, NULL, 'm'},
        {"unmaps", required_argument, NULL, 'u'},
        {"gap", required_argument, NULL, 'g'},
        {"length", required_argument, NULL, 'l'},
        {NULL, 0, NULL, 0}
    };
    double dflt_spin;
    int c;

    while ((c = getopt_long(argc, argv, "hn:m:u:g:l:", lopts, NULL)) != -1) {
        switch (c) {
        case 'n': opts.hit_iters   = atoi(optarg); break;
        case 'm': opts.miss_iters  = atoi(optarg); break;
        case 'u': opts.unmap_iters = atoi(optarg); break;
        case 'g': opts.gap_us      = atoi(optarg); break;
        case 'l': opts.len         = strtoul(optarg, NULL, 0); break;
        case 'h': usage(argv[0]); return 0;
        default:  usage(argv[0]); return 1;
        }
    }

    ucs_ummunotify_config.engine = UCS_UMMUNOTIFY_ENGINE_UFFD;
    /* UCX_REMAPRING_NOTIFIER_SPIN if set, else 50 us for the comparison */
    dflt_spin                    = (ucs_ummunotify_config.spin > 0) ?
                                   ucs_ummunotify_config.spin : 50e-6;

    bench_hits();

    printf("munmap latency, %zu KiB (median / p99):\n", opts.len / 1024);
    bench_munmap("monitor sleeps (spin 0), gap", 0, opts.gap_us);
    bench_munmap("monitor sleeps (spin 0), no gap", 0, 0);
    {
        char title[64];
        snprintf(title, sizeof(title), "monitor spins %.0f us, no gap",
                 dflt_spin * 1e6);
        bench_munmap(title, dflt_spin, 0);
        snprintf(title, sizeof(title), "monitor spins %.0f us, gap",
                 dflt_spin * 1e6);
        bench_munmap(title, dflt_spin, opts.gap_us);
    }
    return 0;
}
