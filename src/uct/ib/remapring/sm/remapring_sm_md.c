/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "remapring_sm_md.h"

#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/math.h>
#include <ucs/sys/sys.h>
#include <ucs/type/init_once.h>

#include <inttypes.h>
#include <limits.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>


static int uct_remapring_md_probe_host(void)
{
    uint64_t src = 1, dst = 0;
    struct iovec local  = {.iov_base = &src, .iov_len = sizeof(src)};
    struct iovec remote = {.iov_base = &dst, .iov_len = sizeof(dst)};
    int fd;

    /* The cma wire writes into the peer's ring view with process_vm_writev;
     * Yama or seccomp may forbid it even for our own pid */
    if (process_vm_writev(getpid(), &local, 1, &remote, 1, 0) != sizeof(dst)) {
        ucs_debug("process_vm_writev to self failed: %m");
        return 0;
    }

    fd = memfd_create("remapring-probe", MFD_CLOEXEC);
    if (fd < 0) {
        ucs_debug("memfd_create failed: %m");
        return 0;
    }

    close(fd);
    return 1;
}

int uct_remapring_md_host_supported(void)
{
    static ucs_init_once_t init_once = UCS_INIT_ONCE_INITIALIZER;
    static int supported;

    UCS_INIT_ONCE(&init_once) {
        supported = uct_remapring_md_probe_host();
    }

    return supported;
}

ucs_status_t uct_remapring_rkey_check(uct_rkey_t tl_rkey, pid_t pid,
                                      uint64_t address, size_t length)
{
    const uct_remapring_rkey_t *rkey = (const uct_remapring_rkey_t *)tl_rkey;

    if (ucs_unlikely((tl_rkey == 0) || (tl_rkey == UCT_INVALID_RKEY))) {
        ucs_error("no remote key for 0x%" PRIx64 "+%zu", address, length);
        return UCS_ERR_INVALID_PARAM;
    }

    if (ucs_unlikely(rkey->pid != pid)) {
        ucs_error("rkey of pid %d used with a peer of pid %d", rkey->pid, pid);
        return UCS_ERR_INVALID_PARAM;
    }

    if (ucs_unlikely((address < rkey->address) || (length > rkey->length) ||
                     (address - rkey->address > rkey->length - length))) {
        ucs_error("range 0x%" PRIx64 "+%zu is outside rkey 0x%" PRIx64
                  "+%" PRIu64,
                  address, length, rkey->address, rkey->length);
        return UCS_ERR_INVALID_PARAM;
    }

    return UCS_OK;
}

static ucs_status_t
uct_remapring_sm_md_query(uct_md_h uct_md, uct_md_attr_t *md_attr)
{
    md_attr->rkey_packed_size = sizeof(uct_remapring_rkey_t);
    md_attr->cap.flags        = UCT_MD_FLAG_REG | UCT_MD_FLAG_ALLOC |
                         UCT_MD_FLAG_NEED_RKEY;
    md_attr->cap.reg_mem_types    = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    md_attr->cap.alloc_mem_types  = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    md_attr->cap.access_mem_types = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    /* detect_memory_type() answers from the memory cache, but only host
     * memory exists here: advertising it would make UCP route every buffer
     * through this memory domain for nothing */
    md_attr->cap.detect_mem_types = 0;
    md_attr->cap.max_alloc        = ULONG_MAX;
    md_attr->cap.max_reg          = ULONG_MAX;
    /* a registration is bookkeeping only: the kernel resolves addresses at
     * each process_vm_readv/writev, as a NIC with ODP does */
    md_attr->reg_cost = ucs_linear_func_make(50e-9, 0);

    memset(&md_attr->local_cpus, 0xff, sizeof(md_attr->local_cpus));
    return UCS_OK;
}

static ucs_status_t uct_remapring_sm_reg(uct_remapring_md_t *md, void *address,
                                         size_t length,
                                         uct_remapring_memh_t **memh_p)
{
    uct_remapring_memh_t *memh;

    memh = ucs_malloc(sizeof(*memh), "uct_remapring_memh_t");
    if (memh == NULL) {
        ucs_error("failed to allocate a memory handle");
        return UCS_ERR_NO_MEMORY;
    }

    memh->address   = address;
    memh->pid       = getpid();
    memh->length    = length;
    memh->region    = NULL;
    memh->allocated = 0;
    *memh_p         = memh;
    return UCS_OK;
}

