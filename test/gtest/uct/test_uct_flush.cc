/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * Flush and close always complete. The sender loads its endpoint with AM
 * short, bcopy and zcopy, put and get zcopy of 48 KiB, until the ring is out
 * of credit, then queues pending requests; then
 * - uct_ep_flush (queued behind the pending requests when they exist) and
 *   uct_iface_flush complete, and everything arrives in order, with and
 *   without an endpoint back from the receiver;
 * - against a receiver whose interface closed (its process lives on) or
 *   whose process was killed, the error handler runs, the pending requests
 *   are purged from it, and both flushes complete;
 * - destroying the endpoint in each of those states returns at once.
 * Every wait is bounded; a hang fails the test.
 */

#include "common/uct_fixture.h"

#include <cstring>
#include <deque>
#include <set>

#include <sys/wait.h>
#include <unistd.h>

using namespace remapring_test;

namespace {

static const uint8_t AM_ID        = 6;
static const size_t  RMA_SIZE     = 48 * 1024;
static const size_t  BCOPY_SIZE   = 1024;
static const size_t  ZCOPY_SIZE   = 4096;
static const int     NUM_PENDING  = 16;

class test_uct_flush : public uct_fixture {
protected:
    struct request {
        uct_pending_req_t super;
        test_uct_flush    *test;
        uct_ep_h          ep;
        uint64_t          seq;
        int               calls;
    };

    struct flush_request {
        uct_pending_req_t super;
        uct_ep_h          ep;
        uct_completion_t  comp;
    };

    void SetUp() override
    {
        uct_fixture::SetUp();
        if (IsSkipped()) {
            return;
        }

        m_sender = create_entity({}, 0, err_handler, this);
        ASSERT_NE(nullptr, m_sender);
        m_local.resize(RMA_SIZE, 0x3c);
        m_remote.resize(RMA_SIZE);
    }

    void TearDown() override
    {
        if (m_have_rkey) {
            uct_rkey_release(m_component, &m_rkey);
        }
        if (m_memh != nullptr) {
            uct_md_mem_dereg(m_receiver->md, m_memh);
        }
        uct_fixture::TearDown();
    }

    /* A receiver in this process, its remote buffer registered */
    void make_receiver()
    {
        m_receiver = create_entity();
        ASSERT_NE(nullptr, m_receiver);
        ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(m_receiver->iface, AM_ID,
                                                   am_handler, this, 0));
        ASSERT_EQ(UCS_OK, uct_md_mem_reg(m_receiver->md, m_remote.data(),
                                         m_remote.size(),
                                         UCT_MD_MEM_ACCESS_ALL, &m_memh));
        std::vector<char> packed(m_receiver->md_attr.rkey_packed_size);
        ASSERT_EQ(UCS_OK, uct_md_mkey_pack(m_receiver->md, m_memh,
                                           packed.data()));
        ASSERT_EQ(UCS_OK,
                  uct_rkey_unpack(m_component, packed.data(), &m_rkey));
        m_have_rkey = true;
        m_ep        = connect(m_sender, m_receiver);
        ASSERT_NE(nullptr, m_ep);
    }

    static ucs_status_t am_handler(void *arg, void *data, size_t length,
                                   unsigned flags)
    {
        test_uct_flush *self = (test_uct_flush*)arg;
        uint64_t seq;

        memcpy(&seq, data, sizeof(seq));
        self->m_received.push_back(seq);
        return UCS_OK;
    }

