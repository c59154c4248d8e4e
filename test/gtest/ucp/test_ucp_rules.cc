/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * What UCP expects of a transport, checked through UCP itself on workers
 * whose only transport is remapring, on each wire of one host (shm, cma)
 * and on the RDMA transport where there is an RDMA device (the test bed's
 * guest runs these on soft-RoCE: test/scripts/vm/verbs.sh):
 * - a worker that asks for AM alignment opens, and every message UCP hands
 *   over with its data in place (UCP_AM_RECV_ATTR_FLAG_DATA) is aligned;
 * - after a peer failure, every operation on the endpoint completes with
 *   the status its error handler was given (or UCS_ERR_CANCELED), by bcopy
 *   and by zcopy, and with the endpoint force-closed at once;
 * - a peer that force-closes its endpoint and lives on is found by UCP's
 *   keepalive within a few intervals; one that closes it gracefully, or
 *   does not progress for a while, is not failed.
 * Each also runs over UCX's tcp (loopback), the reference: what UCP does
 * with a transport that connects endpoint to endpoint.
 * The workers are in this process: the transport connects interfaces of
 * one process as it connects processes (process_vm_writev to ourselves,
 * or the RDMA device's loopback).
 */

#include <gtest/gtest.h>

extern "C" {
#include <ucp/api/ucp.h>
}

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <dirent.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>


namespace {

/* Whether this host lets the transport work (it is listed at all) */
bool host_supported()
{
    static const uint64_t src = 1;
    uint64_t dst              = 0;
    struct iovec local        = {(void*)&src, sizeof(src)};
    struct iovec remote       = {&dst, sizeof(dst)};

    return process_vm_writev(getpid(), &local, 1, &remote, 1, 0) ==
           sizeof(dst);
}

/* The first RDMA device's port 1 (UCX's device name), or "" if none */
std::string rdma_device()
{
    DIR *dir = opendir("/sys/class/infiniband");
    std::string name;
    struct dirent *ent;

    if (dir == NULL) {
        return "";
    }

    while ((ent = readdir(dir)) != NULL) {
        if ((ent->d_name[0] != '.') &&
            (name.empty() || (name.compare(ent->d_name) > 0))) {
            name = ent->d_name;
        }
    }
    closedir(dir);
    return name.empty() ? name : name + ":1";
}

/* A case's parameter: the wire or transport, then what the case varies
 * ("shm", "cma/zcopy") */
std::string param_wire(const std::string &param)
{
    return param.substr(0, param.find('/'));
}

std::string param_variant(const std::string &param)
{
    size_t slash = param.find('/');

    return (slash == std::string::npos) ? "" : param.substr(slash + 1);
}

/* gtest names: "cma/zcopy" -> cma_zcopy */
std::string param_name(const testing::TestParamInfo<std::string> &info)
{
    std::string name = info.param;

    std::replace(name.begin(), name.end(), '/', '_');
    return name;
}

double now_sec()
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

const uint16_t AM_ID = 7;


/* The outcome of one non-blocking operation */
struct op_result {
    bool         done   = false;
    ucs_status_t status = UCS_INPROGRESS;
};

void op_done(void *request, ucs_status_t status, void *user_data)
{
    op_result *res = static_cast<op_result*>(user_data);

    res->done   = true;
    res->status = status;
}

} // namespace


class test_ucp_rules : public testing::TestWithParam<std::string> {
protected:
    struct worker {
        ucp_worker_h      h = nullptr;
        std::vector<char> address;
    };

    /* What the error handler of an endpoint saw */
    struct err_state {
        int          count  = 0;
        ucs_status_t status = UCS_OK;
    };

    void SetUp() override
    {
        std::string wire = param_wire(GetParam());
        ucp_config_t *config;
        ucp_params_t params = {};
        std::string device;

        if (wire == "tcp") {
            /* the reference: UCX's own transport */
            m_config.insert(m_config.begin(), {"TLS", "tcp"});
        } else if (wire == "verbs") {
            device = rdma_device();
            if (device.empty()) {
                GTEST_SKIP() << "no RDMA device: the RDMA transport's cases"
                                " run in the test bed's guest (test_vm_verbs)";
            }

            /* the RDMA transport alone, looped back on the device */
            m_config.insert(m_config.begin(),
                            {{"TLS", "remaprdma"}, {"NET_DEVICES", device}});
        } else {
            if (!host_supported()) {
                GTEST_SKIP() << "process_vm_writev to ourselves is not"
                                " allowed (Yama ptrace_scope, seccomp): no"
                                " remapring";
            }

            setenv("UCX_REMAPRING_WIRE", wire.c_str(), 1);
            m_config.insert(m_config.begin(), {"TLS", "remapring"});
        }

        ASSERT_EQ(UCS_OK, ucp_config_read(NULL, NULL, &config));
        for (const auto &kv : m_config) {
            ASSERT_EQ(UCS_OK, ucp_config_modify(config, kv.first.c_str(),
                                                kv.second.c_str()));
        }

        params.field_mask = UCP_PARAM_FIELD_FEATURES;
        params.features   = UCP_FEATURE_AM | UCP_FEATURE_TAG |
                            UCP_FEATURE_RMA;
        ASSERT_EQ(UCS_OK, ucp_init(&params, config, &m_ctx));
        ucp_config_release(config);
    }

    void TearDown() override
    {
        for (auto &w : m_workers) {
            if (w.h != nullptr) {
                ucp_worker_destroy(w.h);
            }
        }
        m_workers.clear();
        if (m_ctx != nullptr) {
            ucp_cleanup(m_ctx);
        }
        unsetenv("UCX_REMAPRING_WIRE");
    }

    /* A worker of this context, its index in m_workers; @a am_alignment 0:
     * none asked */
    size_t add_worker(size_t am_alignment = 0)
    {
        ucp_worker_params_t params = {};
        ucp_address_t *address;
        size_t length;
        worker w;

        params.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
        params.thread_mode = UCS_THREAD_MODE_SINGLE;
        if (am_alignment > 0) {
            params.field_mask  |= UCP_WORKER_PARAM_FIELD_AM_ALIGNMENT;
            params.am_alignment = am_alignment;
        }

        EXPECT_EQ(UCS_OK, ucp_worker_create(m_ctx, &params, &w.h));
        if (w.h == nullptr) {
            return SIZE_MAX;
        }

        EXPECT_EQ(UCS_OK, ucp_worker_get_address(w.h, &address, &length));
        w.address.assign((char*)address, (char*)address + length);
        ucp_worker_release_address(w.h, address);
        m_workers.push_back(w);
        return m_workers.size() - 1;
    }

    /* Messages of AM_ID to worker @a w go to @a cb with @a arg */
    void set_am_handler(size_t w, ucp_am_recv_callback_t cb, void *arg)
    {
        ucp_am_handler_param_t param = {};

        param.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                           UCP_AM_HANDLER_PARAM_FIELD_CB |
                           UCP_AM_HANDLER_PARAM_FIELD_ARG;
        param.id         = AM_ID;
        param.cb         = cb;
        param.arg        = arg;
        ASSERT_EQ(UCS_OK,
                  ucp_worker_set_am_recv_handler(m_workers[w].h, &param));
    }

    static void err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
    {
        err_state *err = static_cast<err_state*>(arg);

        ++err->count;
        err->status = status;
    }

    /* An endpoint of worker @a from to worker @a to, with peer failure
     * handling reported to @a err */
    ucp_ep_h connect(size_t from, size_t to, err_state *err)
    {
        ucp_ep_params_t params = {};
        ucp_ep_h ep            = nullptr;

        params.field_mask      = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                                 UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                 UCP_EP_PARAM_FIELD_ERR_HANDLER;
        params.address         = (const ucp_address_t*)
                                 m_workers[to].address.data();
        params.err_mode        = UCP_ERR_HANDLING_MODE_PEER;
        params.err_handler.cb  = err_cb;
        params.err_handler.arg = err;
        EXPECT_EQ(UCS_OK, ucp_ep_create(m_workers[from].h, &params, &ep));
        return ep;
    }

    unsigned progress_all()
    {
        unsigned count = 0;

        for (auto &w : m_workers) {
            if (w.h != nullptr) {
                count += ucp_worker_progress(w.h);
            }
        }
        return count;
    }

    bool wait_for(const std::function<bool()> &cond, double timeout = 10.0)
    {
        double deadline = now_sec() + timeout;

        while (!cond()) {
            if (now_sec() > deadline) {
                return false;
            }
            progress_all();
        }
        return true;
    }

    /* The parameters of an operation whose completion goes to @a res */
    static ucp_request_param_t op_param(op_result *res)
    {
        ucp_request_param_t param = {};

        param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                             UCP_OP_ATTR_FIELD_USER_DATA;
        param.cb.send      = op_done;
        param.user_data    = res;
        return param;
    }

    /* Wait for a request, or take the status returned at once */
    ucs_status_t wait_op(ucs_status_ptr_t sp, op_result *res,
                         double timeout = 10.0)
    {
        if (!UCS_PTR_IS_PTR(sp)) {
            return UCS_PTR_STATUS(sp);
        }

        if (!wait_for([res]() { return res->done; }, timeout)) {
            ucp_request_cancel(m_workers[0].h, sp);
            wait_for([res]() { return res->done; }, 1.0);
        }
        ucp_request_free(sp);
        return res->done ? res->status : UCS_ERR_TIMED_OUT;
    }

    /* Flush an endpoint */
    ucs_status_t flush(ucp_ep_h ep)
    {
        op_result res;
        ucp_request_param_t param = op_param(&res);
        return wait_op(ucp_ep_flush_nbx(ep, &param), &res);
    }

    /* Close an endpoint in @a mode (a UCP_EP_CLOSE_MODE_*) */
    void close_ep(ucp_ep_h ep, unsigned mode)
    {
        ucp_request_param_t param = {};
        ucs_status_ptr_t sp;

        param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        param.flags        = (mode == UCP_EP_CLOSE_MODE_FORCE) ?
                             UCP_EP_CLOSE_FLAG_FORCE : 0;
        sp                 = ucp_ep_close_nbx(ep, &param);
        if (UCS_PTR_IS_PTR(sp)) {
            wait_for([sp]() {
                return ucp_request_check_status(sp) != UCS_INPROGRESS;
            });
            ucp_request_free(sp);
        }
    }

    ucp_context_h                      m_ctx = nullptr;
    std::vector<worker>                m_workers;
    std::vector<std::pair<std::string, std::string>> m_config;
};


/* ---------------------------------------------------------- AM alignment */

class test_ucp_am_align : public test_ucp_rules {
protected:
    struct rx_state {
        size_t   align;
        unsigned received  = 0;
        unsigned with_data = 0;  /* UCP_AM_RECV_ATTR_FLAG_DATA: in place */
        unsigned misaligned = 0; /* of those in place */
        unsigned misaligned_other = 0;
        unsigned wrong     = 0;  /* bytes not as sent */
    };

    static ucs_status_t am_cb(void *arg, const void *header,
                              size_t header_length, void *data,
                              size_t length, const ucp_am_recv_param_t *param)
    {
        rx_state *rx = static_cast<rx_state*>(arg);
        const unsigned char *p = static_cast<const unsigned char*>(data);
        size_t i;

        ++rx->received;
        if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
            return UCS_OK; /* a descriptor of the data, not the data */
        }

        if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA) {
            ++rx->with_data;
            rx->misaligned += ((uintptr_t)data % rx->align) != 0;
        } else {
            rx->misaligned_other += ((uintptr_t)data % rx->align) != 0;
        }

        for (i = 0; i < length; ++i) {
            if (p[i] != (unsigned char)(i * 7 + length)) {
                ++rx->wrong;
                break;
            }
        }
        return UCS_OK;
    }
};

