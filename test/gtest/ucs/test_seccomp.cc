/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * The whole-process notifier source (UCX_REMAPRING_NOTIFIER=seccomp) with
 * UCM's hooks off (UCX_MEM_MALLOC_HOOKS=n UCX_MEM_MMAP_HOOK_MODE=none):
 * every call that takes memory away is reported to UCM before it returns,
 * whether it comes from glibc's wrappers or a raw system call; a UCS
 * registration cache never hands out a registration of memory that is gone;
 * the notifier's own clients see it too; and nothing hangs: callbacks that
 * unmap, many threads, signals, fork(), exec(), a process that outlives the
 * one that started the source, a callback that never returns.
 *
 * The settings must be in the environment before UCS and UCM initialize,
 * so main() re-executes the program with them.
 */

#include "notifier_fixture.h"

extern "C" {
#include <ucs/memory/rcache.h>
#include <ucm/api/ucm.h>
}

#include <atomic>
#include <climits>
#include <malloc.h>
#include <mutex>
#include <poll.h>
#include <signal.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <sys/wait.h>
#include <thread>

using namespace remapring_test;


namespace {

/* Every VM_UNMAPPED event UCM delivered, in order. */
struct event_log {
    std::mutex                                     lock;
    std::vector<std::pair<uintptr_t, uintptr_t>>   events;

    /* whether some event covers [start, end) (page-rounded) */
    bool covers(const void *addr, size_t len)
    {
        return covers_at((uintptr_t)addr, len);
    }

    bool covers_at(uintptr_t addr, size_t len)
    {
        uintptr_t s = addr & ~(page_size() - 1);
        uintptr_t e = addr + len;
        std::lock_guard<std::mutex> g(lock);
        for (auto &ev : events) {
            if ((ev.first <= s) && (ev.second >= e)) {
                return true;
            }
        }
        return false;
    }

    void clear()
    {
        std::lock_guard<std::mutex> g(lock);
        events.clear();
    }
};

/* never destroyed: the source reports unmaps until the process is gone,
 * those of exit() (static destructors freeing memory) too, and its
 * callback must not write into a log being destroyed (TSan saw it) */
event_log         &g_log = *new event_log;
std::atomic<int>   g_slow_ms{0};        /* make the next callback slow */
std::atomic<int>   g_unmap_in_cb{0};    /* callbacks unmap memory too */
std::atomic<long>  g_cb_unmaps{0};

void log_callback(ucm_event_type_t type, ucm_event_t *event, void *arg)
{
    uintptr_t s = (uintptr_t)event->vm_unmapped.address;

    {
        std::lock_guard<std::mutex> g(g_log.lock);
        if (g_log.events.size() < 100000) {
            g_log.events.emplace_back(s, s + event->vm_unmapped.size);
        }
    }

    int ms = g_slow_ms.exchange(0);
    if (ms > 0) {
        usleep(ms * 1000);
    }

    if (g_unmap_in_cb.load() > 0) {
        /* what a callback's allocator may do: map, then give back */
        g_unmap_in_cb.fetch_sub(1);
        void *p = mmap(NULL, 4 * page_size(), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p != MAP_FAILED) {
            munmap(p, 4 * page_size());
            void *m = malloc(1 << 20); /* above glibc's mmap threshold */
            free(m);
            g_cb_unmaps.fetch_add(1);
        }
    }
}

bool g_handler_set = false;

} // namespace


class seccomp_source : public ::testing::Test {
protected:
    void SetUp() override
    {
        if (under_valgrind()) {
            GTEST_SKIP() << "valgrind runs the client's system calls itself "
                            "and does not support seccomp user notification";
        }
        /* the source starts with the first subscriber, as it would with
         * UCX's first registration cache */
        ASSERT_TRUE(ucs_ummunotify_seccomp_wanted());
        if (!g_handler_set) {
            ucs_status_t status = ucm_set_event_handler(
                    UCM_EVENT_VM_UNMAPPED, 0, log_callback, NULL);
            if (!ucs_ummunotify_seccomp_running()) {
                GTEST_SKIP() << "the seccomp source did not start here "
                                "(kernel before 5.7, seccomp off, or a "
                                "listener inherited): see the log";
            }
            ASSERT_EQ(UCS_OK, status)
                << "must succeed with the hooks off once the event is "
                   "external";
            g_handler_set = true;
        }
        g_log.clear();
    }