    static ucs_status_t err_handler(void *arg, uct_ep_h ep,
                                    ucs_status_t status)
    {
        test_uct_flush *self = (test_uct_flush*)arg;

        EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT, status);
        ++self->m_errors;
        /* as UCP does: the queued requests will never go */
        uct_ep_pending_purge(ep, purge_cb, self);
        return UCS_OK;
    }

    static void purge_cb(uct_pending_req_t *req, void *arg)
    {
        ((test_uct_flush*)arg)->m_purged.insert(req);
    }

    /* every request of @a reqs was purged, and never called */
    void check_purged(const std::vector<request> &reqs) const
    {
        for (auto &req : reqs) {
            EXPECT_EQ(1u, m_purged.count((uct_pending_req_t*)&req.super));
            EXPECT_EQ(0, req.calls);
        }
    }

    static size_t pack_cb(void *dest, void *arg)
    {
        uint64_t seq = *(uint64_t*)arg;

        memset(dest, 0x5a, BCOPY_SIZE);
        memcpy(dest, &seq, sizeof(seq));
        return BCOPY_SIZE;
    }

    /* One of each operation; the AMs carry @a seq (one number each) */
    ucs_status_t send_one(uct_ep_h ep, uint64_t *seq, size_t op)
    {
        std::vector<uint8_t> buf(ZCOPY_SIZE, 0xa5);
        uct_iov_t iov = {buf.data(), buf.size(), UCT_MEM_HANDLE_NULL, 0, 1};
        uct_iov_t rma = {m_local.data(), m_local.size(), UCT_MEM_HANDLE_NULL,
                         0, 1};
        ucs_status_t status;
        ssize_t packed;

        switch (op % 5) {
        case 0:
            status = uct_ep_am_short(ep, AM_ID, *seq, buf.data(), 8);
            break;
        case 1:
            packed = uct_ep_am_bcopy(ep, AM_ID, pack_cb, seq, 0);
            status = (packed < 0) ? (ucs_status_t)packed : UCS_OK;
            break;
        case 2:
            status = uct_ep_am_zcopy(ep, AM_ID, seq, sizeof(*seq), &iov, 1,
                                     0, NULL);
            break;
        case 3:
            return uct_ep_put_zcopy(ep, &rma, 1, (uintptr_t)m_remote.data(),
                                    m_rkey.rkey, NULL);
        default:
            return uct_ep_get_zcopy(ep, &rma, 1, (uintptr_t)m_remote.data(),
                                    m_rkey.rkey, NULL);
        }

        if (status == UCS_OK) {
            ++*seq;
        }
        return status;
    }

    /* Send every kind of operation until the ring is out of credit (the
     * receiver is not progressed meanwhile); then queue NUM_PENDING
     * requests. Returns how many AMs went. */
    uint64_t load(uct_ep_h ep, std::vector<request> *reqs)
    {
        uint64_t seq = 0;
        ucs_status_t status;

        for (size_t op = 0;; ++op) {
            status = send_one(ep, &seq, op);
            if (status == UCS_ERR_NO_RESOURCE) {
                break;
            }
            EXPECT_EQ(UCS_OK, status);
            if ((status != UCS_OK) || (op > 1000000)) {
                break;
            }
        }

        /* the smallest records fill what is left: then not even the
         * pending requests' fit */
        while (uct_ep_am_short(ep, AM_ID, seq, NULL, 0) == UCS_OK) {
            ++seq;
        }

        reqs->resize(NUM_PENDING);
        for (int i = 0; i < NUM_PENDING; ++i) {
            request &req   = (*reqs)[i];
            req.super.func = [](uct_pending_req_t *self) {
                request *r = ucs_container_of(self, request, super);
                ++r->calls;
                return uct_ep_am_short(r->ep, AM_ID, r->seq, NULL, 0);
            };
            req.test  = this;
            req.ep    = ep;
            req.seq   = seq + i;
            req.calls = 0;
            EXPECT_EQ(UCS_OK, uct_ep_pending_add(ep, &req.super, 0));
        }

        return seq;
    }

    /* uct_ep_flush with a completion; queued as a pending request when it
     * must wait behind others. Returns when it completed or failed. */
    bool flush_ep(uct_ep_h ep, double timeout = DEFAULT_TIMEOUT)
    {
        flush_request req;
        ucs_status_t status;

        req.ep          = ep;
        req.comp.count  = 2;
        req.comp.status = UCS_OK;
        req.comp.func   = NULL;
        req.super.func  = [](uct_pending_req_t *self) {
            flush_request *r = ucs_container_of(self, flush_request, super);
            ucs_status_t st  = uct_ep_flush(r->ep, 0, &r->comp);

            if (st == UCS_OK) {
                --r->comp.count;
            } else if (st != UCS_INPROGRESS) {
                return st;
            }
            return UCS_OK;
        };

        status = uct_ep_flush(ep, 0, &req.comp);
        if (status == UCS_OK) {
            return true;
        } else if (status == UCS_ERR_NO_RESOURCE) {
            status = uct_ep_pending_add(ep, &req.super, 0);
            if (status == UCS_ERR_BUSY) {
                return wait_for([&]() {
                    return uct_ep_flush(ep, 0, NULL) == UCS_OK;
                }, timeout);
            }
            EXPECT_EQ(UCS_OK, status);
        } else if (status != UCS_INPROGRESS) {
            return UCS_STATUS_IS_ERR(status);
        }

        /* a purge by the error handler also ends the wait */
        return wait_for([&]() {
            return (req.comp.count == 1) || m_purged.count(&req.super);
        }, timeout);
    }

    bool flush_iface(entity *e)
    {
        return wait_for([&]() {
            return uct_iface_flush(e->iface, 0, NULL) == UCS_OK;
        });
    }

    /* every AM of [0, count) arrived, in order */
    void check_received(uint64_t count)
    {
        ASSERT_TRUE(wait_for([&]() { return m_received.size() >= count; }));
        ASSERT_EQ(count, m_received.size());
        for (uint64_t i = 0; i < count; ++i) {
            ASSERT_EQ(i, m_received[i]);
        }
    }

    entity               *m_sender   = nullptr;
    entity               *m_receiver = nullptr;
    uct_ep_h             m_ep        = nullptr;
    uct_mem_h            m_memh      = nullptr;
    uct_rkey_bundle_t    m_rkey      = {};
    bool                 m_have_rkey = false;
    std::vector<uint8_t> m_local;
    std::vector<uint8_t> m_remote;
    std::deque<uint64_t> m_received;
    int                  m_errors    = 0;
    std::set<uct_pending_req_t*> m_purged;
};

