/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "remapring_ep.h"
#ifdef HAVE_VERBS
#include "remapring_verbs.h"
#endif

#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/string.h>
#include <ucs/sys/sys.h>
#include <uct/base/uct_worker.h>

#include <errno.h>
#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>


/*
 * The send side. A peer is this interface's connection to one receiving
 * interface (remapring_conn.h); every endpoint to that interface shares it,
 * and so its ring: UCT orders sends per endpoint, one ring orders them all.
 *
 * A peer fails when its wire fails (the receiver is gone), when the receiver
 * failed or released the connection or closed its interface (the shared
 * state words, read when the ring is out of credit, on ep_check and now and
 * then from progress), or when the receiver process exits (the interface's
 * watch, and every UCT_REMAPRING_PEER_STALL_CHECK sends refused for credit).
 * From then on every endpoint of the peer returns the failure from its
 * operations, keeps its pending requests for the user to purge, and has the
 * interface's error handler called for it once, from the worker's progress.
 */


/* UCT_CHECK_LENGTH for an unsigned length, which has no lower bound */
#define UCT_REMAPRING_CHECK_MAX(_length, _max, _name) \
    UCT_CHECK_PARAM((size_t)(_length) <= (size_t)(_max), \
                    "Invalid %s length: %zu (expected: <= %zu)", _name, \
                    (size_t)(_length), (size_t)(_max))

/* Sends refused for credit between two checks that the receiver lives */
#define UCT_REMAPRING_PEER_STALL_CHECK 1024

/* Hash buckets looked at per uct_remapring_ep_yield_some() call */
#define UCT_REMAPRING_YIELD_SCAN 8

enum {
    UCT_REMAPRING_EP_ERR_NONE,
    UCT_REMAPRING_EP_ERR_QUEUED,
    UCT_REMAPRING_EP_ERR_DELIVERED
};


static inline uct_remapring_iface_t *
uct_remapring_ep_iface(const uct_remapring_ep_t *ep)
{
    return ucs_derived_of(ep->super.super.iface, uct_remapring_iface_t);
}


/* ---------------------------------------------------------------- failure */

static unsigned uct_remapring_ep_err_progress(void *arg)
{
    uct_remapring_ep_t *ep       = arg;
    uct_remapring_iface_t *iface = uct_remapring_ep_iface(ep);
    ucs_status_t peer_status     = ep->peer->status;
    const char *reason           = ep->peer->reason;
    char name[sizeof(ep->peer->name)];
    ucs_status_t status;

    ucs_strncpy_zero(name, ep->peer->name, sizeof(name));
    ep->err_state = UCT_REMAPRING_EP_ERR_DELIVERED;
    --iface->tx.nerrs_queued;
    /* the handler may destroy the endpoint: nothing of it is used after */
    status = uct_iface_handle_ep_err(&iface->super.super, &ep->super.super,
                                     peer_status);
    ucs_log(uct_base_iface_failure_log_level(&iface->super, status,
                                             peer_status),
            "remapring: ep %p to %s: %s (%s)", arg, name, reason,
            ucs_status_string(peer_status));
    return 1;
}

static int uct_remapring_ep_err_match(const ucs_callbackq_elem_t *elem,
                                      void *arg)
{
    return (elem->cb == uct_remapring_ep_err_progress) && (elem->arg == arg);
}

/* Call the error handler for @a ep from the worker's progress, once */
static void uct_remapring_ep_schedule_err(uct_remapring_ep_t *ep)
{
    uct_remapring_iface_t *iface = uct_remapring_ep_iface(ep);

    if (ep->err_state != UCT_REMAPRING_EP_ERR_NONE) {
        return;
    }

    if (iface->super.err_handler == NULL) {
        ep->err_state = UCT_REMAPRING_EP_ERR_DELIVERED;
        ucs_diag("remapring: ep %p to %s: %s, and no error handler",
                 ep, ep->peer->name, ep->peer->reason);
        return;
    }

    ep->err_state = UCT_REMAPRING_EP_ERR_QUEUED;
    ++iface->tx.nerrs_queued;
    ucs_callbackq_add_safe(&iface->super.worker->super.progress_q,
                           uct_remapring_ep_err_progress, ep,
                           UCS_CALLBACKQ_FLAG_ONESHOT);
}

static void uct_remapring_ep_unblock(uct_remapring_ep_t *ep)
{
    if (ep->blocked) {
        ucs_list_del(&ep->list);
        ep->blocked = 0;
    }
}

/* The peer failed: every endpoint of it fails, once. Expected failures (the
 * receiver went away) are logged by the error callback at the interface's
 * failure level; the caller logs what it found wrong beyond that. */
void uct_remapring_peer_failed(uct_remapring_peer_t *peer,
                               ucs_status_t status, const char *reason)
{
    uct_remapring_ep_t *ep;

    if (peer->status != UCS_OK) {
        return;
    }

    ucs_debug("remapring: connection to %s failed: %s", peer->name, reason);
    peer->status = status;
    peer->reason = reason;
    ucs_list_for_each(ep, &peer->eps, peer_list) {
        /* pending requests stay for the user to purge */
        uct_remapring_ep_unblock(ep);
        uct_remapring_ep_schedule_err(ep);
    }
}

/* The interface's watch saw the receiver process exit */
static void uct_remapring_peer_exited(uct_remapring_proc_t *proc)
{
    uct_remapring_peer_t *peer = ucs_container_of(proc, uct_remapring_peer_t,
                                                  remote.proc);

    uct_remapring_peer_failed(peer, UCS_ERR_CONNECTION_RESET,
                              "the receiver process exited");
    /* it stays ready in the watch: stop watching */
    uct_remapring_proc_close(&peer->iface->watch, proc);
}

/* Fail the peer if the shared words say its connection is gone */
static void uct_remapring_peer_check_state(uct_remapring_peer_t *peer)
{
    const char *reason;
    ucs_status_t status;

    status = uct_remapring_remote_state(&peer->remote, &reason);
    if (UCS_STATUS_IS_ERR(status)) {
        uct_remapring_peer_failed(peer, status, reason);
    }
}

/* ----------------------------------------------------------------- peers */

