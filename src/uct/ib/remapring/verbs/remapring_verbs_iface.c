/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "remapring_verbs.h"

#include <uct/ib/remapring/base/remapring_ep.inl>
#include <uct/ib/remapring/base/remapring_iface.inl>

#include <ucs/arch/bitops.h>
#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/math.h>
#include <ucs/sys/preprocessor.h>
#include <ucs/sys/sock.h>
#include <ucs/sys/string.h>
#include <ucs/sys/sys.h>
#include <ucs/time/time.h>
#include <uct/base/uct_iface.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <sys/mman.h>


/* Completions taken from the CQ per poll */
#define UCT_REMAPRING_VERBS_POLL_BATCH   16
/* Progress calls between two looks at the connection manager's channel */
#define UCT_REMAPRING_VERBS_CM_PERIOD    64
/* Looks at the channel between two of the pool's and copies' upkeep */
#define UCT_REMAPRING_VERBS_MAINTAIN_PERIOD 1024
/* older C libraries lack it; a kernel before 5.14 refuses it (EINVAL) */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
/* odp mode: how far ahead of the sender's tail the receiver has the pages
 * of its ring present in both its views (uct_remapring_rx_vconn_populate) */
#define UCT_REMAPRING_VERBS_POPULATE_AHEAD (64 * UCS_KBYTE)
/* rdma_cm address and route resolution, milliseconds */
#define UCT_REMAPRING_VERBS_RESOLVE_MS   5000
/* wr_id of receive requests, and of unsignaled sends (never reported) */
#define UCT_REMAPRING_VERBS_WR_RECV      UINT64_MAX
#define UCT_REMAPRING_VERBS_WR_NONE      (UINT64_MAX - 1)
/* CQ entries beyond the SRQ's, per QP: its signaled requests */
#define UCT_REMAPRING_VERBS_STAGING_ALIGN 64

/* What the interface reports to UCP when BW, LATENCY and OVERHEAD are auto:
 * a NIC's, the link's speed measured from the port */
#define UCT_REMAPRING_VERBS_LAT_US       2.0
#define UCT_REMAPRING_VERBS_OVH_US       0.5


/* Limits of the transport's own settings, named once for the check and the
 * help texts */
#define UCT_REMAPRING_VERBS_SQ_SIZE_MIN  16
#define UCT_REMAPRING_VERBS_SQ_SIZE_MAX  16384
#define UCT_REMAPRING_VERBS_SRQ_SIZE_MIN 64
#define UCT_REMAPRING_VERBS_SRQ_SIZE_MAX 65536
#define UCT_REMAPRING_VERBS_TIMEOUT_MAX  31
#define UCT_REMAPRING_VERBS_MAX_CONNS    65536
#define UCT_REMAPRING_VERBS_IMM_WINDOW_MIN 2
#define UCT_REMAPRING_VERBS_IMM_WINDOW_MAX 4096
/* the window a connection gets at least, when IMM_WINDOW is larger and the
 * SRQ fills (uct_remapring_verbs_imm_window) */
#define UCT_REMAPRING_VERBS_IMM_WINDOW_FLOOR 32
/* what an SRQ grows to, at most, unless SRQ_SIZE asks more */
#define UCT_REMAPRING_VERBS_SRQ_GROW_MAX   8192
/* receive requests taken before progress posts them again, at most */
#define UCT_REMAPRING_VERBS_SRQ_REFILL     32

/* inline sends: what "auto" asks of each QP, and the most any setting asks
 * (devices take a few hundred bytes: mlx5 about 900, rxe 400ish) */
#define UCT_REMAPRING_VERBS_MAX_INLINE_AUTO 256
#define UCT_REMAPRING_VERBS_MAX_INLINE_MAX  4096


static const char *uct_remapring_verbs_mode_names[] = {
        [UCT_REMAPRING_VERBS_MODE_AUTO]   = "auto",
        [UCT_REMAPRING_VERBS_MODE_ODP]    = "odp",
        [UCT_REMAPRING_VERBS_MODE_PINNED] = "pinned",
        [UCT_REMAPRING_VERBS_MODE_LAST]   = NULL};

/* clang-format off */
static ucs_config_field_t uct_remapring_verbs_iface_config_table[] = {
    /* UCX_REMAPRING_<NAME> sets a ring setting for both transports,
     * UCX_REMAPRDMA_<NAME> for this one only */
    {UCT_REMAPRING_CONFIG_PREFIX, "", NULL,
     ucs_offsetof(uct_remapring_verbs_iface_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_remapring_iface_config_table)},

    {"MODE", "auto",
     "How a receiver places the ring its senders write:\n"
     " odp    - the ring view is registered with explicit On-Demand Paging:\n"
     "          a block remapped under a slot is followed by the device.\n"
     " pinned - each block behind a slot of a sender's ring is registered\n"
     "          (pinned) for that sender alone; each credit tells the sender\n"
     "          which block backs each slot it grants and its key.\n"
     " auto   - odp where the device reports it for RC WRITE, else pinned.",
     ucs_offsetof(uct_remapring_verbs_iface_config_t, mode),
     UCS_CONFIG_TYPE_ENUM(uct_remapring_verbs_mode_names)},

    {"SQ_SIZE", "256",
     "Send queue of each RC connection: requests a sender may have in flight\n"
     "to one receiver. Between "
     UCS_PP_MAKE_STRING(UCT_REMAPRING_VERBS_SQ_SIZE_MIN) " and "
     UCS_PP_MAKE_STRING(UCT_REMAPRING_VERBS_SQ_SIZE_MAX) ".",
     ucs_offsetof(uct_remapring_verbs_iface_config_t, sq_size),
     UCS_CONFIG_TYPE_UINT},

    {"SRQ_SIZE", "1024",
     "Receive requests an interface keeps posted at least, shared by all its\n"
     "connections: one is taken by each immediate (a record's tail, a credit).\n"
     "It grows with the connections, IMM_WINDOW for each, up to "
     UCS_PP_MAKE_STRING(UCT_REMAPRING_VERBS_SRQ_GROW_MAX) "\n"
     "(or this, if more) and what the device allows. Between "
     UCS_PP_MAKE_STRING(UCT_REMAPRING_VERBS_SRQ_SIZE_MIN) "\nand "
     UCS_PP_MAKE_STRING(UCT_REMAPRING_VERBS_SRQ_SIZE_MAX) ".",
     ucs_offsetof(uct_remapring_verbs_iface_config_t, srq_size),
     UCS_CONFIG_TYPE_UINT},

    {"STAGING", "auto",
     "Registered buffer a sender copies each record into before the device\n"
     "writes it, per connection, at most: it starts at 2 * BLOCK_SIZE and\n"
     "doubles, once its requests completed, when a send found it full.\n"
     "auto: RING_SLOTS * BLOCK_SIZE; at least 2 * BLOCK_SIZE.",
     ucs_offsetof(uct_remapring_verbs_iface_config_t, staging),
     UCS_CONFIG_TYPE_MEMUNITS},

    {"TIMEOUT", "18",
     "ACK timeout of the RC QPs, as the exponent of 4.096 us (18: about 1 s),\n"
     "retried 7 times; at most "
     UCS_PP_MAKE_STRING(UCT_REMAPRING_VERBS_TIMEOUT_MAX) ". A peer process that exits is seen at\n"
     "once (its kernel disconnects); a peer host that stops answering after\n"
     "the retries. The figures reported to UCP when BW, LATENCY and OVERHEAD\n"
     "are auto: the port's link speed, "
     UCS_PP_MAKE_STRING(UCT_REMAPRING_VERBS_LAT_US) "us and "
     UCS_PP_MAKE_STRING(UCT_REMAPRING_VERBS_OVH_US) "us.",
     ucs_offsetof(uct_remapring_verbs_iface_config_t, timeout),
     UCS_CONFIG_TYPE_UINT},

    {"RNR_TIMER", "1ms",
     "How long a sender whose write found no receive request posted waits\n"
     "before it sends again (the RNR NAK timer of each connection's QP, as\n"
     "IB codes it: from 10us to 491.52ms, rounded up). The connection\n"
     "manager leaves it at 655.36ms, which a receiver that pauses its\n"
     "progress would cost its peers per NAK.",
     ucs_offsetof(uct_remapring_verbs_iface_config_t, rnr_timer),
     UCS_CONFIG_TYPE_TIME},

    {"IMM_WINDOW", "128",
     "Immediates (records' tails) a sender may have in flight on one\n"
     "connection, each taking a receive request of the receiver: a record\n"
     "that finds them all in flight is written without one, its tail held\n"
     "(the next records too, and a flush pending) until the receiver says\n"
     "it took the earlier ones (every half window: one write for every 64\n"
     "records at 128). A receiver that stops progressing then makes its\n"
     "senders wait, not meet RNR NAKs. The receiver's setting is the one\n"
     "used, and the most a connection gets: once its shared receive queue\n"
     "could grow by fewer than 32 such windows, a new connection gets half\n"
     "as many for each halving of that room, down to "
     UCS_PP_MAKE_STRING(UCT_REMAPRING_VERBS_IMM_WINDOW_FLOOR) ".\n"
     "Between " UCS_PP_MAKE_STRING(UCT_REMAPRING_VERBS_IMM_WINDOW_MIN) " and "
     UCS_PP_MAKE_STRING(UCT_REMAPRING_VERBS_IMM_WINDOW_MAX) ".",
     ucs_offsetof(uct_remapring_verbs_iface_config_t, imm_window),
     UCS_CONFIG_TYPE_UINT},

    {"IDLE_TIME", "100ms",
     "A receiver's ring that took no record for this long asks its sender to\n"
     "keep to IDLE_SLOTS slots from its tail (a message each way): in odp mode\n"
     "it then punches the pages of the other slots, and of the pool's free\n"
     "blocks past a window of them; a page comes back when the sender next\n"
     "writes it (a page fault on the device). A pinned ring keeps what it was\n"
     "granted. Either way the sender's staging goes back to its first size.\n"
     "0: never.",
     ucs_offsetof(uct_remapring_verbs_iface_config_t, idle_time),
     UCS_CONFIG_TYPE_TIME},

    {"MAX_CONNS", "1024",
     "Connections one interface accepts (the shared-memory transport's\n"
     "bound is UCX_REMAPRING_MAX_PEERS): any host that reaches its port\n"
     "can ask for one, and each takes a ring (RING_SLOTS * BLOCK_SIZE of the\n"
     "pool, which POOL_MAX bounds) and a QP. One more is refused, with a\n"
     "line in the log. Between 1 and "
     UCS_PP_MAKE_STRING(UCT_REMAPRING_VERBS_MAX_CONNS) ".",
     ucs_offsetof(uct_remapring_verbs_iface_config_t, max_conns),
     UCS_CONFIG_TYPE_UINT},

    {"MAX_INLINE", "auto",
     "Records up to this size are sent inline (in the send request, not\n"
     "read by the device from the staging buffer), where the device takes\n"
     "that much: each QP asks for it, and an interface whose device refuses\n"
     "sends none inline. auto: "
     UCS_PP_MAKE_STRING(UCT_REMAPRING_VERBS_MAX_INLINE_AUTO) " bytes; at most "
     UCS_PP_MAKE_STRING(UCT_REMAPRING_VERBS_MAX_INLINE_MAX) "; 0: none.",
     ucs_offsetof(uct_remapring_verbs_iface_config_t, max_inline),
     UCS_CONFIG_TYPE_MEMUNITS},

    {NULL}
};
/* clang-format on */


static ucs_status_t uct_remapring_vconn_send_credit(uct_remapring_vconn_t *vconn);
static void uct_remapring_rx_vconn_credit(uct_remapring_vconn_t *vconn);
static void uct_remapring_tx_vconn_release_tail(uct_remapring_vconn_t *vconn);
static void uct_remapring_vconn_remote(const uct_remapring_vconn_t *vconn,
                                       uint64_t offset, uint64_t *addr_p,
                                       uint32_t *rkey_p);
static void uct_remapring_verbs_poll_cq(uct_remapring_iface_t *iface);


static UCS_F_ALWAYS_INLINE uct_remapring_verbs_iface_t *
uct_remapring_verbs(uct_remapring_iface_t *iface)
{
    return ucs_derived_of(iface, uct_remapring_verbs_iface_t);
}

static UCS_F_ALWAYS_INLINE uct_remapring_verbs_peer_t *
uct_remapring_verbs_peer(uct_remapring_peer_t *peer)
{
    return ucs_derived_of(peer, uct_remapring_verbs_peer_t);
}

static const char *uct_remapring_verbs_mode_str(uct_remapring_verbs_mode_t mode)
{
    return (mode == UCT_REMAPRING_VERBS_MODE_ODP) ? "odp" : "pinned";
}

/* -------------------------------------------------------------- requests */

/*
 * Every send request of a connection goes through here. Unsignaled ones
 * complete with the next signaled one (RC completes in order): a signaled
 * request takes an entry of the connection's op FIFO, which says how many
 * requests it frees and up to where the staging buffer may be reused.
 */
static ucs_status_t
uct_remapring_vconn_post(uct_remapring_vconn_t *vconn,
                         struct ibv_send_wr *wr, int signal,
                         uint64_t staging_end, uct_completion_t *comp,
                         uct_remapring_verbs_op_t **op_p)
{
    uct_remapring_verbs_iface_t *verbs = uct_remapring_verbs(vconn->iface);
    uct_remapring_verbs_op_t *op       = NULL;
    struct ibv_send_wr *bad_wr;
    unsigned index = 0;
    int ret;

    if (vconn->sq_avail == 0) {
        return UCS_ERR_NO_RESOURCE;
    }

    /* a full queue, or a staging buffer filling up, must keep a signaled
     * request in flight: only its completion gives them back */
    signal = signal || (comp != NULL) ||
             (vconn->unsignaled + 1 >= verbs->sig_every) ||
             (vconn->sq_avail <= verbs->sig_every) ||
             ((vconn->staging_size > 0) &&
              (staging_end > vconn->staging_signaled) &&
              (staging_end - vconn->staging_signaled >=
               vconn->staging_size / 4));
    wr->next = NULL;
    if (signal) {
        index          = (vconn->ops_head + vconn->ops_count) %
                         verbs->sq_size;
        op             = &vconn->ops[index];
        memset(op, 0, sizeof(*op));
        op->nwr         = vconn->unsignaled + 1;
        op->staging_end = staging_end;
        op->comp        = comp;
        wr->wr_id       = index;
        wr->send_flags |= IBV_SEND_SIGNALED;
    } else {
        wr->wr_id = UCT_REMAPRING_VERBS_WR_NONE;
    }

    ret = ibv_post_send(vconn->qp, wr, &bad_wr);
    if (ret != 0) {
        ucs_error("ibv_post_send to %s failed: %s", vconn->name, strerror(ret));
        return UCS_ERR_IO_ERROR;
    }

    --vconn->sq_avail;
    if (staging_end > vconn->staging_posted) {
        vconn->staging_posted = staging_end;
    }
    if (signal) {
        ++verbs->tx_stats.signaled;
        ++vconn->ops_count;
        vconn->unsignaled = 0;
        if (staging_end > vconn->staging_signaled) {
            vconn->staging_signaled = staging_end;
        }
    } else {
        ++vconn->unsignaled;
    }

    if (op_p != NULL) {
        *op_p = op;
    }
    return UCS_OK;
}

/* A staging buffer of @a size bytes, registered, in place of the one of
 * @a vconn, whose requests all completed; the old one stays on failure */
static ucs_status_t uct_remapring_vconn_staging_resize(uct_remapring_vconn_t *vconn,
                                                       size_t size)
{
    uct_remapring_verbs_iface_t *verbs = uct_remapring_verbs(vconn->iface);
    struct ibv_mr *mr;
    char *buf;

    buf = mmap(NULL, size, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) {
        ucs_diag("no staging of %zu bytes for %s: %m", size, vconn->name);
        return UCS_ERR_NO_MEMORY;
    }

    mr = ibv_reg_mr(verbs->dev->pd, buf, size, IBV_ACCESS_LOCAL_WRITE);
    if (mr == NULL) {
        ucs_diag("registration of %zu bytes of staging for %s failed: %m",
                 size, vconn->name);
        munmap(buf, size);
        return UCS_ERR_IO_ERROR;
    }

    if (vconn->staging != NULL) {
        ibv_dereg_mr(vconn->staging_mr);
        munmap(vconn->staging, vconn->staging_size);
    }

    ucs_debug("staging of %s: %zu KiB", vconn->name, size >> 10);
    vconn->staging          = buf;
    vconn->staging_mr       = mr;
    vconn->staging_size     = size;
    vconn->staging_head     = 0;
    vconn->staging_tail     = 0;
    vconn->staging_signaled = 0;
    vconn->staging_posted   = 0;
    vconn->staging_grow     = 0;
    vconn->staging_shrink   = 0;
    return UCS_OK;
}

/* An empty signaled write after the requests posted so far: its
 * completion reports them (RC completes a QP's requests in order), and
 * calls @a comp */
static ucs_status_t
uct_remapring_vconn_post_marker(uct_remapring_vconn_t *vconn,
                                uct_completion_t *comp)
{
    struct ibv_send_wr wr = {};

    ++uct_remapring_verbs(vconn->iface)->tx_stats.markers;
    wr.opcode = IBV_WR_RDMA_WRITE;
    uct_remapring_vconn_remote(vconn, vconn->tail, &wr.wr.rdma.remote_addr,
                               &wr.wr.rdma.rkey);
    return uct_remapring_vconn_post(vconn, &wr, 1, vconn->staging_posted, comp,
                                    NULL);
}

/* Requests posted unsignaled after the last signaled one, which no
 * completion would report while nothing else is sent: a marker after
 * them, whose completion gives them back */
static void uct_remapring_vconn_staging_signal(uct_remapring_vconn_t *vconn)
{
    if ((vconn->ops_count == 0) && (vconn->unsignaled > 0) &&
        (vconn->sq_avail > 0)) {
        (void)uct_remapring_vconn_post_marker(vconn, NULL);
    }
}

/* The staging becomes @a size bytes once every request that reads it
 * completed (a marker after unsignaled ones): true once it was tried (it
 * stays as it is where it cannot be made), false until then. Called where
 * no part of a send holds some of it */
static int uct_remapring_vconn_staging_settle(uct_remapring_vconn_t *vconn,
                                              size_t size)
{
    if (vconn->pending.valid || (vconn->ops_count > 0)) {
        return 0; /* again when they completed */
    }

    if (vconn->unsignaled > 0) {
        uct_remapring_vconn_staging_signal(vconn);
        return 0;
    }

    (void)uct_remapring_vconn_staging_resize(vconn, size);
    return 1;
}

/* A send found the staging full (staging_grow): it doubles, up to
 * UCX_REMAPRDMA_STAGING; no new send takes it until then */
static void uct_remapring_vconn_staging_grow(uct_remapring_vconn_t *vconn)
{
    if (uct_remapring_vconn_staging_settle(vconn, 2 * vconn->staging_size)) {
        vconn->staging_grow = 0;
    }
}

/* The receiver found the connection quiet (staging_shrink): the staging
 * goes back to its first size, unless a send wants it larger meanwhile */
static void uct_remapring_vconn_staging_trim(uct_remapring_vconn_t *vconn)
{
    size_t size = uct_remapring_verbs(vconn->iface)->staging_min;

    if (vconn->staging_grow || (vconn->staging_size <= size) ||
        uct_remapring_vconn_staging_settle(vconn, size)) {
        vconn->staging_shrink = 0;
    }
}

/* @a length bytes of staging buffer, 64-byte aligned, or NULL if the
 * requests that read it have not completed yet */
static void *uct_remapring_vconn_staging(uct_remapring_vconn_t *vconn,
                                         size_t length, uint64_t *pos_p)
{
    uint64_t head;
    size_t offset;

    length = ucs_align_up_pow2(ucs_max(length, (size_t)1),
                               UCT_REMAPRING_VERBS_STAGING_ALIGN);
    if (ucs_unlikely(vconn->staging_grow)) {
        uct_remapring_vconn_staging_grow(vconn);
        if (vconn->staging_grow) {
            return NULL; /* until its requests completed */
        }
    }

    head   = vconn->staging_head;
    offset = head & (vconn->staging_size - 1);
    if (offset + length > vconn->staging_size) {
        head += vconn->staging_size - offset; /* never across the end */
    }

    if ((length > vconn->staging_size) ||
        (head + length - vconn->staging_tail > vconn->staging_size)) {
        ++uct_remapring_verbs(vconn->iface)->tx_stats.full;
        vconn->staging_grow = (vconn->staging_size <
                               uct_remapring_verbs(vconn->iface)->staging_size);
        if (vconn->staging_grow) {
            uct_remapring_vconn_staging_signal(vconn);
        }
        return NULL;
    }

    *pos_p              = head;
    vconn->staging_head = head + length;
    return vconn->staging + (head & (vconn->staging_size - 1));
}

