/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * Fixture of the transport conformance suites; see uct_fixture.h.
 */

#include "uct_fixture.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include <algorithm>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

namespace remapring_test {

double now()
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + (ts.tv_nsec * 1e-9);
}

bool cma_allowed()
{
    static int allowed = -1;
    char src[64], dst[64];
    struct iovec local, remote;

    if (allowed < 0) {
        memset(src, 0x5a, sizeof(src));
        memset(dst, 0, sizeof(dst));
        local.iov_base  = src;
        local.iov_len   = sizeof(src);
        remote.iov_base = dst;
        remote.iov_len  = sizeof(dst);
        allowed = (process_vm_writev(getpid(), &local, 1, &remote, 1, 0) ==
                   (ssize_t)sizeof(src)) &&
                  (memcmp(src, dst, sizeof(src)) == 0);
    }

    return allowed;
}

unsigned
for_each_fd(const std::function<void(const char *path, const char *link)> &fn)
{
    unsigned count = 0;
    struct dirent *d;
    char link[256], path[320];
    ssize_t len;
    DIR *dir;

    dir = opendir("/proc/self/fd");
    if (dir == nullptr) {
        return 0;
    }

    while ((d = readdir(dir)) != nullptr) {
        if ((d->d_name[0] == '.') || (atoi(d->d_name) == dirfd(dir))) {
            continue;
        }
        ++count;
        snprintf(path, sizeof(path), "/proc/self/fd/%s", d->d_name);
        len = readlink(path, link, sizeof(link) - 1);
        if (len > 0) {
            link[len] = '\0';
            fn(path, link);
        }
    }
    closedir(dir);
    return count;
}

void fill_pattern(void *buffer, size_t length, uint64_t seed)
{
    uint8_t *p = (uint8_t*)buffer;

    for (size_t i = 0; i < length; ++i) {
        p[i] = pattern(seed, i);
    }
}

ssize_t check_pattern(const void *buffer, size_t length, uint64_t seed)
{
    const uint8_t *p = (const uint8_t*)buffer;

    for (size_t i = 0; i < length; ++i) {
        if (p[i] != pattern(seed, i)) {
            return i;
        }
    }

    return -1;
}

bool find_component(uct_component_h *component_p, std::string *md_name_p)
{
    uct_component_h *components;
    unsigned count;
    bool found = false;

    if (uct_query_components(&components, &count) != UCS_OK) {
        return false;
    }

    for (unsigned i = 0; (i < count) && !found; ++i) {
        uct_component_attr_t attr = {};

        attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
                          UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
        if ((uct_component_query(components[i], &attr) != UCS_OK) ||
            (std::string(attr.name) != "remapring") ||
            (attr.md_resource_count == 0)) {
            continue;
        }

        std::vector<uct_md_resource_desc_t> mds(attr.md_resource_count);
        attr.field_mask   = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
        attr.md_resources = mds.data();
        if (uct_component_query(components[i], &attr) == UCS_OK) {
            *component_p = components[i];
            *md_name_p   = mds[0].md_name;
            found        = true;
        }
    }

    uct_release_component_list(components);
    return found;
}


