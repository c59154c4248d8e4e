/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * Peers that die, never a hang:
 * - a forked receiver killed with SIGKILL: the sender's next send fails,
 *   and uct_ep_check() makes the interface error handler
 *   (UCT_IFACE_PARAM_FIELD_ERR_HANDLER) run, also when the sender is out of
 *   credit with requests pending, and when the receiver dies before it made
 *   the ring;
 * - a forked sender killed with SIGKILL: its receiver (MAX_PEERS=1) frees
 *   the connection, so a new sender connects; messages it held from the dead
 *   sender stay intact until released. The same after an ordinary
 *   uct_ep_destroy(), and after a sender that closed right after writing a
 *   bad record;
 * - without pidfd_open (Linux before 5.3, seccomp, valgrind) the receiver
 *   still accepts senders and notices when they exit;
 * - two interfaces with endpoints to each other, one drops its endpoint
 *   after a cancelling flush (what UCP's force close does): the other's
 *   endpoint fails at its next uct_ep_check(), and only then; not after
 *   an ordinary destroy, nor once the first connected again.
 */

#include "common/uct_fixture.h"

extern "C" {
#include <uct/ib/remapring/sm/remapring_sm_ctl.h>
}

#include <cstring>

#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace remapring_test;

namespace {

static const uint8_t AM_ID = 4;

class test_uct_failure : public uct_fixture {
protected:
    void TearDown() override
    {
        for (void *desc : m_held) {
            uct_iface_release_desc(desc);
        }
        m_held.clear();
        uct_fixture::TearDown();
    }

    static ucs_status_t err_handler(void *arg, uct_ep_h ep,
                                    ucs_status_t status)
    {
        test_uct_failure *self = (test_uct_failure*)arg;

        EXPECT_NE(UCS_OK, status);
        ++self->m_errors;
        self->m_err_ep = ep;
        return UCS_OK;
    }

    static ucs_status_t am_keep(void *arg, void *data, size_t length,
                                unsigned flags)
    {
        test_uct_failure *self = (test_uct_failure*)arg;
        uint64_t seq;

        memcpy(&seq, data, sizeof(seq));
        EXPECT_EQ(-1, check_pattern((char*)data + 8, length - 8, seq));
        ++self->m_received;
        if (seq % 2) {
            return UCS_OK;
        }

        EXPECT_TRUE(flags & UCT_CB_PARAM_FLAG_DESC);
        self->m_held.push_back(data);
        return UCS_INPROGRESS;
    }

    /* A sender entity with the error handler and an ep to @a addr */
    uct_ep_h sender_to(const std::vector<char> &addr, entity **sender_p)
    {
        entity *sender = create_entity({{"WIRE", m_wire}}, 0, err_handler,
                                       this);
        uct_ep_h ep;

        EXPECT_NE(nullptr, sender);
        if (sender == nullptr) {
            return nullptr;
        }
        size_t dev_len = sender->attr.device_addr_len;
        EXPECT_EQ(UCS_OK, sender->ep_create(addr.data(),
                                            addr.data() + dev_len, &ep));
        *sender_p = sender;
        return ep;
    }

    ucs_status_t send(uct_ep_h ep, uint64_t seq, size_t length = 100)
    {
        std::vector<uint8_t> buf(length);

        fill_pattern(buf.data(), length, seq);
        return uct_ep_am_short(ep, AM_ID, seq, buf.data(), length);
    }

    std::string        m_wire     = "shm";
    std::vector<void*> m_held;
    int                m_errors   = 0;
    uct_ep_h           m_err_ep   = nullptr;
    size_t             m_received = 0;
};


/* The receiver-killed cases, for each wire the sender may use */
class test_uct_failure_wire : public test_uct_failure,
                              public testing::WithParamInterface<const char*> {
protected:
    void SetUp() override
    {
        m_wire = GetParam();
        test_uct_failure::SetUp();
    }
};

/* cma finds the receiver gone at the next write (ESRCH); shm writes into
 * memory that outlives it, so sends are taken until the ring is full and
 * then fail instead of waiting for credit forever */
TEST_P(test_uct_failure_wire, receiver_killed_send_fails)
{
    std::vector<char> addr;
    entity *sender;
    int cmd;

    fork_receiver({}, &addr, &cmd);
    uct_ep_h ep = sender_to(addr, &sender);
    ASSERT_NE(nullptr, ep);
    for (uint64_t seq = 0; seq < 100; ++seq) {
        ASSERT_EQ(UCS_OK, retry([&]() { return send(ep, seq); }));
    }
    EXPECT_EQ(0, m_errors);

    kill_child(m_children.back());
    scoped_log_capture log;
    uint64_t seq        = 100;
    ucs_status_t status;
    while ((status = retry([&]() { return send(ep, seq); })) == UCS_OK) {
        ++seq;
        ASSERT_LE(seq - 100, 16u * 65536 / 64)
                << "more sends to a dead receiver than its ring holds";
    }
    if (std::string(m_wire) == "cma") {
        EXPECT_EQ(100u, seq) << "send to a dead receiver succeeded";
    }
    EXPECT_NE(UCS_ERR_NO_RESOURCE, status) << "send to a dead receiver hangs";
    /* the failure is sticky */
    EXPECT_NE(UCS_OK, send(ep, 101));
    EXPECT_TRUE(wait_for([&]() {
        uct_ep_check(ep, 0, NULL);
        return m_errors > 0;
    })) << "error handler not called";
    EXPECT_EQ(ep, m_err_ep);
    close(cmd);
}

TEST_P(test_uct_failure_wire, receiver_killed_ep_check)
{
    std::vector<char> addr;
    entity *sender;
    int cmd;

    fork_receiver({}, &addr, &cmd);
    uct_ep_h ep = sender_to(addr, &sender);
    ASSERT_NE(nullptr, ep);
    ASSERT_EQ(UCS_OK, retry([&]() { return send(ep, 0); }));

    /* alive: a check reports nothing */
    EXPECT_EQ(UCS_OK, uct_ep_check(ep, 0, NULL));
    for (int i = 0; i < 1000; ++i) {
        progress();
    }
    EXPECT_EQ(0, m_errors);

    kill_child(m_children.back());
    scoped_log_capture log;
    EXPECT_EQ(UCS_OK, uct_ep_check(ep, 0, NULL));
    EXPECT_TRUE(wait_for([&]() { return m_errors > 0; }));
    EXPECT_EQ(ep, m_err_ep);
    close(cmd);
}

TEST_P(test_uct_failure_wire, receiver_killed_with_pending)
{
    std::vector<char> addr;
    entity *sender;
    int cmd;

    fork_receiver({}, &addr, &cmd);
    uct_ep_h ep = sender_to(addr, &sender);
    ASSERT_NE(nullptr, ep);
    ASSERT_EQ(UCS_OK, retry([&]() { return send(ep, 0); }));

    /* the receiver stops reading: the ring fills */
    ASSERT_EQ(1, write(cmd, "s", 1));
    usleep(10000);
    uint64_t seq = 1;
    double deadline = now() + DEFAULT_TIMEOUT;
    while ((send(ep, seq, 1000) == UCS_OK) && (now() < deadline)) {
        ++seq;
    }
    ASSERT_EQ(UCS_ERR_NO_RESOURCE, send(ep, seq, 1000));

    uct_pending_req_t req = {};
    int calls             = 0;
    req.func = [](uct_pending_req_t*) { return UCS_ERR_NO_RESOURCE; };
    ASSERT_EQ(UCS_OK, uct_ep_pending_add(ep, &req, 0));

    kill_child(m_children.back());
    scoped_log_capture log;
    EXPECT_EQ(UCS_OK, uct_ep_check(ep, 0, NULL));
    EXPECT_TRUE(wait_for([&]() { return m_errors > 0; }));
    uct_ep_pending_purge(
            ep, [](uct_pending_req_t*, void *arg) { ++*(int*)arg; }, &calls);
    EXPECT_EQ(1, calls);
    sender->ep_destroy(ep);
    close(cmd);
}

/* How interface b drops its endpoint to a, and what a's endpoint to b
 * then does at uct_ep_check() */
class test_uct_failure_reverse : public test_uct_failure_wire {
protected:
    /* a and b with endpoints to each other, a message each way taken */
    void pair()
    {
        m_a  = create_entity({{"WIRE", m_wire}}, 0, err_handler, this);
        m_b  = create_entity({{"WIRE", m_wire}}, 0, err_handler, this);
        ASSERT_NE(nullptr, m_a);
        ASSERT_NE(nullptr, m_b);
        m_ab = connect(m_a, m_b);
        m_ba = connect(m_b, m_a);
        ASSERT_NE(nullptr, m_ab);
        ASSERT_NE(nullptr, m_ba);
        ASSERT_EQ(UCS_OK, retry([&]() { return send(m_ab, 1); }));
        ASSERT_EQ(UCS_OK, retry([&]() { return send(m_ba, 2); }));
    }

    /* b drops its endpoint to a, with a cancelling flush first or not */
    void drop_ba(bool cancel)
    {
        if (cancel) {
            EXPECT_EQ(UCS_OK, uct_ep_flush(m_ba, UCT_FLUSH_FLAG_CANCEL, NULL));
        }
        m_b->ep_destroy(m_ba);
        m_ba = nullptr;
    }

    /* Checks of a's endpoint for @a seconds, progressing: whether the error
     * handler ran */
    bool checked_fails(double seconds)
    {
        return wait_for([&]() {
            uct_ep_check(m_ab, 0, NULL);
            return m_errors > 0;
        }, seconds);
    }

    entity  *m_a  = nullptr;
    entity  *m_b  = nullptr;
    uct_ep_h m_ab = nullptr;
    uct_ep_h m_ba = nullptr;
};

TEST_P(test_uct_failure_reverse, cancelled_then_destroyed)
{
    pair();
    drop_ba(true);

    /* not before a check: endpoints that nothing checks do not fail */
    for (int i = 0; i < 1000; ++i) {
        progress();
    }
    EXPECT_EQ(0, m_errors);
    EXPECT_EQ(UCS_OK, send(m_ab, 3));

    scoped_log_capture log;
    EXPECT_TRUE(checked_fails(DEFAULT_TIMEOUT)) << "error handler not called";
    EXPECT_EQ(m_ab, m_err_ep);
    EXPECT_EQ(1, m_errors);
    EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT, send(m_ab, 4));
}

TEST_P(test_uct_failure_reverse, destroyed_not_failed)
{
    pair();
    drop_ba(false);
    EXPECT_FALSE(checked_fails(0.3));
    EXPECT_EQ(UCS_OK, retry([&]() { return send(m_ab, 3); }));
}

TEST_P(test_uct_failure_reverse, cancelled_then_connected_again)
{
    pair();
    drop_ba(true);
    m_ba = connect(m_b, m_a);
    ASSERT_NE(nullptr, m_ba);
    ASSERT_EQ(UCS_OK, retry([&]() { return send(m_ba, 5); }));
    EXPECT_FALSE(checked_fails(0.3));
    EXPECT_EQ(UCS_OK, retry([&]() { return send(m_ab, 3); }));
}

INSTANTIATE_TEST_SUITE_P(wire, test_uct_failure_wire,
                         testing::Values("shm", "cma"));
INSTANTIATE_TEST_SUITE_P(wire, test_uct_failure_reverse,
                         testing::Values("shm", "cma"));

/* The receiver dies before it took in our connection: on the cma wire the
 * ring is not made yet (sends wait, then fail); on the shm wire we took a
 * ring it made in advance and write at once, until it is full, then fail */
TEST_P(test_uct_failure_wire, receiver_killed_before_accept)
{
    std::vector<char> addr;
    entity *sender;
    int cmd;

    fork_receiver({}, &addr, &cmd);
    /* stop the receiver before it can see our claim */
    ASSERT_EQ(1, write(cmd, "s", 1));
    usleep(10000);
    uct_ep_h ep = sender_to(addr, &sender);
    ASSERT_NE(nullptr, ep);
    if (std::string(m_wire) == "cma") {
        EXPECT_EQ(UCS_ERR_NO_RESOURCE, send(ep, 0));
    } else {
        EXPECT_EQ(UCS_OK, send(ep, 0));
    }

    kill_child(m_children.back());
    scoped_log_capture log;
    uint64_t seq = 1;
    ucs_status_t status;
    /* a bound for "hangs", not a speed: the sender looks at the
     * receiver's process every 1024 refused sends, which under ASan and a
     * loaded machine took longer than 0.2 s */
    while ((status = retry([&]() { return send(ep, seq); }, 5.0)) ==
           UCS_OK) {
        ASSERT_LE(++seq, 16u * 65536 / 64)
                << "more sends to a dead receiver than a ring holds";
    }
    EXPECT_NE(UCS_ERR_NO_RESOURCE, status) << "send to a dead receiver hangs";
    EXPECT_EQ(UCS_OK, uct_ep_check(ep, 0, NULL));
    EXPECT_TRUE(wait_for([&]() { return m_errors > 0; }));
    close(cmd);
}

/* With MAX_PEERS=1 the receiver must free the slot of a dead sender */
TEST_F(test_uct_failure, sender_killed_reclaimed)
{
    const uint64_t count = 50;
    int addr_fds[2], done_fds[2];

    ASSERT_EQ(0, pipe(addr_fds));
    ASSERT_EQ(0, pipe(done_fds));
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        std::vector<char> addr(4096);
        std::unique_ptr<entity> e;
        uct_ep_h ep;
        close(addr_fds[1]);
        close(done_fds[0]);
        if ((read(addr_fds[0], addr.data(), addr.size()) <= 0) ||
            (entity::open(m_component, m_md_name, {}, 0, nullptr, nullptr,
                          &e) != UCS_OK) ||
            (e->ep_create(addr.data(), addr.data() + e->attr.device_addr_len,
                          &ep) != UCS_OK)) {
            _exit(2);
        }
        for (uint64_t seq = 0; seq < count;) {
            if (send(ep, seq, 500) == UCS_OK) {
                ++seq;
            }
            e->progress();
        }
        (void)!write(done_fds[1], "d", 1);
        for (;;) {
            pause();
        }
    }

    close(addr_fds[0]);
    close(done_fds[1]);
    m_children.push_back(pid);
    entity *receiver = create_entity({{"MAX_PEERS", "1"}, {"RX_INLINE", "0"}});
    ASSERT_NE(nullptr, receiver);
    ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(receiver->iface, AM_ID,
                                               am_keep, this, 0));
    std::vector<char> addr = receiver->dev_addr;
    addr.insert(addr.end(), receiver->iface_addr.begin(),
                receiver->iface_addr.end());
    ASSERT_EQ((ssize_t)addr.size(),
              write(addr_fds[1], addr.data(), addr.size()));
    close(addr_fds[1]);
    ASSERT_TRUE(wait_for([&]() { return m_received == count; }));
    char c;
    ASSERT_EQ(1, read(done_fds[0], &c, 1));
    close(done_fds[0]);

    kill_child(pid);

    /* a new sender gets the only slot once the receiver noticed */
    entity *sender = create_entity();
    ASSERT_NE(nullptr, sender);
    uct_ep_h ep    = nullptr;
    {
        scoped_log_capture log;
        EXPECT_TRUE(wait_for([&]() {
            for (int i = 0; i < 1000; ++i) {
                progress();
            }
            return sender->ep_create(receiver->dev_addr.data(),
                                     receiver->iface_addr.data(),
                                     &ep) == UCS_OK;
        })) << "the dead sender's connection was never freed";
    }
    ASSERT_NE(nullptr, ep);
    ASSERT_TRUE(wait_for([&]() { return ep_can_send(ep); }));
    ASSERT_EQ(UCS_OK, retry([&]() { return send(ep, 1001, 300); }));
    ASSERT_TRUE(wait_for([&]() { return m_received == count + 1; }));

    /* what we held from the dead sender is intact */
    EXPECT_EQ(count / 2, m_held.size());
    for (void *desc : m_held) {
        uint64_t seq;
        memcpy(&seq, desc, sizeof(seq));
        EXPECT_EQ(0u, seq % 2);
        EXPECT_EQ(-1, check_pattern((char*)desc + 8, 500, seq));
    }
}