/* Whether the connection of @a peer has the send requests and the staging
 * room a send of @a length payload bytes may take (a record and a PAD
 * record): false tells the caller to queue its request as pending rather
 * than retry it at once (UCS_ERR_BUSY from pending_add would make UCP retry
 * without progress while only completions can free them). */
static int
uct_remapring_verbs_peer_can_post(uct_remapring_peer_t *peer, size_t length)
{
    const uct_remapring_vconn_t *vconn = uct_remapring_verbs_peer(peer)->vconn;
    size_t align  = vconn->rep.rec_align ? vconn->rep.rec_align :
                                           REMAPRING_RING_ALIGN;
    size_t needed = ucs_align_up_pow2(length + 2 * align,
                                      UCT_REMAPRING_VERBS_STAGING_ALIGN);
    size_t offset = vconn->staging_head & (vconn->staging_size - 1);

    /* two runs, and the room lost where a run would cross the end */
    if (offset + needed > vconn->staging_size) {
        needed += vconn->staging_size - offset;
    }

    /* a held stall waits for the receiver's acknowledgement, and so does
     * a held tail that a flush waits for: the flush, queued as pending,
     * must find no room to send (uct_remapring_ep_pending_add()), and what
     * was asked after it stays after it; a staging buffer that grows waits
     * for its requests first */
    return (vconn->state == UCT_REMAPRING_VCONN_READY) &&
           !vconn->stall_held && !vconn->flush_held &&
           (!vconn->staging_grow ||
            ((vconn->ops_count == 0) && (vconn->unsignaled == 0))) &&
           (vconn->sq_avail >= 3) &&
           (ucs_min(needed, vconn->staging_size) <=
            vconn->staging_size - (vconn->staging_head - vconn->staging_tail));
}

static void uct_remapring_verbs_sge(struct ibv_sge *sge, void *addr,
                                    uint32_t length, uint32_t lkey)
{
    sge->addr   = (uintptr_t)addr;
    sge->length = length;
    sge->lkey   = lkey;
}

/* A signaled request completed: the ones before it too */
static void uct_remapring_vconn_op_done(uct_remapring_vconn_t *vconn,
                                        uint64_t wr_id, ucs_status_t status)
{
    uct_remapring_verbs_iface_t *verbs = uct_remapring_verbs(vconn->iface);
    uct_remapring_verbs_op_t *op;

    if ((vconn->ops_count == 0) || (wr_id != vconn->ops_head)) {
        ucs_error("completion %" PRIu64 " of %s out of order"
                  " (expected %u of %u)",
                  wr_id, vconn->name, vconn->ops_head, vconn->ops_count);
        return;
    }

    op              = &vconn->ops[vconn->ops_head];
    vconn->ops_head = (vconn->ops_head + 1) % verbs->sq_size;
    --vconn->ops_count;
    vconn->sq_avail += op->nwr;
    if (op->staging_end > vconn->staging_tail) {
        vconn->staging_tail = op->staging_end;
    }

    if ((status == UCS_OK) && (op->unpack_cb != NULL)) {
        op->unpack_cb(op->unpack_arg, op->unpack_data, op->unpack_length);
    }

    if (op->comp != NULL) {
        uct_invoke_completion(op->comp, status);
    }

    /* a staging buffer that wants to grow or shrink, now that nothing
     * reads it */
    if (ucs_unlikely(vconn->staging_grow)) {
        uct_remapring_vconn_staging_grow(vconn);
    } else if (ucs_unlikely(vconn->staging_shrink)) {
        uct_remapring_vconn_staging_trim(vconn);
    }

    /* a held tail (or stall, or yield) that had its acknowledgement but no
     * request then */
    if (!vconn->is_rx &&
        (vconn->tail_held || vconn->stall_held || vconn->yield_held)) {
        uct_remapring_tx_vconn_release_tail(vconn);
    }

    /* send requests and staging came back */
    if ((vconn->peer != NULL) && (vconn->peer->backlog != NULL)) {
        (void)uct_remapring_peer_replay(vconn->peer);
    }
}


/* ---------------------------------------------------------- the wire */

/*
 * The verbs wire behind the ring writer (ring_wire.h). write() copies the
 * segments of a send into the staging buffer, one run per slot (a PAD
 * record, then the record), and posts all runs but the last; publish_tail()
 * posts the last one with the new tail as its immediate.
 */
typedef struct uct_remapring_vwire {
    remapring_wire_t super;
    uct_remapring_vconn_t *vconn;
} uct_remapring_vwire_t;

/* Where ring offset @a offset is in the receiver's memory */
static void uct_remapring_vconn_remote(const uct_remapring_vconn_t *vconn,
                                       uint64_t offset, uint64_t *addr_p,
                                       uint32_t *rkey_p)
{
    const uct_remapring_verbs_slot_t *slot;
    size_t window = (size_t)vconn->rep.block_size * vconn->rep.nslots;

    if (!vconn->pinned) {
        *addr_p = vconn->view_addr + (offset & (window - 1));
        *rkey_p = vconn->view_rkey;
        return;
    }

    slot    = &vconn->table[(offset >> vconn->block_shift) &
                            (vconn->rep.nslots - 1)];
    *addr_p = slot->addr + (offset & (vconn->rep.block_size - 1));
    *rkey_p = slot->rkey;
}

static ucs_status_t uct_remapring_vconn_write_run(uct_remapring_vconn_t *vconn,
                                                  uint64_t start, uint64_t end,
                                                  uint64_t staging, int imm,
                                                  uint32_t imm_data)
{
    struct ibv_send_wr wr = {};
    struct ibv_sge sge;

    if (end > start) {
        ++uct_remapring_verbs(vconn->iface)->tx_stats.records;
    } else {
        ++uct_remapring_verbs(vconn->iface)->tx_stats.tails;
    }
    uct_remapring_vconn_remote(vconn, start, &wr.wr.rdma.remote_addr,
                               &wr.wr.rdma.rkey);
    if (end > start) {
        uct_remapring_verbs_sge(&sge,
                                vconn->staging +
                                        (staging & (vconn->staging_size - 1)),
                                end - start, vconn->staging_mr->lkey);
        wr.sg_list = &sge;
        wr.num_sge = 1;
    }

    wr.opcode = imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
    wr.imm_data = htonl(imm_data);
    if ((end > start) && (end - start <= vconn->max_inline)) {
        /* the device takes the bytes with the request */
        wr.send_flags = IBV_SEND_INLINE;
    }
    return uct_remapring_vconn_post(vconn, &wr, 0,
                                    staging + ucs_align_up_pow2(
                                            ucs_max(end - start,
                                                    (uint64_t)1),
                                            UCT_REMAPRING_VERBS_STAGING_ALIGN),
                                    NULL, NULL);
}

static ucs_status_t uct_remapring_vwire_write(remapring_wire_t *wire,
                                              const remapring_wire_seg_t *segs,
                                              unsigned nsegs)
{
    uct_remapring_vconn_t *vconn = ((uct_remapring_vwire_t*)wire)->vconn;
    struct {
        uint64_t start, end, staging;
        char     *buf;
    } runs[2];
    uint64_t saved = vconn->staging_head;
    unsigned i, nruns = 0, r;

    if (ucs_unlikely(vconn->state != UCT_REMAPRING_VCONN_READY)) {
        return UCS_ERR_CONNECTION_RESET;
    }

    /* a held tail does not stop the records after it (written without
     * an immediate, the next one carries their tail): the receiver has
     * the records of a window of immediates to read meanwhile */
    if (ucs_unlikely(vconn->stall_held)) {
        return UCS_ERR_NO_RESOURCE; /* until the receiver acknowledges */
    }

    /* records never cross a slot: a run per slot */
    for (i = 0; i < nsegs; ++i) {
        if ((nruns == 0) ||
            ((segs[i].offset >> vconn->block_shift) !=
             (runs[nruns - 1].start >> vconn->block_shift))) {
            if (nruns == ucs_static_array_size(runs)) {
                ucs_error("a send to %s spans more than 2 slots", vconn->name);
                return UCS_ERR_INVALID_PARAM;
            }
            runs[nruns].start = segs[i].offset;
            runs[nruns].end   = segs[i].offset + segs[i].length;
            ++nruns;
        } else {
            runs[nruns - 1].start = ucs_min(runs[nruns - 1].start,
                                            segs[i].offset);
            runs[nruns - 1].end   = ucs_max(runs[nruns - 1].end,
                                            segs[i].offset + segs[i].length);
        }
    }

    /* all or nothing: staging for every run, a request for each and one
     * spare (the staller's and the flush's) */
    if (vconn->sq_avail < nruns + 1) {
        return UCS_ERR_NO_RESOURCE;
    }

    for (r = 0; r < nruns; ++r) {
        runs[r].buf = uct_remapring_vconn_staging(vconn,
                                                  runs[r].end - runs[r].start,
                                                  &runs[r].staging);
        if (runs[r].buf == NULL) {
            vconn->staging_head = saved;
            return UCS_ERR_NO_RESOURCE;
        }
    }

    for (i = 0, r = 0; i < nsegs; ++i) {
        while ((segs[i].offset < runs[r].start) ||
               (segs[i].offset >= runs[r].end)) {
            ++r;
        }
        memcpy(runs[r].buf + (segs[i].offset - runs[r].start),
               segs[i].buffer, segs[i].length);
    }

    for (r = 0; r + 1 < nruns; ++r) {
        if (uct_remapring_vconn_write_run(vconn, runs[r].start, runs[r].end,
                                          runs[r].staging, 0, 0) != UCS_OK) {
            return UCS_ERR_IO_ERROR;
        }
    }

    vconn->pending.start   = runs[nruns - 1].start;
    vconn->pending.end     = runs[nruns - 1].end;
    vconn->pending.staging = runs[nruns - 1].staging;
    vconn->pending.valid   = 1;
    return UCS_OK;
}

/* Whether the receiver has a receive request for one more immediate of
 * ours: fewer than its window are in flight */
static int uct_remapring_vconn_imm_room(const uct_remapring_vconn_t *vconn)
{
    return ((vconn->imm_posted - vconn->imm_acked) &
            UCT_REMAPRING_VERBS_IMM_MASK) < vconn->rep.imm_window;
}

/* The immediate of a record write that carries tail @a tail, and the yield
 * if one waits (the tail it carries is the one the yield keeps to) */
static uint32_t uct_remapring_vconn_tail_imm(const uct_remapring_vconn_t *vconn,
                                             uint64_t tail)
{
    return ((uint32_t)(tail / REMAPRING_RING_ALIGN) &
            UCT_REMAPRING_VERBS_IMM_TAIL_MASK) |
           (vconn->yield_held ? UCT_REMAPRING_VERBS_IMM_YIELD : 0);
}

/* A tail went (or a later one that covers it): nothing of ours is held
 * for the receiver's acknowledgement any more, nor a flush behind it */
static void uct_remapring_vconn_tail_went(uct_remapring_vconn_t *vconn)
{
    vconn->tail_held  = 0;
    vconn->flush_held = 0;
}

/* The tail, and the stall and the yield if they wait, as the immediate of
 * an empty write */
static ucs_status_t uct_remapring_vconn_send_tail(uct_remapring_vconn_t *vconn,
                                                  int stall)
{
    uint32_t imm = uct_remapring_vconn_tail_imm(vconn, vconn->tail) |
                   (stall ? UCT_REMAPRING_VERBS_IMM_STALL : 0);
    ucs_status_t status;

    status = uct_remapring_vconn_write_run(vconn, vconn->tail, vconn->tail, 0,
                                           1, imm);
    if (status == UCS_OK) {
        ++vconn->imm_posted;
        vconn->yield_held = 0;
    }
    return status;
}

/* A held tail (and stall, and yield), once the receiver has a receive
 * request for it and the send queue a request */
static void uct_remapring_tx_vconn_release_tail(uct_remapring_vconn_t *vconn)
{
    if ((vconn->tail_held || vconn->stall_held || vconn->yield_held) &&
        (vconn->state == UCT_REMAPRING_VCONN_READY) &&
        (vconn->sq_avail >= 2) && uct_remapring_vconn_imm_room(vconn) &&
        (uct_remapring_vconn_send_tail(vconn, vconn->stall_held) == UCS_OK)) {
        vconn->stall_sent |= vconn->stall_held;
        vconn->stall_held  = 0;
        uct_remapring_vconn_tail_went(vconn);
    }
}

static void
uct_remapring_vwire_publish_tail(remapring_wire_t *wire, uint64_t tail)
{
    uct_remapring_vconn_t *vconn = ((uct_remapring_vwire_t*)wire)->vconn;
    uint32_t imm                 = uct_remapring_vconn_tail_imm(vconn, tail);
    int room                     = uct_remapring_vconn_imm_room(vconn);
    ucs_status_t status          = UCS_OK;

    /* without room the bytes go now, their tail with a later immediate */
    if (vconn->pending.valid) {
        status = uct_remapring_vconn_write_run(vconn, vconn->pending.start,
                                               vconn->pending.end,
                                               vconn->pending.staging, room,
                                               imm);
        vconn->pending.valid = 0;
    } else if (room) {
        status = uct_remapring_vconn_write_run(vconn, vconn->tail,
                                               vconn->tail, 0, 1, imm);
    }

    vconn->tail = tail;
    if (room && (status == UCS_OK)) {
        ++vconn->imm_posted;
        uct_remapring_vconn_tail_went(vconn); /* it covers a held one */
        vconn->yield_held = 0; /* and it carried the yield */
    } else {
        uct_remapring_verbs(vconn->iface)->imm_stats.held += !vconn->tail_held;
        vconn->tail_held = 1;
    }

    if (status != UCS_OK) {
        uct_remapring_peer_failed(vconn->peer, UCS_ERR_IO_ERROR,
                                  "a write into its ring failed");
    }
}

static uint64_t uct_remapring_vwire_limit(remapring_wire_t *wire)
{
    return ((uct_remapring_vwire_t*)wire)->vconn->limit;
}

/* Out of credit: an empty write whose immediate asks for a larger grant,
 * once until credit comes */
static void uct_remapring_vwire_stalled(remapring_wire_t *wire)
{
    uct_remapring_vconn_t *vconn = ((uct_remapring_vwire_t*)wire)->vconn;

    if (vconn->stall_sent || (vconn->state != UCT_REMAPRING_VCONN_READY) ||
        (vconn->sq_avail < 2)) {
        return;
    }

    if (!uct_remapring_vconn_imm_room(vconn)) {
        vconn->stall_held = 1; /* with the held tail, once acknowledged */
        return;
    }

    if (uct_remapring_vconn_send_tail(vconn, 1) == UCS_OK) {
        vconn->stall_sent = 1;
        uct_remapring_vconn_tail_went(vconn);
    }
}

static void uct_remapring_vwire_destroy(remapring_wire_t *wire)
{
    ucs_free(wire);
}

static const remapring_wire_ops_t uct_remapring_vwire_ops = {
        .write        = uct_remapring_vwire_write,
        .publish_tail = uct_remapring_vwire_publish_tail,
        .limit        = uct_remapring_vwire_limit,
        .stalled      = uct_remapring_vwire_stalled,
        .reclaim      = NULL, /* the limit travels in immediates: a verbs ring
                             keeps its slots */
        .yield        = NULL,
        .destroy      = uct_remapring_vwire_destroy};


/* ------------------------------------------------------- connections */

/* Room in the CQ for the SRQ's completions and every QP's signaled ones */
static ucs_status_t uct_remapring_verbs_cq_reserve(uct_remapring_iface_t *iface)
{
    uct_remapring_verbs_iface_t *verbs = uct_remapring_verbs(iface);
    unsigned need = verbs->srq_size +
                    ((kh_size(&verbs->qps) + 1) * verbs->sq_size);
    struct ibv_device_attr attr;

    if ((int)need <= verbs->cq->cqe) {
        return UCS_OK;
    }

    if (ibv_query_device(verbs->dev->ctx, &attr) != 0) {
        attr.max_cqe = verbs->cq->cqe;
    }

    if (((int)need > attr.max_cqe) ||
        (ibv_resize_cq(verbs->cq, ucs_min((int)need * 2, attr.max_cqe)) != 0)) {
        ucs_error("%s: no room in the CQ for another connection"
                  " (%u entries needed, %d there)",
                  verbs->dev->name, need, verbs->cq->cqe);
        return UCS_ERR_EXCEEDS_LIMIT;
    }

    return UCS_OK;
}

/* Receive requests a connection's QP may take before our progress takes
 * them: a receiving one, its sender's immediates in flight (its window);
 * a sending one, the credits, acknowledgements and request to keep to less
 * its receiver may write (a window of slots and four) */
static unsigned uct_remapring_vconn_srq_share(uct_remapring_vconn_t *vconn)
{
    unsigned share = vconn->iface->rx.nslots + 4;

    return vconn->is_rx ? ucs_max(vconn->imm_window, share) : share;
}

static void uct_remapring_verbs_post_recvs(uct_remapring_verbs_iface_t *verbs);

/* Receive requests for one more connection (its share), and the ones the
 * interface's progress has taken and not posted again yet (fewer than
 * UCT_REMAPRING_VERBS_SRQ_REFILL and a poll batch, see the poll: twice the
 * refill, counted in srq_need from the start); posted at once,
 * before the connection's QP exists: its peer may write a whole share
 * before our next progress. The posted ones do not shrink when a
 * connection goes: the SRQ keeps what its busiest time needed */
static void uct_remapring_verbs_srq_reserve(uct_remapring_vconn_t *vconn)
{
    uct_remapring_verbs_iface_t *verbs = uct_remapring_verbs(vconn->iface);
    unsigned need;

    vconn->srq_share = uct_remapring_vconn_srq_share(vconn);
    verbs->srq_need += vconn->srq_share;
    need             = verbs->srq_need;
    if (need <= verbs->srq_size) {
        return;
    }

    if ((need > verbs->srq_max) && !verbs->srq_short) {
        ucs_diag("%s: %u receive requests would bound the immediates of %u"
                 " connections, the SRQ takes %u: past that, a receiver that"
                 " stops progressing makes its senders meet RNR NAKs",
                 verbs->dev->name, need, kh_size(&verbs->qps) + 1,
                 verbs->srq_max);
        verbs->srq_short = 1;
    }
    verbs->srq_size = ucs_min(need, verbs->srq_max);
    uct_remapring_verbs_post_recvs(verbs);
}

/* With the defaults (128, an SRQ of up to UCT_REMAPRING_VERBS_SRQ_GROW_MAX)
 * about 100 peers, each with a connection both ways, fit before the SRQ is
 * short, about as many as with a window of 32 for every connection. The
 * sender holds its tail past the window until the receiver acknowledges,
 * every half window: each acknowledgement is a write with an immediate, a
 * receive request and an ACK, one for every 16 records with a window of 32,
 * one for every 64 with 128 */
unsigned uct_remapring_verbs_imm_window(unsigned setting, unsigned srq_max,
                                        unsigned srq_need)
{
    unsigned floor  = ucs_min(setting,
                              (unsigned)UCT_REMAPRING_VERBS_IMM_WINDOW_FLOOR);
    unsigned room   = (srq_max > srq_need) ? (srq_max - srq_need) : 0;
    unsigned window = setting;

    while ((window > floor) && ((window * 32) > room)) {
        window /= 2;
    }
    return ucs_max(window, floor);
}