static ucs_status_t
uct_remapring_peer_create(uct_remapring_iface_t *iface,
                          const uct_ep_params_t *params,
                          uct_remapring_peer_t **peer_p)
{
    const uct_remapring_iface_addr_t *addr = (const void*)params->iface_addr;
    uct_remapring_peer_t *peer;
    uct_remapring_wire_type_t wire;
    ucs_status_t status;
    size_t pool_size;
    char path[64];

    peer = ucs_calloc(1, sizeof(*peer), "uct_remapring_peer_t");
    if (peer == NULL) {
        ucs_error("remapring: failed to allocate a peer");
        return UCS_ERR_NO_MEMORY;
    }

    peer->iface   = iface;
    peer->status  = UCS_OK;
    peer->pool_fd = -1;
    ucs_list_head_init(&peer->eps);

#ifdef HAVE_VERBS
    if (iface->verbs != NULL) {
        status = uct_remapring_verbs_peer_connect(peer,
                                                  (const void*)
                                                  params->dev_addr,
                                                  (const void*)
                                                  params->iface_addr);
        if (status != UCS_OK) {
            ucs_free(peer);
            return status;
        }

        *peer_p = peer;
        return UCS_OK;
    }
#endif

    ucs_snprintf_zero(peer->name, sizeof(peer->name), "pid %d", addr->pid);
    status = uct_remapring_remote_attach(addr, &iface->watch,
                                         uct_remapring_peer_exited,
                                         &peer->remote);
    if (status != UCS_OK) {
        goto err_free;
    }

    /* The shm wire maps the receiver's pool memfd. Where it cannot be
     * opened (another user's process, a hardened /proc) the cma wire needs
     * only ptrace access */
    wire = iface->tx.wire;
    if (wire == UCT_REMAPRING_WIRE_SHM) {
        ucs_snprintf_zero(path, sizeof(path), "/proc/%d/fd/%d", addr->pid,
                          peer->remote.pool_fd);
        peer->pool_fd = open(path, O_RDWR | O_CLOEXEC);
        if (peer->pool_fd < 0) {
            ucs_diag("remapring: cannot open pool %s of pid %d (%m), using"
                     " the cma wire", path, addr->pid);
            wire = UCT_REMAPRING_WIRE_CMA;
        } else if (uct_remapring_pool_check_fd(peer->pool_fd, &pool_size) !=
                   UCS_OK) {
            /* it could shrink under our stores; the cma wire cannot fault */
            ucs_diag("remapring: pool %s of pid %d is not sealed against"
                     " shrinking, using the cma wire", path, addr->pid);
            close(peer->pool_fd);
            peer->pool_fd = -1;
            wire          = UCT_REMAPRING_WIRE_CMA;
        }
    }

    status = uct_remapring_remote_claim(&peer->remote, iface->id, wire);
    if (status != UCS_OK) {
        goto err_detach;
    }

    uct_remapring_md_set_in_use(iface->super.md);
    ucs_debug("remapring: iface %p connection %u to pid %d iface 0x%" PRIx64,
              iface, peer->remote.index, addr->pid, addr->iface_id);
    *peer_p = peer;
    return UCS_OK;

err_detach:
    if (peer->pool_fd >= 0) {
        close(peer->pool_fd);
    }
    uct_remapring_remote_detach(&peer->remote, &iface->watch);
err_free:
    ucs_free(peer);
    return status;
}

static void uct_remapring_peer_destroy(uct_remapring_iface_t *iface,
                                       uct_remapring_peer_t *peer)
{
    khiter_t iter;

    iter = kh_get(uct_remapring_peers, &iface->tx.peers,
                  peer->remote.iface_id);
    if ((iter != kh_end(&iface->tx.peers)) &&
        (kh_val(&iface->tx.peers, iter) == peer)) {
        kh_del(uct_remapring_peers, &iface->tx.peers, iter);
    }

    if (peer->wire != NULL) {
        uct_remapring_wire_destroy(peer->wire);
    }
#ifdef HAVE_VERBS
    if (peer->vconn != NULL) {
        /* as a destroyed endpoint's sends in flight are, on any wire */
        if (peer->backlog_pos < peer->backlog_len) {
            ucs_debug("remapring: %zu bytes of active messages to %s dropped:"
                      " the connection never came up", peer->backlog_len -
                      peer->backlog_pos, peer->name);
        }
        ucs_free(peer->backlog);
        uct_remapring_verbs_peer_destroy(peer);
        ucs_free(peer);
        return;
    }
#endif
    if (peer->pool_fd >= 0) {
        close(peer->pool_fd);
    }
    uct_remapring_remote_detach(&peer->remote, &iface->watch);
    ucs_free(peer);
}

/* The peer for the receiver at @a addr: the one this interface has, or a
 * new connection. A failed peer stays with its endpoints, and a new endpoint
 * gets a new connection. */
static ucs_status_t
uct_remapring_peer_get(uct_remapring_iface_t *iface,
                       const uct_ep_params_t *params,
                       uct_remapring_peer_t **peer_p)
{
    const uct_remapring_iface_addr_t *addr = (const void*)params->iface_addr;
    uint64_t iface_id;
    uct_remapring_peer_t *peer;
    ucs_status_t status;
    khiter_t iter;
    int ret;

#ifdef HAVE_VERBS
    iface_id = (iface->verbs != NULL) ?
               ((const uct_remapring_verbs_iface_addr_t*)
                params->iface_addr)->iface_id : addr->iface_id;
#else
    iface_id = addr->iface_id;
#endif
    iter = kh_get(uct_remapring_peers, &iface->tx.peers, iface_id);
    if (iter != kh_end(&iface->tx.peers)) {
        peer = kh_val(&iface->tx.peers, iter);
        if ((peer->vconn == NULL) && (peer->remote.proc.pid != addr->pid)) {
            ucs_error("remapring: address of pid %d names iface 0x%" PRIx64
                      " of pid %d", addr->pid, addr->iface_id,
                      peer->remote.proc.pid);
            return UCS_ERR_INVALID_PARAM;
        }

        if (peer->status == UCS_OK) {
            *peer_p = peer;
            return UCS_OK;
        }

        kh_del(uct_remapring_peers, &iface->tx.peers, iter);
    }

    status = uct_remapring_peer_create(iface, params, &peer);
    if (status != UCS_OK) {
        return status;
    }

    iter = kh_put(uct_remapring_peers, &iface->tx.peers, iface_id, &ret);
    if (ret == UCS_KH_PUT_FAILED) {
        ucs_error("remapring: failed to add a peer to the hash");
        uct_remapring_peer_destroy(iface, peer);
        return UCS_ERR_NO_MEMORY;
    }

    kh_val(&iface->tx.peers, iter) = peer;
    *peer_p                        = peer;
    return UCS_OK;
}

/* The shm wire: map the receiver's pool, which the claim declared (the
 * receiver then swaps held blocks in the slot table only, so there is no
 * going back to cma) */
static ucs_status_t
uct_remapring_peer_shm_wire(uct_remapring_peer_t *peer,
                            const uct_remapring_ring_info_t *info)
{
    uct_remapring_remote_t *remote = &peer->remote;
    ucs_status_t status;

    status = uct_remapring_wire_shm_create(
            peer->pool_fd, info->block_size, remote->pool_blocks,
            uct_remapring_ctl_slot_table(remote->ctl, remote->max_peers,
                                         remote->ring_slots, remote->index),
            (size_t)info->block_size * info->nslots, &peer->remote.conn->ring,
            &peer->wire);
    close(peer->pool_fd);
    peer->pool_fd = -1;
    return status;
}