    static void *map(size_t len, int flags = MAP_PRIVATE)
    {
        void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
                       flags | MAP_ANONYMOUS, -1, 0);
        EXPECT_NE(MAP_FAILED, p);
        memset(p, 1, len);
        return p;
    }
};


TEST_F(seccomp_source, started)
{
    char line[256];
    int filters = -1;

    EXPECT_TRUE(ucs_ummunotify_ucm_is_external());
    FILE *f = fopen("/proc/self/status", "r");
    ASSERT_NE(nullptr, f);
    while (fgets(line, sizeof(line), f) != NULL) {
        sscanf(line, "Seccomp_filters: %d", &filters);
    }
    fclose(f);
    EXPECT_GE(filters, 1);

    /* the notifier's own clients get it as their engine */
    ucs_ummunotify_params_t p = {};
    ucs_ummunotify_t *n;
    p.mode = UCS_UMMUNOTIFY_MODE_QUEUE;
    ASSERT_EQ(UCS_OK, ucs_ummunotify_open(&p, &n));
    EXPECT_EQ(UCS_UMMUNOTIFY_ENGINE_SECCOMP, ucs_ummunotify_engine());
    ucs_ummunotify_close(n);
}

/* Each call that takes memory away is reported before it returns; calls
 * that do not are not. */
TEST_F(seccomp_source, every_kind_reported_before_return)
{
    size_t len = 8 * page_size();
    void *p, *q;

    p = map(len);
    ASSERT_EQ(0, munmap(p, len));
    EXPECT_TRUE(g_log.covers(p, len)) << "munmap";

    p = map(len);
    ASSERT_EQ(0, syscall(SYS_munmap, p, len));
    EXPECT_TRUE(g_log.covers(p, len)) << "raw syscall munmap";

    p = map(len);
    q = mmap(p, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
             0);
    ASSERT_EQ(p, q);
    EXPECT_TRUE(g_log.covers(p, len)) << "mmap(MAP_FIXED) over";
    munmap(p, len);

    static const int advices[] = {MADV_DONTNEED, MADV_FREE};
    for (int advice : advices) {
        p = map(len);
        g_log.clear();
        ASSERT_EQ(0, madvise(p, len, advice));
        EXPECT_TRUE(g_log.covers(p, len)) << "madvise " << advice;
        munmap(p, len);
    }
    p = map(len, MAP_SHARED);
    g_log.clear();
    ASSERT_EQ(0, madvise(p, len, MADV_REMOVE));
    EXPECT_TRUE(g_log.covers(p, len)) << "madvise REMOVE";
    munmap(p, len);

    /* mremap: moved away (old range), and onto another mapping (its range) */
    p = map(len);
    q = map(len);
    g_log.clear();
    void *r = mremap(p, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, q);
    ASSERT_EQ(q, r);
    EXPECT_TRUE(g_log.covers(p, len)) << "mremap: the old range";
    EXPECT_TRUE(g_log.covers(q, len)) << "mremap: what it replaced";
    p = mremap(q, len, len / 2, 0);
    ASSERT_EQ(q, p);
    EXPECT_TRUE(g_log.covers((char*)q + len / 2, len / 2)) << "mremap shrink";
    munmap(q, len / 2);

    /* System V shared memory */
    int id = shmget(IPC_PRIVATE, len, IPC_CREAT | 0600);
    ASSERT_GE(id, 0);
    p = shmat(id, NULL, 0);
    ASSERT_NE((void*)-1, p);
    g_log.clear();
    q = shmat(id, p, SHM_REMAP);
    EXPECT_EQ(p, q);
    EXPECT_TRUE(g_log.covers(p, len)) << "shmat(SHM_REMAP) over";
    g_log.clear();
    ASSERT_EQ(0, shmdt(p));
    EXPECT_TRUE(g_log.covers(p, len)) << "shmdt";
    shmctl(id, IPC_RMID, NULL);

    /* the heap's break going down */
    char *top = (char*)sbrk(0);
    ASSERT_NE((void*)-1, sbrk(4 * page_size()));
    memset(top, 1, 4 * page_size());
    g_log.clear();
    ASSERT_NE((void*)-1, sbrk(-(intptr_t)(4 * page_size())));
    EXPECT_TRUE(g_log.covers(top, 4 * page_size())) << "brk shrink";

    /* glibc's large blocks are their own mappings (a fixed threshold: the
     * dynamic one rises after the first free and serves them from the
     * heap, which keeps them); ASan's allocator keeps freed blocks in its
     * quarantine instead */
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    for (int i = 0; i < (under_asan() ? 0 : 16); ++i) {
        void *m = malloc(4 << 20);
        memset(m, i, 4 << 20);
        uintptr_t where = (uintptr_t)m;
        g_log.clear();
        free(m);
        EXPECT_TRUE(g_log.covers_at(where, 4 << 20))
                << "free() of a large block";
    }

    /* not reported: what takes nothing away */
    p = map(len);
    g_log.clear();
    ASSERT_EQ(0, madvise(p, len, MADV_WILLNEED));
    ASSERT_EQ(0, mprotect(p, len, PROT_READ));
    q = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_FALSE(g_log.covers(p, len));
    EXPECT_FALSE(g_log.covers(q, len));
    munmap(p, len);
    munmap(q, len);
}

