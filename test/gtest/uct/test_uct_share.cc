/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * Shared copies (remapring_sm_share.c): a long put or get whose chunks the
 * other process's progress copies too.
 *
 * Between two processes (the receiver forked, progressing on its own):
 * get_zcopy and put_zcopy of 256 KiB to 16 MiB (and odd sizes) move every
 * byte, checked each time, and the receiver took some of the chunks (the
 * counts are printed); a receiver that stopped progressing, or that has
 * sharing off, takes none and the operations still complete, all copied by
 * the caller (nor does a caller with sharing off ask); a receiver killed while operations run fails the endpoint
 * with an error, no operation waits forever; a receiver that breaks the
 * protocol (gives back a chunk past the end, takes a chunk it never
 * finishes) fails the operation and the connection with one log line, the
 * caller's memory untouched past its buffer, within the 10 s timeout.
 *
 * The requester's judgement of whether sharing pays at a size
 * (uct_remapring_share_judge(), fed with made-up timings): it measures some
 * copied alone when a shared one looks slow, goes alone, for longer after
 * each loss in a row, while alone ones move clearly more, keeps sharing
 * while it pays or nearly, and measures again when its figure is old.
 *
 * In one process, the helper's side step by step, through requests the
 * test writes as a sender could: it copies the chunks a request leaves,
 * takes nothing of a request whose operation is over (another generation,
 * or no chunk left), gives back a chunk it cannot copy, and a request that
 * is not well formed fails that connection with one log line.
 */

/* UCX's config.h before any UCX header: it defines what the installed
 * headers would default (this suite reads the transport's own state) */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

extern "C" {
#include <uct/ib/remapring/sm/remapring_sm.h>
}

#include "common/uct_fixture.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <thread>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace remapring_test;

namespace {

const size_t REMOTE_SIZE = 16 * 1024 * 1024;
const uint64_t SEED      = 77;

/* What the forked receiver tells the test: its addresses, then its buffer
 * and its packed rkey */
struct child_info {
    size_t addr_len;
    char addr[512]; /* device and interface address */
    uint64_t address;
    size_t rkey_len;
    char rkey[256];
};

/* Shared copies are off under valgrind (remapring_sm_iface.c) */
static bool under_valgrind()
{
    const char *preload = getenv("LD_PRELOAD");
    return (preload != nullptr) && (strstr(preload, "/vgpreload_") != nullptr);
}

class test_uct_share : public uct_fixture {
protected:
    void SetUp() override
    {
        uct_fixture::SetUp();
        if (!IsSkipped() && under_valgrind()) {
            GTEST_SKIP() << "shared copies are off under valgrind";
        }
    }

    void TearDown() override
    {
        if (m_have_rkey) {
            uct_rkey_release(m_component, &m_rkey);
        }
        uct_fixture::TearDown();
    }

    /*
     * Fork a receiver with @a config: it registers a REMOTE_SIZE buffer
     * filled with pattern(SEED), sends its addresses and the buffer's key,
     * then progresses; commands on the pipe: 's' stop progressing (sleep),
     * 'c' check the buffer against pattern(SEED + 1) and answer the first
     * bad index (int64, -1: none), 'q' say how many chunks it copied
     * (uint64).
     */
    void fork_helper(const config_t &config,
                     const config_t &sender_config = config_t())
    {
        int up[2], down[2];

        ASSERT_EQ(0, pipe(up));
        ASSERT_EQ(0, pipe(down));
        pid_t pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            close(up[0]);
            close(down[1]);
            fcntl(down[0], F_SETFL, O_NONBLOCK);
            run_helper(config, up[1], down[0]);
            _exit(0);
        }

        close(up[1]);
        close(down[0]);
        m_children.push_back(pid);
        m_pid  = pid;
        m_up   = up[0];
        m_down = down[1];

        child_info info;
        ASSERT_EQ((ssize_t)sizeof(info), read(m_up, &info, sizeof(info)));
        std::vector<char> addr(info.addr, info.addr + info.addr_len);
        m_remote_addr = info.address;
        ASSERT_EQ(UCS_OK, uct_rkey_unpack(m_component, info.rkey, &m_rkey));
        m_have_rkey = true;

