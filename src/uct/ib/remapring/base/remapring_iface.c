/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "remapring_iface.h"

#include "remapring_ep.h"
#ifdef HAVE_VERBS
#include "remapring_verbs.h"
#endif

#include <ucs/arch/atomic.h>
#include <ucs/arch/cpu.h>
#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/sock.h>
#include <ucs/sys/math.h>
#include <ucs/sys/preprocessor.h>
#include <ucs/sys/string.h>
#include <ucs/sys/sys.h>
#include <ucs/time/time.h>
#include <uct/sm/base/sm_iface.h>

#include <sys/mman.h>
#include <unistd.h>


static const char *uct_remapring_verbs_mode_names[] = {
    [UCT_REMAPRING_VERBS_MODE_AUTO]   = "auto",
    [UCT_REMAPRING_VERBS_MODE_ODP]    = "odp",
    [UCT_REMAPRING_VERBS_MODE_PINNED] = "pinned",
    [UCT_REMAPRING_VERBS_MODE_LAST]   = NULL
};

static const char *uct_remapring_wire_names[] = {
    [UCT_REMAPRING_WIRE_SHM]  = "shm",
    [UCT_REMAPRING_WIRE_CMA]  = "cma",
    [UCT_REMAPRING_WIRE_LAST] = NULL
};

/* UCX_REMAPRING_MAX_SHORT=auto, unless half a block is less: UCP sends
 * tag and AM messages up to it the short way, without a request */
#define UCT_REMAPRING_MAX_SHORT_AUTO   (16 * UCS_KBYTE)

/*
 * What this interface reports to UCP when BW, LATENCY and OVERHEAD are auto,
 * per wire: medians of three ucx_perftest runs between two local processes
 * (2-core VM, UCX 1.13.1; the commands are in the help texts below).
 */
#define UCT_REMAPRING_PERF_SHM_BW_MBS  35000
#define UCT_REMAPRING_PERF_SHM_LAT_US  0.65
#define UCT_REMAPRING_PERF_SHM_OVH_US  0.42
#define UCT_REMAPRING_PERF_CMA_BW_MBS  8600
#define UCT_REMAPRING_PERF_CMA_LAT_US  3.6
#define UCT_REMAPRING_PERF_CMA_OVH_US  2.6

