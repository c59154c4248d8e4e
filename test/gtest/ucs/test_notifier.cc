/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * The notifier against the kernel: one test per behaviour of DESIGN 5, run
 * on both engines where the engine can see it; fork; the monitor never
 * deadlocking; and a race stress of lookups against unmaps.
 */

#include "notifier_fixture.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <thread>

using namespace remapring_test;


class notifier : public ::testing::TestWithParam<ucs_ummunotify_engine_t> {
protected:
    void SetUp() override
    {
        std::string why;

        if (engine() == UCS_UMMUNOTIFY_ENGINE_UFFD) {
            if (!uffd_usable(&why)) {
                GTEST_SKIP() << why;
            }
        }

        select_engine(engine());
        ucs_ummunotify_params_t params = {};
        params.mode      = UCS_UMMUNOTIFY_MODE_QUEUE;
        params.queue_len = 256;
        ucs_status_t status = ucs_ummunotify_open(&params, &m_notifier);
        if ((status != UCS_OK) && (engine() == UCS_UMMUNOTIFY_ENGINE_UCM)) {
            m_notifier = NULL;
            GTEST_SKIP() << "ucm engine unavailable: "
                         << ucs_status_string(status);
        }
        ASSERT_EQ(UCS_OK, status);
        ASSERT_EQ(engine(), ucs_ummunotify_engine());
    }

    void TearDown() override
    {
        for (auto reg : m_regs) {
            ucs_ummunotify_unregister(reg);
        }
        if (m_notifier != NULL) {
            ucs_ummunotify_close(m_notifier);
        }
        select_engine(UCS_UMMUNOTIFY_ENGINE_AUTO);
    }

    ucs_ummunotify_engine_t engine() const
    {
        return GetParam();
    }

    bool is_uffd() const
    {
        return engine() == UCS_UMMUNOTIFY_ENGINE_UFFD;
    }

    ucs_ummunotify_reg_t *watch(void *addr, size_t len, uint64_t cookie)
    {
        ucs_ummunotify_reg_t *reg = NULL;
        EXPECT_EQ(UCS_OK, ucs_ummunotify_register(m_notifier, addr, len,
                                                  cookie, &reg));
        if (reg != NULL) {
            m_regs.push_back(reg);
        }
        return reg;
    }

    std::vector<ucs_ummunotify_event_t> events()
    {
        std::vector<ucs_ummunotify_event_t> evs(64);
        evs.resize(ucs_ummunotify_read(m_notifier, evs.data(), evs.size()));
        return evs;
    }

    /* Exactly one event, for 'cookie', covering [start, end). Events are
     * queued before the unmapping call returns, so no waiting. */
    void expect_one_event(uint64_t cookie, void *start, void *end,
                          ucs_ummunotify_event_type_t uffd_type)
    {
        auto evs = events();
        ASSERT_EQ(1u, evs.size());
        EXPECT_EQ(cookie, evs[0].cookie);
        if (is_uffd()) {
            EXPECT_EQ((uintptr_t)start, evs[0].start);
            EXPECT_EQ((uintptr_t)end, evs[0].end);
            EXPECT_EQ(uffd_type, evs[0].type);
        } else {
            /* UCM may report more (e.g. all of an mremap's old range) */
            EXPECT_LE(evs[0].start, (uintptr_t)start);
            EXPECT_GE(evs[0].end, (uintptr_t)end);
        }
    }

    ucs_ummunotify_t                   *m_notifier = NULL;
    std::vector<ucs_ummunotify_reg_t*> m_regs;
};


/* UCM 1.13's bistro mremap hook drops the fifth argument, so a libc
 * mremap(MREMAP_FIXED) goes to a garbage address: call the kernel. */
static void *sys_mremap(void *old, size_t old_len, size_t new_len, int flags,
                        void *new_addr = NULL)
{
    return (void*)syscall(SYS_mremap, old, old_len, new_len, flags,
                          new_addr);
}

#define PG(_n) ((_n) * page_size())
#define AT(_p, _n) ((char*)(_p) + PG(_n))


/* munmap of exactly the registered range */
TEST_P(notifier, munmap_whole)
{
    void *p = map_anon(PG(4));
    auto reg = watch(p, PG(4), 1);
    uint64_t gen = __atomic_load_n(ucs_ummunotify_generation_ptr(),
                                   __ATOMIC_ACQUIRE);

    ASSERT_EQ(0, munmap(p, PG(4)));
    EXPECT_FALSE(ucs_ummunotify_reg_is_valid(reg));
    uint64_t now = ucs_ummunotify_read_begin(); /* waits while odd */
    EXPECT_NE(gen, now);
    EXPECT_EQ(0u, now & 1);
    expect_one_event(1, p, AT(p, 4), UCS_UMMUNOTIFY_EVENT_UNMAP);
}

