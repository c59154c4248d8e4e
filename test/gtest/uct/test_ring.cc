/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * The ring engine on its own: wraparound, record sizes and PADs, holds and
 * remaps, pool exhaustion, stale blocks, bad records, credits, two threads
 * and two processes (cma wire).
 */

#include <uct/ib/remapring/ring/ring.h>
#include <uct/ib/remapring/ring/ring_copy.h>
#include <uct/ib/remapring/ring/ring_wire.h>

#include <ucs/debug/log_def.h>

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>


namespace {

/* Payload of message seq: every byte depends on seq and its position */
void fill_payload(void *buf, size_t length, uint64_t seq)
{
    uint8_t *p = (uint8_t *)buf;

    for (size_t i = 0; i < length; ++i) {
        p[i] = (uint8_t)(seq * 131 + i * 7 + (i >> 8));
    }
    if (length >= sizeof(seq)) {
        memcpy(p, &seq, sizeof(seq));
    }
}

bool check_payload(const void *buf, size_t length, uint64_t seq)
{
    std::vector<uint8_t> expected(length);

    fill_payload(expected.data(), length, seq);
    return (length == 0) || (memcmp(buf, expected.data(), length) == 0);
}

struct held_rec {
    void *payload;
    uint32_t length;
    uint64_t seq;
};

} // namespace


class test_ring : public ::testing::Test {
protected:
    struct config {
        size_t block_size     = 4096;
        unsigned nslots       = 4;
        unsigned headroom     = 64;
        unsigned credit_batch = 1;
        unsigned init_blocks  = 8;
        unsigned grow_blocks  = 8;
        unsigned max_blocks   = 256;
        unsigned inline_max   = 0;
        bool shm              = false; /* shm wire, table-only ring */
        unsigned grant_min    = 0; /* shm: quiet grant in slots, 0 all */
        bool reclaim          = false; /* shm: a quiet ring gives back */
        int punch_after       = -1; /* -1: the pool's default */
        remapring_ring_commit_t commit = REMAPRING_RING_COMMIT_TAIL;
    };

    void SetUp() override
    {
        m_ctl = (remapring_ring_ctl_t *)mmap(NULL, sizeof(*m_ctl),
                                             PROT_READ | PROT_WRITE,
                                             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        ASSERT_NE(MAP_FAILED, (void *)m_ctl);
    }

    void TearDown() override
    {
        destroy();
        munmap(m_ctl, sizeof(*m_ctl));
    }

    void init(const config &cfg)
    {
        remapring_pool_params_t pool_params;
        remapring_ring_params_t ring_params;
        remapring_ring_info_t info;

        destroy();
        m_cfg = cfg;
        remapring_pool_params_default(&pool_params);
        pool_params.block_size  = cfg.block_size;
        pool_params.init_blocks = cfg.init_blocks;
        pool_params.grow_blocks = cfg.grow_blocks;
        pool_params.max_blocks  = cfg.max_blocks;
        if (cfg.punch_after >= 0) {
            pool_params.punch_after = cfg.punch_after;
        }
        ASSERT_EQ(UCS_OK, remapring_pool_create(&pool_params, &m_pool));

        remapring_ring_params_default(&ring_params);
        ring_params.nslots       = cfg.nslots;
        ring_params.headroom     = cfg.headroom;
        ring_params.inline_max   = cfg.inline_max;
        ring_params.credit_batch = cfg.credit_batch;
        ring_params.commit       = cfg.commit;
        if (cfg.shm) {
            m_shared_slots.assign(cfg.nslots, UINT32_MAX);
            ring_params.shared_slots = m_shared_slots.data();
            ring_params.remap_view   = 0;
            ring_params.grant_min    = cfg.grant_min;
            ring_params.reclaim      = cfg.reclaim;
        }
        ASSERT_EQ(UCS_OK,
                  remapring_ring_create(m_pool, &ring_params, m_ctl, &m_ring));

        if (cfg.shm) {
            ASSERT_EQ(UCS_OK, remapring_wire_shm_create(
                                      m_pool->fd, cfg.block_size,
                                      cfg.max_blocks, m_shared_slots.data(),
                                      m_ring->window_size, m_ctl, &m_wire));
        } else {
            ASSERT_EQ(UCS_OK, remapring_wire_local_create(m_ring->view,
                                                          m_ring->window_size,
                                                          m_ctl, &m_wire));
        }
        remapring_ring_get_info(m_ring, &info);
        ASSERT_EQ(UCS_OK, remapring_ring_writer_init(&m_writer, &info, m_wire));
        m_send_seq = m_recv_seq = 0;
    }

    void destroy()
    {
        for (const held_rec &h : m_held) {
            remapring_ring_release(m_pool, h.payload);
        }
        m_held.clear();
        if (m_wire != NULL) {
            remapring_wire_destroy(m_wire);
            m_wire = NULL;
        }
        if (m_ring != NULL) {
            remapring_ring_destroy(m_ring);
            m_ring = NULL;
        }
        if (m_pool != NULL) {
            remapring_pool_destroy(m_pool);
            m_pool = NULL;
        }
    }

    size_t capacity() const
    {
        return remapring_ring_writer_max_payload(&m_writer);
    }

    ucs_status_t send(size_t length)
    {
        std::vector<uint8_t> buf(length);
        struct iovec iov = {buf.data(), length};
        ucs_status_t status;

        fill_payload(buf.data(), length, m_send_seq);
        status = remapring_ring_writer_send(&m_writer, (uint8_t)m_send_seq, 0,
                                            &iov, 1);
        if (status == UCS_OK) {
            m_sent_len.push_back((uint32_t)length);
            ++m_send_seq;
        }
        return status;
    }

    /* send(), the direct way when it takes the record (an 8-byte header
     * and the rest, as am_short sends them; @a length >= 8), *direct_p
     * true if it did. m_direct_misses counts records it left to the
     * general path. */
    ucs_status_t send_direct(size_t length, bool *direct_p = NULL)
    {
        std::vector<uint8_t> buf(length);
        remapring_ring_direct_t d;
        uint64_t header;
        bool direct;

        fill_payload(buf.data(), length, m_send_seq);
        memcpy(&header, buf.data(), sizeof(header));
        direct = remapring_ring_writer_direct_begin(&m_writer, length, &d);
        if (direct_p != NULL) {
            *direct_p = direct;
        }
        if (!direct) {
            ++m_direct_misses;
            return send(length);
        }

        memcpy(d.payload, &header, sizeof(header));
        memcpy(d.payload + sizeof(header), buf.data() + sizeof(header),
               length - sizeof(header));
        remapring_ring_writer_direct_commit(&m_writer, &d, (uint8_t)m_send_seq,
                                            length);
        m_sent_len.push_back((uint32_t)length);
        ++m_send_seq;
        return UCS_OK;
    }

    /* Poll one record and check it; returns false if there is none */
    bool recv(bool hold)
    {
        remapring_ring_rx_t rx;
        ucs_status_t status = remapring_ring_poll(m_ring, &rx);

        if (status == UCS_ERR_NO_PROGRESS) {
            return false;
        }
        EXPECT_EQ(UCS_OK, status);
        if (status != UCS_OK) {
            return false;
        }

        EXPECT_EQ(m_sent_len.front(), rx.length) << "seq " << m_recv_seq;
        EXPECT_EQ((uint8_t)m_recv_seq, rx.am_id);
        EXPECT_TRUE(check_payload(rx.payload, rx.length, m_recv_seq))
                << "seq " << m_recv_seq;
        EXPECT_EQ(0u, (uintptr_t)rx.payload % REMAPRING_RING_PAYLOAD_ALIGN);
        m_sent_len.pop_front();

        if (hold && !rx.is_inline) {
            /* The headroom in front of the payload is ours to write */
            memset((char *)rx.payload - m_cfg.headroom, 0xee, m_cfg.headroom);
        }
        if (hold) {
            m_held.push_back({rx.payload, rx.length, m_recv_seq});
        }
        remapring_ring_consume(m_ring, &rx, hold);
        ++m_recv_seq;
        return true;
    }

    unsigned drain(std::function<bool(uint64_t)> hold_fn = nullptr)
    {
        unsigned count = 0;

        while (recv(hold_fn ? hold_fn(m_recv_seq) : false)) {
            ++count;
        }
        return count;
    }

    void check_held(const held_rec &h)
    {
        EXPECT_TRUE(check_payload(h.payload, h.length, h.seq))
                << "held seq " << h.seq << " was overwritten";
    }

    void release(size_t index)
    {
        check_held(m_held[index]);
        ASSERT_EQ(UCS_OK,
                  remapring_ring_release(m_pool, m_held[index].payload));
        m_held.erase(m_held.begin() + index);
    }

    void release_all_shuffled()
    {
        std::shuffle(m_held.begin(), m_held.end(), m_rng);
        while (!m_held.empty()) {
            release(m_held.size() - 1);
        }
    }

    remapring_pool_stats_t pool_stats()
    {
        remapring_pool_stats_t stats;
        remapring_pool_get_stats(m_pool, &stats);
        return stats;
    }

    remapring_ring_stats_t ring_stats()
    {
        remapring_ring_stats_t stats;
        remapring_ring_get_stats(m_ring, &stats);
        return stats;
    }

    /* Write a raw header stamped as of ring offset @a offset at the tail,
     * and publish the tail past it (TAIL commit) */
    void
    forge(uint64_t offset, uint32_t length, uint8_t type, uint64_t tail_advance)
    {
        uint64_t off = m_writer.tail;
        remapring_ring_hdr_t hdr;

        memset(&hdr, 0, sizeof(hdr));
        hdr.stamp  = offset ^ m_ring->nonce;
        hdr.length = length;
        hdr.type   = type;
        memcpy((char *)m_ring->view + (off & (m_ring->window_size - 1)), &hdr,
               sizeof(hdr));
        if (m_cfg.commit == REMAPRING_RING_COMMIT_TAIL) {
            remapring_ring_ctl_store_tail(m_ctl, off + tail_advance);
        }
    }

    void expect_rejected()
    {
        remapring_ring_rx_t rx;

        EXPECT_EQ(UCS_ERR_IO_ERROR, remapring_ring_poll(m_ring, &rx));
        /* sticky: the bad record is never followed */
        EXPECT_EQ(UCS_ERR_IO_ERROR, remapring_ring_poll(m_ring, &rx));
    }

    config m_cfg;
    remapring_ring_ctl_t *m_ctl = NULL;
    remapring_pool_t *m_pool    = NULL;
    remapring_ring_t *m_ring    = NULL;
    remapring_wire_t *m_wire    = NULL;
    std::vector<uint32_t> m_shared_slots;
    remapring_ring_writer_t m_writer;
    uint64_t m_send_seq      = 0;
    uint64_t m_recv_seq      = 0;
    uint64_t m_direct_misses = 0;
    std::deque<uint32_t> m_sent_len;
    std::vector<held_rec> m_held;
    std::mt19937_64 m_rng{12345};
};


TEST_F(test_ring, basic)
{
    init(config());
    ASSERT_EQ(UCS_OK, send(100));
    EXPECT_TRUE(recv(false));
    EXPECT_FALSE(recv(false));
    EXPECT_EQ(1u, ring_stats().nrecords);
}

/* Inline records carry the payload right after the header: an 8-byte
 * message is one cache line. Descriptor records leave the reserve, where
 * the headroom in front of the payload lies (the header included). */
TEST_F(test_ring, layout_inline_and_descriptor)
{
    config cfg;
    cfg.inline_max = 128;
    cfg.headroom   = 80;
    init(cfg);
    remapring_ring_rx_t rx;

    ASSERT_EQ(UCS_OK, send(8));
    ASSERT_EQ(UCS_OK, remapring_ring_poll(m_ring, &rx));
    EXPECT_TRUE(rx.is_inline);
    EXPECT_EQ(64u, rx.next - rx.offset);
    EXPECT_EQ(sizeof(remapring_ring_hdr_t), (uintptr_t)rx.payload % 64);
    remapring_ring_consume(m_ring, &rx, 0);
    m_sent_len.pop_front();

    ASSERT_EQ(UCS_OK, send(129));
    ASSERT_EQ(UCS_OK, remapring_ring_poll(m_ring, &rx));
    EXPECT_FALSE(rx.is_inline);
    /* the headroom is just the bytes between the record's start and the
     * payload: header and reserve */
    EXPECT_EQ(80u, (uintptr_t)rx.payload % cfg.block_size -
                           (rx.offset % cfg.block_size));
    EXPECT_EQ(256u, rx.next - rx.offset); /* align64(80 + 129) */
    remapring_ring_consume(m_ring, &rx, 0);
    m_sent_len.pop_front();
    m_recv_seq = m_send_seq;

    /* a payload of inline_max is inline, one more byte is not */
    ASSERT_EQ(UCS_OK, send(128));
    ASSERT_EQ(UCS_OK, remapring_ring_poll(m_ring, &rx));
    EXPECT_TRUE(rx.is_inline);
    EXPECT_EQ(192u, rx.next - rx.offset); /* align64(16 + 128) */
}

/* The stamp commit: no tail word is written, the reader takes a record once
 * its stamp is there, and never one of an earlier lap */
TEST_F(test_ring, stamp_commit)
{
    config cfg;
    cfg.nslots     = 2;
    cfg.commit     = REMAPRING_RING_COMMIT_STAMP;
    cfg.inline_max = 256;
    init(cfg);

    for (int lap = 0; lap < 6; ++lap) {
        while (send((m_send_seq % 3 == 0) ? 100 : 700) == UCS_OK) {
        }
        drain();
        EXPECT_EQ(m_send_seq, m_recv_seq);
    }
    EXPECT_EQ(0u, remapring_ring_ctl_load_tail(m_ctl));
    EXPECT_TRUE(remapring_ring_is_empty(m_ring));

    /* behind the head lie last lap's records: not followed */
    remapring_ring_hdr_t old;
    memcpy(&old, (char*)m_ring->view + (m_ring->head & (m_ring->window_size - 1)),
           sizeof(old));
    EXPECT_NE(m_ring->head ^ m_ring->nonce, old.stamp);
    EXPECT_FALSE(recv(false));

    /* a header stamped right but lying about its length is refused */
    forge(m_writer.tail, (uint32_t)capacity() + 1, REMAPRING_RING_REC_DATA, 0);
    EXPECT_FALSE(remapring_ring_is_empty(m_ring));
    expect_rejected();
}

/* The reader's inline poll checks an inline record as the whole poll does:
 * one stamped right whose length runs past its slot is refused */
TEST_F(test_ring, stamp_inline_past_slot)
{
    config cfg;
    cfg.commit     = REMAPRING_RING_COMMIT_STAMP;
    cfg.inline_max = 256;
    init(cfg);

    /* 64-byte records up to the slot's last 64 bytes */
    while (m_writer.tail < cfg.block_size - 64) {
        ASSERT_EQ(UCS_OK, send(48));
    }
    drain();
    EXPECT_EQ(cfg.block_size - 64, m_ring->head);
    forge(m_writer.tail, 200, REMAPRING_RING_REC_DATA, 0);
    expect_rejected();
}

TEST_F(test_ring, iov_pieces)
{
    init(config());
    std::vector<uint8_t> buf(1000);
    fill_payload(buf.data(), buf.size(), 0);
    struct iovec iov[4] = {{buf.data(), 10},
                           {buf.data() + 10, 0},
                           {buf.data() + 10, 500},
                           {buf.data() + 510, 490}};

    ASSERT_EQ(UCS_OK, remapring_ring_writer_send(&m_writer, 0, 0, iov, 4));
    m_sent_len.push_back(1000);
    m_send_seq = 1;
    EXPECT_TRUE(recv(false));
}

TEST_F(test_ring, exceeds_limit)
{
    init(config());
    EXPECT_EQ(UCS_ERR_EXCEEDS_LIMIT, send(capacity() + 1));
    EXPECT_EQ(UCS_OK, send(capacity()));
    EXPECT_TRUE(recv(false));
}

/* A reader's info whose alignment, after header and reserve, takes more
 * than a block: the largest payload wrapped around and the writer took it
 * (found by contrib/fuzz/fuzz_ring_writer) */
TEST_F(test_ring, bad_info_alignment_wraps_max_payload)
{
    remapring_ring_layout_t layout;
    remapring_ring_info_t info;
    remapring_ring_writer_t writer;

    init(config());
    remapring_ring_get_info(m_ring, &info);
    info.align = 4096;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              remapring_ring_writer_init(&writer, &info, m_wire));

