/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "remapring_sm_conn.h"

#include <uct/ib/remapring/base/remapring_md.h>

#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/string.h>

#include <fcntl.h>
#include <inttypes.h>
#include <unistd.h>


/* Free connections kept with a ring made in advance */
#define UCT_REMAPRING_RX_OFFERS 2

/* Sends refused for credit between two checks that the receiver lives */
#define UCT_REMAPRING_PEER_STALL_CHECK 1024

/* Hash buckets looked at per uct_remapring_sm_yield_some() call */
#define UCT_REMAPRING_YIELD_SCAN 8


/* =============================================================== receiver */

static void uct_remapring_rx_set_idle(uct_remapring_rx_conn_t *rx_conn)
{
    if (rx_conn->active != UCT_REMAPRING_RX_IDLE) {
        rx_conn->active = UCT_REMAPRING_RX_IDLE;
        ucs_list_del(&rx_conn->list);
    }
}

void uct_remapring_rx_set_active(uct_remapring_sm_iface_t *iface,
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
void uct_remapring_rx_set_asleep(uct_remapring_sm_iface_t *iface,
                                 uct_remapring_rx_conn_t *rx_conn)
{
    uct_remapring_rx_set_idle(rx_conn);
    rx_conn->active = UCT_REMAPRING_RX_ASLEEP;
    ucs_list_add_tail(&iface->rx.asleep, &rx_conn->list);
}

/* One sleeping ring, the next in turn: awake if a record or a close came
 * without its bell (remapring_sm_ctl.h, Doorbells) */
void uct_remapring_rx_sweep(uct_remapring_sm_iface_t *iface)
{
    uct_remapring_rx_conn_t *rx_conn = ucs_list_head(&iface->rx.asleep,
                                                     uct_remapring_rx_conn_t,
                                                     list);
    unsigned index                   = rx_conn - iface->rx.conns;

    /* to the back first: whatever happens below, the next sweep looks at
     * the next ring */
    ucs_list_del(&rx_conn->list);
    ucs_list_add_tail(&iface->rx.asleep, &rx_conn->list);

    if (uct_remapring_conn_state(&iface->rx.ctl.conns[index]) !=
        UCT_REMAPRING_CONN_READY) {
        /* as if its bell rang: a close, or a state out of turn */
        uct_remapring_rx_conn_wake(iface, index);
        iface->rx.nswept++;
    } else if (!remapring_ring_is_empty(rx_conn->ring)) {
        uct_remapring_rx_set_active(iface, rx_conn);
        iface->rx.nswept++;
    }
}

/* Let go of a connection's ring (held blocks stay until released) and of
 * its sender */
void uct_remapring_rx_conn_reset(uct_remapring_sm_iface_t *iface,
                                 uct_remapring_rx_conn_t *rx_conn)
{
    uct_remapring_rx_set_idle(rx_conn);
    if (rx_conn->ring != NULL) {
        remapring_ring_destroy(rx_conn->ring);
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

/* Our connection to the interface @a sender_id, if we have one */
static uct_remapring_sm_peer_t *
uct_remapring_sm_peer_of(uct_remapring_sm_iface_t *iface, uint64_t sender_id)
{
    khash_t(uct_remapring_peers) *peers = &iface->super.tx.peers;
    khiter_t i = kh_get(uct_remapring_peers, peers, sender_id);

    return (i == kh_end(peers)) ?
                   NULL :
                   ucs_derived_of(kh_val(peers, i), uct_remapring_sm_peer_t);
}

/* Whether @a rx_conn holds a ring of a sender that connected to it (not
 * one offered to any sender, nor one that failed) */
static int uct_remapring_rx_conn_taken(const uct_remapring_rx_conn_t *rx_conn)
{
    return (rx_conn->ring != NULL) && !rx_conn->offered && !rx_conn->failed;
}

/* Whether a connection other than @a index from the interface @a sender_id
 * is live */
static int uct_remapring_rx_sender_connected(uct_remapring_sm_iface_t *iface,
                                             unsigned index, uint64_t sender_id)
{
    const uct_remapring_rx_conn_t *rx_conn;
    unsigned i;

    for (i = 0; i < iface->rx.ctl.max_peers; ++i) {
        rx_conn = &iface->rx.conns[i];
        if ((i != index) && uct_remapring_rx_conn_taken(rx_conn) &&
            (rx_conn->sender_id == sender_id) &&
            (uct_remapring_conn_state(&iface->rx.ctl.conns[i]) !=
             UCT_REMAPRING_CONN_CLOSED)) {
            return 1;
        }
    }

    return 0;
}

/* The sender of connection @a index closed it with RESET: the upper layer
 * on that side dropped its endpoints to us (UCP's force close). UCP learns
 * it over a transport that connects endpoint to endpoint; here our own
 * connection to that interface fails at its next keepalive check
 * (uct_remapring_sm_peer_check), which UCP makes only on endpoints that
 * handle peer failure, unless that interface has connected again. */
static void uct_remapring_rx_sender_reset(uct_remapring_sm_iface_t *iface,
                                          unsigned index)
{
    uct_remapring_rx_conn_t *rx_conn = &iface->rx.conns[index];
    uct_remapring_sm_peer_t *peer;

    if (!uct_remapring_rx_conn_taken(rx_conn) ||
        !uct_remapring_conn_was_reset(&iface->rx.ctl.conns[index]) ||
        uct_remapring_rx_sender_connected(iface, index, rx_conn->sender_id)) {
        return;
    }

    peer = uct_remapring_sm_peer_of(iface, rx_conn->sender_id);
    if (peer != NULL) {
        ucs_debug("iface %p connection %u: pid %d reset it; ours to it fails"
                  " at its next check",
                  iface, index, rx_conn->sender.pid);
        peer->reverse_reset = 1;
    }
}

/* A sender connected (again): our connection to it is paired once more */
static void uct_remapring_rx_sender_connected_again(
        uct_remapring_sm_iface_t *iface, uint64_t sender_id)
{
    uct_remapring_sm_peer_t *peer = uct_remapring_sm_peer_of(iface, sender_id);

    if (peer != NULL) {
        peer->reverse_reset = 0;
    }
}

/* Free connection @a index for a new sender */
void uct_remapring_rx_conn_free(uct_remapring_sm_iface_t *iface, unsigned index)
{
    uct_remapring_rx_sender_reset(iface, index);
    uct_remapring_rx_conn_reset(iface, &iface->rx.conns[index]);
    uct_remapring_ctl_release(&iface->rx.ctl, index);
    uct_remapring_rx_offer(iface);
}

/* Refuse or fail connection @a index; @a reason is logged, NULL if the
 * failure was logged where it was found. The ring stays until the sender
 * closes or exits, so that its late writes land in its own blocks; a
 * connection its sender already closed is freed at once. */
void uct_remapring_rx_conn_fail(uct_remapring_sm_iface_t *iface, unsigned index,
                                const char *reason)
{
    uct_remapring_rx_conn_t *rx_conn = &iface->rx.conns[index];
    uct_remapring_conn_t *conn       = &iface->rx.ctl.conns[index];

    if (reason != NULL) {
        ucs_error("iface %p connection %u from pid %d failed: %s", iface, index,
                  conn->sender_pid, reason);
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
    uct_remapring_sm_iface_t *iface  = rx_conn->iface;
    unsigned index                   = rx_conn - iface->rx.conns;

    ucs_debug("iface %p sender pid %d of connection %u exited", iface,
              proc->pid, index);
    uct_remapring_rx_conn_free(iface, index);
}

/* The ring of connection @a index, for a sender writing with @a wire */
static ucs_status_t
uct_remapring_rx_ring_make(uct_remapring_sm_iface_t *iface, unsigned index,
                           uct_remapring_wire_type_t wire, const char *name)
{
    remapring_ring_params_t params;

    uct_remapring_iface_ring_params(&iface->super, &params);
    /* stores into shared memory land in order, a write of the kernel's (or
     * a NIC's) may not */
    params.commit       = (wire == UCT_REMAPRING_WIRE_SHM) ?
                                  REMAPRING_RING_COMMIT_STAMP :
                                  REMAPRING_RING_COMMIT_TAIL;
    params.shared_slots = uct_remapring_ctl_slot_table(iface->rx.ctl.ctl,
                                                       iface->rx.ctl.max_peers,
                                                       iface->rx.ctl.ring_slots,
                                                       index);
    /* a sender on the shm wire follows the slot table only: held blocks
     * are swapped in the table, without mmap */
    params.remap_view = (wire != UCT_REMAPRING_WIRE_SHM);
    /* and reads the control words in shared memory: it answers requests to
     * give back what a quiet ring does not need */
    params.reclaim = (wire == UCT_REMAPRING_WIRE_SHM);
    params.name    = name;
    return remapring_ring_create(iface->super.rx.pool, &params,
                                 &iface->rx.ctl.conns[index].ring,
                                 &iface->rx.conns[index].ring);
}

/* Start watching the sender of connection @a index; false if it is gone
 * (then the connection is given back) */
static int
uct_remapring_rx_conn_watch(uct_remapring_sm_iface_t *iface, unsigned index)
{
    uct_remapring_conn_t *conn = &iface->rx.ctl.conns[index];

    if (uct_remapring_proc_open(&iface->watch, conn->sender_pid,
                                uct_remapring_rx_sender_exited,
                                &iface->rx.conns[index].sender) == UCS_OK) {
        return 1;
    }

    /* nobody will close it */
    ucs_debug("iface %p sender pid %d of connection %u is gone", iface,
              conn->sender_pid, index);
    uct_remapring_rx_conn_free(iface, index);
    return 0;
}

/* Keep UCT_REMAPRING_RX_OFFERS free connections with a ring made in
 * advance: a sender on the shm wire takes one and writes at once, without
 * waiting for this interface's progress */
void uct_remapring_rx_offer(uct_remapring_sm_iface_t *iface)
{
    unsigned max_peers = iface->rx.ctl.max_peers;
    uct_remapring_rx_conn_t *rx_conn;
    uct_remapring_conn_t *conn;
    unsigned n, index;
    char name[48];

    for (n = 0;
         (n < max_peers) && (iface->rx.noffered < UCT_REMAPRING_RX_OFFERS);
         ++n) {
        index   = (iface->rx.offer_cursor + n) % max_peers;
        conn    = &iface->rx.ctl.conns[index];
        rx_conn = &iface->rx.conns[index];
        if ((rx_conn->ring != NULL) || rx_conn->failed ||
            (uct_remapring_conn_state(conn) != UCT_REMAPRING_CONN_FREE)) {
            continue;
        }

        /* an offer must not bring the pool under pressure */
        if (remapring_pool_available(iface->super.rx.pool) <
            remapring_pool_attached(iface->super.rx.pool) +
                    (2 * iface->super.rx.idle_slots)) {
            break;
        }

        /* a sender may claim the slot since it was seen FREE */
        if (!uct_remapring_ctl_offer_begin(&iface->rx.ctl, index)) {
            continue; /* claimed: its doorbell follows */
        }

        ucs_snprintf_zero(name, sizeof(name), "offered (connection %u)", index);
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
static void
uct_remapring_rx_conn_adopt(uct_remapring_sm_iface_t *iface, unsigned index)
{
    uct_remapring_rx_conn_t *rx_conn = &iface->rx.conns[index];
    uct_remapring_conn_t *conn       = &iface->rx.ctl.conns[index];

    rx_conn->offered   = 0;
    rx_conn->sender_id = conn->sender_id;
    uct_remapring_rx_sender_connected_again(iface, rx_conn->sender_id);
    --iface->rx.noffered;
    ++iface->rx.nconns;
    if (!uct_remapring_rx_conn_watch(iface, index)) {
        return;
    }

    ucs_snprintf_zero(rx_conn->ring->name, sizeof(rx_conn->ring->name),
                      "from pid %d (connection %u)", conn->sender_pid, index);
    uct_remapring_md_set_in_use(iface->super.super.md);
    ucs_debug("iface %p pid %d took the ring offered on"
              " connection %u",
              iface, conn->sender_pid, index);
    uct_remapring_rx_set_active(iface, rx_conn);
}

/* A sender claimed connection @a index: make its ring */
static void
uct_remapring_rx_conn_accept(uct_remapring_sm_iface_t *iface, unsigned index)
{
    uct_remapring_rx_conn_t *rx_conn = &iface->rx.conns[index];
    uct_remapring_conn_t *conn       = &iface->rx.ctl.conns[index];
    ucs_status_t status;
    char name[48];

    if (rx_conn->offered) {
        /* a sender on the cma wire took an offered slot: its ring is of
         * another kind */
        uct_remapring_rx_conn_reset(iface, rx_conn);
    }

    rx_conn->sender_id = conn->sender_id;
    uct_remapring_rx_sender_connected_again(iface, rx_conn->sender_id);
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
    uct_remapring_md_set_in_use(iface->super.super.md);
    ucs_debug("iface %p accepted pid %d on connection %u, ring"
              " view %p",
              iface, conn->sender_pid, index, rx_conn->ring->view);
    /* a sender that closed meanwhile rings its doorbell: drained then */
    uct_remapring_ctl_set_unless_closed(&iface->rx.ctl, index,
                                        UCT_REMAPRING_CONN_READY);
    uct_remapring_rx_set_active(iface, rx_conn);
}

/* The doorbell of connection @a index rang, while it has no ring or an
 * offered one: a sender may be claiming or taking it, or closing at once */
static void uct_remapring_rx_conn_wake_free(uct_remapring_sm_iface_t *iface,
                                            unsigned index,
                                            uct_remapring_conn_state_t state)
{
    uct_remapring_rx_conn_t *rx_conn = &iface->rx.conns[index];
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
 * that sender moves the slot, to CLOSED (remapring_sm_ctl.h) */
static void uct_remapring_rx_conn_wake_live(uct_remapring_sm_iface_t *iface,
                                            unsigned index,
                                            uct_remapring_conn_state_t state)
{
    uct_remapring_rx_conn_t *rx_conn = &iface->rx.conns[index];
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

    ucs_error("iface %p connection %u from pid %d failed: its"
              " slot was rewritten out of turn (state %d, pid %d, id 0x%" PRIx64
              ")",
              iface, index, rx_conn->sender.pid, (int)state, conn->sender_pid,
              conn->sender_id);
    uct_remapring_rx_conn_fail(iface, index, NULL);
}

/* The doorbell of connection @a index rang */
void uct_remapring_rx_conn_wake(void *arg, unsigned index)
{
    uct_remapring_sm_iface_t *iface  = arg;
    uct_remapring_rx_conn_t *rx_conn = &iface->rx.conns[index];
    uct_remapring_conn_state_t state = uct_remapring_conn_state(
            &iface->rx.ctl.conns[index]);

    if ((rx_conn->ring == NULL) || rx_conn->offered) {
        uct_remapring_rx_conn_wake_free(iface, index, state);
    } else {
        uct_remapring_rx_conn_wake_live(iface, index, state);
    }

    uct_remapring_rx_offer(iface);
}

/* Offered slots that left OFFERED without a doorbell we saw: taken by a
 * sender whose bell was cleared (the doorbell words are everyone's), or
 * rewritten out of turn. Their rings are on no list the sweep reads. */
void uct_remapring_rx_check_offers(uct_remapring_sm_iface_t *iface)
{
    unsigned index, seen = 0;
    uint32_t state;

    for (index = 0;
         (index < iface->rx.ctl.max_peers) && (seen < iface->rx.noffered);
         ++index) {
        if (!iface->rx.conns[index].offered) {
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


/* ================================================================= sender */

static UCS_F_ALWAYS_INLINE uct_remapring_sm_peer_t *
uct_remapring_sm_peer(uct_remapring_peer_t *peer)
{
    return ucs_derived_of(peer, uct_remapring_sm_peer_t);
}

static UCS_F_ALWAYS_INLINE uct_remapring_sm_iface_t *
uct_remapring_sm_peer_iface(uct_remapring_sm_peer_t *peer)
{
    return ucs_derived_of(peer->super.iface, uct_remapring_sm_iface_t);
}

/* The interface's watch saw the receiver process exit */
static void uct_remapring_sm_peer_exited(uct_remapring_proc_t *proc)
{
    uct_remapring_sm_peer_t *peer = ucs_container_of(proc,
                                                     uct_remapring_sm_peer_t,
                                                     remote.proc);

    uct_remapring_peer_failed(&peer->super, UCS_ERR_CONNECTION_RESET,
                              "the receiver process exited");
    /* it stays ready in the watch: stop watching */
    uct_remapring_proc_close(&uct_remapring_sm_peer_iface(peer)->watch, proc);
}

/* Fail the peer if the shared words say its connection is gone */
static void uct_remapring_sm_peer_check_state(uct_remapring_sm_peer_t *peer)
{
    const char *reason;
    ucs_status_t status;

    status = uct_remapring_remote_state(&peer->remote, &reason);
    if (UCS_STATUS_IS_ERR(status)) {
        uct_remapring_peer_failed(&peer->super, status, reason);
    }
}

/* The receiving interface an address names: its id, once its rings are
 * known to take what we send */
static ucs_status_t uct_remapring_sm_peer_key(uct_remapring_iface_t *iface,
                                              const uct_ep_params_t *params,
                                              uint64_t *key_p)
{
    const uct_remapring_iface_addr_t *addr = (const void *)params->iface_addr;
    char name[32];
    ucs_status_t status;

    ucs_snprintf_zero(name, sizeof(name), "pid %d", addr->pid);
    status = uct_remapring_iface_check_peer(iface, addr->max_payload, name,
                                            UCS_LOG_LEVEL_ERROR);
    if (status != UCS_OK) {
        return status;
    }

    *key_p = addr->iface_id;
    return UCS_OK;
}

/* pids and fds are reused, interface ids are random: an address whose id
 * names another process's interface is forged or stale */
static ucs_status_t uct_remapring_sm_peer_match(uct_remapring_peer_t *peer,
                                                const uct_ep_params_t *params)
{
    const uct_remapring_iface_addr_t *addr = (const void *)params->iface_addr;
    pid_t pid = uct_remapring_sm_peer(peer)->remote.proc.pid;

    if (pid != addr->pid) {
        ucs_error("address of pid %d names iface 0x%" PRIx64 " of pid %d",
                  addr->pid, addr->iface_id, pid);
        return UCS_ERR_INVALID_PARAM;
    }

    return UCS_OK;
}

/* The wire this sender writes with: shm maps the receiver's pool memfd.
 * Where it cannot be opened (another user's process, a hardened /proc) the
 * cma wire needs only ptrace access. */
static uct_remapring_wire_type_t
uct_remapring_sm_peer_wire(uct_remapring_sm_iface_t *iface,
                           uct_remapring_sm_peer_t *peer)
{
    pid_t pid = peer->remote.proc.pid;
    size_t pool_size;
    char path[64];

    if (iface->wire != UCT_REMAPRING_WIRE_SHM) {
        return iface->wire;
    }

    ucs_snprintf_zero(path, sizeof(path), "/proc/%d/fd/%d", pid,
                      peer->remote.pool_fd);
    peer->pool_fd = open(path, O_RDWR | O_CLOEXEC);
    if (peer->pool_fd < 0) {
        ucs_diag("cannot open pool %s of pid %d (%m), using the cma wire", path,
                 pid);
        return UCT_REMAPRING_WIRE_CMA;
    }

    if (remapring_pool_check_fd(peer->pool_fd, &pool_size) != UCS_OK) {
        /* it could shrink under our stores; the cma wire cannot fault */
        ucs_diag("pool %s of pid %d is not sealed against shrinking, using"
                 " the cma wire",
                 path, pid);
        close(peer->pool_fd);
        peer->pool_fd = -1;
        return UCT_REMAPRING_WIRE_CMA;
    }

    return UCT_REMAPRING_WIRE_SHM;
}

/* Attach to the receiver's control area and claim a connection slot: the
 * receiver makes the ring (or has one offered already) */
static ucs_status_t uct_remapring_sm_peer_create(uct_remapring_iface_t *super,
                                                 const uct_ep_params_t *params,
                                                 uct_remapring_peer_t **peer_p)
{
    uct_remapring_sm_iface_t *iface        = ucs_derived_of(super,
                                                            uct_remapring_sm_iface_t);
    const uct_remapring_iface_addr_t *addr = (const void *)params->iface_addr;
    uct_remapring_sm_peer_t *peer;
    ucs_status_t status;

    peer = ucs_calloc(1, sizeof(*peer), "uct_remapring_sm_peer_t");
    if (peer == NULL) {
        ucs_error("failed to allocate a peer");
        return UCS_ERR_NO_MEMORY;
    }

    uct_remapring_peer_init(&peer->super, super, "pid %d", addr->pid);
    peer->pool_fd = -1;
    status        = uct_remapring_remote_attach(addr, &iface->watch,
                                                uct_remapring_sm_peer_exited,
                                                &peer->remote);
    if (status != UCS_OK) {
        goto err_free;
    }

    status = uct_remapring_remote_claim(&peer->remote, super->id,
                                        uct_remapring_sm_peer_wire(iface,
                                                                   peer));
    if (status != UCS_OK) {
        goto err_detach;
    }

    uct_remapring_md_set_in_use(super->super.md);
    ucs_debug("iface %p connection %u to pid %d iface 0x%" PRIx64, iface,
              peer->remote.index, addr->pid, addr->iface_id);
    *peer_p = &peer->super;
    return UCS_OK;

err_detach:
    if (peer->pool_fd >= 0) {
        close(peer->pool_fd);
    }
    uct_remapring_remote_detach(&peer->remote, &iface->watch, 0);
err_free:
    ucs_free(peer);
    return status;
}

static void uct_remapring_sm_peer_destroy(uct_remapring_peer_t *super)
{
    uct_remapring_sm_peer_t *peer = uct_remapring_sm_peer(super);

    uct_remapring_peer_cleanup(super);
    if (peer->pool_fd >= 0) {
        close(peer->pool_fd);
    }
    uct_remapring_remote_detach(&peer->remote,
                                &uct_remapring_sm_peer_iface(peer)->watch,
                                super->reset);
    ucs_free(peer);
}

/* The wire to the receiver's ring: the shm wire maps its pool, which the
 * claim declared (the receiver then swaps held blocks in the slot table
 * only, so there is no going back to cma); the cma wire writes its ring
 * view */
static ucs_status_t
uct_remapring_sm_peer_wire_create(uct_remapring_sm_peer_t *peer,
                                  const remapring_ring_info_t *info,
                                  remapring_wire_t **wire_p)
{
    uct_remapring_remote_t *remote = &peer->remote;
    size_t window                  = (size_t)info->block_size * info->nslots;
    ucs_status_t status;

    if (peer->pool_fd < 0) {
        return remapring_wire_cma_create(remote->proc.pid, info->view_addr,
                                         window, &remote->conn->ring, wire_p);
    }

    status = remapring_wire_shm_create(
            peer->pool_fd, info->block_size, remote->pool_blocks,
            uct_remapring_ctl_slot_table(remote->ctl, remote->max_peers,
                                         remote->ring_slots, remote->index),
            window, &remote->conn->ring, wire_p);
    close(peer->pool_fd);
    peer->pool_fd = -1;
    return status;
}

/* The receiver makes the ring on its progress after the claim; until it is
 * ready, sends wait in the pending queue */
static ucs_status_t uct_remapring_sm_peer_connect(uct_remapring_peer_t *super)
{
    uct_remapring_sm_peer_t *peer  = uct_remapring_sm_peer(super);
    uct_remapring_remote_t *remote = &peer->remote;
    remapring_ring_info_t info;
    remapring_wire_t *wire;
    const char *reason;
    ucs_status_t status;

    status = uct_remapring_remote_state(remote, &reason);
    if (status == UCS_INPROGRESS) {
        return UCS_ERR_NO_RESOURCE;
    } else if (status != UCS_OK) {
        uct_remapring_peer_failed(super, status, reason);
        return super->status;
    }

    info = remote->conn->ring.info;
    if ((info.block_size != remote->block_size) ||
        (info.nslots != remote->ring_slots)) {
        ucs_error("pid %d ring of %u slots of %u bytes does not match its"
                  " control area (%u of %u)",
                  remote->proc.pid, info.nslots, info.block_size,
                  remote->ring_slots, remote->block_size);
        uct_remapring_peer_failed(super, UCS_ERR_INVALID_PARAM,
                                  "its ring does not match its control area");
        return super->status;
    }

    status = uct_remapring_sm_peer_wire_create(peer, &info, &wire);
    if (status != UCS_OK) {
        uct_remapring_peer_failed(super, status, "no wire to its ring");
        return super->status;
    }

    return uct_remapring_peer_set_wire(super, &info, wire);
}

/* A send was refused for credit. The shm wire writes into memory that
 * outlives the receiver, so a receiver that is gone shows only as a ring
 * that never drains: look at the shared words, and now and then at the
 * process. */
static ucs_status_t uct_remapring_sm_peer_stalled(uct_remapring_peer_t *super)
{
    uct_remapring_sm_peer_t *peer = uct_remapring_sm_peer(super);

    if (super->status == UCS_OK) {
        uct_remapring_sm_peer_check_state(peer);
    }

    /* the send may have answered a request to give back credit (the
     * writer does before it reloads the limit): a receiver asleep must wake
     * to take the slots back, and to see the stall */
    if (super->status == UCS_OK) {
        uct_remapring_remote_ring_bell(&peer->remote);
    }

    if ((super->status == UCS_OK) &&
        ((++peer->stalls % UCT_REMAPRING_PEER_STALL_CHECK) == 0) &&
        uct_remapring_proc_exited(&peer->remote.proc)) {
        uct_remapring_peer_failed(super, UCS_ERR_CONNECTION_RESET,
                                  "the receiver process exited");
    }

    return (super->status != UCS_OK) ? super->status : UCS_ERR_NO_RESOURCE;
}

void uct_remapring_sm_check_peers(uct_remapring_sm_iface_t *iface)
{
    uct_remapring_peer_t *peer;

    kh_foreach_value(&iface->super.tx.peers, peer, {
        if (peer->status == UCS_OK) {
            uct_remapring_sm_peer_check_state(uct_remapring_sm_peer(peer));
        }
    })
}

void uct_remapring_sm_yield_some(uct_remapring_sm_iface_t *iface)
{
    khash_t(uct_remapring_peers) *peers = &iface->super.tx.peers;
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
            remapring_ring_writer_yield(&peer->writer)) {
            uct_remapring_remote_ring_bell(
                    &uct_remapring_sm_peer(peer)->remote);
        }
        return;
    }
}

void uct_remapring_sm_peer_check(uct_remapring_sm_peer_t *peer)
{
    if ((peer->super.status == UCS_OK) && peer->reverse_reset) {
        uct_remapring_peer_failed(&peer->super, UCS_ERR_CONNECTION_RESET,
                                  "its endpoints to this interface were"
                                  " dropped (force close)");
    }

    if (peer->super.status == UCS_OK) {
        uct_remapring_sm_peer_check_state(peer);
    }

    if ((peer->super.status == UCS_OK) &&
        uct_remapring_proc_exited(&peer->remote.proc)) {
        uct_remapring_peer_failed(&peer->super, UCS_ERR_CONNECTION_RESET,
                                  "the receiver process exited");
    }
}

/* clang-format off */
const uct_remapring_iface_ops_t uct_remapring_sm_iface_ops = {
    .peer_key      = uct_remapring_sm_peer_key,
    .peer_match    = uct_remapring_sm_peer_match,
    .peer_create   = uct_remapring_sm_peer_create,
    .peer_destroy  = uct_remapring_sm_peer_destroy,
    .peer_connect  = uct_remapring_sm_peer_connect,
    .peer_stalled  = uct_remapring_sm_peer_stalled,
    .peer_can_post = NULL,
    .rx_control    = uct_remapring_sm_rx_control
};
/* clang-format on */
