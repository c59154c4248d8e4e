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
 *
 * A sender can't hurt its receiver or the receiver's other senders through
 * what it may write: its ring's blocks (records, stamps, replays of old
 * records elsewhere in the ring), its ring words (tail backwards, past its
 * credit, anywhere; stalls, the geometry, its limit), its slot table, the
 * fields naming it (pid, id, wire) and its state word, and doorbells (its
 * own, or any bits). A thread of the test writes them at random while the
 * receiver reads and two honest senders (shm and cma wires) send checked
 * messages, some of them held; then:
 * - every message delivered lies in the receiver's pool, and every honest
 *   message arrives once, in order, byte-exact, held ones unchanged until
 *   released;
 * - a hostile connection that fails logs one line, about that connection;
 * - the receiver serves the honest senders on, takes a new one, and once
 *   every sender is gone has the pool blocks it had before any came.
 * A state word rewritten out of turn fails that connection; a new sender
 * that claims the slot it gave up fails with an error, never waits.
 * Out of reach, as for UCX's shared memory transports: a sender maps the
 * whole pool on the shm wire (and may write any of the receiver's memory
 * through process_vm_writev on the cma wire), so it could write other
 * senders' blocks, or the descriptor of a record the receiver already
 * delivered and the upper layer holds. Senders and receiver are processes
 * of one user that trust each other that far; the claims above are about
 * a sender's own ring and slot, where a faulty sender writes.
 */

#include "common/uct_fixture.h"

extern "C" {
#include <uct/ib/remapring/sm/remapring_sm_ctl.h>
}

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <random>
#include <sstream>
#include <thread>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace remapring_test;

namespace {

static const uint8_t AM_ID = 3;

class hostile_fixture : public uct_fixture {
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
        ++((hostile_fixture*)arg)->m_errors;
        return UCS_OK;
    }