/* The receiver makes the ring on its progress after the claim; until it is
 * ready, sends wait in the pending queue */
static UCS_F_NOINLINE ucs_status_t
uct_remapring_peer_connect(uct_remapring_peer_t *peer)
{
    uct_remapring_remote_t *remote = &peer->remote;
    uct_remapring_ring_info_t info;
    const char *reason;
    ucs_status_t status;

    if (peer->status != UCS_OK) {
        return peer->status;
    }

    if (peer->vconn != NULL) {
        /* the wire comes with the connection's ESTABLISHED event */
        return UCS_ERR_NO_RESOURCE;
    }

    status = uct_remapring_remote_state(&peer->remote, &reason);
    if (status == UCS_INPROGRESS) {
        return UCS_ERR_NO_RESOURCE;
    } else if (status != UCS_OK) {
        uct_remapring_peer_failed(peer, status, reason);
        return status;
    }

    info = remote->conn->ring.info;
    if ((info.block_size != remote->block_size) ||
        (info.nslots != remote->ring_slots)) {
        ucs_error("remapring: pid %d ring of %u slots of %u bytes does not"
                  " match its control area (%u of %u)",
                  remote->proc.pid, info.nslots, info.block_size,
                  remote->ring_slots, remote->block_size);
        uct_remapring_peer_failed(peer, UCS_ERR_INVALID_PARAM,
                                  "its ring does not match its control area");
        return UCS_ERR_INVALID_PARAM;
    }

    if (peer->pool_fd >= 0) {
        status = uct_remapring_peer_shm_wire(peer, &info);
    } else {
        status = uct_remapring_wire_cma_create(peer->remote.proc.pid,
                                               info.view_addr,
                                               (size_t)info.block_size *
                                                       info.nslots,
                                               &peer->remote.conn->ring,
                                               &peer->wire);
    }
    if (status != UCS_OK) {
        uct_remapring_peer_failed(peer, status, "no wire to its ring");
        return status;
    }

    status = uct_remapring_ring_writer_init(&peer->writer, &info, peer->wire);
    if (status != UCS_OK) {
        uct_remapring_wire_destroy(peer->wire);
        peer->wire = NULL;
        uct_remapring_peer_failed(peer, status, "its ring is not valid");
        return status;
    }

    return UCS_OK;
}

/* A send was refused for credit. The shm wire writes into memory that
 * outlives the receiver, so a receiver that is gone shows only as a ring
 * that never drains: look at the shared words, and now and then at the
 * process. */
static UCS_F_NOINLINE ucs_status_t
uct_remapring_peer_stalled(uct_remapring_peer_t *peer)
{
    if (peer->vconn != NULL) {
        /* a verbs peer hears of failures from its completions and CM */
        return (peer->status != UCS_OK) ? peer->status : UCS_ERR_NO_RESOURCE;
    }

    if (peer->status == UCS_OK) {
        uct_remapring_peer_check_state(peer);
    }

    /* the send may have answered a request to give back credit (the
     * writer does before it reloads the limit): a receiver asleep must wake
     * to take the slots back, and to see the stall */
    if (peer->status == UCS_OK) {
        uct_remapring_remote_ring_bell(&peer->remote);
    }

    if ((peer->status == UCS_OK) &&
        ((++peer->stalls % UCT_REMAPRING_PEER_STALL_CHECK) == 0) &&
        uct_remapring_proc_exited(&peer->remote.proc)) {
        uct_remapring_peer_failed(peer, UCS_ERR_CONNECTION_RESET,
                                  "the receiver process exited");
    }

    return (peer->status != UCS_OK) ? peer->status : UCS_ERR_NO_RESOURCE;
}

void uct_remapring_ep_check_peers(uct_remapring_iface_t *iface)
{
    uct_remapring_peer_t *peer;

    kh_foreach_value(&iface->tx.peers, peer, {
        if ((peer->status == UCS_OK) && (peer->remote.conn != NULL)) {
            uct_remapring_peer_check_state(peer);
        }
    })
}

void uct_remapring_ep_yield_some(uct_remapring_iface_t *iface)
{
    khash_t(uct_remapring_peers) *peers = &iface->tx.peers;
    uct_remapring_peer_t *peer;
    unsigned n;
    khiter_t i;

    if (kh_size(peers) == 0) {
        return;
    }

    for (n = 0; n < UCT_REMAPRING_YIELD_SCAN; ++n) {
        i = iface->tx.yield_cursor++;
        if (i >= kh_end(peers)) {
            iface->tx.yield_cursor = kh_begin(peers);
            continue;
        }

        if (!kh_exist(peers, i)) {
            continue;
        }

        peer = kh_val(peers, i);
        if ((peer->status == UCS_OK) && (peer->wire != NULL) &&
            (peer->vconn == NULL) &&
            uct_remapring_ring_writer_yield(&peer->writer)) {
            uct_remapring_remote_ring_bell(&peer->remote);
        }
        return;
    }
}

void uct_remapring_ep_cleanup_peers(uct_remapring_iface_t *iface)
{
    uct_remapring_peer_t *peer;

    kh_foreach_value(&iface->tx.peers, peer, {
        ucs_warn("remapring: iface %p closed with endpoints to %s", iface,
                 peer->name);
    })
}

/* ------------------------------------------------------------- endpoints */

static UCS_CLASS_INIT_FUNC(uct_remapring_ep_t, const uct_ep_params_t *params)
{
    uct_remapring_iface_t *iface = ucs_derived_of(params->iface,
                                                  uct_remapring_iface_t);
    const uct_remapring_iface_addr_t *addr;
    ucs_status_t status;

    UCT_EP_PARAMS_CHECK_DEV_IFACE_ADDRS(params);
    UCS_CLASS_CALL_SUPER_INIT(uct_base_ep_t, &iface->super);

    addr = (const uct_remapring_iface_addr_t*)params->iface_addr;
    if (iface->verbs == NULL) {
        status = uct_remapring_iface_check_peer(iface, addr,
                                                UCS_LOG_LEVEL_ERROR);
        if (status != UCS_OK) {
            return status;
        }
    }

    status = uct_remapring_peer_get(iface, params, &self->peer);
    if (status != UCS_OK) {
        return status;
    }

    self->blocked   = 0;
    self->err_state = UCT_REMAPRING_EP_ERR_NONE;
    ucs_arbiter_group_init(&self->arb_group);
    ucs_list_add_tail(&self->peer->eps, &self->peer_list);
    ucs_debug("remapring: ep %p to %s connection %u", self,
              self->peer->name, self->peer->remote.index);
    return UCS_OK;
}