namespace {

typedef struct {
    ucs_rcache_region_t super;
    unsigned            serial;
} test_region_t;

unsigned g_regs = 0;

ucs_status_t mem_reg(void *context, ucs_rcache_t *rcache, void *arg,
                     ucs_rcache_region_t *region, uint16_t flags)
{
    ucs_derived_of(region, test_region_t)->serial =
            __atomic_add_fetch(&g_regs, 1, __ATOMIC_RELEASE);
    return UCS_OK;
}

void mem_dereg(void *context, ucs_rcache_t *rcache,
               ucs_rcache_region_t *region)
{
}

ucs_rcache_t *create_rcache()
{
    static const ucs_rcache_ops_t ops = {mem_reg, mem_dereg, NULL};
    ucs_rcache_params_t params        = {};
    ucs_rcache_t *rcache              = NULL;

    params.region_struct_size = sizeof(test_region_t);
    params.alignment          = UCS_PGT_ADDR_ALIGN;
    params.max_alignment      = page_size();
    params.ucm_events         = UCM_EVENT_VM_UNMAPPED;
    params.ucm_event_priority = 1000;
    params.ops                = &ops;
    params.flags              = 0;
    params.max_regions        = ULONG_MAX;
    params.max_size           = SIZE_MAX;
    params.max_unreleased     = SIZE_MAX;
    EXPECT_EQ(UCS_OK, ucs_rcache_create(&params, "test", NULL, &rcache));
    return rcache;
}

/* One way to take the memory at addr away and put new memory there. */
typedef void (*replace_fn_t)(void *addr, size_t len);

void replace_munmap(void *addr, size_t len)
{
    munmap(addr, len);
    map_anon(len, addr, MAP_FIXED_NOREPLACE);
}

void replace_raw(void *addr, size_t len)
{
    syscall(SYS_munmap, addr, len);
    syscall(SYS_mmap, addr, len, PROT_READ | PROT_WRITE,
            MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
}

void replace_fixed(void *addr, size_t len)
{
    map_anon(len, addr, MAP_FIXED);
}

void replace_dontneed(void *addr, size_t len)
{
    madvise(addr, len, MADV_DONTNEED);
}

void replace_mremap(void *addr, size_t len)
{
    void *other = map_anon(len);
    mremap(other, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, addr);
}

/* munmap + mmap at one address, 'iters' times; count the gets that
 * returned a region registered before the current memory was there */
unsigned stale_hits(ucs_rcache_t *rcache, replace_fn_t replace,
                    unsigned iters, uintptr_t hint)
{
    size_t len     = 16 * page_size();
    unsigned stale = 0, before = 0;
    char *base     = reserve_low(len + 2 * page_size(), hint);
    void *addr     = base + page_size();

    EXPECT_EQ(addr, map_anon(len, addr, MAP_FIXED));
    for (unsigned i = 0; i < iters; ++i) {
        ucs_rcache_region_t *region;
        memset(addr, i, len);
        EXPECT_EQ(UCS_OK, ucs_rcache_get(rcache, addr, len,
                                         PROT_READ | PROT_WRITE, NULL,
                                         &region));
        if (ucs_derived_of(region, test_region_t)->serial <= before) {
            ++stale;
        }
        ucs_rcache_region_put(rcache, region);
        before = __atomic_load_n(&g_regs, __ATOMIC_ACQUIRE);
        replace(addr, len);
    }
    munmap(base, len + 2 * page_size());
    return stale;
}

} // namespace

/* UCS's own registration cache, which knows nothing of remapring: never a
 * registration of memory that is gone, whichever way it went. */
TEST_F(seccomp_source, rcache_never_stale)
{
    static const struct {
        const char   *name;
        replace_fn_t fn;
    } ways[] = {{"munmap+mmap", replace_munmap},
                {"raw syscalls", replace_raw},
                {"mmap(MAP_FIXED) over", replace_fixed},
                {"madvise(DONTNEED)", replace_dontneed},
                {"mremap onto", replace_mremap}};
    const unsigned iters = 1000;

    ucs_rcache_t *rcache = create_rcache();
    ASSERT_NE(nullptr, rcache);
    for (auto &w : ways) {
        unsigned stale = stale_hits(rcache, w.fn, iters, 0x500001000000ul);
        printf("[ seccomp  ] %-22s %u/%u stale hits\n", w.name, stale, iters);
        EXPECT_EQ(0u, stale) << w.name;
    }
    ucs_rcache_destroy(rcache);
}

/* The notifier's own registrations are invalid once munmap() returned. */
TEST_F(seccomp_source, own_client_invalidated)
{
    ucs_ummunotify_params_t p = {};
    ucs_ummunotify_reg_t *reg;
    ucs_ummunotify_t *n;
    size_t len = 4 * page_size();

    p.mode = UCS_UMMUNOTIFY_MODE_QUEUE;
    ASSERT_EQ(UCS_OK, ucs_ummunotify_open(&p, &n));
    for (int i = 0; i < 200; ++i) {
        void *m = map(len);
        ASSERT_EQ(UCS_OK, ucs_ummunotify_register(n, m, len, i, &reg));
        EXPECT_TRUE(ucs_ummunotify_reg_test(reg));
        syscall(SYS_munmap, m, len);
        EXPECT_FALSE(ucs_ummunotify_reg_test(reg)) << i;
        ucs_ummunotify_unregister(reg);
    }
    ucs_ummunotify_close(n);
}

/* A callback that maps and unmaps memory itself (directly and through
 * malloc) must not wait for itself; what it unmapped is reported too. Both
 * ways in: munmap() through the C library, reported in the calling thread
 * (its callback's unmaps kept by that thread, or by a worker for the C
 * library's own munmap() in free()), and the raw system call, reported by
 * a worker (its callback's unmaps kept by the other worker). */
TEST_F(seccomp_source, callback_unmaps_no_deadlock)
{
    struct {
        const char *name;
        int (*unmap)(void*, size_t);
    } ways[] = {
        {"munmap()", munmap},
        {"raw munmap", [](void *p, size_t len) {
             return (int)syscall(SYS_munmap, p, len);
         }}
    };
    ucs_ummunotify_seccomp_stats_t before, after;
    size_t len = 4 * page_size();

    for (auto &w : ways) {
        ucs_ummunotify_seccomp_get_stats(&before);
        g_cb_unmaps = 0;
        for (int i = 0; i < 50; ++i) {
            void *m = map(len);
            g_unmap_in_cb = 1;
            w.unmap(m, len);
        }
        g_unmap_in_cb = 0;
        ucs_ummunotify_seccomp_get_stats(&after);
        uint64_t kept = (after.own - before.own) +
                        (after.inthread_later - before.inthread_later);
        printf("[ seccomp  ] %-10s callbacks unmapped %ld times; %llu of "
               "their calls kept for after the report\n", w.name,
               g_cb_unmaps.load(), (unsigned long long)kept);
        EXPECT_GE(g_cb_unmaps.load(), 1) << w.name;
        EXPECT_GE(kept, (uint64_t)g_cb_unmaps.load()) << w.name;
    }
}

/* munmap() through the C library takes the in-thread path (this program
 * links ummunotify_inthread.c, as the module does): no notification; the
 * raw system call stops at the filter. Both are reported before they
 * return. */
TEST_F(seccomp_source, inthread_path)
{
    ucs_ummunotify_seccomp_stats_t before, mid, after;
    size_t len = page_size();

    ucs_ummunotify_seccomp_get_stats(&before);
    for (int i = 0; i < 100; ++i) {
        void *m = map(len);
        g_log.clear();
        ASSERT_EQ(0, munmap(m, len));
        EXPECT_TRUE(g_log.covers_at((uintptr_t)m, len)) << i;
    }
    ucs_ummunotify_seccomp_get_stats(&mid);
    for (int i = 0; i < 100; ++i) {
        void *m = map(len);
        g_log.clear();
        ASSERT_EQ(0, syscall(SYS_munmap, m, len));
        EXPECT_TRUE(g_log.covers_at((uintptr_t)m, len)) << i;
    }
    ucs_ummunotify_seccomp_get_stats(&after);
    printf("[ seccomp  ] munmap(): %llu in-thread, %llu notifications; raw: "
           "%llu in-thread, %llu notifications\n",
           (unsigned long long)(mid.inthread - before.inthread),
           (unsigned long long)(mid.calls - before.calls),
           (unsigned long long)(after.inthread - mid.inthread),
           (unsigned long long)(after.calls - mid.calls));
    EXPECT_GE(mid.inthread - before.inthread, 100u);
    EXPECT_EQ(0u, after.inthread - mid.inthread);
    EXPECT_GE(after.calls - mid.calls, 100u);

    /* the C library's conventions, from the in-thread path */
    errno = 0;
    EXPECT_EQ(-1, munmap((void*)1, len)); /* not aligned */
    EXPECT_EQ(EINVAL, errno);
    void *m = map(2 * len);
    void *r = mremap(m, 2 * len, len, 0);
    EXPECT_EQ(m, r);
    EXPECT_EQ(0, madvise(m, len, MADV_DONTNEED));
    EXPECT_EQ(0, munmap(m, len));
}

/* Threads unmapping, remapping and discarding memory for a fixed time while
 * another registers and checks through the rcache: nothing stale, nobody
 * stuck. */
TEST_F(seccomp_source, threads_stress)
{
    double secs = seconds_from_env("REMAPRING_STRESS_SECONDS", 2.0);
    std::atomic<bool> stop{false};
    std::atomic<long> ops{0};
    std::vector<std::thread> threads;

    ucs_rcache_t *rcache = create_rcache();
    ASSERT_NE(nullptr, rcache);
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            size_t len = (t + 1) * page_size();
            while (!stop) {
                void *p = map_anon(len);
                memset(p, t, len);
                switch (ops++ % 3) {
                case 0: munmap(p, len); break;
                case 1:
                    madvise(p, len, MADV_DONTNEED);
                    munmap(p, len);
                    break;
                default: free(malloc(1 << 20)); munmap(p, len); break;
                }
            }
        });
    }
    unsigned stale = 0, rounds = 0;
    auto end = std::chrono::steady_clock::now() +
               std::chrono::milliseconds((long)(secs * 1000));
    while (std::chrono::steady_clock::now() < end) {
        stale += stale_hits(rcache, replace_munmap, 100, 0x500003000000ul);
        rounds += 100;
    }
    stop = true;
    for (auto &t : threads) {
        t.join();
    }
    ucs_rcache_destroy(rcache);
    printf("[ seccomp  ] %.1f s: %ld unmapping calls in 4 threads, %u/%u "
           "stale hits\n", secs, ops.load(), stale, rounds);
    EXPECT_EQ(0u, stale);
    EXPECT_GT(ops.load(), 100);
}