    static ucs_status_t count_am(void *arg, void*, size_t, unsigned)
    {
        ++((hostile_fixture*)arg)->m_received;
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


class test_uct_hostile_receiver : public hostile_fixture {
protected:
    /* @a tx is refused @a rx's address with @a ctl_fd in place of its
     * control area, with a log line that has @a what */
    void expect_ctl_refused(entity *tx, entity *rx, int ctl_fd,
                            const char *what)
    {
        uct_remapring_iface_addr_t addr = *addr_of(rx);
        scoped_log_capture log;
        uct_ep_h ep;

        addr.ctl_fd = ctl_fd;
        EXPECT_EQ(UCS_ERR_UNREACHABLE,
                  tx->ep_create(rx->dev_addr.data(), &addr, &ep));
        EXPECT_TRUE(log.contains(what)) << log.all();
    }
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
    expect_ctl_refused(tx, rx, copy_memfd(ctl, ctl_size, 0), "is not sealed");

    /* the real one is sealed and taken */
    uct_ep_h ep = connect(tx, rx);
    ASSERT_NE(nullptr, ep);
    EXPECT_EQ(UCS_OK, send(ep));
    EXPECT_TRUE(wait_for([this]() { return m_received == 1; }));
    tx->ep_destroy(ep);
}

/* A control area of another version of the connection protocol (a peer
 * that loaded another remapring) is refused with one line that says so */
TEST_F(test_uct_hostile_receiver, other_protocol_version_refused)
{
    entity *rx = receiver();
    entity *tx = create_entity();
    ASSERT_NE(nullptr, tx);

    size_t ctl_size;
    void *ctl = map_fd(addr_of(rx)->ctl_fd, &ctl_size);
    ASSERT_NE(nullptr, ctl);
    std::vector<char> copy((char*)ctl, (char*)ctl + ctl_size);
    ((uct_remapring_ctl_t*)copy.data())->version = UCT_REMAPRING_CTL_VERSION - 1;
    int fake_fd = copy_memfd(copy.data(), ctl_size, MFD_ALLOW_SEALING);
    ASSERT_EQ(0, fcntl(fake_fd, F_ADD_SEALS,
                       F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL));
    expect_ctl_refused(tx, rx, fake_fd, "version");
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

    /* aligned as the control area is (its words are in cache lines) */
    std::vector<uct_remapring_ctl_t> copy(
            (ctl_size + sizeof(uct_remapring_ctl_t) - 1) /
            sizeof(uct_remapring_ctl_t));
    memcpy(copy.data(), ctl, ctl_size);
    auto *fake = copy.data();
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

/* ------------------------------------------------------------------------ */
/* Hostile senders                                                          */
/* ------------------------------------------------------------------------ */

/* An honest message: this header, then pattern(seed_of(sender, seq)) */
struct honest_hdr {
    uint32_t magic;
    uint32_t sender;
    uint64_t seq;
};

static const uint32_t HONEST_MAGIC  = 0x7473656e; /* "nest" */
static const uint32_t HOSTILE_MAGIC = 0x6c697473; /* "stil" */
static const size_t   MSG_SIZES[]   = {16, 64, 200, 1000, 5000, 30000};

class test_uct_hostile_sender : public hostile_fixture {
protected:
    struct honest_sender {
        entity   *e;
        uct_ep_h ep;
        uint32_t id;
        uint64_t sent     = 0;
        uint64_t received = 0;
    };

    struct held_msg {
        void     *data;
        size_t   length;
        uint64_t seed;
    };

    struct pack_arg {
        uint32_t magic;
        uint32_t sender;
        uint64_t seq;
        size_t   length;
    };

    /* What the hostile sender writes: its connection slot, ring words, slot
     * table, ring blocks (as they were when it started) and doorbells */
    struct target {
        uct_remapring_conn_t *conn;
        uint32_t             *table;
        unsigned             nslots;
        std::vector<char*>   blocks;
        size_t               block_size;
        uint64_t             *active;
        unsigned             nwords;
        uint64_t             *summary;
        unsigned             index;
        bool                 table_too;
    };

    void TearDown() override
    {
        stop_scribbling();
        release_held(0);
        hostile_fixture::TearDown();
    }

    static uint64_t seed_of(uint32_t sender, uint64_t seq)
    {
        return ((uint64_t)sender << 40) ^ seq;
    }

    static size_t pack(void *dest, void *arg)
    {
        auto *pa        = (pack_arg*)arg;
        honest_hdr hdr  = {pa->magic, pa->sender, pa->seq};

        memcpy(dest, &hdr, sizeof(hdr));
        fill_pattern((char*)dest + sizeof(hdr), pa->length - sizeof(hdr),
                     seed_of(pa->sender, pa->seq));
        return pa->length;
    }

    static ucs_status_t am_cb(void *arg, void *data, size_t length,
                              unsigned flags)
    {
        return ((test_uct_hostile_sender*)arg)->on_am(data, length, flags);
    }

    /* Where the receiver's pool memfd, and the copies of small messages,
     * are mapped in this process */
    void read_pool_ranges()
    {
        char line[512];

        m_pool_ranges.clear();
        FILE *f = fopen("/proc/self/maps", "r");
        ASSERT_NE(nullptr, f);
        while (fgets(line, sizeof(line), f) != nullptr) {
            unsigned long start, end, offset, ino;
            char perms[8], dev[16];
            if ((sscanf(line, "%lx-%lx %7s %lx %15s %lu", &start, &end, perms,
                        &offset, dev, &ino) == 6) &&
                (((ino == m_pool_ino) &&
                  (strstr(line, "memfd:") != nullptr)) ||
                 (strstr(line, "memfd:remapring-copies") != nullptr))) {
                m_pool_ranges.push_back({start, end});
            }
        }
        fclose(f);
    }

    /* In the receiver's pool, or in copies of small messages */
    bool in_pool(const void *ptr, size_t length)
    {
        uintptr_t start = (uintptr_t)ptr, end = start + length;

        for (int pass = 0; pass < 2; ++pass) {
            for (const auto &r : m_pool_ranges) {
                if ((start >= r.first) && (end <= r.second)) {
                    return true;
                }
            }
            if (pass == 0) {
                read_pool_ranges();
            }
        }
        return false;
    }

    ucs_status_t on_am(void *data, size_t length, unsigned flags)
    {
        honest_hdr hdr = {};

        if (!in_pool(data, length)) {
            ADD_FAILURE() << "a message of " << length << " bytes at "
                          << data << " is not in the receiver's pool";
            ++m_bad;
            return UCS_OK;
        }

        if (length >= sizeof(hdr)) {
            memcpy(&hdr, data, sizeof(hdr));
        }
        if ((hdr.magic != HONEST_MAGIC) || (hdr.sender >= m_honest.size())) {
            /* the hostile sender's, whatever it wrote: read it all */
            uint8_t sum = 0;
            for (size_t i = 0; i < length; ++i) {
                sum ^= ((const uint8_t*)data)[i];
            }
            m_sum ^= sum;
            ++m_other;
            return UCS_OK;
        }

        honest_sender &h = m_honest[hdr.sender];
        if (hdr.seq != h.received) {
            ADD_FAILURE() << "sender " << hdr.sender << ": message "
                          << hdr.seq << " arrived, " << h.received
                          << " expected";
            ++m_bad;
        }
        h.received = hdr.seq + 1;

        uint64_t seed = seed_of(hdr.sender, hdr.seq);
        ssize_t at    = check_pattern((char*)data + sizeof(hdr),
                                      length - sizeof(hdr), seed);
        if (at >= 0) {
            ADD_FAILURE() << "sender " << hdr.sender << " message " << hdr.seq
                          << " of " << length << " bytes differs at byte "
                          << (at + sizeof(hdr));
            ++m_bad;
        }

        /* keep some, to be checked again when released */
        if ((flags & UCT_CB_PARAM_FLAG_DESC) && ((hdr.seq % 3) == 1) &&
            (m_held.size() < 24)) {
            m_held.push_back({data, length, seed});
            return UCS_INPROGRESS;
        }
        return UCS_OK;
    }

    void release_held(size_t keep)
    {
        while (m_held.size() > keep) {
            held_msg m = m_held.front();
            m_held.erase(m_held.begin());
            ssize_t at = check_pattern((char*)m.data + sizeof(honest_hdr),
                                       m.length - sizeof(honest_hdr), m.seed);
            EXPECT_LT(at, 0) << "a held message changed at byte " << at;
            m_bad += (at >= 0);
            uct_iface_release_desc(m.data);
        }
    }

    entity *open_receiver()
    {
        entity *rx = create_entity();
        if (rx == nullptr) {
            return nullptr;
        }

        for (uint8_t id = 0; id < UCT_AM_ID_MAX; ++id) {
            EXPECT_EQ(UCS_OK, uct_iface_set_am_handler(rx->iface, id, am_cb,
                                                       this, 0));
        }

        m_ctl = (uct_remapring_ctl_t*)map_fd(addr_of(rx)->ctl_fd, &m_ctl_size);
        if (m_ctl == nullptr) {
            return nullptr;
        }
        struct stat st;
        EXPECT_EQ(0, fstat(m_ctl->pool_fd, &st));
        m_pool_ino  = st.st_ino;
        m_max_peers = m_ctl->max_peers;
        m_nslots    = m_ctl->ring_slots;
        return rx;
    }

    void add_honest(entity *rx, const char *wire)
    {
        entity *e = create_entity({{"WIRE", wire}});
        ASSERT_NE(nullptr, e);
        uct_ep_h ep = connect(e, rx);
        ASSERT_NE(nullptr, ep);
        honest_sender h;
        h.e  = e;
        h.ep = ep;
        h.id = m_honest.size();
        m_honest.push_back(h);
    }

    /* One message from @a h if it can send now */
    ucs_status_t try_send(honest_sender &h, uint32_t magic)
    {
        size_t max    = h.e->attr.cap.am.max_bcopy;
        size_t length = std::min(MSG_SIZES[h.sent % ucs_static_array_size(
                                                            MSG_SIZES)],
                                 max);
        pack_arg pa   = {magic, h.id, h.sent, length};
        ssize_t ret   = uct_ep_am_bcopy(h.ep, AM_ID, pack, &pa, 0);

        if (ret < 0) {
            return (ucs_status_t)ret;
        }
        EXPECT_EQ((ssize_t)length, ret);
        ++h.sent;
        return UCS_OK;
    }

    /* One message from honest @a h if it can send now; false if it could
     * not (no credit); any other failure fails the test */
    bool send_one(honest_sender &h, uint32_t magic = HONEST_MAGIC)
    {
        ucs_status_t status = try_send(h, magic);

        if (status == UCS_ERR_NO_RESOURCE) {
            return false;
        }
        EXPECT_EQ(UCS_OK, status) << ucs_status_string(status);
        return status == UCS_OK;
    }

    /* Every honest sender sends @a count more; all of it arrives intact */
    void honest_traffic(unsigned count)
    {
        for (unsigned n = 0; n < count; ++n) {
            for (auto &h : m_honest) {
                ASSERT_EQ(UCS_OK, retry([&]() {
                    return send_one(h) ? UCS_OK : UCS_ERR_NO_RESOURCE;
                }));
            }
            release_held(12);
        }
        expect_delivered();
    }

    void expect_delivered()
    {
        bool done = wait_for([&]() {
            release_held(12);
            for (const auto &h : m_honest) {
                if (h.received != h.sent) {
                    return false;
                }
            }
            return true;
        });
        for (const auto &h : m_honest) {
            EXPECT_EQ(h.sent, h.received) << "honest sender " << h.id;
        }
        EXPECT_TRUE(done);
        EXPECT_EQ(0u, m_bad);
    }

    /* Indices of the connections in state READY */
    std::vector<unsigned> ready_conns()
    {
        std::vector<unsigned> v;
        uct_remapring_conn_t *conns = uct_remapring_ctl_conns(m_ctl,
                                                              m_max_peers);
        for (unsigned i = 0; i < m_max_peers; ++i) {
            if (uct_remapring_conn_state(&conns[i]) ==
                UCT_REMAPRING_CONN_READY) {
                v.push_back(i);
            }
        }
        return v;
    }

    /* Connect a hostile sender on @a wire; its connection's index */
    uct_ep_h connect_hostile(entity *rx, const char *wire, entity **e_p,
                             unsigned *index_p)
    {
        std::vector<unsigned> before = ready_conns();
        entity *e = create_entity({{"WIRE", wire}}, 0, err_handler, this);
        EXPECT_NE(nullptr, e);
        if (e == nullptr) {
            return nullptr;
        }
        uct_ep_h ep = connect(e, rx);
        EXPECT_NE(nullptr, ep);
        for (unsigned i : ready_conns()) {
            if (std::find(before.begin(), before.end(), i) == before.end()) {
                *index_p = i;
                *e_p     = e;
                return ep;
            }
        }
        ADD_FAILURE() << "the hostile sender's connection was not found";
        return nullptr;
    }

    target make_target(unsigned index, bool table_too)
    {
        target t;
        struct stat st;

        EXPECT_EQ(0, fstat(m_ctl->pool_fd, &st));
        m_pool = (char*)map_fd(m_ctl->pool_fd, &m_pool_size);
        t.conn       = &uct_remapring_ctl_conns(m_ctl, m_max_peers)[index];
        t.table      = uct_remapring_ctl_slot_table(m_ctl, m_max_peers,
                                                    m_nslots, index);
        t.nslots     = m_nslots;
        t.block_size = m_ctl->block_size;
        for (unsigned i = 0; i < m_nslots; ++i) {
            uint32_t block = t.table[i];
            if ((m_pool != nullptr) &&
                (((size_t)block + 1) * t.block_size <= m_pool_size)) {
                t.blocks.push_back(m_pool + ((size_t)block * t.block_size));
            }
        }
        t.active    = m_ctl->active;
        t.nwords    = ucs_div_round_up(m_max_peers, 64);
        t.summary   = &m_ctl->summary;
        t.index     = index;
        t.table_too = table_too;
        return t;
    }

    /* One hostile write, chosen by @a rng; @a ring_only: to the ring (its
     * blocks, words and slot table) and our own doorbell alone, which the
     * receiver reads as records and credits, instead of to the fields that
     * name the sender, which fail the connection at once */
    static void scribble(const target &t, std::mt19937_64 &rng, bool ring_only)
    {
        uint64_t r = rng();
        uint64_t v = rng();
        remapring_ring_ctl_t *rc = &t.conn->ring;
        uint64_t tail = __atomic_load_n(&rc->tail, __ATOMIC_RELAXED);
        uint64_t limit = __atomic_load_n(&rc->limit, __ATOMIC_RELAXED);

        switch (r % 10) {
        case 0:
        case 1:
        case 2:
            if (!t.blocks.empty()) {
                /* random bytes into a record, a header, a stamp */
                char *block   = t.blocks[(r >> 8) % t.blocks.size()];
                size_t offset = (v >> 16) % t.block_size;
                size_t length = std::min<size_t>(1 + (v % 64),
                                                 t.block_size - offset);
                for (size_t i = 0; i < length; ++i) {
                    block[offset + i] = (char)rng();
                }
            }
            break;
        case 3:
            if (!t.blocks.empty()) {
                /* replay: an old record at another place of the ring */
                char *src     = t.blocks[(r >> 8) % t.blocks.size()];
                char *dst     = t.blocks[(r >> 24) % t.blocks.size()];
                size_t length = 64 * (1 + (v % 8));
                size_t from   = ((v >> 8) % (t.block_size / 64)) * 64;
                size_t to     = ((v >> 24) % (t.block_size / 64)) * 64;
                length        = std::min(length, t.block_size -
                                                 std::max(from, to));
                memmove(dst + to, src + from, length);
            }
            break;
        case 4: {
            /* the tail backwards, past the credit, anywhere */
            static const int64_t moves[] = {-64, -4096, 64, 65536};
            uint64_t values[] = {tail + moves[v % 4], limit + 64,
                                 limit + (1ull << 20), 0, ~0ull, v,
                                 tail - (tail % 64)};
            __atomic_store_n(&rc->tail, values[(r >> 8) % 7],
                             __ATOMIC_RELEASE);
            break;
        }
        case 5:
            /* words the receiver writes, or only the writer reads */
            if (r & 0x100) {
                __atomic_store_n(&rc->stalls, v, __ATOMIC_RELAXED);
            } else if (r & 0x200) {
                __atomic_store_n(&rc->limit, v, __ATOMIC_RELAXED);
            } else {
                ((uint8_t*)&rc->info)[v % sizeof(rc->info)] = (uint8_t)r;
            }
            break;
        case 6: {
            if (ring_only) {
                break;
            }
            /* the sender's own fields */
            static const int32_t pids[] = {0, -1, 1, INT32_MAX};
            switch ((r >> 8) % 4) {
            case 0:
                t.conn->sender_pid = ((v & 1) ? getpid() : pids[v % 4]);
                break;
            case 1:
                t.conn->sender_id = v;
                break;
            case 2:
                t.conn->wire = (uint32_t)v % 4;
                break;
            default:
                __atomic_store_n(&t.conn->armed, (uint32_t)v,
                                 __ATOMIC_RELAXED);
                break;
            }
            break;
        }
        case 7:
            if (t.table_too) {
                /* a slot table entry: anywhere in or out of the pool */
                t.table[(r >> 8) % t.nslots] = (uint32_t)v;
            }
            break;
        default:
            /* doorbells: ours, or any bits at all */
            if (ring_only || (r & 0x100)) {
                __atomic_fetch_or(&t.active[t.index / 64],
                                  1ull << (t.index % 64), __ATOMIC_RELEASE);
                __atomic_fetch_or(t.summary, 1ull << (t.index / 64),
                                  __ATOMIC_RELEASE);
            } else {
                __atomic_fetch_or(&t.active[(v >> 32) % t.nwords], v,
                                  __ATOMIC_RELEASE);
                __atomic_fetch_or(t.summary, rng(), __ATOMIC_RELEASE);
            }
            break;
        }
    }

    /* Close @a e, its endpoints and interface (each keeps a pool) */
    void close_entity(entity *e)
    {
        for (auto it = m_entities.begin(); it != m_entities.end(); ++it) {
            if (it->get() == e) {
                m_entities.erase(it);
                return;
            }
        }
    }

    /* Close every sender (their endpoints, then their interfaces, whose
     * own pools count in remapring_pool_blocks_in_use(NULL) too): the
     * receiver's pool must come back to @a before blocks in use */
    void close_senders(entity *rx, uint64_t before)
    {
        release_held(0);
        for (auto it = m_entities.end(); it != m_entities.begin();) {
            --it;
            if (it->get() != rx) {
                it = m_entities.erase(it);
            }
        }
        m_honest.clear();
        EXPECT_TRUE(wait_for([&]() {
            return remapring_pool_blocks_in_use(NULL) == before;
        })) << remapring_pool_blocks_in_use(NULL)
            << " blocks in use, " << before << " before any sender came";
    }

    /* Hostile writes from another thread, as another process would */
    void start_scribbling(const target &t, uint64_t seed, double ring_only)
    {
        m_stop = false;
        m_thread = std::thread([this, t, seed, ring_only]() {
            std::mt19937_64 rng(seed);
            double fields_from = now() + ring_only;
            while (!m_stop.load()) {
                scribble(t, rng, now() < fields_from);
                if ((m_writes++ % 64) == 0) {
                    sched_yield();
                }
            }
        });
    }

    void stop_scribbling()
    {
        if (m_thread.joinable()) {
            m_stop = true;
            m_thread.join();
        }
    }

    /* Honest senders on both wires, and a hostile sender on @a wire that
     * writes everything it may (its connection, ring, slot table when it
     * no longer sends, doorbells) from another thread for @a seconds */
    void run_scribble(const char *wire, bool hostile_sends);

    uct_remapring_ctl_t *m_ctl = nullptr;
    size_t   m_ctl_size        = 0;
    char     *m_pool           = nullptr;
    size_t   m_pool_size       = 0;
    ino_t    m_pool_ino        = 0;
    unsigned m_max_peers       = 0;
    unsigned m_nslots          = 0;
    std::vector<std::pair<uintptr_t, uintptr_t>> m_pool_ranges;
    std::vector<honest_sender> m_honest;
    std::vector<held_msg>      m_held;
    size_t   m_bad             = 0;
    size_t   m_other           = 0;
    uint8_t  m_sum             = 0;
    std::thread m_thread;
    std::atomic<bool> m_stop{false};
    std::atomic<uint64_t> m_writes{0};
};

void test_uct_hostile_sender::run_scribble(const char *wire,
                                           bool hostile_sends)
{
    entity *rx = open_receiver();
    ASSERT_NE(nullptr, rx);
    uint64_t pool_before = remapring_pool_blocks_in_use(NULL);

    add_honest(rx, "shm");
    add_honest(rx, "cma");
    honest_traffic(30);

    entity *hostile;
    unsigned index = 0;
    uct_ep_h hep = connect_hostile(rx, wire, &hostile, &index);
    ASSERT_NE(nullptr, hep);
    honest_sender hs;
    hs.e  = hostile;
    hs.ep = hep;
    hs.id = 1000;
    for (int i = 0; i < 40; ++i) {
        ASSERT_EQ(UCS_OK, retry([&]() {
            return send_one(hs, HOSTILE_MAGIC) ? UCS_OK : UCS_ERR_NO_RESOURCE;
        }));
    }
    ASSERT_TRUE(wait_for([&]() { return m_other == 40; }));

    uint64_t seed = std::random_device()();
    std::cout << "hostile sender on the " << wire << " wire, connection "
              << index << ", seed " << seed << std::endl;
    target t = make_target(index, !hostile_sends);
    ASSERT_FALSE(t.blocks.empty());

    std::string log_text;
    {
        scoped_log_capture log;
        /* the ring alone for 1.5 s, then everything for 0.5 s */
        start_scribbling(t, seed, 1.5);
        double end = now() + 2.0;
        while (now() < end) {
            for (auto &h : m_honest) {
                send_one(h);
            }
            if (hostile_sends) {
                try_send(hs, HOSTILE_MAGIC); /* it may fail by now */
            }
            progress();
            release_held(12);
        }
        stop_scribbling();
        expect_delivered();
        log_text = log.all();
    }

    /* the receiver's lines are about the hostile sender's connection; the
     * others are that sender's own (its endpoint, its wire), which another
     * process would print */
    std::ostringstream ep_name;
    ep_name << "ep " << (void*)hep << " ";
    std::istringstream lines(log_text);
    std::string line, mine = "connection " + std::to_string(index) + " ";
    std::string mine_ring = "(connection " + std::to_string(index) + ")";
    unsigned nlines = 0;
    while (std::getline(lines, line)) {
        if ((line.find("shm wire ") == 0) || (line.find("cma wire ") == 0) ||
            (line.find(ep_name.str()) != std::string::npos)) {
            continue;
        }
        ++nlines;
        EXPECT_TRUE((line.find(mine) != std::string::npos) ||
                    (line.find(mine_ring) != std::string::npos))
                << "not about connection " << index << ": " << line;
    }
    uint32_t state = uct_remapring_conn_state(t.conn);
    std::cout << m_writes.load() << " hostile writes, " << m_other
              << " of its messages delivered, its connection "
              << ((state == UCT_REMAPRING_CONN_FAILED) ? "failed" :
                  (state == UCT_REMAPRING_CONN_READY) ? "is ready" : "is")
              << " (state " << state << "), " << nlines
              << " lines logged by the receiver" << std::endl;
    if (state == UCT_REMAPRING_CONN_FAILED) {
        EXPECT_EQ(1u, nlines) << log_text;
    }

    /* the others are served as before, and a new sender is taken */
    honest_traffic(60);
    add_honest(rx, "shm");
    honest_traffic(30);

    /* all gone: the pool is back where it was */
    hostile->ep_destroy(hep);
    close_senders(rx, pool_before);
}

/* A sender that writes its ring, ring words, slot table and doorbells at
 * random while the receiver reads them, on each wire: the receiver delivers
 * only what lies in its pool, the other senders' messages all arrive
 * intact (held ones too), a connection that fails logs one line, and the
 * receiver takes new senders and gives every block back after */
TEST_F(test_uct_hostile_sender, scribble_shm)
{
    run_scribble("shm", false);
}

TEST_F(test_uct_hostile_sender, scribble_cma)
{
    run_scribble("cma", false);
}

/* The same while the hostile sender keeps sending through its endpoint,
 * into the ring whose words it rewrites (its slot table left alone: a
 * sender that follows a table rewritten to name another sender's blocks
 * writes there, as any process mapping the pool could) */
TEST_F(test_uct_hostile_sender, scribble_while_sending_shm)
{
    run_scribble("shm", true);
}

TEST_F(test_uct_hostile_sender, scribble_while_sending_cma)
{
    run_scribble("cma", true);
}

/* A process that rewrites an offered slot (a ring made in advance, no
 * sender yet) as CLOSED without taking it: a sender fills in its pid
 * before it can close, so nothing of a sender's is in that ring. The
 * receiver frees the slot and offers again, rather than keep the ring for
 * ever; with the doorbell rung or not (its sweep finds it), and a sender
 * that comes later is served */
TEST_F(test_uct_hostile_sender, offered_slot_closed_out_of_turn)
{
    entity *rx = open_receiver();
    ASSERT_NE(nullptr, rx);
    uct_remapring_conn_t *conns = uct_remapring_ctl_conns(m_ctl, m_max_peers);
    auto offered = [&]() {
        std::vector<unsigned> v;
        for (unsigned i = 0; i < m_max_peers; ++i) {
            if (__atomic_load_n(&conns[i].state, __ATOMIC_ACQUIRE) ==
                UCT_REMAPRING_CONN_OFFERED) {
                v.push_back(i);
            }
        }
        return v;
    };
    ASSERT_TRUE(wait_for([&]() { return offered().size() == 2; }));
    uint64_t used = remapring_pool_blocks_in_use(NULL);

    for (bool bell : {true, false}) {
        SCOPED_TRACE(bell ? "doorbell rung" : "no doorbell");
        unsigned index = offered()[0];
        ASSERT_EQ(0, conns[index].sender_pid);
        target t = make_target(index, false);
        uct_remapring_conn_set_state(t.conn, UCT_REMAPRING_CONN_CLOSED);
        if (bell) {
            __atomic_fetch_or(&t.active[index / 64], 1ull << (index % 64),
                              __ATOMIC_RELEASE);
            __atomic_fetch_or(t.summary, 1ull << (index / 64),
                              __ATOMIC_RELEASE);
        }

        /* freed, and two offers again */
        EXPECT_TRUE(wait_for([&]() {
            return (__atomic_load_n(&conns[index].state, __ATOMIC_ACQUIRE) !=
                    UCT_REMAPRING_CONN_CLOSED) &&
                   (offered().size() == 2);
        })) << "slot " << index << " kept";
        EXPECT_EQ(used, remapring_pool_blocks_in_use(NULL));
    }

    add_honest(rx, "shm");
    honest_traffic(10);
}

/* A sender that rewrites its connection's state word (to each state and to
 * garbage) and rings its doorbell: its connection fails with one log line;
 * a new sender that claims the slot it gave up is failed too (not left
 * waiting), and a sender after it is served; the others never notice */
TEST_F(test_uct_hostile_sender, state_rewritten)
{
    entity *rx = open_receiver();
    ASSERT_NE(nullptr, rx);
    uint64_t pool_before = remapring_pool_blocks_in_use(NULL);
    add_honest(rx, "shm");
    add_honest(rx, "cma");

    static const uint32_t states[] = {
        UCT_REMAPRING_CONN_FREE,    UCT_REMAPRING_CONN_CLAIMED,
        UCT_REMAPRING_CONN_READY,   UCT_REMAPRING_CONN_CLOSED,
        UCT_REMAPRING_CONN_FAILED,  UCT_REMAPRING_CONN_OFFERED,
        UCT_REMAPRING_CONN_OFFERING, 77, 0xdeadbeef};
    for (uint32_t value : states) {
        SCOPED_TRACE("state " + std::to_string(value));
        honest_traffic(10);

        entity *hostile;
        unsigned index = 0;
        uct_ep_h hep = connect_hostile(rx, "shm", &hostile, &index);
        ASSERT_NE(nullptr, hep);
        /* the receiver has taken it on */
        honest_sender hs;
        hs.e  = hostile;
        hs.ep = hep;
        hs.id = 1000;
        size_t arrived = m_other;
        ASSERT_EQ(UCS_OK, retry([&]() {
            return send_one(hs, HOSTILE_MAGIC) ? UCS_OK : UCS_ERR_NO_RESOURCE;
        }));
        ASSERT_TRUE(wait_for([&]() { return m_other > arrived; }));
        target t = make_target(index, false);
        {
            scoped_log_capture log;
            __atomic_store_n(&t.conn->state, value, __ATOMIC_RELEASE);
            __atomic_fetch_or(&t.active[index / 64], 1ull << (index % 64),
                              __ATOMIC_RELEASE);
            __atomic_fetch_or(t.summary, 1ull << (index / 64),
                              __ATOMIC_RELEASE);
            honest_traffic(10);
            if (value == UCT_REMAPRING_CONN_READY) {
                /* nothing out of turn: no complaint */
                EXPECT_EQ("", log.all());
            } else if (value != UCT_REMAPRING_CONN_CLOSED) {
                /* CLOSED is a close: the slot is drained and freed */
                EXPECT_TRUE(log.contains("connection " +
                                         std::to_string(index)))
                        << log.all();
            }

            /* new senders take free or offered slots, perhaps this one */
            for (int n = 0; n < 3; ++n) {
                entity *e = create_entity({{"WIRE", (n == 1) ? "cma" :
                                                                "shm"}},
                                          0, err_handler, this);
                ASSERT_NE(nullptr, e);
                uct_ep_h ep;
                ASSERT_EQ(UCS_OK, e->ep_create(rx->dev_addr.data(),
                                               rx->iface_addr.data(), &ep));
                /* served, or failed with an error: never left waiting */
                int errors     = m_errors;
                size_t arrived = m_other;
                honest_sender h;
                h.e  = e;
                h.ep = ep;
                h.id = 2000;
                ucs_status_t status = UCS_ERR_NO_RESOURCE;
                EXPECT_TRUE(wait_for([&]() {
                    if (status == UCS_ERR_NO_RESOURCE) {
                        status = try_send(h, HOSTILE_MAGIC);
                    }
                    return (m_errors > errors) || (m_other > arrived);
                })) << "new sender " << n << " left waiting";
                std::cout << "state " << value << ": new sender " << n
                          << ((m_other > arrived) ? " served" :
                                                    " failed with an error")
                          << std::endl;
                e->ep_destroy(ep);
                close_entity(e);
            }
        }
        hostile->ep_destroy(hep);
        close_entity(hostile);
        honest_traffic(10);
    }

    close_senders(rx, pool_before);
}

} // namespace
