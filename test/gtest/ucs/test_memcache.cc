/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * The memtype/registration cache: classification of each kind of memory,
 * hits, drops on kernel reports, deferred deregistration, fork.
 */

#include "notifier_fixture.h"

extern "C" {
#include <ucs/memory/memcache.h>
}

#include <malloc.h>
#include <pthread.h>
#include <sys/wait.h>

#include <atomic>
#include <thread>

using namespace remapring_test;

#define PG(_n) ((_n) * page_size())
#define AT(_p, _n) ((char*)(_p) + PG(_n))


class memcache : public ::testing::Test {
protected:
    void SetUp() override
    {
        std::string why;

        if (!uffd_usable(&why)) {
            GTEST_SKIP() << why;
        }

        ucs_memcache_params_t params = {};
        params.name  = "test";
        params.reg   = reg_cb;
        params.dereg = dereg_cb;
        params.arg   = this;
        ASSERT_EQ(UCS_OK, ucs_memcache_create(&params, &m_cache));
    }

    void TearDown() override
    {
        if (m_cache != NULL) {
            ucs_memcache_destroy(m_cache);
            EXPECT_EQ(m_regs.load(), m_deregs.load());
        }
    }

    static ucs_status_t reg_cb(void *arg, ucs_memcache_region_t *region)
    {
        memcache *self = (memcache*)arg;
        region->memh   = (void*)(uintptr_t)++self->m_regs;
        return UCS_OK;
    }

    static void dereg_cb(void *arg, ucs_memcache_region_t *region)
    {
        memcache *self = (memcache*)arg;
        ++self->m_deregs;
        self->m_dereg_thread = pthread_self();
        void *unmap    = self->m_dereg_unmap.exchange(nullptr);
        if (unmap != NULL) {
            /* watched memory: the kernel makes this wait for the monitor */
            munmap(unmap, PG(4));
        }
    }

    ucs_memcache_region_t *get(void *addr, size_t len)
    {
        ucs_memcache_region_t *region = NULL;
        EXPECT_EQ(UCS_OK, ucs_memcache_get(m_cache, addr, len, &region));
        return region;
    }

    ucs_memcache_stats_t stats()
    {
        ucs_memcache_stats_t s;
        ucs_memcache_get_stats(m_cache, &s);
        return s;
    }

    ucs_memcache_t      *m_cache = NULL;
    std::atomic<int>    m_regs{0}, m_deregs{0};
    std::atomic<pthread_t> m_dereg_thread{};
    /* set by the test, taken by the worker thread: the only order between
     * them is the kernel's (an unmap, a userfaultfd event) */
    std::atomic<void*>  m_dereg_unmap{nullptr};
};


TEST_F(memcache, anon_hit_and_drop)
{
    void *p = map_anon(PG(4));
    auto r  = get(AT(p, 1) + 10, 100);
    ASSERT_NE(nullptr, r);
    EXPECT_EQ(UCS_MEMORY_TYPE_HOST, r->info.mem_type);
    EXPECT_EQ(UCS_MEMCACHE_BACKING_ANON, r->info.backing);
    EXPECT_EQ((uintptr_t)AT(p, 1), r->range.start);
    EXPECT_EQ((uintptr_t)AT(p, 2), r->range.end);

    auto r2 = get(AT(p, 1) + 200, 300);
    EXPECT_EQ(r, r2) << "a covered buffer is a hit";
    EXPECT_EQ(1u, stats().hits);
    EXPECT_EQ(1, m_regs.load());
    ucs_memcache_put(m_cache, r2);

    ASSERT_EQ(0, munmap(p, PG(4)));
    /* after munmap() returned, the region is gone from the cache */
    EXPECT_FALSE(ucs_memcache_region_is_valid(r));
    ucs_memcache_region_t *r3;
    EXPECT_EQ(UCS_ERR_NO_ELEM,
              ucs_memcache_lookup(m_cache, AT(p, 1) + 10, 100, &r3));
    EXPECT_EQ(0, m_deregs.load()) << "still held";
    ucs_memcache_put(m_cache, r);
    EXPECT_EQ(1, m_deregs.load());
}

