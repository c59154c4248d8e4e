/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * Point-to-point active messages through UCT's public API: am_short,
 * am_bcopy and am_zcopy of every size from 0 to the limits the interface
 * reports (0, 1, 8, 63, 64, 65, 4095, 4096, ..., max), delivered in order,
 * every byte checked; with UCT_CB_PARAM_FLAG_DESC and a writable
 * rx_headroom (0 and 64 bytes) in place above UCX_REMAPRING_RX_INLINE
 * (1 KiB) and out of a copy up to UCX_REMAPRING_RX_COPY (512 bytes), those
 * between without (to be copied); for 4 KiB and 64 KiB blocks, over the shm and cma
 * wires; zcopy headers and iovs of every count; sizes above the limits are
 * refused; the capabilities match the settings.
 */

#include "common/uct_fixture.h"

#include <cstring>
#include <deque>
#include <tuple>

using namespace remapring_test;

namespace {

static const uint8_t AM_ID = 7;

struct rx_message {
    std::vector<uint8_t> data;
    unsigned             flags;
};

class test_uct_am
    : public uct_fixture,
      public testing::WithParamInterface<
              std::tuple<unsigned, const char*, const char*>> {
protected:
    void SetUp() override
    {
        uct_fixture::SetUp();
        if (IsSkipped()) {
            return;
        }

        m_headroom   = std::get<0>(GetParam());
        config_t cfg = {{"BLOCK_SIZE", std::get<1>(GetParam())},
                        {"WIRE", std::get<2>(GetParam())},
                        {"RX_COPY", rx_copy() ? "512" : "0"}};
        m_sender     = create_entity(cfg);
        m_receiver   = create_entity(cfg, m_headroom);
        ASSERT_NE(nullptr, m_receiver);
        ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(m_receiver->iface, AM_ID,
                                                   am_handler, this, 0));
        m_ep = connect(m_sender, m_receiver);
        ASSERT_NE(nullptr, m_ep);
    }

    static ucs_status_t am_handler(void *arg, void *data, size_t length,
                                   unsigned flags)
    {
        test_uct_am *self = (test_uct_am*)arg;
        rx_message msg;

        msg.data.assign((uint8_t*)data, (uint8_t*)data + length);
        msg.flags = flags;
        /* the upper layer owns the headroom in front of a descriptor */
        if (flags & UCT_CB_PARAM_FLAG_DESC) {
            memset((char*)data - self->m_headroom, 0xa5, self->m_headroom);
        }
        self->m_rx.push_back(std::move(msg));
        return UCS_OK;
    }

    /* The sizes of the suite that are at most @a max */
    static std::vector<size_t> sizes(size_t max)
    {
        static const size_t all[] = {0,    1,    2,     7,     8,    9,
                                     63,   64,   65,    127,   128,  255,
                                     256,  1000, 2047,  2048,  4095, 4096,
                                     4097, 8191, 16384, 32768, 65000};
        std::vector<size_t> result;

        for (size_t s : all) {
            if (s <= max) {
                result.push_back(s);
            }
        }
        for (size_t s : {max - 1, max}) {
            if ((s <= max) && (result.back() < s)) {
                result.push_back(s);
            }
        }

        return result;
    }

    /* Wait for @a count messages */
    void wait_rx(size_t count)
    {
        ASSERT_TRUE(wait_for([&]() { return m_rx.size() >= count; }))
                << "received " << m_rx.size() << " of " << count;
        /* nothing more than sent */
        progress();
        ASSERT_EQ(count, m_rx.size());
    }

    void check_rx(const rx_message &msg, size_t length, uint64_t seed,
                  size_t offset = 0)
    {
        EXPECT_EQ(with_desc(length + offset),
                  !!(msg.flags & UCT_CB_PARAM_FLAG_DESC))
                << "length " << length + offset;
        ASSERT_EQ(length + offset, msg.data.size());
        ssize_t bad = check_pattern(msg.data.data() + offset, length, seed);
        EXPECT_EQ(-1, bad) << "length " << length << " differs at byte "
                           << bad;
    }

    struct pack_arg {
        size_t   length;
        uint64_t seed;
    };

    static size_t pack(void *dest, void *arg)
    {
        pack_arg *pa = (pack_arg*)arg;

        fill_pattern(dest, pa->length, pa->seed);
        return pa->length;
    }

