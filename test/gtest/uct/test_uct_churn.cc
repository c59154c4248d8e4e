/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * Endpoint churn is free: an endpoint created, used once and destroyed in a
 * loop, 10^5 times, to one receiver and round robin to several, leaves the
 * process with the file descriptors, mappings (VMAs, give or take two)
 * and receive pool memory it had after the first rounds, and never runs
 * out of connection slots: every receiver accepts one sender only
 * (MAX_PEERS=1), so each round needs the slot the last one gave back.
 * Counts are printed. Under valgrind the loop is 10^3 rounds.
 */

#include "common/uct_fixture.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace remapring_test;

namespace {

static const uint8_t AM_ID = 9;

/* What the process holds that churn could leak */
struct usage {
    size_t fds;
    size_t vmas;
    size_t pool_bytes; /* the receive pools' memfds */

    /* The same, but for a few VMAs: ring views are address space reserved
     * anew for each connection, and where the kernel places the next one
     * can split or join the free reservations around it (seen: one more
     * after 10^5 rounds, the same bytes reserved). A leak per round would
     * show thousands. */
    bool operator==(const usage &o) const
    {
        return (fds == o.fds) && (vmas <= o.vmas + 2) && (o.vmas <= vmas + 2) &&
               (pool_bytes == o.pool_bytes);
    }
};

std::ostream &operator<<(std::ostream &os, const usage &u)
{
    return os << u.fds << " fds, " << u.vmas << " VMAs, " << u.pool_bytes
              << " pool bytes";
}

static std::string to_string(const usage &u)
{
    std::ostringstream os;

    os << u;
    return os.str();
}

static usage measure()
{
    usage u = {0, 0, 0};
    struct stat st;

    u.fds = for_each_fd([&](const char *path, const char *link) {
        if ((strstr(link, "memfd:remapring-pool") != nullptr) &&
            (stat(path, &st) == 0)) {
            u.pool_bytes += st.st_size;
        }
    });

    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) {
        ++u.vmas;
    }
    return u;
}

static bool under_valgrind()
{
    const char *p = getenv("LD_PRELOAD");
    return (p != nullptr) && (strstr(p, "vgpreload") != nullptr);
}

class test_uct_churn : public uct_fixture {
protected:
    static ucs_status_t am_count(void *arg, void *data, size_t length,
                                 unsigned flags)
    {
        ++*(size_t*)arg;
        return UCS_OK;
    }

    /* One round: an endpoint to @a receiver, one message, destroyed. The
     * receiver gives the slot back on its progress; until then a new
     * endpoint finds none, which is retried. */
    void round(entity *sender, entity *receiver, size_t *received)
    {
        size_t before = *received;
        ucs_status_t status;
        uct_ep_h ep;

        {
            scoped_log_capture log; /* "accepts no more senders" */
            ASSERT_TRUE(wait_for([&]() {
                status = sender->ep_create(receiver->dev_addr.data(),
                                           receiver->iface_addr.data(), &ep);
                return status == UCS_OK;
            })) << "no connection slot: " << ucs_status_string(status);
        }
        ASSERT_EQ(UCS_OK, retry([&]() {
                      return uct_ep_am_short(ep, AM_ID, 1, NULL, 0);
                  }));
        sender->ep_destroy(ep);
        ASSERT_TRUE(wait_for([&]() { return *received == before + 1; }));
    }

    void churn(unsigned nreceivers)
    {
        const size_t rounds = under_valgrind() ? 1000 : 100000;
        const size_t warmup = 100;
        std::vector<entity*> receivers;
        size_t received     = 0;
        entity *sender      = create_entity();
        usage base;

        ASSERT_NE(nullptr, sender);
        for (unsigned i = 0; i < nreceivers; ++i) {
            receivers.push_back(create_entity({{"MAX_PEERS", "1"}}));
            ASSERT_NE(nullptr, receivers.back());
            ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(receivers.back()->iface,
                                                       AM_ID, am_count,
                                                       &received, 0));
        }

        double start = now();
        for (size_t n = 0; n < rounds; ++n) {
            if (n == warmup) {
                base = measure();
            }
            round(sender, receivers[n % nreceivers], &received);
            if (HasFatalFailure()) {
                return;
            }
        }
        double elapsed = now() - start;

        usage after = measure();
        printf("%zu rounds to %u receiver(s) in %.1f s (%.1f us each);"
               " after round %zu: %s; at the end: %s\n",
               rounds, nreceivers, elapsed, elapsed * 1e6 / rounds, warmup,
               to_string(base).c_str(), to_string(after).c_str());
        EXPECT_EQ(rounds, received);
        EXPECT_EQ(base, after);
    }
};

TEST_F(test_uct_churn, one_receiver)
{
    churn(1);
}

TEST_F(test_uct_churn, many_receivers)
{
    churn(16);
}

} // namespace