        m_sender = create_entity(sender_config);
        uct_ep_h ep;
        ASSERT_EQ(UCS_OK, m_sender->ep_create(addr.data(),
                                              addr.data() +
                                              m_sender->dev_addr.size(),
                                              &ep));
        m_ep = ep;
        /* the ring is made: a short message goes through */
        uint64_t hdr = 0;
        ASSERT_EQ(UCS_OK, retry([&]() {
                      return uct_ep_am_short(m_ep, 1, hdr, NULL, 0);
                  }));
    }

    void run_helper(const config_t &config, int up, int down)
    {
        std::vector<char> addr;
        std::unique_ptr<entity> e = open_child(config, &addr);
        uct_mem_h memh;

        void *buf = mmap(NULL, REMOTE_SIZE, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (buf == MAP_FAILED) {
            _exit(3);
        }
        fill_pattern(buf, REMOTE_SIZE, SEED);
        child_info info = {};
        info.address    = (uintptr_t)buf;
        info.rkey_len   = e->md_attr.rkey_packed_size;
        if ((info.rkey_len > sizeof(info.rkey)) ||
            (uct_md_mem_reg(e->md, buf, REMOTE_SIZE, UCT_MD_MEM_ACCESS_ALL,
                            &memh) != UCS_OK) ||
            (uct_md_mkey_pack(e->md, memh, info.rkey) != UCS_OK)) {
            _exit(4);
        }

        info.addr_len = addr.size();
        if ((addr.size() > sizeof(info.addr)) ||
            (memcpy(info.addr, addr.data(), addr.size()),
             write(up, &info, sizeof(info)) != (ssize_t)sizeof(info))) {
            _exit(5);
        }

        auto *iface = ucs_derived_of(e->iface, uct_remapring_sm_iface_t);
        bool stopped = false;
        char hostile = 0;
        for (;;) {
            char c;
            if (read(down, &c, 1) == 1) {
                if ((c == 'b') || (c == 'k')) {
                    hostile = c;
                } else if (c == 's') {
                    stopped = true;
                } else if (c == 'c') {
                    int64_t bad = check_pattern(buf, REMOTE_SIZE, SEED + 1);
                    if (write(up, &bad, sizeof(bad)) != sizeof(bad)) {
                        _exit(6);
                    }
                } else if (c == 'q') {
                    uint64_t helped = iface->share.helped;
                    if (write(up, &helped, sizeof(helped)) !=
                        sizeof(helped)) {
                        _exit(6);
                    }
                }
            }
            if (hostile) {
                misbehave(iface, hostile);
            } else if (stopped) {
                usleep(1000);
            } else {
                e->progress();
            }
        }
    }

    /* A receiver that does not follow the protocol, on the share words of
     * every ready connection: 'b' gives back a chunk past the end as soon
     * as an operation starts, 'k' takes a chunk and never finishes it */
    static void misbehave(uct_remapring_sm_iface_t *iface, char how)
    {
        for (unsigned i = 0; i < iface->rx.ctl.max_peers; ++i) {
            uct_remapring_conn_t *conn = &iface->rx.ctl.conns[i];
            if (uct_remapring_conn_state(conn) != UCT_REMAPRING_CONN_READY) {
                continue;
            }

            uct_remapring_share_t *share = &conn->share;
            uint64_t word = __atomic_load_n(&share->claim, __ATOMIC_ACQUIRE);
            if ((word >> 32) == s_seen_gen) {
                continue;
            }

            if (how == 'b') {
                share->back = 1000;
                s_seen_gen  = word >> 32;
            } else if (__atomic_compare_exchange_n(&share->claim, &word,
                                                   word + 1, 0,
                                                   __ATOMIC_ACQ_REL,
                                                   __ATOMIC_RELAXED)) {
                s_seen_gen = word >> 32;
            }
        }
    }

    static uint64_t s_seen_gen;

    template<typename T> T ask(char c)
    {
        T value{};
        EXPECT_EQ(1, write(m_down, &c, 1));
        EXPECT_EQ((ssize_t)sizeof(value), read(m_up, &value, sizeof(value)));
        return value;
    }

    uct_remapring_sm_iface_t *sender_iface()
    {
        return ucs_derived_of(m_sender->iface, uct_remapring_sm_iface_t);
    }

    /* get @a length bytes at @a offset of the helper's buffer, checked */
    void get_checked(size_t offset, size_t length)
    {
        std::vector<uint8_t> local(length + 1, 0xee);
        uct_iov_t iov = {local.data(), length, nullptr, 0, 1};

        ASSERT_EQ(UCS_OK, uct_ep_get_zcopy(m_ep, &iov, 1, m_remote_addr +
                                           offset, m_rkey.rkey, nullptr));
        for (size_t i = 0; i < length; ++i) {
            if (local[i] != pattern(SEED, offset + i)) {
                FAIL() << "byte " << i << " of a get of " << length
                       << " at " << offset;
            }
        }
        EXPECT_EQ(0xee, local[length]) << "written past the end";
    }

    entity *m_sender        = nullptr;
    uct_ep_h m_ep           = nullptr;
    pid_t m_pid             = -1;
    int m_up                = -1;
    int m_down              = -1;
    uint64_t m_remote_addr  = 0;
    uct_rkey_bundle_t m_rkey = {};
    bool m_have_rkey        = false;
};

uint64_t test_uct_share::s_seen_gen = 0;

const size_t SIZES[] = {256 * 1024, 512 * 1024, 1024 * 1024 - 4096 + 17,
                        4 * 1024 * 1024, REMOTE_SIZE};
const size_t NSIZES  = sizeof(SIZES) / sizeof(SIZES[0]);

TEST_F(test_uct_share, get_shared)
{
    fork_helper({});
    for (int round = 0; round < 20; ++round) {
        for (size_t size : SIZES) {
            get_checked(REMOTE_SIZE - size, size);
        }
    }

    uint64_t helped = ask<uint64_t>('q');
    std::cout << "asked " << sender_iface()->share.asked
              << ", the receiver copied " << sender_iface()->share.given
              << " chunks (it counts " << helped << "); "
              << sender_iface()->share.lost << " slower than alone ones, "
              << sender_iface()->share.alone << " copied alone" << std::endl;
    /* each operation was shared, or copied alone where sharing did not pay
     * lately or its alone figure was due */
    EXPECT_EQ(20 * NSIZES,
              sender_iface()->share.asked + sender_iface()->share.alone);
    EXPECT_EQ(helped, sender_iface()->share.given);
    EXPECT_GT(helped, 0u) << "the receiver never took a chunk";
}

TEST_F(test_uct_share, put_shared)
{
    fork_helper({});
    std::vector<uint8_t> local(REMOTE_SIZE);
    fill_pattern(local.data(), local.size(), SEED + 1);

    for (int round = 0; round < 20; ++round) {
        uct_iov_t iov = {local.data(), REMOTE_SIZE, nullptr, 0, 1};
        ASSERT_EQ(UCS_OK, uct_ep_put_zcopy(m_ep, &iov, 1, m_remote_addr,
                                           m_rkey.rkey, nullptr));
        ASSERT_EQ(-1, ask<int64_t>('c')) << "round " << round;
    }

    uint64_t helped = ask<uint64_t>('q');
    std::cout << "the receiver copied " << helped << " of " << 20 * 2
              << " halves" << std::endl;
    EXPECT_EQ(helped, sender_iface()->share.given);
    EXPECT_GT(helped, 0u);
}

TEST_F(test_uct_share, helper_stopped)
{
    fork_helper({});
    char c = 's';
    ASSERT_EQ(1, write(m_down, &c, 1));
    usleep(20000);
    uint64_t given = sender_iface()->share.given;
    for (int round = 0; round < 5; ++round) {
        for (size_t size : SIZES) {
            get_checked(0, size);
        }
    }
    EXPECT_EQ(5 * NSIZES, sender_iface()->share.asked);
    EXPECT_EQ(given, sender_iface()->share.given)
            << "a receiver that does not progress took chunks";
}

TEST_F(test_uct_share, below_share_min)
{
    /* the default SHARE_MIN is 256 KiB: shorter ones are the caller's */
    fork_helper({});
    get_checked(0, 256 * 1024 - 1);
    get_checked(0, 128 * 1024);
    EXPECT_EQ(0u, sender_iface()->share.asked);
    get_checked(0, 256 * 1024);
    EXPECT_EQ(1u, sender_iface()->share.asked);
}

TEST_F(test_uct_share, helper_sharing_off)
{
    fork_helper({{"SHARE_MIN", "inf"}});
    for (size_t size : SIZES) {
        get_checked(0, size);
    }
    EXPECT_EQ(NSIZES, sender_iface()->share.asked);
    EXPECT_EQ(0u, sender_iface()->share.given);
    EXPECT_EQ(0u, ask<uint64_t>('q'));
}

TEST_F(test_uct_share, sender_sharing_off)
{
    fork_helper({}, {{"SHARE_MIN", "inf"}});
    for (size_t size : SIZES) {
        get_checked(0, size);
    }
    EXPECT_EQ(0u, sender_iface()->share.asked);
    EXPECT_EQ(0u, ask<uint64_t>('q'));
}

TEST_F(test_uct_share, helper_killed)
{
    scoped_log_capture capture;
    fork_helper({});
    std::vector<uint8_t> local(REMOTE_SIZE);
    uct_iov_t iov = {local.data(), REMOTE_SIZE, nullptr, 0, 1};
    std::thread killer([this]() {
        usleep(50000);
        kill(m_pid, SIGKILL);
    });

    ucs_status_t status = UCS_OK;
    double start        = now();
    while ((status == UCS_OK) && (now() - start < 30)) {
        status = uct_ep_get_zcopy(m_ep, &iov, 1, m_remote_addr,
                                  m_rkey.rkey, nullptr);
        progress();
    }
    killer.join();
    waitpid(m_pid, NULL, 0);
    m_children.clear();
    EXPECT_NE(UCS_OK, status) << "gets went on for 30 s to a dead process";
    std::cout << "after the kill: " << ucs_status_string(status) << std::endl;
}


TEST_F(test_uct_share, receiver_gives_back_past_the_end)
{
    scoped_log_capture capture;
    fork_helper({});
    char c = 'b';
    ASSERT_EQ(1, write(m_down, &c, 1));

    std::vector<uint8_t> local(REMOTE_SIZE + 1, 0xee);
    uct_iov_t iov = {local.data(), REMOTE_SIZE, nullptr, 0, 1};
    ucs_status_t status = UCS_OK;
    for (int i = 0; (i < 200) && (status == UCS_OK); ++i) {
        status = uct_ep_get_zcopy(m_ep, &iov, 1, m_remote_addr, m_rkey.rkey,
                                  nullptr);
    }

    EXPECT_NE(UCS_OK, status) << "200 gets, no bad chunk seen";
    /* 16 MiB goes in two halves of 8 MiB */
    EXPECT_TRUE(capture.contains("gave back chunk 999 of 2"))
            << capture.all();
    EXPECT_EQ(0xee, local[REMOTE_SIZE]) << "written past the end";
    /* the connection failed: later operations fail at once */
    EXPECT_NE(UCS_OK, uct_ep_get_zcopy(m_ep, &iov, 1, m_remote_addr,
                                       m_rkey.rkey, nullptr));
}

TEST_F(test_uct_share, receiver_never_finishes)
{
    scoped_log_capture capture;
    fork_helper({});
    char c = 'k';
    ASSERT_EQ(1, write(m_down, &c, 1));
    usleep(10000);

    std::vector<uint8_t> local(REMOTE_SIZE);
    uct_iov_t iov = {local.data(), REMOTE_SIZE, nullptr, 0, 1};
    ucs_status_t status = UCS_OK;
    double start        = now();
    for (int i = 0; (i < 1000) && (status == UCS_OK); ++i) {
        status = uct_ep_get_zcopy(m_ep, &iov, 1, m_remote_addr, m_rkey.rkey,
                                  nullptr);
    }

    double waited = now() - start;
    std::cout << "failed after " << waited << " s: "
              << ucs_status_string(status) << std::endl;
    EXPECT_NE(UCS_OK, status);
    EXPECT_TRUE(capture.contains("did not finish")) << capture.all();
    EXPECT_LT(waited, 30.0);
}

/* ---------------------------------------------- the helper, in one process */

class test_uct_share_helper : public uct_fixture {
protected:
    void SetUp() override
    {
        uct_fixture::SetUp();
        if (IsSkipped()) {
            return;
        }

        if (!cma_allowed()) {
            GTEST_SKIP() << "process_vm_writev into this process is not "
                            "allowed here";
        } else if (under_valgrind()) {
            GTEST_SKIP() << "shared copies are off under valgrind";
        }

        m_sender   = create_entity();
        m_receiver = create_entity();
        m_ep       = connect(m_sender, m_receiver);
        ASSERT_NE(nullptr, m_ep);
        m_peer = ucs_derived_of(ucs_derived_of(m_ep, uct_remapring_ep_t)->peer,
                                uct_remapring_sm_peer_t);
        m_share = &m_peer->remote.conn->share;
    }

