/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * Peers that mean harm, through the memory they share with us.
 *
 * A receiver can't hurt its senders:
 * - its pool memfd cannot shrink and its control area cannot change size
 *   (sealed): a sender's store never lands past the end of a file, which
 *   would raise SIGBUS in the sender;
 * - a sender refuses a control area that is not sealed so, and writes a
 *   pool that is not sealed through the cma wire only, which cannot fault;
 * - a slot table entry that names a block past the pool's end fails the
 *   send with an error, and the sender's endpoint fails.
 * The hostile receivers here are the test itself, writing the receiver's
 * shared memory (or a copy of it) as another process could.
 */

#include "common/uct_fixture.h"

extern "C" {
#include <uct/ib/remapring/remapring_conn.h>
}

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace remapring_test;

namespace {

static const uint8_t AM_ID = 3;

class test_uct_hostile_receiver : public uct_fixture {
protected:
    void TearDown() override
    {
        for (auto &m : m_maps) {
            munmap(m.first, m.second);
        }
        for (int fd : m_fds) {
            close(fd);
        }
        uct_fixture::TearDown();
    }

    static ucs_status_t err_handler(void *arg, uct_ep_h, ucs_status_t status)
    {
        EXPECT_NE(UCS_OK, status);
        ++((test_uct_hostile_receiver*)arg)->m_errors;
        return UCS_OK;
    }

    static ucs_status_t count_am(void *arg, void*, size_t, unsigned)
    {
        ++((test_uct_hostile_receiver*)arg)->m_received;
        return UCS_OK;
    }

    entity *receiver()
    {
        entity *e = create_entity();

        if (e != nullptr) {
            EXPECT_EQ(UCS_OK, uct_iface_set_am_handler(e->iface, AM_ID,
                                                       count_am, this, 0));
        }
        return e;
    }

    static const uct_remapring_iface_addr_t *addr_of(entity *e)
    {
        return (const uct_remapring_iface_addr_t*)e->iface_addr.data();
    }

    /* Map a memfd of this process whole; unmapped at TearDown */
    void *map_fd(int fd, size_t *size_p)
    {
        struct stat st;

        EXPECT_EQ(0, fstat(fd, &st));
        void *ptr = mmap(NULL, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED,
                         fd, 0);
        EXPECT_NE(MAP_FAILED, ptr) << strerror(errno);
        if (ptr == MAP_FAILED) {
            return nullptr;
        }
        m_maps.push_back({ptr, (size_t)st.st_size});
        *size_p = st.st_size;
        return ptr;
    }

    /* A memfd holding a copy of @a size bytes at @a src; closed at TearDown */
    int copy_memfd(const void *src, size_t size, unsigned flags)
    {
        int fd = memfd_create("hostile-copy", MFD_CLOEXEC | flags);

        EXPECT_GE(fd, 0);
        EXPECT_EQ(0, ftruncate(fd, size));
        EXPECT_EQ((ssize_t)size, pwrite(fd, src, size, 0));
        m_fds.push_back(fd);
        return fd;
    }

    /* The connection of @a ctl (mapped here) in state @a state, or null */
    static uct_remapring_conn_t *
    find_conn(uct_remapring_ctl_t *ctl, unsigned max_peers, uint32_t state,
              unsigned *index_p = nullptr)
    {
        uct_remapring_conn_t *conns = uct_remapring_ctl_conns(ctl, max_peers);

        for (unsigned i = 0; i < max_peers; ++i) {
            if (uct_remapring_conn_state(&conns[i]) == state) {
                if (index_p != nullptr) {
                    *index_p = i;
                }
                return &conns[i];
            }
        }
        return nullptr;
    }

    ucs_status_t send(uct_ep_h ep)
    {
        char buf[64] = {};

        return uct_ep_am_short(ep, AM_ID, 0, buf, sizeof(buf));
    }

