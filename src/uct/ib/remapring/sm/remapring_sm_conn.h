/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef UCT_REMAPRING_SM_CONN_H_
#define UCT_REMAPRING_SM_CONN_H_

/*
 * The connection state machine of the shared-memory transport, both halves:
 * the receiver's (offers, accepts, adopts, fails and frees the connection
 * slots of its control area as their doorbells ring) and the sender's
 * (claims a slot, takes its ring when ready, watches the shared words and
 * the receiver process). The states and their moves are at the top of
 * remapring_sm_ctl.h. All calls are serialised by the interface's owner.
 */

#include "remapring_sm.h"


/* ------------------------------------------------------------- receiver */

/** Start polling a connection's ring at every progress call */
void uct_remapring_rx_set_active(uct_remapring_sm_iface_t *iface,
                                 uct_remapring_rx_conn_t *rx_conn);

/** The ring sleeps on its doorbell, and on the sweep */
void uct_remapring_rx_set_asleep(uct_remapring_sm_iface_t *iface,
                                 uct_remapring_rx_conn_t *rx_conn);

/** The doorbell of connection @a index of interface @a arg rang (or the
 *  sweep found it moved): follow its state */
void uct_remapring_rx_conn_wake(void *arg, unsigned index);

/** One sleeping ring, the next in turn: awake if a record or a close came
 *  without its bell (remapring_sm_ctl.h, Doorbells) */
void uct_remapring_rx_sweep(uct_remapring_sm_iface_t *iface);

/** Keep a few free connections with a ring made in advance */
void uct_remapring_rx_offer(uct_remapring_sm_iface_t *iface);

/** Offered slots that left OFFERED without a doorbell we saw */
void uct_remapring_rx_check_offers(uct_remapring_sm_iface_t *iface);

/** Refuse or fail connection @a index; @a reason is logged, NULL if the
 *  failure was logged where it was found */
void uct_remapring_rx_conn_fail(uct_remapring_sm_iface_t *iface, unsigned index,
                                const char *reason);

/** Free connection @a index for a new sender */
void uct_remapring_rx_conn_free(uct_remapring_sm_iface_t *iface,
                                unsigned index);

/** Let go of a connection's ring (held blocks stay until released) and of
 *  its sender */
void uct_remapring_rx_conn_reset(uct_remapring_sm_iface_t *iface,
                                 uct_remapring_rx_conn_t *rx_conn);


/* --------------------------------------------------------------- sender */

/** Fail the peers whose receiver failed, released or closed their
 *  connection, from the shared words */
void uct_remapring_sm_check_peers(uct_remapring_sm_iface_t *iface);

/** Look at the ring of the next receiver in turn (among a bounded number of
 *  hash buckets) for a request to give back credit; answer it, and wake the
 *  receiver. Bounded work per call, whatever the number of receivers. */
void uct_remapring_sm_yield_some(uct_remapring_sm_iface_t *iface);

/** Keepalive: fail the peer if the receiver, its interface or the
 *  connection is gone */
void uct_remapring_sm_peer_check(uct_remapring_sm_peer_t *peer);

#endif