    remapring_ring_layout_init(&layout, 256, 0, 4096, 0);
    EXPECT_FALSE(remapring_ring_geometry_valid(4096, 4, &layout));
    remapring_ring_layout_init(&layout, 256, 0, 4096, 0);
    EXPECT_TRUE(remapring_ring_geometry_valid(16384, 4, &layout));
}

/* Errors logged, counted instead of printed (ucs_log_push_handler) */
static unsigned ring_log_errors;

static ucs_log_func_rc_t
ring_count_errors(const char *file, unsigned line, const char *function,
                  ucs_log_level_t level, const ucs_log_component_config_t *comp,
                  const char *message, va_list ap)
{
    if (level <= UCS_LOG_LEVEL_ERROR) {
        ++ring_log_errors;
        return UCS_LOG_FUNC_RC_STOP;
    }
    return UCS_LOG_FUNC_RC_CONTINUE;
}

/* Blocks past REMAPRING_RING_BLOCK_MAX: a record's length, a PAD's
 * and the info's block size are 32-bit (a 4 GiB block passed the settings
 * check and read as 0 at the sender; found by contrib/fuzz/fuzz_settings) */
/* remapring_wire_copy() copies every byte and no other, on both of its ways:
 * memcpy, and non-temporal stores where the destination lands 1 to 63
 * bytes past the source modulo a page (from 2 KiB) */
TEST(test_ring_wire, copy_every_distance)
{
    static const size_t sizes[] = {0,    1,    63,   64,   2047,
                                   2048, 2049, 4109, 65536, 131077};
    static const size_t dists[] = {0, 1, 8, 40, 63, 64, 104, 4000, 4095};
    const size_t guard          = 128;
    const size_t room           = 131077 + 3 * 4096;
    std::vector<uint8_t> src(room), dst(room + 2 * guard);
    size_t src_off, dst_off, size, i;

    for (i = 0; i < src.size(); ++i) {
        src[i] = (uint8_t)(i * 131 + 7);
    }

    /* src_off 0 to 63 by 13: sources on every alignment */
    for (src_off = 0; src_off < 64; src_off += 13) {
        const uint8_t *from = src.data() + src_off;
        for (size_t dist : dists) {
            for (size_t sz : sizes) {
                uint8_t *base = dst.data() + guard;
                size          = sz;
                /* the destination, from the page offset of the source */
                dst_off = ((((uintptr_t)from + dist) & 4095) -
                           ((uintptr_t)base & 4095)) & 4095;
                std::fill(dst.begin(), dst.end(), 0xa5);
                remapring_wire_copy(base + dst_off, from, size);
                ASSERT_EQ(dist, ((uintptr_t)(base + dst_off) -
                                 (uintptr_t)from) & 4095);
                ASSERT_EQ(0, memcmp(base + dst_off, from, size))
                        << "size " << size << " distance " << dist;
                for (i = 0; i < guard + dst_off; ++i) {
                    ASSERT_EQ(0xa5, dst[i]) << "before, size " << size;
                }
                for (i = guard + dst_off + size; i < dst.size(); ++i) {
                    ASSERT_EQ(0xa5, dst[i]) << "after, size " << size;
                }
            }
        }
    }
}

TEST(test_ring_geometry, block_size_max)
{
    remapring_ring_layout_t layout;
    remapring_pool_params_t params;
    remapring_pool_t *pool;

    remapring_ring_layout_init(&layout, 256, 0, 1, 0);
    EXPECT_TRUE(remapring_ring_geometry_valid(REMAPRING_RING_BLOCK_MAX, 2,
                                              &layout));
    EXPECT_FALSE(remapring_ring_geometry_valid(REMAPRING_RING_BLOCK_MAX * 2, 2,
                                               &layout));
    EXPECT_FALSE(remapring_ring_geometry_valid(1ull << 32, 2, &layout));
    /* and past REMAPRING_RING_SLOTS_MAX slots: 2^31 of them made the
     * slot table's size wrap to 0 (found by contrib/fuzz/fuzz_settings) */
    EXPECT_TRUE(remapring_ring_geometry_valid(4096, REMAPRING_RING_SLOTS_MAX,
                                              &layout));
    EXPECT_FALSE(remapring_ring_geometry_valid(4096,
                                               REMAPRING_RING_SLOTS_MAX * 2,
                                               &layout));
    EXPECT_FALSE(remapring_ring_geometry_valid(4096, 1u << 31, &layout));

    remapring_pool_params_default(&params);
    params.block_size  = REMAPRING_POOL_BLOCK_MAX * 2;
    params.init_blocks = 0;
    params.max_blocks  = 1;
    ring_log_errors = 0;
    ucs_log_push_handler(ring_count_errors);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, remapring_pool_create(&params, &pool));
    ucs_log_pop_handler();
    EXPECT_EQ(1u, ring_log_errors);
}

TEST_F(test_ring, wraparound_laps)
{
    config cfg;
    init(cfg);
    const size_t sizes[] = {0, 1, 63, 64, 200, 1000, 3000, capacity()};
    const uint64_t laps  = 500;
    size_t i             = 0;

    while (m_writer.tail < laps * m_ring->window_size) {
        if (send(sizes[i % (sizeof(sizes) / sizeof(sizes[0]))]) == UCS_OK) {
            ++i;
        } else {
            ASSERT_GT(drain(), 0u);
        }
    }
    drain();
    EXPECT_EQ(m_send_seq, m_recv_seq);
    EXPECT_EQ(0u, ring_stats().nremaps);
    EXPECT_GE(ring_stats().nreuse, laps * cfg.nslots - cfg.nslots);
    EXPECT_GT(ring_stats().npads, 0u);
}

TEST_F(test_ring, every_size_with_pads)
{
    init(config());

    for (size_t length = 0; length <= capacity(); ++length) {
        while (send(length) == UCS_ERR_NO_RESOURCE) {
            ASSERT_GT(drain(), 0u);
        }
        /* read in bursts, so PADs are met both on the first poll and
         * behind records */
        if ((length % 5) == 0) {
            drain();
        }
    }
    drain();
    EXPECT_EQ(m_send_seq, m_recv_seq);
    EXPECT_EQ(capacity() + 1, m_recv_seq);
    EXPECT_GT(ring_stats().npads, 100u);
    EXPECT_EQ(m_writer.stats.npads, ring_stats().npads);
}

TEST_F(test_ring, sizes_64k_blocks)
{
    config cfg;
    cfg.block_size = 65536;
    cfg.headroom   = 200;
    cfg.nslots     = 4;
    init(cfg);

    std::vector<size_t> sizes;
    for (size_t s = 0; s <= 256; ++s) {
        sizes.push_back(s);
    }
    for (size_t s = 257; s < capacity(); s += 251) {
        sizes.push_back(s);
    }
    sizes.push_back(capacity() - 1);
    sizes.push_back(capacity());

    for (size_t s : sizes) {
        while (send(s) == UCS_ERR_NO_RESOURCE) {
            ASSERT_GT(drain(), 0u);
        }
    }
    drain();
    EXPECT_EQ(sizes.size(), m_recv_seq);
}

TEST_F(test_ring, hold_every_kth)
{
    config cfg;
    cfg.max_blocks = 64;
    init(cfg);
    const unsigned k = 3;
    std::uniform_int_distribution<size_t> size_dist(0, capacity());

    for (unsigned n = 0; n < 20000; ++n) {
        while (send(size_dist(m_rng) / (1 + n % 4)) == UCS_ERR_NO_RESOURCE) {
            drain([](uint64_t seq) { return (seq % k) == 0; });
            /* release a random half of what is held, out of order */
            while (m_held.size() > 40) {
                std::uniform_int_distribution<size_t> pick(0,
                                                           m_held.size() - 1);
                release(pick(m_rng));
            }
        }
    }
    drain([](uint64_t seq) { return (seq % k) == 0; });
    EXPECT_EQ(m_send_seq, m_recv_seq);

    remapring_pool_stats_t ps = pool_stats();
    EXPECT_GT(ps.nremaps, 0u);
    EXPECT_GT(ps.ndetached, 0u);
    for (const held_rec &h : m_held) {
        check_held(h);
    }
    release_all_shuffled();

    ps = pool_stats();
    EXPECT_EQ(0u, ps.nholds);
    EXPECT_EQ(0u, ps.nheld_blocks);
    EXPECT_EQ(0u, ps.ndetached);
    EXPECT_EQ(ps.nblocks - cfg.nslots, ps.nfree);
}

/* The shm wire writes through the shared slot table: held blocks are
 * swapped in the table only, never mmap()ed, and every held byte stays */
TEST_F(test_ring, shm_wire_hold_every_kth_without_mmap)
{
    config cfg;
    cfg.max_blocks = 64;
    cfg.shm        = true;
    init(cfg);
    std::uniform_int_distribution<size_t> size_dist(0, capacity());

    for (unsigned n = 0; n < 20000; ++n) {
        while (send(size_dist(m_rng) / (1 + n % 4)) == UCS_ERR_NO_RESOURCE) {
            drain([](uint64_t seq) { return (seq % 3) == 0; });
            while (m_held.size() > 40) {
                std::uniform_int_distribution<size_t> pick(0,
                                                           m_held.size() - 1);
                release(pick(m_rng));
            }
        }
    }
    drain([](uint64_t seq) { return (seq % 3) == 0; });
    EXPECT_EQ(m_send_seq, m_recv_seq);

    EXPECT_GT(ring_stats().nremaps, 0u) << "no held block was swapped";
    EXPECT_EQ(0u, pool_stats().nremaps) << "a table-only ring called mmap";
    for (unsigned i = 0; i < cfg.nslots; ++i) {
        EXPECT_EQ(m_ring->slots[i], m_shared_slots[i]) << "slot " << i;
    }
    for (const held_rec &h : m_held) {
        check_held(h);
    }
    release_all_shuffled();
    EXPECT_EQ(0u, pool_stats().nheld_blocks);
}

