/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * Back-pressure, pending queue and flush: a receiver that holds every
 * message with the smallest pool (RING_SLOTS * BLOCK_SIZE) stops crediting
 * the sender, sends return UCS_ERR_NO_RESOURCE; pending_add queues requests
 * that fire, in order, once the held messages are released; pending_purge
 * hands every queued request back; ep and iface flush report the queue.
 * Also: pending_add on an ep that can send answers UCS_ERR_BUSY, and an
 * endpoint is pending until the receiver made its ring.
 */

#include "common/uct_fixture.h"

#include <cstring>

using namespace remapring_test;

namespace {

static const uint8_t AM_ID = 11;

class test_uct_pending : public uct_fixture {
protected:
    struct request {
        uct_pending_req_t super;
        test_uct_pending  *test;
        uint64_t          seed;
        int               calls;
    };

    void SetUp() override
    {
        uct_fixture::SetUp();
        if (IsSkipped()) {
            return;
        }

        /* every message with a descriptor, so that holding them fills the
         * pool */
        config_t cfg = {{"BLOCK_SIZE", "4k"},
                        {"RING_SLOTS", "4"},
                        {"POOL_MAX", "16k"},
                        {"CREDIT_BATCH", "1"},
                        {"RX_INLINE", "0"}};
        m_sender   = create_entity(cfg);
        m_receiver = create_entity(cfg);
        ASSERT_NE(nullptr, m_receiver);
        ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(m_receiver->iface, AM_ID,
                                                   am_handler, this, 0));
        m_ep = connect(m_sender, m_receiver);
        ASSERT_NE(nullptr, m_ep);
    }

    void TearDown() override
    {
        /* a failed test may leave requests queued: drop them while they
         * still exist */
        if (m_ep != nullptr) {
            uct_ep_pending_purge(m_ep, NULL, NULL);
        }
        release_all();
        uct_fixture::TearDown();
    }

    static ucs_status_t am_handler(void *arg, void *data, size_t length,
                                   unsigned flags)
    {
        test_uct_pending *self = (test_uct_pending*)arg;
        uint64_t seed;

        memcpy(&seed, data, sizeof(seed));
        self->m_seeds.push_back(seed);
        EXPECT_EQ(-1, check_pattern((char*)data + 8, length - 8, seed));
        if (!self->m_hold) {
            return UCS_OK;
        } else if (!(flags & UCT_CB_PARAM_FLAG_DESC)) {
            ++self->m_copied; /* to be copied: not ours to keep */
            return UCS_OK;
        }

        self->m_held.push_back({data, length, seed});
        return UCS_INPROGRESS;
    }

    void release_all()
    {
        for (const auto &h : m_held) {
            EXPECT_EQ(-1, check_pattern((char*)h.data + 8, h.length - 8,
                                        h.seed))
                    << "held message " << h.seed << " changed";
            uct_iface_release_desc(h.data);
        }
        m_held.clear();
    }

    ucs_status_t send(uint64_t seed, size_t length = 1000)
    {
        std::vector<uint8_t> buf(length);

        fill_pattern(buf.data(), length, seed);
        return uct_ep_am_short(m_ep, AM_ID, seed, buf.data(),
                               std::min<size_t>(
                                       length,
                                       m_sender->attr.cap.am.max_short -
                                               sizeof(seed)));
    }

    /* Send until the sender runs out of credit, the receiver stopped: it
     * takes what it was sent once it progresses again */
    uint64_t fill()
    {
        uint64_t seed = 0;
        double deadline = now() + DEFAULT_TIMEOUT;
        int no_resource = 0;

        /* NO_RESOURCE must persist while the sender keeps progressing */
        while ((no_resource < 1000) && (now() < deadline)) {
            ucs_status_t status = send(seed + 1);
            if (status == UCS_OK) {
                ++seed;
                no_resource = 0;
            } else {
                EXPECT_EQ(UCS_ERR_NO_RESOURCE, status);
                ++no_resource;
            }
            m_sender->progress();
        }

        EXPECT_EQ(1000, no_resource) << "the ring never filled";
        return seed;
    }

    static ucs_status_t pending_send(uct_pending_req_t *self)
    {
        request *req = ucs_container_of(self, request, super);
        ucs_status_t status;

        ++req->calls;
        status = req->test->send(req->seed);
        return (status == UCS_ERR_NO_RESOURCE) ? UCS_ERR_BUSY : status;
    }

