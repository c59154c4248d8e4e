/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * Many senders to one receiver: four sender interfaces of this process, and
 * three forked sender processes, interleave short and bcopy messages to one
 * receiver that holds some of them; every sender's messages arrive complete,
 * byte for byte, and in the order that sender sent them.
 */

#include "common/uct_fixture.h"

#include <cstring>
#include <random>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace remapring_test;

namespace {

static const uint8_t AM_ID = 9;

/* header of every message: sender index and sequence number */
static inline uint64_t make_header(unsigned sender, uint32_t seq)
{
    return ((uint64_t)sender << 32) | seq;
}

struct pack_arg {
    uint64_t header;
    size_t   length;
};

static size_t pack(void *dest, void *arg)
{
    pack_arg *pa = (pack_arg*)arg;

    memcpy(dest, &pa->header, sizeof(pa->header));
    fill_pattern((char*)dest + sizeof(pa->header), pa->length, pa->header);
    return sizeof(pa->header) + pa->length;
}

/* Send message @a seq of @a sender: short or bcopy, size from @a rng */
static ucs_status_t send_one(uct_ep_h ep, const uct_iface_attr_t &attr,
                             unsigned sender, uint32_t seq,
                             std::mt19937 &rng)
{
    uint64_t header = make_header(sender, seq);

    if (rng() % 2) {
        size_t length = rng() % (attr.cap.am.max_short - sizeof(header) + 1);
        std::vector<uint8_t> buf(length);
        fill_pattern(buf.data(), length, header);
        return uct_ep_am_short(ep, AM_ID, header, buf.data(), length);
    }

    pack_arg pa = {header, rng() % (attr.cap.am.max_bcopy - 7)};
    ssize_t ret = uct_ep_am_bcopy(ep, AM_ID, pack, &pa, 0);
    return (ret < 0) ? (ucs_status_t)ret : UCS_OK;
}

class test_uct_many : public uct_fixture {
protected:
    static ucs_status_t am_handler(void *arg, void *data, size_t length,
                                   unsigned flags)
    {
        test_uct_many *self = (test_uct_many*)arg;
        uint64_t header;

        EXPECT_GE(length, sizeof(header));
        memcpy(&header, data, sizeof(header));
        unsigned sender = header >> 32;
        uint32_t seq    = (uint32_t)header;
        if (sender >= self->m_next.size()) {
            ADD_FAILURE() << "unknown sender " << sender;
            return UCS_OK;
        }

        EXPECT_EQ(self->m_next[sender], seq) << "sender " << sender;
        self->m_next[sender] = seq + 1;
        EXPECT_EQ(-1, check_pattern((char*)data + 8, length - 8, header))
                << "sender " << sender << " seq " << seq;
        ++self->m_received;
        if ((seq % 7) == 0) {
            EXPECT_TRUE(flags & UCT_CB_PARAM_FLAG_DESC);
            self->m_held.push_back(data);
            return UCS_INPROGRESS;
        }

        return UCS_OK;
    }

    void release_some(size_t keep)
    {
        while (m_held.size() > keep) {
            uct_iface_release_desc(m_held.front());
            m_held.erase(m_held.begin());
        }
    }

    void TearDown() override
    {
        release_some(0);
        uct_fixture::TearDown();
    }

    std::vector<uint32_t> m_next;
    std::vector<void*>    m_held;
    size_t                m_received = 0;
};


TEST_F(test_uct_many, senders_in_one_process)
{
    const unsigned nsenders = 4;
    const uint32_t count    = 3000;
    /* every message with a descriptor, so that some are held in place */
    config_t cfg            = {{"BLOCK_SIZE", "16k"}, {"RING_SLOTS", "4"},
                               {"CREDIT_BATCH", "2"}, {"RX_INLINE", "0"}};
    entity *receiver        = create_entity(cfg);
    std::vector<entity*> senders;
    std::vector<uct_ep_h> eps;
    std::mt19937 rng(11);

    ASSERT_NE(nullptr, receiver);
    ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(receiver->iface, AM_ID,
                                               am_handler, this, 0));
    m_next.assign(nsenders, 0);
    for (unsigned i = 0; i < nsenders; ++i) {
        senders.push_back(create_entity(cfg));
        ASSERT_NE(nullptr, senders.back());
        eps.push_back(connect(senders.back(), receiver));
        ASSERT_NE(nullptr, eps.back());
    }