static UCS_CLASS_CLEANUP_FUNC(uct_remapring_ep_t)
{
    uct_remapring_iface_t *iface = uct_remapring_ep_iface(self);

    /* requests the user left queued are dropped, as UCT's other transports
     * do, and said so */
    uct_remapring_ep_pending_purge(&self->super.super, NULL, NULL);
    ucs_arbiter_group_cleanup(&self->arb_group);
    if (self->err_state == UCT_REMAPRING_EP_ERR_QUEUED) {
        ucs_callbackq_remove_if(&iface->super.worker->super.progress_q,
                                uct_remapring_ep_err_match, self);
        --iface->tx.nerrs_queued;
    }

    ucs_list_del(&self->peer_list);
    if (ucs_list_is_empty(&self->peer->eps)) {
        uct_remapring_peer_destroy(iface, self->peer);
    }
}

UCS_CLASS_DEFINE(uct_remapring_ep_t, uct_base_ep_t);
UCS_CLASS_DEFINE_NEW_FUNC(uct_remapring_ep_t, uct_ep_t, const uct_ep_params_t*);
UCS_CLASS_DEFINE_DELETE_FUNC(uct_remapring_ep_t, uct_ep_t);


/* Whether @a ep must stay behind its pending requests: UCT sends in order,
 * except the requests being dispatched */
static UCS_F_ALWAYS_INLINE int
uct_remapring_ep_behind_pending(const uct_remapring_iface_t *iface,
                                uct_remapring_ep_t *ep)
{
    return ucs_unlikely(!ucs_arbiter_group_is_empty(&ep->arb_group)) &&
           (iface->tx.dispatching != ep);
}

/*
 * Before a verbs connection is up (the sender waits for the receiver's
 * reply to know its ring), active messages are copied to the peer's
 * backlog, as UCX's connect-to-iface transports accept sends before their
 * handshake: up to twice the largest bcopy, then UCS_ERR_NO_RESOURCE. Once
 * the ring is known they are written in order before anything newer.
 */
typedef struct {
    uint32_t length;
    uint8_t  am_id;
} UCS_S_PACKED uct_remapring_backlog_hdr_t;

#define UCT_REMAPRING_BACKLOG_ALIGN 8

static UCS_F_ALWAYS_INLINE int
uct_remapring_peer_connecting(const uct_remapring_peer_t *peer)
{
    return (peer->vconn != NULL) && (peer->wire == NULL) &&
           (peer->status == UCS_OK);
}

static size_t uct_remapring_backlog_size(const uct_remapring_iface_t *iface)
{
    return 2 * (iface->tx.max_bcopy + sizeof(uct_remapring_backlog_hdr_t) +
                UCT_REMAPRING_BACKLOG_ALIGN);
}

/* Room for @a max_length bytes of message in the backlog, or NULL */
static void *uct_remapring_backlog_reserve(uct_remapring_iface_t *iface,
                                           uct_remapring_peer_t *peer,
                                           size_t max_length)
{
    size_t size = uct_remapring_backlog_size(iface);

    if (peer->backlog == NULL) {
        peer->backlog = ucs_malloc(size, "remapring_backlog");
        if (peer->backlog == NULL) {
            return NULL;
        }
    }

    if (peer->backlog_len + sizeof(uct_remapring_backlog_hdr_t) +
        max_length > size) {
        return NULL;
    }

    return peer->backlog + peer->backlog_len +
           sizeof(uct_remapring_backlog_hdr_t);
}

static void uct_remapring_backlog_commit(uct_remapring_peer_t *peer,
                                         uint8_t id, size_t length)
{
    uct_remapring_backlog_hdr_t hdr = {.length = length, .am_id = id};

    memcpy(peer->backlog + peer->backlog_len, &hdr, sizeof(hdr));
    peer->backlog_len += ucs_align_up_pow2(sizeof(hdr) + length,
                                           UCT_REMAPRING_BACKLOG_ALIGN);
}

/* Keep a message of @a iov for the connection, or UCS_ERR_NO_RESOURCE */
static ucs_status_t
uct_remapring_backlog_add(uct_remapring_iface_t *iface,
                          uct_remapring_peer_t *peer, uint8_t id,
                          const struct iovec *iov, size_t iovcnt)
{
    size_t i, length = 0;
    char *p;

    for (i = 0; i < iovcnt; ++i) {
        length += iov[i].iov_len;
    }

    p = uct_remapring_backlog_reserve(iface, peer, length);
    if (p == NULL) {
        return UCS_ERR_NO_RESOURCE;
    }

    for (i = 0; i < iovcnt; ++i) {
        if (iov[i].iov_len != 0) { /* an empty piece may have no buffer */
            memcpy(p, iov[i].iov_base, iov[i].iov_len);
            p += iov[i].iov_len;
        }
    }

    uct_remapring_backlog_commit(peer, id, length);
    return UCS_OK;
}

ucs_status_t uct_remapring_peer_replay(uct_remapring_peer_t *peer)
{
    uct_remapring_backlog_hdr_t hdr;
    ucs_status_t status;
    struct iovec iov;

    if ((peer->wire == NULL) || (peer->status != UCS_OK)) {
        return (peer->status != UCS_OK) ? peer->status : UCS_ERR_NO_RESOURCE;
    }

    while (peer->backlog_pos < peer->backlog_len) {
        memcpy(&hdr, peer->backlog + peer->backlog_pos, sizeof(hdr));
        iov.iov_base = peer->backlog + peer->backlog_pos + sizeof(hdr);
        iov.iov_len  = hdr.length;
        status = uct_remapring_ring_writer_send(&peer->writer, hdr.am_id, 0,
                                                &iov, 1);
        if (status == UCS_ERR_NO_RESOURCE) {
            return uct_remapring_peer_stalled(peer);
        } else if (status != UCS_OK) {
            uct_remapring_peer_failed(peer, status,
                                      "a write into its ring failed");
            return status;
        }

        peer->backlog_pos += ucs_align_up_pow2(sizeof(hdr) + hdr.length,
                                               UCT_REMAPRING_BACKLOG_ALIGN);
    }

    ucs_free(peer->backlog);
    peer->backlog     = NULL;
    peer->backlog_len = peer->backlog_pos = 0;
    return UCS_OK;
}

/* The peer's writer, once its ring is ready; else the status to return */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_remapring_ep_ready(uct_remapring_iface_t *iface, uct_remapring_ep_t *ep)
{
    uct_remapring_peer_t *peer = ep->peer;

    if (ucs_unlikely((peer->wire == NULL) || (peer->status != UCS_OK))) {
        return uct_remapring_peer_connect(peer);
    }

    if (uct_remapring_ep_behind_pending(iface, ep)) {
        return UCS_ERR_NO_RESOURCE;
    }

    /* what was kept before the connection goes first */
    if (ucs_unlikely(peer->backlog != NULL)) {
        return uct_remapring_peer_replay(peer);
    }

    return UCS_OK;
}

/* Whether a send that found @a ep not ready with @a status may be kept
 * for the connection: the verbs connection is on its way and nothing waits
 * before it */