TEST_F(test_uct_failure, sender_ep_destroyed_reclaimed)
{
    entity *receiver = create_entity({{"MAX_PEERS", "1"}, {"RX_INLINE", "0"}});
    entity *s1       = create_entity();
    entity *s2       = create_entity();

    ASSERT_NE(nullptr, s2);
    ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(receiver->iface, AM_ID,
                                               am_keep, this, 0));
    for (int round = 0; round < 3; ++round) {
        entity *s    = (round % 2) ? s2 : s1;
        uct_ep_h ep  = connect(s, receiver);
        size_t first = m_received;
        ASSERT_NE(nullptr, ep);
        for (uint64_t seq = 0; seq < 20; ++seq) {
            ASSERT_EQ(UCS_OK, retry([&]() { return send(ep, seq); }));
        }
        s->ep_destroy(ep);
        /* everything published before the close is delivered */
        ASSERT_TRUE(wait_for([&]() { return m_received == first + 20; }));
    }
}

/* A sender that writes a bad record and closes at once: the receiver finds
 * the record while it drains the closed connection, and used to fail it
 * (CLOSED -> FAILED), which that sender never closes again: the slot and
 * its ring stayed taken until the sender exited, and with MAX_PEERS=1 no
 * other sender could connect */
TEST_F(test_uct_failure, closed_after_a_bad_record_reclaimed)
{
    entity *receiver = create_entity({{"MAX_PEERS", "1"}});
    entity *s1       = create_entity();
    entity *s2       = create_entity();
    struct stat st;

    ASSERT_NE(nullptr, s2);
    ASSERT_EQ(UCS_OK,
              uct_iface_set_am_handler(
                      receiver->iface, AM_ID,
                      [](void *arg, void*, size_t, unsigned) {
                          ++*(size_t*)arg;
                          return UCS_OK;
                      },
                      &m_received, 0));
    uct_ep_h ep = connect(s1, receiver);
    ASSERT_NE(nullptr, ep);
    ASSERT_EQ(UCS_OK, retry([&]() {
                  return uct_ep_am_short(ep, AM_ID, 0, NULL, 0);
              }));
    ASSERT_TRUE(wait_for([&]() { return m_received == 1; }));

    /* the receiver's control area and pool, as the sender maps them */
    const uct_remapring_iface_addr_t *addr =
            (const uct_remapring_iface_addr_t*)receiver->iface_addr.data();
    ASSERT_EQ(0, fstat(addr->ctl_fd, &st));
    size_t ctl_size          = st.st_size;
    uct_remapring_ctl_t *ctl = (uct_remapring_ctl_t*)
            mmap(NULL, ctl_size, PROT_READ | PROT_WRITE, MAP_SHARED,
                 addr->ctl_fd, 0);
    ASSERT_NE(MAP_FAILED, (void*)ctl);
    ASSERT_EQ(0, fstat(ctl->pool_fd, &st));
    size_t pool_size = st.st_size;
    char *pool       = (char*)mmap(NULL, pool_size, PROT_READ | PROT_WRITE,
                                   MAP_SHARED, ctl->pool_fd, 0);
    ASSERT_NE(MAP_FAILED, (void*)pool);
    uct_remapring_conn_t *conn = uct_remapring_ctl_conns(ctl, 1);
    uint32_t block = uct_remapring_ctl_slot_table(ctl, 1, ctl->ring_slots,
                                                  0)[0];
    ASSERT_EQ(UCT_REMAPRING_CONN_READY, uct_remapring_conn_state(conn));
    ASSERT_LT((size_t)(block + 1) * ctl->block_size, pool_size);

    /* the next record, of a type there is not, then the close, with no
     * progress of the receiver in between */
    scoped_log_capture log;
    remapring_ring_hdr_t hdr = {};
    char *rec = pool + ((size_t)block * ctl->block_size) + REMAPRING_RING_ALIGN;
    hdr.type  = 0x77;
    memcpy(rec + sizeof(hdr.stamp), (char*)&hdr + sizeof(hdr.stamp),
           sizeof(hdr) - sizeof(hdr.stamp));
    __atomic_store_n((uint64_t *)rec,
                     REMAPRING_RING_ALIGN ^ conn->ring.info.nonce,
                     __ATOMIC_RELEASE);
    s1->ep_destroy(ep);

    EXPECT_TRUE(wait_for([&]() {
        uint32_t state = uct_remapring_conn_state(conn);
        return (state == UCT_REMAPRING_CONN_FREE) ||
               (state == UCT_REMAPRING_CONN_OFFERED);
    }, 2.0)) << "state " << uct_remapring_conn_state(conn);
    EXPECT_TRUE(log.contains("unknown record type")) << log.all();
    munmap(pool, pool_size);
    munmap(ctl, ctl_size);

    /* another sender takes the slot */
    ep = connect(s2, receiver);
    ASSERT_NE(nullptr, ep);
    ASSERT_EQ(UCS_OK, retry([&]() {
                  return uct_ep_am_short(ep, AM_ID, 0, NULL, 0);
              }));
    EXPECT_TRUE(wait_for([&]() { return m_received == 2; }));
    s2->ep_destroy(ep);
}