/* Workers that ask for AM alignment open on the transport (UCP asks for the
 * data after its 8-byte header to be aligned: an offset as large as the
 * alignment, or larger), are reached by workers that did not ask, and every
 * message is aligned, whatever its size and the user header's length: over
 * remapring every one, those handed over in place and those to be copied
 * in the handler; over tcp those in place (tcp hands none over in place,
 * and does not align the others) */
TEST_P(test_ucp_am_align, every_message_aligned)
{
    const size_t aligns[]  = {2, 4, 8, 16, 64, 256, 4096};
    const size_t hdrs[]    = {0, 8, 24};
    const size_t sizes[]   = {1,    8,     64,    200,   512,    520,
                              1024, 1100,  4000,  16384, 65536, 100000};
    std::vector<unsigned char> buf(100000);
    unsigned char hdr[24]  = {};

    for (size_t align : aligns) {
        m_workers.clear();
        size_t rx = add_worker(align);
        size_t tx = add_worker();
        ASSERT_NE(SIZE_MAX, rx) << "alignment " << align;
        ASSERT_NE(SIZE_MAX, tx);

        rx_state state;
        state.align = align;
        set_am_handler(rx, am_cb, &state);

        err_state err;
        ucp_ep_h ep   = connect(tx, rx, &err);
        unsigned sent = 0;
        for (size_t h : hdrs) {
            for (size_t size : sizes) {
                for (size_t i = 0; i < size; ++i) {
                    buf[i] = (unsigned char)(i * 7 + size);
                }
                op_result res;
                ucp_request_param_t param = op_param(&res);
                ASSERT_EQ(UCS_OK,
                          wait_op(ucp_am_send_nbx(ep, AM_ID, hdr, h,
                                                  buf.data(), size, &param),
                                  &res))
                        << "align " << align << " header " << h << " size "
                        << size;
                ++sent;
            }
        }

        ASSERT_TRUE(wait_for([&]() { return state.received == sent; }))
                << state.received << " of " << sent << " received";
        printf("[ INFO     ] align %zu: %u messages, %u in place (%u"
               " misaligned), %u others misaligned\n",
               align, state.received, state.with_data, state.misaligned,
               state.misaligned_other);
        EXPECT_EQ(0u, state.misaligned) << "align " << align;
        EXPECT_EQ(0u, state.wrong) << "align " << align;
        if (param_wire(GetParam()) != "tcp") {
            EXPECT_EQ(0u, state.misaligned_other) << "align " << align;
            EXPECT_GT(state.with_data, 0u) << "no message was in place";
        }
        close_ep(ep, UCP_EP_CLOSE_MODE_FORCE);
        for (auto &w : m_workers) {
            ucp_worker_destroy(w.h);
        }
        m_workers.clear();
        ASSERT_EQ(0, err.count);
    }
}

