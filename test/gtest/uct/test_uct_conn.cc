/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * The connection protocol's races, driven step by step through
 * remapring_sm_ctl.h: the receiver's control area and the senders' claims in
 * one process, each interleaving written out in the order the test names.
 *
 * A receiver makes rings in advance on FREE slots (offers) while senders
 * claim FREE slots: an offer that saw a slot FREE must not overwrite the
 * claim of a sender that took it since, or that sender finds its connection
 * released (UCS_ERR_CONNECTION_RESET) while the receiver lives on. Nor may
 * the receiver's accept (READY) or failure (FAILED) overwrite a sender's
 * close, and a doorbell bit left from a slot's previous sender must not
 * make the receiver take a new claim before its sender filled it in.
 */

#include "common/uct_fixture.h"

extern "C" {
#include <uct/ib/remapring/sm/remapring_sm_ctl.h>
}

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

using namespace remapring_test;

namespace {

class test_uct_conn : public uct_fixture {
protected:
    static const unsigned MAX_PEERS  = 4;
    static const unsigned RING_SLOTS = 4;
    static const uint64_t IFACE_ID   = 0x636f6e6e74657374ull;

    void SetUp() override
    {
        uct_fixture::SetUp();
        if (IsSkipped()) {
            return;
        }

        uct_remapring_ctl_params_t params = {};
        params.max_peers   = MAX_PEERS;
        params.ring_slots  = RING_SLOTS;
        params.iface_id    = IFACE_ID;
        params.block_size  = 4096;
        params.pool_fd     = -1;
        params.pool_blocks = 0;
        ASSERT_EQ(UCS_OK, uct_remapring_ctl_create(&params, &m_area));
        m_area_made = true;
        ASSERT_EQ(UCS_OK, uct_remapring_watch_init(&m_watch));
        m_watch_made = true;
    }

    void TearDown() override
    {
        for (auto &m : m_ctl_maps) {
            munmap(m.first, m.second);
        }
        m_ctl_maps.clear();
        for (auto &remote : m_remotes) {
            uct_remapring_remote_detach(remote.get(), &m_watch, 0);
        }
        m_remotes.clear();
        if (m_watch_made) {
            uct_remapring_watch_cleanup(&m_watch);
        }
        if (m_area_made) {
            uct_remapring_ctl_destroy(&m_area);
        }
        uct_fixture::TearDown();
    }

    static void no_exit_cb(uct_remapring_proc_t*)
    {
    }

    /* A sender attached to our control area, not yet connected */
    uct_remapring_remote_t *attach()
    {
        uct_remapring_iface_addr_t addr = {};
        std::unique_ptr<uct_remapring_remote_t> remote(
                new uct_remapring_remote_t());

        addr.pid      = getpid();
        addr.ctl_fd   = m_area.fd;
        addr.iface_id = IFACE_ID;
        if (uct_remapring_remote_attach(&addr, &m_watch, no_exit_cb,
                                        remote.get()) != UCS_OK) {
            ADD_FAILURE() << "attach failed";
            return nullptr;
        }

        m_remotes.push_back(std::move(remote));
        return m_remotes.back().get();
    }

    /* A sender on @a wire that claimed a connection */
    uct_remapring_remote_t *claim(uct_remapring_wire_type_t wire)
    {
        uct_remapring_remote_t *remote = attach();

        if ((remote != nullptr) &&
            (uct_remapring_remote_claim(remote, m_remotes.size(), wire) !=
             UCS_OK)) {
            ADD_FAILURE() << "claim failed";
            return nullptr;
        }
        return remote;
    }

    /* The control area of receiver @a rx, mapped as a sender maps it;
     * unmapped at TearDown. nullptr (and a failure) if it cannot be */
    uct_remapring_ctl_t *map_ctl(const entity *rx)
    {
        auto *addr = (const uct_remapring_iface_addr_t*)rx->iface_addr.data();
        struct stat st;

        if (fstat(addr->ctl_fd, &st) != 0) {
            ADD_FAILURE() << "fstat of the control area: " << strerror(errno);
            return nullptr;
        }
        void *map = mmap(NULL, st.st_size, PROT_READ | PROT_WRITE,
                         MAP_SHARED, addr->ctl_fd, 0);
        if (map == MAP_FAILED) {
            ADD_FAILURE() << "mmap of the control area: " << strerror(errno);
            return nullptr;
        }
        m_ctl_maps.emplace_back(map, st.st_size);
        return (uct_remapring_ctl_t*)map;
    }