static void
uct_remapring_sm_dereg(uct_remapring_md_t *md, uct_remapring_memh_t *memh)
{
    ucs_free(memh);
}

/* Plain anonymous memory: a peer reaches it through process_vm_readv/writev
 * as any other of our memory */
static ucs_status_t
uct_remapring_sm_mem_alloc(uct_md_h uct_md, size_t *length_p, void **address_p,
                           ucs_memory_type_t mem_type, unsigned flags,
                           const char *alloc_name, uct_mem_h *memh_p)
{
    size_t length = ucs_align_up_pow2(*length_p, ucs_get_page_size());
    uct_remapring_memh_t *memh;
    void *address;

    if (mem_type != UCS_MEMORY_TYPE_HOST) {
        return UCS_ERR_UNSUPPORTED;
    }

    memh = ucs_malloc(sizeof(*memh), "uct_remapring_memh_t");
    if (memh == NULL) {
        ucs_error("failed to allocate a memory handle");
        return UCS_ERR_NO_MEMORY;
    }

    address = mmap(NULL, length, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (address == MAP_FAILED) {
        ucs_error("failed to allocate %zu bytes for %s: %m", length,
                  alloc_name);
        ucs_free(memh);
        return UCS_ERR_NO_MEMORY;
    }

    memh->address   = address;
    memh->pid       = getpid();
    memh->length    = length;
    memh->region    = NULL;
    memh->allocated = 1;
    *length_p       = length;
    *address_p      = address;
    *memh_p         = memh;
    return UCS_OK;
}

static ucs_status_t
uct_remapring_sm_mem_free(uct_md_h uct_md, uct_mem_h uct_memh)
{
    uct_remapring_memh_t *memh = uct_memh;

    munmap(memh->address, memh->length);
    ucs_free(memh);
    return UCS_OK;
}

static ucs_status_t
uct_remapring_sm_md_detect_memory_type(uct_md_h uct_md, const void *address,
                                       size_t length,
                                       ucs_memory_type_t *mem_type_p)
{
    uct_remapring_md_t *md = ucs_derived_of(uct_md, uct_remapring_md_t);
    ucs_memcache_t *cache  = uct_remapring_md_cache(md);
    ucs_memcache_info_t info;
    ucs_status_t status;

    if (cache != NULL) {
        return ucs_memcache_mem_type(cache, (void *)address, length,
                                     mem_type_p);
    }

    status = ucs_memcache_classify((void *)address, length, &info);
    if (status == UCS_OK) {
        *mem_type_p = info.mem_type;
    }

    return status;
}

static ucs_status_t
uct_remapring_sm_mkey_pack(uct_md_h md, uct_mem_h uct_memh,
                           const uct_md_mkey_pack_params_t *params,
                           void *rkey_buffer)
{
    const uct_remapring_memh_t *memh = uct_memh;
    uct_remapring_rkey_t rkey;

    rkey.magic   = UCT_REMAPRING_RKEY_MAGIC;
    rkey.address = (uintptr_t)memh->address;
    rkey.length  = memh->length;
    rkey.pid     = memh->pid;
    rkey.check   = uct_remapring_rkey_check_word(
              &rkey, ucs_offsetof(uct_remapring_rkey_t, check));
    memcpy(rkey_buffer, &rkey, sizeof(rkey));
    return UCS_OK;
}

ucs_status_t
uct_remapring_sm_rkey_unpack(const void *rkey_buffer, uct_rkey_t *rkey_p)
{
    uct_remapring_rkey_t *rkey;

    rkey = ucs_malloc(sizeof(*rkey), "uct_remapring_rkey_t");
    if (rkey == NULL) {
        ucs_error("failed to allocate an rkey");
        return UCS_ERR_NO_MEMORY;
    }

    memcpy(rkey, rkey_buffer, sizeof(*rkey));
    if ((rkey->magic != UCT_REMAPRING_RKEY_MAGIC) ||
        (rkey->check !=
         uct_remapring_rkey_check_word(rkey, ucs_offsetof(uct_remapring_rkey_t,
                                                          check))) ||
        (rkey->pid <= 0) || (rkey->address + rkey->length < rkey->address)) {
        ucs_error("malformed rkey (magic 0x%" PRIx64 " pid %d range 0x%" PRIx64
                  "+%" PRIu64 ")",
                  rkey->magic, rkey->pid, rkey->address, rkey->length);
        ucs_free(rkey);
        return UCS_ERR_INVALID_PARAM;
    }

    *rkey_p = (uintptr_t)rkey;
    return UCS_OK;
}

static void uct_remapring_sm_md_close(uct_md_h uct_md)
{
    uct_remapring_md_t *md = ucs_derived_of(uct_md, uct_remapring_md_t);

    uct_remapring_md_cleanup(md);
    ucs_free(md);
}

/* clang-format off */
static uct_md_ops_t uct_remapring_sm_md_ops = {
    .close                  = uct_remapring_sm_md_close,
    .query                  = uct_remapring_sm_md_query,
    .mem_alloc              = uct_remapring_sm_mem_alloc,
    .mem_free               = uct_remapring_sm_mem_free,
    .mem_advise             = (uct_md_mem_advise_func_t)
                              ucs_empty_function_return_unsupported,
    .mem_reg                = uct_remapring_md_mem_reg,
    .mem_dereg              = uct_remapring_md_mem_dereg,
    .mem_query              = (uct_md_mem_query_func_t)
                              ucs_empty_function_return_unsupported,
    .mkey_pack              = uct_remapring_sm_mkey_pack,
    .is_sockaddr_accessible = ucs_empty_function_return_zero_int,
    .detect_memory_type     = uct_remapring_sm_md_detect_memory_type,
};

static const uct_remapring_md_ops_t uct_remapring_sm_md_reg_ops = {
    .cache_name = "remapring",
    .reg        = uct_remapring_sm_reg,
    .dereg      = uct_remapring_sm_dereg
};
/* clang-format on */

ucs_status_t uct_remapring_sm_md_open(uct_component_t *component,
                                      const uct_md_config_t *config,
                                      uct_md_h *md_p)
{
    uct_remapring_md_t *md;

    md = ucs_calloc(1, sizeof(*md), "uct_remapring_md_t");
    if (md == NULL) {
        ucs_error("failed to allocate memory domain");
        return UCS_ERR_NO_MEMORY;
    }

    uct_remapring_md_init(md, component, &uct_remapring_sm_md_ops,
                          &uct_remapring_sm_md_reg_ops, config);
    *md_p = &md->super;
    return UCS_OK;
}

static ucs_status_t
uct_remapring_sm_query_md_resources(uct_component_t *component,
                                    uct_md_resource_desc_t **resources_p,
                                    unsigned *num_resources_p)
{
    return uct_remapring_md_host_supported() ?
                   uct_md_query_single_md_resource(component, resources_p,
                                                   num_resources_p) :
                   uct_md_query_empty_md_resource(resources_p, num_resources_p);
}

static ucs_status_t
uct_remapring_sm_component_md_open(uct_component_t *component,
                                   const char *md_name,
                                   const uct_md_config_t *config,
                                   uct_md_h *md_p)
{
    return uct_remapring_sm_md_open(component, config, md_p);
}

static ucs_status_t
uct_remapring_sm_component_rkey_unpack(uct_component_t *component,
                                       const void *rkey_buffer,
                                       uct_rkey_t *rkey_p, void **handle_p)
{
    *handle_p = NULL;
    return uct_remapring_sm_rkey_unpack(rkey_buffer, rkey_p);
}

UCT_REMAPRING_COMPONENT_DEFINE(uct_remapring_sm_component, UCT_REMAPRING_NAME,
                               UCT_REMAPRING_CONFIG_PREFIX,
                               uct_remapring_md_config_table,
                               uct_remapring_md_config_t,
                               uct_remapring_sm_query_md_resources,
                               uct_remapring_sm_component_md_open,
                               uct_remapring_sm_component_rkey_unpack);
