/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef UCT_REMAPRING_IFACE_H_
#define UCT_REMAPRING_IFACE_H_

#include "remapring_md.h"

#include <uct/base/uct_iface.h>


/** The one device the transport offers: this host's memory. */
#define UCT_REMAPRING_DEVICE_NAME "memory"


/**
 * Transport configuration (UCX_REMAPRING_*).
 */
typedef struct uct_remapring_iface_config {
    uct_iface_config_t super;
    size_t block_size; /* bytes per pool block and ring slot */
    unsigned ring_slots; /* slots per sender's ring window */
    size_t pool_max; /* upper bound of the receive pool */
    unsigned credit_batch; /* slots released before crediting */
} uct_remapring_iface_config_t;


/**
 * Check a transport configuration; logs and returns UCS_ERR_INVALID_PARAM
 * naming the first bad setting.
 */
ucs_status_t
uct_remapring_iface_config_check(const uct_remapring_iface_config_t *config);

#endif