    std::vector<std::pair<void*, size_t>> m_maps;
    std::vector<int> m_fds;
    int    m_errors   = 0;
    size_t m_received = 0;
};


/* The receiver's memfds refuse to shrink (and the control area to grow), and
 * their seals cannot be changed; traffic flows on */
TEST_F(test_uct_hostile_receiver, memfds_are_sealed)
{
    entity *rx = receiver();
    entity *tx = create_entity();
    ASSERT_NE(nullptr, tx);
    uct_ep_h ep = connect(tx, rx);
    ASSERT_NE(nullptr, ep);
    ASSERT_EQ(UCS_OK, send(ep));
    ASSERT_TRUE(wait_for([this]() { return m_received == 1; }));

    int ctl_fd = addr_of(rx)->ctl_fd;
    size_t ctl_size;
    auto *ctl = (uct_remapring_ctl_t*)map_fd(ctl_fd, &ctl_size);
    ASSERT_NE(nullptr, ctl);
    int pool_fd = ctl->pool_fd;
    struct stat st;
    ASSERT_EQ(0, fstat(pool_fd, &st));
    size_t page = sysconf(_SC_PAGESIZE);
    ASSERT_GE((size_t)st.st_size, page);

    struct {
        const char *what;
        int        fd;
        off_t      size;
    } shrinks[] = {
        {"pool to 0", pool_fd, 0},
        {"pool by a page", pool_fd, st.st_size - (off_t)page},
        {"control area to 0", ctl_fd, 0},
        {"control area by a page", ctl_fd, (off_t)(ctl_size - page)},
        {"control area grown", ctl_fd, (off_t)(ctl_size * 2)},
    };
    for (const auto &c : shrinks) {
        errno = 0;
        EXPECT_EQ(-1, ftruncate(c.fd, c.size)) << c.what;
        EXPECT_EQ(EPERM, errno) << c.what;
    }

    for (int fd : {pool_fd, ctl_fd}) {
        int seals = fcntl(fd, F_GET_SEALS);
        EXPECT_TRUE(seals & F_SEAL_SHRINK) << fd;
        EXPECT_TRUE(seals & F_SEAL_SEAL) << fd;
        /* no seal can be added, none taken away */
        errno = 0;
        EXPECT_EQ(-1, fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE)) << fd;
        EXPECT_EQ(EPERM, errno);
    }
    EXPECT_TRUE(fcntl(ctl_fd, F_GET_SEALS) & F_SEAL_GROW);

    /* the pool still grows: another sender fills more blocks */
    ASSERT_EQ(UCS_OK, send(ep));
    EXPECT_TRUE(wait_for([this]() { return m_received == 2; }));
    tx->ep_destroy(ep);
}

/* A control area that could shrink under the sender is refused */
TEST_F(test_uct_hostile_receiver, unsealed_control_area_refused)
{
    entity *rx = receiver();
    entity *tx = create_entity();
    ASSERT_NE(nullptr, tx);

    size_t ctl_size;
    void *ctl = map_fd(addr_of(rx)->ctl_fd, &ctl_size);
    ASSERT_NE(nullptr, ctl);
    int fake_fd = copy_memfd(ctl, ctl_size, 0);

    uct_remapring_iface_addr_t addr = *addr_of(rx);
    addr.ctl_fd = fake_fd;
    uct_ep_h ep;
    {
        scoped_log_capture log;
        EXPECT_EQ(UCS_ERR_UNREACHABLE,
                  tx->ep_create(rx->dev_addr.data(), &addr, &ep));
        EXPECT_TRUE(log.contains("is not sealed")) << log.all();
    }

    /* the real one is sealed and taken */
    ep = connect(tx, rx);
    ASSERT_NE(nullptr, ep);
    EXPECT_EQ(UCS_OK, send(ep));
    EXPECT_TRUE(wait_for([this]() { return m_received == 1; }));
    tx->ep_destroy(ep);
}

/* A pool that is not sealed is written through the cma wire, which cannot
 * fault; a sealed one through the shm wire */