static ucs_status_t uct_remapring_vconn_create_qp(uct_remapring_vconn_t *vconn)
{
    uct_remapring_iface_t *iface       = vconn->iface;
    uct_remapring_verbs_iface_t *verbs = uct_remapring_verbs(iface);
    struct ibv_qp_init_attr attr       = {};
    ucs_status_t status;
    khiter_t iter;
    int ret, err;

    uct_remapring_verbs_srq_reserve(vconn);
    status = uct_remapring_verbs_cq_reserve(iface);
    if (status != UCS_OK) {
        return status;
    }

    vconn->ops = ucs_calloc(verbs->sq_size, sizeof(*vconn->ops),
                            "remapring_verbs_ops");
    if (vconn->ops == NULL) {
        ucs_error("failed to allocate requests of %s", vconn->name);
        return UCS_ERR_NO_MEMORY;
    }

    attr.send_cq          = verbs->cq;
    attr.recv_cq          = verbs->cq;
    attr.srq              = verbs->srq;
    attr.qp_type          = IBV_QPT_RC;
    attr.cap.max_send_wr     = verbs->sq_size;
    attr.cap.max_send_sge    = verbs->limits.send_sge;
    attr.cap.max_inline_data = verbs->max_inline;
    ret = rdma_create_qp(vconn->id, verbs->dev->pd, &attr);
    if ((ret != 0) && (verbs->max_inline > 0) &&
        ((errno == EINVAL) || (errno == ENOMEM))) {
        err                      = errno;
        attr.cap.max_inline_data = 0;
        ret = rdma_create_qp(vconn->id, verbs->dev->pd, &attr);
        if (ret == 0) {
            /* the device takes less inline than asked: none, from now on
             * (only where that alone made the difference) */
            ucs_diag("%s takes no QP with %u bytes inline (%s): records go"
                     " from the staging buffer only", verbs->dev->name,
                     verbs->max_inline, strerror(err));
            verbs->max_inline = 0;
        }
    }

    if ((ret != 0) && vconn->is_rx && (errno == EINVAL)) {
        /* the connection manager no longer waits for our reply: the
         * requester went before its request was taken (its process or
         * endpoint destroyed meanwhile) */
        ucs_diag("connection request from %s could not be taken (%m): its"
                 " requester has gone", vconn->name);
        return UCS_ERR_CONNECTION_RESET;
    } else if (ret != 0) {
        ucs_error("rdma_create_qp for %s failed: %m", vconn->name);
        return UCS_ERR_IO_ERROR;
    }

    vconn->qp         = vconn->id->qp;
    vconn->max_inline = ucs_min(attr.cap.max_inline_data, verbs->max_inline);
    vconn->sq_avail = verbs->sq_size;
    if (kh_get(uct_remapring_vconns, &verbs->qps, vconn->qp->qp_num) !=
        kh_end(&verbs->qps)) {
        /* a destroyed QP of that number still has completions queued */
        uct_remapring_verbs_poll_cq(vconn->iface);
    }

    iter = kh_put(uct_remapring_vconns, &verbs->qps, vconn->qp->qp_num, &ret);
    if (ret == UCS_KH_PUT_FAILED) {
        ucs_error("failed to add QP 0x%x to the hash", vconn->qp->qp_num);
        return UCS_ERR_NO_MEMORY;
    }

    kh_val(&verbs->qps, iter) = vconn;
    vconn->qp_num             = vconn->qp->qp_num;
    vconn->qp_num_valid       = 1;
    return UCS_OK;
}

static void uct_remapring_verbs_poll_cq(uct_remapring_iface_t *iface);

/* Destroy the QP and id of a connection, and free it. Completions of the
 * QP may still wait in the CQ: until the CQ was drained once, its number
 * stays in the hash, naming a connection that ignores them (and a new QP
 * with the same number waits for that) */
static void uct_remapring_vconn_release(uct_remapring_vconn_t *vconn)
{
    uct_remapring_verbs_iface_t *verbs = uct_remapring_verbs(vconn->iface);

    vconn->state = UCT_REMAPRING_VCONN_CLOSED;
    if (vconn->qp != NULL) {
        rdma_destroy_qp(vconn->id);
        vconn->qp = NULL;
    }

    verbs->srq_need -= vconn->srq_share;
    vconn->srq_share = 0;

    if (vconn->id != NULL) {
        rdma_destroy_id(vconn->id);
        vconn->id = NULL;
    }

    ucs_free(vconn->ops);
    vconn->ops    = NULL;
    vconn->zombie = 1;
    if (vconn->qp_num_valid) {
        ucs_list_add_tail(&verbs->zombies, &vconn->list);
    } else {
        ucs_free(vconn);
    }
}

/* The CQ was drained: the completions of destroyed QPs are gone with it */
static void uct_remapring_verbs_reap(uct_remapring_verbs_iface_t *verbs)
{
    uct_remapring_vconn_t *vconn, *tmp;
    khiter_t iter;

    ucs_list_for_each_safe(vconn, tmp, &verbs->zombies, list) {
        iter = kh_get(uct_remapring_vconns, &verbs->qps, vconn->qp_num);
        if ((iter != kh_end(&verbs->qps)) &&
            (kh_val(&verbs->qps, iter) == vconn)) {
            kh_del(uct_remapring_vconns, &verbs->qps, iter);
        }
        ucs_list_del(&vconn->list);
        ucs_free(vconn);
    }
}

static void uct_remapring_vconn_dereg(struct ibv_mr **mr_p)
{
    if (*mr_p != NULL) {
        ibv_dereg_mr(*mr_p);
        *mr_p = NULL;
    }
}


/* ------------------------------------------------------------ receiving */

static void uct_remapring_rx_vconn_set_active(uct_remapring_vconn_t *vconn)
{
    if (!vconn->active) {
        vconn->active = 1;
        ucs_list_add_tail(&uct_remapring_verbs(vconn->iface)->rx_active,
                          &vconn->active_list);
    }
}

static void uct_remapring_rx_vconn_set_idle(uct_remapring_vconn_t *vconn)
{
    if (vconn->active) {
        vconn->active = 0;
        ucs_list_del(&vconn->active_list);
    }
}

/* Room for the registrations of @a nblocks pool blocks */
static ucs_status_t
uct_remapring_verbs_block_mrs_reserve(uct_remapring_verbs_iface_t *verbs,
                                      unsigned nblocks)
{
    uct_remapring_verbs_slot_mr_t **mrs;

    if (nblocks <= verbs->nblocks) {
        return UCS_OK;
    }

    mrs = ucs_realloc(verbs->block_mrs, nblocks * sizeof(*mrs),
                      "remapring_block_mrs");
    if (mrs == NULL) {
        ucs_error("failed to allocate the registrations of %u pool blocks",
                  nblocks);
        return UCS_ERR_NO_MEMORY;
    }

    memset(&mrs[verbs->nblocks], 0,
           (nblocks - verbs->nblocks) * sizeof(*mrs));
    verbs->block_mrs = mrs;
    verbs->nblocks   = nblocks;
    return UCS_OK;
}

/* Pinned mode: @a smr registers its block no more */
static void
uct_remapring_verbs_slot_mr_drop(uct_remapring_verbs_iface_t *verbs,
                                 uct_remapring_verbs_slot_mr_t *smr)
{
    if (smr->mr == NULL) {
        return;
    }

    if (verbs->block_mrs[smr->block] == smr) {
        verbs->block_mrs[smr->block] = NULL;
    }
    ibv_dereg_mr(smr->mr);
    smr->mr = NULL;
}

/* Pinned mode: the key through which the sender of @a vconn writes @a block
 * behind @a slot, registered for that slot alone. A registration left over
 * on the block (an earlier lap's, of another slot or connection, kept while
 * the block was free) goes first: the block is nobody else's now */
