/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * Bad input is refused with an error, never a crash or a hang:
 * - rkeys: every single corrupted byte, every truncation (the tail of the
 *   buffer zeroed) and random garbage fail uct_rkey_unpack();
 * - interface addresses: a pid that exited, a live process that is not the
 *   receiver (it even has the control area open at the same fd number),
 *   pids 0 and -1, fd numbers that are closed, not a memfd, a foreign memfd
 *   or another interface's control area, a wrong iface_id, random bytes:
 *   uct_ep_create() fails and the receiver still accepts good senders;
 * - a receiver with UCX_REMAPRING_MAX_PEERS=1 refuses a second sender;
 * - settings that parse but break a rule fail uct_iface_open() with an error
 *   naming the setting; values of the wrong form fail uct_config_modify();
 *   an rx_headroom larger than the record leaves is refused.
 */

#include "common/uct_fixture.h"

#include <cstring>
#include <random>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace remapring_test;

namespace {

/* The address remapring_conn.h defines: receiver pid, control memfd,
 * iface id, pid namespace, largest payload its rings take */
struct iface_addr {
    int32_t  pid;
    int32_t  ctl_fd;
    uint64_t iface_id;
    uint64_t pid_ns;
    uint32_t max_payload;
} __attribute__((packed));

class test_uct_bad : public uct_fixture {
protected:
    /* Connect with a modified copy of @a receiver's address */
    ucs_status_t connect_with(entity *sender, entity *receiver,
                              const std::function<void(iface_addr*)> &edit)
    {
        std::vector<char> addr = receiver->iface_addr;
        uct_ep_h ep;

        EXPECT_EQ(sizeof(iface_addr), addr.size());
        edit((iface_addr*)addr.data());
        ucs_status_t status = sender->ep_create(receiver->dev_addr.data(),
                                                addr.data(), &ep);
        if (status == UCS_OK) {
            sender->ep_destroy(ep);
        }
        return status;
    }

    /* The receiver still takes a good sender */
    void check_still_works(entity *sender, entity *receiver)
    {
        uct_ep_h ep = connect(sender, receiver);

        ASSERT_NE(nullptr, ep);
        EXPECT_EQ(UCS_OK, uct_ep_am_short(ep, 1, 0, NULL, 0));
        sender->ep_destroy(ep);
    }

    static ucs_status_t discard(void*, void*, size_t, unsigned)
    {
        return UCS_OK;
    }
};


TEST_F(test_uct_bad, rkey_corrupted_or_truncated)
{
    entity *e = create_entity();
    std::vector<uint8_t> region(8192);
    uct_mem_h memh;
    uct_rkey_bundle_t bundle;

    ASSERT_NE(nullptr, e);
    size_t size = e->md_attr.rkey_packed_size;
    ASSERT_GT(size, 0u);
    ASSERT_EQ(UCS_OK, uct_md_mem_reg(e->md, region.data(), region.size(),
                                     UCT_MD_MEM_ACCESS_ALL, &memh));
    std::vector<uint8_t> good(size);
    ASSERT_EQ(UCS_OK, uct_md_mkey_pack(e->md, memh, good.data()));
    ASSERT_EQ(UCS_OK, uct_rkey_unpack(m_component, good.data(), &bundle));
    uct_rkey_release(m_component, &bundle);

    scoped_log_capture log;
    for (size_t i = 0; i < size; ++i) {
        for (uint8_t flip : {0x01, 0x80, 0xff}) {
            std::vector<uint8_t> bad = good;
            bad[i] ^= flip;
            ucs_status_t status = uct_rkey_unpack(m_component, bad.data(),
                                                  &bundle);
            EXPECT_NE(UCS_OK, status) << "byte " << i << " ^ " << (int)flip;
            if (status == UCS_OK) {
                uct_rkey_release(m_component, &bundle);
            }
        }
    }

    /* a short buffer, the rest of which the caller left zeroed */
    for (size_t keep = 0; keep < size; ++keep) {
        std::vector<uint8_t> bad(size, 0);
        memcpy(bad.data(), good.data(), keep);
        ucs_status_t status = uct_rkey_unpack(m_component, bad.data(),
                                              &bundle);
        EXPECT_NE(UCS_OK, status) << "truncated to " << keep;
        if (status == UCS_OK) {
            uct_rkey_release(m_component, &bundle);
        }
    }

    std::mt19937 rng(1);
    for (int n = 0; n < 1000; ++n) {
        std::vector<uint8_t> bad(size);
        for (auto &b : bad) {
            b = rng();
        }
        ucs_status_t status = uct_rkey_unpack(m_component, bad.data(),
                                              &bundle);
        EXPECT_NE(UCS_OK, status);
        if (status == UCS_OK) {
            uct_rkey_release(m_component, &bundle);
        }
    }

    EXPECT_TRUE(log.contains("rkey")) << log.all();
    uct_md_mem_dereg(e->md, memh);
}

TEST_F(test_uct_bad, iface_address)
{
    entity *sender   = create_entity();
    entity *receiver = create_entity();
    entity *other    = create_entity();
    ASSERT_NE(nullptr, other);
    ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(receiver->iface, 1, discard,
                                               NULL, 0));
    const iface_addr good  = *(const iface_addr*)receiver->iface_addr.data();
    const iface_addr other_addr = *(const iface_addr*)other->iface_addr.data();