    uct_remapring_conn_state_t state(unsigned index)
    {
        return uct_remapring_conn_state(&m_area.conns[index]);
    }

    /* The sender's view of its connection: UCS_INPROGRESS until accepted */
    static ucs_status_t sender_state(const uct_remapring_remote_t *remote,
                                     std::string *reason_p)
    {
        const char *reason = "";
        ucs_status_t status = uct_remapring_remote_state(remote, &reason);

        *reason_p = reason;
        return status;
    }

    uct_remapring_ctl_area_t m_area       = {};
    uct_remapring_watch_t    m_watch      = {};
    bool                     m_area_made  = false;
    bool                     m_watch_made = false;
    std::vector<std::unique_ptr<uct_remapring_remote_t>> m_remotes;
    std::vector<std::pair<void*, size_t>> m_ctl_maps;
};


/* The receiver sees slot 0 FREE and starts an offer on it; a sender claims
 * a FREE slot before the ring is made; the offer ends. The sender's claim
 * stands (on another slot), and the offer is taken by the next sender. */
TEST_F(test_uct_conn, claim_during_offer)
{
    for (auto wire : {UCT_REMAPRING_WIRE_CMA, UCT_REMAPRING_WIRE_SHM}) {
        SCOPED_TRACE(wire == UCT_REMAPRING_WIRE_CMA ? "cma" : "shm");
        ASSERT_EQ(UCT_REMAPRING_CONN_FREE, state(0));
        ASSERT_TRUE(uct_remapring_ctl_offer_begin(&m_area, 0));

        /* a sender of either wire finds no offer yet, and claims */
        uct_remapring_remote_t *sender = claim(wire);
        ASSERT_NE(nullptr, sender);
        EXPECT_NE(0u, sender->index);

        /* the ring is made: the offer ends */
        uct_remapring_ctl_offer_end(&m_area, 0, 1);
        std::string reason;
        EXPECT_EQ(UCS_INPROGRESS, sender_state(sender, &reason)) << reason;
        EXPECT_EQ(UCT_REMAPRING_CONN_CLAIMED, state(sender->index));
        EXPECT_EQ(getpid(), m_area.conns[sender->index].sender_pid);
        EXPECT_EQ(UCT_REMAPRING_CONN_OFFERED, state(0));

        /* the next sender on the shm wire takes the offer */
        uct_remapring_remote_t *taker = claim(UCT_REMAPRING_WIRE_SHM);
        ASSERT_NE(nullptr, taker);
        EXPECT_EQ(0u, taker->index);
        EXPECT_EQ(UCS_OK, sender_state(taker, &reason)) << reason;

        /* both close; the receiver frees both slots */
        uct_remapring_ctl_release(&m_area, sender->index);
        uct_remapring_ctl_release(&m_area, taker->index);
        for (auto &remote : m_remotes) {
            uct_remapring_remote_detach(remote.get(), &m_watch, 0);
        }
        m_remotes.clear();
    }
}

/* A sender claims slot 0, which the receiver saw FREE just before: the
 * offer does not start, and the claim stands */
TEST_F(test_uct_conn, claim_before_offer)
{
    ASSERT_EQ(UCT_REMAPRING_CONN_FREE, state(0));
    uct_remapring_remote_t *sender = claim(UCT_REMAPRING_WIRE_CMA);
    ASSERT_NE(nullptr, sender);
    ASSERT_EQ(0u, sender->index);

    EXPECT_FALSE(uct_remapring_ctl_offer_begin(&m_area, 0));
    std::string reason;
    EXPECT_EQ(UCS_INPROGRESS, sender_state(sender, &reason)) << reason;
    EXPECT_EQ(UCT_REMAPRING_CONN_CLAIMED, state(0));
}

/* An offer whose ring could not be made gives the slot back FREE */
TEST_F(test_uct_conn, offer_not_made)
{
    ASSERT_TRUE(uct_remapring_ctl_offer_begin(&m_area, 0));
    EXPECT_EQ(UCT_REMAPRING_CONN_OFFERING, state(0));
    uct_remapring_ctl_offer_end(&m_area, 0, 0);
    EXPECT_EQ(UCT_REMAPRING_CONN_FREE, state(0));

    uct_remapring_remote_t *sender = claim(UCT_REMAPRING_WIRE_CMA);
    ASSERT_NE(nullptr, sender);
    EXPECT_EQ(0u, sender->index);
}

/* The receiver accepts (READY) or fails (FAILED) a claimed slot while its
 * sender closes it (CLOSED, or RESET after a cancelling flush): the close
 * stands, RESET is read as a CLOSED that was reset, and the slot is freed
 * on the sender's doorbell instead of staying until the sender exits */
TEST_F(test_uct_conn, close_during_accept_or_fail)
{
    static const struct {
        int                        reset;
        uct_remapring_conn_state_t to;
    } cases[] = {{0, UCT_REMAPRING_CONN_READY}, {0, UCT_REMAPRING_CONN_FAILED},
                 {1, UCT_REMAPRING_CONN_READY}, {1, UCT_REMAPRING_CONN_FAILED}};

    for (const auto &c : cases) {
        int reset                      = c.reset;
        uct_remapring_conn_state_t to  = c.to;
        uct_remapring_remote_t *sender = claim(UCT_REMAPRING_WIRE_CMA);
        ASSERT_NE(nullptr, sender);
        unsigned index = sender->index;

        /* the sender closes between the receiver's look and its store */
        uct_remapring_remote_detach(sender, &m_watch, reset);
        m_remotes.pop_back();
        ASSERT_EQ(UCT_REMAPRING_CONN_CLOSED, state(index));
        EXPECT_EQ(reset, uct_remapring_conn_was_reset(&m_area.conns[index]));
        EXPECT_EQ(UCT_REMAPRING_CONN_CLOSED,
                  uct_remapring_ctl_set_unless_closed(&m_area, index, to));
        EXPECT_EQ(UCT_REMAPRING_CONN_CLOSED, state(index));
        EXPECT_EQ(reset, uct_remapring_conn_was_reset(&m_area.conns[index]));
        uct_remapring_ctl_release(&m_area, index);
        EXPECT_FALSE(uct_remapring_conn_was_reset(&m_area.conns[index]));

        /* without a close, the move happens */
        sender = claim(UCT_REMAPRING_WIRE_CMA);
        ASSERT_NE(nullptr, sender);
        EXPECT_EQ(UCT_REMAPRING_CONN_CLAIMED,
                  uct_remapring_ctl_set_unless_closed(&m_area, sender->index,
                                                      to));
        EXPECT_EQ(to, state(sender->index));
        index = sender->index;
        uct_remapring_remote_detach(sender, &m_watch, 0);
        m_remotes.pop_back();
        uct_remapring_ctl_release(&m_area, index);
    }
}

/* A receiving interface wakes for a doorbell bit of a slot that a sender
 * has claimed but not filled in yet (the bit was rung for the slot's
 * previous sender, which closed just before): it reads pid 0 and waits,
 * and accepts the claim once the sender's pid is written and its own
 * doorbell rings. Woken on the claim alone, it used to watch pid 0, find
 * it gone and free the slot under the sender. */
TEST_F(test_uct_conn, stale_doorbell_before_pid)
{
    entity *rx = create_entity();
    ASSERT_NE(nullptr, rx);
    auto *ctl       = map_ctl(rx);
    ASSERT_NE(nullptr, ctl);
    unsigned peers  = ctl->max_peers;
    auto *conns     = uct_remapring_ctl_conns(ctl, peers);
    unsigned index  = peers;
    for (unsigned i = 0; i < peers; ++i) {
        if (uct_remapring_conn_state(&conns[i]) == UCT_REMAPRING_CONN_FREE) {
            index = i;
            break;
        }
    }
    ASSERT_LT(index, peers);
    uct_remapring_conn_t *conn = &conns[index];
    EXPECT_EQ(0, conn->sender_pid) << "a FREE slot names no sender";

    auto ring_bell = [&]() {
        __atomic_fetch_or(&ctl->active[index / 64], 1ull << (index % 64),
                          __ATOMIC_RELEASE);
        __atomic_fetch_or(&ctl->summary, 1ull << (index / 64),
                          __ATOMIC_RELEASE);
    };

    /* claimed, the stale bit processed before the pid is written */
    uint32_t free_state = UCT_REMAPRING_CONN_FREE;
    ASSERT_TRUE(__atomic_compare_exchange_n(&conn->state, &free_state,
                                            UCT_REMAPRING_CONN_CLAIMED, 0,
                                            __ATOMIC_ACQ_REL,
                                            __ATOMIC_RELAXED));
    ring_bell();
    for (int i = 0; i < 100; ++i) {
        rx->progress();
    }
    EXPECT_EQ(UCT_REMAPRING_CONN_CLAIMED, uct_remapring_conn_state(conn));

    /* the claim completes: id, wire, then the pid, then its doorbell */
    conn->sender_id = 0x5741;
    conn->wire      = UCT_REMAPRING_WIRE_CMA;
    __atomic_store_n(&conn->sender_pid, getpid(), __ATOMIC_RELEASE);
    ring_bell();
    EXPECT_TRUE(wait_for([&]() {
        return uct_remapring_conn_state(conn) == UCT_REMAPRING_CONN_READY;
    })) << "state " << uct_remapring_conn_state(conn);

    /* closed: the slot is freed, and names no sender again */
    __atomic_store_n(&conn->state, UCT_REMAPRING_CONN_CLOSED,
                     __ATOMIC_RELEASE);
    ring_bell();
    EXPECT_TRUE(wait_for([&]() {
        return uct_remapring_conn_state(conn) != UCT_REMAPRING_CONN_CLOSED;
    }));
    EXPECT_EQ(0, conn->sender_pid);
}

} // namespace