TEST_F(test_uct_hostile_receiver, unsealed_pool_gets_the_cma_wire)
{
    entity *rx = receiver();
    entity *tx = create_entity();
    ASSERT_NE(nullptr, tx);

    size_t ctl_size;
    auto *ctl = (uct_remapring_ctl_t*)map_fd(addr_of(rx)->ctl_fd, &ctl_size);
    ASSERT_NE(nullptr, ctl);
    const unsigned max_peers = ctl->max_peers;

    /* the positive case first: the receiver's own pool */
    uct_ep_h ep = connect(tx, rx);
    ASSERT_NE(nullptr, ep);
    uct_remapring_conn_t *conn = find_conn(ctl, max_peers,
                                           UCT_REMAPRING_CONN_READY);
    ASSERT_NE(nullptr, conn);
    EXPECT_EQ((uint32_t)UCT_REMAPRING_WIRE_SHM, conn->wire);
    tx->ep_destroy(ep);
    ASSERT_TRUE(wait_for([&]() {
        return find_conn(ctl, max_peers, UCT_REMAPRING_CONN_READY) == nullptr;
    }));

    /* a copy of the control area, sealed, naming a pool that is not */
    struct stat st;
    ASSERT_EQ(0, fstat(ctl->pool_fd, &st));
    int pool_fd = memfd_create("hostile-pool", MFD_CLOEXEC);
    ASSERT_GE(pool_fd, 0);
    m_fds.push_back(pool_fd);
    ASSERT_EQ(0, ftruncate(pool_fd, st.st_size));

    std::vector<char> copy((char*)ctl, (char*)ctl + ctl_size);
    auto *fake = (uct_remapring_ctl_t*)copy.data();
    fake->pool_fd = pool_fd;
    uct_remapring_conn_t *conns = uct_remapring_ctl_conns(fake, max_peers);
    for (unsigned i = 0; i < max_peers; ++i) {
        conns[i].state = UCT_REMAPRING_CONN_FREE;
    }
    int fake_fd = copy_memfd(copy.data(), ctl_size, MFD_ALLOW_SEALING);
    ASSERT_EQ(0, fcntl(fake_fd, F_ADD_SEALS,
                       F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL));

    uct_remapring_iface_addr_t addr = *addr_of(rx);
    addr.ctl_fd = fake_fd;
    ASSERT_EQ(UCS_OK, tx->ep_create(rx->dev_addr.data(), &addr, &ep));
    size_t fake_size;
    auto *mapped = (uct_remapring_ctl_t*)map_fd(fake_fd, &fake_size);
    ASSERT_NE(nullptr, mapped);
    conn = find_conn(mapped, max_peers, UCT_REMAPRING_CONN_CLAIMED);
    ASSERT_NE(nullptr, conn) << "the sender claimed no connection";
    EXPECT_EQ((uint32_t)UCT_REMAPRING_WIRE_CMA, conn->wire);
    tx->ep_destroy(ep);
    EXPECT_EQ(UCT_REMAPRING_CONN_CLOSED, uct_remapring_conn_state(conn));
}

/* A slot table entry naming a block inside the pool's address range but
 * past the end of its memfd (a store there is SIGBUS) fails the send, and
 * the endpoint */
TEST_F(test_uct_hostile_receiver, slot_past_the_pool_end)
{
    entity *rx = receiver();
    size_t ctl_size;
    auto *ctl = (uct_remapring_ctl_t*)map_fd(addr_of(rx)->ctl_fd, &ctl_size);
    ASSERT_NE(nullptr, ctl);
    const unsigned max_peers = ctl->max_peers, nslots = ctl->ring_slots;

    for (int past : {0, 1}) {
        entity *tx = create_entity({{"WIRE", "shm"}}, 0, err_handler, this);
        ASSERT_NE(nullptr, tx);
        uct_ep_h ep = connect(tx, rx);
        ASSERT_NE(nullptr, ep);
        size_t received = m_received;
        ASSERT_EQ(UCS_OK, send(ep));
        ASSERT_TRUE(wait_for([&]() { return m_received == received + 1; }));

        unsigned index = 0;
        ASSERT_NE(nullptr, find_conn(ctl, max_peers,
                                     UCT_REMAPRING_CONN_READY, &index));
        struct stat st;
        ASSERT_EQ(0, fstat(ctl->pool_fd, &st));
        uint32_t file_blocks = st.st_size / ctl->block_size;
        ASSERT_LT(file_blocks + 1, ctl->pool_blocks);
        /* the first block past the end, or the last of the range */
        uint32_t block = past ? (ctl->pool_blocks - 1) : file_blocks;
        uint32_t *table = uct_remapring_ctl_slot_table(ctl, max_peers, nslots,
                                                       index);
        for (unsigned i = 0; i < nslots; ++i) {
            table[i] = block;
        }

        int errors = m_errors;
        {
            scoped_log_capture log;
            ucs_status_t status = send(ep);
            EXPECT_NE(UCS_OK, status) << "block " << block;
            EXPECT_NE(UCS_ERR_NO_RESOURCE, status);
            EXPECT_TRUE(log.contains("not in the pool")) << log.all();
            EXPECT_TRUE(wait_for([&]() { return m_errors > errors; }))
                    << "no error callback";
        }
        tx->ep_destroy(ep);
    }
}

} // namespace