static int uct_remapring_ep_may_keep(uct_remapring_iface_t *iface,
                                     uct_remapring_ep_t *ep,
                                     ucs_status_t status)
{
    return (status == UCS_ERR_NO_RESOURCE) &&
           uct_remapring_peer_connecting(ep->peer) &&
           !uct_remapring_ep_behind_pending(iface, ep);
}

/* A send that found its endpoint not ready with @a status: kept if it may */
static UCS_F_NOINLINE ucs_status_t
uct_remapring_ep_send_early(uct_remapring_iface_t *iface,
                            uct_remapring_ep_t *ep, ucs_status_t status,
                            uint8_t id, const struct iovec *iov,
                            size_t iovcnt)
{
    if (!uct_remapring_ep_may_keep(iface, ep, status)) {
        return status;
    }

    return uct_remapring_backlog_add(iface, ep->peer, id, iov, iovcnt);
}

/* Send on a ready endpoint (uct_remapring_ep_ready() returned UCS_OK) */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_remapring_ep_send_ready(uct_remapring_ep_t *ep, uint8_t id,
                            const struct iovec *iov, size_t iovcnt)
{
    uct_remapring_peer_t *peer = ep->peer;
    ucs_status_t status;

    status = uct_remapring_ring_writer_send(&peer->writer, id, 0, iov, iovcnt);
    if (ucs_likely(status == UCS_OK)) {
        /* the verbs wire's immediate is its doorbell */
        if (ucs_likely(peer->vconn == NULL)) {
            uct_remapring_remote_ring_bell(&peer->remote);
        }
        return UCS_OK;
    } else if (status == UCS_ERR_NO_RESOURCE) {
        return uct_remapring_peer_stalled(peer);
    } else if (status != UCS_ERR_EXCEEDS_LIMIT) {
        uct_remapring_peer_failed(peer, status,
                                  "a write into its ring failed");
    }

    return status;
}

/* Flatten a UCT iov (count/stride unsupported beyond one element) */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_remapring_ep_iov(const uct_iov_t *iov, size_t iovcnt, struct iovec *out,
                     size_t *total_p)
{
    size_t i, total = 0;

    for (i = 0; i < iovcnt; ++i) {
        if (ucs_unlikely(iov[i].count > 1)) {
            ucs_error("remapring: iov count %u is not supported",
                      iov[i].count);
            return UCS_ERR_UNSUPPORTED;
        }

        out[i].iov_base = iov[i].buffer;
        out[i].iov_len  = iov[i].length * iov[i].count;
        total          += out[i].iov_len;
    }

    *total_p = total;
    return UCS_OK;
}

/* Commit the record of the direct path @a d, whose payload is stored, and
 * ring the bell: a wire with direct stores (shm) has a doorbell of its own */
static UCS_F_ALWAYS_INLINE void
uct_remapring_ep_direct_commit(uct_remapring_ep_t *ep,
                               const uct_remapring_ring_direct_t *d, uint8_t id,
                               size_t length)
{
    uct_remapring_ring_writer_direct_commit(&ep->peer->writer, d, id, length);
    uct_remapring_remote_ring_bell(&ep->peer->remote);
}

/* Send @a iovcnt pieces of @a length bytes in all on a ready endpoint
 * (uct_remapring_ep_ready() returned UCS_OK): the direct way if the record
 * goes that way, else the general way */
static UCS_F_ALWAYS_INLINE ucs_status_t uct_remapring_ep_send_iov_ready(
        uct_remapring_ep_t *ep, uint8_t id, const struct iovec *iov,
        size_t iovcnt, size_t length)
{
    uct_remapring_ring_direct_t d;
    size_t i, pos;

    if (ucs_unlikely(!uct_remapring_ring_writer_direct_begin(&ep->peer->writer,
                                                             length, &d))) {
        return uct_remapring_ep_send_ready(ep, id, iov, iovcnt);
    }

    /* an empty piece may have no buffer: memcpy must not see it */
    for (i = 0, pos = 0; i < iovcnt; ++i) {
        if (iov[i].iov_len != 0) {
            memcpy(d.payload + pos, iov[i].iov_base, iov[i].iov_len);
            pos += iov[i].iov_len;
        }
    }
    uct_remapring_ep_direct_commit(ep, &d, id, length);
    return UCS_OK;
}

/* Send @a iovcnt pieces of @a length bytes in all: kept for the
 * connection if the endpoint is not ready (uct_remapring_ep_send_early),
 * else the direct or the general way */
static UCS_F_ALWAYS_INLINE ucs_status_t uct_remapring_ep_send(
        uct_remapring_iface_t *iface, uct_remapring_ep_t *ep, uint8_t id,
        const struct iovec *iov, size_t iovcnt, size_t length)
{
    ucs_status_t status = uct_remapring_ep_ready(iface, ep);

    if (ucs_unlikely(status != UCS_OK)) {
        return uct_remapring_ep_send_early(iface, ep, status, id, iov, iovcnt);
    }

    return uct_remapring_ep_send_iov_ready(ep, id, iov, iovcnt, length);
}

ucs_status_t uct_remapring_ep_am_short(uct_ep_h tl_ep, uint8_t id,
                                       uint64_t header, const void *payload,
                                       unsigned length)
{
    uct_remapring_ep_t *ep       = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    uct_remapring_iface_t *iface = uct_remapring_ep_iface(ep);
    struct iovec iov[2]          = {
        {.iov_base = &header, .iov_len = sizeof(header)},
        {.iov_base = (void*)payload, .iov_len = length}
    };
    ucs_status_t status;
    uct_remapring_ring_direct_t d;

    UCT_CHECK_AM_ID(id);
    UCT_CHECK_LENGTH(sizeof(header) + length, 0, iface->tx.max_short,
                     "am_short");
    status = uct_remapring_ep_ready(iface, ep);
    if (ucs_unlikely(status != UCS_OK)) {
        status = uct_remapring_ep_send_early(iface, ep, status, id, iov, 2);
    } else if (ucs_likely(uct_remapring_ring_writer_direct_begin(
                       &ep->peer->writer, sizeof(header) + length, &d))) {
        memcpy(d.payload, &header, sizeof(header));
        if (length != 0) { /* no payload may come with no buffer */
            memcpy(d.payload + sizeof(header), payload, length);
        }
        uct_remapring_ep_direct_commit(ep, &d, id, sizeof(header) + length);
    } else {
        status = uct_remapring_ep_send_ready(ep, id, iov, 2);
    }

    if (ucs_likely(status == UCS_OK)) {
        UCT_TL_EP_STAT_OP(&ep->super, AM, SHORT, sizeof(header) + length);
        uct_iface_trace_am(&iface->super, UCT_AM_TRACE_TYPE_SEND, id, &header,
                           sizeof(header) + length, "TX: AM_SHORT");
    }

    return status;
}

