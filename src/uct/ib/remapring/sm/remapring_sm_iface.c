/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "remapring_sm_conn.h"
#include "remapring_sm_md.h"

#include <uct/ib/remapring/base/remapring_iface.inl>

#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/preprocessor.h>
#include <ucs/sys/string.h>
#include <ucs/sys/sys.h>
#include <uct/sm/base/sm_iface.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>


static const char *uct_remapring_wire_names[] = {
        [UCT_REMAPRING_WIRE_SHM]  = "shm",
        [UCT_REMAPRING_WIRE_CMA]  = "cma",
        [UCT_REMAPRING_WIRE_LAST] = NULL};

/*
 * What this interface reports to UCP when BW, LATENCY and OVERHEAD are auto,
 * per wire: medians of three ucx_perftest runs between two local processes
 * (2-core VM, UCX 1.13.1; the commands are in the help text of WIRE).
 */
#define UCT_REMAPRING_PERF_SHM_BW_MBS 35000
#define UCT_REMAPRING_PERF_SHM_LAT_US 0.65
#define UCT_REMAPRING_PERF_SHM_OVH_US 0.42
#define UCT_REMAPRING_PERF_CMA_BW_MBS 8600
#define UCT_REMAPRING_PERF_CMA_LAT_US 3.6
#define UCT_REMAPRING_PERF_CMA_OVH_US 2.6