/* pidfd_open fails with ENOSYS: the receiver used to refuse every sender
 * ("sender is gone"), and could not reap without it */
TEST_F(test_uct_failure, no_pidfd_open)
{
    pid_t pid = fork();

    ASSERT_GE(pid, 0);
    if (pid == 0) {
        struct sock_filter filter[] = {
            BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                     offsetof(struct seccomp_data, nr)),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pidfd_open, 0, 1),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        };
        struct sock_fprog prog = {sizeof(filter) / sizeof(filter[0]),
                                  filter};
        if ((prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ||
            (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)) {
            _exit(77);
        }
        if ((syscall(SYS_pidfd_open, getpid(), 0) >= 0) ||
            (errno != ENOSYS)) {
            _exit(78);
        }

        /* in the child: m_entities is ours alone after the fork */
        entity *receiver = create_entity({{"MAX_PEERS", "1"}, {"RX_INLINE", "0"}});
        entity *sender   = create_entity();
        if ((receiver == nullptr) || (sender == nullptr) ||
            (uct_iface_set_am_handler(receiver->iface, AM_ID, am_keep, this,
                                      0) != UCS_OK)) {
            _exit(2);
        }
        for (int round = 0; round < 2; ++round) {
            uct_ep_h ep;
            /* the slot frees once the receiver saw the previous close */
            scoped_log_capture log;
            if (!wait_for([&]() {
                    return sender->ep_create(receiver->dev_addr.data(),
                                             receiver->iface_addr.data(),
                                             &ep) == UCS_OK;
                })) {
                _exit(3);
            }
            for (uint64_t seq = 1; seq <= 10; ++seq) {
                if (retry([&]() { return send(ep, seq); }) != UCS_OK) {
                    _exit(4);
                }
            }
            if (!wait_for([&]() {
                    return m_received == (size_t)(round + 1) * 10;
                })) {
                _exit(5);
            }
            sender->ep_destroy(ep);
        }
        _exit(HasFailure() ? 6 : 0);
    }

    int wstatus = 0;
    ASSERT_EQ(pid, waitpid(pid, &wstatus, 0));
    ASSERT_TRUE(WIFEXITED(wstatus)) << "status " << wstatus;
    if (WEXITSTATUS(wstatus) == 77) {
        GTEST_SKIP() << "cannot install a seccomp filter";
    }
    EXPECT_EQ(0, WEXITSTATUS(wstatus))
            << "without pidfd_open the receiver refused its sender";
}

} // namespace