    uct_remapring_sm_iface_t *receiver_iface()
    {
        return ucs_derived_of(m_receiver->iface, uct_remapring_sm_iface_t);
    }

    /* Write request @a req as the sender would, its words set for
     * generation @a word_gen, and let the receiver read it */
    void send_request(const uct_remapring_share_req_t &req,
                      uint32_t word_gen, uint32_t next = 0)
    {
        struct iovec iov = {(void*)&req, sizeof(req)};

        m_share->done  = 0;
        m_share->back  = 0;
        m_share->claim = ((uint64_t)word_gen << 32) | next;
        ASSERT_EQ(UCS_OK, remapring_ring_writer_send(
                                  &m_peer->super.writer,
                                  UCT_REMAPRING_AM_ID_CONTROL, 0, &iov, 1));
        for (int i = 0; i < 100; ++i) {
            progress();
        }
    }

    uct_remapring_share_req_t make_request(void *helper_side,
                                           void *requester_side,
                                           size_t length, size_t chunk,
                                           uint32_t gen)
    {
        uct_remapring_share_req_t req = {};
        req.kind           = UCT_REMAPRING_CONTROL_SHARE;
        req.helper_writes  = 1;
        req.gen            = gen;
        req.chunk          = chunk;
        req.nchunks        = (length + chunk - 1) / chunk;
        req.length         = length;
        req.helper_addr    = (uintptr_t)helper_side;
        req.requester_addr = (uintptr_t)requester_side;
        return req;
    }

