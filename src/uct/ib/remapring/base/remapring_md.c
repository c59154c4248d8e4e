/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "remapring_md.h"

#include <ucs/algorithm/crc.h>
#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>


/* clang-format off */
ucs_config_field_t uct_remapring_md_config_table[] = {
    {"", "", NULL,
     ucs_offsetof(uct_remapring_md_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_md_config_table)},

    {"MEMCACHE", "y",
     "Register memory through the memory cache kept coherent by the kernel's\n"
     "unmap events (see UCX_REMAPRING_NOTIFIER): a repeated registration of\n"
     "the same buffer costs no system call, and the memory type comes from\n"
     "the cache. The cache and its notifier start on the first registration\n"
     "after the transport carried traffic (an endpoint or a ring exists), so\n"
     "processes that load the module but use other transports pay nothing.\n"
     "With 'n' every registration is its own.",
     ucs_offsetof(uct_remapring_md_config_t, memcache),
     UCS_CONFIG_TYPE_BOOL},

    {NULL}
};
/* clang-format on */


void uct_remapring_md_init(uct_remapring_md_t *md, uct_component_t *component,
                           uct_md_ops_t *md_ops,
                           const uct_remapring_md_ops_t *reg_ops,
                           const uct_md_config_t *config)
{
    md->super.ops       = md_ops;
    md->super.component = component;
    md->reg_ops         = reg_ops;
    md->use_memcache =
            ucs_derived_of(config, uct_remapring_md_config_t)->memcache;
    md->in_use   = 0;
    md->memcache = NULL;
}

void uct_remapring_md_cleanup(uct_remapring_md_t *md)
{
    if (md->memcache != NULL) {
        ucs_memcache_destroy(md->memcache);
    }
}

void uct_remapring_md_set_in_use(uct_md_h uct_md)
{
    uct_remapring_md_t *md = ucs_derived_of(uct_md, uct_remapring_md_t);

    __atomic_store_n(&md->in_use, 1, __ATOMIC_RELAXED);
}

static ucs_status_t
uct_remapring_md_cache_reg(void *arg, ucs_memcache_region_t *region)
{
    uct_remapring_md_t *md = arg;
    uct_remapring_memh_t *memh;
    ucs_status_t status;

    status = md->reg_ops->reg(md, (void *)region->range.start,
                              region->range.end - region->range.start, &memh);
    if (status != UCS_OK) {
        return status;
    }

    memh->region = region;
    region->memh = memh;
    return UCS_OK;
}

/* From the thread that put the last reference, or the notifier's (an
 * unmap) */
static void
uct_remapring_md_cache_dereg(void *arg, ucs_memcache_region_t *region)
{
    uct_remapring_md_t *md = arg;

    md->reg_ops->dereg(md, region->memh);
}

/* The cache starts the notifier: make it only once this memory domain
 * carries traffic, never in processes that merely load the module or that
 * register memory with every memory domain (UCP does) but send through
 * other transports */
ucs_memcache_t *uct_remapring_md_cache(uct_remapring_md_t *md)
{
    ucs_memcache_params_t params = {.name  = md->reg_ops->cache_name,
                                    .reg   = uct_remapring_md_cache_reg,
                                    .dereg = uct_remapring_md_cache_dereg,
                                    .arg   = md};
    ucs_memcache_t *cache, *expected = NULL;
    ucs_status_t status;

    cache = __atomic_load_n(&md->memcache, __ATOMIC_ACQUIRE);
    if (ucs_likely(cache != NULL) || !md->use_memcache ||
        !__atomic_load_n(&md->in_use, __ATOMIC_RELAXED)) {
        return cache;
    }

    status = ucs_memcache_create(&params, &cache);
    if (status != UCS_OK) {
        ucs_diag("%s: memory cache unavailable (%s), registering without it",
                 params.name, ucs_status_string(status));
        md->use_memcache = 0;
        return NULL;
    }

    if (!__atomic_compare_exchange_n(&md->memcache, &expected, cache, 0,
                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        /* another thread made one first */
        ucs_memcache_destroy(cache);
        cache = expected;
    }

    return cache;
}

ucs_status_t uct_remapring_md_mem_reg(uct_md_h uct_md, void *address,
                                      size_t length, unsigned flags,
                                      uct_mem_h *memh_p)
{
    uct_remapring_md_t *md = ucs_derived_of(uct_md, uct_remapring_md_t);
    ucs_memcache_t *cache  = uct_remapring_md_cache(md);
    ucs_memcache_region_t *region;
    uct_remapring_memh_t *memh;
    ucs_status_t status;

    if ((cache != NULL) && (length > 0)) {
        status = ucs_memcache_get(cache, address, length, &region);
        if (status != UCS_OK) {
            ucs_error("%s: cannot register %p length %zu: %s",
                      md->reg_ops->cache_name, address, length,
                      ucs_status_string(status));
            return status;
        }

        *memh_p = region->memh;
        return UCS_OK;
    }

    status = md->reg_ops->reg(md, address, length, &memh);
    if (status != UCS_OK) {
        return status;
    }

    memh->region = NULL;
    *memh_p      = memh;
    return UCS_OK;
}

ucs_status_t uct_remapring_md_mem_dereg(uct_md_h uct_md,
                                        const uct_md_mem_dereg_params_t *params)
{
    uct_remapring_md_t *md = ucs_derived_of(uct_md, uct_remapring_md_t);
    uct_remapring_memh_t *memh;

    UCT_MD_MEM_DEREG_CHECK_PARAMS(params, 0);

    memh = params->memh;
    if (memh->region != NULL) {
        ucs_memcache_put(md->memcache, memh->region);
    } else {
        md->reg_ops->dereg(md, memh);
    }

    return UCS_OK;
}

ucs_status_t uct_remapring_rkey_release(uct_component_t *component,
                                        uct_rkey_t rkey, void *handle)
{
    ucs_free((void*)rkey);
    return UCS_OK;
}

uint32_t uct_remapring_rkey_check_word(const void *rkey, size_t size)
{
    /* no byte of it zero: a key cut short and zero-filled after its end
     * never keeps its check word (with a CRC alone, 1 key in 256 ended in
     * a zero byte and passed truncated by one) */
    return ucs_crc32(0, rkey, size) | 0x80808080u;
}