/* A signal to a thread whose call waits for the reader to take it
 * interrupts the call (-ERESTARTSYS): a handler with SA_RESTART (glibc's
 * signal(), Go, most runtimes) never sees it - the kernel runs the call
 * again, and it is notified again; without SA_RESTART the call fails with
 * EINTR. Once the reader has taken it the wait is killable only
 * (SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV, Linux 5.19+). */
static void signal_storm(int sa_flags, long *calls_p, long *failed_p,
                         int *errno_p)
{
    struct sigaction sa = {}, old;
    std::atomic<bool> stop{false};
    std::atomic<long> failed{0}, calls{0}, started{0};
    std::atomic<int> last_errno{0};

    sa.sa_handler = [](int) {};
    sa.sa_flags   = sa_flags;
    sigaction(SIGUSR1, &sa, &old);
    std::thread t([&] {
        started = 1;
        while (!stop) {
            void *p = map_anon(page_size());
            /* the raw call: a worker's path, where a call waits (the
             * in-thread path's calls never do) */
            if (syscall(SYS_munmap, p, page_size()) != 0) {
                ++failed;
                last_errno = errno;
                munmap(p, page_size());
            }
            ++calls;
        }
    });
    pthread_t h = t.native_handle();
    /* the storm starts once the thread runs its own code: a thread's
     * start-up (glibc's, a sanitizer's) is not what is measured */
    while (!started) {
        sched_yield();
    }
    for (int i = 0; i < 3000; ++i) {
        pthread_kill(h, SIGUSR1);
        if ((i % 16) == 0) {
            usleep(50);
        }
    }
    stop = true;
    t.join();
    sigaction(SIGUSR1, &old, NULL);
    *calls_p  = calls;
    *failed_p = failed;
    *errno_p  = last_errno;
}