    /* Every size up to am_bcopy's limit, in order, each checked */
    void bcopy_sizes(uint64_t first_seed)
    {
        std::vector<size_t> lengths = sizes(m_sender->attr.cap.am.max_bcopy);
        uint64_t seed               = first_seed;

        for (size_t length : lengths) {
            ASSERT_EQ((ssize_t)length, send_bcopy(length, ++seed));
        }

        wait_rx(lengths.size());
        seed = first_seed;
        for (size_t length : lengths) {
            check_rx(m_rx.front(), length, ++seed);
            m_rx.pop_front();
        }
    }

    /* UCX_REMAPRING_RX_COPY */
    virtual bool rx_copy() const
    {
        return true;
    }

    /* Whether a message of @a length comes with a descriptor to keep: above
     * UCX_REMAPRING_RX_INLINE (1 KiB) in place, up to UCX_REMAPRING_RX_COPY
     * (512 bytes) out of a copy; those between, and with no copies all up
     * to RX_INLINE, in place to be copied */
    bool with_desc(size_t length) const
    {
        return (rx_copy() && (length <= 512)) || (length > 1024);
    }

    ssize_t send_bcopy(size_t length, uint64_t seed)
    {
        pack_arg pa = {length, seed};
        ssize_t ret;

        retry([&]() {
            ret = uct_ep_am_bcopy(m_ep, AM_ID, pack, &pa, 0);
            return (ret < 0) ? (ucs_status_t)ret : UCS_OK;
        });
        return ret;
    }

    ucs_status_t send_zcopy(const std::vector<uint8_t> &header,
                            const std::vector<uint8_t> &payload,
                            size_t iovcnt)
    {
        std::vector<uct_iov_t> iov(iovcnt);
        uct_completion_t comp = {};
        size_t offset         = 0;

        for (size_t i = 0; i < iovcnt; ++i) {
            size_t piece = (i == iovcnt - 1) ?
                           payload.size() - offset : payload.size() / iovcnt;
            iov[i].buffer = (void*)(payload.data() + offset);
            iov[i].length = piece;
            iov[i].memh   = UCT_MEM_HANDLE_NULL;
            iov[i].stride = 0;
            iov[i].count  = 1;
            offset       += piece;
        }

        comp.func   = [](uct_completion_t*) { ADD_FAILURE(); };
        comp.count  = 1;
        comp.status = UCS_OK;
        ucs_status_t status = retry([&]() {
            return uct_ep_am_zcopy(m_ep, AM_ID, header.data(), header.size(),
                                   iov.data(), iovcnt, 0, &comp);
        });
        /* the bytes are in the receiver's ring when the call returns */
        EXPECT_NE(UCS_INPROGRESS, status);
        EXPECT_EQ(1, comp.count);
        return status;
    }

    unsigned              m_headroom = 0;
    entity                *m_sender  = nullptr;
    entity                *m_receiver = nullptr;
    uct_ep_h              m_ep       = nullptr;
    std::deque<rx_message> m_rx;
};


TEST_P(test_uct_am, capabilities)
{
    const uct_iface_attr_t &attr = m_sender->attr;
    uint64_t need = UCT_IFACE_FLAG_AM_SHORT | UCT_IFACE_FLAG_AM_BCOPY |
                    UCT_IFACE_FLAG_AM_ZCOPY | UCT_IFACE_FLAG_PUT_ZCOPY |
                    UCT_IFACE_FLAG_GET_ZCOPY | UCT_IFACE_FLAG_PENDING |
                    UCT_IFACE_FLAG_CB_SYNC |
                    UCT_IFACE_FLAG_CONNECT_TO_IFACE |
                    UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE |
                    UCT_IFACE_FLAG_EP_CHECK;
    size_t block = (std::string(std::get<1>(GetParam())) == "4k") ? 4096 :
                                                                    65536;

    EXPECT_EQ(need, attr.cap.flags & need);
    EXPECT_GE(attr.cap.am.max_short, 64u);
    /* less what a header, the largest headroom and the largest alignment
     * a receiver may ask for (a 32nd of a block, or a page) take */
    EXPECT_GT(attr.cap.am.max_bcopy, block - block / 32 - 512);
    EXPECT_LT(attr.cap.am.max_bcopy, block);
    /* a zcopy's header and payload share one record */
    EXPECT_EQ(attr.cap.am.max_bcopy, attr.cap.am.max_zcopy +
                                     attr.cap.am.max_hdr);
    EXPECT_GE(attr.cap.am.max_iov, 2u);
    EXPECT_GE(attr.cap.am.max_hdr, 64u);
    EXPECT_GT(attr.iface_addr_len, 0u);
    EXPECT_EQ(0u, attr.ep_addr_len);
    EXPECT_GT(attr.bandwidth.dedicated + attr.bandwidth.shared, 0);
    EXPECT_GT(attr.latency.c, 0);
    EXPECT_TRUE(uct_iface_is_reachable(
            m_sender->iface, (uct_device_addr_t*)m_receiver->dev_addr.data(),
            (uct_iface_addr_t*)m_receiver->iface_addr.data()));
}