/* A slot table entry that names no block of the pool is refused */
TEST_F(test_ring, shm_wire_bad_table_entry)
{
    config cfg;
    cfg.shm = true;
    init(cfg);
    ASSERT_EQ(UCS_OK, send(100));
    m_shared_slots[0] = cfg.max_blocks;
    m_shared_slots[1] = UINT32_MAX;
    ucs_status_t status;
    do {
        status = send(100);
    } while (status == UCS_OK);
    EXPECT_EQ(UCS_ERR_INVALID_ADDR, status);
}

/* The writer's direct path: a wire without direct stores (local) or a TAIL
 * commit never takes it. On the shm wire with STAMP it takes every record,
 * inline or not, that has credit and room in its slot, and leaves the
 * rest, the record that must pad to the next slot and the one whose block
 * is past the pool the wire last saw, to the general path; the reader sees
 * the same records either way (it polls them inline too), and held ones
 * keep their bytes. */
TEST_F(test_ring, direct_path)
{
    config cfg;
    cfg.commit     = REMAPRING_RING_COMMIT_STAMP;
    cfg.inline_max = 256;
    init(cfg);
    remapring_ring_direct_t d;
    EXPECT_FALSE(remapring_ring_writer_direct_begin(&m_writer, 8, &d))
            << "the local wire has no direct stores";

    cfg.shm         = true;
    cfg.init_blocks = 2; /* the pool grows under the writer */
    cfg.max_blocks  = 64;
    init(cfg);
    EXPECT_FALSE(
            remapring_ring_writer_direct_begin(&m_writer, capacity() + 1, &d))
            << "a payload past the largest went the direct way";

    /* mostly inline records, some descriptor records up to a quarter of a
     * slot */
    std::uniform_int_distribution<size_t> size_dist(8, 256);
    std::uniform_int_distribution<size_t> large_dist(257, capacity() / 4);
    uint32_t file_blocks = m_wire->direct.file_blocks;
    uint64_t ndirect     = 0;
    bool is_direct;
    for (unsigned n = 0; n < 20000; ++n) {
        size_t length = (n % 8 == 0) ? large_dist(m_rng) : size_dist(m_rng);
        while (send_direct(length, &is_direct) == UCS_ERR_NO_RESOURCE) {
            /* hold some, so that held blocks move under the slots */
            drain([](uint64_t seq) { return (seq % 97) == 0; });
            while (m_held.size() > 8) {
                release(0);
            }
        }
        ndirect += is_direct;
    }
    drain();
    EXPECT_EQ(m_send_seq, m_recv_seq);
    EXPECT_GT(ring_stats().npads, 0u);
    EXPECT_GT(ring_stats().nremaps, 0u);
    /* only the general path looks at the memfd again */
    EXPECT_GT(m_wire->direct.file_blocks, file_blocks)
            << "no record found its block past the pool the wire saw";
    /* every record that pads, or finds no credit, takes the general path */
    EXPECT_GT(ndirect, 15000u);
    EXPECT_GE(m_direct_misses, ring_stats().npads);
    printf("[          ] %lu records the direct way, %lu not (%lu pads)\n",
           ndirect, m_direct_misses, ring_stats().npads);
    release_all_shuffled();

    /* TAIL commit: never */
    cfg.commit = REMAPRING_RING_COMMIT_TAIL;
    init(cfg);
    EXPECT_FALSE(remapring_ring_writer_direct_begin(&m_writer, 8, &d));
}

TEST_F(test_ring, hold_across_many_laps)
{
    init(config());
    const uint64_t laps = 200;

    ASSERT_EQ(UCS_OK, send(1000));
    ASSERT_TRUE(recv(true));
    ASSERT_EQ(UCS_OK, send(2000));
    ASSERT_TRUE(recv(true));

    uint64_t start = m_writer.tail;
    while (m_writer.tail < start + laps * m_ring->window_size) {
        if (send(777) != UCS_OK) {
            drain();
        }
    }
    drain();

    EXPECT_EQ(2u, m_held.size());
    EXPECT_EQ(1u, pool_stats().ndetached);
    EXPECT_EQ(1u, ring_stats().nremaps);
    release(1);
    EXPECT_EQ(1u, pool_stats().ndetached);
    release(0);
    EXPECT_EQ(0u, pool_stats().ndetached);
    EXPECT_EQ(0u, pool_stats().nheld_blocks);
}

TEST_F(test_ring, release_out_of_order)
{
    config cfg;
    cfg.nslots = 8;
    init(cfg);
    unsigned nfree = pool_stats().nfree;

    /* fill several laps, holding all of it */
    for (unsigned lap = 0; lap < 3; ++lap) {
        while (send(500) == UCS_OK) {
        }
        drain([](uint64_t) { return true; });
    }
    EXPECT_GT(pool_stats().ndetached, 8u);
    release_all_shuffled();

    remapring_pool_stats_t ps = pool_stats();
    EXPECT_EQ(0u, ps.ndetached);
    EXPECT_EQ(0u, ps.nholds);
    EXPECT_EQ(ps.nblocks - cfg.nslots, ps.nfree);
    EXPECT_GE(ps.nfree, nfree);

    /* and the ring goes on */
    for (unsigned n = 0; n < 1000; ++n) {
        if (send(300) != UCS_OK) {
            drain();
        }
    }
    drain();
    EXPECT_EQ(m_send_seq, m_recv_seq);
}

/* The process-wide count of pool blocks in use follows holds, releases and
 * the end of the ring and of its pool */
TEST_F(test_ring, pool_total_used)
{
    uint64_t before = remapring_pool_blocks_in_use(NULL);
    config cfg;
    cfg.nslots = 8;
    init(cfg);

    remapring_pool_stats_t ps = pool_stats();
    EXPECT_EQ(before + ps.nblocks - ps.nfree,
              remapring_pool_blocks_in_use(NULL));

    for (unsigned lap = 0; lap < 3; ++lap) {
        while (send(500) == UCS_OK) {
        }
        drain([](uint64_t) { return true; });
    }
    ps = pool_stats();
    EXPECT_GT(ps.ndetached, 0u);
    EXPECT_EQ(before + ps.nblocks - ps.nfree,
              remapring_pool_blocks_in_use(NULL));

    release_all_shuffled();
    ps = pool_stats();
    EXPECT_EQ(before + ps.nblocks - ps.nfree,
              remapring_pool_blocks_in_use(NULL));

    destroy();
    EXPECT_EQ(before, remapring_pool_blocks_in_use(NULL));
}

/* A quiet ring gives back the pages of a block behind one of its slots but
 * those its held records touch (remapring_pool_block_punch); the pool's free
 * blocks past the first few of its free list are given back once, and a
 * block taken again is whole again (remapring_pool_trim_free) */
TEST(test_ring_pool, punch_attached_and_trim_free)
{
    remapring_pool_params_t params;
    remapring_pool_t *pool;
    uint32_t attached, freed[4];
    struct stat st;

    remapring_pool_params_default(&params);
    params.block_size  = 64 * 1024;
    params.init_blocks = 8;
    params.fold_pages  = 0;
    ASSERT_EQ(UCS_OK, remapring_pool_create(&params, &pool));
    const off_t ppage = sysconf(_SC_PAGESIZE) / 512; /* st_blocks per page */
    ASSERT_EQ(16u, pool->pages_per_block) << "4 KiB pages assumed";

    ASSERT_EQ(UCS_OK, remapring_pool_block_get(pool, &attached));
    memset(remapring_pool_block_addr(pool, attached), 0x5a,
           params.block_size);
    remapring_pool_block_hold(pool, attached, 100, 200); /* page 0 */
    ASSERT_EQ(0, fstat(pool->fd, &st));
    EXPECT_EQ(16 * ppage, st.st_blocks);

    /* the held page stays, with its bytes; the others come back zeroed */
    EXPECT_EQ(15u, remapring_pool_block_punch(pool, attached));
    ASSERT_EQ(0, fstat(pool->fd, &st));
    EXPECT_EQ(ppage, st.st_blocks);
    const uint8_t *bytes = (const uint8_t*)remapring_pool_block_addr(pool,
                                                                     attached);
    EXPECT_EQ(0x5a, bytes[150]);
    EXPECT_EQ(0, bytes[params.block_size - 1]);
    EXPECT_EQ(REMAPRING_POOL_UNHOLD_ATTACHED,
              remapring_pool_block_unhold(pool, attached, 100));

    /* four blocks written and freed: the first two of the free list (the
     * last freed) stay, the other two are given back, once */
    for (uint32_t &block : freed) {
        ASSERT_EQ(UCS_OK, remapring_pool_block_get(pool, &block));
        memset(remapring_pool_block_addr(pool, block), 0x33,
               params.block_size);
    }
    for (uint32_t block : freed) {
        remapring_pool_block_put(pool, block);
    }
    ASSERT_EQ(0, fstat(pool->fd, &st));
    const off_t before = st.st_blocks;
    EXPECT_EQ(2u * 16u, remapring_pool_trim_free(pool, 2));
    ASSERT_EQ(0, fstat(pool->fd, &st));
    EXPECT_EQ(before - 2 * 16 * ppage, st.st_blocks);
    EXPECT_EQ(0u, remapring_pool_trim_free(pool, 2)); /* done already */
    EXPECT_EQ(0x33, *(const uint8_t*)remapring_pool_block_addr(pool,
                                                               freed[3]));
    EXPECT_EQ(0, *(const uint8_t*)remapring_pool_block_addr(pool, freed[0]));

    /* taken again and written, a block is given back again */
    uint32_t again;
    while (remapring_pool_block_get(pool, &again) == UCS_OK) {
        if (again == freed[0]) {
            break;
        }
    }
    ASSERT_EQ(freed[0], again);
    EXPECT_EQ(0u, pool->blocks[again].empty);
    memset(remapring_pool_block_addr(pool, again), 0x44, params.block_size);
    remapring_pool_block_put(pool, again);
    EXPECT_EQ(16u, remapring_pool_trim_free(pool, 0));

    /* a pool that punches nothing (a device pins its pages) gives back
     * nothing */
    pool->punch = 0;
    EXPECT_EQ(0u, remapring_pool_block_punch(pool, attached));
    EXPECT_EQ(0u, remapring_pool_trim_free(pool, 0));
    pool->punch = 1;
    remapring_pool_destroy(pool);
}

/* A record released while others of its block are still held gives back
 * the pages only it touched: at the next detach if the block was punched,
 * else when it is; an address in no held record releases nothing */
TEST(test_ring_pool, partial_release_gives_back_pages)
{
    remapring_pool_params_t params;
    remapring_pool_t *pool;
    uint32_t punched, listed;
    struct stat st;

    remapring_pool_params_default(&params);
    params.block_size  = 64 * 1024;
    params.init_blocks = 4;
    params.punch_after = 1; /* the newest detached block waits whole */
    params.fold_pages  = 0; /* punching alone; folding: fold_* below */
    ASSERT_EQ(UCS_OK, remapring_pool_create(&params, &pool));
    const size_t page  = sysconf(_SC_PAGESIZE);
    const off_t ppage  = page / 512; /* st_blocks per page */
    ASSERT_EQ(16u, pool->pages_per_block) << "4 KiB pages assumed";

    /* a: page 0; b: pages 0-2; c: pages 4-7; d: page 7 */
    const size_t a = 0, b = 4000, c = 5 * page - 500, d = 8 * page - 100;
    for (uint32_t *block : {&punched, &listed}) {
        ASSERT_EQ(UCS_OK, remapring_pool_block_get(pool, block));
        memset(remapring_pool_block_addr(pool, *block), 0x5a,
               params.block_size); /* every page resident */
        remapring_pool_block_hold(pool, *block, a, a + 100);
        remapring_pool_block_hold(pool, *block, b, 3 * page - 10);
        remapring_pool_block_hold(pool, *block, c, d);
        remapring_pool_block_hold(pool, *block, d, d + 64);
    }

    /* attached: a release changes no page */
    EXPECT_EQ(REMAPRING_POOL_UNHOLD_HELD,
              remapring_pool_block_unhold(pool, listed, c + 10));
    remapring_pool_block_detach(pool, punched);
    remapring_pool_block_detach(pool, listed); /* punches the first */
    EXPECT_EQ(7u + 16u, pool->stats.held_pages); /* pages 0-2, 4-7; whole */

    ASSERT_EQ(0, fstat(pool->fd, &st));
    off_t resident = st.st_blocks;

    /* b, then c: their pages wait for the next detach (a burst of
     * releases makes no system call of each) */
    EXPECT_EQ(REMAPRING_POOL_UNHOLD_HELD,
              remapring_pool_block_unhold(pool, punched, b + 2 * page));

    /* no held record there: nothing changes (b is gone, e never was) */
    EXPECT_EQ(REMAPRING_POOL_UNHOLD_NONE,
              remapring_pool_block_unhold(pool, punched, b + page));
    EXPECT_EQ(REMAPRING_POOL_UNHOLD_NONE,
              remapring_pool_block_unhold(pool, punched, 12 * page));
    EXPECT_EQ(3u, pool->blocks[punched].nholds);

    EXPECT_EQ(REMAPRING_POOL_UNHOLD_HELD,
              remapring_pool_block_unhold(pool, punched, c));
    EXPECT_EQ(7u + 16u, pool->stats.held_pages);
    ASSERT_EQ(0, fstat(pool->fd, &st));
    EXPECT_EQ(resident, st.st_blocks);

    /* The next detach gives back b's pages 1 and 2 (page 0 is a's) and c's
     * 4 to 6 (7 is d's); and punches the whole one it pushes out, which
     * keeps the pages of what is still held there: a, b, d (c went while
     * attached) */
    uint32_t next;
    ASSERT_EQ(UCS_OK, remapring_pool_block_get(pool, &next));
    remapring_pool_block_hold(pool, next, 0, 64);
    remapring_pool_block_detach(pool, next);
    EXPECT_EQ(2u + 4u + 16u, pool->stats.held_pages);
    ASSERT_EQ(0, fstat(pool->fd, &st));
    EXPECT_EQ(resident - (5 + 12) * ppage, st.st_blocks);

    /* the last holds free the blocks */
    for (size_t offset : {a, d}) {
        remapring_pool_block_unhold(pool, punched, offset);
    }
    for (size_t offset : {a, b, d}) {
        remapring_pool_block_unhold(pool, listed, offset);
    }
    EXPECT_EQ(REMAPRING_POOL_UNHOLD_FREED,
              remapring_pool_block_unhold(pool, next, 0));
    EXPECT_EQ(0u, pool->stats.held_pages);
    EXPECT_EQ(0u, pool->stats.ndetached);
    EXPECT_EQ(0u, pool->stats.nholds);
    remapring_pool_destroy(pool);
}