    /* a pid that exited */
    pid_t gone = fork();
    ASSERT_GE(gone, 0);
    if (gone == 0) {
        _exit(0);
    }
    ASSERT_EQ(gone, waitpid(gone, NULL, 0));

    /* a live process that is not the receiver: it inherited our fds, so
     * /proc/<pid>/fd/<ctl_fd> is the very control area */
    int pipefd[2];
    ASSERT_EQ(0, pipe(pipefd));
    pid_t sleeper = fork();
    ASSERT_GE(sleeper, 0);
    if (sleeper == 0) {
        char c;
        close(pipefd[1]);
        (void)!read(pipefd[0], &c, 1);
        _exit(0);
    }
    close(pipefd[0]);

    int null_fd  = open("/dev/null", O_RDWR);
    int zero_fd  = memfd_create("not-a-ctl", 0);
    ASSERT_GE(zero_fd, 0);
    ASSERT_EQ(0, ftruncate(zero_fd, 1 << 20));

    struct bad_case {
        const char                        *what;
        std::function<void(iface_addr*)> edit;
    };
    std::vector<bad_case> cases = {
        {"exited pid", [&](iface_addr *a) { a->pid = gone; }},
        {"not the receiver", [&](iface_addr *a) { a->pid = sleeper; }},
        {"pid 0", [](iface_addr *a) { a->pid = 0; }},
        {"pid -1", [](iface_addr *a) { a->pid = -1; }},
        {"fd -1", [](iface_addr *a) { a->ctl_fd = -1; }},
        {"closed fd", [](iface_addr *a) { a->ctl_fd = 999999; }},
        {"/dev/null", [&](iface_addr *a) { a->ctl_fd = null_fd; }},
        {"zeroed memfd", [&](iface_addr *a) { a->ctl_fd = zero_fd; }},
        {"stdin", [](iface_addr *a) { a->ctl_fd = 0; }},
        {"other iface's fd",
         [&](iface_addr *a) { a->ctl_fd = other_addr.ctl_fd; }},
        {"other iface's id",
         [&](iface_addr *a) { a->iface_id = other_addr.iface_id; }},
        {"iface_id + 1", [](iface_addr *a) { ++a->iface_id; }},
        {"iface_id 0", [](iface_addr *a) { a->iface_id = 0; }},
        {"max payload 0", [](iface_addr *a) { a->max_payload = 0; }},
        {"max payload / 2", [](iface_addr *a) { a->max_payload /= 2; }},
        {"below what we send",
         [&](iface_addr *a) {
             a->max_payload = sender->attr.cap.am.max_bcopy - 1;
         }},
    };