TEST_F(test_uct_flush, ep_and_iface_flush_with_everything_outstanding)
{
    std::vector<request> reqs;

    make_receiver();
    uint64_t sent = load(m_ep, &reqs);
    ASSERT_GT(sent, 0u);

    /* the flush waits behind the pending requests, which wait for credit */
    EXPECT_TRUE(flush_ep(m_ep)) << "ep flush did not complete";
    EXPECT_TRUE(flush_iface(m_sender)) << "iface flush did not complete";
    for (auto &req : reqs) {
        EXPECT_EQ(1, req.calls);
    }
    check_received(sent + NUM_PENDING);
    EXPECT_EQ(0, m_errors);
    EXPECT_TRUE(m_remote == m_local);
}

TEST_F(test_uct_flush, with_an_endpoint_back)
{
    std::vector<request> reqs;

    make_receiver();
    uct_ep_h back = connect(m_receiver, m_sender);
    ASSERT_NE(nullptr, back);
    ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(
                              m_sender->iface, AM_ID,
                              [](void*, void*, size_t, unsigned) {
                                  return UCS_OK;
                              },
                              NULL, 0));

    /* both directions loaded at once, neither side progressed */
    uint64_t sent = load(m_ep, &reqs);
    uint64_t back_seq = 0;
    while (uct_ep_am_short(back, AM_ID, back_seq, NULL, 0) == UCS_OK) {
        ++back_seq;
    }

    EXPECT_TRUE(flush_ep(m_ep));
    EXPECT_TRUE(flush_ep(back));
    EXPECT_TRUE(flush_iface(m_sender));
    EXPECT_TRUE(flush_iface(m_receiver));
    check_received(sent + NUM_PENDING);
}