/* Holds kept in the order they came, released in any order, the newest
 * included, and held again after: each release finds its record */
TEST(test_ring_pool, hold_list_any_order)
{
    remapring_pool_params_t params;
    remapring_pool_t *pool;
    uint32_t block;

    remapring_pool_params_default(&params);
    params.init_blocks = 1;
    ASSERT_EQ(UCS_OK, remapring_pool_create(&params, &pool));
    ASSERT_EQ(UCS_OK, remapring_pool_block_get(pool, &block));

    for (size_t r = 0; r < 4; ++r) {
        remapring_pool_block_hold(pool, block, r * 1000, r * 1000 + 900);
    }
    /* the newest, then one more after it */
    EXPECT_EQ(REMAPRING_POOL_UNHOLD_HELD,
              remapring_pool_block_unhold(pool, block, 3000));
    remapring_pool_block_hold(pool, block, 4000, 4900);
    for (size_t offset : {1500, 4100, 2899}) {
        EXPECT_EQ(REMAPRING_POOL_UNHOLD_HELD,
                  remapring_pool_block_unhold(pool, block, offset))
                << offset;
    }
    /* released already, between two records, past the last */
    for (size_t offset : {1000, 950, 3000, 5000}) {
        EXPECT_EQ(REMAPRING_POOL_UNHOLD_NONE,
                  remapring_pool_block_unhold(pool, block, offset))
                << offset;
    }
    EXPECT_EQ(1u, pool->blocks[block].nholds); /* only 0-899 */
    remapring_pool_block_hold(pool, block, 5000, 5100); /* after it */
    EXPECT_EQ(REMAPRING_POOL_UNHOLD_HELD,
              remapring_pool_block_unhold(pool, block, 5050));
    EXPECT_EQ(REMAPRING_POOL_UNHOLD_ATTACHED,
              remapring_pool_block_unhold(pool, block, 899));
    remapring_pool_block_put(pool, block);
    remapring_pool_destroy(pool);
}

/* A detached block with holds stays whole only so long: punched by the
 * next detach or punch_aged() once it waited punch_age_ns */
TEST(test_ring_pool, punch_after_an_age)
{
    remapring_pool_params_t params;
    remapring_pool_t *pool;
    uint32_t first, second;

    remapring_pool_params_default(&params);
    params.block_size   = 64 * 1024;
    params.init_blocks  = 4;
    params.punch_after  = 16;
    params.punch_age_ns = 3600ull * 1000000000ull;
    params.fold_pages   = 0; /* punching alone */
    ASSERT_EQ(UCS_OK, remapring_pool_create(&params, &pool));
    const unsigned ppb = pool->pages_per_block;

    ASSERT_EQ(UCS_OK, remapring_pool_block_get(pool, &first));
    remapring_pool_block_hold(pool, first, 0, 64);
    remapring_pool_block_detach(pool, first);
    remapring_pool_punch_aged(pool);
    EXPECT_EQ((uint64_t)ppb, pool->stats.held_pages); /* young: whole */

    pool->punch_age_ns = 0; /* as if an hour went by */
    remapring_pool_punch_aged(pool);
    EXPECT_EQ(1u, pool->stats.held_pages);
    EXPECT_EQ((uint64_t)1 << pool->page_shift, pool->stats.mem_bytes -
              ((uint64_t)(pool->nblocks - 1) * params.block_size));

    /* and a detach punches what is old at once, itself included */
    ASSERT_EQ(UCS_OK, remapring_pool_block_get(pool, &second));
    remapring_pool_block_hold(pool, second, 0, 64);
    remapring_pool_block_detach(pool, second);
    EXPECT_EQ(2u, pool->stats.held_pages);

    remapring_pool_block_unhold(pool, first, 0);
    remapring_pool_block_unhold(pool, second, 0);
    EXPECT_EQ(0u, pool->stats.held_pages);
    remapring_pool_destroy(pool);
}

/* A detached block with holds stays whole while it is among the newest
 * punch_after: a hold that ends soon costs no punch, and the block no page
 * faults when reused; older ones give back the pages no hold touches */
TEST(test_ring_pool, punch_after_the_newest)
{
    static const unsigned NBLOCKS = 24, AFTER = 16;
    remapring_pool_params_t params;
    remapring_pool_t *pool;
    uint32_t blocks[NBLOCKS];
    struct stat st;

    remapring_pool_params_default(&params);
    params.block_size  = 64 * 1024;
    params.init_blocks  = NBLOCKS;
    params.punch_after  = AFTER;
    params.punch_age_ns = UINT64_MAX; /* the count alone */
    params.fold_pages   = 0; /* punching alone */
    ASSERT_EQ(UCS_OK, remapring_pool_create(&params, &pool));
    const unsigned ppb = pool->pages_per_block;

    for (unsigned i = 0; i < NBLOCKS; ++i) {
        ASSERT_EQ(UCS_OK, remapring_pool_block_get(pool, &blocks[i]));
        memset(remapring_pool_block_addr(pool, blocks[i]), 0x5a,
               params.block_size); /* every page resident */
        remapring_pool_block_hold(pool, blocks[i], 0, 64); /* page 0 */
    }
    ASSERT_EQ(0, fstat(pool->fd, &st));
    const off_t resident = st.st_blocks;

    for (unsigned i = 0; i < NBLOCKS; ++i) {
        remapring_pool_block_detach(pool, blocks[i]);
        unsigned punched = (i + 1 > AFTER) ? (i + 1 - AFTER) : 0;
        EXPECT_EQ((uint64_t)(i + 1 - punched) * ppb + punched,
                  pool->stats.held_pages) << "after " << (i + 1);
    }

    /* the 8 oldest gave back all but their held page */
    ASSERT_EQ(0, fstat(pool->fd, &st));
    EXPECT_EQ((off_t)(NBLOCKS - AFTER) * (ppb - 1) * (sysconf(_SC_PAGESIZE) / 512),
              resident - st.st_blocks);

    /* released: a punched one and a whole one go back to the pool */
    EXPECT_EQ(REMAPRING_POOL_UNHOLD_FREED,
              remapring_pool_block_unhold(pool, blocks[0], 0));
    EXPECT_EQ((uint64_t)AFTER * ppb + (NBLOCKS - AFTER - 1),
              pool->stats.held_pages);
    EXPECT_EQ(REMAPRING_POOL_UNHOLD_FREED,
              remapring_pool_block_unhold(pool, blocks[NBLOCKS - 1], 0));
    EXPECT_EQ((uint64_t)(AFTER - 1) * ppb + (NBLOCKS - AFTER - 1),
              pool->stats.held_pages);

    /* the next detach punches none: 15 wait whole */
    uint32_t again;
    ASSERT_EQ(UCS_OK, remapring_pool_block_get(pool, &again));
    remapring_pool_block_hold(pool, again, 0, 64);
    remapring_pool_block_detach(pool, again);
    EXPECT_EQ((uint64_t)AFTER * ppb + (NBLOCKS - AFTER - 1),
              pool->stats.held_pages);

    for (unsigned i = 1; i < NBLOCKS - 1; ++i) {
        remapring_pool_block_unhold(pool, blocks[i], 0);
    }
    remapring_pool_block_unhold(pool, again, 0);
    EXPECT_EQ(0u, pool->stats.held_pages);
    EXPECT_EQ(0u, pool->stats.ndetached);
    remapring_pool_destroy(pool);
}


/* How many detached blocks wait whole follows how long holds last: blocks
 * whose holds outlast punch_age_ns bring it down to none (a detached block
 * is punched at once), blocks released soon bring it back to punch_after */
TEST(test_ring_pool, punch_window_follows_holds)
{
    static const unsigned AFTER = 16, ROUNDS = 128;
    static const uint64_t HOUR  = 3600ull * 1000000000ull;
    remapring_pool_params_t params;
    remapring_pool_stats_t stats;
    remapring_pool_t *pool;
    uint32_t block;

    remapring_pool_params_default(&params);
    params.block_size   = 64 * 1024;
    params.init_blocks  = 4;
    params.punch_after  = AFTER;
    params.punch_age_ns = HOUR;
    params.fold_pages   = 0; /* punching alone */
    ASSERT_EQ(UCS_OK, remapring_pool_create(&params, &pool));
    const unsigned ppb = pool->pages_per_block;

    remapring_pool_get_stats(pool, &stats);
    EXPECT_EQ(AFTER, stats.punch_window); /* until blocks say otherwise */

    /* a block that waited whole for the age counts at once, and once */
    ASSERT_EQ(UCS_OK, remapring_pool_block_get(pool, &block));
    remapring_pool_block_hold(pool, block, 0, 64);
    remapring_pool_block_detach(pool, block);
    pool->punch_age_ns = 0; /* as if an hour went by */
    remapring_pool_punch_aged(pool);
    EXPECT_EQ(1u, pool->stats.held_pages);
    remapring_pool_get_stats(pool, &stats);
    EXPECT_EQ(AFTER - 1, stats.punch_window);
    const double after_one = stats.brief;
    EXPECT_LT(after_one, 1.0);
    pool->punch_age_ns = HOUR;
    remapring_pool_block_unhold(pool, block, 0);
    remapring_pool_get_stats(pool, &stats);
    EXPECT_EQ(after_one, stats.brief);

    /* holds that outlast the age: released, as if detached two hours ago */
    for (unsigned i = 0; i < ROUNDS; ++i) {
        ASSERT_EQ(UCS_OK, remapring_pool_block_get(pool, &block));
        remapring_pool_block_hold(pool, block, 0, 64);
        remapring_pool_block_detach(pool, block);
        pool->blocks[block].detached_ns -= 2 * HOUR;
        ASSERT_EQ(REMAPRING_POOL_UNHOLD_FREED,
                  remapring_pool_block_unhold(pool, block, 0));
    }
    remapring_pool_get_stats(pool, &stats);
    EXPECT_EQ(0u, stats.punch_window);
    EXPECT_LT(stats.brief, 0.05);

    /* so a detached block is punched at once: its held page stays */
    ASSERT_EQ(UCS_OK, remapring_pool_block_get(pool, &block));
    remapring_pool_block_hold(pool, block, 0, 64);
    remapring_pool_block_detach(pool, block);
    EXPECT_EQ(1u, pool->stats.held_pages);
    remapring_pool_block_unhold(pool, block, 0);

    /* holds released soon: the window grows back, step by step */
    unsigned last = 0;
    for (unsigned i = 0; i < ROUNDS; ++i) {
        ASSERT_EQ(UCS_OK, remapring_pool_block_get(pool, &block));
        remapring_pool_block_hold(pool, block, 0, 64);
        remapring_pool_block_detach(pool, block);
        remapring_pool_block_unhold(pool, block, 0);
        remapring_pool_get_stats(pool, &stats);
        EXPECT_GE(stats.punch_window, last);
        last = stats.punch_window;
    }
    EXPECT_EQ(AFTER, last);
    EXPECT_GT(stats.brief, 0.95);

    /* and a detached block waits whole again */
    ASSERT_EQ(UCS_OK, remapring_pool_block_get(pool, &block));
    remapring_pool_block_hold(pool, block, 0, 64);
    remapring_pool_block_detach(pool, block);
    EXPECT_EQ((uint64_t)ppb, pool->stats.held_pages);
    remapring_pool_block_unhold(pool, block, 0);
    EXPECT_EQ(0u, pool->stats.held_pages);
    remapring_pool_destroy(pool);
}

