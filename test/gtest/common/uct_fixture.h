/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * Fixture of the transport conformance suites: opens the remapring memory
 * domain and interface as many times as a test needs (senders and
 * receivers, in one process: process_vm_writev to ourselves works), connects
 * them with CONNECT_TO_IFACE and progresses them, all through UCT's public
 * API. Processes made with fork() use the same entity class on their own.
 */

#ifndef REMAPRING_TEST_UCT_FIXTURE_H_
#define REMAPRING_TEST_UCT_FIXTURE_H_

#include <gtest/gtest.h>

extern "C" {
#include <uct/api/uct.h>
#include <ucs/async/async_fwd.h>
#include <ucs/debug/log_def.h>
}

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <sys/types.h>

namespace remapring_test {

/** UCX_REMAPRING_* settings by name without prefix, e.g. "BLOCK_SIZE" */
typedef std::map<std::string, std::string> config_t;

/** Largest time a test waits for a condition before it fails */
static const double DEFAULT_TIMEOUT = 10.0;


/**
 * One opened memory domain, worker and remapring interface, with the
 * endpoints it created. Usable without gtest (in a forked child).
 */
class entity {
public:
    /** Open everything; returns the first failure, nothing left open.
     *  @a am_align > 0: UCT_IFACE_PARAM_FIELD_AM_ALIGNMENT and _OFFSET */
    static ucs_status_t open(uct_component_h component,
                             const std::string &md_name,
                             const config_t &config, unsigned rx_headroom,
                             uct_error_handler_t err_handler,
                             void *err_arg, std::unique_ptr<entity> *e_p,
                             size_t am_align = 0, size_t am_align_offset = 0);
    ~entity();

    /** Create an endpoint to the interface at @a dev_addr/@a iface_addr */
    ucs_status_t ep_create(const void *dev_addr, const void *iface_addr,
                           uct_ep_h *ep_p);

    /** Destroy an endpoint made by ep_create() */
    void ep_destroy(uct_ep_h ep);

    /** Progress the worker (both sides of the interface) once */
    unsigned progress();

    uct_component_h    component;
    ucs_async_context_t *async = nullptr;
    uct_worker_h       worker  = nullptr;
    uct_md_h           md      = nullptr;
    uct_md_attr_t      md_attr = {};
    uct_iface_h        iface   = nullptr;
    uct_iface_attr_t   attr    = {};
    std::vector<char>  dev_addr;
    std::vector<char>  iface_addr;
    std::vector<uct_ep_h> eps;

private:
    entity() = default;
};


/** Whether process_vm_writev into our own address space is allowed */
bool cma_allowed();


/**
 * Call @a fn for each open file descriptor of this process, with its
 * /proc/self/fd path and what that links to ("memfd:NAME (deleted)" for a
 * memfd). Returns how many there are.
 */
unsigned
for_each_fd(const std::function<void(const char *path, const char *link)> &fn);


/** Pattern byte @a i of message @a seed: data checks are byte by byte */
static inline uint8_t pattern(uint64_t seed, size_t i)
{
    uint64_t x = (seed + 1) * 0x9e3779b97f4a7c15ull + i * 0x2545f4914f6cdd1dull;
    return (uint8_t)((x >> 29) ^ (x >> 47) ^ i);
}

/** Fill @a length bytes with pattern(@a seed) */
void fill_pattern(void *buffer, size_t length, uint64_t seed);

/** Index of the first byte that differs from pattern(@a seed), or -1 */
ssize_t check_pattern(const void *buffer, size_t length, uint64_t seed);


/**
 * While alive, UCX log messages at warning level and above are recorded
 * instead of printed: tests that provoke errors check what was said.
 */
class scoped_log_capture {
public:
    scoped_log_capture();
    ~scoped_log_capture();

    /** Whether a recorded message contains @a text */
    bool contains(const std::string &text) const;

    /** Everything recorded, one message a line */
    std::string all() const;

private:
    static ucs_log_func_rc_t handler(const char *file, unsigned line,
                                     const char *function,
                                     ucs_log_level_t level,
                                     const ucs_log_component_config_t *comp,
                                     const char *message, va_list ap);
    static std::vector<std::string> s_messages;
};


/**
 * Base of the suites: skips when the host does not allow the transport,
 * creates entities and cleans them up in reverse order.
 */
class uct_fixture : public testing::Test {
protected:
    void SetUp() override;
    void TearDown() override;

    /** Open an entity; fails the test on error */
    entity *create_entity(const config_t &config = config_t(),
                          unsigned rx_headroom = 0,
                          uct_error_handler_t err_handler = nullptr,
                          void *err_arg = nullptr, size_t am_align = 0,
                          size_t am_align_offset = 0);

    /** Open an entity, return the status (for settings that must fail) */
    ucs_status_t try_create_entity(const config_t &config,
                                   unsigned rx_headroom, entity **e_p);

    /** Connect @a sender to @a receiver and wait until the ring is made */
    uct_ep_h connect(entity *sender, entity *receiver);

    /** Progress every entity once */
    unsigned progress();

    /**
     * Fork a receiver process: it opens an interface with @a config, an AM
     * handler for every id that takes each message, writes its device and
     * interface address (concatenated) to @a addr_p, then progresses until
     * it reads 's' from the pipe in @a cmd_p (then it only sleeps) or is
     * killed. Killed at TearDown if still alive.
     */
    void fork_receiver(const config_t &config, std::vector<char> *addr_p,
                       int *cmd_p);

    /**
     * In a forked child: open an interface with @a config and an AM handler
     * for every id that takes each message (_exit(2) if it cannot), and
     * give its device and interface address, concatenated, in @a addr_p.
     */
    std::unique_ptr<entity> open_child(const config_t &config,
                                       std::vector<char> *addr_p);

    /** SIGKILL a forked receiver and reap it */
    void kill_child(pid_t pid);

    /** Progress every entity until @a cond holds or the timeout expires */
    bool wait_for(const std::function<bool()> &cond,
                  double timeout = DEFAULT_TIMEOUT);

    /** Whether @a ep can send now (pending_add answers UCS_ERR_BUSY) */
    static bool ep_can_send(uct_ep_h ep);

    /**
     * Run @a op until it returns something else than UCS_ERR_NO_RESOURCE,
     * progressing every entity in between; returns that status.
     */
    ucs_status_t retry(const std::function<ucs_status_t()> &op,
                       double timeout = DEFAULT_TIMEOUT);

    uct_component_h m_component = nullptr;
    std::string     m_md_name;
    std::vector<std::unique_ptr<entity>> m_entities;
    std::vector<pid_t> m_children;
};


/** Find the remapring component and its memory domain; false if absent */
bool find_component(uct_component_h *component_p, std::string *md_name_p);

/** Seconds since an arbitrary point, monotonic */
double now();

} // namespace remapring_test

#endif