    {
        scoped_log_capture log;
        for (const auto &c : cases) {
            EXPECT_NE(UCS_OK, connect_with(sender, receiver, c.edit))
                    << c.what;
        }

        std::mt19937_64 rng(3);
        for (int n = 0; n < 200; ++n) {
            EXPECT_NE(UCS_OK,
                      connect_with(sender, receiver, [&](iface_addr *a) {
                          a->pid      = (int32_t)rng();
                          a->ctl_fd   = (int32_t)(rng() % 64);
                          a->iface_id = rng();
                      }));
            /* right pid and fd, garbage id */
            EXPECT_NE(UCS_OK,
                      connect_with(sender, receiver, [&](iface_addr *a) {
                          a->iface_id = rng();
                      }));
        }
    }

    close(pipefd[1]);
    waitpid(sleeper, NULL, 0);
    close(null_fd);
    close(zero_fd);

    /* no slot was taken by the failed attempts */
    EXPECT_EQ(0, memcmp(&good, receiver->iface_addr.data(), sizeof(good)));
    check_still_works(sender, receiver);
}

/* A sender sizes records by its own block, the receiver's ring takes up to
 * its own: a sender with larger blocks than its receiver does not reach it
 * (UCP sees an unreachable peer; a direct ep_create says why), one with
 * smaller blocks does. */
TEST_F(test_uct_bad, block_size_mismatch)
{
    entity *small = create_entity({{"BLOCK_SIZE", "16k"}});
    entity *large = create_entity({{"BLOCK_SIZE", "64k"}});
    entity *same  = create_entity({{"BLOCK_SIZE", "16k"}});
    uct_ep_h ep;

    ASSERT_NE(nullptr, same);
    EXPECT_FALSE(uct_iface_is_reachable(
            large->iface, (const uct_device_addr_t*)small->dev_addr.data(),
            (const uct_iface_addr_t*)small->iface_addr.data()));
    {
        scoped_log_capture log;
        EXPECT_EQ(UCS_ERR_UNREACHABLE,
                  large->ep_create(small->dev_addr.data(),
                                   small->iface_addr.data(), &ep));
        EXPECT_TRUE(log.contains("UCX_REMAPRING_BLOCK_SIZE")) << log.all();
    }

    EXPECT_TRUE(uct_iface_is_reachable(
            small->iface, (const uct_device_addr_t*)large->dev_addr.data(),
            (const uct_iface_addr_t*)large->iface_addr.data()));
    ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(large->iface, 1, discard, NULL,
                                               0));
    check_still_works(small, large);

    EXPECT_TRUE(uct_iface_is_reachable(
            small->iface, (const uct_device_addr_t*)same->dev_addr.data(),
            (const uct_iface_addr_t*)same->iface_addr.data()));
    ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(same->iface, 1, discard, NULL,
                                               0));
    check_still_works(small, same);
}

/* A pool with room for one ring: the second sender is refused with an
 * error naming the setting, the first keeps working */
TEST_F(test_uct_bad, pool_full_refuses_sender)
{
    entity *receiver = create_entity({{"BLOCK_SIZE", "4k"},
                                      {"RING_SLOTS", "4"},
                                      {"IDLE_SLOTS", "4"},
                                      {"CREDIT_BATCH", "1"},
                                      {"POOL_MAX", "16k"}});
    ASSERT_NE(nullptr, receiver);
    entity *s1       = create_entity({{"BLOCK_SIZE", "4k"}});
    entity *s2       = create_entity({{"BLOCK_SIZE", "4k"}});
    uct_ep_h ep2;

    ASSERT_NE(nullptr, s2);
    ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(receiver->iface, 1, discard,
                                               NULL, 0));
    uct_ep_h ep1 = connect(s1, receiver);
    ASSERT_NE(nullptr, ep1);
    ASSERT_EQ(UCS_OK, s2->ep_create(receiver->dev_addr.data(),
                                    receiver->iface_addr.data(), &ep2));
    {
        scoped_log_capture log;
        EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT,
                  retry([&]() { return uct_ep_am_short(ep2, 1, 0, NULL, 0); }));
        EXPECT_TRUE(log.contains("UCX_REMAPRING_POOL_MAX")) << log.all();
    }
    s2->ep_destroy(ep2);
    EXPECT_EQ(UCS_OK,
              retry([&]() { return uct_ep_am_short(ep1, 1, 0, NULL, 0); }));
}