/* "<figure><unit>" for the help texts */
#define UCT_REMAPRING_PERF_STR(_wire, _what, _unit)                            \
    UCS_PP_MAKE_STRING(UCT_REMAPRING_PERF_##_wire##_##_what) _unit

static const struct {
    double bandwidth; /* MB/s */
    double latency; /* seconds */
    double overhead; /* seconds */
} uct_remapring_wire_perf[] = {
        [UCT_REMAPRING_WIRE_SHM] = {UCT_REMAPRING_PERF_SHM_BW_MBS,
                                    UCT_REMAPRING_PERF_SHM_LAT_US * 1e-6,
                                    UCT_REMAPRING_PERF_SHM_OVH_US * 1e-6},
        [UCT_REMAPRING_WIRE_CMA] = {UCT_REMAPRING_PERF_CMA_BW_MBS,
                                    UCT_REMAPRING_PERF_CMA_LAT_US * 1e-6,
                                    UCT_REMAPRING_PERF_CMA_OVH_US * 1e-6}};

/* clang-format off */
static ucs_config_field_t uct_remapring_sm_iface_config_table[] = {
    {"", "", NULL,
     ucs_offsetof(uct_remapring_sm_iface_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_remapring_iface_config_table)},

    {"WIRE", "shm",
     "How this process writes into a receiver's ring:\n"
     " shm - map the receiver's pool memfd and store through its shared slot\n"
     "       table; no system call per message.\n"
     " cma - process_vm_writev into the receiver's ring view, resolved by the\n"
     "       kernel through its page tables (the model of RDMA WRITE to an\n"
     "       ODP region); one system call per message.\n"
     "A sender that cannot open the receiver's pool falls back to cma. The\n"
     "figures reported to UCP when BW, LATENCY and OVERHEAD are auto are\n"
     "those measured for the wire (medians of three ucx_perftest runs\n"
     "between two processes: 'am_bw -D bcopy -s 65000', 'am_lat -D short\n"
     "-s 8' and 'am_bw -D short -s 8'): shm "
     UCT_REMAPRING_PERF_STR(SHM, BW_MBS, "MBs") ", "
     UCT_REMAPRING_PERF_STR(SHM, LAT_US, "us") ", "
     UCT_REMAPRING_PERF_STR(SHM, OVH_US, "us") "; cma "
     UCT_REMAPRING_PERF_STR(CMA, BW_MBS, "MBs") ", "
     UCT_REMAPRING_PERF_STR(CMA, LAT_US, "us") ", "
     UCT_REMAPRING_PERF_STR(CMA, OVH_US, "us") ".",
     ucs_offsetof(uct_remapring_sm_iface_config_t, wire),
     UCS_CONFIG_TYPE_ENUM(uct_remapring_wire_names)},

    {"MAX_PEERS", "1024",
     "Number of sending interfaces one interface accepts; all endpoints of\n"
     "one sender share one connection, which gets a ring on first contact.\n"
     "Between 1 and " UCS_PP_MAKE_STRING(UCT_REMAPRING_MAX_PEERS) ".",
     ucs_offsetof(uct_remapring_sm_iface_config_t, max_peers),
     UCS_CONFIG_TYPE_UINT},

    {"SHARE_MIN", "256k",
     "Shortest put or get of one piece whose copy the other process\n"
     "shares: the operation is cut in chunks (two halves of up to 8 MiB,\n"
     "longer ones in 8 MiB pieces, up to 64), the other process's progress\n"
     "takes chunks as it finds the request in its ring and copies them with\n"
     "process_vm_writev/readv while this one copies the rest, so two cores\n"
     "copy. A process whose progress does not run takes none, nor one with\n"
     "more of this process's records waiting behind the request (traffic\n"
     "both ways: both cores busy), and this one copies them all. This one\n"
     "times what it moves, shared and, now and then, alone, per power of two\n"
     "of the length: where alone copies move over 1.5 times as much, the\n"
     "next ones of that size go alone, for longer after each such finding in\n"
     "a row (4 to 1024 operations), then sharing is tried again. 'inf': this\n"
     "process neither asks for shares nor takes any (nor under valgrind, whose\n"
     "memcheck does not see another process write into this one).",
     ucs_offsetof(uct_remapring_sm_iface_config_t, share_min),
     UCS_CONFIG_TYPE_MEMUNITS},

    {NULL}
};
/* clang-format on */


/* Progress calls between two looks at a sleeping ring, in turn, for a
 * record whose bell was not rung (remapring_sm_ctl.h, Doorbells); a power
 * of two */
#define UCT_REMAPRING_RX_SWEEP_PERIOD 16

/* Progress calls between two looks for processes that exited and for
 * connections that receivers failed, released or closed */
#define UCT_REMAPRING_CHECK_PERIOD 65536

/* Progress calls between two looks at a receiver's ring, for a request to
 * give back credit (a power of two, dividing CHECK_PERIOD) */
#define UCT_REMAPRING_YIELD_PERIOD 64

_Static_assert(ucs_is_pow2_or_zero(UCT_REMAPRING_RX_SWEEP_PERIOD),
               "the sweep period is a mask");
_Static_assert(ucs_is_pow2_or_zero(UCT_REMAPRING_YIELD_PERIOD),
               "the yield period is a mask");
_Static_assert((UCT_REMAPRING_CHECK_PERIOD % UCT_REMAPRING_YIELD_PERIOD) == 0,
               "checks come on a yield");


/* the settings of this transport alone; the base checks the shared ones
 * when the interface opens */
static ucs_status_t
uct_remapring_sm_iface_config_check_own(
        const uct_remapring_sm_iface_config_t *config)
{
    if ((config->max_peers < 1) ||
        (config->max_peers > UCT_REMAPRING_MAX_PEERS)) {
        ucs_error("UCX_REMAPRING_MAX_PEERS=%u must be between 1 and %d",
                  config->max_peers, UCT_REMAPRING_MAX_PEERS);
        return UCS_ERR_INVALID_PARAM;
    }

    return UCS_OK;
}

ucs_status_t uct_remapring_sm_iface_config_check(
        const uct_remapring_sm_iface_config_t *config)
{
    uct_remapring_iface_config_t shared = config->super;
    ucs_status_t status;

    uct_remapring_iface_config_resolve(&shared, UCT_REMAPRING_SM_BLOCK_SIZE_K *
                                                        UCS_KBYTE);
    status = uct_remapring_iface_config_check(&shared);
    if (status != UCS_OK) {
        return status;
    }

    return uct_remapring_sm_iface_config_check_own(config);
}

static ucs_status_t
uct_remapring_sm_query_tl_devices(uct_md_h md,
                                  uct_tl_device_resource_t **tl_devices_p,
                                  unsigned *num_tl_devices_p)
{
    return uct_single_device_resource(md, UCT_REMAPRING_SM_DEVICE_NAME,
                                      UCT_DEVICE_TYPE_SHM,
                                      UCS_SYS_DEVICE_ID_UNKNOWN, tl_devices_p,
                                      num_tl_devices_p);
}

static ucs_status_t
uct_remapring_sm_iface_get_address(uct_iface_h tl_iface, uct_iface_addr_t *addr)
{
    uct_remapring_sm_iface_t *iface        = ucs_derived_of(tl_iface,
                                                            uct_remapring_sm_iface_t);
    uct_remapring_iface_addr_t *iface_addr = (void *)addr;

    iface_addr->pid         = getpid();
    iface_addr->ctl_fd      = iface->rx.ctl.fd;
    iface_addr->iface_id    = iface->super.id;
    iface_addr->pid_ns      = ucs_sys_get_ns(UCS_SYS_NS_TYPE_PID);
    iface_addr->max_payload = iface->super.rx.max_payload;
    return UCS_OK;
}

static int
uct_remapring_sm_iface_is_reachable(const uct_iface_h tl_iface,
                                    const uct_device_addr_t *dev_addr,
                                    const uct_iface_addr_t *addr)
{
    const uct_remapring_iface_addr_t *iface_addr = (const void *)addr;
    uct_remapring_iface_t *iface                 = ucs_derived_of(tl_iface,
                                                                  uct_remapring_iface_t);
    static int warned                            = 0;
    char name[32];

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
    ucs_snprintf_zero(name, sizeof(name), "pid %d", iface_addr->pid);
    if (uct_remapring_iface_check_peer(iface, iface_addr->max_payload, name,
                                       warned ? UCS_LOG_LEVEL_DEBUG :
                                                UCS_LOG_LEVEL_WARN) != UCS_OK) {
        warned = 1;
        return 0;
    }

    return 1;
}

static ucs_status_t
uct_remapring_sm_iface_query(uct_iface_h tl_iface, uct_iface_attr_t *iface_attr)
{
    uct_remapring_iface_t *iface = ucs_derived_of(tl_iface,
                                                  uct_remapring_iface_t);

    uct_remapring_iface_query(iface, iface_attr);

    iface_attr->cap.flags |= UCT_IFACE_FLAG_PUT_SHORT |
                             UCT_IFACE_FLAG_PUT_BCOPY |
                             UCT_IFACE_FLAG_PUT_ZCOPY |
                             UCT_IFACE_FLAG_GET_SHORT |
                             UCT_IFACE_FLAG_GET_BCOPY |
                             UCT_IFACE_FLAG_GET_ZCOPY | UCT_IFACE_FLAG_EP_CHECK;

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
    return UCS_OK;
}


/* --------------------------------------------------------------- progress */

/* The rest of uct_remapring_sm_rx_poll(): a failed ring, a closing
 * connection, and a ring that stayed empty long enough to sleep */
static UCS_F_NOINLINE unsigned
uct_remapring_sm_rx_poll_rest(uct_remapring_sm_iface_t *iface,
                              uct_remapring_rx_conn_t *rx_conn, unsigned count,
                              int failed)
{
    unsigned index             = rx_conn - iface->rx.conns;
    uct_remapring_conn_t *conn = &iface->rx.ctl.conns[index];
    remapring_ring_t *ring     = rx_conn->ring;

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
     * published before it could see the arming (remapring_sm_ctl.h) */
    rx_conn->idle_polls = 0;
    remapring_ring_idle(ring);
    uct_remapring_ctl_arm(&iface->rx.ctl, index);
    if (remapring_ring_is_empty(ring)) {
        uct_remapring_rx_set_asleep(iface, rx_conn);
        remapring_ring_flush_credits(ring);
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
uct_remapring_sm_rx_poll(uct_remapring_sm_iface_t *iface,
                         uct_remapring_rx_conn_t *rx_conn, int aligned)
{
    int failed = 0;
    unsigned count;

    count = uct_remapring_iface_rx_ring_inl(&iface->super, rx_conn->ring,
                                            &failed, aligned);
    if (ucs_likely(!failed && (count < UCT_REMAPRING_RX_BURST) &&
                   (uct_remapring_conn_state_raw(
                            &iface->rx.ctl.conns[rx_conn - iface->rx.conns]) !=
                    UCT_REMAPRING_CONN_CLOSED))) {
        if (count > 0) {
            rx_conn->idle_polls = 0;
            return count;
        } else if (++rx_conn->idle_polls < UCT_REMAPRING_RX_ARM_AFTER) {
            return 0;
        }
    }

    return uct_remapring_sm_rx_poll_rest(iface, rx_conn, count, failed);
}

/* Now and then: processes that exited, connections receivers gave up,
 * offers taken without a bell, kept blocks that waited whole long enough */
static UCS_F_NOINLINE void
uct_remapring_sm_iface_check(uct_remapring_sm_iface_t *iface)
{
    iface->progress_calls = 0;
    uct_remapring_iface_maintain(&iface->super);
    uct_remapring_rx_check_offers(iface);
    if ((iface->rx.nconns > 0) || (kh_size(&iface->super.tx.peers) > 0)) {
        uct_remapring_watch_poll(&iface->watch);
    }

    uct_remapring_sm_check_peers(iface);
}

/* Progress; @a aligned a constant (uct_remapring_iface_rx_ring_inl()) */
static UCS_F_ALWAYS_INLINE unsigned
uct_remapring_sm_iface_progress_inl(uct_iface_h tl_iface, int aligned)
{
    uct_remapring_sm_iface_t *iface = ucs_derived_of(tl_iface,
                                                     uct_remapring_sm_iface_t);
    uct_remapring_rx_conn_t *rx_conn, *tmp;
    unsigned count = 0;

    if (ucs_unlikely(uct_remapring_ctl_rung(&iface->rx.ctl))) {
        uct_remapring_ctl_doorbells(&iface->rx.ctl, uct_remapring_rx_conn_wake,
                                    iface);
    }
    ucs_list_for_each_safe(rx_conn, tmp, &iface->rx.active, list) {
        count += uct_remapring_sm_rx_poll(iface, rx_conn, aligned);
    }

    if (ucs_unlikely(!ucs_list_is_empty(&iface->super.tx.blocked))) {
        count += uct_remapring_ep_progress_pending(&iface->super);
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
            uct_remapring_sm_iface_check(iface);
        }
        uct_remapring_sm_yield_some(iface);
    }

    return count;
}

static unsigned uct_remapring_sm_iface_progress(uct_iface_h tl_iface)
{
    return uct_remapring_sm_iface_progress_inl(tl_iface, 0);
}

/* The progress of an interface whose upper layer asked for AM alignment */
static unsigned uct_remapring_sm_iface_progress_aligned(uct_iface_h tl_iface)
{
    return uct_remapring_sm_iface_progress_inl(tl_iface, 1);
}

/* Every send completed when it returned; only pending requests wait, and
 * failures found now or before, until they are reported */
static ucs_status_t uct_remapring_sm_iface_flush(uct_iface_h tl_iface,
                                                 unsigned flags,
                                                 uct_completion_t *comp)
{
    uct_remapring_sm_iface_t *iface = ucs_derived_of(tl_iface,
                                                     uct_remapring_sm_iface_t);

    if (comp == NULL) {
        uct_remapring_sm_check_peers(iface);
    }

    return uct_remapring_iface_flush(tl_iface, flags, comp);
}


/* ---------------------------------------------------------- construction */

static UCS_CLASS_DECLARE_DELETE_FUNC(uct_remapring_sm_iface_t, uct_iface_t);

/* clang-format off */
static uct_iface_ops_t uct_remapring_sm_iface_tl_ops = {
    .ep_am_short              = uct_remapring_sm_ep_am_short,
    .ep_am_short_iov          = uct_remapring_sm_ep_am_short_iov,
    .ep_am_bcopy              = uct_remapring_sm_ep_am_bcopy,
    .ep_am_zcopy              = uct_remapring_sm_ep_am_zcopy,
    .ep_put_short             = uct_remapring_sm_ep_put_short,
    .ep_put_bcopy             = uct_remapring_sm_ep_put_bcopy,
    .ep_put_zcopy             = uct_remapring_sm_ep_put_zcopy,
    .ep_get_short             = uct_remapring_sm_ep_get_short,
    .ep_get_bcopy             = uct_remapring_sm_ep_get_bcopy,
    .ep_get_zcopy             = uct_remapring_sm_ep_get_zcopy,
    .ep_pending_add           = uct_remapring_ep_pending_add,
    .ep_pending_purge         = uct_remapring_ep_pending_purge,
    .ep_flush                 = uct_remapring_ep_flush,
    .ep_fence                 = uct_sm_ep_fence,
    .ep_check                 = uct_remapring_sm_ep_check,
    .ep_create                = UCS_CLASS_NEW_FUNC_NAME(uct_remapring_ep_t),
    .ep_destroy               = UCS_CLASS_DELETE_FUNC_NAME(uct_remapring_ep_t),
    .iface_flush              = uct_remapring_sm_iface_flush,
    .iface_fence              = uct_remapring_iface_fence,
    .iface_progress_enable    = uct_base_iface_progress_enable,
    .iface_progress_disable   = uct_base_iface_progress_disable,
    .iface_progress           = uct_remapring_sm_iface_progress,
    .iface_event_fd_get       = (uct_iface_event_fd_get_func_t)
                                ucs_empty_function_return_unsupported,
    .iface_event_arm          = (uct_iface_event_arm_func_t)
                                ucs_empty_function_return_unsupported,
    .iface_close              = UCS_CLASS_DELETE_FUNC_NAME(
                                        uct_remapring_sm_iface_t),
    .iface_query              = uct_remapring_sm_iface_query,
    .iface_get_address        = uct_remapring_sm_iface_get_address,
    .iface_get_device_address = uct_sm_iface_get_device_address,
    .iface_is_reachable       = uct_remapring_sm_iface_is_reachable,
};
/* clang-format on */

/* The receiver's state of each connection slot */
static ucs_status_t
uct_remapring_sm_iface_conns_init(uct_remapring_sm_iface_t *self,
                                  unsigned max_peers)
{
    unsigned index;

    self->rx.conns = ucs_calloc(max_peers, sizeof(*self->rx.conns),
                                "remapring_rx_conns");
    if (self->rx.conns == NULL) {
        ucs_error("failed to allocate %u connections", max_peers);
        return UCS_ERR_NO_MEMORY;
    }

    for (index = 0; index < max_peers; ++index) {
        self->rx.conns[index].iface        = self;
        self->rx.conns[index].sender.pidfd = -1;
    }

    return UCS_OK;
}

/* The control area senders map, sized for the settings */
static ucs_status_t
uct_remapring_sm_iface_ctl_init(uct_remapring_sm_iface_t *self,
                                const uct_remapring_sm_iface_config_t *config)
{
    uct_remapring_ctl_params_t ctl_params;

    ctl_params.max_peers   = config->max_peers;
    ctl_params.ring_slots  = config->super.ring_slots;
    ctl_params.iface_id    = self->super.id;
    ctl_params.block_size  = self->super.rx.pool->block_size;
    ctl_params.pool_fd     = self->super.rx.pool->fd;
    ctl_params.pool_blocks = self->super.rx.pool->max_blocks;
    return uct_remapring_ctl_create(&ctl_params, &self->rx.ctl);
}

/* UCX_REMAPRING_SHARE_MIN, off under valgrind: its memcheck does not see
 * the other process write a get's chunks into this one, and would take
 * those bytes for uninitialised */
static size_t
uct_remapring_sm_share_min(const uct_remapring_sm_iface_config_t *config)
{
    const char *preload = getenv("LD_PRELOAD");

    if ((config->share_min != SIZE_MAX) && (preload != NULL) &&
        (strstr(preload, "/vgpreload_") != NULL)) {
        ucs_debug("under valgrind: shared copies off");
        return SIZE_MAX;
    }

    return config->share_min;
}

static UCS_CLASS_INIT_FUNC(uct_remapring_sm_iface_t, uct_md_h md,
                           uct_worker_h worker,
                           const uct_iface_params_t *params,
                           const uct_iface_config_t *tl_config)
{
    uct_remapring_sm_iface_config_t resolved =
            *ucs_derived_of(tl_config, uct_remapring_sm_iface_config_t);
    const uct_remapring_sm_iface_config_t *config = &resolved;
    uct_remapring_iface_init_params_t init = {
            .tl_ops      = &uct_remapring_sm_iface_tl_ops,
            .ops         = &uct_remapring_sm_iface_ops,
            .pool_pin_cb = NULL};
    ucs_status_t status;

    /* the settings this interface opens with, auto made ours */
    uct_remapring_iface_config_resolve(&resolved.super,
                                       UCT_REMAPRING_SM_BLOCK_SIZE_K *
                                               UCS_KBYTE);
    status = uct_remapring_sm_iface_config_check_own(config);
    if (status != UCS_OK) {
        return status;
    }

    /* the figures of the wire this process sends with */
    init.bandwidth = uct_remapring_wire_perf[config->wire].bandwidth *
                     UCS_MBYTE;
    init.latency  = uct_remapring_wire_perf[config->wire].latency;
    init.overhead = uct_remapring_wire_perf[config->wire].overhead;
    UCS_CLASS_CALL_SUPER_INIT(uct_remapring_iface_t, &init, md, worker, params,
                              &config->super);

    /* an upper layer that asked for AM alignment gets a progress function
     * of its own, so that the others' loop tests nothing for it */
    if (self->super.rx.aligned != NULL) {
        self->super.super.super.ops.iface_progress =
                uct_remapring_sm_iface_progress_aligned;
    }

    self->wire            = config->wire;
    self->progress_calls  = 0;
    self->rx.nswept       = 0;
    self->rx.nconns       = 0;
    self->rx.noffered     = 0;
    self->rx.offer_cursor = 0;
    self->tx.yield_cursor = 0;
    self->share.min       = uct_remapring_sm_share_min(config);
    self->share.asked     = 0;
    self->share.given     = 0;
    self->share.helped    = 0;
    self->share.lost      = 0;
    self->share.alone     = 0;
    memset(self->share.cls, 0, sizeof(self->share.cls));
    ucs_list_head_init(&self->rx.active);
    ucs_list_head_init(&self->rx.asleep);

    status = uct_remapring_watch_init(&self->watch);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_remapring_sm_iface_conns_init(self, config->max_peers);
    if (status != UCS_OK) {
        goto err_watch;
    }

    status = uct_remapring_sm_iface_ctl_init(self, config);
    if (status != UCS_OK) {
        goto err_conns;
    }

    uct_remapring_rx_offer(self);
    ucs_debug("iface %p pid %d ctl fd %d blocks %zu slots %zu peers %u", self,
              getpid(), self->rx.ctl.fd, config->super.block_size,
              config->super.ring_slots, config->max_peers);
    return UCS_OK;

err_conns:
    ucs_free(self->rx.conns);
err_watch:
    uct_remapring_watch_cleanup(&self->watch);
    return status;
}

static UCS_CLASS_CLEANUP_FUNC(uct_remapring_sm_iface_t)
{
    unsigned index;

    uct_base_iface_progress_disable(&self->super.super.super,
                                    UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    uct_remapring_iface_warn_peers(&self->super);
    if ((self->share.asked > 0) || (self->share.helped > 0)) {
        ucs_debug("iface %p shared copies: asked %" PRIu64 ", receivers "
                  "copied %" PRIu64 " chunks, %" PRIu64 " slower than "
                  "alone ones, %" PRIu64 " copied alone; copied %"
                  PRIu64 " chunks of senders",
                  self, self->share.asked, self->share.given,
                  self->share.lost, self->share.alone, self->share.helped);
    }

    /* senders see the interface closed; then the rings go */
    uct_remapring_ctl_destroy(&self->rx.ctl);
    for (index = 0; index < self->rx.ctl.max_peers; ++index) {
        uct_remapring_rx_conn_reset(self, &self->rx.conns[index]);
    }

    ucs_free(self->rx.conns);
    uct_remapring_watch_cleanup(&self->watch);
}

UCS_CLASS_DEFINE(uct_remapring_sm_iface_t, uct_remapring_iface_t);

static UCS_CLASS_DEFINE_NEW_FUNC(uct_remapring_sm_iface_t, uct_iface_t,
                                 uct_md_h, uct_worker_h,
                                 const uct_iface_params_t *,
                                 const uct_iface_config_t *);
static UCS_CLASS_DEFINE_DELETE_FUNC(uct_remapring_sm_iface_t, uct_iface_t);

UCT_TL_DEFINE_ENTRY(&uct_remapring_sm_component, remapring,
                    uct_remapring_sm_query_tl_devices, uct_remapring_sm_iface_t,
                    UCT_REMAPRING_CONFIG_PREFIX,
                    uct_remapring_sm_iface_config_table,
                    uct_remapring_sm_iface_config_t);

/* UCX 1.13 loads only the modules compiled into libuct; this module is
 * preloaded instead, and registers its components from ELF constructors */
UCT_SINGLE_TL_INIT(&uct_remapring_sm_component, remapring, ctor, , )