    std::vector<uint32_t> seq(nsenders, 0);
    for (uint32_t n = 0; n < count * nsenders; ++n) {
        unsigned s = rng() % nsenders;
        if (seq[s] == count) {
            s = std::find_if(seq.begin(), seq.end(),
                             [&](uint32_t v) { return v < count; }) -
                seq.begin();
        }
        ASSERT_EQ(UCS_OK, retry([&]() {
                      return send_one(eps[s], senders[s]->attr, s, seq[s],
                                      rng);
                  }));
        ++seq[s];
        progress();
        release_some(32);
    }

    ASSERT_TRUE(wait_for([&]() { return m_received == count * nsenders; }))
            << m_received << " of " << count * nsenders;
    for (unsigned i = 0; i < nsenders; ++i) {
        EXPECT_EQ(count, m_next[i]);
    }
}

TEST_F(test_uct_many, forked_senders)
{
    const unsigned nsenders = 3;
    const uint32_t count    = 2000;
    /* the same settings on both sides: max_bcopy follows the block size */
    const config_t cfg      = {{"BLOCK_SIZE", "16k"}, {"RING_SLOTS", "4"},
                               {"CREDIT_BATCH", "2"}, {"RX_INLINE", "0"}};
    std::vector<pid_t> pids;
    std::vector<int> addr_fds;

    /* fork first: the children open their own UCX objects */
    for (unsigned i = 0; i < nsenders; ++i) {
        int fds[2];
        ASSERT_EQ(0, pipe(fds));
        pid_t pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            close(fds[1]);
            std::vector<char> addr(4096);
            ssize_t len = read(fds[0], addr.data(), addr.size());
            std::unique_ptr<entity> e;
            if ((len <= 0) ||
                (entity::open(m_component, m_md_name, cfg, 0, nullptr,
                              nullptr, &e) != UCS_OK)) {
                _exit(2);
            }

            size_t dev_len = e->attr.device_addr_len;
            uct_ep_h ep;
            if (e->ep_create(addr.data(), addr.data() + dev_len, &ep) !=
                UCS_OK) {
                _exit(3);
            }

            std::mt19937 rng(100 + i);
            double deadline = now() + 30;
            for (uint32_t seq = 0; seq < count;) {
                ucs_status_t status = send_one(ep, e->attr, i, seq, rng);
                if (status == UCS_OK) {
                    ++seq;
                } else if ((status != UCS_ERR_NO_RESOURCE) ||
                           (now() > deadline)) {
                    fprintf(stderr, "sender %u message %u: %s\n", i, seq,
                            ucs_status_string(status));
                    _exit(4);
                }
                e->progress();
            }

            /* the receiver drains a closed connection before freeing it */
            e.reset();
            _exit(0);
        }

        close(fds[0]);
        pids.push_back(pid);
        addr_fds.push_back(fds[1]);
    }

    entity *receiver = create_entity(cfg);
    ASSERT_NE(nullptr, receiver);
    ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(receiver->iface, AM_ID,
                                               am_handler, this, 0));
    m_next.assign(nsenders, 0);
    std::vector<char> addr = receiver->dev_addr;
    addr.insert(addr.end(), receiver->iface_addr.begin(),
                receiver->iface_addr.end());
    for (int fd : addr_fds) {
        ASSERT_EQ((ssize_t)addr.size(), write(fd, addr.data(), addr.size()));
        close(fd);
    }

    bool done = wait_for(
            [&]() {
                release_some(16);
                return m_received == count * nsenders;
            },
            30);
    for (unsigned i = 0; i < nsenders; ++i) {
        int wstatus = 0;
        if (!done) {
            kill(pids[i], SIGKILL);
        }
        ASSERT_EQ(pids[i], waitpid(pids[i], &wstatus, 0));
        EXPECT_TRUE(WIFEXITED(wstatus) && (WEXITSTATUS(wstatus) == 0))
                << "sender " << i << " status " << wstatus;
        EXPECT_EQ(count, m_next[i]) << "sender " << i;
    }
    EXPECT_TRUE(done) << m_received << " of " << count * nsenders;
}

} // namespace
