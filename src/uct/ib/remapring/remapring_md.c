/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "remapring_md.h"

#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/type/init_once.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>


/* clang-format off */
static ucs_config_field_t uct_remapring_md_config_table[] = {
    {"", "", NULL,
     ucs_offsetof(uct_remapring_md_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_md_config_table)},

    {NULL}
};
/* clang-format on */


static int uct_remapring_md_probe_host(void)
{
    uint64_t src = 1, dst = 0;
    struct iovec local  = {.iov_base = &src, .iov_len = sizeof(src)};
    struct iovec remote = {.iov_base = &dst, .iov_len = sizeof(dst)};
    int fd;

    /* The cma wire writes into the peer's ring view with process_vm_writev;
     * Yama or seccomp may forbid it even for our own pid */
    if (process_vm_writev(getpid(), &local, 1, &remote, 1, 0) != sizeof(dst)) {
        ucs_debug("remapring: process_vm_writev to self failed: %m");
        return 0;
    }

    fd = memfd_create("remapring-probe", MFD_CLOEXEC);
    if (fd < 0) {
        ucs_debug("remapring: memfd_create failed: %m");
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

static ucs_status_t
uct_remapring_query_md_resources(uct_component_t *component,
                                 uct_md_resource_desc_t **resources_p,
                                 unsigned *num_resources_p)
{
    if (!uct_remapring_md_host_supported()) {
        return uct_md_query_empty_md_resource(resources_p, num_resources_p);
    }

    return uct_md_query_single_md_resource(component, resources_p,
                                           num_resources_p);
}

static ucs_status_t
uct_remapring_md_query(uct_md_h uct_md, uct_md_attr_t *md_attr)
{
    md_attr->rkey_packed_size     = 0;
    md_attr->cap.flags            = 0;
    md_attr->cap.reg_mem_types    = 0;
    md_attr->cap.alloc_mem_types  = 0;
    md_attr->cap.access_mem_types = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    md_attr->cap.detect_mem_types = 0;
    md_attr->cap.max_alloc        = 0;
    md_attr->cap.max_reg          = 0;
    md_attr->reg_cost             = ucs_linear_func_make(0, 0);

    memset(&md_attr->local_cpus, 0xff, sizeof(md_attr->local_cpus));
    return UCS_OK;
}

static void uct_remapring_md_close(uct_md_h uct_md)
{
    ucs_free(ucs_derived_of(uct_md, uct_remapring_md_t));
}

static ucs_status_t
uct_remapring_md_open(uct_component_t *component, const char *md_name,
                      const uct_md_config_t *config, uct_md_h *md_p)
{
    /* clang-format off */
    static uct_md_ops_t md_ops = {
        .close                  = uct_remapring_md_close,
        .query                  = uct_remapring_md_query,
        .mem_alloc              = (uct_md_mem_alloc_func_t)
                                  ucs_empty_function_return_unsupported,
        .mem_free               = (uct_md_mem_free_func_t)
                                  ucs_empty_function_return_unsupported,
        .mem_advise             = (uct_md_mem_advise_func_t)
                                  ucs_empty_function_return_unsupported,
        .mem_reg                = (uct_md_mem_reg_func_t)
                                  ucs_empty_function_return_unsupported,
        .mem_dereg              = (uct_md_mem_dereg_func_t)
                                  ucs_empty_function_return_unsupported,
        .mem_query              = (uct_md_mem_query_func_t)
                                  ucs_empty_function_return_unsupported,
        .mkey_pack              = (uct_md_mkey_pack_func_t)
                                  ucs_empty_function_return_unsupported,
        .is_sockaddr_accessible = ucs_empty_function_return_zero_int,
        .detect_memory_type     = (uct_md_detect_memory_type_func_t)
                                  ucs_empty_function_return_unsupported,
    };
    /* clang-format on */
    uct_remapring_md_t *md;

    md = ucs_calloc(1, sizeof(*md), "uct_remapring_md_t");
    if (md == NULL) {
        ucs_error("remapring: failed to allocate memory domain");
        return UCS_ERR_NO_MEMORY;
    }

    md->super.ops       = &md_ops;
    md->super.component = &uct_remapring_component;
    *md_p               = &md->super;
    return UCS_OK;
}

/* clang-format off */
uct_component_t uct_remapring_component = {
    .query_md_resources = uct_remapring_query_md_resources,
    .md_open            = uct_remapring_md_open,
    .cm_open            = (uct_component_cm_open_func_t)
                          ucs_empty_function_return_unsupported,
    .rkey_unpack        = uct_md_stub_rkey_unpack,
    .rkey_ptr           = (uct_component_rkey_ptr_func_t)
                          ucs_empty_function_return_unsupported,
    .rkey_release       = (uct_component_rkey_release_func_t)
                          ucs_empty_function_return_success,
    .name               = UCT_REMAPRING_NAME,
    .md_config          = {
        .name           = "remapring memory domain",
        .prefix         = "REMAPRING_",
        .table          = uct_remapring_md_config_table,
        .size           = sizeof(uct_remapring_md_config_t),
    },
    .cm_config          = UCS_CONFIG_EMPTY_GLOBAL_LIST_ENTRY,
    .tl_list            = UCT_COMPONENT_TL_LIST_INITIALIZER(
                                  &uct_remapring_component),
    .flags              = 0,
    .md_vfs_init        = (uct_component_md_vfs_init_func_t)
                          ucs_empty_function
};
/* clang-format on */