static ucs_status_t
uct_remapring_verbs_slot_rkey(uct_remapring_vconn_t *vconn, unsigned slot,
                              uint32_t block, uint32_t *rkey_p)
{
    uct_remapring_verbs_iface_t *verbs = uct_remapring_verbs(vconn->iface);
    uct_remapring_verbs_slot_mr_t *smr = &vconn->slot_mrs[slot];
    uct_remapring_verbs_slot_mr_t *other;

    if ((smr->mr != NULL) && (smr->block == block)) {
        ++verbs->pinned_stats.reuses;
        *rkey_p = smr->mr->rkey;
        return UCS_OK;
    }

    /* an odp interface's pool has no growth callback: its first pinned
     * connection sizes the table */
    if ((block >= verbs->nblocks) &&
        (uct_remapring_verbs_block_mrs_reserve(
                 verbs, ucs_max(block + 1, 2 * verbs->nblocks)) != UCS_OK)) {
        return UCS_ERR_NO_MEMORY;
    }

    uct_remapring_verbs_slot_mr_drop(verbs, smr);
    other = verbs->block_mrs[block];
    if (other != NULL) {
        uct_remapring_verbs_slot_mr_drop(verbs, other);
    }

    smr->mr = ibv_reg_mr(verbs->dev->pd,
                         remapring_pool_block_addr(vconn->iface->rx.pool,
                                                   block),
                         verbs->pool_block_size,
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (smr->mr == NULL) {
        ucs_error("registration of pool block %u for %s on %s failed: %m",
                  block, vconn->name, verbs->dev->name);
        return UCS_ERR_IO_ERROR;
    }

    smr->block               = block;
    verbs->block_mrs[block]  = smr;
    ++verbs->pinned_stats.regs;
    *rkey_p = smr->mr->rkey;
    return UCS_OK;
}

/* Pinned mode: a block left a slot of the ring. One with held records
 * loses its sender's key before the upper layer reads on; so does any in
 * an interface whose pool punches free blocks (odp mode, a connection
 * pinned for its path MTU: a punched page would stay the device's). A free
 * block of a pinned interface keeps its key until it backs a slot again */
static void
uct_remapring_rx_vconn_detached(void *arg, unsigned slot, uint32_t block)
{
    uct_remapring_vconn_t *vconn       = arg;
    uct_remapring_verbs_iface_t *verbs = uct_remapring_verbs(vconn->iface);
    uct_remapring_verbs_slot_mr_t *smr = &vconn->slot_mrs[slot];

    if ((smr->mr == NULL) || (smr->block != block)) {
        return;
    }

    if (vconn->iface->rx.pool->blocks[block].nholds > 0) {
        ++verbs->pinned_stats.revoked;
    } else if (verbs->mode == UCT_REMAPRING_VERBS_MODE_PINNED) {
        return;
    }
    uct_remapring_verbs_slot_mr_drop(verbs, smr);
}

static void uct_remapring_rx_vconn_free(uct_remapring_vconn_t *vconn)
{
    uct_remapring_verbs_iface_t *verbs = uct_remapring_verbs(vconn->iface);
    unsigned slot;

    ucs_debug("ring from %s closed", vconn->name);
    uct_remapring_rx_vconn_set_idle(vconn);
    ucs_list_del(&vconn->list);
    --verbs->nrx;
    /* the QP first: the device writes into the view no more */
    if (vconn->qp != NULL) {
        rdma_destroy_qp(vconn->id);
        vconn->qp = NULL;
    }
    uct_remapring_vconn_dereg(&vconn->view_mr);
    uct_remapring_vconn_dereg(&vconn->credit_table_mr);
    for (slot = 0; (vconn->slot_mrs != NULL) &&
                   (slot < vconn->iface->rx.nslots); ++slot) {
        uct_remapring_verbs_slot_mr_drop(verbs, &vconn->slot_mrs[slot]);
    }
    if (vconn->ring != NULL) {
        /* held messages keep their blocks */
        remapring_ring_destroy(vconn->ring);
        vconn->ring = NULL;
    }
    ucs_free(vconn->credit_table);
    ucs_free(vconn->slot_mrs);
    ucs_free(vconn->slots);
    uct_remapring_vconn_release(vconn);
}

/* A ring went bad: disconnect; the sender's endpoints fail */
static void uct_remapring_rx_vconn_fail(uct_remapring_vconn_t *vconn,
                                        const char *reason)
{
    if (reason != NULL) {
        ucs_error("connection from %s failed: %s", vconn->name, reason);
    }

    vconn->failed = 1;
    uct_remapring_rx_vconn_set_idle(vconn);
    if ((vconn->state != UCT_REMAPRING_VCONN_CLOSED) && (vconn->id != NULL)) {
        rdma_disconnect(vconn->id);
    }
}

/* The ring stored a new limit: send it, unless the connection is not up
 * yet (then the first credit, at ESTABLISHED, carries it) */
static void uct_remapring_rx_vconn_published(void *arg, uint64_t limit)
{
    uct_remapring_vconn_t *vconn = arg;

    if (vconn->state == UCT_REMAPRING_VCONN_READY) {
        uct_remapring_rx_vconn_credit(vconn);
    }
}

/* odp mode: have the device fault in the ring view under ring offsets up to
 * @a end, not faulted in yet, before the sender may write them. The
 * receiver remaps a fresh block under a slot before it credits the slot
 * again, and the kernel then invalidates the device's mapping of it: without
 * this, the first write after each remap takes a page fault on the device
 * (on mlx5 an RNR NAK and a retry). Asynchronous: the sender's write waits
 * for nothing, and a write that comes first faults as before. */
static void uct_remapring_vconn_prefetch(uct_remapring_vconn_t *vconn,
                                         uint64_t end)
{
    uct_remapring_verbs_iface_t *verbs = uct_remapring_verbs(vconn->iface);
    struct ibv_mr *mr                  = vconn->view_mr;
    uint64_t start                     = vconn->prefetched;
    struct ibv_sge sge[2];
    size_t offset, length;
    unsigned n = 0;
    int ret;

    if ((mr == NULL) || !verbs->prefetch || (end <= start)) {
        return;
    }

    /* the view is the window, once: at most two pieces where it wraps */
    offset = start % mr->length;
    length = ucs_min(end - start, (uint64_t)mr->length);
    uct_remapring_verbs_sge(&sge[n++], UCS_PTR_BYTE_OFFSET(mr->addr, offset),
                            ucs_min(length, mr->length - offset), mr->lkey);
    if (length > mr->length - offset) {
        uct_remapring_verbs_sge(&sge[n++], mr->addr,
                                length - (mr->length - offset), mr->lkey);
    }

    ret = ibv_advise_mr(verbs->dev->pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
                        0, sge, n);
    if (ret != 0) {
        verbs->prefetch = 0;
        ucs_diag("%s: no ODP prefetch (ibv_advise_mr: %s): the device faults"
                 " in each block the receiver remaps on the first write to it",
                 verbs->dev->name, strerror(ret));
        return;
    }

    vconn->prefetched = end;
}

/* odp mode: have the pages of the ring from the sender's tail to
 * UCT_REMAPRING_VERBS_POPULATE_AHEAD past it present, within what is
 * credited, before the sender writes them: allocated, and mapped in the
 * ring view (the device's fault then finds the page table entry, where
 * ibv_advise_mr is missing) and in the CPU view (the receiver reads a
 * record without a page fault: on a device whose records start on pages,
 * each record would take one on the first lap). A page the sender would
 * write anyway, a few records early: what a busy ring holds grows by at
 * most that distance; a quiet one is left as it is. Two madvise calls, one
 * per view, each time the tail has moved half that distance. */
static void uct_remapring_rx_vconn_populate(uct_remapring_vconn_t *vconn)
{
    uct_remapring_verbs_iface_t *verbs = uct_remapring_verbs(vconn->iface);
    remapring_ring_t *ring             = vconn->ring;
    uint64_t block_mask                = ring->block_size - 1;
    uint64_t start, end, next;
    size_t length;

    if ((vconn->view_mr == NULL) || !verbs->populate ||
        (vconn->quiet != UCT_REMAPRING_VCONN_BUSY) ||
        (vconn->populated >=
         vconn->rx_tail + UCT_REMAPRING_VERBS_POPULATE_AHEAD / 2)) {
        return;
    }

    start = ucs_max(vconn->populated,
                    ucs_align_down_pow2(vconn->rx_tail, ucs_get_page_size()));
    end   = ucs_min(vconn->rx_tail + UCT_REMAPRING_VERBS_POPULATE_AHEAD,
                    vconn->credited);
    end   = ucs_align_down_pow2(end, ucs_get_page_size());
    for (; start < end; start = next) {
        /* a block at a time: the CPU view is the block under the slot */
        next   = ucs_min((start | block_mask) + 1, end);
        length = next - start;
        if ((madvise(UCS_PTR_BYTE_OFFSET(ring->view,
                                         start & (ring->window_size - 1)),
                     length, MADV_POPULATE_WRITE) != 0) ||
            (madvise(remapring_ring_cpu_addr(ring, start), length,
                     MADV_POPULATE_WRITE) != 0)) {
            verbs->populate = 0;
            ucs_diag("%s: ring pages not populated ahead of the sender"
                     " (madvise: %m): the first write and read of each"
                     " page fault",
                     verbs->dev->name);
            return;
        }
        verbs->populate_calls += 2;
    }

    vconn->populated = ucs_max(vconn->populated, end);
}

/* Credit up to the ring's limit: in pinned mode the slot table entries of
 * the newly credited slots first, in the same write; in odp mode the
 * device faults in the credited slots first */
static ucs_status_t uct_remapring_vconn_send_credit(uct_remapring_vconn_t *vconn)
{
    remapring_ring_t *ring             = vconn->ring;
    uint64_t limit                     = ring->limit;
    unsigned nslots                    = ring->nslots;
    uct_remapring_verbs_slot_t *entry;
    struct ibv_send_wr wr;
    struct ibv_sge sge;
    unsigned first, count, n, slot;
    uint64_t offset;
    uint32_t block;
    ucs_status_t status;

    /* a quiet ring's credit waits for the sender's answer (it may not
     * write past what it was asked to keep to until then) */
    if ((limit <= vconn->credited) ||
        (vconn->quiet == UCT_REMAPRING_VCONN_QUIET_ASKED)) {
        return UCS_OK;
    }

    if (vconn->sq_avail < 3) {
        return UCS_ERR_NO_RESOURCE; /* again when requests complete */
    }

    first = (vconn->credited >> ring->block_shift) & (nslots - 1);
    count = (limit - vconn->credited) >> ring->block_shift;
    uct_remapring_vconn_prefetch(vconn, limit);
    if (vconn->pinned) {
        for (offset = vconn->credited; offset < limit;
             offset += ring->block_size) {
            slot        = (offset >> ring->block_shift) & (nslots - 1);
            block       = vconn->slots[slot];
            entry       = &vconn->credit_table[slot];
            entry->addr = (uintptr_t)
                    remapring_pool_block_addr(vconn->iface->rx.pool, block);
            status = uct_remapring_verbs_slot_rkey(vconn, slot, block,
                                                   &entry->rkey);
            if (status != UCS_OK) {
                uct_remapring_rx_vconn_fail(vconn,
                                            "a block could not be registered");
                return status;
            }
        }
    } else {
        count = 0;
    }

    /* the entries in at most two pieces (the table wraps), the immediate
     * with the last */
    do {
        memset(&wr, 0, sizeof(wr));
        n                   = ucs_min(count, nslots - first);
        wr.wr.rdma.rkey     = vconn->remote_table_rkey;
        wr.wr.rdma.remote_addr = vconn->remote_table +
                                 (first * sizeof(uct_remapring_verbs_slot_t));
        if (n > 0) {
            uct_remapring_verbs_sge(&sge, &vconn->credit_table[first],
                                    n * sizeof(uct_remapring_verbs_slot_t),
                                    vconn->credit_table_mr->lkey);
            wr.sg_list = &sge;
            wr.num_sge = 1;
        }

        count -= n;
        first  = (first + n) & (nslots - 1);
        if (count == 0) {
            wr.opcode   = IBV_WR_RDMA_WRITE_WITH_IMM;
            wr.imm_data = htonl((uint32_t)(limit >> ring->block_shift) &
                                UCT_REMAPRING_VERBS_IMM_LIMIT_MASK);
        } else {
            wr.opcode   = IBV_WR_RDMA_WRITE;
        }

        if (uct_remapring_vconn_post(vconn, &wr, 0, 0, NULL, NULL) !=
            UCS_OK) {
            uct_remapring_rx_vconn_fail(vconn, "a credit could not be sent");
            return UCS_ERR_IO_ERROR;
        }
    } while (count > 0);

    vconn->credited     = limit;
    vconn->credit_asked = 0;
    uct_remapring_rx_vconn_populate(vconn);
    return UCS_OK;
}

/* The ring's credit goes to the sender when the sender needs it: it
 * stalled, or it has at most half of its grant left to write. Each credit
 * is a write with an immediate, a receive request and an ACK: a ring that
 * drains after every record (a ping-pong) published one for each block,
 * every 32 records in odp mode. A sender that runs out anyway stalls, and
 * its stall's immediate takes the credit along (uct_remapring_rx_vconn_imm) */
static void uct_remapring_rx_vconn_credit(uct_remapring_vconn_t *vconn)
{
    remapring_ring_t *ring = vconn->ring;
    uint64_t half          = ucs_max(ring->grant, ring->block_size) / 2;

    if ((ring->limit > vconn->credited) &&
        (vconn->credit_asked || (vconn->rx_tail + half >= vconn->credited))) {
        uct_remapring_vconn_send_credit(vconn);
    }
}

/* Tell the sender how many of its immediates were taken, every half
 * window: each took a receive request, which progress reposts; again when
 * requests complete, where the send queue is full */
static void uct_remapring_rx_vconn_ack(uct_remapring_vconn_t *vconn)
{
    uct_remapring_verbs_iface_t *verbs = uct_remapring_verbs(vconn->iface);
    struct ibv_send_wr wr              = {};

    if ((((vconn->imm_taken - vconn->imm_told) &
          UCT_REMAPRING_VERBS_IMM_MASK) < ucs_max(vconn->imm_window / 2, 1u)) ||
        (vconn->state != UCT_REMAPRING_VCONN_READY) || (vconn->sq_avail < 2)) {
        return;
    }

    wr.opcode              = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.imm_data            = htonl((vconn->imm_taken &
                                    UCT_REMAPRING_VERBS_IMM_MASK) |
                                   UCT_REMAPRING_VERBS_IMM_ACK);
    wr.wr.rdma.rkey        = vconn->remote_table_rkey;
    wr.wr.rdma.remote_addr = vconn->remote_table;
    if (uct_remapring_vconn_post(vconn, &wr, 0, 0, NULL, NULL) != UCS_OK) {
        uct_remapring_rx_vconn_fail(vconn, "an acknowledgement could not be"
                                           " sent");
        return;
    }

    vconn->imm_told = vconn->imm_taken;
    ++verbs->imm_stats.acks;
}

/* The sender answered a quiet ring's request (uct_remapring_vconn_quiet_t):
 * it keeps below the end of the slots from the one of its tail on, as many
 * as IDLE_SLOTS, until the next credit (its tail then; the one it answered
 * with is the same or later, the bound here too). Give back the pages of every other
 * slot of the window that holds no record to read (those from the head's
 * slot to the tail's stay), the held records' pages excepted, and of the
 * pool's free blocks past a window of them; then credit the slots again:
 * nothing is written there any more, and a page comes back (zeroed,
 * faulted in by the device) when the sender next writes it. Prefetching
 * stays where it was: those slots are faulted in again only when credited
 * on the next lap. */
static void uct_remapring_rx_vconn_yielded(uct_remapring_vconn_t *vconn)
{
    uct_remapring_verbs_iface_t *verbs = uct_remapring_verbs(vconn->iface);
    remapring_ring_t *ring             = vconn->ring;
    remapring_pool_t *pool             = vconn->iface->rx.pool;
    uint64_t block_mask                = ring->block_size - 1;
    uint64_t bound, end, offset;
    uint32_t block;
    unsigned slot;

    if (vconn->quiet != UCT_REMAPRING_VCONN_QUIET_ASKED) {
        ucs_debug("%s yielded unasked: ignored", vconn->name);
        return;
    }

    ++verbs->quiet_stats.yields;
    bound = (vconn->rx_tail & ~block_mask) +
            ((uint64_t)vconn->iface->rx.idle_slots << ring->block_shift);
    /* a pinned ring's blocks stay: a registered page stays the device's */
    end   = vconn->pinned ? bound :
                            (ring->head & ~block_mask) + ring->window_size;
    for (offset = bound; offset < end; offset += ring->block_size) {
        slot  = (offset >> ring->block_shift) & (ring->nslots - 1);
        block = ring->slots[slot];
        if (block != REMAPRING_POOL_BLOCK_NONE) {
            verbs->quiet_stats.pages += remapring_pool_block_punch(pool,
                                                                   block);
        }
    }
    if (!vconn->pinned) {
        verbs->quiet_stats.pages += remapring_pool_trim_free(pool,
                                                             ring->nslots);
    }

    ucs_debug("ring from %s quiet at tail %" PRIu64 ": slots %" PRIu64
              " to %" PRIu64 " given back", vconn->name, vconn->rx_tail,
              bound >> ring->block_shift, end >> ring->block_shift);
    /* the sender's own bound, from its tail when it was asked, is at
     * least the tail it answered with: credit from the slot of that tail
     * on, whatever the sender kept to */
    vconn->quiet     = UCT_REMAPRING_VCONN_QUIET;
    vconn->credited  = ucs_min(vconn->credited, vconn->rx_tail & ~block_mask);
    /* populated again from there once the sender writes on */
    vconn->populated = ucs_min(vconn->populated, bound);
    uct_remapring_vconn_send_credit(vconn);
}

/* A record's immediate: the sender's new tail, and maybe a stall or the
 * answer to a quiet ring's request */
static void uct_remapring_rx_vconn_imm(uct_remapring_vconn_t *vconn,
                                       uint32_t imm)
{
    uint32_t units = imm & UCT_REMAPRING_VERBS_IMM_TAIL_MASK;
    uint32_t delta = (units -
                      (uint32_t)(vconn->rx_tail / REMAPRING_RING_ALIGN)) &
                     UCT_REMAPRING_VERBS_IMM_TAIL_MASK;

    if (vconn->failed) {
        return;
    }

    ++vconn->imm_taken;
    uct_remapring_rx_vconn_ack(vconn);
    if (imm & UCT_REMAPRING_VERBS_IMM_STALL) {
        __atomic_store_n(&vconn->ctl.stalls, vconn->ctl.stalls + 1,
                         __ATOMIC_RELAXED);
        vconn->credit_asked = 1; /* below, or when the ring publishes */
    }

    /* the ring checks the tail against its limit */
    vconn->rx_tail += (uint64_t)delta * REMAPRING_RING_ALIGN;
    remapring_ring_ctl_store_tail(&vconn->ctl, vconn->rx_tail);
    uct_remapring_rx_vconn_set_active(vconn);
    if (ucs_unlikely(imm & UCT_REMAPRING_VERBS_IMM_YIELD)) {
        uct_remapring_rx_vconn_yielded(vconn);
    } else if (ucs_unlikely(vconn->quiet == UCT_REMAPRING_VCONN_QUIET)) {
        vconn->quiet = UCT_REMAPRING_VCONN_BUSY;
    }
    uct_remapring_rx_vconn_populate(vconn);

    /* a credit held back (uct_remapring_rx_vconn_credit) it may be waiting
     * for: the ring publishes nothing new until it reads on */
    if (ucs_unlikely(vconn->credit_asked) &&
        (vconn->state == UCT_REMAPRING_VCONN_READY)) {
        uct_remapring_rx_vconn_credit(vconn);
    }
}

/* Ask the sender of a ring that took no immediate for IDLE_TIME to keep to
 * IDLE_SLOTS (uct_remapring_vconn_quiet_t); false if the send queue is
 * full (again at the next look) */
static int uct_remapring_rx_vconn_ask_quiet(uct_remapring_vconn_t *vconn)
{
    uct_remapring_verbs_iface_t *verbs = uct_remapring_verbs(vconn->iface);
    remapring_ring_t *ring             = vconn->ring;
    unsigned keep                      = vconn->iface->rx.idle_slots;
    struct ibv_send_wr wr              = {};

    /* odp, nothing past IDLE_SLOTS credited: nothing to give back (a
     * pinned ring is asked all the same: its sender's staging shrinks) */
    if (!vconn->pinned && ((vconn->credited >> ring->block_shift) <=
                           (vconn->rx_tail >> ring->block_shift) + keep)) {
        vconn->quiet = UCT_REMAPRING_VCONN_QUIET;
        return 1;
    }

    if (vconn->sq_avail < 2) {
        return 0;
    }

    wr.opcode              = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.imm_data            = htonl(UCT_REMAPRING_VERBS_IMM_QUIET | keep);
    wr.wr.rdma.rkey        = vconn->remote_table_rkey;
    wr.wr.rdma.remote_addr = vconn->remote_table;
    if (uct_remapring_vconn_post(vconn, &wr, 0, 0, NULL, NULL) != UCS_OK) {
        uct_remapring_rx_vconn_fail(vconn, "a request could not be sent");
        return 1;
    }

    ucs_debug("ring from %s quiet for %.0f ms at tail %" PRIu64 ": asked to"
              " keep to %u slots", vconn->name,
              ucs_time_to_msec(ucs_get_time() - vconn->quiet_since),
              vconn->rx_tail, keep);
    vconn->quiet = UCT_REMAPRING_VCONN_QUIET_ASKED;
    ++verbs->quiet_stats.asked;
    return 1;
}

/* Now and then: the rings that took no immediate for IDLE_TIME give back
 * their memory past IDLE_SLOTS (odp), and their senders' staging shrinks */
static void uct_remapring_verbs_quiet_check(uct_remapring_verbs_iface_t *verbs)
{
    ucs_time_t now = ucs_get_time();
    uct_remapring_vconn_t *vconn;

    if ((verbs->idle_time == 0) || (now < verbs->quiet_next)) {
        return;
    }

    verbs->quiet_next = now + ucs_max(verbs->idle_time / 4, (ucs_time_t)1);
    ucs_list_for_each(vconn, &verbs->rx_conns, list) {
        if (vconn->failed || (vconn->ring == NULL) ||
            (vconn->state != UCT_REMAPRING_VCONN_READY) ||
            (vconn->quiet != UCT_REMAPRING_VCONN_BUSY)) {
            continue;
        }

        if (vconn->imm_taken != vconn->quiet_seen) {
            vconn->quiet_seen  = vconn->imm_taken;
            vconn->quiet_since = now;
        } else if ((now - vconn->quiet_since >= verbs->idle_time) &&
                   !uct_remapring_rx_vconn_ask_quiet(vconn)) {
            return; /* no send request now */
        }
    }
}

static unsigned uct_remapring_rx_vconn_poll(uct_remapring_vconn_t *vconn)
{
    remapring_ring_t *ring = vconn->ring;
    unsigned count;
    int failed = 0;

    count = uct_remapring_iface_rx_ring(vconn->iface, ring, &failed);
    if (ucs_unlikely(failed)) {
        uct_remapring_rx_vconn_fail(vconn, NULL); /* logged */
        return count;
    }

    if ((count > 0) || !remapring_ring_is_empty(ring)) {
        return count;
    }

    /* drained: the next immediate wakes it */
    uct_remapring_rx_vconn_set_idle(vconn);
    remapring_ring_flush_credits(ring);
    if (vconn->state == UCT_REMAPRING_VCONN_READY) {
        uct_remapring_rx_vconn_credit(vconn); /* one held back, now due */
    }
    if (vconn->state == UCT_REMAPRING_VCONN_CLOSED) {
        uct_remapring_rx_vconn_free(vconn);
    }

    return count;
}

/* Refuse a request; @a status says why, to the sender */
/* The QP is ready to send (RTS): its RNR NAK timer, which rdma_cm's RTR
 * transition leaves at 655.36 ms (code 0), becomes the setting's. The timer
 * is the receiver's: the one a peer waits after a write found no receive
 * request posted here. */
static void uct_remapring_vconn_rnr_timer(uct_remapring_vconn_t *vconn)
{
    uct_remapring_verbs_iface_t *verbs = uct_remapring_verbs(vconn->iface);
    struct ibv_qp_attr attr            = {};
    struct ibv_qp_init_attr init;
    int ret;

    attr.min_rnr_timer = verbs->rnr_code;
    ret = ibv_modify_qp(vconn->qp, &attr, IBV_QP_MIN_RNR_TIMER);
    if (ret != 0) {
        ucs_diag("%s: the RNR timer stays the connection manager's 655.36 ms"
                 " (ibv_modify_qp: %s)", vconn->name, strerror(ret));
        return;
    }

    /* read back: a device may take the request and keep its own */
    memset(&attr, 0, sizeof(attr));
    ret = ibv_query_qp(vconn->qp, &attr, IBV_QP_MIN_RNR_TIMER, &init);
    if ((ret == 0) && (attr.min_rnr_timer != verbs->rnr_code)) {
        ucs_diag("%s: the RNR timer stays code %u, not %u", vconn->name,
                 attr.min_rnr_timer, verbs->rnr_code);
    }
}

static void uct_remapring_verbs_reject(struct rdma_cm_id *id,
                                       ucs_status_t status)
{
    uct_remapring_verbs_rej_t rej = {UCT_REMAPRING_VERBS_MAGIC, status};

    rdma_reject(id, &rej, sizeof(rej));
    rdma_destroy_id(id);
}

/* A sender asks for a ring */

/* The mode of a connection asked for by @a id: the interface's, but
 * pinned where the interface is in odp mode on a device that places each
 * ODP packet at the start of a page (rxe) and the connection's path MTU,
 * which the sender's side set, is shorter than a page: such a device would
 * put the packets of one record's page on top of each other */
static int uct_remapring_rx_vconn_pinned(uct_remapring_verbs_iface_t *verbs,
                                         struct rdma_cm_id *id,
                                         const char *name)
{
    size_t page = ucs_get_page_size();
    size_t mtu;

    if (verbs->mode == UCT_REMAPRING_VERBS_MODE_PINNED) {
        return 1;
    }

    if (verbs->dev->odp_rec_align <= REMAPRING_RING_ALIGN) {
        return 0; /* the device places ODP writes where they are sent */
    }

    /* IB's code: 1 for 256 bytes ... 5 for 4096 */
    mtu = ((id->route.num_paths > 0) && (id->route.path_rec[0].mtu >= 1) &&
           (id->route.path_rec[0].mtu <= 5)) ?
                  ((size_t)128 << id->route.path_rec[0].mtu) :
                  0;
    if (mtu >= page) {
        return 0;
    }

    if (mtu == 0) {
        ucs_diag("connection from %s: its path MTU is not known, and %s"
                 " places ODP packets at page starts: pinned mode for it",
                 name, verbs->dev->name);
    } else {
        ucs_diag("connection from %s: path MTU %zu bytes, under a page, and"
                 " %s places ODP packets at page starts: pinned mode for it",
                 name, mtu, verbs->dev->name);
    }
    return 1;
}

static void uct_remapring_verbs_accept(uct_remapring_iface_t *iface,
                                       struct rdma_cm_id *id, const void *data,
                                       size_t length)
{
    uct_remapring_verbs_iface_t *verbs = uct_remapring_verbs(iface);
    uct_remapring_verbs_req_t req;
    uct_remapring_verbs_rep_t rep     = {};
    struct rdma_conn_param param      = {};
    int pinned;
    remapring_ring_params_t params;
    remapring_ring_info_t info;
    uct_remapring_vconn_t *vconn;
    char name[64];
    ucs_status_t status;

    ucs_sockaddr_str(rdma_get_peer_addr(id), name, sizeof(name));
    if (length < sizeof(req)) {
        ucs_error("connection request from %s of %zu bytes", name, length);
        uct_remapring_verbs_reject(id, UCS_ERR_INVALID_PARAM);
        return;
    }

    memcpy(&req, data, sizeof(req));
    if ((req.magic != UCT_REMAPRING_VERBS_MAGIC) ||
        (req.version != UCT_REMAPRING_VERBS_VERSION)) {
        ucs_error("connection request from %s is not of this"
                  " version (magic 0x%x version %u)",
                  name, req.magic, req.version);
        uct_remapring_verbs_reject(id, UCS_ERR_UNSUPPORTED);
        return;
    }

    if (req.iface_id != iface->id) {
        ucs_diag("connection request from %s for interface"
                 " 0x%" PRIx64 ", not this one",
                 name, req.iface_id);
        uct_remapring_verbs_reject(id, UCS_ERR_UNREACHABLE);
        return;
    }

    if (req.max_payload > iface->rx.max_payload) {
        ucs_error("%s sends up to %u bytes, the rings here take"
                  " %zu (UCX_REMAPRING_BLOCK_SIZE)",
                  name, req.max_payload, iface->rx.max_payload);
        uct_remapring_verbs_reject(id, UCS_ERR_UNREACHABLE);
        return;
    }

    pinned = uct_remapring_rx_vconn_pinned(verbs, id, name);
    if (pinned && (req.reserved < iface->rx.nslots)) {
        ucs_error("%s has a slot table of %u, the rings here have"
                  " %u slots (UCX_REMAPRING_RING_SLOTS)",
                  name, req.reserved, iface->rx.nslots);
        uct_remapring_verbs_reject(id, UCS_ERR_UNREACHABLE);
        return;
    }

    if (verbs->nrx >= verbs->max_conns) {
        ucs_error("connection request from %s refused: %s:%u has %u"
                  " connections (UCX_REMAPRDMA_MAX_CONNS)",
                  name, verbs->dev->name, verbs->port_num, verbs->nrx);
        uct_remapring_verbs_reject(id, UCS_ERR_EXCEEDS_LIMIT);
        return;
    }

    /* the ring's control words are cache line aligned */
    if (ucs_posix_memalign((void**)&vconn, UCS_SYS_CACHE_LINE_SIZE,
                           sizeof(*vconn), "uct_remapring_vconn_t") != 0) {
        ucs_error("failed to allocate a connection");
        uct_remapring_verbs_reject(id, UCS_ERR_NO_MEMORY);
        return;
    }

    memset(vconn, 0, sizeof(*vconn));

    vconn->iface             = iface;
    vconn->is_rx             = 1;
    vconn->state             = UCT_REMAPRING_VCONN_CONNECTING;
    vconn->id                = id;
    vconn->remote_table      = req.table_addr;
    vconn->remote_table_rkey = req.table_rkey;
    vconn->pinned            = pinned;
    vconn->imm_window        = uct_remapring_verbs_imm_window(
            verbs->imm_window, verbs->srq_max, verbs->srq_need);
    vconn->quiet_since       = ucs_get_time();
    id->context              = vconn;
    ucs_strncpy_zero(vconn->name, name, sizeof(vconn->name));
    ucs_list_add_tail(&verbs->rx_conns, &vconn->list);
    ++verbs->nrx;

    vconn->slots = ucs_calloc(iface->rx.nslots, sizeof(*vconn->slots),
                              "remapring_verbs_slots");
    vconn->credit_table = ucs_calloc(iface->rx.nslots,
                                     sizeof(*vconn->credit_table),
                                     "remapring_verbs_credit_table");
    if (pinned) {
        vconn->slot_mrs = ucs_calloc(iface->rx.nslots,
                                     sizeof(*vconn->slot_mrs),
                                     "remapring_verbs_slot_mrs");
    }
    if ((vconn->slots == NULL) || (vconn->credit_table == NULL) ||
        (pinned && (vconn->slot_mrs == NULL))) {
        ucs_error("failed to allocate the slot tables of %s", name);
        status = UCS_ERR_NO_MEMORY;
        goto err;
    }

    uct_remapring_iface_ring_params(iface, &params);
    /* a device may place the bytes of one write in any order */
    params.commit       = REMAPRING_RING_COMMIT_TAIL;
    params.shared_slots = vconn->slots;
    /* odp: the device follows the view; pinned: the sender the table */
    params.remap_view   = !pinned;
    /* a device that misplaces ODP writes inside a page gets whole pages */
    params.rec_align    = !pinned ?
                                  verbs->dev->odp_rec_align :
                                  REMAPRING_RING_ALIGN;
    params.on_publish   = uct_remapring_rx_vconn_published;
    params.publish_arg  = vconn;
    params.on_detach    = pinned ?
                                  uct_remapring_rx_vconn_detached :
                                  NULL;
    params.name         = vconn->name;
    status = remapring_ring_create(iface->rx.pool, &params, &vconn->ctl,
                                   &vconn->ring);
    if (status != UCS_OK) {
        if (status == UCS_ERR_NO_RESOURCE) {
            ucs_error("no room for the ring of %s in the pool"
                      " (UCX_REMAPRING_POOL_MAX)",
                      name);
        }
        goto err;
    }

    remapring_ring_get_info(vconn->ring, &info);
    if (!pinned) {
        vconn->view_mr = ibv_reg_mr(verbs->dev->pd, (void*)info.view_addr,
                                    (size_t)info.block_size * info.nslots,
                                    IBV_ACCESS_LOCAL_WRITE |
                                    IBV_ACCESS_REMOTE_WRITE |
                                    IBV_ACCESS_ON_DEMAND);
        if (vconn->view_mr == NULL) {
            ucs_error("ODP registration of the ring view of %s"
                      " failed: %m",
                      name);
            status = UCS_ERR_IO_ERROR;
            goto err;
        }

        /* the window the sender may write first, before it may */
        uct_remapring_vconn_prefetch(vconn, vconn->ring->limit);
    }

    vconn->credit_table_mr = ibv_reg_mr(verbs->dev->pd, vconn->credit_table,
                                        iface->rx.nslots *
                                        sizeof(*vconn->credit_table),
                                        IBV_ACCESS_LOCAL_WRITE);
    if (vconn->credit_table_mr == NULL) {
        ucs_error("registration of a slot table failed: %m");
        status = UCS_ERR_IO_ERROR;
        goto err;
    }

    status = uct_remapring_vconn_create_qp(vconn);
    if (status != UCS_OK) {
        goto err;
    }

    rep.magic        = UCT_REMAPRING_VERBS_MAGIC;
    rep.version      = UCT_REMAPRING_VERBS_VERSION;
    rep.mode         = pinned ? UCT_REMAPRING_VERBS_MODE_PINNED :
                                UCT_REMAPRING_VERBS_MODE_ODP;
    rep.view_addr    = info.view_addr;
    rep.view_rkey    = (vconn->view_mr != NULL) ? vconn->view_mr->rkey : 0;
    rep.nonce        = info.nonce;
    rep.block_size   = info.block_size;
    rep.nslots       = info.nslots;
    rep.reserve      = info.reserve;
    rep.inline_max   = info.inline_max;
    rep.align        = info.align;
    rep.align_offset = info.align_offset;
    rep.rec_align    = info.rec_align;
    rep.imm_window   = vconn->imm_window;

    param.private_data        = &rep;
    param.private_data_len    = sizeof(rep);
    param.responder_resources = verbs->dev->max_rd_atomic;
    param.initiator_depth     = verbs->dev->max_rd_atomic;
    param.retry_count         = 7;
    param.rnr_retry_count     = 7;
    if (rdma_accept(id, &param) != 0) {
        ucs_error("rdma_accept of %s failed: %m", name);
        status = UCS_ERR_IO_ERROR;
        goto err;
    }

    uct_remapring_vconn_rnr_timer(vconn); /* rdma_accept made it RTS */

    uct_remapring_md_set_in_use(iface->super.md);
    ucs_debug("accepted %s, %s ring view %p", name,
              uct_remapring_verbs_mode_str(rep.mode),
              (void *)info.view_addr);
    return;

err:
    /* the request is refused, the id goes with it */
    if (vconn->qp != NULL) {
        uct_remapring_verbs_rej_t rej = {UCT_REMAPRING_VERBS_MAGIC, status};

        rdma_reject(id, &rej, sizeof(rej));
        uct_remapring_rx_vconn_free(vconn);
        return;
    }

    vconn->id = NULL;
    uct_remapring_rx_vconn_free(vconn);
    uct_remapring_verbs_reject(id, status);
}


/* -------------------------------------------------------------- sending */

static void uct_remapring_tx_vconn_fail(uct_remapring_vconn_t *vconn,
                                        ucs_status_t status,
                                        const char *reason)
{
    vconn->state = UCT_REMAPRING_VCONN_CLOSED;
    uct_remapring_peer_failed(vconn->peer, status, reason);
}

/* The receiver's ring went quiet: keep below the end of the slots from the
 * one of our tail on, @a keep of them, until its next credit, and say so
 * with our tail (IMM_YIELD; held like a tail while its immediates are all
 * in flight). Answered even where the limit is below that already: the
 * receiver's credits wait for it. The staging goes back to its first size */
static void uct_remapring_tx_vconn_quiet(uct_remapring_vconn_t *vconn,
                                         uint32_t keep)
{
    uct_remapring_peer_t *peer = vconn->peer;
    uint64_t bound;

    if ((keep == 0) || (keep > vconn->rep.nslots)) {
        ucs_error("%s asked to keep to %u slots of %u", vconn->name, keep,
                  vconn->rep.nslots);
        uct_remapring_tx_vconn_fail(vconn, UCS_ERR_IO_ERROR,
                                    "it sent a bad request");
        return;
    }

    bound = (vconn->tail & ~(((uint64_t)1 << vconn->block_shift) - 1)) +
            ((uint64_t)keep << vconn->block_shift);
    vconn->limit = ucs_min(vconn->limit, bound);
    if (peer->wire != NULL) {
        peer->writer.limit = ucs_min(peer->writer.limit, bound);
    }
    vconn->yield_held = 1;
    uct_remapring_tx_vconn_release_tail(vconn);
    ucs_debug("%s asked to keep to %u slots: tail %" PRIu64 ", limit %" PRIu64
              ", answer %s (%u immediates unacknowledged, %u send requests)",
              vconn->name, keep, vconn->tail, vconn->limit,
              vconn->yield_held ? "held" : "sent",
              (vconn->imm_posted - vconn->imm_acked) &
                      UCT_REMAPRING_VERBS_IMM_MASK,
              vconn->sq_avail);
    vconn->staging_shrink = 1;
    uct_remapring_vconn_staging_trim(vconn);
}

/* The receiver's credit, its limit in slots, or its acknowledgement of our
 * immediates, which sends a held tail, or its request to keep to less */
static void uct_remapring_tx_vconn_credit(uct_remapring_vconn_t *vconn,
                                          uint32_t imm)
{
    uint64_t slots = vconn->limit >> vconn->block_shift;
    uint32_t delta;

    if (imm & UCT_REMAPRING_VERBS_IMM_ACK) {
        delta = (imm - vconn->imm_acked) & UCT_REMAPRING_VERBS_IMM_MASK;
        if ((delta == 0) ||
            (delta > ((vconn->imm_posted - vconn->imm_acked) &
                      UCT_REMAPRING_VERBS_IMM_MASK))) {
            return; /* an old one, or more than we sent */
        }

        vconn->imm_acked = imm & UCT_REMAPRING_VERBS_IMM_MASK;
        uct_remapring_tx_vconn_release_tail(vconn);
    } else if (imm & UCT_REMAPRING_VERBS_IMM_QUIET) {
        uct_remapring_tx_vconn_quiet(vconn,
                                     imm & UCT_REMAPRING_VERBS_IMM_LIMIT_MASK);
        return;
    } else {
        delta = (imm - (uint32_t)slots) & UCT_REMAPRING_VERBS_IMM_LIMIT_MASK;
        if (delta > (UCT_REMAPRING_VERBS_IMM_LIMIT_MASK >> 1)) {
            return; /* an old one */
        }

        vconn->limit     += (uint64_t)delta << vconn->block_shift;
        vconn->stall_sent = 0;
        vconn->stall_held = 0;
    }

    if (vconn->peer->backlog != NULL) {
        (void)uct_remapring_peer_replay(vconn->peer);
    }
}

/* The reply came: the ring exists, the wire can write */
static void uct_remapring_tx_vconn_established(uct_remapring_vconn_t *vconn,
                                               const void *data, size_t length)
{
    uct_remapring_peer_t *peer = vconn->peer;
    remapring_ring_info_t info;
    uct_remapring_verbs_rep_t rep;
    uct_remapring_vwire_t *wire;
    ucs_status_t status;

    if (length < sizeof(rep)) {
        ucs_error("reply of %s has %zu bytes", vconn->name, length);
        uct_remapring_tx_vconn_fail(vconn, UCS_ERR_INVALID_PARAM,
                                    "its reply is not valid");
        return;
    }

    uct_remapring_vconn_rnr_timer(vconn); /* RTS before the event */
    memcpy(&rep, data, sizeof(rep));
    if ((rep.magic != UCT_REMAPRING_VERBS_MAGIC) ||
        (rep.version != UCT_REMAPRING_VERBS_VERSION) ||
        ((rep.mode != UCT_REMAPRING_VERBS_MODE_ODP) &&
         (rep.mode != UCT_REMAPRING_VERBS_MODE_PINNED)) ||
        ((rep.mode == UCT_REMAPRING_VERBS_MODE_PINNED) &&
         (rep.nslots > vconn->iface->rx.nslots)) ||
        (rep.imm_window < UCT_REMAPRING_VERBS_IMM_WINDOW_MIN) ||
        (rep.imm_window > UCT_REMAPRING_VERBS_IMM_WINDOW_MAX)) {
        ucs_error("reply of %s is not valid (magic 0x%x version"
                  " %u mode %u slots %u window %u)",
                  vconn->name, rep.magic, rep.version, rep.mode, rep.nslots,
                  rep.imm_window);
        uct_remapring_tx_vconn_fail(vconn, UCS_ERR_INVALID_PARAM,
                                    "its reply is not valid");
        return;
    }

    info.magic        = REMAPRING_RING_CTL_MAGIC;
    info.view_addr    = rep.view_addr;
    info.nonce        = rep.nonce;
    info.block_size   = rep.block_size;
    info.nslots       = rep.nslots;
    info.reserve      = rep.reserve;
    info.inline_max   = rep.inline_max;
    info.align        = rep.align;
    info.align_offset = rep.align_offset;
    info.commit       = REMAPRING_RING_COMMIT_TAIL;
    info.rec_align    = rep.rec_align;

    wire = ucs_calloc(1, sizeof(*wire), "uct_remapring_vwire_t");
    if (wire == NULL) {
        uct_remapring_tx_vconn_fail(vconn, UCS_ERR_NO_MEMORY,
                                    "no memory for its wire");
        return;
    }

    wire->super.ops         = &uct_remapring_vwire_ops;
    wire->super.window_size = (size_t)rep.block_size * rep.nslots;
    wire->super.can_stamp   = 0;
    wire->vconn             = vconn;
    status = remapring_ring_writer_init(&peer->writer, &info, &wire->super);
    if (status != UCS_OK) {
        ucs_free(wire);
        uct_remapring_tx_vconn_fail(vconn, status, "its ring is not valid");
        return;
    }

    vconn->rep         = rep;
    vconn->pinned      = (rep.mode == UCT_REMAPRING_VERBS_MODE_PINNED);
    vconn->view_addr   = rep.view_addr;
    vconn->view_rkey   = rep.view_rkey;
    vconn->block_shift = ucs_ilog2(rep.block_size);
    vconn->state       = UCT_REMAPRING_VCONN_READY;
    peer->wire         = &wire->super;
    ucs_debug("connected to %s, %s mode, %u slots of %u bytes", vconn->name,
              uct_remapring_verbs_mode_str(rep.mode), rep.nslots,
              rep.block_size);
    if (peer->backlog != NULL) {
        (void)uct_remapring_peer_replay(peer); /* the rest with credit */
    }
}

/* The route is known: make the QP and ask */
static void uct_remapring_tx_vconn_connect(uct_remapring_vconn_t *vconn)
{
    uct_remapring_iface_t *iface       = vconn->iface;
    uct_remapring_verbs_iface_t *verbs = uct_remapring_verbs(iface);
    uct_remapring_verbs_req_t req      = {};
    struct rdma_conn_param param       = {};

    if (uct_remapring_vconn_create_qp(vconn) != UCS_OK) {
        uct_remapring_tx_vconn_fail(vconn, UCS_ERR_IO_ERROR,
                                    "no QP could be made for it");
        return;
    }

    req.magic       = UCT_REMAPRING_VERBS_MAGIC;
    req.version     = UCT_REMAPRING_VERBS_VERSION;
    req.reserved    = iface->rx.nslots; /* entries of our slot table */
    req.iface_id    = uct_remapring_verbs_peer(vconn->peer)->iface_id;
    req.sender_id   = iface->id;
    req.table_addr  = (uintptr_t)vconn->table;
    req.table_rkey  = vconn->table_mr->rkey;
    req.max_payload = iface->tx.max_bcopy;

    param.private_data        = &req;
    param.private_data_len    = sizeof(req);
    param.responder_resources = verbs->dev->max_rd_atomic;
    param.initiator_depth     = verbs->dev->max_rd_atomic;
    param.retry_count         = 7;
    param.rnr_retry_count     = 7;
    if (rdma_connect(vconn->id, &param) != 0) {
        ucs_error("rdma_connect to %s failed: %m", vconn->name);
        uct_remapring_tx_vconn_fail(vconn, UCS_ERR_UNREACHABLE,
                                    "the connection could not be requested");
        return;
    }

    vconn->state = UCT_REMAPRING_VCONN_CONNECTING;
}

static void uct_remapring_verbs_peer_destroy(uct_remapring_peer_t *peer);

/* Whether the addresses are of a verbs interface that takes what we send;
 * logs why not */
static ucs_status_t
uct_remapring_verbs_check_addr(uct_remapring_iface_t *iface,
                               const uct_remapring_verbs_dev_addr_t *dev,
                               const uct_remapring_verbs_iface_addr_t *addr)
{
    if ((dev == NULL) || (addr == NULL) ||
        (dev->magic != UCT_REMAPRING_VERBS_MAGIC) ||
        (addr->magic != UCT_REMAPRING_VERBS_ADDR_MAGIC) ||
        (addr->version != UCT_REMAPRING_VERBS_VERSION) ||
        ((dev->family != AF_INET) && (dev->family != AF_INET6))) {
        ucs_error("not an address of a verbs interface (magic 0x%x/0x%x"
                  " version %u family %u)",
                  (dev != NULL) ? dev->magic : 0,
                  (addr != NULL) ? addr->magic : 0,
                  (addr != NULL) ? addr->version : 0,
                  (dev != NULL) ? dev->family : 0);
        return UCS_ERR_INVALID_ADDR;
    }

    return uct_remapring_iface_check_peer(iface, addr->max_payload,
                                          "the receiver", UCS_LOG_LEVEL_ERROR);
}

/* The receiving interface the addresses name, as a key of our peers */
/* The IP address a device address carries (its family already checked) */
static void
uct_remapring_verbs_dev_sockaddr(const uct_remapring_verbs_dev_addr_t *dev,
                                 struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof(*ss));
    ss->ss_family = dev->family;
    ucs_sockaddr_set_inet_addr((struct sockaddr*)ss, dev->ip);
}