    std::vector<request> make_requests(uint64_t first, size_t count)
    {
        std::vector<request> reqs(count);

        for (size_t i = 0; i < count; ++i) {
            reqs[i].super.func = pending_send;
            reqs[i].test       = this;
            reqs[i].seed       = first + i;
            reqs[i].calls      = 0;
        }

        return reqs;
    }

    entity               *m_sender   = nullptr;
    entity               *m_receiver = nullptr;
    uct_ep_h             m_ep        = nullptr;
    struct held_message {
        void     *data;
        size_t   length;
        uint64_t seed;
    };

    bool                 m_hold      = false;
    size_t               m_copied    = 0;
    std::vector<uint64_t> m_seeds;
    std::vector<held_message> m_held;
};


TEST_F(test_uct_pending, busy_when_ep_can_send)
{
    uct_pending_req_t req = {};

    req.func = [](uct_pending_req_t*) { return UCS_OK; };
    EXPECT_EQ(UCS_ERR_BUSY, uct_ep_pending_add(m_ep, &req, 0));
    EXPECT_EQ(UCS_OK, uct_ep_flush(m_ep, 0, NULL));
    EXPECT_EQ(UCS_OK, uct_iface_flush(m_sender->iface, 0, NULL));
}

TEST_F(test_uct_pending, fill_then_pending_fires_in_order)
{
    const size_t nreqs = 10;
    uint64_t sent      = fill();

    ASSERT_GT(sent, 4u);
    EXPECT_TRUE(m_seeds.empty());

    std::vector<request> reqs = make_requests(sent + 1, nreqs);
    for (auto &req : reqs) {
        ASSERT_EQ(UCS_OK, uct_ep_pending_add(m_ep, &req.super, 0));
    }

    /* queued requests: flush cannot complete */
    EXPECT_EQ(UCS_ERR_NO_RESOURCE, uct_ep_flush(m_ep, 0, NULL));
    EXPECT_EQ(UCS_INPROGRESS, uct_iface_flush(m_sender->iface, 0, NULL));

    /* nothing moves while the receiver is stopped */
    for (int i = 0; i < 10000; ++i) {
        m_sender->progress();
    }
    EXPECT_TRUE(m_seeds.empty());
    EXPECT_NE(UCS_OK, uct_ep_flush(m_ep, 0, NULL));

    ASSERT_TRUE(wait_for([&]() { return m_seeds.size() == sent + nreqs; }))
            << "pending requests did not fire: " << m_seeds.size() - sent
            << " of " << nreqs;
    for (size_t i = 0; i < sent + nreqs; ++i) {
        EXPECT_EQ(i + 1, m_seeds[i]);
    }
    for (auto &req : reqs) {
        EXPECT_GE(req.calls, 1);
    }

    EXPECT_TRUE(wait_for([&]() {
        return (uct_ep_flush(m_ep, 0, NULL) == UCS_OK) &&
               (uct_iface_flush(m_sender->iface, 0, NULL) == UCS_OK);
    }));
    EXPECT_EQ(UCS_OK, retry([&]() { return send(sent + nreqs + 1); }));
}

TEST_F(test_uct_pending, purge)
{
    uint64_t sent = fill();
    std::vector<request> reqs = make_requests(sent + 1, 7);
    size_t purged = 0;

    for (auto &req : reqs) {
        ASSERT_EQ(UCS_OK, uct_ep_pending_add(m_ep, &req.super, 0));
    }

    uct_ep_pending_purge(
            m_ep,
            [](uct_pending_req_t *self, void *arg) {
                request *req = ucs_container_of(self, request, super);
                EXPECT_EQ(0, req->calls);
                ++*(size_t*)arg;
            },
            &purged);
    EXPECT_EQ(reqs.size(), purged);
    EXPECT_EQ(UCS_OK, uct_ep_flush(m_ep, 0, NULL));
    EXPECT_EQ(UCS_OK, uct_iface_flush(m_sender->iface, 0, NULL));

    /* purged requests never fire */
    for (int i = 0; i < 10000; ++i) {
        progress();
    }
    EXPECT_EQ(sent, m_seeds.size());
    for (auto &req : reqs) {
        EXPECT_EQ(0, req.calls);
    }

    /* purge of an empty queue, and with no callback */
    uct_ep_pending_purge(m_ep, NULL, NULL);
    EXPECT_EQ(UCS_OK, retry([&]() { return send(sent + 1); }));
}

/* destroying an endpoint with requests still queued drops them with a
 * warning, never calls them, and leaves the interface usable */
