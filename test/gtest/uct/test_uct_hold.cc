/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * Messages kept by the upper layer in place (UCX_REMAPRING_RX_INLINE=0: every
 * message comes with a descriptor): the AM handler returns UCS_INPROGRESS,
 * writes into its rx_headroom like UCP does, and gives the descriptor back
 * later, out of order, with uct_iface_release_desc(). Over many laps of a
 * small ring (4 KiB blocks, 4 slots) every held message stays intact until
 * released, and the ring never stalls while the pool can grow. Also: held
 * messages outlive their sender's endpoint.
 *
 * Small messages kept out of copies (UCX_REMAPRING_RX_INLINE at its 1 KiB,
 * UCX_REMAPRING_RX_COPY=1k): the same checks, what the copies hold per kept
 * byte, and delivery to be copied once the copies' share of POOL_MAX is in
 * use.
 */

#include "common/uct_fixture.h"

#include <algorithm>
#include <cstring>
#include <random>

#include <sys/stat.h>

using namespace remapring_test;

namespace {

static const uint8_t AM_ID = 3;

struct held_message {
    void     *data;
    size_t   length;
    uint64_t seed;
};

class test_uct_hold : public uct_fixture,
                      public testing::WithParamInterface<unsigned> {
protected:
    void SetUp() override
    {
        uct_fixture::SetUp();
        if (IsSkipped()) {
            return;
        }

        m_headroom = GetParam();
        config_t cfg = config();
        m_sender   = create_entity(cfg);
        m_receiver = create_entity(cfg, m_headroom);
        ASSERT_NE(nullptr, m_receiver);
        ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(m_receiver->iface, AM_ID,
                                                   am_handler, this, 0));
        m_ep = connect(m_sender, m_receiver);
        ASSERT_NE(nullptr, m_ep);
    }

    void TearDown() override
    {
        release_all();
        uct_fixture::TearDown();
    }

    /* every message in place, with a descriptor; kept pages folded (off by
     * default: FOLD_PAGES's help text says why) */
    virtual config_t config() const
    {
        return {{"BLOCK_SIZE", "4k"},
                {"RING_SLOTS", "4"},
                {"CREDIT_BATCH", "1"},
                {"RX_INLINE", "0"},
                {"FOLD_PAGES", "8192"}};
    }

    /* payload: 8-byte seed, then pattern(seed) */
    static ucs_status_t am_handler(void *arg, void *data, size_t length,
                                   unsigned flags)
    {
        test_uct_hold *self = (test_uct_hold*)arg;
        uint64_t seed;

        EXPECT_TRUE((flags & UCT_CB_PARAM_FLAG_DESC) || self->m_uncopied_ok);
        EXPECT_GE(length, sizeof(seed));
        memcpy(&seed, data, sizeof(seed));
        EXPECT_EQ(self->m_next_seed, seed) << "out of order";
        self->m_next_seed = seed + 1;
        EXPECT_EQ(-1, check_pattern((char*)data + sizeof(seed),
                                    length - sizeof(seed), seed))
                << "at delivery";
        ++self->m_received;

        if (!(flags & UCT_CB_PARAM_FLAG_DESC)) {
            ++self->m_uncopied; /* to be copied, not kept */
            return UCS_OK;
        }

        if (!self->m_keep(seed)) {
            return UCS_OK;
        }

        /* the upper layer puts its own descriptor in the headroom */
        memset((char*)data - self->m_headroom, 0x5c, self->m_headroom);
        self->m_held.push_back({data, length, seed});
        return UCS_INPROGRESS;
    }

    void release(size_t index)
    {
        held_message msg = m_held[index];

        m_held.erase(m_held.begin() + index);
        EXPECT_EQ(-1, check_pattern((char*)msg.data + sizeof(uint64_t),
                                    msg.length - sizeof(uint64_t), msg.seed))
                << "held message " << msg.seed << " changed";
        const uint8_t *headroom = (const uint8_t*)msg.data - m_headroom;
        for (unsigned i = 0; i < m_headroom; ++i) {
            ASSERT_EQ(0x5c, headroom[i]) << "headroom byte " << i;
        }
        uct_iface_release_desc((char*)msg.data - m_headroom);
    }

    void release_all()
    {
        while (!m_held.empty()) {
            release(m_held.size() - 1);
        }
    }

    struct pack_arg {
        size_t   length;
        uint64_t seed;
    };

    static size_t pack(void *dest, void *arg)
    {
        pack_arg *pa = (pack_arg*)arg;

        memcpy(dest, &pa->seed, sizeof(pa->seed));
        fill_pattern((char*)dest + sizeof(pa->seed), pa->length, pa->seed);
        return pa->length + sizeof(pa->seed);
    }