TEST_P(test_uct_am, short_sizes)
{
    /* max_short counts the 8-byte header, as UCX's transports do */
    size_t max                 = m_sender->attr.cap.am.max_short -
                                 sizeof(uint64_t);
    std::vector<size_t> lengths = sizes(max);
    uint64_t seed              = 0;

    for (size_t length : lengths) {
        std::vector<uint8_t> payload(length);
        fill_pattern(payload.data(), length, ++seed);
        uint64_t header = 0x1122334455667788ull ^ seed;
        ASSERT_EQ(UCS_OK, retry([&]() {
                      return uct_ep_am_short(m_ep, AM_ID, header,
                                             payload.data(), length);
                  })) << "length " << length;
    }

    wait_rx(lengths.size());
    seed = 0;
    for (size_t length : lengths) {
        const rx_message &msg = m_rx.front();
        ++seed;
        ASSERT_GE(msg.data.size(), sizeof(uint64_t));
        uint64_t header;
        memcpy(&header, msg.data.data(), sizeof(header));
        EXPECT_EQ(0x1122334455667788ull ^ seed, header);
        check_rx(msg, length, seed, sizeof(uint64_t));
        m_rx.pop_front();
    }
}

TEST_P(test_uct_am, bcopy_sizes)
{
    bcopy_sizes(100);
}

TEST_P(test_uct_am, zcopy_sizes)
{
    const uct_iface_attr_t &attr = m_sender->attr;
    std::vector<size_t> hdrs     = {0, 1, 8, attr.cap.am.max_hdr};
    std::vector<std::vector<uint8_t>> expected;
    uint64_t seed = 1000;

    for (size_t hdr : hdrs) {
        for (size_t length : sizes(attr.cap.am.max_zcopy - hdr)) {
            size_t iovcnt = 1 + (seed % attr.cap.am.max_iov);
            std::vector<uint8_t> header(hdr), payload(length);

            iovcnt = std::max<size_t>(1, std::min(iovcnt, length));
            fill_pattern(header.data(), hdr, ++seed);
            fill_pattern(payload.data(), length, ++seed);
            ASSERT_EQ(UCS_OK, send_zcopy(header, payload, iovcnt))
                    << "header " << hdr << " length " << length;

            header.insert(header.end(), payload.begin(), payload.end());
            expected.push_back(header);
        }
    }

    wait_rx(expected.size());
    for (const auto &exp : expected) {
        EXPECT_EQ(with_desc(exp.size()),
                  !!(m_rx.front().flags & UCT_CB_PARAM_FLAG_DESC));
        ASSERT_EQ(exp.size(), m_rx.front().data.size());
        EXPECT_TRUE(exp == m_rx.front().data)
                << "zcopy of " << exp.size() << " bytes differs";
        m_rx.pop_front();
    }
}

TEST_P(test_uct_am, zcopy_every_iovcnt)
{
    const uct_iface_attr_t &attr = m_sender->attr;
    std::vector<uint8_t> header(16), payload(3000);
    size_t count = 0;

    for (size_t iovcnt = 1; iovcnt <= attr.cap.am.max_iov; ++iovcnt) {
        fill_pattern(header.data(), header.size(), iovcnt);
        fill_pattern(payload.data(), payload.size(), iovcnt + 500);
        ASSERT_EQ(UCS_OK, send_zcopy(header, payload, iovcnt));
        ++count;
    }

    wait_rx(count);
    for (size_t iovcnt = 1; iovcnt <= attr.cap.am.max_iov; ++iovcnt) {
        const rx_message &msg = m_rx.front();
        ASSERT_EQ(header.size() + payload.size(), msg.data.size());
        EXPECT_EQ(-1, check_pattern(msg.data.data(), header.size(), iovcnt));
        EXPECT_EQ(-1, check_pattern(msg.data.data() + header.size(),
                                    payload.size(), iovcnt + 500))
                << "iovcnt " << iovcnt;
        m_rx.pop_front();
    }
}