    entity *m_sender                = nullptr;
    entity *m_receiver              = nullptr;
    uct_ep_h m_ep                   = nullptr;
    uct_remapring_sm_peer_t *m_peer = nullptr;
    uct_remapring_share_t *m_share  = nullptr;
};

TEST_F(test_uct_share_helper, copies_what_is_left)
{
    const size_t length = 1024 * 1024 + 100, chunk = 256 * 1024;
    std::vector<uint8_t> src(length), dst(length, 0);
    fill_pattern(src.data(), length, 5);

    /* the requester took the first chunk already */
    auto req = make_request(src.data(), dst.data(), length, chunk, 9);
    send_request(req, 9, 1);
    EXPECT_EQ(req.nchunks - 1, m_share->done);
    EXPECT_EQ(0u, m_share->back);
    EXPECT_EQ(((uint64_t)9 << 32) | req.nchunks, m_share->claim);
    EXPECT_EQ(req.nchunks - 1, receiver_iface()->share.helped);
    for (size_t i = 0; i < length; ++i) {
        uint8_t expect = (i < chunk) ? 0 : pattern(5, i);
        ASSERT_EQ(expect, dst[i]) << "byte " << i;
    }

    /* a put: the helper reads from the requester */
    std::fill(src.begin(), src.end(), 0);
    fill_pattern(dst.data(), length, 6);
    req               = make_request(src.data(), dst.data(), length, chunk,
                                     10);
    req.helper_writes = 0;
    send_request(req, 10);
    EXPECT_EQ(req.nchunks, m_share->done);
    EXPECT_EQ(-1, check_pattern(src.data(), length, 6));
}

TEST_F(test_uct_share_helper, takes_nothing_of_an_operation_over)
{
    const size_t length = 512 * 1024, chunk = 128 * 1024;
    std::vector<uint8_t> src(length, 1), dst(length, 0);

    /* a late request: the words are another generation's */
    send_request(make_request(src.data(), dst.data(), length, chunk, 3), 4);
    /* every chunk taken */
    send_request(make_request(src.data(), dst.data(), length, chunk, 4), 4,
                 4);
    EXPECT_EQ(0u, m_share->done);
    EXPECT_EQ(0u, receiver_iface()->share.helped);
    EXPECT_EQ(std::vector<uint8_t>(length, 0), dst);
}

TEST_F(test_uct_share_helper, gives_back_what_it_cannot_copy)
{
    const size_t length = 512 * 1024, chunk = 256 * 1024;
    std::vector<uint8_t> dst(length, 0);
    size_t page = sysconf(_SC_PAGESIZE);
    void *hole  = mmap(NULL, length + page, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(MAP_FAILED, hole);

    send_request(make_request(hole, dst.data(), length, chunk, 1), 1);
    munmap(hole, length + page);
    /* it stops at its first failure: one chunk given back, the other left
     * for the requester */
    EXPECT_EQ(1u, m_share->back);
    EXPECT_EQ(1u, m_share->done);
    EXPECT_EQ(((uint64_t)1 << 32) | 1, m_share->claim);
    EXPECT_EQ(0u, receiver_iface()->share.helped);
    /* the connection goes on */
    EXPECT_EQ(UCS_OK, retry([&]() {
                  return uct_ep_am_short(m_ep, 1, 0, NULL, 0);
              }));
}

TEST_F(test_uct_share_helper, bad_requests_fail_the_connection)
{
    std::vector<uint8_t> buf(4096);
    struct {
        const char *what;
        uct_remapring_share_req_t req;
    } cases[] = {
        {"kind", make_request(buf.data(), buf.data(), 4096, 4096, 1)},
        {"chunks", make_request(buf.data(), buf.data(), 4096, 4096, 1)},
        {"too many chunks", make_request(buf.data(), buf.data(),
                                         100 * 4096, 4096, 1)},
        {"direction", make_request(buf.data(), buf.data(), 4096, 4096, 1)},
    };
    cases[0].req.kind          = 9;
    cases[1].req.nchunks       = 2;
    cases[3].req.helper_writes = 7;

    for (auto &c : cases) {
        scoped_log_capture capture;
        m_entities.clear();
        m_sender   = create_entity();
        m_receiver = create_entity();
        m_ep       = connect(m_sender, m_receiver);
        ASSERT_NE(nullptr, m_ep);
        m_peer  = ucs_derived_of(ucs_derived_of(m_ep,
                                               uct_remapring_ep_t)->peer,
                                uct_remapring_sm_peer_t);
        m_share = &m_peer->remote.conn->share;
        send_request(c.req, 1);
        EXPECT_TRUE(capture.contains("bad share request")) << c.what << ": "
                                                            << capture.all();
        EXPECT_EQ(0u, m_share->done) << c.what;
        EXPECT_TRUE(wait_for([&]() {
            return m_peer->super.status != UCS_OK;
        })) << c.what << ": the sender was not failed";
    }
}

} // namespace


/* A shared operation of 1 KiB, 512 bytes of it the requester's in @a own
 * ticks, the whole in @a total */
static int judge(uct_remapring_share_class_t *cls, ucs_time_t own,
                 ucs_time_t total)
{
    return uct_remapring_share_judge(cls, own, total, 512, 1024);
}

/* A run of @a n alone operations of 1 KiB in @a ticks each */
static void alone(uct_remapring_share_class_t *cls, unsigned n,
                  ucs_time_t ticks)
{
    for (unsigned i = 0; i < n; ++i) {
        ASSERT_GT(cls->skip, 0u) << "alone while sharing";
        --cls->skip;
        uct_remapring_share_alone_done(cls, ticks, 1024);
    }
}

TEST(test_uct_share_judge, goes_alone_while_alone_moves_more)
{
    uct_remapring_share_class_t cls = {};

    /* the first shared one is cold: not counted, however slow */
    EXPECT_EQ(0, judge(&cls, 100, 100000));
    EXPECT_EQ(0u, cls.skip);
    EXPECT_EQ(0, cls.shared_rate);

    /* 400 ticks shared, where our half at our rate says 200 for all: the
     * next three go alone, to measure; the first of them is cold */
    EXPECT_EQ(0, judge(&cls, 100, 400));
    EXPECT_EQ(3u, cls.skip);
    alone(&cls, 1, 100000);
    alone(&cls, 2, 100);
    EXPECT_EQ(0u, cls.skip);
    EXPECT_DOUBLE_EQ(10.24, cls.alone_rate) << "the cold one was counted";

    /* alone moved 10.24 a tick, shared 2.56: each loss in a row doubles
     * the run that goes alone, up to 1024; the first shared one after a
     * run alone is cold, not counted */
    unsigned expect = 4;
    for (int i = 0; i < 12; ++i) {
        EXPECT_EQ(0, judge(&cls, 100, 100000)) << "after run " << i;
        EXPECT_EQ(1, judge(&cls, 100, 400)) << "loss " << i;
        EXPECT_EQ(expect, cls.skip);
        alone(&cls, cls.skip, 100);
        expect = std::min(expect * 2, 1024u);
    }

    /* shared now moves as much: after a few more runs alone (its average
     * catches up) sharing stays, and the runs start over */
    int lost = 1;
    for (int i = 0; (i < 20) && lost; ++i) {
        judge(&cls, 50, 100); /* the cold one after the run */
        lost = judge(&cls, 50, 100);
        alone(&cls, cls.skip, 100);
    }
    EXPECT_EQ(0, lost) << "sharing never came back";
    EXPECT_EQ(0u, cls.backoff);
    EXPECT_EQ(0, judge(&cls, 50, 100));
    EXPECT_EQ(0u, cls.skip);
    /* slow again: the first run alone is 4 again */
    EXPECT_EQ(1, judge(&cls, 100, 10000));
    EXPECT_EQ(4u, cls.skip);
}

TEST(test_uct_share_judge, keeps_sharing_while_it_pays_or_nearly)
{
    uct_remapring_share_class_t cls = {};

    /* no slower than our own half's rate over the whole: never measured */
    judge(&cls, 60, 120); /* the first, cold */
    for (int i = 0; i < 100; ++i) {
        EXPECT_EQ(0, judge(&cls, 60, 120));
    }
    EXPECT_EQ(0u, cls.skip);

    /* looks slow: measured; alone moves 1.2 times as much (10.24 against
     * 8.53 a tick), within the margin of 1.5, so sharing stays */
    EXPECT_EQ(0, judge(&cls, 20, 120));
    ASSERT_EQ(3u, cls.skip);
    alone(&cls, 3, 100);
    judge(&cls, 20, 120); /* the cold one after the run */
    for (int i = 0; i < 20; ++i) {
        EXPECT_EQ(0, judge(&cls, 20, 120)) << i;
        EXPECT_EQ(0u, cls.skip) << i;
    }
}

TEST(test_uct_share_judge, measures_again_when_its_figure_is_old)
{
    uct_remapring_share_class_t cls = {};

    judge(&cls, 20, 120); /* the first, cold */
    EXPECT_EQ(0, judge(&cls, 20, 120));
    alone(&cls, 3, 100);
    judge(&cls, 20, 120); /* the cold one after the run */
    /* 256 shared ones compare with that figure; the next that looks slow
     * measures again */
    for (int i = 0; i < 256; ++i) {
        EXPECT_EQ(0, judge(&cls, 20, 120));
        EXPECT_EQ(0u, cls.skip) << i;
    }
    EXPECT_EQ(0, judge(&cls, 20, 120));
    EXPECT_EQ(3u, cls.skip);
    EXPECT_EQ(1u, cls.fresh);
}