namespace {

/* Resident bytes of a memfd */
off_t fd_resident(int fd)
{
    struct stat st;

    return (fstat(fd, &st) == 0) ? st.st_blocks * 512 : -1;
}

/* Byte i of block pattern @a tag */
uint8_t block_byte(uint8_t tag, size_t i)
{
    return (uint8_t)(tag + i * 13 + (i >> 9));
}

void fill_block(void *addr, size_t size, uint8_t tag)
{
    for (size_t i = 0; i < size; ++i) {
        ((uint8_t *)addr)[i] = block_byte(tag, i);
    }
}

bool check_block(const void *addr, size_t start, size_t end, uint8_t tag)
{
    for (size_t i = start; i < end; ++i) {
        if (((const uint8_t *)addr)[i] != block_byte(tag, i)) {
            return false;
        }
    }
    return true;
}

/* A pool of 64 KiB blocks that punches and folds each block as it is
 * detached, or NULL */
remapring_pool_t *fold_test_pool(unsigned init_blocks, int fold_pages = -1)
{
    remapring_pool_params_t params;
    remapring_pool_t *pool;

    remapring_pool_params_default(&params);
    params.block_size  = 64 * 1024;
    params.init_blocks = init_blocks;
    params.punch_after = 0;
    if (fold_pages >= 0) {
        params.fold_pages = fold_pages;
    }
    return (remapring_pool_create(&params, &pool) == UCS_OK) ? pool : NULL;
}

/* Take a block of @a pool and fill it with pattern @a tag: its CPU-view
 * address, or NULL */
char *fold_test_block(remapring_pool_t *pool, uint32_t *block_p, uint8_t tag)
{
    char *addr;

    if (remapring_pool_block_get(pool, block_p) != UCS_OK) {
        return NULL;
    }

    addr = (char *)remapring_pool_block_addr(pool, *block_p);
    fill_block(addr, pool->block_size, tag);
    return addr;
}

} // namespace

/* Mask of the units of a page that a byte range uses */
TEST(test_ring_fold, mask)
{
    remapring_fold_t fold;

    ASSERT_EQ(UCS_OK, remapring_fold_init(&fold, "t", 12, 1, 0));
    EXPECT_EQ(UINT64_MAX, remapring_fold_mask(&fold, 0, 4096));
    EXPECT_EQ(UINT64_C(1), remapring_fold_mask(&fold, 0, 1));
    EXPECT_EQ(UINT64_C(1), remapring_fold_mask(&fold, 0, 64));
    EXPECT_EQ(UINT64_C(3), remapring_fold_mask(&fold, 0, 65));
    EXPECT_EQ(UINT64_C(1) << 63, remapring_fold_mask(&fold, 4032, 4096));
    EXPECT_EQ(UINT64_C(3) << 62, remapring_fold_mask(&fold, 4000, 4096));
    EXPECT_EQ(UINT64_C(0xffff0000), remapring_fold_mask(&fold, 1024, 2048));
    remapring_fold_cleanup(&fold);
}

/* Held records of two blocks that use parts of pages end up in one fold
 * page: their bytes stay where the upper layer holds them, and stores to
 * them land there; the pool memfd gives every page of both blocks back;
 * a freed block is mapped onto its own pages again */
TEST(test_ring_pool, fold_shares_a_page)
{
    remapring_pool_t *pool     = fold_test_pool(4);
    const size_t block         = 64 * 1024;
    uint32_t a, b;

    ASSERT_NE(nullptr, pool);
    const size_t page = sysconf(_SC_PAGESIZE);
    ASSERT_EQ(4096u, page) << "4 KiB pages assumed";

    char *addr_a = fold_test_block(pool, &a, 0xa0);
    char *addr_b = fold_test_block(pool, &b, 0xb0);
    ASSERT_TRUE((addr_a != nullptr) && (addr_b != nullptr));
    const off_t before = fd_resident(pool->fd);

    /* a: units 16-31 of page 0, and 60-63 of page 1 with 0-7 of page 2;
     * b: units 32-47 of page 0. No two overlap in a page */
    const size_t a1 = 1024, a1_end = 2048;
    const size_t a2 = 2 * page - 256, a2_end = 2 * page + 512;
    const size_t b1 = 2048, b1_end = 3072;
    remapring_pool_block_hold(pool, a, a1, a1_end);
    remapring_pool_block_hold(pool, a, a2, a2_end);
    remapring_pool_block_hold(pool, b, b1, b1_end);
    remapring_pool_block_detach(pool, a);
    remapring_pool_block_detach(pool, b);

    remapring_pool_stats_t ps;
    remapring_pool_get_stats(pool, &ps);
    EXPECT_EQ(4u, ps.nfolded);
    EXPECT_EQ(1u, ps.fold_pages);
    EXPECT_EQ(0u, ps.held_pages);
    EXPECT_EQ((off_t)(2 * block), before - fd_resident(pool->fd));
    EXPECT_EQ((off_t)page, fd_resident(pool->fold.fd));
    EXPECT_TRUE(check_block(addr_a, a1, a1_end, 0xa0));
    EXPECT_TRUE(check_block(addr_a, a2, a2_end, 0xa0));
    EXPECT_TRUE(check_block(addr_b, b1, b1_end, 0xb0));

    /* a store to a held record lands in the shared page */
    addr_a[a1 + 5] = 0x42;
    addr_b[b1 + 7] = 0x43;
    char shared[4096];
    ASSERT_EQ((ssize_t)page, pread(pool->fold.fd, shared, page, 0));
    EXPECT_EQ(0x42, shared[a1 + 5]);
    EXPECT_EQ(0x43, shared[b1 + 7]);
    EXPECT_EQ((char)block_byte(0xa0, a2 + 300), shared[(a2 + 300) % page]);

    /* b's last hold: b is free, and mapped onto its own pages again by the
     * receiver's periodic call, not by the release */
    EXPECT_EQ(REMAPRING_POOL_UNHOLD_FREED,
              remapring_pool_block_unhold(pool, b, b1));
    remapring_pool_get_stats(pool, &ps);
    EXPECT_EQ(3u, ps.nfolded);
    EXPECT_EQ(b, pool->unfold_head);
    remapring_pool_punch_aged(pool);
    EXPECT_EQ(REMAPRING_POOL_BLOCK_NONE, pool->unfold_head);
    memset(addr_b, 0x77, block);
    char own[4096];
    ASSERT_EQ((ssize_t)page, pread(pool->fd, own, page, (off_t)b * block));
    EXPECT_EQ(0x77, own[b1]);
    addr_a[a1 + 5] = (char)block_byte(0xa0, a1 + 5);
    EXPECT_TRUE(check_block(addr_a, a1, a1_end, 0xa0));

    /* a's: one page at a time; the fold page stays resident, for reuse */
    EXPECT_EQ(REMAPRING_POOL_UNHOLD_HELD,
              remapring_pool_block_unhold(pool, a, a2 + 10));
    remapring_pool_get_stats(pool, &ps);
    EXPECT_EQ(1u, ps.nfolded);
    EXPECT_TRUE(check_block(addr_a, a1, a1_end, 0xa0));
    EXPECT_EQ(REMAPRING_POOL_UNHOLD_FREED,
              remapring_pool_block_unhold(pool, a, a1));
    remapring_pool_get_stats(pool, &ps);
    EXPECT_EQ(0u, ps.nfolded);
    EXPECT_EQ(1u, ps.fold_pages);
    EXPECT_EQ(0u, ps.ndetached);
    EXPECT_EQ(4u, ps.nfree);

    /* a is taken last, once the free list is empty, and mapped back then */
    std::vector<uint32_t> taken(4);
    for (uint32_t &block_index : taken) {
        ASSERT_EQ(UCS_OK, remapring_pool_block_get(pool, &block_index));
    }
    EXPECT_EQ(a, taken.back());
    memset(addr_a, 0x66, block);
    ASSERT_EQ((ssize_t)page,
              pread(pool->fd, own, page, (off_t)a * block + page));
    EXPECT_EQ(0x66, own[0]);
    for (uint32_t block_index : taken) {
        remapring_pool_block_put(pool, block_index);
    }
    remapring_pool_destroy(pool);
}

/* A released record gives its units of a fold page back while others of
 * its page stay held: another page's record can use them */
TEST(test_ring_pool, fold_release_frees_units)
{
    remapring_pool_t *pool = fold_test_pool(2);
    remapring_pool_stats_t ps;
    uint32_t x, y;

    ASSERT_NE(nullptr, pool);
    ASSERT_EQ(4096, sysconf(_SC_PAGESIZE)) << "4 KiB pages assumed";
    char *addr_x = fold_test_block(pool, &x, 0x31);
    char *addr_y = fold_test_block(pool, &y, 0x32);
    ASSERT_TRUE((addr_x != nullptr) && (addr_y != nullptr));

    /* x: units 0-7 and 16-23 of page 0, folded together */
    remapring_pool_block_hold(pool, x, 0, 512);
    remapring_pool_block_hold(pool, x, 1024, 1536);
    remapring_pool_block_detach(pool, x);
    remapring_pool_get_stats(pool, &ps);
    EXPECT_EQ(1u, ps.nfolded);
    EXPECT_EQ(1u, ps.fold_pages);

    /* units 0-7 go back; y's record on units 4-7 takes them */
    EXPECT_EQ(REMAPRING_POOL_UNHOLD_HELD,
              remapring_pool_block_unhold(pool, x, 0));
    remapring_pool_block_hold(pool, y, 256, 512);
    remapring_pool_block_detach(pool, y);
    remapring_pool_get_stats(pool, &ps);
    EXPECT_EQ(2u, ps.nfolded);
    EXPECT_EQ(1u, ps.fold_pages);
    EXPECT_TRUE(check_block(addr_x, 1024, 1536, 0x31));
    EXPECT_TRUE(check_block(addr_y, 256, 512, 0x32));

    remapring_pool_block_unhold(pool, x, 1024);
    remapring_pool_block_unhold(pool, y, 256);
    remapring_pool_get_stats(pool, &ps);
    EXPECT_EQ(0u, ps.nfolded);
    EXPECT_EQ(2u, ps.nfree);
    remapring_pool_destroy(pool);
}

/* At most fold_pages pages are folded at a time; the others keep their
 * memfd pages, and every held byte stays as it was */
TEST(test_ring_pool, fold_limit)
{
    uint32_t block;

    for (unsigned limit : {0u, 1u}) {
        remapring_pool_t *pool = fold_test_pool(1, limit);
        ASSERT_NE(nullptr, pool);
        char *addr = fold_test_block(pool, &block, 0x11);
        ASSERT_NE(nullptr, addr);
        for (size_t r = 0; r < 4; ++r) {
            remapring_pool_block_hold(pool, block, 8192 * r + 128,
                                      8192 * r + 640);
        }
        remapring_pool_block_detach(pool, block);

        remapring_pool_stats_t ps;
        remapring_pool_get_stats(pool, &ps);
        EXPECT_EQ(limit, ps.nfolded);
        EXPECT_EQ(4u - limit, ps.held_pages);
        EXPECT_EQ(limit, ps.fold_pages);
        EXPECT_EQ((limit > 0) ? (off_t)4096 : -1, fd_resident(pool->fold.fd));
        for (size_t r = 0; r < 4; ++r) {
            EXPECT_TRUE(check_block(addr, 8192 * r + 128, 8192 * r + 640, 0x11))
                    << "limit " << limit << " " << r;
            remapring_pool_block_unhold(pool, block, 8192 * r + 128);
        }
        remapring_pool_get_stats(pool, &ps);
        EXPECT_EQ(0u, ps.nfolded);
        EXPECT_EQ(1u, ps.nfree);
        remapring_pool_destroy(pool);
    }
}

/* Another thread stores into a held record while the pool folds its page:
 * no store is lost, whether it reached the old page or the fold page (those
 * that reached the old page after the copy are carried over) */
TEST(test_ring_pool, fold_racing_stores)
{
    static const unsigned TRIALS = 200, WORDS = 384; /* 3 KiB */
    static const uint64_t MAGIC = UINT64_C(0x5eed000000000000);
    uint64_t merged             = 0;
    uint32_t block;

#if defined(__SANITIZE_THREAD__)
    GTEST_SKIP() << "the stores race with the fold's copy on purpose: that "
                    "race is what is tested, and ThreadSanitizer reports it";
#endif

    remapring_pool_t *pool = fold_test_pool(2);
    ASSERT_NE(nullptr, pool);

    for (unsigned trial = 0; trial < TRIALS; ++trial) {
        ASSERT_EQ(UCS_OK, remapring_pool_block_get(pool, &block));
        char *addr = (char *)remapring_pool_block_addr(pool, block);
        memset(addr, 0, 64 * 1024);
        /* page 0, units 8-55 */
        volatile uint64_t *words = (volatile uint64_t *)(addr + 512);
        remapring_pool_block_hold(pool, block, 512,
                                  512 + WORDS * sizeof(uint64_t));

        std::atomic<bool> ready{false}, go{false};
        std::thread writer([&]() {
            ready.store(true, std::memory_order_release);
            while (!go.load(std::memory_order_acquire)) {
            }
            for (unsigned i = 0; i < WORDS; ++i) {
                words[i] = MAGIC + i;
                for (volatile unsigned spin = 0; spin < 100; ++spin) {
                }
            }
        });

        while (!ready.load(std::memory_order_acquire)) {
        }
        go.store(true, std::memory_order_release);
        remapring_pool_block_detach(pool, block); /* folds page 0 */
        writer.join();

        unsigned lost = 0;
        for (unsigned i = 0; i < WORDS; ++i) {
            lost += (words[i] != MAGIC + i);
        }
        ASSERT_EQ(0u, lost) << "trial " << trial;
        remapring_pool_stats_t ps;
        remapring_pool_get_stats(pool, &ps);
        ASSERT_EQ(1u, ps.nfolded) << "trial " << trial;
        merged = ps.nfold_merged;
        EXPECT_EQ(REMAPRING_POOL_UNHOLD_FREED,
                  remapring_pool_block_unhold(pool, block, 512));
    }

    printf("[          ] %u folds under stores, %lu words carried over\n",
           TRIALS, (unsigned long)merged);
    remapring_pool_destroy(pool);
}

