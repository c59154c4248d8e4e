/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "remapring_iface.h"

#include <ucs/debug/log.h>
#include <ucs/sys/math.h>
#include <ucs/sys/string.h>
#include <ucs/sys/sys.h>


/* clang-format off */
static ucs_config_field_t uct_remapring_iface_config_table[] = {
    {"", "", NULL,
     ucs_offsetof(uct_remapring_iface_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_iface_config_table)},

    {"BLOCK_SIZE", "64k",
     "Size of one receive pool block, which is also the size of one ring slot\n"
     "and the largest message carried in one record. A power of two, at\n"
     "least the system page size.",
     ucs_offsetof(uct_remapring_iface_config_t, block_size),
     UCS_CONFIG_TYPE_MEMUNITS},

    {"RING_SLOTS", "16",
     "Number of slots in the ring window each connected sender writes into;\n"
     "the window is RING_SLOTS * BLOCK_SIZE bytes of address space. A power\n"
     "of two, at least 2. Each remapped slot costs one VMA, counted against\n"
     "vm.max_map_count.",
     ucs_offsetof(uct_remapring_iface_config_t, ring_slots),
     UCS_CONFIG_TYPE_UINT},

    {"POOL_MAX", "1g",
     "Largest size the receive pool of one interface may grow to. Held\n"
     "messages are kept in the pool; when it is full, senders wait for the\n"
     "upper layer to release messages. At least RING_SLOTS * BLOCK_SIZE.",
     ucs_offsetof(uct_remapring_iface_config_t, pool_max),
     UCS_CONFIG_TYPE_MEMUNITS},

    {"CREDIT_BATCH", "4",
     "Number of ring slots the receiver consumes before it returns them to\n"
     "the sender as credit. Between 1 and RING_SLOTS / 2.",
     ucs_offsetof(uct_remapring_iface_config_t, credit_batch),
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
        !ucs_is_pow2(config->block_size) || (config->block_size < page_size)) {
        ucs_error("remapring: REMAPRING_BLOCK_SIZE=%zu must be a power of two"
                  " of at least the page size (%zu)",
                  config->block_size, page_size);
        return UCS_ERR_INVALID_PARAM;
    }

    if ((config->ring_slots < 2) || !ucs_is_pow2(config->ring_slots)) {
        ucs_error("remapring: REMAPRING_RING_SLOTS=%u must be a power of two"
                  " of at least 2",
                  config->ring_slots);
        return UCS_ERR_INVALID_PARAM;
    }

    if ((config->pool_max == UCS_MEMUNITS_AUTO) ||
        ((config->pool_max != UCS_MEMUNITS_INF) &&
         (config->pool_max < (size_t)config->ring_slots * config->block_size))) {
        ucs_error("remapring: REMAPRING_POOL_MAX=%zu must be at least"
                  " RING_SLOTS * BLOCK_SIZE (%zu)",
                  config->pool_max,
                  (size_t)config->ring_slots * config->block_size);
        return UCS_ERR_INVALID_PARAM;
    }

    if ((config->credit_batch < 1) ||
        (config->credit_batch > config->ring_slots / 2)) {
        ucs_error("remapring: REMAPRING_CREDIT_BATCH=%u must be between 1 and"
                  " RING_SLOTS / 2 (%u)",
                  config->credit_batch, config->ring_slots / 2);
        return UCS_ERR_INVALID_PARAM;
    }

    return UCS_OK;
}

static ucs_status_t
uct_remapring_query_tl_devices(uct_md_h md,
                               uct_tl_device_resource_t **tl_devices_p,
                               unsigned *num_tl_devices_p)
{
    /* The receive path is not wired to the ring yet: offer UCP no device,
     * so a preloaded module can never be selected */
    *tl_devices_p     = NULL;
    *num_tl_devices_p = 0;
    return UCS_OK;
}

typedef struct uct_remapring_iface {
    uct_base_iface_t super;
} uct_remapring_iface_t;

static UCS_CLASS_INIT_FUNC(uct_remapring_iface_t, uct_md_h md,
                           uct_worker_h worker,
                           const uct_iface_params_t *params,
                           const uct_iface_config_t *tl_config)
{
    const uct_remapring_iface_config_t *config =
            ucs_derived_of(tl_config, uct_remapring_iface_config_t);
    ucs_status_t status;

    status = uct_remapring_iface_config_check(config);
    if (status != UCS_OK) {
        return status;
    }

    ucs_error("remapring: this build offers no remapring device");
    return UCS_ERR_NO_DEVICE;
}

static UCS_CLASS_CLEANUP_FUNC(uct_remapring_iface_t)
{
}

UCS_CLASS_DEFINE(uct_remapring_iface_t, uct_base_iface_t);

static UCS_CLASS_DEFINE_NEW_FUNC(uct_remapring_iface_t, uct_iface_t, uct_md_h,
                                 uct_worker_h, const uct_iface_params_t *,
                                 const uct_iface_config_t *);

UCT_TL_DEFINE_ENTRY(&uct_remapring_component, remapring,
                    uct_remapring_query_tl_devices, uct_remapring_iface_t,
                    "REMAPRING_", uct_remapring_iface_config_table,
                    uct_remapring_iface_config_t);

/* UCX 1.13 loads only the modules compiled into libuct; this module is
 * preloaded instead, and registers its component from an ELF constructor */
UCT_SINGLE_TL_INIT(&uct_remapring_component, remapring, ctor, , )