static ucs_status_t uct_remapring_verbs_peer_key(uct_remapring_iface_t *iface,
                                                 const uct_ep_params_t *params,
                                                 uint64_t *key_p)
{
    const uct_remapring_verbs_iface_addr_t *addr = (const void *)
                                                           params->iface_addr;
    ucs_status_t status;

    status = uct_remapring_verbs_check_addr(iface,
                                            (const void *)params->dev_addr,
                                            addr);
    if (status != UCS_OK) {
        return status;
    }

    *key_p = addr->iface_id;
    return UCS_OK;
}

/* A new connection: resolve the receiver's address, then (on the CM's
 * events) its route, connect, and take the ring its reply describes */
static ucs_status_t
uct_remapring_verbs_peer_create(uct_remapring_iface_t *iface,
                                const uct_ep_params_t *params,
                                uct_remapring_peer_t **peer_p)
{
    const uct_remapring_verbs_dev_addr_t *dev = (const void *)params->dev_addr;
    const uct_remapring_verbs_iface_addr_t *addr = (const void *)
                                                           params->iface_addr;
    uct_remapring_verbs_iface_t *verbs = uct_remapring_verbs(iface);
    struct sockaddr_storage dst;
    struct sockaddr_storage src        = verbs->addr;
    uct_remapring_vconn_t *vconn;
    uint8_t timeout;
    uct_remapring_verbs_peer_t *vpeer;
    uct_remapring_peer_t *peer;
    ucs_status_t status;

    uct_remapring_verbs_dev_sockaddr(dev, &dst);
    ucs_sockaddr_set_port((struct sockaddr*)&dst, ntohs(addr->port));
    ucs_sockaddr_set_port((struct sockaddr*)&src, 0);

    vpeer = ucs_calloc(1, sizeof(*vpeer), "uct_remapring_verbs_peer_t");
    vconn = ucs_calloc(1, sizeof(*vconn), "uct_remapring_vconn_t");
    if ((vpeer == NULL) || (vconn == NULL)) {
        ucs_error("failed to allocate a connection");
        ucs_free(vconn);
        ucs_free(vpeer);
        return UCS_ERR_NO_MEMORY;
    }

    peer = &vpeer->super;
    uct_remapring_peer_init(peer, iface, "?");
    peer->early = 1; /* sends are kept until the reply gives the ring */

    vconn->iface        = iface;
    vconn->peer         = peer;
    vconn->state        = UCT_REMAPRING_VCONN_RESOLVING;
    ucs_sockaddr_str((struct sockaddr *)&dst, vconn->name, sizeof(vconn->name));
    ucs_strncpy_zero(peer->name, vconn->name, sizeof(peer->name));
    vpeer->vconn    = vconn;
    vpeer->iface_id = addr->iface_id;

    /* the least staging: it grows with what is in flight */
    status = uct_remapring_vconn_staging_resize(vconn, verbs->staging_min);
    if (status != UCS_OK) {
        goto err;
    }

    vconn->table = ucs_calloc(iface->rx.nslots, sizeof(*vconn->table),
                              "remapring_verbs_table");
    if (vconn->table == NULL) {
        ucs_error("failed to allocate a slot table");
        status = UCS_ERR_NO_MEMORY;
        goto err;
    }

    vconn->table_mr   = ibv_reg_mr(verbs->dev->pd, vconn->table,
                                   iface->rx.nslots * sizeof(*vconn->table),
                                   IBV_ACCESS_LOCAL_WRITE |
                                   IBV_ACCESS_REMOTE_WRITE);
    if (vconn->table_mr == NULL) {
        ucs_error("registration of the slot table for %s failed: %m",
                  vconn->name);
        status = UCS_ERR_IO_ERROR;
        goto err;
    }

    if (rdma_create_id(verbs->channel, &vconn->id, vconn, RDMA_PS_TCP) != 0) {
        ucs_error("rdma_create_id failed: %m");
        status = UCS_ERR_IO_ERROR;
        goto err;
    }

    timeout = verbs->timeout;
    if (rdma_set_option(vconn->id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT,
                        &timeout, sizeof(timeout)) != 0) {
        ucs_diag("setting the ACK timeout of %s failed: %m", vconn->name);
    }

    if (rdma_resolve_addr(vconn->id, (struct sockaddr*)&src,
                          (struct sockaddr*)&dst,
                          UCT_REMAPRING_VERBS_RESOLVE_MS) != 0) {
        ucs_error("rdma_resolve_addr(%s) failed: %m", vconn->name);
        status = UCS_ERR_UNREACHABLE;
        goto err;
    }

    uct_remapring_md_set_in_use(iface->super.md);
    ucs_debug("connecting to %s", vconn->name);
    *peer_p = peer;
    return UCS_OK;

err:
    uct_remapring_verbs_peer_destroy(peer);
    return status;
}

static void uct_remapring_verbs_peer_destroy(uct_remapring_peer_t *peer)
{
    uct_remapring_vconn_t *vconn = uct_remapring_verbs_peer(peer)->vconn;

    uct_remapring_peer_cleanup(peer);

    /* the receiver sees DISCONNECTED and frees its ring */
    if ((vconn->id != NULL) && (vconn->qp != NULL) &&
        (vconn->state != UCT_REMAPRING_VCONN_CLOSED)) {
        rdma_disconnect(vconn->id);
    }

    if (vconn->qp != NULL) {
        rdma_destroy_qp(vconn->id);
        vconn->qp = NULL;
    }
    uct_remapring_vconn_dereg(&vconn->staging_mr);
    uct_remapring_vconn_dereg(&vconn->table_mr);
    if (vconn->staging != NULL) {
        munmap(vconn->staging, vconn->staging_size);
    }
    ucs_free(vconn->table);
    vconn->peer = NULL;
    uct_remapring_vconn_release(vconn);
    ucs_free(uct_remapring_verbs_peer(peer));
}

/* The wire comes with the connection's ESTABLISHED event */
static ucs_status_t uct_remapring_verbs_peer_connect(uct_remapring_peer_t *peer)
{
    return UCS_ERR_NO_RESOURCE;
}

/* A verbs peer hears of failures from its completions and CM */
static ucs_status_t uct_remapring_verbs_peer_stalled(uct_remapring_peer_t *peer)
{
    return (peer->status != UCS_OK) ? peer->status : UCS_ERR_NO_RESOURCE;
}


/* ------------------------------------------------------- the CQ and CM */