/* A sender reads its connection's armed word without a fence after it
 * publishes, so a record published while the receiver arms can miss its
 * bell: the sender reads armed before the receiver's store of it reaches
 * it. Here the sender finds armed cleared (the test clears it once the
 * receiver's ring sleeps), so it rings no bell; the receiver's sweep of its
 * sleeping rings finds the record. */
TEST_F(test_uct_conn, missed_bell_found_by_sweep)
{
    const uint8_t am_id = 5;
    static unsigned received;
    entity *rx = create_entity();
    ASSERT_NE(nullptr, rx);
    entity *tx = create_entity();
    ASSERT_NE(nullptr, tx);

    received = 0;
    ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(
                              rx->iface, am_id,
                              [](void *, void *, size_t,
                                 unsigned) -> ucs_status_t {
                                  ++received;
                                  return UCS_OK;
                              },
                              nullptr, 0));
    uct_ep_h ep = nullptr;
    ASSERT_EQ(UCS_OK, tx->ep_create(rx->dev_addr.data(),
                                    rx->iface_addr.data(), &ep));
    ASSERT_TRUE(wait_for([&]() {
        return uct_ep_am_short(ep, am_id, 1, NULL, 0) == UCS_OK;
    }));
    ASSERT_TRUE(wait_for([&]() { return received == 1; }));

    /* the receiver's control area, as the sender maps it */
    auto *ctl = map_ctl(rx);
    ASSERT_NE(nullptr, ctl);
    auto *conns = uct_remapring_ctl_conns(ctl, ctl->max_peers);
    uct_remapring_conn_t *conn = nullptr;
    for (unsigned i = 0; i < ctl->max_peers; ++i) {
        if (uct_remapring_conn_state(&conns[i]) == UCT_REMAPRING_CONN_READY) {
            conn = &conns[i];
        }
    }
    ASSERT_NE(nullptr, conn);

    /* the ring goes to sleep on its doorbell; the sender does not see it */
    EXPECT_TRUE(wait_for([&]() {
        return __atomic_load_n(&conn->armed, __ATOMIC_RELAXED) != 0;
    }));
    for (int i = 0; i < 100; ++i) {
        rx->progress();
    }
    __atomic_store_n(&conn->armed, 0, __ATOMIC_RELAXED);

    ASSERT_EQ(UCS_OK, uct_ep_am_short(ep, am_id, 2, NULL, 0));
    unsigned calls = 0;
    while ((received < 2) && (calls < 100000)) {
        rx->progress();
        ++calls;
    }
    EXPECT_EQ(2u, received) << "a record without its bell was lost";
    EXPECT_LE(calls, 17u) << "one sleeping ring: found within a sweep period";
}