ucs_status_t uct_remapring_ep_am_short_iov(uct_ep_h tl_ep, uint8_t id,
                                           const uct_iov_t *iov,
                                           size_t iovcnt)
{
    uct_remapring_ep_t *ep       = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    uct_remapring_iface_t *iface = uct_remapring_ep_iface(ep);
    struct iovec vec[UCT_REMAPRING_MAX_IOV];
    ucs_status_t status;
    size_t length;

    UCT_CHECK_AM_ID(id);
    UCT_CHECK_IOV_SIZE(iovcnt, UCT_REMAPRING_MAX_IOV,
                       "uct_remapring_ep_am_short_iov");
    status = uct_remapring_ep_iov(iov, iovcnt, vec, &length);
    if (status != UCS_OK) {
        return status;
    }

    UCT_CHECK_LENGTH(length, 0, iface->tx.max_short, "am_short_iov");
    status = uct_remapring_ep_send(iface, ep, id, vec, iovcnt, length);

    if (ucs_likely(status == UCS_OK)) {
        UCT_TL_EP_STAT_OP(&ep->super, AM, SHORT, length);
        uct_iface_trace_am(&iface->super, UCT_AM_TRACE_TYPE_SEND, id,
                           (iovcnt > 0) ? vec[0].iov_base : NULL,
                           (iovcnt > 0) ? vec[0].iov_len : 0,
                           "TX: AM_SHORT_IOV");
    }

    return status;
}

ssize_t uct_remapring_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id,
                                  uct_pack_callback_t pack_cb, void *arg,
                                  unsigned flags)
{
    uct_remapring_ep_t *ep       = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    uct_remapring_iface_t *iface = uct_remapring_ep_iface(ep);
    struct iovec iov;
    ucs_status_t status;

    UCT_CHECK_AM_ID(id);
    status = uct_remapring_ep_ready(iface, ep);
    if (ucs_unlikely(status != UCS_OK)) {
        if (!uct_remapring_ep_may_keep(iface, ep, status) ||
            ((iov.iov_base = uct_remapring_backlog_reserve(
                      iface, ep->peer, iface->tx.max_bcopy)) == NULL)) {
            return status;
        }

        /* kept for the connection, packed in place */
        iov.iov_len = pack_cb(iov.iov_base, arg);
        UCT_CHECK_LENGTH(iov.iov_len, 0, iface->tx.max_bcopy, "am_bcopy");
        uct_remapring_backlog_commit(ep->peer, id, iov.iov_len);
        goto out;
    }

    /* the packer cannot write into another process: pack here, then
     * check credit for the real size */
    if (!uct_remapring_ring_writer_can_send(&ep->peer->writer, 0)) {
        return uct_remapring_peer_stalled(ep->peer);
    }

    iov.iov_base = iface->tx.bounce;
    iov.iov_len  = pack_cb(iface->tx.bounce, arg);
    UCT_CHECK_LENGTH(iov.iov_len, 0, iface->tx.max_bcopy, "am_bcopy");

    status = uct_remapring_ep_send_iov_ready(ep, id, &iov, 1, iov.iov_len);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

out:
    UCT_TL_EP_STAT_OP(&ep->super, AM, BCOPY, iov.iov_len);
    uct_iface_trace_am(&iface->super, UCT_AM_TRACE_TYPE_SEND, id,
                       iov.iov_base, iov.iov_len, "TX: AM_BCOPY");
    return iov.iov_len;
}

ucs_status_t uct_remapring_ep_am_zcopy(uct_ep_h tl_ep, uint8_t id,
                                       const void *header,
                                       unsigned header_length,
                                       const uct_iov_t *iov, size_t iovcnt,
                                       unsigned flags, uct_completion_t *comp)
{
    uct_remapring_ep_t *ep       = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    uct_remapring_iface_t *iface = uct_remapring_ep_iface(ep);
    struct iovec vec[UCT_REMAPRING_MAX_IOV + 1];
    ucs_status_t status;
    size_t length;

    UCT_CHECK_AM_ID(id);
    UCT_CHECK_IOV_SIZE(iovcnt, UCT_REMAPRING_MAX_IOV,
                       "uct_remapring_ep_am_zcopy");
    UCT_REMAPRING_CHECK_MAX(header_length, UCT_REMAPRING_AM_MAX_HDR,
                            "am_zcopy header");

    vec[0].iov_base = (void*)header;
    vec[0].iov_len  = header_length;
    status          = uct_remapring_ep_iov(iov, iovcnt, vec + 1, &length);
    if (status != UCS_OK) {
        return status;
    }

    UCT_CHECK_LENGTH(length, 0, iface->tx.max_bcopy - UCT_REMAPRING_AM_MAX_HDR,
                     "am_zcopy");
    status = uct_remapring_ep_send(iface, ep, id, vec, iovcnt + 1,
                                   header_length + length);
    if (ucs_likely(status == UCS_OK)) {
        UCT_TL_EP_STAT_OP(&ep->super, AM, ZCOPY, header_length + length);
        uct_iface_trace_am(&iface->super, UCT_AM_TRACE_TYPE_SEND, id, header,
                           header_length, "TX: AM_ZCOPY");
    }

    /* the bytes are in the receiver's ring: complete at once */
    return status;
}

/* One process_vm_readv/writev pass over a whole iov, retried on partial
 * transfers */
static ucs_status_t
uct_remapring_ep_rma_vec(uct_remapring_ep_t *ep, struct iovec *local,
                         size_t iovcnt, size_t length, uint64_t remote_addr,
                         uct_rkey_t rkey, int write)
{
    uct_remapring_peer_t *peer = ep->peer;
    pid_t pid                  = peer->remote.proc.pid;
    struct iovec remote;
    ucs_status_t status;
    size_t done, i;
    ssize_t ret;

    if (ucs_unlikely(peer->status != UCS_OK)) {
        return peer->status;
    } else if (length == 0) {
        return UCS_OK; /* nothing to move, whatever the key */
    }

    status = uct_remapring_rkey_check(rkey, pid, remote_addr, length);
    if (status != UCS_OK) {
        return status;
    }

    for (done = 0, i = 0; done < length;) {
        remote.iov_base = (void*)(remote_addr + done);
        remote.iov_len  = length - done;
        ret = write ? process_vm_writev(pid, local + i, iovcnt - i, &remote, 1,
                                        0) :
                      process_vm_readv(pid, local + i, iovcnt - i, &remote, 1,
                                       0);
        if (ret < 0) {
            if (errno == EINTR) {
                continue;
            } else if (errno == ESRCH) {
                /* an ordinary peer failure, reported as such */
                uct_remapring_peer_failed(peer, UCS_ERR_CONNECTION_RESET,
                                          "the receiver process exited");
                return UCS_ERR_CONNECTION_RESET;
            }

            ucs_error("remapring: process_vm_%s(pid %d, %p, %zu) failed: %m",
                      write ? "writev" : "readv", pid, remote.iov_base,
                      remote.iov_len);
            return UCS_ERR_IO_ERROR;
        } else if (ret == 0) {
            ucs_error("remapring: process_vm_%s(pid %d, %p, %zu) made no"
                      " progress", write ? "writev" : "readv", pid,
                      remote.iov_base, remote.iov_len);
            return UCS_ERR_IO_ERROR;
        }

        done += ret;
        /* skip the local pieces that are done */
        while ((i < iovcnt) && ((size_t)ret >= local[i].iov_len)) {
            ret -= local[i++].iov_len;
        }
        if (i < iovcnt) {
            local[i].iov_base = UCS_PTR_BYTE_OFFSET(local[i].iov_base, ret);
            local[i].iov_len -= ret;
        }
    }

    return UCS_OK;
}