    ucs_status_t send(uint64_t seed, size_t length)
    {
        pack_arg pa = {length, seed};
        ssize_t ret = uct_ep_am_bcopy(m_ep, AM_ID, pack, &pa, 0);

        return (ret < 0) ? (ucs_status_t)ret : UCS_OK;
    }

    unsigned                     m_headroom  = 0;
    entity                       *m_sender   = nullptr;
    entity                       *m_receiver = nullptr;
    uct_ep_h                     m_ep        = nullptr;
    uint64_t                     m_next_seed = 1;
    size_t                       m_received  = 0;
    std::vector<held_message>    m_held;
    std::function<bool(uint64_t)> m_keep = [](uint64_t) { return false; };
    bool                         m_uncopied_ok = false;
    size_t                       m_uncopied    = 0;
};


/* Hold a random half, release in random order while the ring laps */
TEST_P(test_uct_hold, random_release_many_laps)
{
    const size_t count    = 20000;
    const size_t max_held = 48;
    size_t max_len        = m_sender->attr.cap.am.max_bcopy - sizeof(uint64_t);
    std::mt19937_64 rng(GetParam() + 7);
    size_t bytes          = 0;

    m_keep = [&rng](uint64_t) { return (rng() % 2) == 0; };
    for (uint64_t seed = 1; seed <= count; ++seed) {
        /* mostly small, sometimes up to a whole block */
        size_t length = ((rng() % 8) == 0) ? rng() % (max_len + 1) :
                                             rng() % 300;
        ASSERT_EQ(UCS_OK, retry([&]() {
                      ucs_status_t status = send(seed, length);
                      if (status == UCS_ERR_NO_RESOURCE) {
                          /* back-pressure: give something back */
                          if (!m_held.empty()) {
                              release(rng() % m_held.size());
                          }
                      }
                      return status;
                  }));
        bytes += length;
        progress();
        while (m_held.size() > max_held) {
            release(rng() % m_held.size());
        }
    }

    ASSERT_TRUE(wait_for([&]() { return m_received == count; }));
    release_all();
    /* 4 slots of 4 KiB: the ring went round many times */
    EXPECT_GT(bytes / (4 * 4096), 100u);
    printf("[ INFO     ] %zu messages, %zu bytes, %.0f laps\n", count, bytes,
           bytes / (4.0 * 4096));
}

/* Hold everything for a while: the pool grows, nothing is overwritten */
TEST_P(test_uct_hold, hold_all_then_release_reversed)
{
    const size_t count = 600;

    m_keep = [](uint64_t) { return true; };
    for (uint64_t seed = 1; seed <= count; ++seed) {
        ASSERT_EQ(UCS_OK,
                  retry([&]() { return send(seed, (seed * 37) % 1500); }));
    }

    ASSERT_TRUE(wait_for([&]() { return m_received == count; }));
    ASSERT_EQ(count, m_held.size());
    /* newest first: blocks free in the opposite order they were taken */
    release_all();

    /* and the ring still works afterwards */
    m_keep = [](uint64_t) { return false; };
    for (uint64_t seed = count + 1; seed <= count + 200; ++seed) {
        ASSERT_EQ(UCS_OK, retry([&]() { return send(seed, 1000); }));
    }
    ASSERT_TRUE(wait_for([&]() { return m_received == count + 200; }));
}

/* Bytes the memfds of this process named @a name hold (through
 * /proc/self/fd), and the size of the last one in *@a size_p */
static off_t memfd_resident(const char *name, off_t *size_p = nullptr)
{
    off_t total = 0;
    struct stat st;

    for_each_fd([&](const char *path, const char *link) {
        if ((strstr(link, name) != NULL) && (stat(path, &st) == 0)) {
            total += st.st_blocks * 512;
            if (size_p != nullptr) {
                *size_p = st.st_size;
            }
        }
    });
    return total;
}

/* Bytes the fold memfds of this process hold */
static off_t fold_resident()
{
    return memfd_resident("memfd:remapring-pool-fold");
}

/* One message in 16 kept for long while the ring laps: the blocks they were
 * in leave their slots and are punched, and the partly used pages of the
 * kept messages are folded into pages they share (the fold memfd holds
 * fewer pages than there are kept messages), every byte intact */
