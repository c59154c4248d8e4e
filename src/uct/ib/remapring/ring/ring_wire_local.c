/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#include <uct/ib/remapring/ring.h>
#include <uct/ib/remapring/ring_wire.h>

#include <ucs/debug/log_def.h>

#include <stdlib.h>
#include <string.h>


typedef struct uct_remapring_wire_local {
    uct_remapring_wire_t super;
    char *view;
    uct_remapring_ring_ctl_t *ctl;
} uct_remapring_wire_local_t;


static ucs_status_t
uct_remapring_wire_local_write(uct_remapring_wire_t *wire,
                               const uct_remapring_wire_seg_t *segs,
                               unsigned nsegs)
{
    uct_remapring_wire_local_t *local = (uct_remapring_wire_local_t *)wire;
    unsigned i;

    for (i = 0; i < nsegs; ++i) {
        uct_remapring_wire_copy_seg(local->view +
                                            uct_remapring_wire_view_pos(
                                                    wire, segs[i].offset),
                                    &segs[i]);
    }

    return UCS_OK;
}

static void
uct_remapring_wire_local_publish_tail(uct_remapring_wire_t *wire, uint64_t tail)
{
    uct_remapring_ring_ctl_store_tail(((uct_remapring_wire_local_t *)wire)->ctl,
                                      tail);
}

static uint64_t
uct_remapring_wire_local_limit(uct_remapring_wire_t *wire)
{
    return uct_remapring_ring_ctl_load_limit(
            ((uct_remapring_wire_local_t *)wire)->ctl);
}

static void uct_remapring_wire_local_stalled(uct_remapring_wire_t *wire)
{
    uct_remapring_wire_ctl_stalled(((uct_remapring_wire_local_t*)wire)->ctl);
}

static uint64_t uct_remapring_wire_local_reclaim(uct_remapring_wire_t *wire)
{
    return uct_remapring_wire_ctl_reclaim(((uct_remapring_wire_local_t*)wire)->ctl);
}

static void uct_remapring_wire_local_yield(uct_remapring_wire_t *wire,
                                         uint64_t seq, uint64_t bound)
{
    uct_remapring_wire_ctl_yield(((uct_remapring_wire_local_t*)wire)->ctl, seq, bound);
}

static void uct_remapring_wire_local_destroy(uct_remapring_wire_t *wire)
{
    free(wire);
}

static const uct_remapring_wire_ops_t uct_remapring_wire_local_ops = {
        .write         = uct_remapring_wire_local_write,
        .publish_tail  = uct_remapring_wire_local_publish_tail,
        .limit         = uct_remapring_wire_local_limit,
        .stalled       = uct_remapring_wire_local_stalled,
        .reclaim       = uct_remapring_wire_local_reclaim,
        .yield         = uct_remapring_wire_local_yield,
        .destroy       = uct_remapring_wire_local_destroy};

ucs_status_t uct_remapring_wire_local_create(void *view, size_t window_size,
                                             uct_remapring_ring_ctl_t *ctl,
                                             uct_remapring_wire_t **wire_p)
{
    uct_remapring_wire_local_t *local;

    local = calloc(1, sizeof(*local));
    if (local == NULL) {
        ucs_error("failed to allocate local wire");
        return UCS_ERR_NO_MEMORY;
    }

    local->super.ops         = &uct_remapring_wire_local_ops;
    local->super.window_size = window_size;
    local->super.can_stamp   = 1;
    local->view              = view;
    local->ctl               = ctl;
    *wire_p                  = &local->super;
    return UCS_OK;
}