TEST_F(test_uct_bad, max_peers_exceeded)
{
    entity *receiver = create_entity({{"MAX_PEERS", "1"}});
    entity *s1       = create_entity();
    entity *s2       = create_entity();
    uct_ep_h ep2;

    ASSERT_NE(nullptr, s2);
    ASSERT_NE(nullptr, connect(s1, receiver));
    {
        scoped_log_capture log;
        EXPECT_EQ(UCS_ERR_EXCEEDS_LIMIT,
                  s2->ep_create(receiver->dev_addr.data(),
                                receiver->iface_addr.data(), &ep2));
        EXPECT_TRUE(log.contains("MAX_PEERS")) << log.all();
    }
}

TEST_F(test_uct_bad, invalid_settings)
{
    struct setting {
        const char *name;
        const char *value;
    };
    static const setting cases[] = {
        {"BLOCK_SIZE", "3000"},   {"BLOCK_SIZE", "1k"},
        {"BLOCK_SIZE", "96k"},    {"BLOCK_SIZE", "inf"},
        {"IDLE_SLOTS", "0"},      {"BLOCK_SIZE", "2g"},
        {"BLOCK_SIZE", "4g"},     {"RING_SLOTS", "0"},
        {"RING_SLOTS", "1"},      {"RING_SLOTS", "3"},
        {"RING_SLOTS", "12"},     {"RING_SLOTS", "131072"},
        {"RING_SLOTS", "2147483648"}, {"POOL_MAX", "64k"},
        {"POOL_MAX", "auto"},     {"CREDIT_BATCH", "0"},
        {"CREDIT_BATCH", "9"},    {"MAX_PEERS", "0"},
        {"MAX_PEERS", "4097"},    {"MAX_SHORT", "4"},
        {"MAX_SHORT", "256k"},    {"BW", "0MBs"},
        {"BW", "-5MBs"},          {"LATENCY", "inf"},
        {"OVERHEAD", "inf"},
    };

    for (const auto &c : cases) {
        scoped_log_capture log;
        entity *e = nullptr;

        EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                  try_create_entity({{c.name, c.value}}, 0, &e))
                << c.name << "=" << c.value;
        EXPECT_TRUE(log.contains(std::string("REMAPRING_") + c.name))
                << c.name << "=" << c.value << ": " << log.all();
    }

    /* the limits themselves are fine */
    entity *e = nullptr;
    EXPECT_EQ(UCS_OK, try_create_entity({{"BLOCK_SIZE", "4k"},
                                         {"RING_SLOTS", "2"},
                                         {"CREDIT_BATCH", "1"},
                                         {"POOL_MAX", "8k"},
                                         {"MAX_PEERS", "1"},
                                         {"MAX_SHORT", "8"}},
                                        0, &e));
}

/* BW, LATENCY and OVERHEAD default to the figures of this process's wire;
 * set, they are reported as given. */
