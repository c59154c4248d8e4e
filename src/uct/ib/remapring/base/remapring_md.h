/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef UCT_REMAPRING_MD_H_
#define UCT_REMAPRING_MD_H_

/*
 * The memory domain core every transport on the ring shares: registrations
 * go through the memory cache (src/ucs/memory/memcache.h), kept coherent by
 * the kernel's unmap events, once the transport carries traffic; before
 * that (a process that loads the module but selects other transports, or
 * that registers memory with every memory domain, as UCP does) each
 * registration is its own and nothing starts. A memory domain says what a
 * registration is for its device (uct_remapring_md_ops_t).
 */

#include <uct/base/uct_md.h>
#include <ucs/memory/memcache.h>
#include <uct/ib/remapring/ring/ring_api.h>

/* the base a transport of ours in another module calls (ring_api.h) */
REMAPRING_API_BEGIN


/** Name of the shared-memory transport, its component and memory domain */
#define UCT_REMAPRING_NAME "remapring"

/** Prefix of the settings of the shared-memory transport and its memory
 *  domain (UCX_REMAPRING_*); a transport of its own on the ring reads them
 *  too, under a longer prefix of its own that overrides them */
#define UCT_REMAPRING_CONFIG_PREFIX "REMAPRING_"


/**
 * Memory domain configuration (UCX_REMAPRING_*).
 */
typedef struct uct_remapring_md_config {
    uct_md_config_t super;
    int             memcache; /* register through the memory cache */
} uct_remapring_md_config_t;


/** The rows of uct_remapring_md_config_t */
extern ucs_config_field_t uct_remapring_md_config_table[];


/**
 * Memory handle of a registration; a memory domain may embed it first in
 * its own.
 */
typedef struct uct_remapring_memh {
    void *address;
    size_t length;
    ucs_memcache_region_t *region; /* NULL when not cached */
    int allocated; /* by mem_alloc: unmapped at free */
    pid_t pid; /* the registering process, for its keys (getpid() is a
                  system call, once per key packed otherwise) */
} uct_remapring_memh_t;


typedef struct uct_remapring_md uct_remapring_md_t;


/**
 * What a registration is for one kind of memory domain.
 */
typedef struct uct_remapring_md_ops {
    const char *cache_name; /* of its memory cache, for the log */
    /** Register [@a address, + @a length): a new handle */
    ucs_status_t (*reg)(uct_remapring_md_t *md, void *address, size_t length,
                        uct_remapring_memh_t **memh_p);
    /** Undo reg and free the handle; from any thread (the notifier's, on
     *  an unmap) */
    void (*dereg)(uct_remapring_md_t *md, uct_remapring_memh_t *memh);
} uct_remapring_md_ops_t;


/**
 * Memory domain base: one per UCP context that opens it.
 */
struct uct_remapring_md {
    uct_md_t super;
    const uct_remapring_md_ops_t *reg_ops;
    int use_memcache;
    int in_use; /* an endpoint or a ring of ours
                                              exists */
    ucs_memcache_t *memcache; /* made on the first
                                               registration in use */
};


/**
 * Initialize the base of a memory domain of @a component.
 */
void uct_remapring_md_init(uct_remapring_md_t *md, uct_component_t *component,
                           uct_md_ops_t *md_ops,
                           const uct_remapring_md_ops_t *reg_ops,
                           const uct_md_config_t *config);


/**
 * Free what the base holds (its memory cache and the registrations in it).
 */
void uct_remapring_md_cleanup(uct_remapring_md_t *md);


/**
 * Mark the memory domain as carrying traffic: from now on registrations go
 * through the memory cache (and start its notifier).
 */
void uct_remapring_md_set_in_use(uct_md_h md);


/**
 * The memory cache, made if the memory domain is in use and may have one;
 * or NULL.
 */
ucs_memcache_t *uct_remapring_md_cache(uct_remapring_md_t *md);


/** See uct_md_mem_reg(): through the cache, or a registration of its own */
ucs_status_t uct_remapring_md_mem_reg(uct_md_h uct_md, void *address,
                                      size_t length, unsigned flags,
                                      uct_mem_h *memh_p);


/** See uct_md_mem_dereg() */
ucs_status_t
uct_remapring_md_mem_dereg(uct_md_h uct_md,
                           const uct_md_mem_dereg_params_t *params);


/**
 * See uct_component_t's rkey_release: every unpacked remote key of ours is
 * one allocation.
 */
ucs_status_t uct_remapring_rkey_release(uct_component_t *component,
                                        uct_rkey_t rkey, void *handle);


/**
 * Define @a _var, the UCT component @a _name of memory domains on the ring,
 * whose md settings are @a _cfg_table under @a _cfg_prefix, a table of
 * @a _cfg_struct, which starts with uct_remapring_md_config_t (the one
 * place a component of ours is spelled out).
 */
/* clang-format off */
#define UCT_REMAPRING_COMPONENT_DEFINE(_var, _name, _cfg_prefix, _cfg_table, \
                                       _cfg_struct, _query_md_resources, \
                                       _md_open, _rkey_unpack) \
    uct_component_t _var = { \
        .query_md_resources = _query_md_resources, \
        .md_open            = _md_open, \
        .cm_open            = (uct_component_cm_open_func_t) \
                              ucs_empty_function_return_unsupported, \
        .rkey_unpack        = _rkey_unpack, \
        .rkey_ptr           = (uct_component_rkey_ptr_func_t) \
                              ucs_empty_function_return_unsupported, \
        .rkey_release       = uct_remapring_rkey_release, \
        .name               = _name, \
        .md_config          = { \
            .name           = _name " memory domain", \
            .prefix         = _cfg_prefix, \
            .table          = _cfg_table, \
            .size           = sizeof(_cfg_struct), \
        }, \
        .cm_config          = UCS_CONFIG_EMPTY_GLOBAL_LIST_ENTRY, \
        .tl_list            = UCT_COMPONENT_TL_LIST_INITIALIZER(&_var), \
        .flags              = 0, \
        .md_vfs_init        = (uct_component_md_vfs_init_func_t) \
                              ucs_empty_function \
    }
/* clang-format on */


/**
 * The check word of a packed remote key: a CRC of its first @a size bytes
 * with the top bit of each byte set (no byte of it is zero), which guards
 * against truncated or foreign keys; packed last in the key.
 */
uint32_t uct_remapring_rkey_check_word(const void *rkey, size_t size);

REMAPRING_API_END

#endif