static ucs_status_t
uct_remapring_ep_rma(uct_remapring_ep_t *ep, const uct_iov_t *iov,
                     size_t iovcnt, uint64_t remote_addr, uct_rkey_t rkey,
                     int write)
{
    struct iovec local[UCT_REMAPRING_MAX_IOV];
    ucs_status_t status;
    size_t length;

    UCT_CHECK_IOV_SIZE(iovcnt, UCT_REMAPRING_MAX_IOV, "uct_remapring_ep_rma");
    status = uct_remapring_ep_iov(iov, iovcnt, local, &length);
    if (status != UCS_OK) {
        return status;
    }

    return uct_remapring_ep_rma_vec(ep, local, iovcnt, length, remote_addr,
                                    rkey, write);
}

/* One piece of local memory to or from the peer */
static ucs_status_t
uct_remapring_ep_rma_buf(uct_remapring_ep_t *ep, void *buffer, size_t length,
                         uint64_t remote_addr, uct_rkey_t rkey, int write)
{
    struct iovec local = {.iov_base = buffer, .iov_len = length};

    return uct_remapring_ep_rma_vec(ep, &local, 1, length, remote_addr, rkey,
                                    write);
}

ucs_status_t uct_remapring_ep_put_short(uct_ep_h tl_ep, const void *buffer,
                                        unsigned length, uint64_t remote_addr,
                                        uct_rkey_t rkey)
{
    uct_remapring_ep_t *ep       = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    uct_remapring_iface_t *iface = uct_remapring_ep_iface(ep);
    ucs_status_t status;

    UCT_REMAPRING_CHECK_MAX(length, iface->tx.max_short, "put_short");
    status = uct_remapring_ep_rma_buf(ep, (void*)buffer, length, remote_addr,
                                      rkey, 1);
    if (status == UCS_OK) {
        UCT_TL_EP_STAT_OP(&ep->super, PUT, SHORT, length);
    }

    return status;
}

ssize_t uct_remapring_ep_put_bcopy(uct_ep_h tl_ep, uct_pack_callback_t pack_cb,
                                   void *arg, uint64_t remote_addr,
                                   uct_rkey_t rkey)
{
    uct_remapring_ep_t *ep       = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    uct_remapring_iface_t *iface = uct_remapring_ep_iface(ep);
    ucs_status_t status;
    size_t length;

    length = pack_cb(iface->tx.bounce, arg);
    UCT_CHECK_LENGTH(length, 0, iface->tx.max_bcopy, "put_bcopy");
    status = uct_remapring_ep_rma_buf(ep, iface->tx.bounce, length,
                                      remote_addr, rkey, 1);
    if (status != UCS_OK) {
        return status;
    }

    UCT_TL_EP_STAT_OP(&ep->super, PUT, BCOPY, length);
    return length;
}

ucs_status_t uct_remapring_ep_get_short(uct_ep_h tl_ep, void *buffer,
                                        unsigned length, uint64_t remote_addr,
                                        uct_rkey_t rkey)
{
    uct_remapring_ep_t *ep       = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    uct_remapring_iface_t *iface = uct_remapring_ep_iface(ep);
    ucs_status_t status;

    UCT_REMAPRING_CHECK_MAX(length, iface->tx.max_short, "get_short");
    status = uct_remapring_ep_rma_buf(ep, buffer, length, remote_addr, rkey,
                                      0);
    if (status == UCS_OK) {
        UCT_TL_EP_STAT_OP(&ep->super, GET, SHORT, length);
    }

    return status;
}

ucs_status_t uct_remapring_ep_get_bcopy(uct_ep_h tl_ep,
                                        uct_unpack_callback_t unpack_cb,
                                        void *arg, size_t length,
                                        uint64_t remote_addr, uct_rkey_t rkey,
                                        uct_completion_t *comp)
{
    uct_remapring_ep_t *ep       = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    uct_remapring_iface_t *iface = uct_remapring_ep_iface(ep);
    ucs_status_t status;

    UCT_CHECK_LENGTH(length, 0, iface->tx.max_bcopy, "get_bcopy");
    status = uct_remapring_ep_rma_buf(ep, iface->tx.bounce, length,
                                      remote_addr, rkey, 0);
    if (status != UCS_OK) {
        return status;
    }

    /* the bytes are here: complete at once */
    unpack_cb(arg, iface->tx.bounce, length);
    UCT_TL_EP_STAT_OP(&ep->super, GET, BCOPY, length);
    return UCS_OK;
}

ucs_status_t uct_remapring_ep_put_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                        size_t iovcnt, uint64_t remote_addr,
                                        uct_rkey_t rkey,
                                        uct_completion_t *comp)
{
    uct_remapring_ep_t *ep = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    ucs_status_t status;

    status = uct_remapring_ep_rma(ep, iov, iovcnt, remote_addr, rkey, 1);
    if (status == UCS_OK) {
        UCT_TL_EP_STAT_OP(&ep->super, PUT, ZCOPY,
                          uct_iov_total_length(iov, iovcnt));
    }

    return status;
}

ucs_status_t uct_remapring_ep_get_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                        size_t iovcnt, uint64_t remote_addr,
                                        uct_rkey_t rkey,
                                        uct_completion_t *comp)
{
    uct_remapring_ep_t *ep = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    ucs_status_t status;

    status = uct_remapring_ep_rma(ep, iov, iovcnt, remote_addr, rkey, 0);
    if (status == UCS_OK) {
        UCT_TL_EP_STAT_OP(&ep->super, GET, ZCOPY,
                          uct_iov_total_length(iov, iovcnt));
    }

    return status;
}

/* ---------------------------------------------------------------- pending */

/* Whether a record of @a length (SIZE_MAX: the largest) could go now, the
 * receiver's released head reloaded. pending_add asks for the largest: the
 * caller's send may need that much, and UCP retries a BUSY answer without
 * progressing, so a wrong BUSY locks two senders up. */