INSTANTIATE_TEST_SUITE_P(wire, test_ucp_am_align,
                         testing::Values("shm", "cma", "verbs", "tcp"),
                         param_name);


/* ------------------------------------------------- status after failure */

class test_ucp_failure_status : public test_ucp_rules {
protected:
    typedef std::function<ucs_status_ptr_t(ucp_request_param_t*)> post_func_t;

    struct op {
        const char  *name;
        post_func_t post;
    };

    void SetUp() override
    {
        /* the failure is found by UCP's keepalive (ep_check), soon;
         * messages above a bcopy go in several fragments (no rendezvous),
         * by bcopy or by zcopy as the case says */
        m_config = {{"KEEPALIVE_INTERVAL", "0.1s"},
                    {"RNDV_THRESH", "inf"},
                    {"ZCOPY_THRESH",
                     (param_variant(GetParam()) == "zcopy") ? "0" : "inf"}};
        test_ucp_rules::SetUp();
    }

    void TearDown() override
    {
        if (m_rkey != nullptr) {
            ucp_rkey_destroy(m_rkey);
        }
        if (m_memh != nullptr) {
            ucp_mem_unmap(m_ctx, m_memh);
        }
        test_ucp_rules::TearDown();
    }

    /* An endpoint to a worker that then goes away (its interface closes)
     * under a live process, with a key to the peer's memory for RMA, and
     * the error handler called */
    ucp_ep_h failed_ep(err_state *err)
    {
        ucp_mem_map_params_t mparams = {};
        size_t tx                    = add_worker();
        size_t rx                    = add_worker();
        void *rkey_buf;
        size_t rkey_size;
        ucp_ep_h ep;

        mparams.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                             UCP_MEM_MAP_PARAM_FIELD_LENGTH;
        mparams.address    = m_remote.data();
        mparams.length     = m_remote.size();
        EXPECT_EQ(UCS_OK, ucp_mem_map(m_ctx, &mparams, &m_memh));
        EXPECT_EQ(UCS_OK,
                  ucp_rkey_pack(m_ctx, m_memh, &rkey_buf, &rkey_size));

        ep = connect(tx, rx, err);
        EXPECT_EQ(UCS_OK, ucp_ep_rkey_unpack(ep, rkey_buf, &m_rkey));
        ucp_rkey_buffer_release(rkey_buf);
        EXPECT_EQ(UCS_OK, flush(ep));

        ucp_worker_destroy(m_workers[rx].h);
        m_workers[rx].h = nullptr;
        EXPECT_TRUE(wait_for([&]() { return err->count > 0; }))
                << "the error handler was not called";
        EXPECT_EQ(1, err->count);
        EXPECT_TRUE(UCS_STATUS_IS_ERR(err->status));
        printf("[ INFO     ] error handler: %s\n",
               ucs_status_string(err->status));
        return ep;
    }