TEST_F(test_uct_flush, destroy_with_everything_outstanding)
{
    std::vector<request> reqs;

    make_receiver();
    uint64_t sent = load(m_ep, &reqs);
    {
        scoped_log_capture log;
        double start = now();
        m_sender->ep_destroy(m_ep);
        EXPECT_LT(now() - start, 1.0);
    }
    m_ep = nullptr;

    /* the receiver drains what was published before the close */
    check_received(sent);
    for (auto &req : reqs) {
        EXPECT_EQ(0, req.calls);
    }
    EXPECT_TRUE(flush_iface(m_sender));
}

/* The receiving interface closes, its process lives on (a UCP worker
 * destroyed): a failed peer */
TEST_F(test_uct_flush, receiver_interface_closed)
{
    std::vector<request> reqs;
    scoped_log_capture log;

    make_receiver();
    load(m_ep, &reqs);
    uct_rkey_release(m_component, &m_rkey);
    m_have_rkey = false;
    uct_md_mem_dereg(m_receiver->md, m_memh);
    m_memh = nullptr;
    m_entities.erase(std::find_if(m_entities.begin(), m_entities.end(),
                                  [&](const std::unique_ptr<entity> &e) {
                                      return e.get() == m_receiver;
                                  }));
    m_receiver = nullptr;

    EXPECT_TRUE(flush_ep(m_ep)) << "ep flush did not complete";
    EXPECT_TRUE(wait_for([&]() { return m_errors > 0; }))
            << "no error handler call";
    EXPECT_EQ(1, m_errors);
    check_purged(reqs);
    EXPECT_TRUE(flush_iface(m_sender));
    EXPECT_EQ(UCS_OK, uct_ep_flush(m_ep, 0, NULL));
    EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT,
              uct_ep_am_short(m_ep, AM_ID, 0, NULL, 0));

    double start = now();
    m_sender->ep_destroy(m_ep);
    m_ep = nullptr;
    EXPECT_LT(now() - start, 1.0);
}

/* The receiver process is killed with the ring full and requests pending:
 * found within a second, then everything completes */
TEST_F(test_uct_flush, receiver_killed)
{
    std::vector<request> reqs;
    std::vector<char> addr;
    int cmd;
    uct_ep_h ep;

    fork_receiver({}, &addr, &cmd);
    size_t dev_len = m_sender->attr.device_addr_len;
    ASSERT_EQ(UCS_OK, m_sender->ep_create(addr.data(), addr.data() + dev_len,
                                          &ep));
    ASSERT_EQ(UCS_OK, retry([&]() {
                  return uct_ep_am_short(ep, AM_ID, 0, NULL, 0);
              }));
    /* stop the receiver: the ring fills */
    ASSERT_EQ(1, write(cmd, "s", 1));
    uint64_t seq = 1;
    while (uct_ep_am_short(ep, AM_ID, seq, NULL, 0) == UCS_OK) {
        ++seq;
    }

    reqs.resize(NUM_PENDING);
    for (auto &req : reqs) {
        req.super.func = [](uct_pending_req_t *self) {
            request *r = ucs_container_of(self, request, super);
            ++r->calls;
            return uct_ep_am_short(r->ep, AM_ID, r->seq, NULL, 0);
        };
        req.ep    = ep;
        req.seq   = seq;
        req.calls = 0;
        ASSERT_EQ(UCS_OK, uct_ep_pending_add(ep, &req.super, 0));
    }

    scoped_log_capture log;
    kill_child(m_children.back());
    double start = now();
    EXPECT_TRUE(flush_ep(ep, 1.0)) << "ep flush did not complete";
    EXPECT_TRUE(wait_for([&]() { return m_errors > 0; }, 1.0))
            << "killed receiver not found within a second";
    EXPECT_LT(now() - start, 1.5);
    check_purged(reqs);
    EXPECT_TRUE(flush_iface(m_sender));

    start = now();
    m_sender->ep_destroy(ep);
    EXPECT_LT(now() - start, 1.0);
    close(cmd);
}

} // namespace
