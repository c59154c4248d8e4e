/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef UCT_REMAPRING_IFACE_INL_
#define UCT_REMAPRING_IFACE_INL_

/*
 * Delivery, the receive fast path of every transport on the ring: records
 * of a ring to the active message handlers, in place with a descriptor the
 * upper layer may keep, out of a right-sized copy, or in place to be copied
 * (small messages with no copy, and every message while the pool is nearly
 * full, so that holds never stop the senders).
 */

#include "remapring_iface.h"


/* Copies while the upper layer keeps small messages: a share of at least
 * 1 in 1024 of late (a moving average over about the last 256 copies); below
 * it, one small message in 64 still goes through a copy, to see whether
 * keeping resumes */
#define UCT_REMAPRING_COPY_KEPT_ONE   (1u << 24)
#define UCT_REMAPRING_COPY_KEPT_SHIFT 8
#define UCT_REMAPRING_COPY_KEPT_MIN   (UCT_REMAPRING_COPY_KEPT_ONE / 1024)
#define UCT_REMAPRING_COPY_PROBE      64

/* Whether the pool is nearly full: what it can still hand out would not
 * replace every block backing a slot now, were they all held. Past that,
 * nothing more is kept in place, and the rings can always move on. */
static UCS_F_ALWAYS_INLINE int
uct_remapring_iface_pool_pressed(uct_remapring_iface_t *iface)
{
    return remapring_pool_available(iface->rx.pool) <
           remapring_pool_attached(iface->rx.pool);
}

/* With AM alignment asked (iface->rx.aligned set), a small message's
 * payload where the handler sees it: copied to an aligned place unless it
 * is aligned in the ring already */
static UCS_F_NOINLINE void *
uct_remapring_iface_rx_aligned(uct_remapring_iface_t *iface, void *payload,
                               uint32_t length)
{
    const remapring_ring_layout_t *layout = &iface->rx.layout;

    if ((((uintptr_t)payload + layout->align_offset) &
         (layout->align - 1)) == 0) {
        return payload;
    }

    memcpy(iface->rx.aligned, payload, length);
    return iface->rx.aligned;
}

/* Whether the next small message goes through a copy */
static UCS_F_ALWAYS_INLINE int
uct_remapring_iface_copy_wanted(uct_remapring_iface_t *iface)
{
    return (iface->rx.copy_kept >= UCT_REMAPRING_COPY_KEPT_MIN) ||
           ((++iface->rx.copy_probe % UCT_REMAPRING_COPY_PROBE) == 0);
}

/* A copy was kept by the upper layer (@a kept), or not */
static UCS_F_ALWAYS_INLINE void
uct_remapring_iface_copy_kept(uct_remapring_iface_t *iface, int kept)
{
    iface->rx.copy_kept += (kept ? (UCT_REMAPRING_COPY_KEPT_ONE >>
                                    UCT_REMAPRING_COPY_KEPT_SHIFT) :
                                   0) -
                           (iface->rx.copy_kept >>
                            UCT_REMAPRING_COPY_KEPT_SHIFT);
}

/* Copy inline record @a rx's payload to @a dest, in a copy. A small one in
 * 16-byte pieces, up to the 16-byte boundary past it, without a call: the
 * payload starts 16 bytes into its record, which ends on a 64-byte
 * boundary, and a copy has room up to the 16-byte boundary past the payload
 * when the payload is 16-byte aligned in it */
static UCS_F_ALWAYS_INLINE void
uct_remapring_iface_copy(const uct_remapring_iface_t *iface, void *dest,
                         const remapring_ring_rx_t *rx)
{
    size_t offset;

    if ((rx->length > 64) || (iface->rx.copy_offset % REMAPRING_COPY_ALIGN)) {
        memcpy(dest, rx->payload, rx->length);
        return;
    }

    for (offset = 0; offset < rx->length; offset += 16) {
        memcpy(UCS_PTR_BYTE_OFFSET(dest, offset),
               UCS_PTR_BYTE_OFFSET(rx->payload, offset), 16);
    }
}

/* A small message out of a right-sized copy the upper layer may keep: it
 * never holds ring memory, nor a buffer of the upper layer's next size.
 * False if no copy is to be had. */
static UCS_F_ALWAYS_INLINE int
uct_remapring_iface_deliver_copy(uct_remapring_iface_t *iface,
                                 remapring_ring_t *ring,
                                 remapring_ring_rx_t *rx)
{
    unsigned copy_class;
    ucs_status_t status;
    void *copy, *payload;

    copy = remapring_copy_spare(&iface->rx.copies,
                                iface->rx.copy_offset + rx->length,
                                &copy_class);
    if (copy == NULL) {
        return 0;
    }

    payload = UCS_PTR_BYTE_OFFSET(copy, iface->rx.copy_offset);
    uct_recv_desc(
            UCS_PTR_BYTE_OFFSET(payload, -(ptrdiff_t)iface->rx.rx_headroom)) =
            &iface->rx.copy_release_desc;
    uct_remapring_iface_copy(iface, payload, rx);
    remapring_ring_consume(ring, rx, 0);
    status = uct_iface_invoke_am(&iface->super, rx->am_id, payload, rx->length,
                                 UCT_CB_PARAM_FLAG_DESC);
    if (status == UCS_INPROGRESS) {
        remapring_copy_keep(&iface->rx.copies, copy_class);
    }
    uct_remapring_iface_copy_kept(iface, status == UCS_INPROGRESS);
    return 1;
}