/* Records of every size, a third of them held and released at random while
 * the ring runs on, blocks punched and folded as they leave their slots:
 * every held record keeps its bytes, and once all are released nothing
 * stays folded */
TEST_F(test_ring, fold_random_holds)
{
    config cfg;
    cfg.block_size  = 16 * 1024;
    cfg.nslots      = 8;
    cfg.punch_after = 0;
    init(cfg);
    std::uniform_int_distribution<size_t> size_dist(1, 5000);
    std::uniform_int_distribution<unsigned> pct(0, 99);

    for (unsigned n = 0; n < 20000; ++n) {
        if (send(size_dist(m_rng)) != UCS_OK) {
            drain([&](uint64_t) { return pct(m_rng) < 33; });
            while (m_held.size() > 200) {
                release(m_rng() % m_held.size());
            }
        }
    }
    drain();

    remapring_pool_stats_t ps = pool_stats();
    EXPECT_GT(ps.nfolds, 100u);
    EXPECT_GT(ps.nfolded, 0u);
    release_all_shuffled();
    ps = pool_stats();
    EXPECT_EQ(0u, ps.nfolded);
    EXPECT_EQ(0u, ps.ndetached);
    EXPECT_GT(ps.fold_pages, (uint64_t)REMAPRING_FOLD_KEEP);
    remapring_pool_punch_aged(m_pool); /* as a receiver now and then */
    ps = pool_stats();
    EXPECT_EQ((uint64_t)REMAPRING_FOLD_KEEP, ps.fold_pages);
    EXPECT_EQ((off_t)REMAPRING_FOLD_KEEP * sysconf(_SC_PAGESIZE),
              fd_resident(m_pool->fold.fd));

    /* the blocks back under the slots carry records as before */
    for (unsigned n = 0; n < 2000; ++n) {
        if (send(size_dist(m_rng)) != UCS_OK) {
            drain();
        }
    }
    drain();
    EXPECT_EQ(m_send_seq, m_recv_seq);
}

TEST_F(test_ring, pool_grows_to_max)
{
    config cfg;
    cfg.init_blocks = 4;
    cfg.grow_blocks = 3;
    cfg.max_blocks  = 13;
    init(cfg);

    /* hold everything until the pool is spent and the writer stopped */
    for (unsigned lap = 0; lap < 100; ++lap) {
        while (send(1000) == UCS_OK) {
        }
        if (drain([](uint64_t) { return true; }) == 0) {
            break;
        }
    }
    remapring_pool_stats_t ps = pool_stats();
    EXPECT_EQ(13u, ps.nblocks);
    EXPECT_EQ(0u, ps.nfree);
    EXPECT_TRUE(m_ring->waiting);
    EXPECT_EQ(4u, ps.ngrows); /* made 4, then 7, 10, 13 */
    release_all_shuffled();
}

TEST_F(test_ring, pool_exhaustion_and_recovery)
{
    config cfg;
    cfg.nslots      = 4;
    cfg.init_blocks = 6;
    cfg.grow_blocks = 1;
    cfg.max_blocks  = 6;
    init(cfg);
    auto hold_all = [](uint64_t) { return true; };

    /* hold everything until the writer is stopped for good */
    unsigned refused = 0;
    for (unsigned n = 0; (n < 10000) && (refused < 100); ++n) {
        if (send(900) == UCS_OK) {
            refused = 0;
        } else {
            ++refused;
            drain(hold_all);
        }
    }
    ASSERT_EQ(100u, refused);
    drain(hold_all);
    EXPECT_GT(ring_stats().nwaits, 0u);
    EXPECT_TRUE(m_ring->waiting);
    EXPECT_EQ(0u, pool_stats().nfree);
    EXPECT_EQ(UCS_ERR_NO_RESOURCE, send(900));

    /* nothing held was overwritten while the writer was pushing */
    for (const held_rec &h : m_held) {
        check_held(h);
    }

    /* release in random order; the writer gets going again */
    std::shuffle(m_held.begin(), m_held.end(), m_rng);
    for (unsigned iter = 0; (iter < 500) && !m_held.empty(); ++iter) {
        release(m_held.size() - 1);
        while (send(900) == UCS_OK) {
        }
        drain([](uint64_t seq) { return (seq % 2) == 0; });
        for (const held_rec &h : m_held) {
            check_held(h);
        }
    }
    release_all_shuffled();
    EXPECT_FALSE(m_ring->waiting);

    for (unsigned n = 0; n < 2000; ++n) {
        while (send(900) != UCS_OK) {
            drain();
        }
    }
    drain();
    EXPECT_EQ(m_send_seq, m_recv_seq);
    EXPECT_EQ(0u, pool_stats().nheld_blocks);
}

TEST_F(test_ring, waiting_ring_credited_by_own_block)
{
    config cfg;
    cfg.nslots      = 2;
    cfg.init_blocks = 2;
    cfg.grow_blocks = 1;
    cfg.max_blocks  = 2;
    init(cfg);

    /* one held record in slot 0, pool has no spare block */
    ASSERT_EQ(UCS_OK, send(capacity()));
    ASSERT_TRUE(recv(true));
    EXPECT_TRUE(m_ring->waiting);
    ASSERT_EQ(UCS_OK, send(capacity()));
    EXPECT_EQ(UCS_ERR_NO_RESOURCE, send(capacity()));
    ASSERT_TRUE(recv(false));

    /* releasing it lets slot 0 be reused in place */
    release(0);
    EXPECT_FALSE(m_ring->waiting);
    EXPECT_EQ(0u, ring_stats().nremaps);
    EXPECT_EQ(UCS_OK, send(capacity()));
    EXPECT_TRUE(recv(false));
}

TEST_F(test_ring, recycled_block_stale_records)
{
    config cfg;
    cfg.nslots = 2;
    init(cfg);

    /* two laps of small records: both blocks full of valid-looking headers */
    while (m_writer.tail < 2 * m_ring->window_size) {
        if (send(100) != UCS_OK) {
            drain();
        }
    }
    drain();
    EXPECT_EQ(m_send_seq, m_recv_seq);
    EXPECT_EQ(0u, ring_stats().nremaps);

    /* a few new records; behind them the block still holds the old lap's */
    for (unsigned i = 0; i < 3; ++i) {
        ASSERT_EQ(UCS_OK, send(100));
    }
    EXPECT_EQ(3u, drain());
    EXPECT_FALSE(recv(false));

    remapring_ring_hdr_t old;
    memcpy(&old,
           (char *)remapring_pool_block_addr(m_pool, m_ring->slots[0]) +
                   (m_writer.tail & (cfg.block_size - 1)),
           sizeof(old));
    EXPECT_EQ(REMAPRING_RING_REC_DATA, old.type);
    EXPECT_EQ(m_writer.tail - m_ring->window_size, old.stamp ^ m_ring->nonce);

    /* a tail published past them (a torn or lying write) must not make
     * them records */
    remapring_ring_ctl_store_tail(m_ctl, m_writer.tail + 128);
    expect_rejected();
}

TEST_F(test_ring, bad_wrong_stamp)
{
    init(config());
    ASSERT_EQ(UCS_OK, send(10));
    EXPECT_TRUE(recv(false));
    forge(m_writer.tail + 64, 10, REMAPRING_RING_REC_DATA, 128);
    expect_rejected();
}

TEST_F(test_ring, bad_length_past_slot)
{
    init(config());
    forge(0, (uint32_t)capacity() + 1, REMAPRING_RING_REC_DATA,
          m_cfg.block_size);
    expect_rejected();
}

TEST_F(test_ring, bad_length_huge)
{
    init(config());
    forge(0, UINT32_MAX, REMAPRING_RING_REC_DATA, 64);
    expect_rejected();
}

TEST_F(test_ring, bad_length_past_tail)
{
    init(config());
    forge(0, 1000, REMAPRING_RING_REC_DATA, 128);
    expect_rejected();
}

TEST_F(test_ring, bad_type)
{
    init(config());
    forge(0, 10, 0x42, 128);
    expect_rejected();
}

TEST_F(test_ring, bad_pad_length)
{
    init(config());
    forge(0, 128, REMAPRING_RING_REC_PAD, 256);
    expect_rejected();
}

TEST_F(test_ring, bad_tail_unaligned)
{
    init(config());
    ASSERT_EQ(UCS_OK, send(10));
    remapring_ring_ctl_store_tail(m_ctl, m_writer.tail + 1);
    expect_rejected();
}

TEST_F(test_ring, bad_tail_past_credit)
{
    init(config());
    remapring_ring_ctl_store_tail(m_ctl, m_ring->window_size + 64);
    expect_rejected();
}

TEST_F(test_ring, bad_release)
{
    init(config());
    int x;
    ASSERT_EQ(UCS_OK, send(10));
    remapring_ring_rx_t rx;
    ASSERT_EQ(UCS_OK, remapring_ring_poll(m_ring, &rx));
    remapring_ring_consume(m_ring, &rx, 0);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              remapring_ring_release(m_pool, rx.payload));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, remapring_ring_release(m_pool, &x));
}

TEST_F(test_ring, credit_batches)
{
    config cfg;
    cfg.nslots       = 8;
    cfg.credit_batch = 3;
    init(cfg);
    uint64_t B = cfg.block_size;

    /* 5 slots of records, then read them with the writer still ahead */
    while (m_writer.tail < 6 * B) {
        ASSERT_EQ(UCS_OK, send(capacity() / 2 - 64));
    }
    uint64_t prev = 0;
    std::vector<uint64_t> published;
    while (recv(false)) {
        uint64_t r = remapring_ring_ctl_load_limit(m_ctl) - m_ring->window_size;
        if (r != prev) {
            published.push_back(r);
            prev = r;
        }
    }
    /* batches of 3 slots while behind, the rest once caught up */
    ASSERT_GE(published.size(), 2u);
    EXPECT_EQ(3 * B, published[0]);
    EXPECT_EQ(m_ring->head & ~(B - 1), published.back());
    EXPECT_EQ(published.size(), ring_stats().ncredits);
}

TEST_F(test_ring, destroy_with_holds)
{
    init(config());
    ASSERT_EQ(UCS_OK, send(10));
    ASSERT_EQ(UCS_OK, send(20));
    ASSERT_TRUE(recv(true));
    ASSERT_TRUE(recv(true));
    unsigned nblocks = pool_stats().nblocks;

    remapring_wire_destroy(m_wire);
    m_wire = NULL;
    remapring_ring_destroy(m_ring);
    m_ring = NULL;
    EXPECT_EQ(1u, pool_stats().ndetached);
    EXPECT_EQ(nblocks - 1, pool_stats().nfree);
    check_held(m_held[0]);
    release_all_shuffled();
    EXPECT_EQ(nblocks, pool_stats().nfree);
}

/* Writer and reader in two threads for a fixed time, records of every
 * size, every 7th held; with the stamp commit the reader polls the writer's
 * stores as they land */
/* Backed slots (blocks under the ring's slots) */
static unsigned backed_slots(const remapring_ring_t *ring)
{
    unsigned i, n = 0;

    for (i = 0; i < ring->nslots; ++i) {
        n += (ring->slots[i] != REMAPRING_POOL_BLOCK_NONE);
    }
    return n;
}

/* A burst until the writer holds the whole window, then drained */
static void burst(test_ring *t, std::function<ucs_status_t(size_t)> send,
                  std::function<unsigned()> drain, size_t length,
                  unsigned count)
{
    for (unsigned n = 0; n < count; ++n) {
        while (send(length) == UCS_ERR_NO_RESOURCE) {
            drain();
        }
    }
    drain();
}

class test_ring_reclaim : public test_ring {
protected:
    void init_reclaim()
    {
        config cfg;
        cfg.nslots     = 8;
        cfg.max_blocks = 64;
        cfg.shm        = true;
        cfg.commit     = REMAPRING_RING_COMMIT_STAMP;
        cfg.grant_min  = 1;
        cfg.reclaim    = true;
        init(cfg);
    }

    void burst_to_full_window()
    {
        burst(this, [this](size_t l) { return send(l); },
              [this]() { return drain(); }, 3000, 200);
        ASSERT_EQ(m_cfg.nslots, backed_slots(m_ring));
        ASSERT_EQ(m_ring->window_size, m_ring->grant);
    }

