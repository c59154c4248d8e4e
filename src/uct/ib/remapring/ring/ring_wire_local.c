/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#include <uct/ib/remapring/ring/ring.h>
#include <uct/ib/remapring/ring/ring_wire.h>

#include <ucs/debug/log_def.h>

#include <stdlib.h>
#include <string.h>


typedef struct remapring_wire_local {
    remapring_wire_t super;
    char *view;
    remapring_ring_ctl_t *ctl;
} remapring_wire_local_t;


static ucs_status_t remapring_wire_local_write(remapring_wire_t *wire,
                                               const remapring_wire_seg_t *segs,
                                               unsigned nsegs)
{
    remapring_wire_local_t *local = (remapring_wire_local_t *)wire;
    unsigned i;

    for (i = 0; i < nsegs; ++i) {
        remapring_wire_copy_seg(local->view +
                                        remapring_wire_view_pos(wire,
                                                                segs[i].offset),
                                &segs[i]);
    }

    return UCS_OK;
}

static void
remapring_wire_local_publish_tail(remapring_wire_t *wire, uint64_t tail)
{
    remapring_ring_ctl_store_tail(((remapring_wire_local_t *)wire)->ctl, tail);
}

static uint64_t remapring_wire_local_limit(remapring_wire_t *wire)
{
    return remapring_ring_ctl_load_limit(((remapring_wire_local_t *)wire)->ctl);
}

static void remapring_wire_local_stalled(remapring_wire_t *wire)
{
    remapring_wire_ctl_stalled(((remapring_wire_local_t *)wire)->ctl);
}

static uint64_t remapring_wire_local_reclaim(remapring_wire_t *wire)
{
    return remapring_wire_ctl_reclaim(((remapring_wire_local_t *)wire)->ctl);
}

static void
remapring_wire_local_yield(remapring_wire_t *wire, uint64_t seq, uint64_t bound)
{
    remapring_wire_ctl_yield(((remapring_wire_local_t *)wire)->ctl, seq, bound);
}

static void remapring_wire_local_destroy(remapring_wire_t *wire)
{
    free(wire);
}

static const remapring_wire_ops_t remapring_wire_local_ops = {
        .write        = remapring_wire_local_write,
        .publish_tail = remapring_wire_local_publish_tail,
        .limit        = remapring_wire_local_limit,
        .stalled      = remapring_wire_local_stalled,
        .reclaim      = remapring_wire_local_reclaim,
        .yield        = remapring_wire_local_yield,
        .destroy      = remapring_wire_local_destroy};

ucs_status_t remapring_wire_local_create(void *view, size_t window_size,
                                         remapring_ring_ctl_t *ctl,
                                         remapring_wire_t **wire_p)
{
    remapring_wire_local_t *local;

    local = calloc(1, sizeof(*local));
    if (local == NULL) {
        ucs_error("failed to allocate local wire");
        return UCS_ERR_NO_MEMORY;
    }

    local->super.ops         = &remapring_wire_local_ops;
    local->super.window_size = window_size;
    local->super.can_stamp   = 1;
    local->view              = view;
    local->ctl               = ctl;
    *wire_p                  = &local->super;
    return UCS_OK;
}