    /* Every kind of operation on @a ep: short, one bcopy or zcopy, several
     * fragments, RMA, flush */
    std::vector<op> ops(ucp_ep_h ep)
    {
        uint64_t remote = (uintptr_t)m_remote.data();

        return {
            {"tag short", [=](ucp_request_param_t *p) {
                 return ucp_tag_send_nbx(ep, m_src.data(), 8, 1, p); }},
            {"tag one", [=](ucp_request_param_t *p) {
                 return ucp_tag_send_nbx(ep, m_src.data(), 4000, 1, p); }},
            {"tag fragments", [=](ucp_request_param_t *p) {
                 return ucp_tag_send_nbx(ep, m_src.data(), m_src.size(), 1,
                                         p); }},
            {"am short", [=](ucp_request_param_t *p) {
                 return ucp_am_send_nbx(ep, AM_ID, NULL, 0, m_src.data(), 8,
                                        p); }},
            {"am fragments", [=](ucp_request_param_t *p) {
                 return ucp_am_send_nbx(ep, AM_ID, NULL, 0, m_src.data(),
                                        m_src.size(), p); }},
            {"put", [=](ucp_request_param_t *p) {
                 return ucp_put_nbx(ep, m_src.data(), 64 * 1024, remote,
                                    m_rkey, p); }},
            {"get", [=](ucp_request_param_t *p) {
                 return ucp_get_nbx(ep, m_dst.data(), 64 * 1024, remote,
                                    m_rkey, p); }},
            {"flush", [=](ucp_request_param_t *p) {
                 return ucp_ep_flush_nbx(ep, p); }},
        };
    }