/* munmap of a part: the event carries the unmapped part */
TEST_P(notifier, munmap_part)
{
    void *p = map_anon(PG(4));
    watch(p, PG(4), 2);

    ASSERT_EQ(0, munmap(AT(p, 1), PG(2)));
    expect_one_event(2, AT(p, 1), AT(p, 3), UCS_UMMUNOTIFY_EVENT_UNMAP);
    munmap(p, PG(4));
    EXPECT_TRUE(events().empty()) << "one-shot registration";
}

/* munmap of more than registered: the kernel passes the whole argument,
 * the event is clipped to the registration */
TEST_P(notifier, munmap_more_than_registered)
{
    void *p = map_anon(PG(8));
    watch(AT(p, 3), PG(2), 3);

    ASSERT_EQ(0, munmap(p, PG(8)));
    expect_one_event(3, AT(p, 3), AT(p, 5), UCS_UMMUNOTIFY_EVENT_UNMAP);
}

/* a range next to the unmapped one is not touched */
TEST_P(notifier, munmap_neighbour)
{
    void *p = map_anon(PG(4));
    auto reg = watch(p, PG(2), 4);

    ASSERT_EQ(0, munmap(AT(p, 2), PG(2)));
    EXPECT_TRUE(events().empty());
    EXPECT_TRUE(ucs_ummunotify_reg_is_valid(reg));
    munmap(p, PG(2));
}

/* mmap(MAP_FIXED) over gives UNMAP; the new mapping is not watched */
TEST_P(notifier, map_fixed_over)
{
    void *p = map_anon(PG(4));
    watch(p, PG(4), 5);

    ASSERT_EQ(p, map_anon(PG(4), p, MAP_FIXED));
    expect_one_event(5, p, AT(p, 4), UCS_UMMUNOTIFY_EVENT_UNMAP);

    ASSERT_EQ(0, munmap(p, PG(4)));
    EXPECT_TRUE(events().empty()) << "new mapping must not be watched";
}

/* mremap move (it cannot grow in place): one event for the old range */
TEST_P(notifier, mremap_move)
{
    void *p = map_anon(PG(5));
    watch(p, PG(4), 6);

    /* page 4 stays mapped: growing to 64 pages must move */
    void *q = mremap(p, PG(4), PG(64), MREMAP_MAYMOVE);
    ASSERT_NE(MAP_FAILED, q);
    ASSERT_NE(p, q);
    expect_one_event(6, p, AT(p, 4), UCS_UMMUNOTIFY_EVENT_REMAP);
    munmap(q, PG(64));
    munmap(AT(p, 4), PG(1));
    events(); /* the moved pages stay registered with the kernel, for
                 nobody: whatever this reports, it is not ours */
}

/* mremap(MREMAP_FIXED) onto another mapping */
TEST_P(notifier, mremap_fixed)
{
    if (!is_uffd()) {
        GTEST_SKIP() << "UCM 1.13's mremap hook loses MREMAP_FIXED's "
                        "new_address";
    }

    void *p    = map_anon(PG(4));
    void *dest = map_anon(PG(4));
    watch(p, PG(4), 6);

    void *q = sys_mremap(p, PG(4), PG(4), MREMAP_MAYMOVE | MREMAP_FIXED,
                         dest);
    ASSERT_EQ(dest, q) << strerror(errno);
    expect_one_event(6, p, AT(p, 4), UCS_UMMUNOTIFY_EVENT_REMAP);
    munmap(q, PG(4));
    events();
}

/* mremap shrink in place: UNMAP of the tail */
TEST_P(notifier, mremap_shrink)
{
    void *p = map_anon(PG(4));
    watch(p, PG(4), 7);

    ASSERT_EQ(p, mremap(p, PG(4), PG(1), 0));
    expect_one_event(7, AT(p, 1), AT(p, 4), UCS_UMMUNOTIFY_EVENT_UNMAP);
    munmap(p, PG(1));
}

/* mremap grow in place: nothing to report */
TEST_P(notifier, mremap_grow_no_event)
{
    void *p = map_anon(PG(8));
    munmap(AT(p, 4), PG(4));
    auto reg = watch(p, PG(4), 8);

    if (!is_uffd()) {
        munmap(p, PG(4));
        GTEST_SKIP() << "UCM reports every mremap as an unmap of the old "
                        "range";
    }

    void *q = mremap(p, PG(4), PG(8), 0);
    if (q == MAP_FAILED) {
        munmap(p, PG(4));
        GTEST_SKIP() << "could not grow in place: " << strerror(errno);
    }
    EXPECT_TRUE(events().empty());
    EXPECT_TRUE(ucs_ummunotify_reg_is_valid(reg));
    munmap(p, PG(8));
}