    /* What a quiet ring keeps: its quiet grant (one slot here) from the
     * credited one */
    unsigned quiet_slots() const
    {
        return 1;
    }

    uint64_t quiet_limit() const
    {
        return m_ring->credited + quiet_slots() * m_cfg.block_size;
    }
};


/* A quiet ring asks for all but its quiet grant back; the writer answers,
 * the reader takes them back, and traffic goes on, growing the grant again */
TEST_F(test_ring_reclaim, quiet_ring_gives_back)
{
    init_reclaim();
    burst_to_full_window();
    unsigned free_before = pool_stats().nfree;

    remapring_ring_idle(m_ring);
    EXPECT_EQ(1u, ring_stats().nreclaims);
    EXPECT_EQ(quiet_limit(), m_ctl->limit) << "the lowered limit";
    EXPECT_EQ(m_cfg.nslots, backed_slots(m_ring)) << "taken before an answer";

    /* no answer yet: the slots stay */
    EXPECT_FALSE(recv(false));
    EXPECT_EQ(m_cfg.nslots, backed_slots(m_ring));

    EXPECT_EQ(1, remapring_ring_writer_yield(&m_writer));
    EXPECT_EQ(0, remapring_ring_writer_yield(&m_writer)) << "answered";
    EXPECT_EQ(quiet_limit(), m_writer.limit);
    EXPECT_FALSE(recv(false));
    EXPECT_EQ(quiet_slots(), backed_slots(m_ring));
    EXPECT_EQ(m_cfg.nslots - quiet_slots(), ring_stats().nreclaimed);
    EXPECT_EQ(free_before + m_cfg.nslots - quiet_slots(), pool_stats().nfree);
    for (unsigned i = 0; i < m_cfg.nslots; ++i) {
        EXPECT_EQ(m_ring->slots[i], m_shared_slots[i]) << "slot " << i;
    }

    /* a second idle finds nothing to take */
    remapring_ring_idle(m_ring);
    EXPECT_EQ(1u, ring_stats().nreclaims);

    /* traffic again, every record whole */
    burst_to_full_window();
    EXPECT_EQ(m_send_seq, m_recv_seq);
}

/* A grant of one slot that cannot grow (the pool has less than two windows
 * free): a record that needs the next slot goes out of credit, and the
 * writer writes the PAD to the slot's end alone, so that the reader's head
 * leaves the slot and the reader credits the next one. Without that PAD the
 * reader waited for the head to leave and the writer for credit, forever
 * (UCX_REMAPRING_IDLE_SLOTS=1 under MPI held that way) */
TEST_F(test_ring, one_slot_grant_pads_out)
{
    config cfg;
    cfg.nslots      = 8;
    cfg.init_blocks = 8;
    cfg.max_blocks  = 10;
    cfg.shm         = true;
    cfg.commit      = REMAPRING_RING_COMMIT_STAMP;
    cfg.grant_min   = 1;
    init(cfg);

    size_t big = capacity() * 3 / 5;
    for (int i = 0; i < 20; ++i) {
        ucs_status_t status = send(big);
        if (status == UCS_ERR_NO_RESOURCE) {
            ASSERT_EQ(0u, m_writer.tail & (cfg.block_size - 1))
                    << "the PAD went alone, lap " << i;
            drain();
            status = send(big);
        }
        ASSERT_EQ(UCS_OK, status) << "lap " << i;
    }
    drain();
    EXPECT_EQ(m_send_seq, m_recv_seq);
    EXPECT_GT(m_writer.stats.npads, 0u);
}

/* A quiet ring keeps one slot: a record larger than what is left of it
 * below the bound is refused for credit and counted as a stall, and the
 * reader's next look at the empty ring grows the grant: the record goes */
TEST_F(test_ring_reclaim, record_past_the_quiet_grant)
{
    init_reclaim();
    burst_to_full_window();
    remapring_ring_idle(m_ring);
    EXPECT_FALSE(recv(false)); /* sees the burst's stalls */
    EXPECT_EQ(1, remapring_ring_writer_yield(&m_writer));
    EXPECT_FALSE(recv(false));
    ASSERT_EQ(quiet_slots(), backed_slots(m_ring));

    size_t left = m_writer.limit - m_writer.tail;
    size_t big  = remapring_ring_writer_max_payload(&m_writer);
    ASSERT_GT(big + 64, left) << "the test needs a record past the bound";
    uint64_t stalls = m_ctl->stalls;
    EXPECT_EQ(UCS_ERR_NO_RESOURCE, send(big));
    EXPECT_GT(m_ctl->stalls, stalls) << "counted as a stall";

    remapring_ring_flush_credits(m_ring);
    EXPECT_GT(backed_slots(m_ring), quiet_slots());
    ASSERT_EQ(UCS_OK, send(big));
    drain();
    EXPECT_EQ(m_send_seq, m_recv_seq);
}

/* The writer wrote past the lowered limit (with the credit it had) before
 * it answered: it keeps to its tail, and nothing it wrote is lost */
TEST_F(test_ring_reclaim, writer_past_the_request)
{
    init_reclaim();
    burst_to_full_window();
    /* the writer loaded the whole limit just before the request */
    m_writer.limit = remapring_wire_limit(m_wire);
    remapring_ring_idle(m_ring);
    uint64_t to = m_ctl->limit;

    /* the writer has not reloaded the limit: it writes on */
    while (m_writer.tail < to + m_cfg.block_size + 1000) {
        ASSERT_EQ(UCS_OK, send(900));
    }
    EXPECT_EQ(1, remapring_ring_writer_yield(&m_writer));
    EXPECT_EQ(m_writer.tail, m_writer.limit);
    EXPECT_EQ(m_writer.tail, m_ctl->bound);
    EXPECT_EQ(UCS_ERR_NO_RESOURCE, send(900)) << "kept to its tail";

    drain();
    EXPECT_EQ(m_send_seq, m_recv_seq);
    EXPECT_GT(ring_stats().nreclaimed, 0u);
    /* the quiet grant stays past the credited slot, and is published */
    EXPECT_EQ(quiet_limit(), m_ring->backed);
    EXPECT_EQ(m_ring->backed, m_ctl->limit);
    burst_to_full_window();
    EXPECT_EQ(m_send_seq, m_recv_seq);
}

/* Credit published while a request is open cancels it: a late answer to it
 * is ignored, and the next request is answered on its own */
TEST_F(test_ring_reclaim, publish_cancels_the_request)
{
    init_reclaim();
    burst_to_full_window();
    m_writer.limit = remapring_wire_limit(m_wire);
    remapring_ring_idle(m_ring);

    /* the writer goes on without reloading; the reader credits past it */
    while (m_writer.tail < m_ring->limit - 2000) {
        ASSERT_EQ(UCS_OK, send(900));
    }
    drain();
    EXPECT_FALSE(m_ring->reclaim_open);
    uint64_t limit = m_ctl->limit;
    EXPECT_GT(limit, m_ring->reclaim_to);

    /* the late answer: the writer takes the new limit as its bound */
    EXPECT_EQ(1, remapring_ring_writer_yield(&m_writer));
    EXPECT_EQ(limit, m_writer.limit);
    EXPECT_FALSE(recv(false));
    EXPECT_EQ(0u, ring_stats().nreclaimed);

    /* past a slot the ring already shrank to its quiet grant as the head
     * moved on; after a new burst, a new request is answered */
    burst_to_full_window();
    remapring_ring_idle(m_ring);
    EXPECT_EQ(2u, ring_stats().nreclaims);
    EXPECT_EQ(1, remapring_ring_writer_yield(&m_writer));
    EXPECT_FALSE(recv(false));
    EXPECT_GT(ring_stats().nreclaimed, 0u);
    burst_to_full_window();
    EXPECT_EQ(m_send_seq, m_recv_seq);
}

/* An answer below what was asked, below the head, or past the limit fails
 * the ring, logged once */
TEST_F(test_ring_reclaim, bad_answer)
{
    for (int which = 0; which < 3; ++which) {
        init_reclaim();
        burst_to_full_window();
        m_writer.limit = remapring_wire_limit(m_wire);
        remapring_ring_idle(m_ring);
        if (which == 2) {
            /* the head moves past what was asked */
            while (m_writer.tail < m_ring->reclaim_to + 1000) {
                ASSERT_EQ(UCS_OK, send(900));
            }
            drain();
        }
        m_ctl->bound   = (which == 0) ? m_ring->reclaim_to - 64 :
                         (which == 1) ? m_ring->limit + m_cfg.block_size :
                                        m_ring->reclaim_to;
        m_ctl->yielded = m_ctl->reclaim;
        remapring_ring_rx_t rx;
        ring_log_errors = 0;
        ucs_log_push_handler(ring_count_errors);
        EXPECT_EQ(UCS_ERR_IO_ERROR, remapring_ring_poll(m_ring, &rx));
        EXPECT_EQ(UCS_ERR_IO_ERROR, remapring_ring_poll(m_ring, &rx));
        ucs_log_pop_handler();
        EXPECT_EQ(1u, ring_log_errors) << "one line, once";
    }
}

class test_ring_threads : public test_ring,
                          public testing::WithParamInterface<int> {
};

TEST_P(test_ring_threads, two_threads)
{
    /* 3: the reader sleeps when the writer pauses and asks for its slots
     * back; the writer answers while paused, or when it next runs out */
    const bool reclaim = (GetParam() == 3);
    config cfg;
    cfg.nslots       = 8;
    cfg.credit_batch = 2;
    cfg.max_blocks   = 64;
    cfg.shm          = (GetParam() >= 2);
    if (reclaim) {
        cfg.grant_min = 1;
        cfg.reclaim   = true;
    }
    if (GetParam() > 0) {
        cfg.commit     = REMAPRING_RING_COMMIT_STAMP;
        cfg.inline_max = 256;
    }
    init(cfg);
    const auto duration = std::chrono::milliseconds(1500);
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> nsent{0};
    remapring_ring_writer_t *writer     = &m_writer;
    size_t cap                          = capacity();

    std::thread wr([&]() {
        std::mt19937_64 rng(7);
        std::vector<uint8_t> buf(cap);
        uint64_t seq  = 0;
        size_t length = 0;
        bool fresh    = true;

        while (!stop.load(std::memory_order_relaxed)) {
            if (fresh) {
                length = (rng() % 4 == 0) ? rng() % (cap + 1) : rng() % 512;
                fill_payload(buf.data(), length, seq);
                fresh = false;
            }
            struct iovec iov = {buf.data(), length};
            remapring_ring_direct_t d;
            if (remapring_ring_writer_direct_begin(writer, length, &d)) {
                /* the direct way (shm wire), as the AM sends take it */
                memcpy(d.payload, buf.data(), length);
                remapring_ring_writer_direct_commit(writer, &d, (uint8_t)seq,
                                                    length);
                ++seq;
                fresh = true;
                nsent.store(seq, std::memory_order_relaxed);
            } else if (remapring_ring_writer_send(writer, (uint8_t)seq, 0, &iov,
                                                  1) == UCS_OK) {
                ++seq;
                fresh = true;
                nsent.store(seq, std::memory_order_relaxed);
            } else {
                sched_yield();
            }
            if (reclaim && (rng() % 64 == 0)) {
                /* a pause, answering requests now and then */
                for (unsigned i = rng() % 64; i > 0; --i) {
                    if (rng() % 2) {
                        remapring_ring_writer_yield(writer);
                    }
                    sched_yield();
                }
            }
        }
    });

    auto start   = std::chrono::steady_clock::now();
    uint64_t seq = 0, bytes = 0, errors = 0;
    std::deque<held_rec> held;
    std::mt19937_64 rng(11);
    remapring_ring_rx_t rx;
    unsigned empty_polls = 0;

    while (true) {
        /* a fixed duration, but enough records even when the threads
         * share one CPU (valgrind) */
        auto elapsed = std::chrono::steady_clock::now() - start;
        bool done    = ((elapsed > duration) && (seq >= 5000)) ||
                    (elapsed > 20 * duration);
        if (done && !stop) {
            stop = true;
            wr.join();
        }
        ucs_status_t status = remapring_ring_poll(m_ring, &rx);
        if (status == UCS_ERR_NO_PROGRESS) {
            if (stop && (seq == nsent.load())) {
                break;
            }
            if (reclaim && (++empty_polls % 16 == 0)) {
                remapring_ring_idle(m_ring); /* the ring sleeps */
            }
            sched_yield();
            continue;
        }
        ASSERT_EQ(UCS_OK, status);
        empty_polls = 0;
        errors += (rx.am_id != (uint8_t)seq) ||
                  !check_payload(rx.payload, rx.length, seq);
        bytes += rx.length;
        bool hold = (seq % 7) == 0;
        if (hold) {
            held.push_back({rx.payload, rx.length, seq});
        }
        remapring_ring_consume(m_ring, &rx, hold);
        ++seq;
        if (held.size() > 32) {
            size_t i = rng() % held.size();
            errors += !check_payload(held[i].payload, held[i].length,
                                     held[i].seq);
            ASSERT_EQ(UCS_OK, remapring_ring_release(m_pool, held[i].payload));
            held.erase(held.begin() + i);
        }
    }

    for (const held_rec &h : held) {
        errors += !check_payload(h.payload, h.length, h.seq);
        remapring_ring_release(m_pool, h.payload);
    }
    EXPECT_EQ(0u, errors);
    EXPECT_EQ(nsent.load(), seq);
    printf("[          ] %lu records, %lu MB, %lu remaps, %lu reuses, "
           "%lu writer refusals, %lu reclaims (%lu slots back, %lu answers)"
           "\n",
           seq, bytes >> 20, ring_stats().nremaps, ring_stats().nreuse,
           m_writer.stats.nno_resource, ring_stats().nreclaims,
           ring_stats().nreclaimed, m_writer.stats.nyields);
    EXPECT_GT(ring_stats().nremaps, 0u);
    if (reclaim) {
        EXPECT_GT(ring_stats().nreclaimed, 0u);
    }
}