/* all three kinds interleaved keep their order */
TEST_P(test_uct_am, mixed_order)
{
    const uct_iface_attr_t &attr = m_sender->attr;
    const size_t count           = 3000;
    std::vector<std::pair<size_t, uint64_t>> sent;
    uint64_t rnd = 12345;

    for (size_t i = 0; i < count; ++i) {
        rnd = rnd * 6364136223846793005ull + 1442695040888963407ull;
        unsigned kind = (rnd >> 60) % 3;
        uint64_t seed = i + 1;

        if (kind == 0) {
            size_t length = (rnd >> 20) % (attr.cap.am.max_short -
                                           sizeof(uint64_t) + 1);
            std::vector<uint8_t> buf(sizeof(uint64_t) + length);
            fill_pattern(buf.data(), buf.size(), seed);
            uint64_t header;
            memcpy(&header, buf.data(), sizeof(header));
            ASSERT_EQ(UCS_OK, retry([&]() {
                          return uct_ep_am_short(m_ep, AM_ID, header,
                                                 buf.data() + 8, length);
                      }));
            sent.push_back({buf.size(), seed});
        } else if (kind == 1) {
            size_t length = (rnd >> 20) % (attr.cap.am.max_bcopy + 1);
            ASSERT_EQ((ssize_t)length, send_bcopy(length, seed));
            sent.push_back({length, seed});
        } else {
            size_t length = (rnd >> 20) % (attr.cap.am.max_zcopy + 1);
            std::vector<uint8_t> buf(length);
            fill_pattern(buf.data(), length, seed);
            size_t hdr = std::min<size_t>(length, attr.cap.am.max_hdr / 2);
            std::vector<uint8_t> header(buf.begin(), buf.begin() + hdr);
            std::vector<uint8_t> payload(buf.begin() + hdr, buf.end());
            ASSERT_EQ(UCS_OK,
                      send_zcopy(header, payload, payload.empty() ? 1 : 2));
            sent.push_back({length, seed});
        }

        /* keep the receiver going so that the ring wraps many times */
        progress();
    }

    wait_rx(count);
    for (const auto &s : sent) {
        check_rx(m_rx.front(), s.first, s.second);
        m_rx.pop_front();
    }
}

TEST_P(test_uct_am, over_limits)
{
    const uct_iface_attr_t &attr = m_sender->attr;
    std::vector<uint8_t> header(attr.cap.am.max_hdr + 1);
    std::vector<uint8_t> payload(attr.cap.am.max_bcopy + 1);
    uct_iov_t iov = {payload.data(), attr.cap.am.max_zcopy + 1,
                     UCT_MEM_HANDLE_NULL, 0, 1};
    scoped_log_capture log;

    /* each limit is checked, as UCX's own transports do */
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_ep_am_zcopy(m_ep, AM_ID, NULL, 0, &iov, 1, 0, NULL));
    iov.length = attr.cap.am.max_zcopy;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_ep_am_zcopy(m_ep, AM_ID, header.data(), header.size(),
                              &iov, 1, 0, NULL));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_ep_am_short(m_ep, AM_ID, 0, payload.data(),
                              attr.cap.am.max_short - sizeof(uint64_t) + 1));
    iov.length = attr.cap.am.max_short + 1;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_ep_am_short_iov(m_ep, AM_ID, &iov, 1));

    /* nothing of that reached the receiver, and the ep still works */
    EXPECT_EQ(UCS_OK, retry([&]() {
                  return uct_ep_am_short(m_ep, AM_ID, 42, NULL, 0);
              }));
    wait_rx(1);
    EXPECT_EQ(sizeof(uint64_t), m_rx.front().data.size());
}

INSTANTIATE_TEST_SUITE_P(
        headroom_block_wire, test_uct_am,
        testing::Combine(testing::Values(0u, 64u),
                         testing::Values("4k", "64k"),
                         testing::Values("shm", "cma")),
        [](const testing::TestParamInfo<test_uct_am::ParamType> &info) {
            return "hr" + std::to_string(std::get<0>(info.param)) + "_" +
                   std::get<1>(info.param) + "_" + std::get<2>(info.param);
        });

/* UCX_REMAPRING_RX_COPY=0: up to RX_INLINE in place, to be copied */
class test_uct_am_nocopy : public test_uct_am {
protected:
    bool rx_copy() const override
    {
        return false;
    }
};

TEST_P(test_uct_am_nocopy, bcopy_sizes)
{
    bcopy_sizes(200);
}

INSTANTIATE_TEST_SUITE_P(
        headroom_block_wire, test_uct_am_nocopy,
        testing::Combine(testing::Values(0u, 64u), testing::Values("64k"),
                         testing::Values("shm")),
        [](const testing::TestParamInfo<test_uct_am::ParamType> &info) {
            return "hr" + std::to_string(std::get<0>(info.param)) + "_" +
                   std::get<1>(info.param) + "_" + std::get<2>(info.param);
        });

