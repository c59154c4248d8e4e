/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * UCS's own registration cache (ucs_rcache, public API) with UCM's hooks
 * off (UCX_MEM_MALLOC_HOOKS=n UCX_MEM_MMAP_HOOK_MODE=none) and
 * UCM_EVENT_VM_UNMAPPED declared external (UCX_REMAPRING_UCM_EXTERNAL=y):
 * over memory the notifier watches, munmap + new mmap at the same address
 * never gives a stale hit (the caller checks the generation counter, or
 * not: then the pre-report closes the window); over memory it does not
 * watch, always.
 *
 * The settings must be in the environment before UCS and UCM initialize,
 * so main() re-executes the program with them.
 */

#include "notifier_fixture.h"

extern "C" {
#include <ucs/memory/rcache.h>
#include <ucm/api/ucm.h>
}

#include <climits>
#include <thread>

using namespace remapring_test;


typedef struct {
    ucs_rcache_region_t  super;
    ucs_ummunotify_reg_t *watch;
    unsigned             serial;
} test_region_t;


class rcache_nohooks : public ::testing::Test {
protected:
    void SetUp() override
    {
        std::string why;

        if (!uffd_usable(&why)) {
            GTEST_SKIP() << why;
        }
        ASSERT_TRUE(ucs_ummunotify_ucm_is_external())
            << "UCX_REMAPRING_UCM_EXTERNAL=y was not applied";

        ucs_ummunotify_params_t nparams = {};
        nparams.mode      = UCS_UMMUNOTIFY_MODE_QUEUE;
        nparams.queue_len = 16; /* never read: overflows harmlessly */
        ASSERT_EQ(UCS_OK, ucs_ummunotify_open(&nparams, &m_notifier));
        ASSERT_EQ(UCS_UMMUNOTIFY_ENGINE_UFFD, ucs_ummunotify_engine());
    }

    void TearDown() override
    {
        if (m_rcache != NULL) {
            ucs_rcache_destroy(m_rcache);
        }
        if (m_notifier != NULL) {
            ucs_ummunotify_close(m_notifier);
        }
    }

    static ucs_status_t mem_reg(void *context, ucs_rcache_t *rcache,
                                void *arg, ucs_rcache_region_t *region,
                                uint16_t flags)
    {
        rcache_nohooks *self = (rcache_nohooks*)context;
        test_region_t *r     = ucs_derived_of(region, test_region_t);

        r->serial = __atomic_add_fetch(&self->m_regs, 1, __ATOMIC_RELEASE);
        r->watch  = NULL;
        if (self->m_watch) {
            return ucs_ummunotify_register(self->m_notifier,
                                           (void*)region->super.start,
                                           region->super.end -
                                           region->super.start,
                                           (uintptr_t)region, &r->watch);
        }
        return UCS_OK;
    }

    static void mem_dereg(void *context, ucs_rcache_t *rcache,
                          ucs_rcache_region_t *region)
    {
        test_region_t *r = ucs_derived_of(region, test_region_t);

        if (r->watch != NULL) {
            ucs_ummunotify_unregister(r->watch);
        }
    }

    void create_rcache()
    {
        static const ucs_rcache_ops_t ops = {mem_reg, mem_dereg, NULL};
        ucs_rcache_params_t params        = {};

        params.region_struct_size = sizeof(test_region_t);
        params.alignment          = UCS_PGT_ADDR_ALIGN;
        params.max_alignment      = page_size();
        params.ucm_events         = UCM_EVENT_VM_UNMAPPED;
        params.ucm_event_priority = 1000;
        params.ops                = &ops;
        params.context            = this;
        params.flags              = 0;
        params.max_regions        = ULONG_MAX;
        params.max_size           = SIZE_MAX;
        params.max_unreleased     = SIZE_MAX;
        ASSERT_EQ(UCS_OK, ucs_rcache_create(&params, "test", NULL,
                                            &m_rcache))
            << "ucs_rcache_create must succeed once the event is external";
    }

    /* munmap + mmap at the same address, 'iters' times; count the gets
     * that returned a region registered for an earlier mapping (serials
     * count registrations; mem_reg runs under the rcache's lock) */
    unsigned run(unsigned iters, bool barrier,
                 uintptr_t hint = 0x500001000000ul)
    {
        size_t len = 16 * page_size();
        unsigned stale = 0;

        char *base = reserve_low(len + 2 * page_size(), hint);
        void *addr = base + page_size(); /* guard page on each side */
        EXPECT_EQ(addr, map_anon(len, addr, MAP_FIXED));
        unsigned before = 0; /* registered before the current mapping */
        for (unsigned i = 0; i < iters; ++i) {
            memset(addr, i, len);
            ucs_rcache_region_t *region;
            if (barrier) {
                /* wait out an invalidation the monitor has read but not
                 * yet reported: one load when there is none */
                (void)ucs_ummunotify_read_begin();
            }
            EXPECT_EQ(UCS_OK, ucs_rcache_get(m_rcache, addr, len,
                                             PROT_READ | PROT_WRITE, NULL,
                                             &region));
            if (ucs_derived_of(region, test_region_t)->serial <= before) {
                ++stale; /* fresh memory, old registration */
            }
            ucs_rcache_region_put(m_rcache, region);

            munmap(addr, len);
            before = __atomic_load_n(&m_regs, __ATOMIC_ACQUIRE);
            EXPECT_EQ(addr, map_anon(len, addr, MAP_FIXED_NOREPLACE));
        }
        munmap(base, len + 2 * page_size());
        return stale;
    }