static std::string commit_name(const testing::TestParamInfo<int> &info)
{
    static const char *names[] = {"tail", "stamp", "stamp_shm",
                                  "stamp_shm_reclaim"};

    return names[info.param];
}

INSTANTIATE_TEST_SUITE_P(commit, test_ring_threads,
                         testing::Values(0, 1, 2, 3), commit_name);


/* Writer in a child process, writing through the cma wire into the parent's
 * ring view while the parent holds records and remaps under them */
TEST_F(test_ring, fork_cma_writer)
{
    config cfg;
    cfg.nslots       = 8;
    cfg.credit_batch = 2;
    cfg.max_blocks   = 64;
    init(cfg);
    const uint64_t count = 30000;
    remapring_ring_info_t info;
    remapring_ring_get_info(m_ring, &info);
    pid_t parent = getpid();

    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        remapring_wire_t *wire;
        remapring_ring_writer_t writer;
        std::vector<uint8_t> buf(capacity());
        uint64_t seq = 0;

        if ((remapring_wire_cma_create(parent, info.view_addr,
                                       (size_t)info.block_size * info.nslots,
                                       m_ctl, &wire) != UCS_OK) ||
            (remapring_ring_writer_init(&writer, &info, wire) != UCS_OK)) {
            _exit(2);
        }
        while (seq < count) {
            size_t length = (seq * 2654435761u) % (capacity() + 1);
            if (seq % 3) {
                length %= 700;
            }
            fill_payload(buf.data(), length, seq);
            struct iovec iov    = {buf.data(), length};
            ucs_status_t status = remapring_ring_writer_send(&writer,
                                                             (uint8_t)seq, 0,
                                                             &iov, 1);
            if (status == UCS_OK) {
                ++seq;
            } else if (status == UCS_ERR_NO_RESOURCE) {
                sched_yield();
            } else if (status == UCS_ERR_UNSUPPORTED) {
                _exit(77);
            } else {
                _exit(3);
            }
        }
        _exit(0);
    }

    uint64_t seq = 0, errors = 0;
    std::deque<held_rec> held;
    std::mt19937_64 rng(3);
    remapring_ring_rx_t rx;
    int wstatus = 0;
    bool exited = false;
    auto start  = std::chrono::steady_clock::now();

    while (seq < count) {
        ucs_status_t status = remapring_ring_poll(m_ring, &rx);
        if (status == UCS_ERR_NO_PROGRESS) {
            if (!exited && (waitpid(pid, &wstatus, WNOHANG) == pid)) {
                exited = true;
            }
            if (exited &&
                (remapring_ring_ctl_load_tail(m_ctl) == m_ring->head)) {
                break;
            }
            if (std::chrono::steady_clock::now() - start >
                std::chrono::seconds(60)) {
                kill(pid, SIGKILL);
                FAIL() << "timeout at seq " << seq;
            }
            continue;
        }
        ASSERT_EQ(UCS_OK, status);
        errors += (rx.am_id != (uint8_t)seq) ||
                  !check_payload(rx.payload, rx.length, seq);
        bool hold = (seq % 5) == 0;
        if (hold) {
            held.push_back({rx.payload, rx.length, seq});
        }
        remapring_ring_consume(m_ring, &rx, hold);
        ++seq;
        if (held.size() > 48) {
            size_t i = rng() % held.size();
            errors += !check_payload(held[i].payload, held[i].length,
                                     held[i].seq);
            remapring_ring_release(m_pool, held[i].payload);
            held.erase(held.begin() + i);
        }
    }
    if (!exited) {
        waitpid(pid, &wstatus, 0);
    }
    for (const held_rec &h : held) {
        errors += !check_payload(h.payload, h.length, h.seq);
        remapring_ring_release(m_pool, h.payload);
    }

    ASSERT_TRUE(WIFEXITED(wstatus));
    if (WEXITSTATUS(wstatus) == 77) {
        GTEST_SKIP() << "process_vm_writev is not permitted here";
    }
    EXPECT_EQ(0, WEXITSTATUS(wstatus));
    EXPECT_EQ(count, seq);
    EXPECT_EQ(0u, errors);
    EXPECT_GT(ring_stats().nremaps, 0u);
}


TEST(test_ring_wire_cma, errors)
{
    alignas(64) remapring_ring_ctl_t ctl;
    remapring_wire_t *wire;
    char src[64]                 = {0};
    remapring_wire_seg_t seg     = {0, src, sizeof(src)};

    memset(&ctl, 0, sizeof(ctl));

    /* a hole in our own address space: EFAULT */
    void *hole = mmap(NULL, 65536, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                      0);
    ASSERT_NE(MAP_FAILED, hole);
    ASSERT_EQ(UCS_OK, remapring_wire_cma_create(getpid(), (uintptr_t)hole,
                                                65536, &ctl, &wire));
    ucs_status_t status = remapring_wire_write(wire, &seg, 1);
    remapring_wire_destroy(wire);
    munmap(hole, 65536);
    if (status == UCS_ERR_UNSUPPORTED) {
        GTEST_SKIP() << "process_vm_writev is not permitted here";
    }
    EXPECT_EQ(UCS_ERR_INVALID_ADDR, status);

    /* a reaped child: ESRCH */
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        _exit(0);
    }
    ASSERT_EQ(pid, waitpid(pid, NULL, 0));
    ASSERT_EQ(UCS_OK, remapring_wire_cma_create(pid, (uintptr_t)src, 65536,
                                                &ctl, &wire));
    EXPECT_EQ(UCS_ERR_CONNECTION_RESET, remapring_wire_write(wire, &seg, 1));
    remapring_wire_destroy(wire);
}


/* Copies: classes by elements to a page, 16-byte multiples */
TEST(test_ring_copy, classes)
{
    remapring_copies_t copies;

    ASSERT_EQ(4096, sysconf(_SC_PAGESIZE)) << "4 KiB pages assumed";
    ASSERT_EQ(UCS_OK, remapring_copy_init(&copies, "t", 1 << 20));
    EXPECT_EQ(0u, remapring_copy_class(&copies, 0));
    EXPECT_EQ(256u, remapring_copy_class(&copies, 1));
    EXPECT_EQ(256u, remapring_copy_class(&copies, 16));
    EXPECT_EQ(128u, remapring_copy_class(&copies, 17));
    /* 80 bytes of UCP's headroom, 8 of ours, 256 of payload: 11 to a
     * page, each 368 bytes */
    EXPECT_EQ(11u, remapring_copy_class(&copies, 96 + 256));
    EXPECT_EQ(368u, copies.elem_size[11]);
    EXPECT_EQ(2u, remapring_copy_class(&copies, 2048));
    EXPECT_EQ(1u, remapring_copy_class(&copies, 2049));
    EXPECT_EQ(1u, remapring_copy_class(&copies, 4096));
    EXPECT_EQ(0u, remapring_copy_class(&copies, 4097));
    EXPECT_EQ(nullptr, remapring_copy_get(&copies, 4097));
    remapring_copy_cleanup(&copies);
}

/* Random sizes taken and put back in random order: elements never overlap
 * and keep their bytes; the memfd holds about what is taken; once all are
 * back, trimming gives all but a few pages back */
TEST(test_ring_copy, random_get_put)
{
    struct taken {
        uint8_t *addr;
        size_t   size;
        uint8_t  tag;
    };
    remapring_copies_t copies;
    std::vector<taken> out;
    std::mt19937 rng(3);
    size_t bytes = 0, max_ratio_bytes = 0;
    struct stat st;

    ASSERT_EQ(UCS_OK, remapring_copy_init(&copies, "t", 16 << 20));
    for (unsigned i = 0; i < 200000; ++i) {
        if ((out.size() < 2000) && ((out.size() < 100) || (rng() % 2))) {
            size_t size = 1 + rng() % 1200;
            uint8_t tag = (uint8_t)rng();
            uint8_t *addr = (uint8_t *)remapring_copy_get(&copies, size);
            ASSERT_NE(nullptr, addr);
            ASSERT_EQ(0u, (uintptr_t)addr % 16);
            memset(addr, tag, size);
            out.push_back({addr, size, tag});
            bytes += size;
        } else {
            size_t index = rng() % out.size();
            taken t      = out[index];
            for (size_t j = 0; j < t.size; ++j) {
                ASSERT_EQ(t.tag, t.addr[j]) << "element of " << t.size
                                            << " bytes changed at " << j;
            }
            /* put back by an address inside it */
            remapring_copy_put(&copies, t.addr + rng() % t.size);
            out[index] = out.back();
            out.pop_back();
            bytes -= t.size;
        }
        if ((i % 10000) == 0) {
            ASSERT_EQ(0, fstat(copies.fd, &st));
            max_ratio_bytes = std::max(max_ratio_bytes,
                                       (size_t)st.st_blocks * 512);
            /* pages in use at most a little over twice the bytes: random
             * sizes, random order */
            if (bytes > (1u << 20)) {
                EXPECT_LT((double)st.st_blocks * 512, 2.5 * bytes);
            }
        }
    }
    EXPECT_EQ(out.size(), copies.nelems_used);
    for (const taken &t : out) {
        remapring_copy_put(&copies, t.addr);
    }
    EXPECT_EQ(0u, copies.nelems_used);
    /* a trim gives back what the list did not need since the one before */
    remapring_copy_trim(&copies);
    remapring_copy_trim(&copies);
    ASSERT_EQ(0, fstat(copies.fd, &st));
    EXPECT_LE(st.st_blocks * 512, REMAPRING_COPY_KEEP * 4096);
    EXPECT_EQ((uint64_t)REMAPRING_COPY_KEEP, copies.resident_pages);

    /* pages taken again between two trims stay */
    std::vector<void*> again;
    for (unsigned i = 0; i < 4 * 16; ++i) {
        again.push_back(remapring_copy_get(&copies, 1000)); /* 4/page */
    }
    for (void *e : again) {
        remapring_copy_put(&copies, e);
    }
    remapring_copy_trim(&copies);
    EXPECT_EQ(16u, copies.resident_pages);
    remapring_copy_trim(&copies);
    EXPECT_EQ((uint64_t)REMAPRING_COPY_KEEP, copies.resident_pages);
    remapring_copy_cleanup(&copies);
}

/* A spare stays its class's until kept; kept spares are in use until put
 * back; past max_bytes there is none, and a put makes room again */
TEST(test_ring_copy, spare_and_limit)
{
    remapring_copies_t copies;
    unsigned n, n2;

    ASSERT_EQ(UCS_OK, remapring_copy_init(&copies, "t", 2 * 4096));
    void *spare = remapring_copy_spare(&copies, 1000, &n);
    ASSERT_NE(nullptr, spare);
    EXPECT_EQ(4u, n);
    EXPECT_EQ(spare, remapring_copy_spare(&copies, 1000, &n2));
    EXPECT_EQ(n, n2);

    /* 4 of 1 KiB to a page, two pages: 8 in all */
    std::vector<void*> kept;
    for (unsigned i = 0; i < 8; ++i) {
        void *e = remapring_copy_spare(&copies, 1000, &n);
        ASSERT_NE(nullptr, e) << i;
        remapring_copy_keep(&copies, n);
        kept.push_back(e);
    }
    EXPECT_EQ(nullptr, remapring_copy_spare(&copies, 1000, &n));
    EXPECT_EQ(nullptr, remapring_copy_get(&copies, 16));

    /* bad addresses are refused, with an error, and change nothing */
    char outside;
    remapring_copy_put(&copies, &outside);
    EXPECT_EQ(8u, copies.nelems_used);

    remapring_copy_put(&copies, kept.back());
    kept.pop_back();
    EXPECT_NE(nullptr, remapring_copy_spare(&copies, 1000, &n));
    for (void *e : kept) {
        remapring_copy_put(&copies, e);
    }
    remapring_copy_trim(&copies);
    EXPECT_EQ(0u, copies.nelems_used);
    remapring_copy_cleanup(&copies);
}

/* No copies: max_bytes 0 */
TEST(test_ring_copy, none)
{
    remapring_copies_t copies;
    unsigned n;

    ASSERT_EQ(UCS_OK, remapring_copy_init(&copies, "t", 0));
    EXPECT_EQ(nullptr, remapring_copy_get(&copies, 100));
    EXPECT_EQ(nullptr, remapring_copy_spare(&copies, 100, &n));
    remapring_copy_trim(&copies);
    remapring_copy_cleanup(&copies);
}