static void uct_remapring_verbs_post_recvs(uct_remapring_verbs_iface_t *verbs)
{
    struct ibv_recv_wr wrs[64], *bad_wr;
    unsigned i, n;
    int ret;

    while (verbs->srq_posted < verbs->srq_size) {
        n = ucs_min(verbs->srq_size - verbs->srq_posted,
                    ucs_static_array_size(wrs));
        for (i = 0; i < n; ++i) {
            wrs[i].wr_id   = UCT_REMAPRING_VERBS_WR_RECV;
            wrs[i].sg_list = NULL;
            wrs[i].num_sge = 0;
            wrs[i].next    = (i + 1 < n) ? &wrs[i + 1] : NULL;
        }

        ret = ibv_post_srq_recv(verbs->srq, wrs, &bad_wr);
        if (ret != 0) {
            ucs_error("ibv_post_srq_recv failed: %s", strerror(ret));
            return;
        }
        verbs->srq_posted += n;
    }
}

static void uct_remapring_verbs_cqe_error(uct_remapring_vconn_t *vconn,
                                          const struct ibv_wc *wc)
{
    ucs_status_t status = (wc->status == IBV_WC_RETRY_EXC_ERR) ?
                          UCS_ERR_ENDPOINT_TIMEOUT : UCS_ERR_CONNECTION_RESET;

    /* what every operation of a failed peer completes with
     * (remapring_ep.h), the one in flight too */
    if (wc->wr_id != UCT_REMAPRING_VERBS_WR_NONE) {
        uct_remapring_vconn_op_done(vconn, wc->wr_id,
                                    UCS_ERR_ENDPOINT_TIMEOUT);
    }

    /* once: the requests after the first are flushed */
    if ((vconn->state == UCT_REMAPRING_VCONN_CLOSED) || vconn->failed) {
        return;
    }

    if (vconn->is_rx) {
        ucs_diag("connection from %s: %s", vconn->name,
                 ibv_wc_status_str(wc->status));
        uct_remapring_rx_vconn_fail(vconn, NULL);
        vconn->state = UCT_REMAPRING_VCONN_CLOSED;
        uct_remapring_rx_vconn_set_active(vconn); /* drain, then free */
    } else {
        ucs_diag("connection to %s: %s", vconn->name,
                 ibv_wc_status_str(wc->status));
        vconn->failed = 1;
        uct_remapring_tx_vconn_fail(vconn, status,
                                    (wc->status == IBV_WC_RETRY_EXC_ERR) ?
                                    "the receiver does not answer" :
                                    "a request to the receiver failed");
    }
}

static void uct_remapring_verbs_poll_cq(uct_remapring_iface_t *iface)
{
    uct_remapring_verbs_iface_t *verbs = uct_remapring_verbs(iface);
    struct ibv_wc wc[UCT_REMAPRING_VERBS_POLL_BATCH];
    uct_remapring_vconn_t *vconn;
    khiter_t iter;
    int i, n;

    do {
        n = ibv_poll_cq(verbs->cq, UCT_REMAPRING_VERBS_POLL_BATCH, wc);
        if (n < 0) {
            ucs_error("ibv_poll_cq(%s) failed", verbs->dev->name);
            return;
        }

        for (i = 0; i < n; ++i) {
            if (wc[i].wr_id == UCT_REMAPRING_VERBS_WR_RECV) {
                --verbs->srq_posted;
            }

            iter = kh_get(uct_remapring_vconns, &verbs->qps, wc[i].qp_num);
            if (iter == kh_end(&verbs->qps)) {
                continue; /* of a QP that is gone */
            }

            vconn = kh_val(&verbs->qps, iter);
            if (ucs_unlikely(vconn->zombie)) {
                continue;
            } else if (ucs_unlikely(wc[i].status != IBV_WC_SUCCESS)) {
                uct_remapring_verbs_cqe_error(vconn, &wc[i]);
            } else if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
                if (vconn->is_rx) {
                    uct_remapring_rx_vconn_imm(vconn, ntohl(wc[i].imm_data));
                } else {
                    uct_remapring_tx_vconn_credit(vconn,
                                                  ntohl(wc[i].imm_data));
                }
            } else if (wc[i].opcode == IBV_WC_RECV) {
                ucs_diag("%s sent a message, not a write", vconn->name);
            } else {
                uct_remapring_vconn_op_done(vconn, wc[i].wr_id, UCS_OK);
                if (vconn->is_rx && (vconn->ring != NULL) &&
                    (vconn->state == UCT_REMAPRING_VCONN_READY)) {
                    /* a credit or an acknowledgement that found the queue
                     * full */
                    uct_remapring_rx_vconn_credit(vconn);
                    uct_remapring_rx_vconn_ack(vconn);
                }
            }
        }

        /* after each batch, not only after the last: an acknowledgement
         * sent from this batch lets a sender write half a window more
         * while we may still be taking the completions of a long pause
         * (the taken requests stay below the refill and a batch, within
         * the two refills srq_need keeps for them) */
        if (verbs->srq_posted + UCT_REMAPRING_VERBS_SRQ_REFILL <=
            verbs->srq_size) {
            uct_remapring_verbs_post_recvs(verbs);
        }
    } while (n == UCT_REMAPRING_VERBS_POLL_BATCH);

    if (ucs_unlikely(!ucs_list_is_empty(&verbs->zombies))) {
        uct_remapring_verbs_reap(verbs);
    }
}

static void uct_remapring_verbs_cm_event(uct_remapring_iface_t *iface,
                                         struct rdma_cm_event *event)
{
    uct_remapring_verbs_iface_t *verbs = uct_remapring_verbs(iface);
    uct_remapring_vconn_t *vconn       = event->id->context;
    const uct_remapring_verbs_rej_t *rej;
    char data[256];
    size_t length;
    int type = event->event, ev_status = event->status;
    struct rdma_cm_id *id = event->id;

    length = ucs_min(event->param.conn.private_data_len, sizeof(data));
    if (event->param.conn.private_data != NULL) {
        memcpy(data, event->param.conn.private_data, length);
    } else {
        length = 0;
    }

    /* acked before anything may destroy the id */
    rdma_ack_cm_event(event);

    if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
        uct_remapring_verbs_accept(iface, id, data, length);
        return;
    }

    if ((vconn == NULL) || (id == verbs->listen_id)) {
        ucs_debug("%s on the listener of %s", rdma_event_str(type),
                  verbs->dev->name);
        return;
    }

    ucs_debug("%s %s %s (status %d)", rdma_event_str(type),
              vconn->is_rx ? "from" : "to", vconn->name, ev_status);
    if (vconn->is_rx) {
        switch (type) {
        case RDMA_CM_EVENT_ESTABLISHED:
            vconn->state = UCT_REMAPRING_VCONN_READY;
            uct_remapring_vconn_send_credit(vconn);
            break;
        case RDMA_CM_EVENT_DISCONNECTED:
        case RDMA_CM_EVENT_DEVICE_REMOVAL:
        case RDMA_CM_EVENT_CONNECT_ERROR:
        case RDMA_CM_EVENT_UNREACHABLE:
            /* what arrived is delivered, then the ring goes */
            if (vconn->state != UCT_REMAPRING_VCONN_CLOSED) {
                vconn->state = UCT_REMAPRING_VCONN_CLOSED;
                if (type == RDMA_CM_EVENT_DISCONNECTED) {
                    rdma_disconnect(id);
                }
            }
            if (vconn->failed) {
                uct_remapring_rx_vconn_free(vconn);
            } else {
                uct_remapring_rx_vconn_set_active(vconn);
            }
            break;
        default:
            break;
        }
        return;
    }

    switch (type) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
        if (rdma_resolve_route(id, UCT_REMAPRING_VERBS_RESOLVE_MS) != 0) {
            ucs_error("rdma_resolve_route(%s) failed: %m", vconn->name);
            uct_remapring_tx_vconn_fail(vconn, UCS_ERR_UNREACHABLE,
                                        "no route to it");
        }
        break;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
        uct_remapring_tx_vconn_connect(vconn);
        break;
    case RDMA_CM_EVENT_ESTABLISHED:
        uct_remapring_tx_vconn_established(vconn, data, length);
        break;
    case RDMA_CM_EVENT_REJECTED:
        rej = (const void*)data;
        if ((length >= sizeof(*rej)) &&
            (rej->magic == UCT_REMAPRING_VERBS_MAGIC)) {
            ucs_diag("%s refused the connection: %s", vconn->name,
                     ucs_status_string(rej->status));
            uct_remapring_tx_vconn_fail(vconn, UCS_ERR_REJECTED,
                                        (rej->status == UCS_ERR_NO_RESOURCE) ?
                                        "no room for a ring in its pool" :
                                        "it refused the connection");
        } else {
            uct_remapring_tx_vconn_fail(vconn, UCS_ERR_UNREACHABLE,
                                        "nothing listens at its address");
        }
        break;
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_CONNECT_ERROR:
        uct_remapring_tx_vconn_fail(vconn, UCS_ERR_UNREACHABLE,
                                    "its address cannot be reached");
        break;
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
        if (type == RDMA_CM_EVENT_DISCONNECTED) {
            rdma_disconnect(id);
        }
        uct_remapring_tx_vconn_fail(vconn, UCS_ERR_CONNECTION_RESET,
                                    "the receiver disconnected");
        break;
    default:
        break;
    }
}

static void uct_remapring_verbs_poll_cm(uct_remapring_iface_t *iface)
{
    uct_remapring_verbs_iface_t *verbs = uct_remapring_verbs(iface);
    struct rdma_cm_event *event;

    verbs->cm_calls = 0;
    while (rdma_get_cm_event(verbs->channel, &event) == 0) {
        uct_remapring_verbs_cm_event(iface, event);
    }

    if (errno != EAGAIN) {
        ucs_debug("rdma_get_cm_event failed: %m");
    }
}

static unsigned uct_remapring_verbs_iface_progress(uct_iface_h tl_iface)
{
    uct_remapring_iface_t *iface = ucs_derived_of(tl_iface,
                                                  uct_remapring_iface_t);
    uct_remapring_verbs_iface_t *verbs = uct_remapring_verbs(iface);
    uct_remapring_vconn_t *vconn, *tmp;
    unsigned count = 0;

    uct_remapring_verbs_poll_cq(iface);
    ucs_list_for_each_safe(vconn, tmp, &verbs->rx_active, active_list) {
        count += uct_remapring_rx_vconn_poll(vconn);
    }

    count += uct_remapring_ep_progress_pending(iface);
    if (ucs_unlikely(++verbs->cm_calls >= UCT_REMAPRING_VERBS_CM_PERIOD)) {
        uct_remapring_verbs_poll_cm(iface);
        uct_remapring_verbs_quiet_check(verbs);
        if (++verbs->check_calls >= UCT_REMAPRING_VERBS_MAINTAIN_PERIOD) {
            verbs->check_calls = 0;
            uct_remapring_iface_maintain(iface);
        }
    }

    return count;
}


/* ------------------------------------------------------------ endpoints */

static inline uct_remapring_ep_t *uct_remapring_verbs_ep(uct_ep_h tl_ep)
{
    return ucs_derived_of(tl_ep, uct_remapring_ep_t);
}

/* A record is published: the write-with-immediate that carries its tail is
 * the receiver's doorbell already */
static UCS_F_ALWAYS_INLINE void
uct_remapring_verbs_published(uct_remapring_peer_t *peer)
{
}

static ucs_status_t
uct_remapring_verbs_ep_am_short(uct_ep_h tl_ep, uint8_t id, uint64_t header,
                                const void *payload, unsigned length)
{
    return uct_remapring_ep_am_short_inl(tl_ep, id, header, payload, length,
                                         uct_remapring_verbs_published);
}

static ucs_status_t
uct_remapring_verbs_ep_am_short_iov(uct_ep_h tl_ep, uint8_t id,
                                    const uct_iov_t *iov, size_t iovcnt)
{
    return uct_remapring_ep_am_short_iov_inl(tl_ep, id, iov, iovcnt,
                                             uct_remapring_verbs_published);
}

static ssize_t uct_remapring_verbs_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id,
                                               uct_pack_callback_t pack_cb,
                                               void *arg, unsigned flags)
{
    return uct_remapring_ep_am_bcopy_inl(tl_ep, id, pack_cb, arg, flags,
                                         uct_remapring_verbs_published);
}

static ucs_status_t
uct_remapring_verbs_ep_am_zcopy(uct_ep_h tl_ep, uint8_t id, const void *header,
                                unsigned header_length, const uct_iov_t *iov,
                                size_t iovcnt, unsigned flags,
                                uct_completion_t *comp)
{
    return uct_remapring_ep_am_zcopy_inl(tl_ep, id, header, header_length, iov,
                                         iovcnt, flags, comp,
                                         uct_remapring_verbs_published);
}

/* The connection of @a ep, if it can take requests; else the status */
static ucs_status_t uct_remapring_verbs_ep_vconn(uct_ep_h tl_ep,
                                                 uct_remapring_vconn_t **vconn_p)
{
    uct_remapring_peer_t *peer = uct_remapring_verbs_ep(tl_ep)->peer;

    if (ucs_unlikely(peer->status != UCS_OK)) {
        return peer->status;
    }

    if (ucs_unlikely((uct_remapring_verbs_peer(peer)->vconn == NULL) ||
                     (uct_remapring_verbs_peer(peer)->vconn->state !=
                      UCT_REMAPRING_VCONN_READY))) {
        return UCS_ERR_NO_RESOURCE;
    }

    *vconn_p = uct_remapring_verbs_peer(peer)->vconn;
    return UCS_OK;
}

static ucs_status_t uct_remapring_verbs_rkey(uct_rkey_t tl_rkey,
                                             uint64_t address, size_t length,
                                             uint32_t *rkey_p)
{
    const uct_remapring_verbs_rkey_t *rkey = (const void*)tl_rkey;

    if ((tl_rkey == UCT_INVALID_RKEY) || (tl_rkey == 0) ||
        (rkey->magic != UCT_REMAPRING_VERBS_RKEY_MAGIC)) {
        if (length == 0) {
            *rkey_p = 0;
            return UCS_OK;
        }
        ucs_error("not a verbs remote key");
        return UCS_ERR_INVALID_PARAM;
    }

    if ((address < rkey->address) || (length > rkey->length) ||
        (address - rkey->address > rkey->length - length)) {
        ucs_error("range 0x%" PRIx64 "+%zu is outside rkey"
                  " 0x%" PRIx64 "+%" PRIu64,
                  address, length, rkey->address, rkey->length);
        return UCS_ERR_INVALID_PARAM;
    }

    *rkey_p = rkey->rkey;
    return UCS_OK;
}

/* One RDMA WRITE or READ of the caller's registered buffers */
static ucs_status_t
uct_remapring_verbs_ep_rdma(uct_ep_h tl_ep, enum ibv_wr_opcode opcode,
                            const uct_iov_t *iov, size_t iovcnt,
                            uint64_t remote_addr, uct_rkey_t tl_rkey,
                            uct_completion_t *comp)
{
    const uct_remapring_verbs_limits_t *limits = &uct_remapring_verbs(
            ucs_derived_of(tl_ep->iface, uct_remapring_iface_t))->limits;
    struct ibv_sge sges[UCT_REMAPRING_MAX_IOV];
    struct ibv_send_wr wr = {};
    const uct_remapring_verbs_memh_t *memh;
    uct_remapring_vconn_t *vconn;
    ucs_status_t status;
    size_t i, length = 0;
    uint32_t rkey;

    /* what the device gathers or scatters for one request */
    UCT_CHECK_IOV_SIZE(iovcnt,
                       (size_t)((opcode == IBV_WR_RDMA_READ) ?
                                        limits->read_sge : limits->send_sge),
                       "remaprdma rdma");
    status = uct_remapring_verbs_ep_vconn(tl_ep, &vconn);
    if (status != UCS_OK) {
        return status;
    }

    for (i = 0; i < iovcnt; ++i) {
        memh = iov[i].memh;
        if ((iov[i].count > 1) ||
            ((iov[i].length > 0) && ((memh == UCT_MEM_HANDLE_NULL) ||
                                     (memh->mr == NULL)))) {
            ucs_error("rdma iov %zu: count %u, memh %p: a"
                      " registered buffer of one element is needed",
                      i, iov[i].count, memh);
            return UCS_ERR_INVALID_PARAM;
        }

        uct_remapring_verbs_sge(&sges[i], iov[i].buffer, iov[i].length,
                                (iov[i].length > 0) ? memh->mr->lkey : 0);
        length += iov[i].length;
    }

    if (length > limits->max_msg) {
        ucs_error("rdma of %zu bytes to %s: the port carries at most %zu",
                  length, vconn->name, limits->max_msg);
        return UCS_ERR_INVALID_PARAM;
    }

    status = uct_remapring_verbs_rkey(tl_rkey, remote_addr, length, &rkey);
    if (status != UCS_OK) {
        return status;
    }

    wr.opcode              = opcode;
    wr.sg_list             = sges;
    wr.num_sge             = iovcnt;
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey        = rkey;
    status = uct_remapring_vconn_post(vconn, &wr, 1, vconn->staging_head,
                                      comp, NULL);
    return (status == UCS_OK) ? UCS_INPROGRESS : status;
}

static ucs_status_t
uct_remapring_verbs_ep_put_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                 size_t iovcnt, uint64_t remote_addr,
                                 uct_rkey_t rkey, uct_completion_t *comp)
{
    return uct_remapring_verbs_ep_rdma(tl_ep, IBV_WR_RDMA_WRITE, iov, iovcnt,
                                       remote_addr, rkey, comp);
}

static ucs_status_t
uct_remapring_verbs_ep_get_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                 size_t iovcnt, uint64_t remote_addr,
                                 uct_rkey_t rkey, uct_completion_t *comp)
{
    return uct_remapring_verbs_ep_rdma(tl_ep, IBV_WR_RDMA_READ, iov, iovcnt,
                                       remote_addr, rkey, comp);
}

/* A write from the staging buffer: the caller's bytes are copied */
static ucs_status_t
uct_remapring_verbs_ep_put_staged(uct_remapring_vconn_t *vconn,
                                  uint64_t pos, size_t length,
                                  uint64_t remote_addr, uint32_t rkey)
{
    struct ibv_send_wr wr = {};
    struct ibv_sge sge;

    uct_remapring_verbs_sge(&sge,
                            vconn->staging +
                                    (pos & (vconn->staging_size - 1)),
                            length, vconn->staging_mr->lkey);
    wr.opcode              = IBV_WR_RDMA_WRITE;
    wr.sg_list             = &sge;
    wr.num_sge             = 1;
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey        = rkey;
    return uct_remapring_vconn_post(vconn, &wr, 0, vconn->staging_head, NULL,
                                    NULL);
}

static ucs_status_t
uct_remapring_verbs_ep_put_short(uct_ep_h tl_ep, const void *buffer,
                                 unsigned length, uint64_t remote_addr,
                                 uct_rkey_t tl_rkey)
{
    uct_remapring_iface_t *iface = ucs_derived_of(tl_ep->iface,
                                                  uct_remapring_iface_t);
    uct_remapring_vconn_t *vconn;
    ucs_status_t status;
    uint64_t pos;
    uint32_t rkey;
    void *dst;

    UCT_CHECK_PARAM(length <= iface->tx.max_short,
                    "Invalid put_short length: %u (expected: <= %zu)", length,
                    iface->tx.max_short);
    status = uct_remapring_verbs_ep_vconn(tl_ep, &vconn);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_remapring_verbs_rkey(tl_rkey, remote_addr, length, &rkey);
    if (status != UCS_OK) {
        return status;
    }

    if (vconn->sq_avail < 2) {
        return UCS_ERR_NO_RESOURCE;
    }

    dst = uct_remapring_vconn_staging(vconn, length, &pos);
    if (dst == NULL) {
        return UCS_ERR_NO_RESOURCE;
    }

    memcpy(dst, buffer, length);
    return uct_remapring_verbs_ep_put_staged(vconn, pos, length, remote_addr,
                                             rkey);
}