    /* Statuses an operation posted after the failure may complete with */
    static bool allowed(ucs_status_t status, ucs_status_t err_status)
    {
        return (status == err_status) || (status == UCS_ERR_CANCELED);
    }

    std::vector<unsigned char> m_remote = std::vector<unsigned char>(1 << 20);
    std::vector<unsigned char> m_src = std::vector<unsigned char>(300000, 3);
    std::vector<unsigned char> m_dst = std::vector<unsigned char>(1 << 20);
    ucp_mem_h                  m_memh = nullptr;
    ucp_rkey_h                 m_rkey = nullptr;
};

/* The error handler is called once, and every operation posted afterwards,
 * of every kind, completes with its status or is cancelled */
TEST_P(test_ucp_failure_status, every_op_after_failure)
{
    err_state err;
    ucp_ep_h ep = failed_ep(&err);

    ASSERT_EQ(1, err.count);
    for (const op &o : ops(ep)) {
        op_result res;
        ucp_request_param_t param = op_param(&res);
        ucs_status_t status = wait_op(o.post(&param), &res);
        printf("[ INFO     ] %-13s %s\n", o.name, ucs_status_string(status));
        EXPECT_TRUE(allowed(status, err.status))
                << o.name << ": " << ucs_status_string(status)
                << ", the error handler had " << ucs_status_string(err.status);
    }

    close_ep(ep, UCP_EP_CLOSE_MODE_FORCE);
    EXPECT_EQ(1, err.count);
}

/* Every kind posted at once after the failure, then the endpoint
 * force-closed before any completes: each completes, with the handler's
 * status or cancelled */
TEST_P(test_ucp_failure_status, ops_then_force_close)
{
    err_state err;
    ucp_ep_h ep = failed_ep(&err);
    std::vector<op> all = ops(ep);
    std::vector<op_result> res(all.size());
    std::vector<ucs_status_ptr_t> reqs;
    size_t i;

    ASSERT_EQ(1, err.count);
    for (i = 0; i < all.size(); ++i) {
        ucp_request_param_t param = op_param(&res[i]);
        reqs.push_back(all[i].post(&param));
    }

    close_ep(ep, UCP_EP_CLOSE_MODE_FORCE);
    for (i = 0; i < all.size(); ++i) {
        ucs_status_t status = wait_op(reqs[i], &res[i]);

        printf("[ INFO     ] %-13s %s\n", all[i].name,
               ucs_status_string(status));
        EXPECT_TRUE(allowed(status, err.status))
                << all[i].name << ": " << ucs_status_string(status)
                << ", the error handler had " << ucs_status_string(err.status);
    }
    EXPECT_EQ(1, err.count);
}

INSTANTIATE_TEST_SUITE_P(wire, test_ucp_failure_status,
                         testing::Values("shm/bcopy", "shm/zcopy",
                                         "cma/bcopy", "cma/zcopy",
                                         "verbs/bcopy", "verbs/zcopy",
                                         "tcp/bcopy", "tcp/zcopy"),
                         param_name);


/* ------------------------------------------- a force-closed peer endpoint */