ucs_status_t entity::open(uct_component_h component,
                          const std::string &md_name, const config_t &config,
                          unsigned rx_headroom,
                          uct_error_handler_t err_handler, void *err_arg,
                          std::unique_ptr<entity> *e_p, size_t am_align,
                          size_t am_align_offset)
{
    std::unique_ptr<entity> e(new entity());
    uct_iface_params_t params = {};
    uct_md_config_t *md_config;
    uct_iface_config_t *iface_config;
    ucs_status_t status;

    e->component = component;
    /* poll mode: no async thread, so forked children are safe */
    status = ucs_async_context_create(UCS_ASYNC_MODE_POLL, &e->async);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_worker_create(e->async, UCS_THREAD_MODE_SINGLE, &e->worker);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_md_config_read(component, NULL, NULL, &md_config);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_md_open(component, md_name.c_str(), md_config, &e->md);
    uct_config_release(md_config);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_md_query(e->md, &e->md_attr);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_md_iface_config_read(e->md, "remapring", NULL, NULL,
                                      &iface_config);
    if (status != UCS_OK) {
        return status;
    }

    for (const auto &kv : config) {
        status = uct_config_modify(iface_config, kv.first.c_str(),
                                   kv.second.c_str());
        if (status != UCS_OK) {
            uct_config_release(iface_config);
            return status;
        }
    }

    params.field_mask           = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                                  UCT_IFACE_PARAM_FIELD_DEVICE |
                                  UCT_IFACE_PARAM_FIELD_RX_HEADROOM;
    params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    params.mode.device.tl_name  = "remapring";
    params.mode.device.dev_name = "memory";
    params.rx_headroom          = rx_headroom;
    if (am_align > 0) {
        params.field_mask     |= UCT_IFACE_PARAM_FIELD_AM_ALIGNMENT |
                                 UCT_IFACE_PARAM_FIELD_AM_ALIGN_OFFSET;
        params.am_alignment    = am_align;
        params.am_align_offset = am_align_offset;
    }
    if (err_handler != nullptr) {
        params.field_mask     |= UCT_IFACE_PARAM_FIELD_ERR_HANDLER |
                                 UCT_IFACE_PARAM_FIELD_ERR_HANDLER_ARG |
                                 UCT_IFACE_PARAM_FIELD_ERR_HANDLER_FLAGS;
        params.err_handler     = err_handler;
        params.err_handler_arg = err_arg;
        params.err_handler_flags = 0;
    }

    status = uct_iface_open(e->md, e->worker, &params, iface_config,
                            &e->iface);
    uct_config_release(iface_config);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_iface_query(e->iface, &e->attr);
    if (status != UCS_OK) {
        return status;
    }

    e->dev_addr.resize(e->attr.device_addr_len);
    e->iface_addr.resize(e->attr.iface_addr_len);
    status = uct_iface_get_device_address(
            e->iface, (uct_device_addr_t*)e->dev_addr.data());
    if (status != UCS_OK) {
        return status;
    }

    status = uct_iface_get_address(e->iface,
                                   (uct_iface_addr_t*)e->iface_addr.data());
    if (status != UCS_OK) {
        return status;
    }

    uct_iface_progress_enable(e->iface,
                              UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    *e_p = std::move(e);
    return UCS_OK;
}

entity::~entity()
{
    for (auto it = eps.rbegin(); it != eps.rend(); ++it) {
        /* as UCP does: an endpoint is destroyed with an empty queue */
        uct_ep_pending_purge(*it, NULL, NULL);
        uct_ep_destroy(*it);
    }
    if (iface != nullptr) {
        uct_iface_close(iface);
    }
    if (md != nullptr) {
        uct_md_close(md);
    }
    if (worker != nullptr) {
        uct_worker_destroy(worker);
    }
    if (async != nullptr) {
        ucs_async_context_destroy(async);
    }
}

ucs_status_t entity::ep_create(const void *dev, const void *addr,
                               uct_ep_h *ep_p)
{
    uct_ep_params_t params = {};
    ucs_status_t status;

    params.field_mask = UCT_EP_PARAM_FIELD_IFACE |
                        UCT_EP_PARAM_FIELD_DEV_ADDR |
                        UCT_EP_PARAM_FIELD_IFACE_ADDR;
    params.iface      = iface;
    params.dev_addr   = (const uct_device_addr_t*)dev;
    params.iface_addr = (const uct_iface_addr_t*)addr;
    status            = uct_ep_create(&params, ep_p);
    if (status == UCS_OK) {
        eps.push_back(*ep_p);
    }

    return status;
}

void entity::ep_destroy(uct_ep_h ep)
{
    for (auto it = eps.begin(); it != eps.end(); ++it) {
        if (*it == ep) {
            eps.erase(it);
            break;
        }
    }
    uct_ep_destroy(ep);
}

unsigned entity::progress()
{
    return uct_worker_progress(worker);
}


std::vector<std::string> scoped_log_capture::s_messages;

scoped_log_capture::scoped_log_capture()
{
    s_messages.clear();
    ucs_log_push_handler(handler);
}

scoped_log_capture::~scoped_log_capture()
{
    ucs_log_pop_handler();
}

ucs_log_func_rc_t
scoped_log_capture::handler(const char *file, unsigned line,
                            const char *function, ucs_log_level_t level,
                            const ucs_log_component_config_t *comp,
                            const char *message, va_list ap)
{
    char buf[1024];

    if (level > UCS_LOG_LEVEL_WARN) {
        return UCS_LOG_FUNC_RC_CONTINUE;
    }

    vsnprintf(buf, sizeof(buf), message, ap);
    s_messages.push_back(buf);
    return UCS_LOG_FUNC_RC_STOP;
}

bool scoped_log_capture::contains(const std::string &text) const
{
    for (const auto &m : s_messages) {
        if (m.find(text) != std::string::npos) {
            return true;
        }
    }

    return false;
}

std::string scoped_log_capture::all() const
{
    std::string result;

    for (const auto &m : s_messages) {
        result += m + "\n";
    }

    return result;
}


void uct_fixture::SetUp()
{
    if (!find_component(&m_component, &m_md_name)) {
        GTEST_SKIP() << "remapring lists no memory domain on this host "
                        "(process_vm_writev or memfd_create denied)";
    }

    if (!cma_allowed()) {
        GTEST_SKIP() << "process_vm_writev is denied (ptrace scope or "
                        "seccomp)";
    }
}

void uct_fixture::fork_receiver(const config_t &config,
                                std::vector<char> *addr_p, int *cmd_p)
{
    int addr_fds[2], cmd_fds[2];

    ASSERT_EQ(0, pipe(addr_fds));
    ASSERT_EQ(0, pipe(cmd_fds));
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        std::vector<char> addr;
        close(addr_fds[0]);
        close(cmd_fds[1]);
        fcntl(cmd_fds[0], F_SETFL, O_NONBLOCK);
        std::unique_ptr<entity> e = open_child(config, &addr);
        if (write(addr_fds[1], addr.data(), addr.size()) !=
            (ssize_t)addr.size()) {
            _exit(3);
        }
        for (;;) {
            char c;
            if ((read(cmd_fds[0], &c, 1) == 1) && (c == 's')) {
                for (;;) {
                    pause();
                }
            }
            e->progress();
        }
    }

    close(addr_fds[1]);
    close(cmd_fds[0]);
    m_children.push_back(pid);
    addr_p->resize(4096);
    ssize_t len = read(addr_fds[0], addr_p->data(), addr_p->size());
    close(addr_fds[0]);
    ASSERT_GT(len, 0);
    addr_p->resize(len);
    *cmd_p = cmd_fds[1];
}