    ucs_ummunotify_t *m_notifier = NULL;
    ucs_rcache_t     *m_rcache   = NULL;
    unsigned         m_regs      = 0;
    bool             m_watch     = true;
};


/* With the hooks off, ucs_rcache_create needs the event declared external:
 * the process runs with UCX_MEM_MMAP_HOOK_MODE=none. */
TEST_F(rcache_nohooks, environment)
{
    EXPECT_STREQ("none", getenv("UCX_MEM_MMAP_HOOK_MODE"));
    EXPECT_STREQ("n", getenv("UCX_MEM_MALLOC_HOOKS"));
    create_rcache();
}

/* The caller of ucs_rcache_get() checks the notifier's generation counter
 * (one load): no stale hit, ever. */
TEST_F(rcache_nohooks, watched_no_stale)
{
    const unsigned iters = 2000;

    create_rcache();
    m_watch        = true;
    unsigned stale = run(iters, true);
    printf("[ rcache   ] watched, get after the generation check: %u/%u "
           "stale hits\n", stale, iters);
    EXPECT_EQ(0u, stale);
}

/* A caller that knows nothing of the notifier, as UCS itself: the monitor
 * reports the range from the arguments of the blocked munmap() before
 * read() lets it return (the pre-report, see ummunotify_prereport.c), so
 * no get after munmap() returned finds the old region. Without the
 * pre-report, the report reaches the rcache microseconds after munmap()
 * returned and an immediate get may win the race. */
TEST_F(rcache_nohooks, watched_unaware_caller)
{
    const unsigned iters = 2000;
    ucs_ummunotify_prereport_stats_t before = ucs_ummunotify_prereport_stats;

    create_rcache();
    m_watch        = true;
    unsigned stale = run(iters, false);
    ucs_ummunotify_prereport_stats_t after = ucs_ummunotify_prereport_stats;
    printf("[ rcache   ] watched, caller unaware of the notifier: %u/%u "
           "stale hits; pre-report %s: %llu events covered, %llu missed\n",
           stale, iters, ucs_ummunotify_prereport_active() ? "on" : "off",
           (unsigned long long)(after.covered - before.covered),
           (unsigned long long)(after.missed - before.missed));
    if (ucs_ummunotify_prereport_active()) {
        EXPECT_EQ(0u, stale);
        EXPECT_EQ(0u, after.missed - before.missed);
    } else {
        /* /proc/self/task unreadable: the read-to-report window is open */
        EXPECT_LT(stale, iters / 10);
    }
}

/* Two unaware threads, each unmapping and mapping again its own address:
 * completing one thread's event wakes the other, queued one, and if the
 * monitor's scan sees it runnable in that moment its range is reported
 * after read() only (see ummunotify_prereport.c). Prints how often. */
TEST_F(rcache_nohooks, watched_unaware_two_threads)
{
    const unsigned iters = 2000;
    ucs_ummunotify_prereport_stats_t before = ucs_ummunotify_prereport_stats;
    unsigned stale[2];

    create_rcache();
    m_watch = true;
    std::thread t([&] { stale[1] = run(iters, false, 0x500002000000ul); });
    stale[0] = run(iters, false, 0x500001000000ul);
    t.join();
    ucs_ummunotify_prereport_stats_t after = ucs_ummunotify_prereport_stats;
    printf("[ rcache   ] watched, two unaware threads: %u+%u/%u stale hits; "
           "pre-report %s: %llu events covered, %llu missed\n", stale[0],
           stale[1], 2 * iters,
           ucs_ummunotify_prereport_active() ? "on" : "off",
           (unsigned long long)(after.covered - before.covered),
           (unsigned long long)(after.missed - before.missed));
    /* a stale hit needs a missed pre-report */
    EXPECT_LE(stale[0] + stale[1], after.missed - before.missed +
              (ucs_ummunotify_prereport_active() ? 0 : 2 * iters));
}

TEST_F(rcache_nohooks, unwatched_goes_stale)
{
    const unsigned iters = 2000;

    create_rcache();
    m_watch        = false;
    unsigned stale = run(iters, true);
    printf("[ rcache   ] not watched (no hooks, no notifier): %u/%u stale "
           "hits\n", stale, iters);
    /* nobody tells the rcache: it keeps the first registration */
    EXPECT_EQ(iters - 1, stale);
}


int main(int argc, char **argv)
{
    if (getenv("REMAPRING_RCACHE_NOHOOKS") == NULL) {
        setenv("UCX_MEM_MALLOC_HOOKS", "n", 1);
        setenv("UCX_MEM_MMAP_HOOK_MODE", "none", 1);
        setenv("UCX_REMAPRING_UCM_EXTERNAL", "y", 1);
        /* auto would choose the seccomp source with the hooks off */
        setenv("UCX_REMAPRING_NOTIFIER", "uffd", 1);
        setenv("REMAPRING_RCACHE_NOHOOKS", "1", 1);
        return reexec_self(argv);
    }

    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