/* a dropped region nobody holds is deregistered on the worker thread */
TEST_F(memcache, deferred_dereg_may_unmap)
{
    void *p = map_anon(PG(4));
    auto r  = get(p, PG(4));
    ASSERT_NE(nullptr, r);
    ucs_memcache_put(m_cache, r);

    /* the dereg callback unmaps another watched range */
    void *q = map_anon(PG(4));
    auto rq = get(q, PG(4));
    ucs_memcache_put(m_cache, rq);
    m_dereg_unmap = q;

    ASSERT_EQ(0, munmap(p, PG(4)));
    ucs_ummunotify_flush();
    ucs_ummunotify_flush();
    EXPECT_EQ(2, m_deregs.load());
    EXPECT_FALSE(pthread_equal(m_dereg_thread.load(), pthread_self()));
}

TEST_F(memcache, memfd_offset)
{
    int fd = memfd_create("memcache", 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(0, ftruncate(fd, PG(16)));
    void *p = mmap(NULL, PG(4), PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                   PG(8));
    ASSERT_NE(MAP_FAILED, p);

    auto r = get(AT(p, 2), PG(1));
    ASSERT_NE(nullptr, r);
    EXPECT_EQ(UCS_MEMCACHE_BACKING_MEMFD, r->info.backing);
    EXPECT_EQ(PG(10), r->info.offset);
    EXPECT_TRUE(r->info.flags & UCS_MEMCACHE_INFO_FLAG_SHARED);
    ucs_memcache_put(m_cache, r);

    ASSERT_EQ(0, munmap(p, PG(4)));
    close(fd);
}

TEST_F(memcache, heap)
{
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    char *buf = (char*)malloc(PG(8));
    auto r    = get(buf, PG(4));
    ASSERT_NE(nullptr, r);
    EXPECT_EQ(UCS_MEMCACHE_BACKING_ANON, r->info.backing);
    ucs_memcache_put(m_cache, r);
    free(buf);
}

TEST_F(memcache, hugetlb)
{
    size_t huge = 2ul << 20;
    void *p     = mmap(NULL, huge, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
    if (p == MAP_FAILED) {
        GTEST_SKIP() << "no 2 MiB huge pages (vm.nr_hugepages): "
                     << strerror(errno);
    }
    auto r = get(p, huge);
    ASSERT_NE(nullptr, r);
    EXPECT_EQ(UCS_MEMCACHE_BACKING_HUGETLB, r->info.backing);
    EXPECT_EQ(huge, r->info.page_size);
    ucs_memcache_put(m_cache, r);
    munmap(p, huge);
}

TEST_F(memcache, file)
{
    char path[] = "/tmp/memcache_fileXXXXXX";
    int fd      = mkstemp(path);
    ASSERT_GE(fd, 0);
    unlink(path);
    ASSERT_EQ(0, ftruncate(fd, PG(4)));
    void *p = mmap(NULL, PG(4), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ASSERT_NE(MAP_FAILED, p);

    auto r = get(p, PG(4));
    ASSERT_NE(nullptr, r);
    EXPECT_EQ(UCS_MEMCACHE_BACKING_FILE, r->info.backing);
    EXPECT_NE(0u, r->info.inode);
    ucs_memcache_put(m_cache, r);
    munmap(p, PG(4));
    close(fd);
}

TEST_F(memcache, unmapped)
{
    void *p = map_anon(PG(4));
    munmap(AT(p, 1), PG(1));
    ucs_memcache_region_t *r;
    EXPECT_EQ(UCS_ERR_INVALID_ADDR, ucs_memcache_get(m_cache, p, PG(4), &r));

    ucs_memory_type_t type;
    EXPECT_EQ(UCS_ERR_INVALID_ADDR,
              ucs_memcache_mem_type(m_cache, AT(p, 1), 8, &type));
    EXPECT_EQ(UCS_OK, ucs_memcache_mem_type(m_cache, p, 8, &type));
    EXPECT_EQ(UCS_MEMORY_TYPE_HOST, type);
    munmap(p, PG(4));
}

TEST_F(memcache, madvise_drops)
{
    void *p = map_anon(PG(4));
    auto r  = get(p, PG(4));
    ucs_memcache_put(m_cache, r);

    ASSERT_EQ(0, madvise(AT(p, 3), PG(1), MADV_DONTNEED));
    ucs_memcache_region_t *r2;
    EXPECT_EQ(UCS_ERR_NO_ELEM, ucs_memcache_lookup(m_cache, p, 8, &r2));
    EXPECT_EQ(1u, stats().invalidations);
    munmap(p, PG(4));
}

/* same address, new memory: a new registration, never the old one */
TEST_F(memcache, remap_same_address)
{
    void *p = map_anon(PG(4));
    for (int i = 0; i < 100; ++i) {
        auto r = get(p, PG(4));
        ASSERT_NE(nullptr, r);
        EXPECT_EQ(i + 1, (int)(uintptr_t)r->memh);
        ucs_memcache_put(m_cache, r);
        ASSERT_EQ(p, map_anon(PG(4), p, MAP_FIXED));
    }
    munmap(p, PG(4));
}

/* fork(): the child's cache is empty and works; the parent's is intact */
TEST_F(memcache, fork)
{
    if (under_asan()) {
        GTEST_SKIP() << "fork() with threads: not under ASan or TSan";
    }
    void *p = map_anon(PG(4));
    auto r  = get(p, PG(4));
    ucs_memcache_put(m_cache, r);

    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        alarm(10);
        ucs_memcache_region_t *cr;
        if (ucs_memcache_lookup(m_cache, p, PG(4), &cr) != UCS_ERR_NO_ELEM) {
            _exit(1);
        }
        if (ucs_memcache_get(m_cache, p, PG(4), &cr) != UCS_OK) {
            _exit(2);
        }
        ucs_memcache_put(m_cache, cr);
        munmap(p, PG(4));
        if (ucs_memcache_lookup(m_cache, p, PG(4), &cr) != UCS_ERR_NO_ELEM) {
            _exit(3);
        }
        _exit(0);
    }
    int status;
    ASSERT_EQ(pid, waitpid(pid, &status, 0));
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(0, WEXITSTATUS(status));

    ucs_memcache_region_t *r2;
    EXPECT_EQ(UCS_OK, ucs_memcache_lookup(m_cache, p, PG(4), &r2));
    ucs_memcache_put(m_cache, r2);
    munmap(p, PG(4));
}

/* misses racing with unmaps of the same range never leave a stale entry */
TEST_F(memcache, miss_races_unmap)
{
    void *base = mmap(NULL, PG(12), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS,
                      -1, 0);
    char *p    = AT(base, 4);
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> cycles{0};

    std::thread mapper([&]() {
        while (!stop) {
            mmap(p, PG(4), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
            mmap(p, PG(4), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                 -1, 0);
            ++cycles;
        }
    });

    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (std::chrono::steady_clock::now() < end) {
        ucs_memcache_region_t *r;
        if (ucs_memcache_get(m_cache, p, PG(4), &r) == UCS_OK) {
            ucs_memcache_put(m_cache, r);
        }
    }
    stop = true;
    mapper.join();

    /* quiet now: whatever is cached must describe the current mapping */
    ucs_memcache_region_t *r;
    if (ucs_memcache_lookup(m_cache, p, PG(4), &r) == UCS_OK) {
        EXPECT_EQ(PROT_NONE, r->info.prot & (PROT_READ | PROT_WRITE));
        ucs_memcache_put(m_cache, r);
    }
    auto s = stats();
    printf("[ race     ] cycles %lu misses %lu hits %lu retries %lu "
           "invalidations %lu\n", cycles.load(), s.misses, s.hits, s.retries,
           s.invalidations);
    munmap(base, PG(12));
}