/* "<figure><unit>" for the help texts */
#define UCT_REMAPRING_PERF_STR(_wire, _what, _unit) \
    UCS_PP_MAKE_STRING(UCT_REMAPRING_PERF_##_wire##_##_what) _unit

static const struct {
    double bandwidth; /* MB/s */
    double latency;   /* seconds */
    double overhead;  /* seconds */
} uct_remapring_wire_perf[] = {
    [UCT_REMAPRING_WIRE_SHM] = {UCT_REMAPRING_PERF_SHM_BW_MBS,
                                UCT_REMAPRING_PERF_SHM_LAT_US * 1e-6,
                                UCT_REMAPRING_PERF_SHM_OVH_US * 1e-6},
    [UCT_REMAPRING_WIRE_CMA] = {UCT_REMAPRING_PERF_CMA_BW_MBS,
                                UCT_REMAPRING_PERF_CMA_LAT_US * 1e-6,
                                UCT_REMAPRING_PERF_CMA_OVH_US * 1e-6}
};

/* clang-format off */
static ucs_config_field_t uct_remapring_iface_config_table[] = {
    {"", "", NULL,
     ucs_offsetof(uct_remapring_iface_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_iface_config_table)},

    {"WIRE", "shm",
     "How this process writes into a receiver's ring:\n"
     " shm - map the receiver's pool memfd and store through its shared slot\n"
     "       table; no system call per message.\n"
     " cma - process_vm_writev into the receiver's ring view, resolved by the\n"
     "       kernel through its page tables (the model of RDMA WRITE to an\n"
     "       ODP region); one system call per message.\n"
     "A sender that cannot open the receiver's pool falls back to cma.",
     ucs_offsetof(uct_remapring_iface_config_t, wire),
     UCS_CONFIG_TYPE_ENUM(uct_remapring_wire_names)},

    {"BLOCK_SIZE", "128k",
     "Size of one receive pool block, which is also the size of one ring slot\n"
     "and the largest message carried in one record: UCP sends eager up to\n"
     "about this size, and by rendezvous above it. A power of two, at least\n"
     "the system page size and at most 1g.",
     ucs_offsetof(uct_remapring_iface_config_t, block_size),
     UCS_CONFIG_TYPE_MEMUNITS},

    {"RING_SLOTS", "8",
     "Number of slots in the ring window each connected sender writes into;\n"
     "the window is RING_SLOTS * BLOCK_SIZE bytes of address space. A power\n"
     "of two, at least 2. Each remapped slot costs one VMA, counted against\n"
     "vm.max_map_count. At most 65536.",
     ucs_offsetof(uct_remapring_iface_config_t, ring_slots),
     UCS_CONFIG_TYPE_UINT},

    {"POOL_MAX", "1g",
     "Largest memory the receive pool of one interface may use. A connected\n"
     "sender's ring takes IDLE_SLOTS blocks of it (RING_SLOTS on the cma\n"
     "wire), more while it is busy; a sender that finds no room for its ring\n"
     "is refused. A message held in place keeps only the pages it touches.\n"
     "When the pool is nearly full, messages are delivered to be copied\n"
     "instead of kept in place, so that holds never stop the senders. At\n"
     "least RING_SLOTS * BLOCK_SIZE.",
     ucs_offsetof(uct_remapring_iface_config_t, pool_max),
     UCS_CONFIG_TYPE_MEMUNITS},

    {"IDLE_SLOTS", "2",
     "Ring slots granted to a sender on the shm wire while it is quiet: what\n"
     "an idle connected sender holds of the pool (at least 2). Each time the\n"
     "sender runs out of credit its grant doubles, up to RING_SLOTS, while\n"
     "the pool has room; when its ring goes quiet the receiver asks for the\n"
     "slots past this grant back, and the sender gives them back from its\n"
     "progress. A power of two between 1 and RING_SLOTS.",
     ucs_offsetof(uct_remapring_iface_config_t, idle_slots),
     UCS_CONFIG_TYPE_UINT},

    {"CREDIT_BATCH", "4",
     "Number of ring slots the receiver consumes before it returns them to\n"
     "the sender as credit. Between 1 and RING_SLOTS / 2.",
     ucs_offsetof(uct_remapring_iface_config_t, credit_batch),
     UCS_CONFIG_TYPE_UINT},

    {"MAX_PEERS", "1024",
     "Number of sending interfaces one interface accepts; all endpoints of\n"
     "one sender share one connection, which gets a ring on first contact.\n"
     "Between 1 and 4096.",
     ucs_offsetof(uct_remapring_iface_config_t, max_peers),
     UCS_CONFIG_TYPE_UINT},

    {"FOLD_PAGES", "8192",
     "Pages of kept messages the receive pool may fold at a time. A message\n"
     "kept in place keeps the pages it touches; where it starts or ends in\n"
     "part of a page, that part is copied into a page shared with the parts\n"
     "of other kept messages, at the same offsets, and mapped in place (once\n"
     "its block was punched: kept a millisecond, or pushed out by newer\n"
     "ones), so that a kept message costs about its bytes. Each folded page\n"
     "is one mapping of its own; all the pools of a process fold at most a\n"
     "quarter of vm.max_map_count pages. 0 turns folding off.",
     ucs_offsetof(uct_remapring_iface_config_t, fold_pages),
     UCS_CONFIG_TYPE_UINT},

    {"RX_INLINE", "1k",
     "Largest message delivered to the upper layer to be copied, as the data\n"
     "inline in UCX's shared memory FIFOs, rather than with a descriptor it\n"
     "may keep in place: a kept small message then never holds receive pool\n"
     "memory (UCP copies it into its own right-sized buffers). At most 4k;\n"
     "0 keeps every message in place.",
     ucs_offsetof(uct_remapring_iface_config_t, rx_inline),
     UCS_CONFIG_TYPE_MEMUNITS},

    {"RX_COPY", "512",
     "Largest message delivered out of a right-sized copy the upper layer\n"
     "may keep, rather than in place to be copied by it (at most RX_INLINE;\n"
     "0: none): a kept small message then costs its size rounded to a share\n"
     "of a page (a page of copies holds copies of one size), not the upper\n"
     "layer's buffer of the next size it has (UCP's default sizes are 64\n"
     "bytes and 1 KiB). Copies are made while the upper layer keeps some of\n"
     "them (1 in 1024 of late, or more); when it keeps none, one small\n"
     "message in 64 still goes through a copy, to see whether keeping\n"
     "resumes. Copying reads the message: above 512 bytes a UCT ping-pong\n"
     "whose handler reads nothing fell behind posix's (README, Memory).\n"
     "Copies take at most a quarter of POOL_MAX; past that, messages are\n"
     "delivered in place to be copied.",
     ucs_offsetof(uct_remapring_iface_config_t, rx_copy),
     UCS_CONFIG_TYPE_MEMUNITS},

    {"MAX_SHORT", "auto",
     "Largest payload of an active message sent with am_short (8 bytes of\n"
     "header included); at most half of BLOCK_SIZE. auto: 16 KiB, or half of\n"
     "BLOCK_SIZE if that is less. am_short stores the message into the ring\n"
     "as am_zcopy does, without a request to complete, so the upper layer\n"
     "sends up to this size the short way (README, Performance).",
     ucs_offsetof(uct_remapring_iface_config_t, max_short),
     UCS_CONFIG_TYPE_MEMUNITS},

    {"BW", "auto",
     "Bandwidth reported to the upper layer. auto: what\n"
     "'ucx_perftest -t am_bw -D bcopy -s 65000' measured with this process's\n"
     "wire (README, Performance): "
     UCT_REMAPRING_PERF_STR(SHM, BW_MBS, "MBs") " with shm, "
     UCT_REMAPRING_PERF_STR(CMA, BW_MBS, "MBs") " with cma.",
     ucs_offsetof(uct_remapring_iface_config_t, bandwidth),
     UCS_CONFIG_TYPE_BW},

    {"LATENCY", "auto",
     "One-way latency reported to the upper layer. auto: the median of\n"
     "'ucx_perftest -t am_lat -D short -s 8' with this process's wire:\n"
     UCT_REMAPRING_PERF_STR(SHM, LAT_US, "us") " with shm, "
     UCT_REMAPRING_PERF_STR(CMA, LAT_US, "us") " with cma.",
     ucs_offsetof(uct_remapring_iface_config_t, latency),
     UCS_CONFIG_TYPE_TIME_UNITS},

    {"OVERHEAD", "auto",
     "Send overhead reported to the upper layer. auto: the time per message\n"
     "of 'ucx_perftest -t am_bw -D short -s 8' with this process's wire:\n"
     UCT_REMAPRING_PERF_STR(SHM, OVH_US, "us") " with shm, "
     UCT_REMAPRING_PERF_STR(CMA, OVH_US, "us") " with cma.",
     ucs_offsetof(uct_remapring_iface_config_t, overhead),
     UCS_CONFIG_TYPE_TIME_UNITS},

    {"VERBS_MODE", "auto",
     "How a receiver on a verbs device places the ring its senders write:\n"
     " odp    - the ring view is registered with explicit On-Demand Paging:\n"
     "          a block remapped under a slot is followed by the device.\n"
     " pinned - the pool is registered (pinned) as it grows; each credit\n"
     "          tells the sender which block backs each slot it grants.\n"
     " auto   - odp where the device reports it for RC WRITE, else pinned.",
     ucs_offsetof(uct_remapring_iface_config_t, verbs_mode),
     UCS_CONFIG_TYPE_ENUM(uct_remapring_verbs_mode_names)},

    {"VERBS_SQ_SIZE", "256",
     "Send queue of each RC connection on a verbs device: requests a sender\n"
     "may have in flight to one receiver. Between 16 and 16384.",
     ucs_offsetof(uct_remapring_iface_config_t, verbs_sq_size),
     UCS_CONFIG_TYPE_UINT},

    {"VERBS_SRQ_SIZE", "1024",
     "Receive requests an interface on a verbs device keeps posted, shared\n"
     "by all its connections: one is taken by each record's immediate.\n"
     "Between 64 and 65536.",
     ucs_offsetof(uct_remapring_iface_config_t, verbs_srq_size),
     UCS_CONFIG_TYPE_UINT},

    {"VERBS_STAGING", "auto",
     "Registered buffer a sender on a verbs device copies each record into\n"
     "before the device writes it, per connection. auto: RING_SLOTS *\n"
     "BLOCK_SIZE; at least 2 * BLOCK_SIZE.",
     ucs_offsetof(uct_remapring_iface_config_t, verbs_staging),
     UCS_CONFIG_TYPE_MEMUNITS},

    {"VERBS_TIMEOUT", "18",
     "ACK timeout of the RC QPs, as the exponent of 4.096 us (18: about 1 s),\n"
     "retried 7 times. A peer process that exits is seen at once (its kernel\n"
     "disconnects); a peer host that stops answering after the retries.",
     ucs_offsetof(uct_remapring_iface_config_t, verbs_timeout),
     UCS_CONFIG_TYPE_UINT},

    {NULL}
};
/* clang-format on */

ucs_status_t
uct_remapring_iface_config_check(const uct_remapring_iface_config_t *config)
{
    size_t page_size = ucs_get_page_size();

    if ((config->block_size == UCS_MEMUNITS_INF) ||
        (config->block_size == UCS_MEMUNITS_AUTO) ||
        !ucs_is_pow2(config->block_size) || (config->block_size < page_size) ||
        (config->block_size > UCT_REMAPRING_RING_BLOCK_MAX)) {
        ucs_error("remapring: UCX_REMAPRING_BLOCK_SIZE=%zu must be a power of two"
                  " between the page size (%zu) and %lu",
                  config->block_size, page_size, UCT_REMAPRING_RING_BLOCK_MAX);
        return UCS_ERR_INVALID_PARAM;
    }

    if ((config->ring_slots < 2) || !ucs_is_pow2(config->ring_slots) ||
        (config->ring_slots > UCT_REMAPRING_RING_SLOTS_MAX)) {
        ucs_error("remapring: UCX_REMAPRING_RING_SLOTS=%u must be a power of two"
                  " between 2 and %d",
                  config->ring_slots, UCT_REMAPRING_RING_SLOTS_MAX);
        return UCS_ERR_INVALID_PARAM;
    }

    if ((config->pool_max == UCS_MEMUNITS_AUTO) ||
        ((config->pool_max != UCS_MEMUNITS_INF) &&
         (config->pool_max < (size_t)config->ring_slots * config->block_size))) {
        ucs_error("remapring: UCX_REMAPRING_POOL_MAX=%zu must be at least"
                  " RING_SLOTS * BLOCK_SIZE (%zu)",
                  config->pool_max,
                  (size_t)config->ring_slots * config->block_size);
        return UCS_ERR_INVALID_PARAM;
    }

    if ((config->max_peers < 1) ||
        (config->max_peers > UCT_REMAPRING_MAX_PEERS)) {
        ucs_error("remapring: UCX_REMAPRING_MAX_PEERS=%u must be between 1 and"
                  " %d", config->max_peers, UCT_REMAPRING_MAX_PEERS);
        return UCS_ERR_INVALID_PARAM;
    }

    if ((config->max_short != UCS_MEMUNITS_AUTO) &&
        ((config->max_short < sizeof(uint64_t)) ||
         (config->max_short > config->block_size / 2))) {
        ucs_error("remapring: UCX_REMAPRING_MAX_SHORT=%zu must be between 8 and"
                  " half of UCX_REMAPRING_BLOCK_SIZE (%zu)", config->max_short,
                  config->block_size / 2);
        return UCS_ERR_INVALID_PARAM;
    }

    if (config->rx_inline > UCT_REMAPRING_RX_INLINE_MAX) {
        ucs_error("remapring: UCX_REMAPRING_RX_INLINE=%zu must be at most %d",
                  config->rx_inline, UCT_REMAPRING_RX_INLINE_MAX);
        return UCS_ERR_INVALID_PARAM;
    }

    if ((config->idle_slots < 1) || !ucs_is_pow2(config->idle_slots) ||
        (config->idle_slots > config->ring_slots)) {
        ucs_error("remapring: UCX_REMAPRING_IDLE_SLOTS=%u must be a power of"
                  " two between 1 and RING_SLOTS (%u)", config->idle_slots,
                  config->ring_slots);
        return UCS_ERR_INVALID_PARAM;
    }

    if ((config->credit_batch < 1) ||
        (config->credit_batch > config->ring_slots / 2)) {
        ucs_error("remapring: UCX_REMAPRING_CREDIT_BATCH=%u must be between 1 and"
                  " RING_SLOTS / 2 (%u)",
                  config->credit_batch, config->ring_slots / 2);
        return UCS_ERR_INVALID_PARAM;
    }

    if ((config->bandwidth != UCS_CONFIG_BW_AUTO) &&
        !(config->bandwidth > 0)) {
        ucs_error("remapring: UCX_REMAPRING_BW=%.0fB/s must be more than zero or"
                  " auto", config->bandwidth);
        return UCS_ERR_INVALID_PARAM;
    }

    if (config->latency == UCS_TIME_INFINITY) {
        ucs_error("remapring: UCX_REMAPRING_LATENCY must be a time or auto, not"
                  " inf");
        return UCS_ERR_INVALID_PARAM;
    }

    if (config->overhead == UCS_TIME_INFINITY) {
        ucs_error("remapring: UCX_REMAPRING_OVERHEAD must be a time or auto, not"
                  " inf");
        return UCS_ERR_INVALID_PARAM;
    }

    if ((config->verbs_sq_size < 16) || (config->verbs_sq_size > 16384)) {
        ucs_error("remapring: UCX_REMAPRING_VERBS_SQ_SIZE=%u must be between"
                  " 16 and 16384", config->verbs_sq_size);
        return UCS_ERR_INVALID_PARAM;
    }

    if ((config->verbs_srq_size < 64) || (config->verbs_srq_size > 65536)) {
        ucs_error("remapring: UCX_REMAPRING_VERBS_SRQ_SIZE=%u must be between"
                  " 64 and 65536", config->verbs_srq_size);
        return UCS_ERR_INVALID_PARAM;
    }

    if ((config->verbs_staging != UCS_MEMUNITS_AUTO) &&
        ((config->verbs_staging == UCS_MEMUNITS_INF) ||
         (config->verbs_staging < 2 * config->block_size))) {
        ucs_error("remapring: UCX_REMAPRING_VERBS_STAGING=%zu must be at"
                  " least 2 * BLOCK_SIZE (%zu), or auto",
                  config->verbs_staging, 2 * config->block_size);
        return UCS_ERR_INVALID_PARAM;
    }

    if (config->verbs_timeout > 31) {
        ucs_error("remapring: UCX_REMAPRING_VERBS_TIMEOUT=%u must be at most"
                  " 31", config->verbs_timeout);
        return UCS_ERR_INVALID_PARAM;
    }

    return UCS_OK;
}


/* Records polled from one ring per progress call, so that one busy sender
 * cannot starve the others */
#define UCT_REMAPRING_RX_BURST 16

/* Progress calls between two looks at a sleeping ring, in turn, for a
 * record whose bell was not rung (remapring_conn.h, Doorbells); a power of
 * two */
#define UCT_REMAPRING_RX_SWEEP_PERIOD 16

/* Free connections kept with a ring made in advance */
#define UCT_REMAPRING_RX_OFFERS 2

/* Progress calls between two looks for processes that exited and for
 * connections that receivers failed, released or closed */
#define UCT_REMAPRING_CHECK_PERIOD 65536

/* Progress calls between two looks at a receiver's ring, for a request to
 * give back credit (a power of two, dividing CHECK_PERIOD) */
#define UCT_REMAPRING_YIELD_PERIOD 64


static ucs_status_t
uct_remapring_query_tl_devices(uct_md_h md,
                               uct_tl_device_resource_t **tl_devices_p,
                               unsigned *num_tl_devices_p)
{
#ifdef HAVE_VERBS
    if (uct_remapring_md_is_verbs(md)) {
        return uct_remapring_verbs_query_tl_devices(md, tl_devices_p,
                                                    num_tl_devices_p);
    }
#endif

    return uct_single_device_resource(md, UCT_REMAPRING_DEVICE_NAME,
                                      UCT_DEVICE_TYPE_SHM,
                                      UCS_SYS_DEVICE_ID_UNKNOWN, tl_devices_p,
                                      num_tl_devices_p);
}

static ucs_status_t uct_remapring_iface_get_address(uct_iface_h tl_iface,
                                                    uct_iface_addr_t *addr)
{
    uct_remapring_iface_t *iface = ucs_derived_of(tl_iface,
                                                  uct_remapring_iface_t);
    uct_remapring_iface_addr_t *iface_addr = (void*)addr;

    iface_addr->pid         = getpid();
    iface_addr->ctl_fd      = iface->rx.ctl.fd;
    iface_addr->iface_id    = iface->id;
    iface_addr->pid_ns      = ucs_sys_get_ns(UCS_SYS_NS_TYPE_PID);
    iface_addr->max_payload = iface->rx.max_payload;
    return UCS_OK;
}

ucs_status_t
uct_remapring_iface_check_peer(uct_remapring_iface_t *iface,
                               const uct_remapring_iface_addr_t *addr,
                               ucs_log_level_t log_level)
{
    if (ucs_likely(addr->max_payload >= iface->tx.max_bcopy)) {
        return UCS_OK;
    }

    ucs_log(log_level, "remapring: pid %d takes payloads of up to %u bytes,"
            " this process sends up to %zu: peers must use the same"
            " UCX_REMAPRING_BLOCK_SIZE and AM alignment",
            addr->pid, addr->max_payload, iface->tx.max_bcopy);
    return UCS_ERR_UNREACHABLE;
}

static int uct_remapring_iface_is_reachable(const uct_iface_h tl_iface,
                                            const uct_device_addr_t *dev_addr,
                                            const uct_iface_addr_t *addr)
{
    const uct_remapring_iface_addr_t *iface_addr = (const void*)addr;
    uct_remapring_iface_t *iface = ucs_derived_of(tl_iface,
                                                  uct_remapring_iface_t);
    static int warned            = 0;

    /* same host (boot id and IPC namespace) and same pid namespace: the
     * pid in the address must name the receiver */
    if (!uct_sm_iface_is_reachable(tl_iface, dev_addr, addr) ||
        (iface_addr == NULL) ||
        (iface_addr->pid_ns != ucs_sys_get_ns(UCS_SYS_NS_TYPE_PID))) {
        return 0;
    }

    /* UCP sizes messages by our own limits, the peer's ring bounds what it
     * takes. UCP reports only "unreachable", so the reason is said once at
     * warning level. */
    if (uct_remapring_iface_check_peer(iface, iface_addr,
                                       warned ? UCS_LOG_LEVEL_DEBUG :
                                                UCS_LOG_LEVEL_WARN) !=
        UCS_OK) {
        warned = 1;
        return 0;
    }

    return 1;
}


void uct_remapring_iface_query_am(const uct_remapring_iface_t *iface,
                                  uct_iface_attr_t *iface_attr)
{
    /* the 8-byte header included, as UCX's transports count it */
    iface_attr->cap.am.max_short       = iface->tx.max_short;
    iface_attr->cap.am.max_bcopy       = iface->tx.max_bcopy;
    iface_attr->cap.am.min_zcopy       = 0;
    iface_attr->cap.am.max_zcopy       = iface->tx.max_bcopy -
                                         UCT_REMAPRING_AM_MAX_HDR;
    iface_attr->cap.am.opt_zcopy_align = 1;
    iface_attr->cap.am.align_mtu       = 1;
    iface_attr->cap.am.max_hdr         = UCT_REMAPRING_AM_MAX_HDR;
    iface_attr->cap.am.max_iov         = UCT_REMAPRING_MAX_IOV;
}

static ucs_status_t uct_remapring_iface_query(uct_iface_h tl_iface,
                                              uct_iface_attr_t *iface_attr)
{
    uct_remapring_iface_t *iface = ucs_derived_of(tl_iface,
                                                  uct_remapring_iface_t);

    uct_base_iface_query(&iface->super, iface_attr);

    iface_attr->cap.flags = UCT_IFACE_FLAG_AM_SHORT |
                            UCT_IFACE_FLAG_AM_BCOPY |
                            UCT_IFACE_FLAG_AM_ZCOPY |
                            UCT_IFACE_FLAG_PUT_SHORT |
                            UCT_IFACE_FLAG_PUT_BCOPY |
                            UCT_IFACE_FLAG_PUT_ZCOPY |
                            UCT_IFACE_FLAG_GET_SHORT |
                            UCT_IFACE_FLAG_GET_BCOPY |
                            UCT_IFACE_FLAG_GET_ZCOPY |
                            UCT_IFACE_FLAG_PENDING |
                            UCT_IFACE_FLAG_CB_SYNC |
                            UCT_IFACE_FLAG_CONNECT_TO_IFACE |
                            UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE |
                            UCT_IFACE_FLAG_EP_CHECK;

    uct_remapring_iface_query_am(iface, iface_attr);

    iface_attr->cap.put.max_short       = iface->tx.max_short;
    iface_attr->cap.put.max_bcopy       = iface->tx.max_bcopy;
    iface_attr->cap.put.max_zcopy       = SIZE_MAX;
    iface_attr->cap.put.opt_zcopy_align = 1;
    iface_attr->cap.put.align_mtu       = 1;
    iface_attr->cap.put.max_iov         = UCT_REMAPRING_MAX_IOV;
    iface_attr->cap.get.max_short       = iface->tx.max_short;
    iface_attr->cap.get.max_bcopy       = iface->tx.max_bcopy;
    iface_attr->cap.get.max_zcopy       = SIZE_MAX;
    iface_attr->cap.get.opt_zcopy_align = 1;
    iface_attr->cap.get.align_mtu       = 1;
    iface_attr->cap.get.max_iov         = UCT_REMAPRING_MAX_IOV;

    iface_attr->device_addr_len = uct_sm_iface_get_device_addr_len();
    iface_attr->iface_addr_len  = sizeof(uct_remapring_iface_addr_t);
    iface_attr->ep_addr_len     = 0;

    iface_attr->latency             = ucs_linear_func_make(iface->perf.latency,
                                                           0);
    iface_attr->bandwidth.dedicated = iface->perf.bandwidth;
    iface_attr->bandwidth.shared    = 0;
    iface_attr->overhead            = iface->perf.overhead;
    iface_attr->priority            = 0;
    return UCS_OK;
}

static void uct_remapring_iface_release_desc(uct_recv_desc_t *self,
                                             void *desc)
{
    uct_remapring_iface_t *iface = ucs_container_of(self,
                                                    uct_remapring_iface_t,
                                                    rx.release_desc);

    uct_remapring_ring_release(iface->rx.pool, desc);
}

static void uct_remapring_iface_release_copy(uct_recv_desc_t *self,
                                             void *desc)
{
    uct_remapring_iface_t *iface = ucs_container_of(self,
                                                    uct_remapring_iface_t,
                                                    rx.copy_release_desc);

    uct_remapring_copy_put(&iface->rx.copies, desc);
}

/* ------------------------------------------------------------ receive side */

static void uct_remapring_rx_set_idle(uct_remapring_rx_conn_t *rx_conn)
{
    if (rx_conn->active != UCT_REMAPRING_RX_IDLE) {
        rx_conn->active = UCT_REMAPRING_RX_IDLE;
        ucs_list_del(&rx_conn->list);
    }
}

static void uct_remapring_rx_set_active(uct_remapring_iface_t *iface,
                                        uct_remapring_rx_conn_t *rx_conn)
{
    if (rx_conn->active != UCT_REMAPRING_RX_ACTIVE) {
        uct_remapring_rx_set_idle(rx_conn);
        rx_conn->active     = UCT_REMAPRING_RX_ACTIVE;
        rx_conn->idle_polls = 0;
        ucs_list_add_tail(&iface->rx.active, &rx_conn->list);
    }
}

/* The ring sleeps on its doorbell, and on the sweep */
static void uct_remapring_rx_set_asleep(uct_remapring_iface_t *iface,
                                        uct_remapring_rx_conn_t *rx_conn)
{
    uct_remapring_rx_set_idle(rx_conn);
    rx_conn->active = UCT_REMAPRING_RX_ASLEEP;
    ucs_list_add_tail(&iface->rx.asleep, &rx_conn->list);
}

static void uct_remapring_rx_conn_wake(void *arg, unsigned index);

/* One sleeping ring, the next in turn: awake if a record or a close came
 * without its bell (remapring_conn.h, Doorbells) */
static UCS_F_NOINLINE void uct_remapring_rx_sweep(uct_remapring_iface_t *iface)
{
    uct_remapring_rx_conn_t *rx_conn = ucs_list_head(&iface->rx.asleep,
                                                     uct_remapring_rx_conn_t,
                                                     list);
    unsigned index                   = rx_conn - iface->rx.rx_conns;

    /* to the back first: whatever happens below, the next sweep looks at
     * the next ring */
    ucs_list_del(&rx_conn->list);
    ucs_list_add_tail(&iface->rx.asleep, &rx_conn->list);

    if (uct_remapring_conn_state(&iface->rx.ctl.conns[index]) !=
        UCT_REMAPRING_CONN_READY) {
        /* as if its bell rang: a close, or a state out of turn */
        uct_remapring_rx_conn_wake(iface, index);
        iface->rx.nswept++;
    } else if (!uct_remapring_ring_is_empty(rx_conn->ring)) {
        uct_remapring_rx_set_active(iface, rx_conn);
        iface->rx.nswept++;
    }
}

/* Let go of a connection's ring (held blocks stay until released) and of
 * its sender */
static void uct_remapring_rx_conn_reset(uct_remapring_iface_t *iface,
                                        uct_remapring_rx_conn_t *rx_conn)
{
    uct_remapring_rx_set_idle(rx_conn);
    if (rx_conn->ring != NULL) {
        uct_remapring_ring_destroy(rx_conn->ring);
        rx_conn->ring = NULL;
        if (rx_conn->offered) {
            rx_conn->offered = 0;
            --iface->rx.noffered;
        } else {
            --iface->rx.nconns;
        }
    }

    uct_remapring_proc_close(&iface->watch, &rx_conn->sender);
    rx_conn->failed = 0;
}

static void uct_remapring_rx_offer(uct_remapring_iface_t *iface);

/* Free connection @a index for a new sender */
static void uct_remapring_rx_conn_free(uct_remapring_iface_t *iface,
                                       unsigned index)
{
    uct_remapring_rx_conn_reset(iface, &iface->rx.rx_conns[index]);
    uct_remapring_ctl_release(&iface->rx.ctl, index);
    uct_remapring_rx_offer(iface);
}

/* Refuse or fail connection @a index; @a reason is logged, NULL if the
 * failure was logged where it was found. The ring stays until the sender
 * closes or exits, so that its late writes land in its own blocks; a
 * connection its sender already closed is freed at once. */
static void uct_remapring_rx_conn_fail(uct_remapring_iface_t *iface,
                                       unsigned index, const char *reason)
{
    uct_remapring_rx_conn_t *rx_conn = &iface->rx.rx_conns[index];
    uct_remapring_conn_t *conn       = &iface->rx.ctl.conns[index];

    if (reason != NULL) {
        ucs_error("remapring: iface %p connection %u from pid %d failed: %s",
                  iface, index, conn->sender_pid, reason);
    }

    rx_conn->failed = 1;
    uct_remapring_rx_set_idle(rx_conn);
    /* CLOSED -> FAILED would keep the slot and its ring until the sender
     * exits: it never looks at a connection it closed (nor rings for it
     * again). A close that comes meanwhile fails the compare-and-swap. */
    if (uct_remapring_ctl_set_unless_closed(&iface->rx.ctl, index,
                                            UCT_REMAPRING_CONN_FAILED) ==
        UCT_REMAPRING_CONN_CLOSED) {
        uct_remapring_rx_conn_free(iface, index);
    }
}

/* The interface's watch saw the sender of a connection exit */
static void uct_remapring_rx_sender_exited(uct_remapring_proc_t *proc)
{
    uct_remapring_rx_conn_t *rx_conn = ucs_container_of(proc,
                                                        uct_remapring_rx_conn_t,
                                                        sender);
    uct_remapring_iface_t *iface     = rx_conn->iface;
    unsigned index                   = rx_conn - iface->rx.rx_conns;

    ucs_debug("remapring: iface %p sender pid %d of connection %u exited",
              iface, proc->pid, index);
    uct_remapring_rx_conn_free(iface, index);
}

/* The ring of connection @a index, for a sender writing with @a wire */
static ucs_status_t uct_remapring_rx_ring_make(uct_remapring_iface_t *iface,
                                              unsigned index,
                                              uct_remapring_wire_type_t wire,
                                              const char *name)
{
    uct_remapring_ring_params_t params;

    uct_remapring_ring_params_default(&params);
    params.nslots       = iface->rx.nslots;
    params.headroom     = iface->rx.headroom;
    params.inline_max   = iface->rx.layout.inline_max;
    params.align        = iface->rx.layout.align;
    params.align_offset = iface->rx.layout.align_offset;
    params.credit_batch = iface->rx.credit_batch;
    params.grant_min    = iface->rx.idle_slots;
    /* stores into shared memory land in order, a write of the kernel's (or
     * a NIC's) may not */
    params.commit       = (wire == UCT_REMAPRING_WIRE_SHM) ?
                          UCT_REMAPRING_RING_COMMIT_STAMP :
                          UCT_REMAPRING_RING_COMMIT_TAIL;
    params.shared_slots = uct_remapring_ctl_slot_table(iface->rx.ctl.ctl,
                                                       iface->rx.ctl.max_peers,
                                                       iface->rx.ctl.ring_slots,
                                                       index);
    /* a sender on the shm wire follows the slot table only: held blocks
     * are swapped in the table, without mmap */
    params.remap_view   = (wire != UCT_REMAPRING_WIRE_SHM);
    /* and reads the control words in shared memory: it answers requests to
     * give back what a quiet ring does not need */
    params.reclaim      = (wire == UCT_REMAPRING_WIRE_SHM);
    params.name         = name;
    return uct_remapring_ring_create(iface->rx.pool, &params,
                                     &iface->rx.ctl.conns[index].ring,
                                     &iface->rx.rx_conns[index].ring);
}

/* Start watching the sender of connection @a index; false if it is gone
 * (then the connection is given back) */
static int uct_remapring_rx_conn_watch(uct_remapring_iface_t *iface,
                                       unsigned index)
{
    uct_remapring_conn_t *conn = &iface->rx.ctl.conns[index];

    if (uct_remapring_proc_open(&iface->watch, conn->sender_pid,
                                uct_remapring_rx_sender_exited,
                                &iface->rx.rx_conns[index].sender) == UCS_OK) {
        return 1;
    }

    /* nobody will close it */
    ucs_debug("remapring: iface %p sender pid %d of connection %u is gone",
              iface, conn->sender_pid, index);
    uct_remapring_rx_conn_free(iface, index);
    return 0;
}

/* Keep UCT_REMAPRING_RX_OFFERS free connections with a ring made in
 * advance: a sender on the shm wire takes one and writes at once, without
 * waiting for this interface's progress */
static void uct_remapring_rx_offer(uct_remapring_iface_t *iface)
{
    unsigned max_peers = iface->rx.ctl.max_peers;
    uct_remapring_rx_conn_t *rx_conn;
    uct_remapring_conn_t *conn;
    unsigned n, index;
    char name[48];

    for (n = 0; (n < max_peers) &&
                (iface->rx.noffered < UCT_REMAPRING_RX_OFFERS);
         ++n) {
        index   = (iface->rx.offer_cursor + n) % max_peers;
        conn    = &iface->rx.ctl.conns[index];
        rx_conn = &iface->rx.rx_conns[index];
        if ((rx_conn->ring != NULL) || rx_conn->failed ||
            (uct_remapring_conn_state(conn) != UCT_REMAPRING_CONN_FREE)) {
            continue;
        }

        /* an offer must not bring the pool under pressure */
        if (uct_remapring_pool_available(iface->rx.pool) <
            uct_remapring_pool_attached(iface->rx.pool) +
            (2 * iface->rx.idle_slots)) {
            break;
        }

        /* a sender may claim the slot since it was seen FREE */
        if (!uct_remapring_ctl_offer_begin(&iface->rx.ctl, index)) {
            continue; /* claimed: its doorbell follows */
        }

        ucs_snprintf_zero(name, sizeof(name), "offered (connection %u)",
                          index);
        if (uct_remapring_rx_ring_make(iface, index, UCT_REMAPRING_WIRE_SHM,
                                       name) != UCS_OK) {
            uct_remapring_ctl_offer_end(&iface->rx.ctl, index, 0);
            break; /* no room for more: senders wait to be accepted */
        }

        rx_conn->offered = 1;
        ++iface->rx.noffered;
        /* the ring words are set: a sender may take it from here */
        uct_remapring_ctl_offer_end(&iface->rx.ctl, index, 1);
    }

    iface->rx.offer_cursor = (iface->rx.offer_cursor + n) % max_peers;
}

/* A sender took the ring offered on connection @a index, and may have
 * written records already */
static void uct_remapring_rx_conn_adopt(uct_remapring_iface_t *iface,
                                        unsigned index)
{
    uct_remapring_rx_conn_t *rx_conn = &iface->rx.rx_conns[index];
    uct_remapring_conn_t *conn       = &iface->rx.ctl.conns[index];

    rx_conn->offered   = 0;
    rx_conn->sender_id = conn->sender_id;
    --iface->rx.noffered;
    ++iface->rx.nconns;
    if (!uct_remapring_rx_conn_watch(iface, index)) {
        return;
    }

    ucs_snprintf_zero(rx_conn->ring->name, sizeof(rx_conn->ring->name),
                      "from pid %d (connection %u)", conn->sender_pid, index);
    uct_remapring_md_set_in_use(iface->super.md);
    ucs_debug("remapring: iface %p pid %d took the ring offered on"
              " connection %u", iface, conn->sender_pid, index);
    uct_remapring_rx_set_active(iface, rx_conn);
}

/* A sender claimed connection @a index: make its ring */
static void uct_remapring_rx_conn_accept(uct_remapring_iface_t *iface,
                                         unsigned index)
{
    uct_remapring_rx_conn_t *rx_conn = &iface->rx.rx_conns[index];
    uct_remapring_conn_t *conn       = &iface->rx.ctl.conns[index];
    ucs_status_t status;
    char name[48];

    if (rx_conn->offered) {
        /* a sender on the cma wire took an offered slot: its ring is of
         * another kind */
        uct_remapring_rx_conn_reset(iface, rx_conn);
    }

    rx_conn->sender_id = conn->sender_id;
    if (!uct_remapring_rx_conn_watch(iface, index)) {
        return;
    }

    ucs_snprintf_zero(name, sizeof(name), "from pid %d (connection %u)",
                      conn->sender_pid, index);
    status = uct_remapring_rx_ring_make(iface, index, conn->wire, name);
    if (status != UCS_OK) {
        uct_remapring_rx_conn_fail(iface, index,
                                   (status == UCS_ERR_NO_RESOURCE) ?
                                   "no room for its ring in the pool "
                                   "(UCX_REMAPRING_POOL_MAX)" :
                                   NULL);
        return;
    }

    ++iface->rx.nconns;
    uct_remapring_md_set_in_use(iface->super.md);
    ucs_debug("remapring: iface %p accepted pid %d on connection %u, ring"
              " view %p", iface, conn->sender_pid, index,
              rx_conn->ring->view);
    /* a sender that closed meanwhile rings its doorbell: drained then */
    uct_remapring_ctl_set_unless_closed(&iface->rx.ctl, index,
                                        UCT_REMAPRING_CONN_READY);
    uct_remapring_rx_set_active(iface, rx_conn);
}

/* The doorbell of connection @a index rang, while it has no ring or an
 * offered one: a sender may be claiming or taking it, or closing at once */
static void uct_remapring_rx_conn_wake_free(uct_remapring_iface_t *iface,
                                            unsigned index,
                                            uct_remapring_conn_state_t state)
{
    uct_remapring_rx_conn_t *rx_conn = &iface->rx.rx_conns[index];
    int filled = __atomic_load_n(&iface->rx.ctl.conns[index].sender_pid,
                                 __ATOMIC_ACQUIRE) != 0;

    if ((state != UCT_REMAPRING_CONN_CLOSED) && !filled) {
        return; /* not claimed yet, or claimed and not filled in yet */
    }

    switch (state) {
    case UCT_REMAPRING_CONN_CLAIMED:
        if (!rx_conn->failed) {
            uct_remapring_rx_conn_accept(iface, index);
        }
        break;
    case UCT_REMAPRING_CONN_READY:
        if (rx_conn->offered) {
            uct_remapring_rx_conn_adopt(iface, index);
        }
        break;
    case UCT_REMAPRING_CONN_CLOSED:
        /* A sender fills in its pid before it can close: an offered slot
         * closed without one was not taken, but written out of turn (it
         * would keep its ring for ever); it is freed like a slot without
         * a ring */
        if (rx_conn->offered && filled) {
            /* taken and closed at once: what was written still counts */
            uct_remapring_rx_conn_adopt(iface, index);
            if (rx_conn->ring != NULL) {
                uct_remapring_rx_set_active(iface, rx_conn); /* drain */
                break;
            }
        } else {
            uct_remapring_rx_conn_free(iface, index);
        }
        break;
    default:
        break;
    }
}

/* The doorbell of connection @a index rang, whose sender we accepted: only
 * that sender moves the slot, to CLOSED (remapring_conn.h) */
static void uct_remapring_rx_conn_wake_live(uct_remapring_iface_t *iface,
                                            unsigned index,
                                            uct_remapring_conn_state_t state)
{
    uct_remapring_rx_conn_t *rx_conn = &iface->rx.rx_conns[index];
    uct_remapring_conn_t *conn       = &iface->rx.ctl.conns[index];

    if (state == UCT_REMAPRING_CONN_CLOSED) {
        if (rx_conn->failed) {
            uct_remapring_rx_conn_free(iface, index);
        } else {
            uct_remapring_rx_set_active(iface, rx_conn); /* drain first */
        }
        return;
    }

    if ((state == UCT_REMAPRING_CONN_READY) && !rx_conn->failed &&
        (conn->sender_pid == rx_conn->sender.pid) &&
        (conn->sender_id == rx_conn->sender_id)) {
        uct_remapring_rx_set_active(iface, rx_conn);
        return;
    }

    if ((state == UCT_REMAPRING_CONN_FAILED) && rx_conn->failed) {
        return;
    }

    /* written out of turn: whoever holds the slot now sees FAILED */
    if (rx_conn->failed) {
        uct_remapring_ctl_set_unless_closed(&iface->rx.ctl, index,
                                            UCT_REMAPRING_CONN_FAILED);
        return;
    }

    ucs_error("remapring: iface %p connection %u from pid %d failed: its"
              " slot was rewritten out of turn (state %d, pid %d, id 0x%"
              PRIx64 ")", iface, index, rx_conn->sender.pid, (int)state,
              conn->sender_pid, conn->sender_id);
    uct_remapring_rx_conn_fail(iface, index, NULL);
}

/* The doorbell of connection @a index rang */
static void uct_remapring_rx_conn_wake(void *arg, unsigned index)
{
    uct_remapring_iface_t *iface     = arg;
    uct_remapring_rx_conn_t *rx_conn = &iface->rx.rx_conns[index];
    uct_remapring_conn_state_t state = uct_remapring_conn_state(
            &iface->rx.ctl.conns[index]);

    if ((rx_conn->ring == NULL) || rx_conn->offered) {
        uct_remapring_rx_conn_wake_free(iface, index, state);
    } else {
        uct_remapring_rx_conn_wake_live(iface, index, state);
    }

    uct_remapring_rx_offer(iface);
}

/* Whether the pool is nearly full: what it can still hand out would not
 * replace every block backing a slot now, were they all held. Past that,
 * nothing more is kept in place, and the rings can always move on. */
static UCS_F_ALWAYS_INLINE int
uct_remapring_rx_pool_pressed(uct_remapring_iface_t *iface)
{
    return uct_remapring_pool_available(iface->rx.pool) <
           uct_remapring_pool_attached(iface->rx.pool);
}

/* Copies while the upper layer keeps small messages: a share of at least
 * 1 in 1024 of late (a moving average over about the last 256 copies); below
 * it, one small message in 64 still goes through a copy, to see whether
 * keeping resumes */
#define UCT_REMAPRING_COPY_KEPT_ONE   (1u << 24)
#define UCT_REMAPRING_COPY_KEPT_SHIFT 8
#define UCT_REMAPRING_COPY_KEPT_MIN   (UCT_REMAPRING_COPY_KEPT_ONE / 1024)
#define UCT_REMAPRING_COPY_PROBE      64

/* Whether the next small message goes through a copy */
static UCS_F_ALWAYS_INLINE int
uct_remapring_rx_copy_wanted(uct_remapring_iface_t *iface)
{
    return (iface->rx.copy_kept >= UCT_REMAPRING_COPY_KEPT_MIN) ||
           ((++iface->rx.copy_probe % UCT_REMAPRING_COPY_PROBE) == 0);
}

/* A copy was kept by the upper layer (@a kept), or not */
static UCS_F_ALWAYS_INLINE void
uct_remapring_rx_copy_kept(uct_remapring_iface_t *iface, int kept)
{
    iface->rx.copy_kept += (kept ? (UCT_REMAPRING_COPY_KEPT_ONE >>
                                    UCT_REMAPRING_COPY_KEPT_SHIFT) : 0) -
                           (iface->rx.copy_kept >>
                            UCT_REMAPRING_COPY_KEPT_SHIFT);
}

/* Copy inline record @a rx's payload to @a dest, in a copy. A small one in
 * 16-byte pieces, up to the 16-byte boundary past it, without a call: the
 * payload starts 16 bytes into its record, which ends on a 64-byte
 * boundary, and a copy has room up to the 16-byte boundary past the payload
 * when the payload is 16-byte aligned in it */
static UCS_F_ALWAYS_INLINE void
uct_remapring_rx_copy(const uct_remapring_iface_t *iface, void *dest,
                      const uct_remapring_ring_rx_t *rx)
{
    size_t offset;

    if ((rx->length > 64) ||
        (iface->rx.copy_offset % UCT_REMAPRING_COPY_ALIGN)) {
        memcpy(dest, rx->payload, rx->length);
        return;
    }

    for (offset = 0; offset < rx->length; offset += 16) {
        memcpy(UCS_PTR_BYTE_OFFSET(dest, offset),
               UCS_PTR_BYTE_OFFSET(rx->payload, offset), 16);
    }
}

unsigned uct_remapring_iface_rx_ring(uct_remapring_iface_t *iface,
                                     uct_remapring_ring_t *ring,
                                     int *failed_p)
{
    uct_remapring_ring_rx_t rx;
    ucs_status_t status;
    void *copy, *payload;
    unsigned count, copy_class;

    for (count = 0; count < UCT_REMAPRING_RX_BURST; ++count) {
        status = uct_remapring_ring_poll(ring, &rx);
        if (status == UCS_ERR_NO_PROGRESS) {
            break;
        } else if (ucs_unlikely(status != UCS_OK)) {
            *failed_p = 1; /* logged */
            break;
        } else if (ucs_unlikely(rx.am_id >= UCT_AM_ID_MAX)) {
            ucs_error("remapring: ring %s: bad active message id %u",
                      ring->name, rx.am_id);
            *failed_p = 1;
            break;
        }

        uct_iface_trace_am(&iface->super, UCT_AM_TRACE_TYPE_RECV, rx.am_id,
                           rx.payload, rx.length, "RX: AM");
        if (rx.is_inline && (rx.length <= iface->rx.copy_max) &&
            uct_remapring_rx_copy_wanted(iface) &&
            ((copy = uct_remapring_copy_spare(&iface->rx.copies,
                                              iface->rx.copy_offset +
                                                      rx.length,
                                              &copy_class)) != NULL)) {
            /* a small message out of a right-sized copy the upper layer
             * may keep: it never holds ring memory, nor a buffer of the
             * upper layer's next size */
            payload = UCS_PTR_BYTE_OFFSET(copy, iface->rx.copy_offset);
            uct_recv_desc(UCS_PTR_BYTE_OFFSET(payload,
                                              -(ptrdiff_t)iface->rx.rx_headroom))
                    = &iface->rx.copy_release_desc;
            uct_remapring_rx_copy(iface, payload, &rx);
            uct_remapring_ring_consume(ring, &rx, 0);
            status = uct_iface_invoke_am(&iface->super, rx.am_id, payload,
                                         rx.length, UCT_CB_PARAM_FLAG_DESC);
            if (status == UCS_INPROGRESS) {
                uct_remapring_copy_keep(&iface->rx.copies, copy_class);
            }
            uct_remapring_rx_copy_kept(iface, status == UCS_INPROGRESS);
            continue;
        }

        if (rx.is_inline || uct_remapring_rx_pool_pressed(iface)) {
            /* a small message with no copy, and every message while the
             * pool is nearly full (so that holds cannot stop the senders),
             * in place to be copied, as the data inline in UCX's shared
             * memory FIFOs: it never holds ring memory */
            uct_iface_invoke_am(&iface->super, rx.am_id, rx.payload,
                                rx.length, 0);
            uct_remapring_ring_consume(ring, &rx, 0);
            continue;
        }

        /* a larger one in place, with a descriptor the upper layer may
         * keep: its release callback sits right before the upper layer's
         * headroom, in the record's reserve */
        uct_recv_desc(UCS_PTR_BYTE_OFFSET(rx.payload,
                                          -(ptrdiff_t)iface->rx.rx_headroom))
                = &iface->rx.release_desc;
        status = uct_iface_invoke_am(&iface->super, rx.am_id, rx.payload,
                                     rx.length, UCT_CB_PARAM_FLAG_DESC);
        uct_remapring_ring_consume(ring, &rx, status == UCS_INPROGRESS);
    }

    return count;
}

/* The rest of uct_remapring_rx_conn_poll(): a failed ring, a closing
 * connection, and a ring that stayed empty long enough to sleep */
static UCS_F_NOINLINE unsigned
uct_remapring_rx_conn_poll_rest(uct_remapring_iface_t *iface,
                                uct_remapring_rx_conn_t *rx_conn,
                                unsigned count, int failed)
{
    unsigned index             = rx_conn - iface->rx.rx_conns;
    uct_remapring_conn_t *conn = &iface->rx.ctl.conns[index];
    uct_remapring_ring_t *ring = rx_conn->ring;

    if (ucs_unlikely(failed)) {
        uct_remapring_rx_conn_fail(iface, index, NULL); /* logged */
        return count;
    }

    if (count == UCT_REMAPRING_RX_BURST) {
        return count;
    }

    /* Drained. A ring stays polled for a while before it sleeps on its
     * doorbell: a sender that answers soon (a ping-pong) never finds it
     * armed, so it rings no bell (an atomic on a shared line) and the
     * receiver takes no doorbell word. A closing connection goes now. */
    if (uct_remapring_conn_state(conn) != UCT_REMAPRING_CONN_CLOSED) {
        if (count > 0) {
            rx_conn->idle_polls = 0;
            return count;
        } else if (rx_conn->idle_polls < UCT_REMAPRING_RX_ARM_AFTER) {
            return 0;
        }
    }

    /* arm the doorbell, then look once more, as the sender may have
     * published before it could see the arming (remapring_conn.h) */
    rx_conn->idle_polls = 0;
    uct_remapring_ring_idle(ring);
    uct_remapring_ctl_arm(&iface->rx.ctl, index);
    if (uct_remapring_ring_is_empty(ring)) {
        uct_remapring_rx_set_asleep(iface, rx_conn);
        uct_remapring_ring_flush_credits(ring);
        if (ucs_unlikely(ring->status != UCS_OK)) {
            uct_remapring_rx_conn_fail(iface, index, NULL); /* logged */
        } else if (uct_remapring_conn_state(conn) ==
                   UCT_REMAPRING_CONN_CLOSED) {
            uct_remapring_rx_conn_free(iface, index);
        }
    }

    return count;
}

/* Deliver up to a burst of records from one connection's ring. The common
 * cases inline: some records, or none and not yet time to sleep, from a
 * connection that is not closing. */
static UCS_F_ALWAYS_INLINE unsigned
uct_remapring_rx_conn_poll(uct_remapring_iface_t *iface,
                           uct_remapring_rx_conn_t *rx_conn)
{
    int failed = 0;
    unsigned count;

    count = uct_remapring_iface_rx_ring(iface, rx_conn->ring, &failed);
    if (ucs_likely(
                !failed && (count < UCT_REMAPRING_RX_BURST) &&
                (uct_remapring_conn_state(
                         &iface->rx.ctl.conns[rx_conn - iface->rx.rx_conns]) !=
                 UCT_REMAPRING_CONN_CLOSED))) {
        if (count > 0) {
            rx_conn->idle_polls = 0;
            return count;
        } else if (++rx_conn->idle_polls < UCT_REMAPRING_RX_ARM_AFTER) {
            return 0;
        }
    }

    return uct_remapring_rx_conn_poll_rest(iface, rx_conn, count, failed);
}

/* ------------------------------------------------------------- interface */

/* Offered slots that left OFFERED without a doorbell we saw: taken by a
 * sender whose bell was cleared (the doorbell words are everyone's), or
 * rewritten out of turn. Their rings are on no list the sweep reads. */
static void uct_remapring_rx_check_offers(uct_remapring_iface_t *iface)
{
    unsigned index, seen = 0;
    uint32_t state;

    for (index = 0; (index < iface->rx.ctl.max_peers) &&
                    (seen < iface->rx.noffered);
         ++index) {
        if (!iface->rx.rx_conns[index].offered) {
            continue;
        }

        ++seen;
        state = uct_remapring_conn_state(&iface->rx.ctl.conns[index]);
        if ((state != UCT_REMAPRING_CONN_OFFERED) &&
            (state != UCT_REMAPRING_CONN_OFFERING)) {
            uct_remapring_rx_conn_wake(iface, index);
        }
    }
}

/* Now and then: processes that exited, connections receivers gave up,
 * offers taken without a bell, kept blocks that waited whole long enough */
static UCS_F_NOINLINE void uct_remapring_iface_check(uct_remapring_iface_t *iface)
{
    iface->progress_calls = 0;
    uct_remapring_pool_punch_aged(iface->rx.pool);
    uct_remapring_copy_trim(&iface->rx.copies);
    if (iface->rx.rx_conns != NULL) {
        uct_remapring_rx_check_offers(iface);
    }
    if ((iface->rx.nconns > 0) || (kh_size(&iface->tx.peers) > 0)) {
        uct_remapring_watch_poll(&iface->watch);
    }

    uct_remapring_ep_check_peers(iface);
}

static unsigned uct_remapring_iface_progress(uct_iface_h tl_iface)
{
    uct_remapring_iface_t *iface = ucs_derived_of(tl_iface,
                                                  uct_remapring_iface_t);
    uct_remapring_rx_conn_t *rx_conn, *tmp;
    unsigned count = 0;

    if (ucs_unlikely(uct_remapring_ctl_rung(&iface->rx.ctl))) {
        uct_remapring_ctl_doorbells(&iface->rx.ctl, uct_remapring_rx_conn_wake,
                                    iface);
    }
    ucs_list_for_each_safe(rx_conn, tmp, &iface->rx.active, list) {
        count += uct_remapring_rx_conn_poll(iface, rx_conn);
    }

    if (ucs_unlikely(!ucs_list_is_empty(&iface->tx.blocked))) {
        count += uct_remapring_ep_progress_pending(iface);
    }

    ++iface->progress_calls;
    if (ucs_unlikely(!ucs_list_is_empty(&iface->rx.asleep) &&
                     ((iface->progress_calls &
                       (UCT_REMAPRING_RX_SWEEP_PERIOD - 1)) == 0))) {
        uct_remapring_rx_sweep(iface);
    }
    if (ucs_unlikely((iface->progress_calls &
                      (UCT_REMAPRING_YIELD_PERIOD - 1)) == 0)) {
        if (iface->progress_calls >= UCT_REMAPRING_CHECK_PERIOD) {
            uct_remapring_iface_check(iface);
        }
        uct_remapring_ep_yield_some(iface);
    }

    return count;
}

static ucs_status_t uct_remapring_iface_flush(uct_iface_h tl_iface,
                                              unsigned flags,
                                              uct_completion_t *comp)
{
    uct_remapring_iface_t *iface = ucs_derived_of(tl_iface,
                                                  uct_remapring_iface_t);

    if (comp != NULL) {
        return UCS_ERR_UNSUPPORTED;
    }

    /* every send completed when it returned; only pending requests wait,
     * and failures found now or before, until they are reported */
    uct_remapring_ep_check_peers(iface);
    if (!ucs_list_is_empty(&iface->tx.blocked) ||
        (iface->tx.nerrs_queued > 0)) {
        UCT_TL_IFACE_STAT_FLUSH_WAIT(&iface->super);
        return UCS_INPROGRESS;
    }

    UCT_TL_IFACE_STAT_FLUSH(&iface->super);
    return UCS_OK;
}

static ucs_status_t uct_remapring_iface_fence(uct_iface_h tl_iface,
                                              unsigned flags)
{
    /* sends are ordered: each one is in the receiver's memory when it
     * returns */
    ucs_memory_cpu_fence();
    UCT_TL_IFACE_STAT_FENCE(ucs_derived_of(tl_iface, uct_base_iface_t));
    return UCS_OK;
}

static UCS_CLASS_DECLARE_DELETE_FUNC(uct_remapring_iface_t, uct_iface_t);

/* clang-format off */
static uct_iface_ops_t uct_remapring_iface_tl_ops = {
    .ep_am_short              = uct_remapring_ep_am_short,
    .ep_am_short_iov          = uct_remapring_ep_am_short_iov,
    .ep_am_bcopy              = uct_remapring_ep_am_bcopy,
    .ep_am_zcopy              = uct_remapring_ep_am_zcopy,
    .ep_put_short             = uct_remapring_ep_put_short,
    .ep_put_bcopy             = uct_remapring_ep_put_bcopy,
    .ep_put_zcopy             = uct_remapring_ep_put_zcopy,
    .ep_get_short             = uct_remapring_ep_get_short,
    .ep_get_bcopy             = uct_remapring_ep_get_bcopy,
    .ep_get_zcopy             = uct_remapring_ep_get_zcopy,
    .ep_pending_add           = uct_remapring_ep_pending_add,
    .ep_pending_purge         = uct_remapring_ep_pending_purge,
    .ep_flush                 = uct_remapring_ep_flush,
    .ep_fence                 = uct_sm_ep_fence,
    .ep_check                 = uct_remapring_ep_check,
    .ep_create                = UCS_CLASS_NEW_FUNC_NAME(uct_remapring_ep_t),
    .ep_destroy               = UCS_CLASS_DELETE_FUNC_NAME(uct_remapring_ep_t),
    .iface_flush              = uct_remapring_iface_flush,
    .iface_fence              = uct_remapring_iface_fence,
    .iface_progress_enable    = uct_base_iface_progress_enable,
    .iface_progress_disable   = uct_base_iface_progress_disable,
    .iface_progress           = uct_remapring_iface_progress,
    .iface_event_fd_get       = (uct_iface_event_fd_get_func_t)
                                ucs_empty_function_return_unsupported,
    .iface_event_arm          = (uct_iface_event_arm_func_t)
                                ucs_empty_function_return_unsupported,
    .iface_close              = UCS_CLASS_DELETE_FUNC_NAME(
                                        uct_remapring_iface_t),
    .iface_query              = uct_remapring_iface_query,
    .iface_get_address        = uct_remapring_iface_get_address,
    .iface_get_device_address = uct_sm_iface_get_device_address,
    .iface_is_reachable       = uct_remapring_iface_is_reachable,
};

#ifdef HAVE_VERBS
/* The verbs wire: active messages through the same ring writer, RDMA for
 * the rest, progress from its CQ */
static uct_iface_ops_t uct_remapring_verbs_iface_tl_ops = {
    .ep_am_short              = uct_remapring_ep_am_short,
    .ep_am_short_iov          = uct_remapring_ep_am_short_iov,
    .ep_am_bcopy              = uct_remapring_ep_am_bcopy,
    .ep_am_zcopy              = uct_remapring_ep_am_zcopy,
    .ep_put_short             = uct_remapring_verbs_ep_put_short,
    .ep_put_bcopy             = uct_remapring_verbs_ep_put_bcopy,
    .ep_put_zcopy             = uct_remapring_verbs_ep_put_zcopy,
    .ep_get_short             = (uct_ep_get_short_func_t)
                                ucs_empty_function_return_unsupported,
    .ep_get_bcopy             = uct_remapring_verbs_ep_get_bcopy,
    .ep_get_zcopy             = uct_remapring_verbs_ep_get_zcopy,
    .ep_pending_add           = uct_remapring_ep_pending_add,
    .ep_pending_purge         = uct_remapring_ep_pending_purge,
    .ep_flush                 = uct_remapring_verbs_ep_flush,
    .ep_fence                 = uct_base_ep_fence,
    .ep_check                 = uct_remapring_verbs_ep_check,
    .ep_create                = UCS_CLASS_NEW_FUNC_NAME(uct_remapring_ep_t),
    .ep_destroy               = UCS_CLASS_DELETE_FUNC_NAME(uct_remapring_ep_t),
    .iface_flush              = uct_remapring_verbs_iface_flush,
    .iface_fence              = uct_base_iface_fence,
    .iface_progress_enable    = uct_base_iface_progress_enable,
    .iface_progress_disable   = uct_base_iface_progress_disable,
    .iface_progress           = uct_remapring_verbs_iface_progress,
    .iface_event_fd_get       = (uct_iface_event_fd_get_func_t)
                                ucs_empty_function_return_unsupported,
    .iface_event_arm          = (uct_iface_event_arm_func_t)
                                ucs_empty_function_return_unsupported,
    .iface_close              = UCS_CLASS_DELETE_FUNC_NAME(
                                        uct_remapring_iface_t),
    .iface_query              = uct_remapring_verbs_iface_query,
    .iface_get_address        = uct_remapring_verbs_iface_get_address,
    .iface_get_device_address = uct_remapring_verbs_iface_get_device_address,
    .iface_is_reachable       = uct_remapring_verbs_iface_is_reachable,
};
#endif

static uct_iface_internal_ops_t uct_remapring_iface_internal_ops = {
    .iface_estimate_perf = uct_base_iface_estimate_perf,
    .iface_vfs_refresh   = (uct_iface_vfs_refresh_func_t)ucs_empty_function,
    .ep_query            = (uct_ep_query_func_t)
                           ucs_empty_function_return_unsupported,
    .ep_invalidate       = (uct_ep_invalidate_func_t)
                           ucs_empty_function_return_unsupported,
};
/* clang-format on */

/* The figures of the wire this process sends with, unless set. */
static void
uct_remapring_iface_perf_init(uct_remapring_iface_t *iface,
                              const uct_remapring_iface_config_t *config)
{
    iface->perf.bandwidth = (config->bandwidth == UCS_CONFIG_BW_AUTO) ?
                            uct_remapring_wire_perf[config->wire].bandwidth *
                            UCS_MBYTE : config->bandwidth;
    iface->perf.latency   = (config->latency == UCS_TIME_AUTO) ?
                            uct_remapring_wire_perf[config->wire].latency :
                            ucs_time_to_sec(config->latency);
    iface->perf.overhead  = (config->overhead == UCS_TIME_AUTO) ?
                            uct_remapring_wire_perf[config->wire].overhead :
                            ucs_time_to_sec(config->overhead);
}

/* The largest am_short message UCX_REMAPRING_MAX_SHORT sets */
static size_t
uct_remapring_iface_max_short(const uct_remapring_iface_config_t *config)
{
    if (config->max_short == UCS_MEMUNITS_AUTO) {
        return ucs_min(UCT_REMAPRING_MAX_SHORT_AUTO, config->block_size / 2);
    }

    return config->max_short;
}

/* The AM payload alignment the upper layer asked for (1: none) */
static ucs_status_t
uct_remapring_iface_am_alignment(const uct_iface_params_t *params,
                                 unsigned *align_p, unsigned *offset_p)
{
    size_t align, offset;
    ucs_status_t status;

    /* UCT's own rules: an offset without an alignment is refused */
    status = uct_iface_param_am_alignment(params, SIZE_MAX, 0, 0, &align,
                                          &offset);
    if (status != UCS_OK) {
        return status;
    }

    if (!(params->field_mask & UCT_IFACE_PARAM_FIELD_AM_ALIGNMENT)) {
        *align_p  = 1;
        *offset_p = 0;
        return UCS_OK;
    }

    if ((align == 0) || !ucs_is_pow2(align) ||
        (align > ucs_get_page_size())) {
        ucs_error("remapring: AM alignment %zu must be a power of two of at"
                  " most the page size (%zu)", align, ucs_get_page_size());
        return UCS_ERR_INVALID_PARAM;
    }

    if (offset >= align) {
        ucs_error("remapring: AM alignment offset %zu must be less than the"
                  " alignment %zu", offset, align);
        return UCS_ERR_INVALID_PARAM;
    }

    *align_p  = align;
    *offset_p = offset;
    return UCS_OK;
}

static UCS_CLASS_INIT_FUNC(uct_remapring_iface_t, uct_md_h md,
                           uct_worker_h worker,
                           const uct_iface_params_t *params,
                           const uct_iface_config_t *tl_config)
{
    const uct_remapring_iface_config_t *config =
            ucs_derived_of(tl_config, uct_remapring_iface_config_t);
    uct_iface_ops_t *ops = &uct_remapring_iface_tl_ops;
    uct_remapring_pool_params_t pool_params;
    uct_remapring_ctl_params_t ctl_params;
    uct_remapring_ring_layout_t layout;
    unsigned align, align_offset;
    ucs_status_t status;
    unsigned index;

    UCT_CHECK_PARAM(params->field_mask & UCT_IFACE_PARAM_FIELD_OPEN_MODE,
                    "UCT_IFACE_PARAM_FIELD_OPEN_MODE is not defined");
    if (!(params->open_mode & UCT_IFACE_OPEN_MODE_DEVICE)) {
        ucs_error("remapring: only UCT_IFACE_OPEN_MODE_DEVICE is supported");
        return UCS_ERR_UNSUPPORTED;
    }

    /* one thread at a time per interface, as UCX's shared memory
     * transports; UCP serialises a multi-threaded worker itself */
    if (ucs_derived_of(worker, uct_priv_worker_t)->thread_mode ==
        UCS_THREAD_MODE_MULTI) {
        ucs_error("remapring: a multi-threaded worker is not supported");
        return UCS_ERR_INVALID_PARAM;
    }

    status = uct_remapring_iface_config_check(config);
    if (status != UCS_OK) {
        return status;
    }

#ifdef HAVE_VERBS
    if (uct_remapring_md_is_verbs(md)) {
        ops = &uct_remapring_verbs_iface_tl_ops;
    }
#endif

    UCS_CLASS_CALL_SUPER_INIT(uct_base_iface_t, ops,
                              &uct_remapring_iface_internal_ops, md, worker,
                              params, tl_config UCS_STATS_ARG(
                                      (params->field_mask &
                                       UCT_IFACE_PARAM_FIELD_STATS_ROOT) ?
                                      params->stats_root : NULL)
                              UCS_STATS_ARG(UCT_REMAPRING_NAME));

    self->rx.rx_headroom = (params->field_mask &
                            UCT_IFACE_PARAM_FIELD_RX_HEADROOM) ?
                           params->rx_headroom : 0;
    status = uct_remapring_iface_am_alignment(params, &align, &align_offset);
    if (status != UCS_OK) {
        return status;
    }

    /* in front of a kept payload: the upper layer's headroom, and our
     * release descriptor before it */
    self->rx.headroom = self->rx.rx_headroom + sizeof(uct_recv_desc_t*);
    uct_remapring_ring_layout_init(&self->rx.layout, self->rx.headroom,
                                   config->rx_inline, align, align_offset);
    if (!uct_remapring_ring_geometry_valid(config->block_size,
                                           config->ring_slots,
                                           &self->rx.layout)) {
        ucs_error("remapring: rx_headroom %u and AM alignment %u leave too"
                  " little of a block of %zu bytes (UCX_REMAPRING_BLOCK_SIZE)",
                  self->rx.rx_headroom, align, config->block_size);
        return UCS_ERR_INVALID_PARAM;
    }

    self->id                 = ucs_generate_uuid((uintptr_t)self);
    self->progress_calls     = 0;
    self->rx.nslots          = config->ring_slots;
    self->rx.credit_batch    = config->credit_batch;
    self->rx.idle_slots      = config->idle_slots;
    self->rx.nconns          = 0;
    self->rx.noffered        = 0;
    self->rx.offer_cursor    = 0;
    self->rx.max_payload     = uct_remapring_ring_max_payload(
                                       config->block_size, &self->rx.layout);
    self->rx.release_desc.cb = uct_remapring_iface_release_desc;
    self->rx.copy_release_desc.cb = uct_remapring_iface_release_copy;
    self->tx.wire            = config->wire;
    self->tx.dispatching     = NULL;
    self->tx.nerrs_queued    = 0;
    /* what we send, a receiver whose headroom is at most
     * UCT_REMAPRING_HEADROOM_MAX takes: peers of one UCX, whatever headroom
     * each interface was opened with, are reachable */
    uct_remapring_ring_layout_init(&layout, UCT_REMAPRING_HEADROOM_MAX, 0,
                                   align, align_offset);
    self->tx.max_bcopy       = ucs_min(uct_remapring_ring_max_payload(
                                               config->block_size, &layout),
                                       self->rx.max_payload);
    self->tx.max_short       = ucs_min(uct_remapring_iface_max_short(config),
                                       self->tx.max_bcopy);
    uct_remapring_iface_perf_init(self, config);
    ucs_list_head_init(&self->rx.active);
    ucs_list_head_init(&self->rx.asleep);
    self->rx.nswept = 0;
    ucs_list_head_init(&self->tx.blocked);
    ucs_arbiter_init(&self->tx.arbiter);
    kh_init_inplace(uct_remapring_peers, &self->tx.peers);
    self->tx.yield_cursor = 0;

    status = uct_remapring_watch_init(&self->watch);
    if (status != UCS_OK) {
        goto err_arbiter;
    }

    uct_remapring_pool_params_default(&pool_params);
    /* address space for four times the memory: blocks detached under holds
     * keep only their held pages */
    pool_params.block_size  = config->block_size;
    pool_params.max_bytes   = (config->pool_max == UCS_MEMUNITS_INF) ?
                              0 : config->pool_max;
    pool_params.max_blocks  = ucs_min(((config->pool_max ==
                                        UCS_MEMUNITS_INF) ?
                                       UCT_REMAPRING_POOL_SPACE_MAX :
                                       ucs_min(4 * config->pool_max,
                                               UCT_REMAPRING_POOL_SPACE_MAX)) /
                                      config->block_size,
                                      UINT32_MAX / 2);
    pool_params.init_blocks = ucs_min(config->ring_slots * 2,
                                      pool_params.max_blocks);
    pool_params.grow_blocks = config->ring_slots;
    pool_params.name        = "remapring-pool";
    pool_params.fold_pages  = config->fold_pages;
    self->verbs             = NULL;
#ifdef HAVE_VERBS
    if (ops == &uct_remapring_verbs_iface_tl_ops) {
        status = uct_remapring_verbs_iface_init(self,
                                                params->mode.device.dev_name,
                                                config, &pool_params);
        if (status != UCS_OK) {
            goto err_watch;
        }
    }
#endif

    status = uct_remapring_pool_create(&pool_params, &self->rx.pool);
    if (status != UCS_OK) {
        goto err_verbs;
    }

    /* copies of small messages: the payload after the upper layer's
     * headroom and our release descriptor, aligned as asked (copies are
     * 16-byte aligned: a larger alignment has none) */
    self->rx.copy_max    = ucs_min(config->rx_copy, config->rx_inline);
    self->rx.copy_kept   = UCT_REMAPRING_COPY_KEPT_ONE; /* on at first */
    self->rx.copy_probe  = 0;
    self->rx.copy_offset = ((self->rx.copy_max > 0) &&
                            (align <= UCT_REMAPRING_COPY_ALIGN)) ?
                           (ucs_align_up(self->rx.headroom + align_offset,
                                         ucs_max(align,
                                                 (unsigned)UCT_REMAPRING_RING_PAYLOAD_ALIGN)) -
                            align_offset) : 0;
    status = uct_remapring_copy_init(&self->rx.copies, "remapring-copies",
                                     (self->rx.copy_offset == 0) ? 0 :
                                     (config->pool_max == UCS_MEMUNITS_INF) ?
                                     UCT_REMAPRING_COPY_SPACE_MAX :
                                     ucs_min(config->pool_max / 4,
                                             UCT_REMAPRING_COPY_SPACE_MAX));
    if (status != UCS_OK) {
        goto err_pool;
    }

    /* a verbs interface's connections come from its connection manager */
    self->rx.rx_conns = (self->verbs != NULL) ? NULL :
                        ucs_calloc(config->max_peers,
                                   sizeof(*self->rx.rx_conns),
                                   "remapring_rx_conns");
    if ((self->verbs == NULL) && (self->rx.rx_conns == NULL)) {
        ucs_error("remapring: failed to allocate %u connections",
                  config->max_peers);
        status = UCS_ERR_NO_MEMORY;
        goto err_copies;
    }

    for (index = 0; (self->verbs == NULL) && (index < config->max_peers);
         ++index) {
        self->rx.rx_conns[index].iface        = self;
        self->rx.rx_conns[index].sender.pidfd = -1;
    }

    /* mapped, not allocated: a block can be up to 1 GiB, and only the
     * pages the largest bcopy packed so far are ever faulted in */
    self->tx.bounce = ucs_mmap(NULL, self->tx.max_bcopy,
                               PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                               -1, 0, "remapring_bounce");
    if (self->tx.bounce == MAP_FAILED) {
        ucs_error("remapring: failed to map a %zu byte bounce buffer: %m",
                  self->tx.max_bcopy);
        status = UCS_ERR_NO_MEMORY;
        goto err_conns;
    }

#ifdef HAVE_VERBS
    if (self->verbs != NULL) {
        self->rx.ctl.max_peers = 0;
        status                 = uct_remapring_verbs_iface_listen(self);
        if (status != UCS_OK) {
            goto err_bounce;
        }
        return UCS_OK;
    }
#endif

    ctl_params.max_peers   = config->max_peers;
    ctl_params.ring_slots  = config->ring_slots;
    ctl_params.iface_id    = self->id;
    ctl_params.block_size  = self->rx.pool->block_size;
    ctl_params.pool_fd     = self->rx.pool->fd;
    ctl_params.pool_blocks = self->rx.pool->max_blocks;
    status = uct_remapring_ctl_create(&ctl_params, &self->rx.ctl);
    if (status != UCS_OK) {
        goto err_bounce;
    }

    uct_remapring_rx_offer(self);
    ucs_debug("remapring: iface %p pid %d ctl fd %d blocks %zu slots %u"
              " peers %u", self, getpid(), self->rx.ctl.fd,
              config->block_size, config->ring_slots, config->max_peers);
    return UCS_OK;

err_bounce:
    ucs_munmap(self->tx.bounce, self->tx.max_bcopy);
err_conns:
    ucs_free(self->rx.rx_conns);
err_copies:
    uct_remapring_copy_cleanup(&self->rx.copies);
err_pool:
    uct_remapring_pool_destroy(self->rx.pool);
err_verbs:
#ifdef HAVE_VERBS
    if (self->verbs != NULL) {
        uct_remapring_verbs_iface_cleanup(self);
    }
err_watch:
#endif
    uct_remapring_watch_cleanup(&self->watch);
err_arbiter:
    kh_destroy_inplace(uct_remapring_peers, &self->tx.peers);
    ucs_arbiter_cleanup(&self->tx.arbiter);
    return status;
}

static UCS_CLASS_CLEANUP_FUNC(uct_remapring_iface_t)
{
    uct_remapring_pool_stats_t stats;
    unsigned index;

    uct_remapring_pool_get_stats(self->rx.pool, &stats);
    ucs_debug("remapring: iface %p pool: %u blocks, %" PRIu64 " remaps, %"
              PRIu64 " punches, %" PRIu64 " folds; %u detached blocks kept"
              " whole (%.0f%% of them released within the age)",
              self, stats.nblocks, stats.nremaps, stats.npunches,
              stats.nfolds, stats.punch_window, stats.brief * 100.0);

    uct_base_iface_progress_disable(&self->super.super,
                                    UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    uct_remapring_ep_cleanup_peers(self);

#ifdef HAVE_VERBS
    if (self->verbs != NULL) {
        /* the rings and the registrations of the pool go before it */
        uct_remapring_verbs_iface_cleanup(self);
    } else
#endif
    {
        /* senders see the interface closed; then the rings go */
        uct_remapring_ctl_destroy(&self->rx.ctl);
        for (index = 0; index < self->rx.ctl.max_peers; ++index) {
            uct_remapring_rx_conn_reset(self, &self->rx.rx_conns[index]);
        }
    }

    ucs_munmap(self->tx.bounce, self->tx.max_bcopy);
    ucs_free(self->rx.rx_conns);
    uct_remapring_copy_cleanup(&self->rx.copies);
    uct_remapring_pool_destroy(self->rx.pool);
    uct_remapring_watch_cleanup(&self->watch);
    kh_destroy_inplace(uct_remapring_peers, &self->tx.peers);
    ucs_arbiter_cleanup(&self->tx.arbiter);
}

UCS_CLASS_DEFINE(uct_remapring_iface_t, uct_base_iface_t);

static UCS_CLASS_DEFINE_NEW_FUNC(uct_remapring_iface_t, uct_iface_t, uct_md_h,
                                 uct_worker_h, const uct_iface_params_t*,
                                 const uct_iface_config_t*);
static UCS_CLASS_DEFINE_DELETE_FUNC(uct_remapring_iface_t, uct_iface_t);

UCT_TL_DEFINE_ENTRY(&uct_remapring_component, remapring,
                    uct_remapring_query_tl_devices, uct_remapring_iface_t,
                    "REMAPRING_", uct_remapring_iface_config_table,
                    uct_remapring_iface_config_t);

/* UCX 1.13 loads only the modules compiled into libuct; this module is
 * preloaded instead, and registers its component from an ELF constructor */
UCT_SINGLE_TL_INIT(&uct_remapring_component, remapring, ctor, , )
