/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef UCT_REMAPRING_MD_H_
#define UCT_REMAPRING_MD_H_

#include <uct/base/uct_md.h>


/** Name of the component, the memory domain and the transport. */
#define UCT_REMAPRING_NAME "remapring"


/**
 * Memory domain configuration (UCX_REMAPRING_*).
 */
typedef struct uct_remapring_md_config {
    uct_md_config_t super;
} uct_remapring_md_config_t;


/**
 * Memory domain: one per UCP context that opens the component.
 */
typedef struct uct_remapring_md {
    uct_md_t super;
} uct_remapring_md_t;


extern uct_component_t uct_remapring_component;


/**
 * Whether this host lets the transport work: process_vm_writev into our own
 * address space succeeds and memfd_create is available. Cached after the
 * first call.
 */
int uct_remapring_md_host_supported(void);

#endif