TEST_F(test_uct_bad, performance_settings)
{
    entity *shm = nullptr, *cma = nullptr, *set = nullptr;

    ASSERT_EQ(UCS_OK, try_create_entity({{"WIRE", "shm"}}, 0, &shm));
    ASSERT_EQ(UCS_OK, try_create_entity({{"WIRE", "cma"}}, 0, &cma));
    ASSERT_EQ(UCS_OK, try_create_entity({{"WIRE", "shm"},
                                         {"BW", "1000MBs"},
                                         {"LATENCY", "7us"},
                                         {"OVERHEAD", "250ns"}},
                                        0, &set));

    /* the shm wire makes no system call per message: faster on all three */
    EXPECT_GT(shm->attr.bandwidth.dedicated, cma->attr.bandwidth.dedicated);
    EXPECT_LT(shm->attr.latency.c, cma->attr.latency.c);
    EXPECT_LT(shm->attr.overhead, cma->attr.overhead);
    EXPECT_GT(cma->attr.latency.c, 0);
    EXPECT_GT(cma->attr.overhead, 0);

    EXPECT_NEAR(1000.0 * 1024 * 1024, set->attr.bandwidth.dedicated, 1.0);
    EXPECT_NEAR(7e-6, set->attr.latency.c, 1e-8);
    EXPECT_NEAR(250e-9, set->attr.overhead, 1e-9);
}

/* MAX_SHORT=auto is 16 KiB, or half a block if that is less; set, it is
 * reported as given */
TEST_F(test_uct_bad, max_short_settings)
{
    entity *dflt = nullptr, *small = nullptr, *set = nullptr;

    ASSERT_EQ(UCS_OK, try_create_entity({}, 0, &dflt));
    ASSERT_EQ(UCS_OK, try_create_entity({{"BLOCK_SIZE", "8k"},
                                         {"MAX_SHORT", "auto"}},
                                        0, &small));
    ASSERT_EQ(UCS_OK, try_create_entity({{"MAX_SHORT", "3000"}}, 0, &set));

    EXPECT_EQ(16384u, dflt->attr.cap.am.max_short);
    EXPECT_EQ(4096u, small->attr.cap.am.max_short);
    EXPECT_EQ(3000u, set->attr.cap.am.max_short);
    EXPECT_EQ(dflt->attr.cap.am.max_short, dflt->attr.cap.put.max_short);
}

/* BLOCK_SIZE=auto is 256 KiB on this transport: a 128 KiB message goes in
 * one record (UCP sends it eager); set, it is taken as given */
TEST_F(test_uct_bad, block_size_auto)
{
    entity *dflt = nullptr, *set = nullptr;

    ASSERT_EQ(UCS_OK, try_create_entity({}, 0, &dflt));
    ASSERT_EQ(UCS_OK, try_create_entity({{"BLOCK_SIZE", "128k"}}, 0, &set));
    EXPECT_GT(dflt->attr.cap.am.max_bcopy, 131072u + 64);
    EXPECT_LE(dflt->attr.cap.am.max_bcopy, 262144u);
    EXPECT_LT(set->attr.cap.am.max_bcopy, 131072u);
}

TEST_F(test_uct_bad, malformed_settings)
{
    static const char *const cases[][2] = {
        {"BLOCK_SIZE", "banana"}, {"RING_SLOTS", "-1x"},
        {"POOL_MAX", "12q"},      {"CREDIT_BATCH", "two"},
        {"NO_SUCH_SETTING", "1"},
    };

    for (const auto &c : cases) {
        scoped_log_capture log;
        entity *e = nullptr;

        EXPECT_NE(UCS_OK, try_create_entity({{c[0], c[1]}}, 0, &e))
                << c[0] << "=" << c[1];
    }
}

TEST_F(test_uct_bad, rx_headroom_too_large)
{
    scoped_log_capture log;
    entity *e = nullptr;

    /* more than half a block in front of every payload */
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              try_create_entity({{"BLOCK_SIZE", "64k"}}, 40000, &e));
    EXPECT_TRUE(log.contains("rx_headroom")) << log.all();
    EXPECT_EQ(UCS_OK, try_create_entity({}, 4096, &e));
}

} // namespace