static ssize_t uct_remapring_verbs_ep_put_bcopy(uct_ep_h tl_ep,
                                                uct_pack_callback_t pack_cb,
                                                void *arg, uint64_t remote_addr,
                                                uct_rkey_t tl_rkey)
{
    uct_remapring_iface_t *iface = ucs_derived_of(tl_ep->iface,
                                                  uct_remapring_iface_t);
    uct_remapring_vconn_t *vconn;
    ucs_status_t status;
    uint64_t pos, saved;
    size_t length;
    uint32_t rkey;
    void *dst;

    status = uct_remapring_verbs_ep_vconn(tl_ep, &vconn);
    if (status != UCS_OK) {
        return status;
    }

    if (vconn->sq_avail < 2) {
        return UCS_ERR_NO_RESOURCE;
    }

    saved = vconn->staging_head;
    dst   = uct_remapring_vconn_staging(vconn, iface->tx.max_bcopy, &pos);
    if (dst == NULL) {
        return UCS_ERR_NO_RESOURCE;
    }

    length = pack_cb(dst, arg);
    if (length > iface->tx.max_bcopy) {
        ucs_error("put_bcopy packed %zu bytes, more than %zu", length,
                  iface->tx.max_bcopy);
        vconn->staging_head = saved;
        return UCS_ERR_INVALID_PARAM;
    }

    status = uct_remapring_verbs_rkey(tl_rkey, remote_addr, length, &rkey);
    if (status != UCS_OK) {
        vconn->staging_head = saved;
        return status;
    }

    status = uct_remapring_verbs_ep_put_staged(vconn, pos, length,
                                               remote_addr, rkey);
    return (status == UCS_OK) ? (ssize_t)length : status;
}

static ucs_status_t
uct_remapring_verbs_ep_get_bcopy(uct_ep_h tl_ep,
                                 uct_unpack_callback_t unpack_cb, void *arg,
                                 size_t length, uint64_t remote_addr,
                                 uct_rkey_t tl_rkey, uct_completion_t *comp)
{
    uct_remapring_iface_t *iface = ucs_derived_of(tl_ep->iface,
                                                  uct_remapring_iface_t);
    uct_remapring_verbs_op_t *op;
    struct ibv_send_wr wr = {};
    uct_remapring_vconn_t *vconn;
    struct ibv_sge sge;
    ucs_status_t status;
    uint64_t pos, saved;
    uint32_t rkey;
    void *dst;

    UCT_CHECK_LENGTH(length, 0, iface->tx.max_bcopy, "get_bcopy");
    status = uct_remapring_verbs_ep_vconn(tl_ep, &vconn);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_remapring_verbs_rkey(tl_rkey, remote_addr, length, &rkey);
    if (status != UCS_OK) {
        return status;
    }

    saved = vconn->staging_head;
    dst   = uct_remapring_vconn_staging(vconn, length, &pos);
    if (dst == NULL) {
        return UCS_ERR_NO_RESOURCE;
    }

    uct_remapring_verbs_sge(&sge, dst, length, vconn->staging_mr->lkey);
    wr.opcode              = IBV_WR_RDMA_READ;
    wr.sg_list             = &sge;
    wr.num_sge             = 1;
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey        = rkey;
    status = uct_remapring_vconn_post(vconn, &wr, 1, vconn->staging_head,
                                      comp, &op);
    if (status != UCS_OK) {
        vconn->staging_head = saved;
        return status;
    }

    op->unpack_cb     = unpack_cb;
    op->unpack_arg    = arg;
    op->unpack_data   = dst;
    op->unpack_length = length;
    return UCS_INPROGRESS;
}

/* What this connection has in flight completes; with @a comp, it is called
 * then */
static ucs_status_t uct_remapring_vconn_flush(uct_remapring_vconn_t *vconn,
                                              uct_completion_t *comp)
{
    ucs_status_t status;

    if (vconn->tail_held || vconn->stall_held) {
        /* records the receiver cannot see before it acknowledges: the
         * sends after this flush wait with it */
        vconn->flush_held = vconn->tail_held;
        return UCS_ERR_NO_RESOURCE;
    }

    if ((vconn->ops_count == 0) && (vconn->unsignaled == 0)) {
        return UCS_OK;
    }

    if ((comp == NULL) && (vconn->unsignaled == 0)) {
        return UCS_INPROGRESS; /* the last one is signaled */
    }

    /* to be told when the others are done */
    status = uct_remapring_vconn_post_marker(vconn, comp);
    return (status == UCS_OK) ? UCS_INPROGRESS : status;
}

static ucs_status_t uct_remapring_verbs_ep_flush(uct_ep_h tl_ep, unsigned flags,
                                                 uct_completion_t *comp)
{
    uct_remapring_peer_t *peer = uct_remapring_verbs_ep(tl_ep)->peer;
    ucs_status_t status;

    /* pending requests first, as on the other wires */
    status = uct_remapring_ep_flush(tl_ep, flags, comp);
    if ((status != UCS_OK) || (flags & UCT_FLUSH_FLAG_CANCEL)) {
        return status;
    }

    if (peer->status != UCS_OK) {
        return peer->status;
    }

    if (peer->backlog != NULL) {
        /* messages kept for the connection are not sent yet */
        return UCS_ERR_NO_RESOURCE;
    }

    if ((uct_remapring_verbs_peer(peer)->vconn == NULL) ||
        (uct_remapring_verbs_peer(peer)->vconn->state !=
         UCT_REMAPRING_VCONN_READY)) {
        /* nothing was sent */
        return UCS_OK;
    }

    status = uct_remapring_vconn_flush(uct_remapring_verbs_peer(peer)->vconn,
                                       comp);
    if (status == UCS_INPROGRESS) {
        UCT_TL_EP_STAT_FLUSH_WAIT(ucs_derived_of(tl_ep, uct_base_ep_t));
    }
    return status;
}

static ucs_status_t uct_remapring_verbs_ep_check(uct_ep_h tl_ep, unsigned flags,
                                                 uct_completion_t *comp)
{
    uct_remapring_vconn_t *vconn;

    UCT_EP_KEEPALIVE_CHECK_PARAM(flags, comp);
    /* an empty write: a receiver host that is gone fails it after the
     * retries; a receiver process that is gone disconnected already */
    if ((uct_remapring_verbs_ep_vconn(tl_ep, &vconn) == UCS_OK) &&
        (vconn->sq_avail > 1)) {
        (void)uct_remapring_vconn_flush(vconn, NULL);
    }

    return UCS_OK;
}

static ucs_status_t uct_remapring_verbs_iface_flush(uct_iface_h tl_iface,
                                                    unsigned flags,
                                                    uct_completion_t *comp)
{
    uct_remapring_iface_t *iface = ucs_derived_of(tl_iface,
                                                  uct_remapring_iface_t);
    uct_remapring_peer_t *peer;
    ucs_status_t status = UCS_OK;

    if (comp != NULL) {
        return UCS_ERR_UNSUPPORTED;
    }

    if (!ucs_list_is_empty(&iface->tx.blocked) ||
        (iface->tx.nerrs_queued > 0)) {
        status = UCS_INPROGRESS;
    }

    kh_foreach_value(&iface->tx.peers, peer, {
        if ((peer->status == UCS_OK) && (peer->backlog != NULL)) {
            status = UCS_INPROGRESS; /* kept for the connection */
        } else if ((peer->status == UCS_OK) &&
                   (uct_remapring_verbs_peer(peer)->vconn != NULL) &&
                   (uct_remapring_verbs_peer(peer)->vconn->state ==
                    UCT_REMAPRING_VCONN_READY) &&
                   (uct_remapring_vconn_flush(
                            uct_remapring_verbs_peer(peer)->vconn, NULL) !=
                    UCS_OK)) {
            status = UCS_INPROGRESS;
        }
    })

    if (status == UCS_OK) {
        UCT_TL_IFACE_STAT_FLUSH(&iface->super);
    } else {
        UCT_TL_IFACE_STAT_FLUSH_WAIT(&iface->super);
    }
    return status;
}


/* ------------------------------------------------------------ interface */

static ucs_status_t
uct_remapring_verbs_iface_get_address(uct_iface_h tl_iface,
                                      uct_iface_addr_t *addr)
{
    uct_remapring_iface_t *iface = ucs_derived_of(tl_iface,
                                                  uct_remapring_iface_t);
    uct_remapring_verbs_iface_addr_t *verbs_addr = (void*)addr;

    verbs_addr->magic       = UCT_REMAPRING_VERBS_ADDR_MAGIC;
    verbs_addr->port        = uct_remapring_verbs(iface)->cm_port;
    verbs_addr->version     = UCT_REMAPRING_VERBS_VERSION;
    verbs_addr->iface_id    = iface->id;
    verbs_addr->max_payload = iface->rx.max_payload;
    return UCS_OK;
}

static ucs_status_t
uct_remapring_verbs_iface_get_device_address(uct_iface_h tl_iface,
                                             uct_device_addr_t *addr)
{
    uct_remapring_iface_t *iface = ucs_derived_of(tl_iface,
                                                  uct_remapring_iface_t);
    uct_remapring_verbs_dev_addr_t *dev_addr = (void*)addr;
    const struct sockaddr_storage *ss = &uct_remapring_verbs(iface)->addr;

    memset(dev_addr, 0, sizeof(*dev_addr));
    dev_addr->magic  = UCT_REMAPRING_VERBS_MAGIC;
    dev_addr->family = ss->ss_family;
    if (ss->ss_family == AF_INET) {
        memcpy(dev_addr->ip, &((const struct sockaddr_in*)ss)->sin_addr, 4);
    } else {
        memcpy(dev_addr->ip, &((const struct sockaddr_in6*)ss)->sin6_addr,
               16);
    }
    return UCS_OK;
}

static int
uct_remapring_verbs_iface_is_reachable(const uct_iface_h tl_iface,
                                       const uct_device_addr_t *dev_addr,
                                       const uct_iface_addr_t *iface_addr)
{
    uct_remapring_iface_t *iface = ucs_derived_of(tl_iface,
                                                  uct_remapring_iface_t);
    const uct_remapring_verbs_iface_addr_t *addr = (const void*)iface_addr;
    const uct_remapring_verbs_dev_addr_t *dev    = (const void*)dev_addr;

    uct_remapring_verbs_iface_t *verbs = uct_remapring_verbs(iface);
    struct sockaddr_storage peer;

    /* the shm transport's addresses are of another kind: the magic is
     * checked before anything else is read */
    if ((addr == NULL) || (dev == NULL) ||
        (addr->magic != UCT_REMAPRING_VERBS_ADDR_MAGIC) ||
        (addr->version != UCT_REMAPRING_VERBS_VERSION) ||
        (dev->magic != UCT_REMAPRING_VERBS_MAGIC) ||
        (dev->family != verbs->addr.ss_family) ||
        (addr->max_payload < iface->tx.max_bcopy)) {
        return 0;
    }

    /* the kernel routes the peer's address out through our port */
    uct_remapring_verbs_dev_sockaddr(dev, &peer);
    return uct_remapring_verbs_routable(&verbs->addr, verbs->ifindex, &peer);
}

static ucs_status_t
uct_remapring_verbs_iface_query(uct_iface_h tl_iface,
                                uct_iface_attr_t *iface_attr)
{
    uct_remapring_iface_t *iface = ucs_derived_of(tl_iface,
                                                  uct_remapring_iface_t);
    uct_remapring_verbs_iface_t *verbs = uct_remapring_verbs(iface);
    size_t max_bcopy                   = ucs_min(iface->tx.max_bcopy,
                                                 verbs->staging_size / 2);
    size_t max_zcopy = ucs_min(UCS_GBYTE, verbs->limits.max_msg);

    uct_remapring_iface_query(iface, iface_attr); /* the same ring */

    iface_attr->cap.flags |= UCT_IFACE_FLAG_PUT_SHORT |
                             UCT_IFACE_FLAG_PUT_BCOPY |
                             UCT_IFACE_FLAG_PUT_ZCOPY |
                             UCT_IFACE_FLAG_GET_BCOPY |
                             UCT_IFACE_FLAG_GET_ZCOPY | UCT_IFACE_FLAG_EP_CHECK;

    iface_attr->cap.put.max_short       = iface->tx.max_short;
    iface_attr->cap.put.max_bcopy       = max_bcopy;
    iface_attr->cap.put.min_zcopy       = 0;
    iface_attr->cap.put.max_zcopy       = max_zcopy;
    iface_attr->cap.put.opt_zcopy_align = 1;
    iface_attr->cap.put.align_mtu       = 1;
    iface_attr->cap.put.max_iov         = verbs->limits.send_sge;
    iface_attr->cap.get.max_bcopy       = max_bcopy;
    iface_attr->cap.get.min_zcopy       = 0;
    iface_attr->cap.get.max_zcopy       = max_zcopy;
    iface_attr->cap.get.opt_zcopy_align = 1;
    iface_attr->cap.get.align_mtu       = 1;
    iface_attr->cap.get.max_iov         = verbs->limits.read_sge;

    iface_attr->device_addr_len = sizeof(uct_remapring_verbs_dev_addr_t);
    iface_attr->iface_addr_len  = sizeof(uct_remapring_verbs_iface_addr_t);
    iface_attr->ep_addr_len     = 0;
    return UCS_OK;
}


/* ---------------------------------------------------------- construction */

/* Pinned mode: the pool grew; its new blocks have no registration yet
 * (each is registered for the slot it backs, when credited) */
static ucs_status_t uct_remapring_verbs_pool_grown(void *arg, uint32_t first,
                                                   unsigned count, void *addr)
{
    return uct_remapring_verbs_block_mrs_reserve(uct_remapring_verbs(arg),
                                                 first + count);
}

/* Bandwidth of the port, from its speed and width: the IBTA signalling rates
 * (PortInfo's LinkSpeedActive and LinkWidthActive) that UCX's own
 * uct_ib_iface_query() turns into bandwidth, which needs a uct_ib_iface_t
 * this transport is not; the data rate here leaves out the encoding */
uint8_t uct_remapring_verbs_rnr_code(double seconds)
{
    /* IBTA's table: the timer of codes 1 to 31, in units of 10 us (code 0
     * is 655.36 ms) */
    static const uint32_t timer_10us[32] = {
            65536, 1,    2,    3,    4,    6,    8,     12,
            16,    24,   32,   48,   64,   96,   128,   192,
            256,   384,  512,  768,  1024, 1536, 2048,  3072,
            4096,  6144, 8192, 12288, 16384, 24576, 32768, 49152};
    double units = seconds * 1e5;
    uint8_t code;

    for (code = 1; code < 31; ++code) {
        if (timer_10us[code] >= units - 1e-9) {
            break;
        }
    }
    return code;
}

/* @a value, or the device's @a max where it is smaller, said once */
static unsigned uct_remapring_verbs_limit(const char *name, const char *what,
                                          unsigned value, int max)
{
    if ((max >= 0) && (value > (unsigned)max)) {
        ucs_diag("%s allows %d %s: %u asked, %d taken", name, max, what,
                 value, max);
        return max;
    }
    return value;
}

ucs_status_t uct_remapring_verbs_limits(const char *name,
                                        const struct ibv_device_attr *dev,
                                        const struct ibv_port_attr *port,
                                        unsigned sq_size, unsigned srq_size,
                                        size_t block_size,
                                        uct_remapring_verbs_limits_t *limits)
{
    int cqe;

    if ((dev->max_srq <= 0) || (dev->max_srq_wr <= 0)) {
        ucs_error("%s has no shared receive queue, which the transport"
                  " needs", name);
        return UCS_ERR_UNSUPPORTED;
    }

    if ((dev->max_sge <= 0) || (dev->max_qp_wr <= 0) || (dev->max_cqe <= 0)) {
        ucs_error("%s reports no send requests, gather entries or"
                  " completions (max_qp_wr %d, max_sge %d, max_cqe %d)",
                  name, dev->max_qp_wr, dev->max_sge, dev->max_cqe);
        return UCS_ERR_UNSUPPORTED;
    }

    if (port->max_msg_sz < block_size) {
        ucs_error("%s carries messages of at most %u bytes, less than a"
                  " block (%zu): set UCX_REMAPRDMA_BLOCK_SIZE lower",
                  name, port->max_msg_sz, block_size);
        return UCS_ERR_UNSUPPORTED;
    }

    limits->sq_size  = uct_remapring_verbs_limit(name, "send requests per QP",
                                                 sq_size, dev->max_qp_wr);
    limits->srq_size = uct_remapring_verbs_limit(name,
                                                 "receive requests per SRQ",
                                                 srq_size, dev->max_srq_wr);
    /* the CQ takes the SRQ's completions and the signaled sends of every
     * connection; a connection adds sq_size (uct_remapring_verbs_cq_reserve) */
    cqe = dev->max_cqe - (int)limits->sq_size;
    if (cqe < UCT_REMAPRING_VERBS_SRQ_SIZE_MIN) {
        ucs_error("%s allows %d completions per CQ, too few for %u send"
                  " requests per QP", name, dev->max_cqe, limits->sq_size);
        return UCS_ERR_UNSUPPORTED;
    }
    limits->srq_size = uct_remapring_verbs_limit(name, "completions per CQ"
                                                 " left for receive requests",
                                                 limits->srq_size, cqe);
    limits->srq_max  = ucs_min(ucs_max(limits->srq_size,
                                       (unsigned)UCT_REMAPRING_VERBS_SRQ_GROW_MAX),
                               (unsigned)ucs_min(dev->max_srq_wr, cqe));
    if ((limits->sq_size < UCT_REMAPRING_VERBS_SQ_SIZE_MIN) ||
        (limits->srq_size < UCT_REMAPRING_VERBS_SRQ_SIZE_MIN)) {
        ucs_error("%s allows %u send requests per QP and %u receive"
                  " requests, fewer than the transport needs (%d, %d)",
                  name, limits->sq_size, limits->srq_size,
                  UCT_REMAPRING_VERBS_SQ_SIZE_MIN,
                  UCT_REMAPRING_VERBS_SRQ_SIZE_MIN);
        return UCS_ERR_UNSUPPORTED;
    }

    limits->send_sge = ucs_min((unsigned)dev->max_sge,
                               (unsigned)UCT_REMAPRING_MAX_IOV);
    /* a device that reports no READ limit reads as it writes */
    limits->read_sge = (dev->max_sge_rd > 0) ?
                               ucs_min((unsigned)dev->max_sge_rd,
                                       limits->send_sge) :
                               limits->send_sge;
    limits->max_msg  = port->max_msg_sz;
    return UCS_OK;
}

static double uct_remapring_verbs_port_bw(const struct ibv_port_attr *attr)
{
    static const struct {
        uint8_t speed;
        double  gbps;
    } speeds[] = {{1, 2.5}, {2, 5}, {4, 10}, {8, 10}, {16, 14}, {32, 25},
                  {64, 50}, {128, 100}};
    static const uint8_t widths[] = {1, 4, 8, 12, 2};
    double gbps = 10, lanes = 1;
    unsigned i;

    for (i = 0; i < ucs_static_array_size(speeds); ++i) {
        if (attr->active_speed == speeds[i].speed) {
            gbps = speeds[i].gbps;
        }
    }

    for (i = 0; i < ucs_static_array_size(widths); ++i) {
        if (attr->active_width == UCS_BIT(i)) {
            lanes = widths[i];
        }
    }

    return gbps * lanes * 1e9 / 8;
}

/* The port of our device that @a dev_name names ("rxe0:1") */
static ucs_status_t
uct_remapring_verbs_iface_port(uct_remapring_verbs_dev_t *dev,
                               const char *dev_name, uint8_t *port_p)
{
    const char *colon = strrchr(dev_name, ':');
    unsigned long port;
    char *end;

    port = (colon != NULL) ? strtoul(colon + 1, &end, 10) : 0;
    if ((colon == NULL) || (*end != '\0') || (port == 0) || (port > 255) ||
        strncmp(dev_name, dev->name, colon - dev_name) ||
        (strlen(dev->name) != (size_t)(colon - dev_name))) {
        ucs_error("%s is not a port of %s", dev_name, dev->name);
        return UCS_ERR_NO_DEVICE;
    }

    *port_p = port;
    return UCS_OK;
}

/* The mode this interface places rings in: odp where the device has it
 * (probed once per device) unless pinned is asked for */