/* AM alignment (UCT_IFACE_PARAM_FIELD_AM_ALIGNMENT and _OFFSET): for
 * every alignment up to a page and offsets below, equal to and above it,
 * every message's data, with a descriptor or not, is aligned @a offset
 * bytes into it, from a sender with no alignment and from one with the
 * same */
class test_uct_am_align : public uct_fixture,
                          public testing::WithParamInterface<const char*> {
protected:
    struct rx_state {
        size_t align, offset;
        size_t received = 0, misaligned = 0, wrong = 0, with_desc = 0;
        uint64_t seed   = 0;
    };

    static ucs_status_t am_handler(void *arg, void *data, size_t length,
                                   unsigned flags)
    {
        rx_state *rx = (rx_state*)arg;

        ++rx->received;
        rx->with_desc += !!(flags & UCT_CB_PARAM_FLAG_DESC);
        rx->misaligned += (((uintptr_t)data + rx->offset) % rx->align) != 0;
        rx->wrong += check_pattern(data, length, ++rx->seed) != -1;
        return UCS_OK;
    }

    static size_t pack(void *dest, void *arg)
    {
        const std::pair<size_t, uint64_t> *pa =
                (const std::pair<size_t, uint64_t>*)arg;

        fill_pattern(dest, pa->first, pa->second);
        return pa->first;
    }
};

TEST_P(test_uct_am_align, every_message)
{
    const config_t cfg = {{"WIRE", GetParam()}};

    for (size_t align : {1, 2, 4, 8, 64, 256, 4096}) {
        for (size_t offset : {(size_t)0, (size_t)3, (size_t)8, align - 1,
                              align, align + 5, 3 * align}) {
            for (bool aligned_sender : {false, true}) {
                rx_state rx;
                rx.align   = align;
                rx.offset  = offset;
                entity *r  = create_entity(cfg, 0, nullptr, nullptr, align,
                                           offset);
                entity *s  = aligned_sender ?
                                     create_entity(cfg, 0, nullptr, nullptr,
                                                   align, offset) :
                                     create_entity(cfg);
                ASSERT_NE(nullptr, r) << align << "/" << offset;
                ASSERT_NE(nullptr, s);
                ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(r->iface, AM_ID,
                                                           am_handler, &rx,
                                                           0));
                uct_ep_h ep = connect(s, r);
                ASSERT_NE(nullptr, ep);

                size_t max = s->attr.cap.am.max_bcopy;
                uint64_t seed = 0;
                size_t sent   = 0;
                for (size_t length : {(size_t)0, (size_t)1, (size_t)7,
                                      (size_t)64, (size_t)200, (size_t)513,
                                      (size_t)1024, (size_t)1025,
                                      (size_t)4000, max}) {
                    std::pair<size_t, uint64_t> pa(length, ++seed);
                    ssize_t ret = -1;
                    retry([&]() {
                        ret = uct_ep_am_bcopy(ep, AM_ID, pack, &pa, 0);
                        return (ret < 0) ? (ucs_status_t)ret : UCS_OK;
                    });
                    ASSERT_EQ((ssize_t)length, ret)
                            << "align " << align << " offset " << offset;
                    ++sent;
                }

                ASSERT_TRUE(wait_for([&]() { return rx.received == sent; }));
                EXPECT_EQ(0u, rx.misaligned)
                        << "align " << align << " offset " << offset
                        << (aligned_sender ? ", aligned sender" : "");
                EXPECT_EQ(0u, rx.wrong);
                EXPECT_GT(rx.with_desc, 0u);
                s->ep_destroy(ep);
                m_entities.clear();
            }
        }
    }
}

/* An alignment above a page, or not a power of two, is refused with one
 * line; so is an offset without an alignment (UCT's own rule) */
TEST_P(test_uct_am_align, refused)
{
    const config_t cfg = {{"WIRE", GetParam()}};
    std::unique_ptr<entity> e;

    for (size_t align : {3, 8192}) {
        scoped_log_capture log;
        EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                  entity::open(m_component, m_md_name, cfg, 0, nullptr,
                               nullptr, &e, align, 0));
        EXPECT_TRUE(log.contains("AM alignment")) << log.all();
    }
}

INSTANTIATE_TEST_SUITE_P(wire, test_uct_am_align,
                         testing::Values("shm", "cma"));

} // namespace