TEST_P(test_uct_hold, sparse_holds_fold)
{
    const size_t count = 20000;
    std::mt19937_64 rng(GetParam() + 11);

    m_keep = [](uint64_t seed) { return (seed % 16) == 0; };
    for (uint64_t seed = 1; seed <= count; ++seed) {
        size_t length = 200 + rng() % 800;
        ASSERT_EQ(UCS_OK, retry([&]() { return send(seed, length); }));
        progress();
    }
    ASSERT_TRUE(wait_for([&]() { return m_received == count; }));
    ASSERT_EQ(count / 16, m_held.size());

    off_t resident = fold_resident();
    printf("[ INFO     ] %zu kept, fold pages %.0f\n", m_held.size(),
           resident / 4096.0);
    EXPECT_GT(resident, 0);
    EXPECT_LT(resident, (off_t)(m_held.size() * 4096 / 2));

    std::shuffle(m_held.begin(), m_held.end(), rng);
    release_all(); /* each checks its bytes */
}

/* Held descriptors stay valid after the sender's endpoint is gone and the
 * receiver freed the connection */
TEST_P(test_uct_hold, release_after_ep_destroy)
{
    m_keep = [](uint64_t seed) { return (seed % 3) != 0; };
    for (uint64_t seed = 1; seed <= 100; ++seed) {
        ASSERT_EQ(UCS_OK, retry([&]() { return send(seed, 2000); }));
    }
    ASSERT_TRUE(wait_for([&]() { return m_received == 100; }));

    m_sender->ep_destroy(m_ep);
    m_ep = nullptr;
    for (int i = 0; i < 1000; ++i) {
        progress();
    }

    std::mt19937 rng(5);
    std::shuffle(m_held.begin(), m_held.end(), rng);
    release_all();

    /* a new endpoint gets a new ring */
    m_next_seed = 1;
    m_ep        = connect(m_sender, m_receiver);
    ASSERT_NE(nullptr, m_ep);
    ASSERT_EQ(UCS_OK, retry([&]() { return send(1, 100); }));
    ASSERT_TRUE(wait_for([&]() { return m_received == 101; }));
}

INSTANTIATE_TEST_SUITE_P(headroom, test_uct_hold, testing::Values(0u, 64u),
                         [](const testing::TestParamInfo<unsigned> &info) {
                             return "hr" + std::to_string(info.param);
                         });


/* Small messages kept out of copies: up to RX_INLINE (1 KiB) */
class test_uct_hold_copies : public test_uct_hold {
protected:
    config_t config() const override
    {
        return {{"BLOCK_SIZE", "4k"},
                {"RING_SLOTS", "4"},
                {"CREDIT_BATCH", "1"},
                {"RX_COPY", "1k"},
                {"POOL_MAX", m_pool_max}};
    }

    /* What the copies memfds of this process hold, and their size (the
     * sender's hold nothing) */
    static off_t copies_resident(off_t *size_p = nullptr)
    {
        return memfd_resident("memfd:remapring-copies", size_p);
    }

    /* Copies to a page for a payload of @a length (README, Memory): the
     * headroom and a pointer, 16-byte aligned, then the payload, 16-byte
     * aligned; a page holds as many as fit */
    unsigned copies_per_page(size_t length) const
    {
        size_t offset = (m_headroom + sizeof(void*) + 15) & ~(size_t)15;

        return 4096 / ((offset + length + 15) & ~(size_t)15);
    }

    std::string m_pool_max = "1g";
};

/* Hold a random half of small messages, release in random order: each
 * stays intact in its copy, and the copies' memory follows what is kept */
TEST_P(test_uct_hold_copies, random_release)
{
    const size_t count    = 20000;
    const size_t max_held = 200;
    std::mt19937_64 rng(GetParam() + 17);

    m_keep = [&rng](uint64_t) { return (rng() % 2) == 0; };
    for (uint64_t seed = 1; seed <= count; ++seed) {
        ASSERT_EQ(UCS_OK, retry([&]() { return send(seed, rng() % 1000); }));
        progress();
        while (m_held.size() > max_held) {
            release(rng() % m_held.size());
        }
    }
    ASSERT_TRUE(wait_for([&]() { return m_received == count; }));
    EXPECT_EQ(0u, m_uncopied);
    /* 200 kept of at most 1 KiB and the receive headroom: less than a page
     * each */
    off_t kept = copies_resident();
    printf("[ INFO     ] %zu kept: copies hold %.0f pages\n", m_held.size(),
           kept / 4096.0);
    EXPECT_GT(kept, 0);
    EXPECT_LT(kept, (off_t)(m_held.size() * 4096));

    std::shuffle(m_held.begin(), m_held.end(), rng);
    release_all();
    /* the empty pages go back, all but a few (8), from the receiver's
     * periodic work */
    ASSERT_TRUE(wait_for([&]() {
        for (int i = 0; i < 4096; ++i) {
            progress(); /* the periodic work comes every 65536 */
        }
        return copies_resident() <= 8 * 4096;
    })) << copies_resident() / 4096 << " pages";
}