static ucs_status_t
uct_remapring_verbs_iface_mode(uct_remapring_verbs_dev_t *dev, int config_mode,
                               uct_remapring_verbs_mode_t *mode_p)
{
    if (config_mode != UCT_REMAPRING_VERBS_MODE_PINNED) {
        uct_remapring_verbs_dev_probe_odp(dev);
    }

    if (config_mode == UCT_REMAPRING_VERBS_MODE_AUTO) {
        *mode_p = dev->odp ? UCT_REMAPRING_VERBS_MODE_ODP :
                             UCT_REMAPRING_VERBS_MODE_PINNED;
    } else if ((config_mode == UCT_REMAPRING_VERBS_MODE_ODP) && !dev->odp) {
        ucs_error("UCX_REMAPRDMA_MODE=odp, but %s reports no ODP for RC"
                  " WRITE and READ, or its ODP writes do not land as sent",
                  dev->name);
        return UCS_ERR_UNSUPPORTED;
    } else {
        *mode_p = config_mode;
    }

    return UCS_OK;
}

/* The transport's own settings; the shared ones are checked by the base */
static ucs_status_t uct_remapring_verbs_iface_config_check(
        const uct_remapring_verbs_iface_config_t *config)
{
    size_t min_staging = 2 * config->super.block_size;

    if ((config->sq_size < UCT_REMAPRING_VERBS_SQ_SIZE_MIN) ||
        (config->sq_size > UCT_REMAPRING_VERBS_SQ_SIZE_MAX)) {
        ucs_error("UCX_REMAPRDMA_SQ_SIZE=%u must be between %d and %d",
                  config->sq_size, UCT_REMAPRING_VERBS_SQ_SIZE_MIN,
                  UCT_REMAPRING_VERBS_SQ_SIZE_MAX);
        return UCS_ERR_INVALID_PARAM;
    }

    if ((config->srq_size < UCT_REMAPRING_VERBS_SRQ_SIZE_MIN) ||
        (config->srq_size > UCT_REMAPRING_VERBS_SRQ_SIZE_MAX)) {
        ucs_error("UCX_REMAPRDMA_SRQ_SIZE=%u must be between %d and %d",
                  config->srq_size, UCT_REMAPRING_VERBS_SRQ_SIZE_MIN,
                  UCT_REMAPRING_VERBS_SRQ_SIZE_MAX);
        return UCS_ERR_INVALID_PARAM;
    }

    if ((config->staging != UCS_MEMUNITS_AUTO) &&
        ((config->staging == UCS_MEMUNITS_INF) ||
         (config->staging < min_staging))) {
        ucs_error("UCX_REMAPRDMA_STAGING=%zu must be at least 2 *"
                  " BLOCK_SIZE (%zu), or auto",
                  config->staging, min_staging);
        return UCS_ERR_INVALID_PARAM;
    }

    if ((config->imm_window < UCT_REMAPRING_VERBS_IMM_WINDOW_MIN) ||
        (config->imm_window > UCT_REMAPRING_VERBS_IMM_WINDOW_MAX)) {
        ucs_error("UCX_REMAPRDMA_IMM_WINDOW=%u must be between %d and %d",
                  config->imm_window, UCT_REMAPRING_VERBS_IMM_WINDOW_MIN,
                  UCT_REMAPRING_VERBS_IMM_WINDOW_MAX);
        return UCS_ERR_INVALID_PARAM;
    }

    if ((config->max_conns < 1) ||
        (config->max_conns > UCT_REMAPRING_VERBS_MAX_CONNS)) {
        ucs_error("UCX_REMAPRDMA_MAX_CONNS=%u must be between 1 and %d",
                  config->max_conns, UCT_REMAPRING_VERBS_MAX_CONNS);
        return UCS_ERR_INVALID_PARAM;
    }

    if ((config->max_inline != UCS_MEMUNITS_AUTO) &&
        (config->max_inline > UCT_REMAPRING_VERBS_MAX_INLINE_MAX)) {
        ucs_error("UCX_REMAPRDMA_MAX_INLINE=%zu must be at most %d, or auto",
                  config->max_inline, UCT_REMAPRING_VERBS_MAX_INLINE_MAX);
        return UCS_ERR_INVALID_PARAM;
    }

    if ((config->rnr_timer < 1e-5) || (config->rnr_timer > 0.49152)) {
        ucs_error("UCX_REMAPRDMA_RNR_TIMER=%.2fms must be between 0.01ms and"
                  " 491.52ms", config->rnr_timer * 1e3);
        return UCS_ERR_INVALID_PARAM;
    }

    if (config->timeout > UCT_REMAPRING_VERBS_TIMEOUT_MAX) {
        ucs_error("UCX_REMAPRDMA_TIMEOUT=%u must be at most %d",
                  config->timeout, UCT_REMAPRING_VERBS_TIMEOUT_MAX);
        return UCS_ERR_INVALID_PARAM;
    }

    return UCS_OK;
}

/* The interface's CQ and SRQ, shared by all its connections, and the
 * channel of its connection manager */
static ucs_status_t
uct_remapring_verbs_iface_queues(uct_remapring_verbs_iface_t *verbs)
{
    uct_remapring_verbs_dev_t *dev    = verbs->dev;
    struct ibv_srq_init_attr srq_attr = {};

    verbs->cq = ibv_create_cq(dev->ctx, verbs->srq_size + verbs->sq_size,
                              NULL, NULL, 0);
    if (verbs->cq == NULL) {
        ucs_error("ibv_create_cq(%s) failed: %m", dev->name);
        return UCS_ERR_IO_ERROR;
    }

    /* room to grow with the connections (uct_remapring_verbs_srq_reserve) */
    srq_attr.attr.max_wr  = verbs->srq_max;
    srq_attr.attr.max_sge = 1;
    verbs->srq = ibv_create_srq(dev->pd, &srq_attr);
    if (verbs->srq == NULL) {
        ucs_error("ibv_create_srq(%s, %u) failed: %m", dev->name,
                  verbs->srq_max);
        return UCS_ERR_IO_ERROR;
    }

    verbs->srq_max  = ucs_min(verbs->srq_max, srq_attr.attr.max_wr);
    verbs->srq_min  = ucs_min(verbs->srq_min, verbs->srq_max);
    verbs->srq_size = verbs->srq_min;
    uct_remapring_verbs_post_recvs(verbs);

    verbs->channel = rdma_create_event_channel();
    if (verbs->channel == NULL) {
        ucs_error("rdma_create_event_channel failed: %m");
        return UCS_ERR_IO_ERROR;
    }

    if (fcntl(verbs->channel->fd, F_SETFL,
              fcntl(verbs->channel->fd, F_GETFL) | O_NONBLOCK) != 0) {
        ucs_error("cannot make the rdma_cm channel non-blocking: %m");
        return UCS_ERR_IO_ERROR;
    }

    return UCS_OK;
}

/* Listen on the port's address, once the pool exists */
static ucs_status_t
uct_remapring_verbs_iface_listen(uct_remapring_verbs_iface_t *verbs)
{
    struct sockaddr_storage addr       = verbs->addr;
    char name[64];

    if (rdma_create_id(verbs->channel, &verbs->listen_id, NULL,
                       RDMA_PS_TCP) != 0) {
        ucs_error("rdma_create_id failed: %m");
        return UCS_ERR_IO_ERROR;
    }

    if ((rdma_bind_addr(verbs->listen_id, (struct sockaddr*)&addr) != 0) ||
        (rdma_listen(verbs->listen_id, 128) != 0)) {
        ucs_sockaddr_str((struct sockaddr *)&addr, name, sizeof(name));
        ucs_error("listening on %s failed: %m", name);
        return UCS_ERR_IO_ERROR;
    }

    verbs->cm_port = rdma_get_src_port(verbs->listen_id);
    ucs_sockaddr_str(rdma_get_local_addr(verbs->listen_id), name, sizeof(name));
    ucs_info("%s:%u listens on %s, interface 0x%" PRIx64 ", %s mode%s;"
             " up to %u connections, each a ring of %zu KiB; %u send and %u"
             " receive requests, %u/%u gather/scatter entries, messages up to"
             " %zu bytes, inline up to %u, RNR timer code %u",
             verbs->dev->name, verbs->port_num, name, verbs->super.id,
             uct_remapring_verbs_mode_str(verbs->mode),
             ((verbs->mode == UCT_REMAPRING_VERBS_MODE_ODP) &&
              (verbs->dev->odp_rec_align > REMAPRING_RING_ALIGN)) ?
                     ", records on pages" :
                     (verbs->mode == UCT_REMAPRING_VERBS_MODE_PINNED) ?
                     ", each block registered for its sender alone" :
                     "",
             verbs->max_conns,
             ((size_t)verbs->super.rx.nslots * verbs->pool_block_size) >> 10,
             verbs->sq_size, verbs->srq_size, verbs->limits.send_sge,
             verbs->limits.read_sge, verbs->limits.max_msg, verbs->max_inline,
             verbs->rnr_code);
    return UCS_OK;
}

/* Free what the interface made of the device, whatever it got to */
static void
uct_remapring_verbs_iface_release(uct_remapring_verbs_iface_t *verbs)
{
    uct_remapring_vconn_t *vconn, *tmp;

    ucs_list_for_each_safe(vconn, tmp, &verbs->rx_conns, list) {
        uct_remapring_rx_vconn_free(vconn);
    }

    /* connections of endpoints the user left behind */
    kh_foreach_value(&verbs->qps, vconn, {
        if (!vconn->is_rx && (vconn->qp != NULL)) {
            rdma_destroy_qp(vconn->id);
            vconn->qp = NULL;
        }
    })

    uct_remapring_verbs_reap(verbs);

    if (verbs->listen_id != NULL) {
        rdma_destroy_id(verbs->listen_id);
    }
    if (verbs->channel != NULL) {
        rdma_destroy_event_channel(verbs->channel);
    }
    if (verbs->srq != NULL) {
        ibv_destroy_srq(verbs->srq);
    }
    if (verbs->cq != NULL) {
        ibv_destroy_cq(verbs->cq);
    }
    ucs_debug("%s:%u immediates: %" PRIu64 " times a sender held its tail"
              " for an acknowledgement, %" PRIu64 " acknowledgements sent;"
              " %u receive requests posted at most",
              verbs->dev->name, verbs->port_num, verbs->imm_stats.held,
              verbs->imm_stats.acks, verbs->srq_size);
    if (verbs->tx_stats.records + verbs->tx_stats.tails > 0) {
        ucs_debug("%s:%u sent: %" PRIu64 " record writes, %" PRIu64
                  " tails alone, %" PRIu64 " markers; %" PRIu64 " requests"
                  " signaled; the staging found full %" PRIu64 " times",
                  verbs->dev->name, verbs->port_num, verbs->tx_stats.records,
                  verbs->tx_stats.tails, verbs->tx_stats.markers,
                  verbs->tx_stats.signaled, verbs->tx_stats.full);
    }
    if (verbs->quiet_stats.asked > 0) {
        ucs_debug("%s:%u quiet rings: %" PRIu64 " asked to keep to IDLE_SLOTS,"
                  " %" PRIu64 " answered, %" PRIu64 " pages given back",
                  verbs->dev->name, verbs->port_num, verbs->quiet_stats.asked,
                  verbs->quiet_stats.yields, verbs->quiet_stats.pages);
    }
    if (verbs->populate_calls > 0) {
        ucs_debug("%s:%u ring pages populated ahead of senders in %" PRIu64
                  " calls", verbs->dev->name, verbs->port_num,
                  verbs->populate_calls);
    }
    if (verbs->pinned_stats.regs > 0) {
        ucs_debug("%s:%u pinned: %" PRIu64 " blocks registered for a slot,"
                  " %" PRIu64 " kept, %" PRIu64 " revoked while held",
                  verbs->dev->name, verbs->port_num, verbs->pinned_stats.regs,
                  verbs->pinned_stats.reuses, verbs->pinned_stats.revoked);
    }

    kh_destroy_inplace(uct_remapring_vconns, &verbs->qps);
    ucs_free(verbs->block_mrs);
}

static UCS_CLASS_DECLARE_DELETE_FUNC(uct_remapring_verbs_iface_t, uct_iface_t);

/* clang-format off */
static uct_iface_ops_t uct_remapring_verbs_iface_tl_ops = {
    .ep_am_short              = uct_remapring_verbs_ep_am_short,
    .ep_am_short_iov          = uct_remapring_verbs_ep_am_short_iov,
    .ep_am_bcopy              = uct_remapring_verbs_ep_am_bcopy,
    .ep_am_zcopy              = uct_remapring_verbs_ep_am_zcopy,
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
                                        uct_remapring_verbs_iface_t),
    .iface_query              = uct_remapring_verbs_iface_query,
    .iface_get_address        = uct_remapring_verbs_iface_get_address,
    .iface_get_device_address = uct_remapring_verbs_iface_get_device_address,
    .iface_is_reachable       = uct_remapring_verbs_iface_is_reachable,
};

static const uct_remapring_iface_ops_t uct_remapring_verbs_iface_ops = {
    .peer_key      = uct_remapring_verbs_peer_key,
    .peer_match    = NULL,
    .peer_create   = uct_remapring_verbs_peer_create,
    .peer_destroy  = uct_remapring_verbs_peer_destroy,
    .peer_connect  = uct_remapring_verbs_peer_connect,
    .peer_stalled  = uct_remapring_verbs_peer_stalled,
    .peer_can_post = uct_remapring_verbs_peer_can_post
};
/* clang-format on */

static UCS_CLASS_INIT_FUNC(uct_remapring_verbs_iface_t, uct_md_h md,
                           uct_worker_h worker,
                           const uct_iface_params_t *params,
                           const uct_iface_config_t *tl_config)
{
    uct_remapring_verbs_iface_config_t resolved =
            *ucs_derived_of(tl_config, uct_remapring_verbs_iface_config_t);
    const uct_remapring_verbs_iface_config_t *config = &resolved;
    uct_remapring_verbs_dev_t *dev =
            ucs_derived_of(md, uct_remapring_verbs_md_t)->dev;
    uct_remapring_iface_init_params_t init = {
            .tl_ops   = &uct_remapring_verbs_iface_tl_ops,
            .ops      = &uct_remapring_verbs_iface_ops,
            .latency  = UCT_REMAPRING_VERBS_LAT_US * 1e-6,
            .overhead = UCT_REMAPRING_VERBS_OVH_US * 1e-6};
    struct ibv_device_attr dev_attr;
    struct ibv_port_attr port_attr;
    uct_remapring_verbs_limits_t limits;
    uct_remapring_verbs_mode_t mode;
    ucs_status_t status;
    uint8_t port;

    /* the settings this interface opens with, auto made ours; the shared
     * ones are checked by the base */
    uct_remapring_iface_config_resolve(&resolved.super,
                                       UCT_REMAPRING_RDMA_BLOCK_SIZE_K *
                                               UCS_KBYTE);
    status = uct_remapring_verbs_iface_config_check(config);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_remapring_verbs_iface_port(dev, params->mode.device.dev_name,
                                            &port);
    if (status != UCS_OK) {
        return status;
    }

    if (ibv_query_port(dev->ctx, port, &port_attr) != 0) {
        ucs_error("ibv_query_port(%s, %u) failed: %m", dev->name, port);
        return UCS_ERR_NO_DEVICE;
    }

    if (ibv_query_device(dev->ctx, &dev_attr) != 0) {
        ucs_error("ibv_query_device(%s) failed: %m", dev->name);
        return UCS_ERR_NO_DEVICE;
    }

    status = uct_remapring_verbs_limits(params->mode.device.dev_name,
                                        &dev_attr, &port_attr, config->sq_size,
                                        config->srq_size,
                                        config->super.block_size, &limits);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_remapring_verbs_iface_mode(dev, config->mode, &mode);
    if (status != UCS_OK) {
        return status;
    }

    /* a pinned page stays the device's: the pool registers each chunk as
     * it is made (from the first ring on), and punches nothing */
    init.bandwidth   = uct_remapring_verbs_port_bw(&port_attr);
    init.pool_pin_cb = (mode == UCT_REMAPRING_VERBS_MODE_PINNED) ?
                               uct_remapring_verbs_pool_grown :
                               NULL;
    UCS_CLASS_CALL_SUPER_INIT(uct_remapring_iface_t, &init, md, worker, params,
                              &config->super);

    self->dev             = dev;
    self->port_num        = port;
    self->mode            = mode;
    self->limits          = limits;
    self->sq_size         = limits.sq_size;
    self->srq_size        = limits.srq_size;
    self->srq_min         = limits.srq_size;
    self->srq_max         = limits.srq_max;
    self->srq_short       = 0;
    self->imm_window      = config->imm_window;
    /* the requests taken and not posted again (uct_remapring_verbs_poll_cq) */
    UCS_STATIC_ASSERT(UCT_REMAPRING_VERBS_POLL_BATCH <=
                      UCT_REMAPRING_VERBS_SRQ_REFILL);
    self->srq_need        = 2 * UCT_REMAPRING_VERBS_SRQ_REFILL;
    self->sig_every       = ucs_max(self->sq_size / 8, 1u);
    self->timeout         = config->timeout;
    self->max_conns       = config->max_conns;
    self->rnr_code        = uct_remapring_verbs_rnr_code(config->rnr_timer);
    self->max_inline      = (config->max_inline == UCS_MEMUNITS_AUTO) ?
                                    UCT_REMAPRING_VERBS_MAX_INLINE_AUTO :
                                    config->max_inline;
    self->pool_block_size = config->super.block_size;
    self->staging_size    = ucs_roundup_pow2(
               (config->staging == UCS_MEMUNITS_AUTO) ?
                       config->super.block_size * config->super.ring_slots :
                       config->staging);
    self->staging_min     = ucs_min(self->staging_size,
                                    ucs_roundup_pow2(2 *
                                                     config->super.block_size));
    self->cq          = NULL;
    self->srq         = NULL;
    self->srq_posted  = 0;
    self->channel     = NULL;
    self->listen_id   = NULL;
    self->cm_port     = 0;
    self->nrx         = 0;
    self->cm_calls    = 0;
    self->check_calls = 0;
    self->prefetch    = 1; /* until the provider says otherwise */
    self->populate    = 1; /* until the kernel says otherwise */
    self->populate_calls = 0;
    self->block_mrs   = NULL;
    self->nblocks     = 0;
    memset(&self->pinned_stats, 0, sizeof(self->pinned_stats));
    memset(&self->imm_stats, 0, sizeof(self->imm_stats));
    memset(&self->quiet_stats, 0, sizeof(self->quiet_stats));
    self->idle_time  = ucs_time_from_sec(config->idle_time);
    self->quiet_next = 0;
    ucs_list_head_init(&self->rx_conns);
    ucs_list_head_init(&self->rx_active);
    ucs_list_head_init(&self->zombies);
    kh_init_inplace(uct_remapring_vconns, &self->qps);

    if (!uct_remapring_verbs_port_addr(dev->ctx, port, dev->gid_index,
                                       &self->addr, &self->ifindex)) {
        ucs_error("%s has no IP address", params->mode.device.dev_name);
        status = UCS_ERR_NO_DEVICE;
        goto err;
    }

    status = uct_remapring_verbs_iface_queues(self);
    if (status != UCS_OK) {
        goto err;
    }

    status = uct_remapring_verbs_iface_listen(self);
    if (status != UCS_OK) {
        goto err;
    }

    return UCS_OK;

err:
    uct_remapring_verbs_iface_release(self);
    return status;
}

static UCS_CLASS_CLEANUP_FUNC(uct_remapring_verbs_iface_t)
{
    uct_base_iface_progress_disable(&self->super.super.super,
                                    UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    uct_remapring_iface_warn_peers(&self->super);
    /* the rings and the registrations of the pool go before it */
    uct_remapring_verbs_iface_release(self);
}

UCS_CLASS_DEFINE(uct_remapring_verbs_iface_t, uct_remapring_iface_t);

static UCS_CLASS_DEFINE_NEW_FUNC(uct_remapring_verbs_iface_t, uct_iface_t,
                                 uct_md_h, uct_worker_h,
                                 const uct_iface_params_t *,
                                 const uct_iface_config_t *);
static UCS_CLASS_DEFINE_DELETE_FUNC(uct_remapring_verbs_iface_t, uct_iface_t);

UCT_TL_DEFINE_ENTRY(&uct_remapring_verbs_component, remaprdma,
                    uct_remapring_verbs_query_tl_devices,
                    uct_remapring_verbs_iface_t,
                    UCT_REMAPRING_VERBS_CONFIG_PREFIX,
                    uct_remapring_verbs_iface_config_table,
                    uct_remapring_verbs_iface_config_t);

UCT_SINGLE_TL_INIT(&uct_remapring_verbs_component, remaprdma, ctor, , )