TEST_P(notifier, madv_dontneed)
{
    void *p = map_anon(PG(4));
    watch(p, PG(4), 9);
    memset(p, 1, PG(4));

    ASSERT_EQ(0, madvise(AT(p, 1), PG(1), MADV_DONTNEED));
    expect_one_event(9, AT(p, 1), AT(p, 2), UCS_UMMUNOTIFY_EVENT_REMOVE);
    munmap(p, PG(4));
}

TEST_P(notifier, madv_free)
{
    void *p = map_anon(PG(4));
    watch(p, PG(4), 10);
    memset(p, 1, PG(4));

    ASSERT_EQ(0, madvise(p, PG(4), MADV_FREE));
    if (!is_uffd() && events().empty()) {
        GTEST_SKIP() << "UCM does not hook MADV_FREE";
    }
    if (is_uffd()) {
        expect_one_event(10, p, AT(p, 4), UCS_UMMUNOTIFY_EVENT_REMOVE);
    }
    munmap(p, PG(4));
}

/* MADV_REMOVE punches the shmem backing: memfd memory */
TEST_P(notifier, madv_remove_memfd)
{
    int fd = memfd_create("notifier", 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(0, ftruncate(fd, PG(4)));
    void *p = mmap(NULL, PG(4), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ASSERT_NE(MAP_FAILED, p);
    watch(p, PG(4), 11);
    memset(p, 1, PG(4));

    ASSERT_EQ(0, madvise(p, PG(2), MADV_REMOVE));
    expect_one_event(11, p, AT(p, 2), UCS_UMMUNOTIFY_EVENT_REMOVE);
    munmap(p, PG(4));
    close(fd);
}

/* harmless facts: mprotect, MADV_PAGEOUT report nothing */
TEST_P(notifier, mprotect_pageout_no_event)
{
    void *p = map_anon(PG(4));
    auto reg = watch(p, PG(4), 12);
    memset(p, 1, PG(4));

    ASSERT_EQ(0, mprotect(p, PG(4), PROT_READ));
    madvise(p, PG(4), 21 /* MADV_PAGEOUT */);
    EXPECT_TRUE(events().empty());
    EXPECT_TRUE(ucs_ummunotify_reg_is_valid(reg));
    munmap(p, PG(4));
}

/* brk shrink of the heap end */
TEST_P(notifier, brk_shrink)
{
    /* page-align the break, then grow it by 4 pages */
    uintptr_t cur = (uintptr_t)sbrk(0);
    uintptr_t pad = ((cur + PG(1) - 1) & ~(PG(1) - 1)) - cur;
    ASSERT_NE((void*)-1, sbrk(pad + PG(4)));
    void *p = (void*)(cur + pad);
    memset(p, 1, PG(4));
    watch(p, PG(4), 13);

    ASSERT_NE((void*)-1, sbrk(-(intptr_t)PG(4)));
    auto evs = events();
    if (!is_uffd() && evs.empty()) {
        sbrk(-(intptr_t)pad);
        GTEST_SKIP() << "UCM's brk hook did not see sbrk()";
    }
    ASSERT_EQ(1u, evs.size());
    EXPECT_EQ(13u, evs[0].cookie);
    EXPECT_EQ((uintptr_t)p, evs[0].start);
    EXPECT_EQ((uintptr_t)AT(p, 4), evs[0].end);
    sbrk(-(intptr_t)pad);
}

/* heap memory from malloc registers, and madvise in it is seen */
TEST_P(notifier, heap_malloc)
{
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    char *buf = (char*)malloc(PG(8));
    ASSERT_NE(nullptr, buf);
    void *p = (void*)(((uintptr_t)buf + PG(1) - 1) & ~(PG(1) - 1));
    watch(p, PG(4), 14);

    ASSERT_EQ(0, madvise(p, PG(1), MADV_DONTNEED));
    expect_one_event(14, p, AT(p, 1), UCS_UMMUNOTIFY_EVENT_REMOVE);
    free(buf);
}

TEST_P(notifier, memfd_munmap)
{
    int fd = memfd_create("notifier", 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(0, ftruncate(fd, PG(8)));
    void *p = mmap(NULL, PG(4), PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                   PG(4));
    ASSERT_NE(MAP_FAILED, p);
    watch(p, PG(4), 15);

    ASSERT_EQ(0, munmap(p, PG(4)));
    expect_one_event(15, p, AT(p, 4), UCS_UMMUNOTIFY_EVENT_UNMAP);
    close(fd);
}

TEST_P(notifier, hugetlb)
{
    size_t huge = 2ul << 20;
    void *p     = mmap(NULL, huge, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
    if (p == MAP_FAILED) {
        GTEST_SKIP() << "no 2 MiB huge pages (vm.nr_hugepages): "
                     << strerror(errno);
    }
    memset(p, 1, huge);
    watch(p, huge, 16);

    ASSERT_EQ(0, munmap(p, huge));
    expect_one_event(16, p, (char*)p + huge, UCS_UMMUNOTIFY_EVENT_UNMAP);
}

/* known gap: punching a hole in a memfd is not reported */
TEST_P(notifier, memfd_punch_hole_not_reported)
{
    int fd = memfd_create("notifier", 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(0, ftruncate(fd, PG(4)));
    void *p = mmap(NULL, PG(4), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ASSERT_NE(MAP_FAILED, p);
    memset(p, 1, PG(4));
    auto reg = watch(p, PG(4), 17);

    ASSERT_EQ(0, fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                           PG(2)));
    EXPECT_TRUE(events().empty())
        << "the kernel now reports PUNCH_HOLE: update DESIGN 5";
    EXPECT_TRUE(ucs_ummunotify_reg_is_valid(reg));
    munmap(p, PG(4));
    close(fd);
}

/* a regular file MAP_SHARED registers only with UFFD_FEATURE_WP_ASYNC */
TEST_P(notifier, file_shared)
{
    if (!is_uffd()) {
        GTEST_SKIP() << "the ucm engine watches everything";
    }

    char path[] = "/tmp/notifier_fileXXXXXX";
    int fd      = mkstemp(path);
    ASSERT_GE(fd, 0);
    unlink(path);
    ASSERT_EQ(0, ftruncate(fd, PG(4)));
    void *p = mmap(NULL, PG(4), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ASSERT_NE(MAP_FAILED, p);

    ucs_ummunotify_reg_t *reg;
    ucs_status_t status = ucs_ummunotify_register(m_notifier, p, PG(4), 18,
                                                  &reg);
    if (status == UCS_ERR_UNSUPPORTED) {
        munmap(p, PG(4));
        close(fd);
        GTEST_SKIP() << "kernel without UFFD_FEATURE_WP_ASYNC";
    }
    ASSERT_EQ(UCS_OK, status);
    m_regs.push_back(reg);

    ASSERT_EQ(0, munmap(p, PG(4)));
    expect_one_event(18, p, AT(p, 4), UCS_UMMUNOTIFY_EVENT_UNMAP);
    close(fd);
}

/* overlapping registrations: each gets its event; unregistering one keeps
 * the other watched */
TEST_P(notifier, overlap)
{
    void *p = map_anon(PG(4));
    auto a  = watch(p, PG(4), 19);
    auto b  = watch(AT(p, 1), PG(2), 20);

    ucs_ummunotify_unregister(a);
    m_regs.erase(m_regs.begin());

    ASSERT_EQ(0, munmap(p, PG(4)));
    expect_one_event(20, AT(p, 1), AT(p, 3), UCS_UMMUNOTIFY_EVENT_UNMAP);
    EXPECT_FALSE(ucs_ummunotify_reg_is_valid(b));
}

/* unregistered memory reports nothing */
TEST_P(notifier, unregister)
{
    void *p = map_anon(PG(4));
    auto reg = watch(p, PG(4), 21);

    ucs_ummunotify_unregister(reg);
    m_regs.clear();
    ASSERT_EQ(0, munmap(p, PG(4)));
    EXPECT_TRUE(events().empty());
}

/* A range with a hole: Linux 6.x registers the mapped parts (older
 * kernels refuse with ENOMEM); the memcache checks coverage itself. */
TEST_P(notifier, register_with_hole)
{
    void *p = map_anon(PG(4));
    munmap(AT(p, 1), PG(1));
    ucs_ummunotify_reg_t *reg;
    ucs_status_t status = ucs_ummunotify_register(m_notifier, p, PG(4), 22,
                                                  &reg);
    if (status == UCS_ERR_INVALID_ADDR) {
        munmap(p, PG(4));
        GTEST_SKIP() << "this kernel refuses ranges with holes";
    }
    ASSERT_EQ(UCS_OK, status);
    m_regs.push_back(reg);

    ASSERT_EQ(0, munmap(AT(p, 2), PG(2)));
    expect_one_event(22, AT(p, 2), AT(p, 4), UCS_UMMUNOTIFY_EVENT_UNMAP);
    munmap(p, PG(1));
}

/* queue overflow is reported */
TEST_P(notifier, overflow)
{
    const int n = 300; /* queue_len 256 */
    std::vector<void*> maps;

    for (int i = 0; i < n; ++i) {
        maps.push_back(map_anon(PG(1)));
        watch(maps.back(), PG(1), 100 + i);
    }
    for (auto p : maps) {
        munmap(p, PG(1));
    }

    std::vector<ucs_ummunotify_event_t> evs(512);
    evs.resize(ucs_ummunotify_read(m_notifier, evs.data(), evs.size()));
    ASSERT_EQ(257u, evs.size());
    EXPECT_EQ(UCS_UMMUNOTIFY_EVENT_OVERFLOW, evs.back().type);
}

INSTANTIATE_TEST_SUITE_P(engine, notifier,
                         ::testing::Values(UCS_UMMUNOTIFY_ENGINE_UFFD,
                                           UCS_UMMUNOTIFY_ENGINE_UCM),
                         [](const ::testing::TestParamInfo<
                                 ucs_ummunotify_engine_t> &info) {
                             return std::string(
                                     ucs_ummunotify_engine_name(info.param));
                         });


/* ------------------------------------------------------------- uffd only */

class notifier_uffd : public ::testing::Test {
protected:
    void SetUp() override
    {
        std::string why;

        if (!uffd_usable(&why)) {
            GTEST_SKIP() << why;
        }
        select_engine(UCS_UMMUNOTIFY_ENGINE_UFFD);
    }

    void TearDown() override
    {
        select_engine(UCS_UMMUNOTIFY_ENGINE_AUTO);
    }

    /* run f in a child; fail if it does not finish in 'seconds' */
    template <typename F> void run_with_timeout(F f, int seconds)
    {
        if (under_asan()) {
            /* no fork (see under_asan()): a deadlock kills the process */
            alarm(seconds);
            EXPECT_EQ(0, f());
            alarm(0);
            return;
        }

        pid_t pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            alarm(seconds);
            _exit(f());
        }
        int status;
        ASSERT_EQ(pid, waitpid(pid, &status, 0));
        ASSERT_TRUE(WIFEXITED(status))
            << "child killed by signal " << WTERMSIG(status)
            << " (SIGALRM: deadlock)";
        EXPECT_EQ(0, WEXITSTATUS(status));
    }
};


struct deferred_ctx {
    void                  *other;      /* registered, unmapped by callback */
    size_t                len;
    std::atomic<int>      calls{0};
    std::atomic<pthread_t> thread;
};

static void deferred_unmap_cb(void *arg, const ucs_ummunotify_event_t *ev)
{
    deferred_ctx *ctx = (deferred_ctx*)arg;

    ctx->thread = pthread_self();
    if (ctx->calls++ == 0) {
        /* on the worker: unmapping watched memory and freeing is allowed */
        munmap(ctx->other, ctx->len);
        free(malloc(1 << 20));
        malloc_trim(0);
    }
}

/* A DEFERRED callback that unmaps watched memory (which makes the kernel
 * wait for the monitor) completes: the monitor never waits for itself. */
TEST_F(notifier_uffd, deferred_callback_unmaps)
{
    run_with_timeout([]() {
        deferred_ctx ctx;
        ucs_ummunotify_params_t params = {};
        ucs_ummunotify_t *n;
        ucs_ummunotify_reg_t *r1, *r2;

        params.mode = UCS_UMMUNOTIFY_MODE_DEFERRED;
        params.cb   = deferred_unmap_cb;
        params.arg  = &ctx;
        if (ucs_ummunotify_open(&params, &n) != UCS_OK) {
            return 1;
        }

        ctx.len   = PG(4);
        ctx.other = map_anon(ctx.len);
        void *p   = map_anon(PG(4));
        if ((ucs_ummunotify_register(n, p, PG(4), 1, &r1) != UCS_OK) ||
            (ucs_ummunotify_register(n, ctx.other, ctx.len, 2, &r2) !=
             UCS_OK)) {
            return 2;
        }

        munmap(p, PG(4));
        ucs_ummunotify_flush();
        ucs_ummunotify_flush(); /* the second event, from the callback */
        if (ctx.calls != 2) {
            return 3;
        }
        if (pthread_equal(ctx.thread, pthread_self())) {
            return 4;
        }
        ucs_ummunotify_unregister(r1);
        ucs_ummunotify_unregister(r2);
        ucs_ummunotify_close(n);
        return 0;
    }, 10);
}

struct sync_ctx {
    ucs_ummunotify_work_t work;
    void                  *other;
    size_t                len;
    std::atomic<int>      done{0};
};

static void sync_work(ucs_ummunotify_work_t *work)
{
    sync_ctx *ctx = ucs_container_of(work, sync_ctx, work);

    munmap(ctx->other, ctx->len); /* watched: the monitor must answer */
    ctx->done = 1;
}

static void sync_cb(void *arg, const ucs_ummunotify_event_t *ev)
{
    sync_ctx *ctx = (sync_ctx*)arg;

    if (ev->cookie == 1) {
        ucs_ummunotify_defer(&ctx->work); /* takes no memory */
    }
}

/* A SYNC callback defers the release of memory; many threads unmap watched
 * memory concurrently while that happens; nothing deadlocks. */
TEST_F(notifier_uffd, monitor_never_deadlocks)
{
    run_with_timeout([]() {
        sync_ctx ctx;
        ucs_ummunotify_params_t params = {};
        ucs_ummunotify_t *n;
        ucs_ummunotify_reg_t *r1, *r2;

        ctx.work      = {};
        ctx.work.func = sync_work;
        params.mode   = UCS_UMMUNOTIFY_MODE_SYNC;
        params.cb     = sync_cb;
        params.arg    = &ctx;
        if (ucs_ummunotify_open(&params, &n) != UCS_OK) {
            return 1;
        }

        ctx.len   = PG(4);
        ctx.other = map_anon(ctx.len);
        void *p   = map_anon(PG(4));
        if ((ucs_ummunotify_register(n, p, PG(4), 1, &r1) != UCS_OK) ||
            (ucs_ummunotify_register(n, ctx.other, ctx.len, 2, &r2) !=
             UCS_OK)) {
            return 2;
        }

        /* 4 threads x 200 watched map/unmap cycles alongside */
        std::vector<std::thread> threads;
        for (int t = 0; t < 4; ++t) {
            threads.emplace_back([n]() {
                for (int i = 0; i < 200; ++i) {
                    ucs_ummunotify_reg_t *r;
                    void *q = map_anon(PG(2));
                    if (ucs_ummunotify_register(n, q, PG(2), 3, &r) ==
                        UCS_OK) {
                        munmap(q, PG(2));
                        ucs_ummunotify_unregister(r);
                    }
                }
            });
        }

        munmap(p, PG(4));
        for (auto &t : threads) {
            t.join();
        }
        ucs_ummunotify_flush();
        if (!ctx.done) {
            return 3;
        }
        ucs_ummunotify_unregister(r1);
        ucs_ummunotify_unregister(r2);
        ucs_ummunotify_close(n);
        return 0;
    }, 20);
}

/* fork(): the child's munmap of (its copy of) watched memory does not wait,
 * the child can watch its own memory, and the parent keeps working. */
TEST_F(notifier_uffd, fork_child)
{
    if (under_asan()) {
        GTEST_SKIP() << "fork() with threads: not under ASan or TSan";
    }
    ucs_ummunotify_params_t params = {};
    ucs_ummunotify_t *n;
    ucs_ummunotify_reg_t *reg, *preg;
    ucs_ummunotify_event_t ev;

    params.mode = UCS_UMMUNOTIFY_MODE_QUEUE;
    ASSERT_EQ(UCS_OK, ucs_ummunotify_open(&params, &n));

    void *p = map_anon(PG(4));
    void *q = map_anon(PG(4));
    memset(p, 0x5a, PG(4));
    ASSERT_EQ(UCS_OK, ucs_ummunotify_register(n, p, PG(4), 1, &reg));
    ASSERT_EQ(UCS_OK, ucs_ummunotify_register(n, q, PG(4), 2, &preg));
    uint64_t epoch = ucs_ummunotify_fork_epoch();

    run_with_timeout([&]() {
        if (ucs_ummunotify_fork_epoch() == epoch) {
            return 1;
        }
        if (ucs_ummunotify_reg_is_valid(reg)) {
            return 2; /* nothing is watched in the child */
        }
        memset(p, 0xa5, PG(4)); /* COW: the parent keeps 0x5a */
        munmap(p, PG(4)); /* must not wait for the parent's monitor */

        /* the child's own userfaultfd, on first use */
        ucs_ummunotify_reg_t *creg;
        void *c = map_anon(PG(2));
        if (ucs_ummunotify_register(n, c, PG(2), 3, &creg) != UCS_OK) {
            return 3;
        }
        munmap(c, PG(2));
        ucs_ummunotify_event_t cev;
        if ((ucs_ummunotify_read(n, &cev, 1) != 1) || (cev.cookie != 3)) {
            return 4;
        }
        ucs_ummunotify_unregister(creg);
        return 0;
    }, 10);

    /* the child's munmap did not reach the parent */
    EXPECT_TRUE(ucs_ummunotify_reg_is_valid(reg));
    EXPECT_EQ(0u, ucs_ummunotify_read(n, &ev, 1));
    EXPECT_EQ(0x5a, ((unsigned char*)p)[PG(4) - 1]);

    ASSERT_EQ(0, munmap(q, PG(4)));
    ASSERT_EQ(1u, ucs_ummunotify_read(n, &ev, 1));
    EXPECT_EQ(2u, ev.cookie);

    munmap(p, PG(4));
    ucs_ummunotify_unregister(reg);
    ucs_ummunotify_unregister(preg);
    ucs_ummunotify_close(n);
}

/* The engine stops with its last client and starts again. */
TEST_F(notifier_uffd, restart)
{
    ucs_ummunotify_params_t params = {};
    ucs_ummunotify_t *n;

    params.mode = UCS_UMMUNOTIFY_MODE_QUEUE;
    for (int i = 0; i < 3; ++i) {
        ASSERT_EQ(UCS_OK, ucs_ummunotify_open(&params, &n));
        EXPECT_EQ(UCS_UMMUNOTIFY_ENGINE_UFFD, ucs_ummunotify_engine());
        ucs_ummunotify_close(n);
        EXPECT_EQ(UCS_UMMUNOTIFY_ENGINE_AUTO, ucs_ummunotify_engine());
    }
}

/* Forced fallback: UCX_REMAPRING_NOTIFIER=ucm runs the UCM engine even
 * though userfaultfd works. */
TEST(notifier_engine, forced_ucm)
{
    ucs_ummunotify_params_t params = {};
    ucs_ummunotify_t *n;

    select_engine(UCS_UMMUNOTIFY_ENGINE_UCM);
    params.mode         = UCS_UMMUNOTIFY_MODE_QUEUE;
    ucs_status_t status = ucs_ummunotify_open(&params, &n);
    select_engine(UCS_UMMUNOTIFY_ENGINE_AUTO);
    if (status != UCS_OK) {
        GTEST_SKIP() << "UCM hooks unavailable: " << ucs_status_string(status);
    }
    EXPECT_EQ(UCS_UMMUNOTIFY_ENGINE_UCM, ucs_ummunotify_engine());
    ucs_ummunotify_close(n);
}

/* auto picks uffd where it can be opened */
TEST(notifier_engine, auto_prefers_uffd)
{
    ucs_ummunotify_params_t params = {};
    ucs_ummunotify_t *n;
    std::string why;

    if (!uffd_usable(&why)) {
        GTEST_SKIP() << why;
    }
    params.mode = UCS_UMMUNOTIFY_MODE_QUEUE;
    ASSERT_EQ(UCS_OK, ucs_ummunotify_open(&params, &n));
    EXPECT_EQ(UCS_UMMUNOTIFY_ENGINE_UFFD, ucs_ummunotify_engine());
    ucs_ummunotify_close(n);
}


/* ----------------------------------------------------------------- stress */

/*
 * Two threads map / register / unmap / remap at one address while a third
 * looks up a one-slot cache that a SYNC callback clears.
 *
 * Each mapping gets an id after mmap() returns. Before a call that destroys
 * whatever is at the address, a thread reads the newest id; after the call
 * returns, every mapping up to that id is dead ('dead_upto'). A lookup that
 * starts after dead_upto >= id and still finds id is a stale hit. The
 * mapping threads serialize their steps (a mapping is registered and
 * published before the other thread may replace it), the lookups do not.
 */
struct stress_ctx {
    char                  *addr;
    size_t                len;
    pthread_mutex_t       map_lock  = PTHREAD_MUTEX_INITIALIZER;
    pthread_spinlock_t    slot_lock;
    std::atomic<uint64_t> next_id{0};
    std::atomic<uint64_t> dead_upto{0};
    uint64_t              slot_id   = 0;  /* under slot_lock */
    ucs_ummunotify_reg_t  *slot_reg = NULL;
    std::atomic<bool>     stop{false};
    std::atomic<uint64_t> cycles{0}, lookups{0}, hits{0}, events{0},
                          stale{0}, stale_nobarrier{0};
    bool                  barrier   = true;
};

static void stress_cb(void *arg, const ucs_ummunotify_event_t *ev)
{
    stress_ctx *ctx = (stress_ctx*)arg;

    pthread_spin_lock(&ctx->slot_lock);
    if (ctx->slot_id == ev->cookie) {
        ctx->slot_id = 0;
    }
    pthread_spin_unlock(&ctx->slot_lock);
    ++ctx->events;
}

static void stress_dead(stress_ctx *ctx, uint64_t upto)
{
    uint64_t cur = ctx->dead_upto;
    while ((cur < upto) && !ctx->dead_upto.compare_exchange_weak(cur, upto)) {
    }
}

static void stress_mapper(stress_ctx *ctx, ucs_ummunotify_t *n, int seed)
{
    std::vector<ucs_ummunotify_reg_t*> old;
    unsigned r = seed;

    while (!ctx->stop) {
        pthread_mutex_lock(&ctx->map_lock);
        uint64_t newest = ctx->next_id;
        static const char *ops_env = getenv("REMAPRING_STRESS_OPS");
        unsigned op;
        do {
            op = (r = r * 1103515245 + 12345) >> 16 & 3;
        } while (ops_env && !strchr(ops_env, '0' + op) && (op != 0));
        switch (op) {
        case 0: { /* map (over whatever is there) and register */
            void *p = mmap(ctx->addr, ctx->len, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
            stress_dead(ctx, newest);
            if (p == MAP_FAILED) {
                break;
            }
            uint64_t id = ++ctx->next_id;
            ucs_ummunotify_reg_t *reg;
            if (ucs_ummunotify_register(n, p, ctx->len, id, &reg) != UCS_OK) {
                break;
            }
            pthread_spin_lock(&ctx->slot_lock);
            if (ucs_ummunotify_reg_test(reg)) {
                ctx->slot_id = id;
            }
            pthread_spin_unlock(&ctx->slot_lock);
            old.push_back(reg);
            break;
        }
        case 1: /* unmap */
            munmap(ctx->addr, ctx->len);
            stress_dead(ctx, newest);
            break;
        case 2: { /* remap away, then unmap there */
            void *q = sys_mremap(ctx->addr, ctx->len, ctx->len,
                                 MREMAP_MAYMOVE | MREMAP_FIXED,
                                 ctx->addr + ctx->len);
            stress_dead(ctx, newest);
            if (q != MAP_FAILED) {
                /* unmap there by mapping over it: keeps the target
                 * reserved, so no other mapping can land in it */
                mmap(q, ctx->len, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
            }
            break;
        }
        default: /* drop the pages */
            madvise(ctx->addr, ctx->len, MADV_DONTNEED);
            stress_dead(ctx, newest);
            break;
        }
        pthread_mutex_unlock(&ctx->map_lock);
        ++ctx->cycles;

        if (old.size() > 64) {
            /* release invalidated registrations; a valid one is published
             * in the slot and must stay watched */
            std::vector<ucs_ummunotify_reg_t*> keep;
            for (auto reg : old) {
                if (ucs_ummunotify_reg_test(reg)) {
                    keep.push_back(reg);
                } else {
                    ucs_ummunotify_unregister(reg);
                }
            }
            old.swap(keep);
        }
    }

    pthread_spin_lock(&ctx->slot_lock);
    ctx->slot_id = 0;
    pthread_spin_unlock(&ctx->slot_lock);
    for (auto reg : old) {
        ucs_ummunotify_unregister(reg);
    }
}

static void stress_looker(stress_ctx *ctx)
{
    uint64_t dead, id, gen;

    while (!ctx->stop) {
        dead = ctx->dead_upto.load(std::memory_order_acquire);
        if (ctx->barrier) {
            do {
                gen = ucs_ummunotify_read_begin();
                id  = __atomic_load_n(&ctx->slot_id, __ATOMIC_ACQUIRE);
            } while (ucs_ummunotify_read_retry(gen));
        } else {
            id = __atomic_load_n(&ctx->slot_id, __ATOMIC_ACQUIRE);
        }

        ++ctx->lookups;
        if (id != 0) {
            ++ctx->hits;
            if (id <= dead) {
                ++ctx->stale;
            }
        }
    }
}

static void run_stress(stress_ctx *ctx, double seconds)
{
    ucs_ummunotify_params_t params = {};
    ucs_ummunotify_t *n;

    pthread_spin_init(&ctx->slot_lock, 0);
    params.mode = UCS_UMMUNOTIFY_MODE_SYNC;
    params.cb   = stress_cb;
    params.arg  = ctx;
    ASSERT_EQ(UCS_OK, ucs_ummunotify_open(&params, &n));

    /* [guard | address | remap target | guard]: the hole that unmapping
     * the address leaves must not merge with free address space, or a new
     * thread stack could land in it and be mapped over */
    ctx->len   = PG(16);
    /* placed far below the other mappings: the kernel hands out the
     * highest free gap that fits, so a small mmap() elsewhere in the
     * process (ASan's, say) never picks our hole; clear of ASan's
     * shadow, which ends at 0x10007fff7fff */
    char *base = (char*)mmap((void*)0x500000000000ul, 4 * ctx->len, PROT_NONE,
                             MAP_PRIVATE | MAP_ANONYMOUS |
                             MAP_FIXED_NOREPLACE, -1, 0);
    if (base == MAP_FAILED) {
        base = (char*)mmap(NULL, 4 * ctx->len, PROT_NONE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    ASSERT_NE(MAP_FAILED, (void*)base);
    ctx->addr = base + ctx->len;

    std::thread a(stress_mapper, ctx, n, 1), b(stress_mapper, ctx, n, 2);
    std::thread c(stress_looker, ctx);
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    ctx->stop = true;
    a.join();
    b.join();
    c.join();

    munmap(base, 4 * ctx->len);
    ucs_ummunotify_close(n);
}

TEST_F(notifier_uffd, race_stress)
{
    double seconds = seconds_from_env("REMAPRING_STRESS_SECONDS", 20);
    stress_ctx ctx, nobarrier;

    /* for contrast: the same without the barrier (not asserted) */
    nobarrier.barrier = false;
    run_stress(&nobarrier, std::min(seconds / 10, 2.0));

    run_stress(&ctx, seconds);
    printf("[ stress   ] %.0f s: cycles %lu lookups %lu hits %lu events %lu "
           "stale hits %lu\n", seconds, ctx.cycles.load(),
           ctx.lookups.load(), ctx.hits.load(), ctx.events.load(),
           ctx.stale.load());
    printf("[ stress   ] without the barrier: cycles %lu lookups %lu "
           "stale hits %lu\n", nobarrier.cycles.load(),
           nobarrier.lookups.load(), nobarrier.stale.load());
    EXPECT_GT(ctx.events.load(), 0u);
    EXPECT_EQ(0u, ctx.stale.load());
}
