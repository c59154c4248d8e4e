/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef UCT_REMAPRING_MD_H_
#define UCT_REMAPRING_MD_H_

#include <uct/base/uct_md.h>
#include <ucs/memory/memcache.h>


/** Name of the component, the memory domain and the transport. */
#define UCT_REMAPRING_NAME "remapring"


/**
 * Memory domain configuration (UCX_REMAPRING_*).
 */
typedef struct uct_remapring_md_config {
    uct_md_config_t super;
    int             memcache; /* register through the memory cache */
} uct_remapring_md_config_t;


/**
 * Memory domain: one per UCP context that opens the component.
 */
typedef struct uct_remapring_md {
    uct_md_t       super;
    struct uct_remapring_verbs_dev *verbs; /* a verbs device's, or NULL */
    int            use_memcache;
    int            in_use;   /* an endpoint or a ring of ours exists */
    ucs_memcache_t *memcache; /* made on the first registration in use */
} uct_remapring_md_t;


/**
 * Remote key: a registered range of the owner's address space. Packed as is;
 * @a check guards against truncated or foreign keys.
 */
typedef struct uct_remapring_rkey {
    uint64_t magic;
    uint64_t address;
    uint64_t length;
    int32_t  pid;
    uint32_t check;
} UCS_S_PACKED uct_remapring_rkey_t;

#define UCT_REMAPRING_RKEY_MAGIC 0x79656b72616d6572ull /* "remarkey" */


/**
 * Memory handle of a registration.
 */
typedef struct uct_remapring_memh {
    void                  *address;
    size_t                length;
    ucs_memcache_region_t *region;    /* NULL when not cached */
    int                   allocated; /* by mem_alloc: munmap at free */
    struct ibv_mr         *mr;       /* verbs memory domain's */
} uct_remapring_memh_t;


extern uct_component_t uct_remapring_component;


/**
 * Mark the memory domain as carrying traffic: from now on registrations go
 * through the memory cache (and start its notifier). Until then, as in a
 * process that loads the module but selects other transports, they are
 * plain bookkeeping and start nothing.
 */
void uct_remapring_md_set_in_use(uct_md_h md);


/**
 * Check that an unpacked remote key covers [@a address, + @a length) of
 * process @a pid; logs and returns UCS_ERR_INVALID_PARAM otherwise (also for
 * a null or UCT_INVALID_RKEY key).
 */
ucs_status_t uct_remapring_rkey_check(uct_rkey_t rkey, pid_t pid,
                                      uint64_t address, size_t length);


/**
 * Whether this host lets the transport work: process_vm_writev into our own
 * address space succeeds and memfd_create is available. Cached after the
 * first call.
 */
int uct_remapring_md_host_supported(void);

#endif