/* A record with an id past the upper layer's: the transport's own control
 * record, copied out and consumed, then handled (the transport may look at
 * what follows it in the ring); false (logged) if it is not one */
static UCS_F_NOINLINE int
uct_remapring_iface_rx_control(uct_remapring_iface_t *iface,
                               remapring_ring_t *ring, remapring_ring_rx_t *rx)
{
    uint64_t copy[UCT_REMAPRING_CONTROL_MAX / sizeof(uint64_t)];
    size_t length = rx->length;

    if ((rx->am_id != UCT_REMAPRING_AM_ID_CONTROL) ||
        (iface->ops->rx_control == NULL)) {
        ucs_error("ring %s: bad active message id %u", ring->name,
                  rx->am_id);
        return 0;
    } else if (length > sizeof(copy)) {
        ucs_error("ring %s: control record of %zu bytes, at most %zu",
                  ring->name, length, sizeof(copy));
        return 0;
    }

    memcpy(copy, rx->payload, length);
    remapring_ring_consume(ring, rx, 0);
    return iface->ops->rx_control(iface, ring, copy, length) == UCS_OK;
}

/* The body of uct_remapring_iface_rx_ring(), @a aligned a constant: whether
 * the upper layer asked for AM alignment (small messages may be copied to
 * an aligned place), so that the loop of an interface without tests
 * nothing for it */
static UCS_F_ALWAYS_INLINE unsigned
uct_remapring_iface_rx_ring_inl(uct_remapring_iface_t *iface,
                                remapring_ring_t *ring, int *failed_p,
                                int aligned)
{
    remapring_ring_rx_t rx;
    ucs_status_t status;
    unsigned count;
    void *payload;

    for (count = 0; count < UCT_REMAPRING_RX_BURST; ++count) {
        status = remapring_ring_poll(ring, &rx);
        if (status == UCS_ERR_NO_PROGRESS) {
            break;
        } else if (ucs_unlikely(status != UCS_OK)) {
            *failed_p = 1; /* logged */
            break;
        } else if (ucs_unlikely(rx.am_id >= UCT_AM_ID_MAX)) {
            if (!uct_remapring_iface_rx_control(iface, ring, &rx)) {
                *failed_p = 1; /* logged */
                break;
            }
            continue;
        }

        uct_iface_trace_am(&iface->super, UCT_AM_TRACE_TYPE_RECV, rx.am_id,
                           rx.payload, rx.length, "RX: AM");
        if (rx.is_inline && (rx.length <= iface->rx.copy_max) &&
            uct_remapring_iface_copy_wanted(iface) &&
            uct_remapring_iface_deliver_copy(iface, ring, &rx)) {
            continue;
        }

        if (rx.is_inline || uct_remapring_iface_pool_pressed(iface)) {
            /* a small message with no copy, and every message while the
             * pool is nearly full (so that holds cannot stop the senders),
             * in place to be copied, as the data inline in UCX's shared
             * memory FIFOs: it never holds ring memory */
            payload = rx.payload;
            if (aligned && rx.is_inline) {
                payload = uct_remapring_iface_rx_aligned(iface, payload,
                                                         rx.length);
            }
            uct_iface_invoke_am(&iface->super, rx.am_id, payload, rx.length,
                                0);
            remapring_ring_consume(ring, &rx, 0);
            continue;
        }

        /* a larger one in place, with a descriptor the upper layer may
         * keep: its release callback sits right before the upper layer's
         * headroom, in the record's reserve */
        uct_recv_desc(UCS_PTR_BYTE_OFFSET(rx.payload,
                                          -(ptrdiff_t)iface->rx.rx_headroom)) =
                &iface->rx.release_desc;
        status = uct_iface_invoke_am(&iface->super, rx.am_id, rx.payload,
                                     rx.length, UCT_CB_PARAM_FLAG_DESC);
        remapring_ring_consume(ring, &rx, status == UCS_INPROGRESS);
    }

    return count;
}

/*
 * Deliver up to UCT_REMAPRING_RX_BURST records of @a ring to the active
 * message handlers. Sets @a *failed_p (and logs) if the ring went bad, or its
 * sender sent an AM id out of range.
 */
static UCS_F_ALWAYS_INLINE unsigned
uct_remapring_iface_rx_ring(uct_remapring_iface_t *iface,
                            remapring_ring_t *ring, int *failed_p)
{
    if (ucs_likely(iface->rx.aligned == NULL)) {
        return uct_remapring_iface_rx_ring_inl(iface, ring, failed_p, 0);
    }

    return uct_remapring_iface_rx_ring_inl(iface, ring, failed_p, 1);
}

#endif