/* What kept 256-byte messages hold: with the headroom, their size rounded
 * to a share of a page (15 copies of up to 272 bytes to a page without
 * headroom, 12 of up to 336 with 64 bytes), not a buffer of the next size
 * up */
TEST_P(test_uct_hold_copies, right_sized)
{
    const size_t count = 2000, length = 256 - sizeof(uint64_t);

    m_keep = [](uint64_t) { return true; };
    for (uint64_t seed = 1; seed <= count; ++seed) {
        ASSERT_EQ(UCS_OK, retry([&]() { return send(seed, length); }));
        progress();
    }
    ASSERT_TRUE(wait_for([&]() { return m_received == count; }));
    ASSERT_EQ(count, m_held.size());
    EXPECT_EQ(0u, m_uncopied);

    double per_byte = (double)copies_resident() / (count * 256.0);
    printf("[ INFO     ] %zu kept of 256 bytes: %.2f bytes held per byte\n",
           count, per_byte);
    EXPECT_LE(per_byte, 1.5);
    release_all();
}

/* Copies only while the upper layer keeps small messages: once it kept
 * none of the last few hundred, they come in place to be copied, all but
 * one in 64, which still goes through a copy; when one of those is kept,
 * copies are back for every one */
TEST_P(test_uct_hold_copies, follow_keeping)
{
    m_uncopied_ok = true;
    m_keep        = [](uint64_t) { return false; };

    auto send_some = [&](uint64_t first, uint64_t count) {
        for (uint64_t seed = first; seed < first + count; ++seed) {
            ASSERT_EQ(UCS_OK, retry([&]() { return send(seed, 100); }));
            progress();
        }
        ASSERT_TRUE(wait_for([&]() { return m_received == first + count - 1; }));
    };

    /* none kept: the share falls below 1 in 1024 within some 1800 */
    send_some(1, 4000);
    EXPECT_GT(m_uncopied, 2000u);

    /* then one in 64 goes through a copy */
    size_t uncopied = m_uncopied;
    send_some(4001, 64 * 20);
    size_t copied = 64 * 20 - (m_uncopied - uncopied);
    EXPECT_GE(copied, 19u);
    EXPECT_LE(copied, 21u);

    /* kept again: the next copy, at most 64 on, is kept, and copies are
     * back for all that follow */
    m_keep = [](uint64_t) { return true; };
    send_some(4001 + 64 * 20, 64);
    uncopied = m_uncopied;
    send_some(4001 + 64 * 21, 200);
    EXPECT_EQ(uncopied, m_uncopied);
    EXPECT_GE(m_held.size(), 200u);
}

/* The smallest pool: copies get a quarter of it, 4 KiB, one page */
class test_uct_hold_copies_small : public test_uct_hold_copies {
public:
    test_uct_hold_copies_small()
    {
        m_pool_max = "16k";
    }
};

/* Past the copies' share of POOL_MAX, small messages are delivered to be
 * copied, none lost; once copies are given back, they come out of copies
 * again */
TEST_P(test_uct_hold_copies_small, exhausted)
{
    const size_t length = 500;
    const ucs_status_t expect_ok = UCS_OK;
    const unsigned per_page = copies_per_page(sizeof(uint64_t) + length);
    off_t size = 0;

    copies_resident(&size);
    ASSERT_EQ(4096, size);
    ASSERT_GT(per_page, 1u);
    m_uncopied_ok = true;
    m_keep        = [](uint64_t) { return true; };
    for (uint64_t seed = 1; seed <= 40; ++seed) {
        ASSERT_EQ(expect_ok, retry([&]() { return send(seed, length); }));
    }
    ASSERT_TRUE(wait_for([&]() { return m_received == 40; }));
    EXPECT_EQ(per_page, m_held.size());
    EXPECT_EQ(40u - per_page, m_uncopied);

    release_all();
    m_uncopied = 0;
    for (uint64_t seed = 41; seed <= 40 + per_page; ++seed) {
        ASSERT_EQ(expect_ok, retry([&]() { return send(seed, length); }));
    }
    ASSERT_TRUE(wait_for([&]() { return m_received == 40 + per_page; }));
    EXPECT_EQ(per_page, m_held.size());
    EXPECT_EQ(0u, m_uncopied);
}

INSTANTIATE_TEST_SUITE_P(headroom, test_uct_hold_copies_small,
                         testing::Values(0u, 64u),
                         [](const testing::TestParamInfo<unsigned> &info) {
                             return "hr" + std::to_string(info.param);
                         });

INSTANTIATE_TEST_SUITE_P(headroom, test_uct_hold_copies,
                         testing::Values(0u, 64u),
                         [](const testing::TestParamInfo<unsigned> &info) {
                             return "hr" + std::to_string(info.param);
                         });

} // namespace