std::unique_ptr<entity>
uct_fixture::open_child(const config_t &config, std::vector<char> *addr_p)
{
    std::unique_ptr<entity> e;

    if (entity::open(m_component, m_md_name, config, 0, nullptr, nullptr,
                     &e) != UCS_OK) {
        _exit(2);
    }
    for (uint8_t id = 0; id < UCT_AM_ID_MAX; ++id) {
        uct_iface_set_am_handler(
                e->iface, id,
                [](void*, void*, size_t, unsigned) { return UCS_OK; }, NULL,
                0);
    }

    *addr_p = e->dev_addr;
    addr_p->insert(addr_p->end(), e->iface_addr.begin(), e->iface_addr.end());
    return e;
}

void uct_fixture::kill_child(pid_t pid)
{
    ASSERT_EQ(0, kill(pid, SIGKILL));
    ASSERT_EQ(pid, waitpid(pid, NULL, 0));
    m_children.erase(std::find(m_children.begin(), m_children.end(), pid));
}

void uct_fixture::TearDown()
{
    while (!m_entities.empty()) {
        m_entities.pop_back();
    }

    for (pid_t pid : m_children) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    m_children.clear();
}

ucs_status_t uct_fixture::try_create_entity(const config_t &config,
                                            unsigned rx_headroom,
                                            entity **e_p)
{
    std::unique_ptr<entity> e;
    ucs_status_t status;

    status = entity::open(m_component, m_md_name, config, rx_headroom,
                          nullptr, nullptr, &e);
    if (status == UCS_OK) {
        *e_p = e.get();
        m_entities.push_back(std::move(e));
    }

    return status;
}

entity *uct_fixture::create_entity(const config_t &config,
                                   unsigned rx_headroom,
                                   uct_error_handler_t err_handler,
                                   void *err_arg, size_t am_align,
                                   size_t am_align_offset)
{
    std::unique_ptr<entity> e;
    ucs_status_t status;

    status = entity::open(m_component, m_md_name, config, rx_headroom,
                          err_handler, err_arg, &e, am_align,
                          am_align_offset);
    EXPECT_EQ(UCS_OK, status) << ucs_status_string(status);
    if (status != UCS_OK) {
        return nullptr;
    }

    m_entities.push_back(std::move(e));
    return m_entities.back().get();
}

bool uct_fixture::ep_can_send(uct_ep_h ep)
{
    uct_pending_req_t req = {};
    ucs_status_t status;

    req.func = [](uct_pending_req_t*) { return UCS_OK; };
    status   = uct_ep_pending_add(ep, &req, 0);
    if (status == UCS_OK) {
        uct_ep_pending_purge(ep, [](uct_pending_req_t*, void*) {}, NULL);
        return false;
    }

    return status == UCS_ERR_BUSY;
}

uct_ep_h uct_fixture::connect(entity *sender, entity *receiver)
{
    uct_ep_h ep = nullptr;
    ucs_status_t status;

    status = sender->ep_create(receiver->dev_addr.data(),
                               receiver->iface_addr.data(), &ep);
    EXPECT_EQ(UCS_OK, status) << ucs_status_string(status);
    if (status != UCS_OK) {
        return nullptr;
    }

    EXPECT_TRUE(wait_for([ep]() { return ep_can_send(ep); }))
            << "the receiver never made the ring";
    return ep;
}

unsigned uct_fixture::progress()
{
    unsigned count = 0;

    for (auto &e : m_entities) {
        count += e->progress();
    }

    return count;
}

bool uct_fixture::wait_for(const std::function<bool()> &cond, double timeout)
{
    double deadline = now() + timeout;

    for (;;) {
        if (cond()) {
            return true;
        }
        if (now() > deadline) {
            return false;
        }
        progress();
    }
}

ucs_status_t uct_fixture::retry(const std::function<ucs_status_t()> &op,
                                double timeout)
{
    double deadline = now() + timeout;
    ucs_status_t status;

    for (;;) {
        status = op();
        if ((status != UCS_ERR_NO_RESOURCE) || (now() > deadline)) {
            return status;
        }
        progress();
    }
}

} // namespace remapring_test
