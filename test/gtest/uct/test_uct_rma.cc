/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * Rendezvous primitives: put_zcopy and get_zcopy into and from memory the
 * peer registered, with its rkey packed by uct_md_mkey_pack() and unpacked
 * by uct_rkey_unpack(); sizes from 1 byte to 6 MiB, one to max_iov local
 * pieces, at offsets inside the registration; every byte checked. Both
 * complete when they return (UCS_OK, the completion is never called), and
 * a range outside the rkey is refused without touching memory. The
 * registration is page aligned: registrations go through the memory cache,
 * which, like UCX's rcache, grants whole pages.
 */

#include "common/uct_fixture.h"

#include <cstring>

#include <sys/mman.h>
#include <unistd.h>

using namespace remapring_test;

namespace {

class test_uct_rma : public uct_fixture {
protected:
    void SetUp() override
    {
        uct_fixture::SetUp();
        if (IsSkipped()) {
            return;
        }

        m_sender   = create_entity();
        m_receiver = create_entity();
        ASSERT_NE(nullptr, m_receiver);
        m_ep = connect(m_sender, m_receiver);
        ASSERT_NE(nullptr, m_ep);

        /* a guard page each side, written to zero, checked at the end */
        m_page = sysconf(_SC_PAGESIZE);
        m_map  = (uint8_t*)mmap(NULL, REMOTE_SIZE + 2 * m_page,
                                PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        ASSERT_NE(MAP_FAILED, (void*)m_map);
        m_remote.reset(m_map + m_page, REMOTE_SIZE);
        ASSERT_EQ(UCS_OK, uct_md_mem_reg(m_receiver->md, m_remote.data(),
                                         m_remote.size(),
                                         UCT_MD_MEM_ACCESS_ALL, &m_memh));
        std::vector<char> packed(m_receiver->md_attr.rkey_packed_size);
        ASSERT_EQ(UCS_OK,
                  uct_md_mkey_pack(m_receiver->md, m_memh, packed.data()));
        ASSERT_EQ(UCS_OK,
                  uct_rkey_unpack(m_component, packed.data(), &m_rkey));
        m_have_rkey = true;
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
        if ((m_map != nullptr) && (m_map != MAP_FAILED)) {
            for (size_t i = 0; i < m_page; ++i) {
                EXPECT_EQ(0, m_map[i]) << "guard page before written";
                EXPECT_EQ(0, m_map[m_page + REMOTE_SIZE + i])
                        << "guard page after written";
            }
            munmap(m_map, REMOTE_SIZE + 2 * m_page);
        }
    }

    /* @a local split into @a iovcnt pieces */
    static std::vector<uct_iov_t> make_iov(std::vector<uint8_t> &local,
                                           size_t iovcnt)
    {
        std::vector<uct_iov_t> iov(iovcnt);
        size_t offset = 0;

        for (size_t i = 0; i < iovcnt; ++i) {
            size_t piece  = (i == iovcnt - 1) ? local.size() - offset :
                                                local.size() / iovcnt;
            iov[i].buffer = local.data() + offset;
            iov[i].length = piece;
            iov[i].memh   = UCT_MEM_HANDLE_NULL;
            iov[i].stride = 0;
            iov[i].count  = 1;
            offset       += piece;
        }

        return iov;
    }

    ucs_status_t rma(bool put, std::vector<uint8_t> &local, size_t iovcnt,
                     size_t remote_offset)
    {
        std::vector<uct_iov_t> iov = make_iov(local, iovcnt);
        uct_completion_t comp      = {};
        uint64_t addr = (uintptr_t)m_remote.data() + remote_offset;
        ucs_status_t status;

        comp.func   = [](uct_completion_t*) { ADD_FAILURE(); };
        comp.count  = 1;
        comp.status = UCS_OK;
        status = put ? uct_ep_put_zcopy(m_ep, iov.data(), iovcnt, addr,
                                        m_rkey.rkey, &comp) :
                       uct_ep_get_zcopy(m_ep, iov.data(), iovcnt, addr,
                                        m_rkey.rkey, &comp);
        /* done when it returns: no completion to wait for */
        EXPECT_NE(UCS_INPROGRESS, status);
        EXPECT_EQ(1, comp.count);
        return status;
    }

    /* a view of the registered memory */
    struct span {
        uint8_t *ptr  = nullptr;
        size_t  count = 0;

        void reset(uint8_t *p, size_t n) { ptr = p; count = n; }
        uint8_t *data() { return ptr; }
        size_t size() const { return count; }
        uint8_t &operator[](size_t i) { return ptr[i]; }
        uint8_t *begin() { return ptr; }
        uint8_t *end() { return ptr + count; }
        bool operator==(const std::vector<uint8_t> &v) const
        {
            return (v.size() == count) && (memcmp(v.data(), ptr, count) == 0);
        }
    };

    static const size_t REMOTE_SIZE = 6 * 1024 * 1024 + 8192;

    entity               *m_sender   = nullptr;
    entity               *m_receiver = nullptr;
    uct_ep_h             m_ep        = nullptr;
    size_t               m_page      = 4096;
    uint8_t              *m_map      = nullptr;
    span                 m_remote;
    uct_mem_h            m_memh      = nullptr;
    uct_rkey_bundle_t    m_rkey      = {};
    bool                 m_have_rkey = false;
};


TEST_F(test_uct_rma, put_get_sizes)
{
    static const size_t sizes[] = {1,     7,      64,     4095,
                                   4096,  65537,  1 << 20,
                                   (4 << 20) + 3, 6 << 20};
    size_t max_iov = m_sender->attr.cap.put.max_iov;
    uint64_t seed  = 1;

    ASSERT_GE(m_sender->attr.cap.put.max_zcopy, size_t(6 << 20));
    ASSERT_GE(m_sender->attr.cap.get.max_zcopy, size_t(6 << 20));
    for (size_t length : sizes) {
        for (size_t iovcnt : {size_t(1), size_t(2), max_iov}) {
            size_t n      = std::min(iovcnt, length);
            size_t offset = (length + 4096 <= REMOTE_SIZE) ?
                            (seed * 577) % (REMOTE_SIZE - length) : 0;
            std::vector<uint8_t> local(length);

            ++seed;
            fill_pattern(local.data(), length, seed);
            memset(m_remote.data(), 0, m_remote.size());
            ASSERT_EQ(UCS_OK, rma(true, local, n, offset))
                    << "put " << length << " iovcnt " << n;
            EXPECT_EQ(-1, check_pattern(m_remote.data() + offset, length,
                                        seed)) << "put " << length;
            /* nothing around it was touched */
            if (offset > 0) {
                EXPECT_EQ(0, m_remote[offset - 1]);
            }
            if (offset + length < m_remote.size()) {
                EXPECT_EQ(0, m_remote[offset + length]);
            }

            ++seed;
            fill_pattern(m_remote.data() + offset, length, seed);
            memset(local.data(), 0, length);
            ASSERT_EQ(UCS_OK, rma(false, local, n, offset))
                    << "get " << length << " iovcnt " << n;
            EXPECT_EQ(-1, check_pattern(local.data(), length, seed))
                    << "get " << length;
        }
    }
}

TEST_F(test_uct_rma, whole_registration)
{
    std::vector<uint8_t> local(REMOTE_SIZE);

    fill_pattern(local.data(), local.size(), 99);
    ASSERT_EQ(UCS_OK, rma(true, local, 3, 0));
    EXPECT_TRUE(m_remote == local);
    memset(local.data(), 0, local.size());
    ASSERT_EQ(UCS_OK, rma(false, local, 1, 0));
    EXPECT_TRUE(m_remote == local);
}

TEST_F(test_uct_rma, outside_rkey_refused)
{
    std::vector<uint8_t> local(4096, 0xee);
    scoped_log_capture log;

    memset(m_remote.data(), 0, m_remote.size());
    /* one byte past the end */
    EXPECT_NE(UCS_OK, rma(true, local, 1, REMOTE_SIZE - 4095));
    /* entirely after it, and before it */
    EXPECT_NE(UCS_OK, rma(true, local, 1, REMOTE_SIZE + 8192));
    EXPECT_NE(UCS_OK, rma(false, local, 2, REMOTE_SIZE - 1));
    EXPECT_NE(UCS_OK, rma(true, local, 2, REMOTE_SIZE));
    {
        std::vector<uct_iov_t> iov = make_iov(local, 1);
        EXPECT_NE(UCS_OK, uct_ep_put_zcopy(m_ep, iov.data(), 1,
                                           (uintptr_t)m_remote.data() - 1,
                                           m_rkey.rkey, NULL));
        /* a length that wraps the address space */
        iov[0].length = SIZE_MAX - 100;
        EXPECT_NE(UCS_OK, uct_ep_get_zcopy(m_ep, iov.data(), 1,
                                           (uintptr_t)m_remote.data(),
                                           m_rkey.rkey, NULL));
    }
    EXPECT_TRUE(log.contains("outside rkey")) << log.all();

    for (uint8_t b : m_remote) {
        ASSERT_EQ(0, b) << "refused put wrote memory";
    }

    /* the endpoint still works */
    EXPECT_EQ(UCS_OK, rma(true, local, 1, REMOTE_SIZE - 4096));
}

/* No key at all, or UCT's invalid key: refused, never dereferenced */
TEST_F(test_uct_rma, missing_rkey_refused)
{
    std::vector<uint8_t> local(64, 0xee);
    std::vector<uct_iov_t> iov = make_iov(local, 1);
    scoped_log_capture log;

    memset(m_remote.data(), 0, m_remote.size());
    for (uct_rkey_t rkey : {(uct_rkey_t)0, (uct_rkey_t)UCT_INVALID_RKEY}) {
        EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                  uct_ep_put_zcopy(m_ep, iov.data(), 1,
                                   (uintptr_t)m_remote.data(), rkey, NULL));
        EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                  uct_ep_get_zcopy(m_ep, iov.data(), 1,
                                   (uintptr_t)m_remote.data(), rkey, NULL));
    }
    EXPECT_TRUE(log.contains("no remote key")) << log.all();

    for (uint8_t b : m_remote) {
        ASSERT_EQ(0, b) << "refused put wrote memory";
    }
    EXPECT_EQ(UCS_OK, rma(true, local, 1, 0));
}

} // namespace