TEST_F(test_uct_pending, destroy_with_pending)
{
    uint64_t sent = fill();
    std::vector<request> reqs = make_requests(sent + 1, 5);

    for (auto &req : reqs) {
        ASSERT_EQ(UCS_OK, uct_ep_pending_add(m_ep, &req.super, 0));
    }

    {
        scoped_log_capture log;
        m_sender->ep_destroy(m_ep);
        m_ep = nullptr;
        EXPECT_TRUE(log.contains("cancelling user pending request"))
                << log.all();
    }

    for (int i = 0; i < 10000; ++i) {
        progress();
    }
    for (auto &req : reqs) {
        EXPECT_EQ(0, req.calls);
    }
    EXPECT_EQ(sent, m_seeds.size());
    EXPECT_EQ(UCS_OK, uct_iface_flush(m_sender->iface, 0, NULL));

    /* the sender connects again and is heard */
    m_ep = connect(m_sender, m_receiver);
    ASSERT_NE(nullptr, m_ep);
    EXPECT_EQ(UCS_OK, retry([&]() { return send(sent + 1); }));
    EXPECT_TRUE(wait_for([&]() { return m_seeds.size() == sent + 1; }));
}

/* A receiver that keeps every message it may keep never stops its sender:
 * once the pool is nearly full, messages arrive to be copied instead (no
 * UCT_CB_PARAM_FLAG_DESC) and the ring flows on. Without that a receiver
 * waiting for a later message before it releases the held ones (an MPI
 * receive of unexpected messages) deadlocks with its sender. */
TEST_F(test_uct_pending, holds_never_stop_the_sender)
{
    const uint64_t count = 2000;
    uint64_t sent        = 0;

    m_hold = true;
    while (sent < count) {
        ASSERT_EQ(UCS_OK, retry([&]() { return send(sent + 1); }))
                << "the sender stopped after " << sent << " messages, "
                << m_held.size() << " held";
        ++sent;
    }

    ASSERT_TRUE(wait_for([&]() { return m_seeds.size() == count; }));
    EXPECT_GT(m_held.size(), 0u) << "nothing was kept in place";
    EXPECT_LT(m_held.size(), count) << "everything was kept in place";
    EXPECT_GT(m_copied, 0u);
    for (uint64_t i = 0; i < count; ++i) {
        EXPECT_EQ(i + 1, m_seeds[i]);
    }
    /* the held ones are intact (checked at release) */
    release_all();
}

/* A new endpoint on the shm wire sends at once, into a ring the receiver
 * made in advance. On the cma wire, before the receiver progressed, it
 * cannot: its request waits in the queue and fires once the ring exists (a
 * receiver of its own: the pool of m_receiver is small) */
TEST_F(test_uct_pending, pending_until_connected)
{
    entity *shm_sender = create_entity();
    entity *sender2    = create_entity({{"WIRE", "cma"}});
    entity *receiver2  = create_entity();
    uct_ep_h ep2, shm_ep;
    request req        = {};

    ASSERT_NE(nullptr, receiver2);
    ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(receiver2->iface, AM_ID,
                                               am_handler, this, 0));
    ASSERT_EQ(UCS_OK, shm_sender->ep_create(receiver2->dev_addr.data(),
                                            receiver2->iface_addr.data(),
                                            &shm_ep));
    EXPECT_EQ(UCS_OK, uct_ep_am_short(shm_ep, AM_ID, 76, NULL, 0));
    ASSERT_TRUE(wait_for([&]() { return !m_seeds.empty(); }));
    EXPECT_EQ(76u, m_seeds[0]);
    m_seeds.clear();

    ASSERT_EQ(UCS_OK, sender2->ep_create(receiver2->dev_addr.data(),
                                         receiver2->iface_addr.data(),
                                         &ep2));
    EXPECT_EQ(UCS_ERR_NO_RESOURCE, uct_ep_am_short(ep2, AM_ID, 0, NULL, 0));

    req.super.func = [](uct_pending_req_t *self) {
        request *r = ucs_container_of(self, request, super);
        ++r->calls;
        return uct_ep_am_short((uct_ep_h)r->test, AM_ID, 77, NULL, 0);
    };
    req.test = (test_uct_pending*)ep2;
    ASSERT_EQ(UCS_OK, uct_ep_pending_add(ep2, &req.super, 0));
    /* on failure, never leave the local request queued */
    std::shared_ptr<void> purge(nullptr, [ep2](void*) {
        uct_ep_pending_purge(ep2, NULL, NULL);
    });
    ASSERT_TRUE(wait_for([&]() { return !m_seeds.empty(); }));
    EXPECT_EQ(77u, m_seeds[0]);
    EXPECT_EQ(1, req.calls);
}

} // namespace