class test_ucp_keepalive : public test_ucp_rules {
protected:
    static ucs_status_t count_am(void *arg, const void *header,
                                 size_t header_length, void *data,
                                 size_t length,
                                 const ucp_am_recv_param_t *param)
    {
        ++*static_cast<unsigned*>(arg);
        return UCS_OK;
    }

    unsigned m_am_count = 0;

    void SetUp() override
    {
        m_config = {{"KEEPALIVE_INTERVAL", "0.1s"}};
        test_ucp_rules::SetUp();
    }

    /* Two workers with endpoints to each other and traffic flushed */
    void pair(size_t *a, size_t *b, ucp_ep_h *ab, ucp_ep_h *ba,
              err_state *err_a, err_state *err_b)
    {
        *a  = add_worker();
        *b  = add_worker();
        for (size_t w : {*a, *b}) {
            set_am_handler(w, count_am, &m_am_count);
        }
        *ab = connect(*a, *b, err_a);
        *ba = connect(*b, *a, err_b);

        uint64_t word = 1;
        for (ucp_ep_h ep : {*ab, *ba}) {
            op_result res;
            ucp_request_param_t param = op_param(&res);
            ASSERT_EQ(UCS_OK, wait_op(ucp_am_send_nbx(ep, AM_ID, NULL, 0,
                                                      &word, sizeof(word),
                                                      &param),
                                      &res));
            ASSERT_EQ(UCS_OK, flush(ep));
        }
    }
};

/* One worker force-closes its endpoint and lives on, progressing: the
 * other's error handler is called within a few keepalive intervals (0.1 s
 * each here), once */
TEST_P(test_ucp_keepalive, force_closed_peer_found)
{
    size_t a, b;
    ucp_ep_h ab, ba;
    err_state err_a, err_b;

    pair(&a, &b, &ab, &ba, &err_a, &err_b);
    close_ep(ba, UCP_EP_CLOSE_MODE_FORCE);

    double t0 = now_sec();
    ASSERT_TRUE(wait_for([&]() { return err_a.count > 0; }, 20.0))
            << "the survivor's error handler was not called in 20 s";
    double found = now_sec() - t0;
    printf("[ INFO     ] found after %.2f s (%.0f keepalive intervals): %s\n",
           found, found / 0.1, ucs_status_string(err_a.status));
    EXPECT_LT(found, 1.0) << "more than 10 keepalive intervals";
    wait_for([]() { return false; }, 0.3);
    EXPECT_EQ(1, err_a.count);
    EXPECT_EQ(0, err_b.count);
    close_ep(ab, UCP_EP_CLOSE_MODE_FORCE);
}

/* One worker closes its endpoint gracefully (flush) and lives on: nothing
 * tells the other that this endpoint is gone, over tcp as here; ten
 * keepalive intervals pass without an error */
TEST_P(test_ucp_keepalive, flush_closed_peer_not_failed)
{
    size_t a, b;
    ucp_ep_h ab, ba;
    err_state err_a, err_b;

    pair(&a, &b, &ab, &ba, &err_a, &err_b);
    close_ep(ba, UCP_EP_CLOSE_MODE_FLUSH);
    wait_for([]() { return false; }, 1.0);
    EXPECT_EQ(0, err_a.count) << ucs_status_string(err_a.status);
    EXPECT_EQ(0, err_b.count);
    close_ep(ab, UCP_EP_CLOSE_MODE_FORCE);
}

/* A peer that does not progress for a while (ten keepalive intervals) is
 * slow, not gone: no error */
TEST_P(test_ucp_keepalive, slow_peer_not_failed)
{
    size_t a, b;
    ucp_ep_h ab, ba;
    err_state err_a, err_b;

    pair(&a, &b, &ab, &ba, &err_a, &err_b);
    double deadline = now_sec() + 1.0;
    while (now_sec() < deadline) {
        ucp_worker_progress(m_workers[a].h); /* b is silent */
    }
    EXPECT_EQ(0, err_a.count) << ucs_status_string(err_a.status);

    wait_for([]() { return false; }, 0.5); /* both progress again */
    EXPECT_EQ(0, err_a.count);
    EXPECT_EQ(0, err_b.count);
    close_ep(ab, UCP_EP_CLOSE_MODE_FORCE);
    close_ep(ba, UCP_EP_CLOSE_MODE_FORCE);
}

INSTANTIATE_TEST_SUITE_P(wire, test_ucp_keepalive,
                         testing::Values("shm", "cma", "tcp"), param_name);