static int uct_remapring_ep_can_send(uct_remapring_ep_t *ep, size_t length)
{
    uct_remapring_peer_t *peer = ep->peer;

    if ((peer->wire == NULL) && (uct_remapring_peer_connect(peer) != UCS_OK)) {
        return 0;
    }

    if (length == SIZE_MAX) {
        length = uct_remapring_ring_writer_max_payload(&peer->writer);
    }

#ifdef HAVE_VERBS
    /* the verbs wire also needs send requests and staging room, freed by
     * completions only, and what was kept before the connection sent */
    if ((peer->vconn != NULL) &&
        (!uct_remapring_verbs_peer_can_post(peer, length) ||
         ((peer->backlog != NULL) &&
          (uct_remapring_peer_replay(peer) != UCS_OK)))) {
        return 0;
    }
#endif

    if (uct_remapring_ring_writer_can_send(&peer->writer, length)) {
        return 1;
    }

    uct_remapring_peer_stalled(peer);
    return 0;
}

static void uct_remapring_ep_block(uct_remapring_iface_t *iface,
                                   uct_remapring_ep_t *ep)
{
    if (!ep->blocked && (ep->peer->status == UCS_OK)) {
        ep->blocked = 1;
        ucs_list_add_tail(&iface->tx.blocked, &ep->list);
    }
}

ucs_status_t uct_remapring_ep_pending_add(uct_ep_h tl_ep,
                                          uct_pending_req_t *req,
                                          unsigned flags)
{
    uct_remapring_ep_t *ep       = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    uct_remapring_iface_t *iface = uct_remapring_ep_iface(ep);

    if (ucs_arbiter_group_is_empty(&ep->arb_group) && !ep->blocked &&
        (ep->peer->status == UCS_OK) &&
        uct_remapring_ep_can_send(ep, SIZE_MAX)) {
        return UCS_ERR_BUSY;
    }

    /* dispatched once the ring has credit again; on a failed peer, kept for
     * the user to purge */
    uct_pending_req_arb_group_push(&ep->arb_group, req);
    uct_remapring_ep_block(iface, ep);
    UCT_TL_EP_STAT_PEND(&ep->super);
    return UCS_OK;
}

static ucs_arbiter_cb_result_t
uct_remapring_ep_process_pending(ucs_arbiter_t *arbiter,
                                 ucs_arbiter_group_t *group,
                                 ucs_arbiter_elem_t *elem, void *arg)
{
    uct_remapring_iface_t *iface = arg;
    uct_remapring_ep_t *ep       = ucs_container_of(group, uct_remapring_ep_t,
                                                    arb_group);
    uct_pending_req_t *req       = ucs_container_of(elem, uct_pending_req_t,
                                                    priv);
    ucs_status_t status;

    iface->tx.dispatching = ep;
    status                = req->func(req);
    iface->tx.dispatching = NULL;

    if (status == UCS_OK) {
        return UCS_ARBITER_CB_RESULT_REMOVE_ELEM;
    } else if (status == UCS_INPROGRESS) {
        return UCS_ARBITER_CB_RESULT_NEXT_GROUP;
    }

    uct_remapring_ep_block(iface, ep);
    return UCS_ARBITER_CB_RESULT_DESCHED_GROUP;
}

unsigned uct_remapring_ep_progress_pending(uct_remapring_iface_t *iface)
{
    uct_remapring_ep_t *ep, *tmp;
    unsigned count = 0;

    if (ucs_likely(ucs_list_is_empty(&iface->tx.blocked))) {
        return 0;
    }

    ucs_list_for_each_safe(ep, tmp, &iface->tx.blocked, list) {
        if (uct_remapring_ep_can_send(ep, 0)) {
            uct_remapring_ep_unblock(ep);
            ucs_arbiter_group_schedule(&iface->tx.arbiter, &ep->arb_group);
            ++count;
        }
    }

    if (count > 0) {
        ucs_arbiter_dispatch(&iface->tx.arbiter, 1,
                             uct_remapring_ep_process_pending, iface);
    }

    return count;
}

static ucs_arbiter_cb_result_t
uct_remapring_ep_purge_cb(ucs_arbiter_t *arbiter, ucs_arbiter_group_t *group,
                          ucs_arbiter_elem_t *elem, void *arg)
{
    uct_purge_cb_args_t *args = arg;
    uct_pending_req_t *req    = ucs_container_of(elem, uct_pending_req_t,
                                                 priv);

    if (args->cb != NULL) {
        args->cb(req, args->arg);
    } else {
        ucs_warn("remapring: ep %p cancelling user pending request %p",
                 ucs_container_of(group, uct_remapring_ep_t, arb_group), req);
    }

    return UCS_ARBITER_CB_RESULT_REMOVE_ELEM;
}

void uct_remapring_ep_pending_purge(uct_ep_h tl_ep,
                                    uct_pending_purge_callback_t cb,
                                    void *arg)
{
    uct_remapring_ep_t *ep       = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    uct_remapring_iface_t *iface = uct_remapring_ep_iface(ep);
    uct_purge_cb_args_t args     = {cb, arg};

    ucs_arbiter_group_purge(&iface->tx.arbiter, &ep->arb_group,
                            uct_remapring_ep_purge_cb, &args);
    uct_remapring_ep_unblock(ep);
}

ucs_status_t uct_remapring_ep_flush(uct_ep_h tl_ep, unsigned flags,
                                    uct_completion_t *comp)
{
    uct_remapring_ep_t *ep       = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    uct_remapring_iface_t *iface = uct_remapring_ep_iface(ep);

    if (flags & UCT_FLUSH_FLAG_CANCEL) {
        /* nothing is in flight; pending requests are the user's to purge */
        return UCS_OK;
    }

    /* every send was in the receiver's memory when it returned; a flush
     * after pending requests waits its turn behind them */
    if (uct_remapring_ep_behind_pending(iface, ep)) {
        UCT_TL_EP_STAT_FLUSH_WAIT(&ep->super);
        return UCS_ERR_NO_RESOURCE;
    }

    UCT_TL_EP_STAT_FLUSH(&ep->super);
    return UCS_OK;
}

ucs_status_t uct_remapring_ep_check(uct_ep_h tl_ep, unsigned flags,
                                    uct_completion_t *comp)
{
    uct_remapring_ep_t *ep     = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    uct_remapring_peer_t *peer = ep->peer;

    UCT_EP_KEEPALIVE_CHECK_PARAM(flags, comp);
    if (peer->vconn != NULL) {
        /* the connection manager and the completions see a failure */
        return UCS_OK;
    }

    if (peer->status == UCS_OK) {
        uct_remapring_peer_check_state(peer);
    }

    if ((peer->status == UCS_OK) &&
        uct_remapring_proc_exited(&peer->remote.proc)) {
        uct_remapring_peer_failed(peer, UCS_ERR_CONNECTION_RESET,
                                  "the receiver process exited");
    }

    return UCS_OK;
}