TEST_F(seccomp_source, signals)
{
    long calls, failed;
    int err;

    if (under_asan()) {
        /* ASan's munmap() interceptor maps over the shadow of the range
         * (MAP_FIXED: a call the filter catches) with its own system
         * calls; under the storm those fail with EINTR, which it treats
         * as fatal, in about half of the runs, SA_RESTART or not */
        GTEST_SKIP() << "a signal storm under AddressSanitizer: its own "
                        "shadow mappings fail with EINTR and it aborts";
    }

    signal_storm(SA_RESTART, &calls, &failed, &err);
    printf("[ seccomp  ] 3000 signals, SA_RESTART: %ld munmap calls, %ld "
           "failed\n", calls, failed);
    EXPECT_EQ(0, failed) << strerror(err);

    signal_storm(0, &calls, &failed, &err);
    printf("[ seccomp  ] 3000 signals, no SA_RESTART: %ld munmap calls, %ld "
           "failed with EINTR (see the README)\n", calls, failed);
    if (failed > 0) {
        EXPECT_EQ(EINTR, err);
    }
}

namespace {

/* Wait for a child, at most 'secs'; -1 if it had to be killed. */
int wait_child(pid_t pid, double secs)
{
    int st;
    for (int i = 0; i < secs * 100; ++i) {
        if (waitpid(pid, &st, WNOHANG) == pid) {
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

} // namespace

/* fork(): the child shares the filter but not our memory; its calls go
 * through, and programs it runs start (the loader maps with MAP_FIXED). */
TEST_F(seccomp_source, fork_and_exec)
{
    ucs_ummunotify_seccomp_stats_t before, after;

    if (under_asan()) {
        GTEST_SKIP() << "fork() of a multithreaded process under a sanitizer";
    }
    ucs_ummunotify_seccomp_get_stats(&before);
    pid_t pid = fork();
    if (pid == 0) {
        for (int i = 0; i < 100; ++i) {
            void *p = map_anon(page_size());
            /* the raw call: a worker's path, where a call waits (the
             * in-thread path's calls never do) */
            if (syscall(SYS_munmap, p, page_size()) != 0) {
                _exit(1);
            }
            free(malloc(1 << 20));
        }
        execl("/bin/sh", "sh", "-c", "exit 7", (char*)NULL);
        _exit(2);
    }
    ASSERT_GT(pid, 0);
    EXPECT_EQ(7, wait_child(pid, 30));
    ucs_ummunotify_seccomp_get_stats(&after);
    printf("[ seccomp  ] fork child and its exec: %llu calls let through\n",
           (unsigned long long)(after.foreign - before.foreign));
    EXPECT_GE(after.foreign - before.foreign, 100u);
}

/* A callback that does not return within UCX_REMAPRING_SECCOMP_TIMEOUT (1 s
 * here): the calls waiting behind it proceed, with one error line. */
TEST_F(seccomp_source, stuck_callback_times_out)
{
    ucs_ummunotify_seccomp_stats_t before, after;
    size_t len = page_size();

    /* raw system calls: a worker reports, and the calls behind it wait */
    ucs_ummunotify_seccomp_get_stats(&before);
    void *a = map(len), *b = map(len);
    g_slow_ms = 3000;
    std::thread slow([&] { syscall(SYS_munmap, a, len); });
    usleep(200000); /* the slow one is in its callback */
    auto t0 = std::chrono::steady_clock::now();
    syscall(SYS_munmap, b, len);
    double waited = std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - t0).count();
    slow.join();
    ucs_ummunotify_seccomp_get_stats(&after);
    printf("[ seccomp  ] behind a 3 s callback, munmap waited %.2f s; "
           "%llu timeout(s)\n", waited,
           (unsigned long long)(after.timeouts - before.timeouts));
    EXPECT_LT(waited, 2.5);
    EXPECT_EQ(1u, after.timeouts - before.timeouts);

    /* through the C library: the slow callback holds only its own thread */
    ucs_ummunotify_seccomp_get_stats(&before);
    a = map(len);
    b = map(len);
    g_slow_ms = 3000;
    std::thread slow2([&] { munmap(a, len); });
    usleep(200000);
    t0 = std::chrono::steady_clock::now();
    munmap(b, len);
    waited = std::chrono::duration<double>(
                     std::chrono::steady_clock::now() - t0).count();
    slow2.join();
    ucs_ummunotify_seccomp_get_stats(&after);
    printf("[ seccomp  ] beside a 3 s callback in another thread, munmap() "
           "waited %.2f s\n", waited);
    EXPECT_LT(waited, 1.0);
    EXPECT_EQ(0u, after.timeouts - before.timeouts);
}


/*
 * --orphan FILE (test/scripts/test_seccomp_processes.sh): a process whose
 * parent has no filter starts the source, forks a child and exits at once;
 * the child, its parent gone, unmaps memory and runs a program (the loader
 * maps with MAP_FIXED), which only works if the guard lets the calls
 * through. The child writes what it saw to FILE.
 */
static int orphan_main(const char *file)
{
    FILE *out;

    (void)ucm_set_event_handler(UCM_EVENT_VM_UNMAPPED, 0, log_callback, NULL);
    if (!ucs_ummunotify_seccomp_running()) {
        out = fopen(file, "w");
        fprintf(out, "source not running\n");
        fclose(out);
        return 1;
    }
    pid_t parent = getpid();
    pid_t pid    = fork();
    if (pid != 0) {
        _exit(0); /* the starter goes away */
    }
    while (kill(parent, 0) == 0) {
        usleep(10000);
    }
    void *p = map_anon(page_size());
    int ret = munmap(p, page_size());
    int st  = system("exit 5");
    out     = fopen(file, "w");
    fprintf(out, "munmap %d, sh exit %d\n", ret,
            WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    fclose(out);
    _exit(0);
}

/* --probe (test/scripts/test_seccomp_processes.sh): with the environment as
 * given, subscribe as a UCS cache would and say whether the source runs */
static int probe_main()
{
    ucs_status_t status = ucm_set_event_handler(UCM_EVENT_VM_UNMAPPED, 0,
                                                log_callback, NULL);
    printf("running %d subscribed %s\n", ucs_ummunotify_seccomp_running(),
           ucs_status_string(status));
    return 0;
}

int main(int argc, char **argv)
{
    if ((argc == 2) && !strcmp(argv[1], "--probe")) {
        return probe_main();
    }

    if (getenv("REMAPRING_SECCOMP_TEST") == NULL) {
        setenv("UCX_MEM_MALLOC_HOOKS", "n", 1);
        setenv("UCX_MEM_MMAP_HOOK_MODE", "none", 1);
        if (!under_valgrind()) { /* the cases skip with the reason */
            setenv("UCX_REMAPRING_NOTIFIER", "seccomp", 1);
        }
        setenv("UCX_REMAPRING_SECCOMP_TIMEOUT", "1s", 1);
        setenv("REMAPRING_SECCOMP_TEST", "1", 1);
        if (under_asan()) {
            /* LeakSanitizer's check at exit stops every thread with
             * ptrace, the source's workers too, and its tracer's own
             * mmap() then waits for them (docs/notifier.md) */
            std::string o = getenv("ASAN_OPTIONS") ? getenv("ASAN_OPTIONS")
                                                   : "";
            setenv("ASAN_OPTIONS", (o + ":detect_leaks=0").c_str(), 1);
        }
        return reexec_self(argv);
    }

    if ((argc == 3) && !strcmp(argv[1], "--orphan")) {
        return orphan_main(argv[2]);
    }

    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
