/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "fuzz_uct.h"

#include <ucs/async/async.h>
#include <ucs/config/global_opts.h>

#include <string.h>

uct_component_h fuzz_uct_component(unsigned index, char *md_name, size_t max)
{
    uct_md_resource_desc_t mds[8];
    uct_component_attr_t attr;
    uct_component_h *components, found = NULL;
    unsigned count, i;

    if (getenv("UCX_LOG_LEVEL") == NULL) {
        ucs_global_opts.log_component.log_level = UCS_LOG_LEVEL_FATAL;
    }

    FUZZ_CHECK(uct_query_components(&components, &count) == UCS_OK);
    for (i = 0; i < count; ++i) {
        attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
                          UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
        if ((uct_component_query(components[i], &attr) != UCS_OK) ||
            (strcmp(attr.name, "remapring") != 0) ||
            (attr.md_resource_count <= index) || (attr.md_resource_count > 8)) {
            continue;
        }

        attr.field_mask   = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
        attr.md_resources = mds;
        FUZZ_CHECK(uct_component_query(components[i], &attr) == UCS_OK);
        snprintf(md_name, max, "%s", mds[index].md_name);
        found = components[i];
        break;
    }

    uct_release_component_list(components);
    return found;
}

ucs_status_t fuzz_uct_iface_open(uct_md_h md, uct_worker_h worker,
                                 uct_iface_config_t *config,
                                 uct_error_handler_t err_handler, void *err_arg,
                                 fuzz_iface_t *f)
{
    uct_iface_params_t params;
    ucs_status_t status;

    memset(f, 0, sizeof(*f));
    memset(&params, 0, sizeof(params));
    params.field_mask = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                        UCT_IFACE_PARAM_FIELD_DEVICE |
                        UCT_IFACE_PARAM_FIELD_RX_HEADROOM;
    params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    params.mode.device.tl_name  = "remapring";
    params.mode.device.dev_name = "memory";
    params.rx_headroom          = FUZZ_UCT_RX_HEADROOM;
    if (err_handler != NULL) {
        params.field_mask |= UCT_IFACE_PARAM_FIELD_ERR_HANDLER |
                             UCT_IFACE_PARAM_FIELD_ERR_HANDLER_ARG |
                             UCT_IFACE_PARAM_FIELD_ERR_HANDLER_FLAGS;
        params.err_handler       = err_handler;
        params.err_handler_arg   = err_arg;
        params.err_handler_flags = 0;
    }

    status = uct_iface_open(md, worker, &params, config, &f->iface);
    if (status != UCS_OK) {
        f->iface = NULL;
        return status;
    }

    FUZZ_CHECK(uct_iface_query(f->iface, &f->attr) == UCS_OK);
    FUZZ_CHECK(f->attr.device_addr_len <= sizeof(f->dev_addr));
    FUZZ_CHECK(f->attr.iface_addr_len <= sizeof(f->iface_addr));
    FUZZ_CHECK(uct_iface_get_device_address(f->iface,
                                            (uct_device_addr_t *)f->dev_addr) ==
               UCS_OK);
    FUZZ_CHECK(uct_iface_get_address(f->iface,
                                     (uct_iface_addr_t *)f->iface_addr) ==
               UCS_OK);
    uct_iface_progress_enable(f->iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    return UCS_OK;
}

ucs_status_t fuzz_uct_open(uct_component_h component, const char *md_name,
                           const char **settings,
                           uct_error_handler_t err_handler, void *err_arg,
                           fuzz_uct_t *e)
{
    uct_md_config_t *md_config;
    fuzz_iface_t f;
    uct_iface_config_t *iface_config;
    ucs_status_t status;

    memset(e, 0, sizeof(*e));
    status = ucs_async_context_create(UCS_ASYNC_MODE_POLL, &e->async);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_worker_create(e->async, UCS_THREAD_MODE_SINGLE, &e->worker);
    if (status != UCS_OK) {
        goto err;
    }

    status = uct_md_config_read(component, NULL, NULL, &md_config);
    if (status != UCS_OK) {
        goto err;
    }

    status = uct_md_open(component, md_name, md_config, &e->md);
    uct_config_release(md_config);
    if (status != UCS_OK) {
        goto err;
    }

    status = uct_md_query(e->md, &e->md_attr);
    if (status != UCS_OK) {
        goto err;
    }

    status = uct_md_iface_config_read(e->md, "remapring", NULL, NULL,
                                      &iface_config);
    if (status != UCS_OK) {
        goto err;
    }

    for (; (settings != NULL) && (settings[0] != NULL); settings += 2) {
        status = uct_config_modify(iface_config, settings[0], settings[1]);
        if (status != UCS_OK) {
            uct_config_release(iface_config);
            goto err;
        }
    }

    status = fuzz_uct_iface_open(e->md, e->worker, iface_config, err_handler,
                                 err_arg, &f);
    uct_config_release(iface_config);
    if (status != UCS_OK) {
        goto err;
    }

    e->iface = f.iface;
    e->attr  = f.attr;
    memcpy(e->dev_addr, f.dev_addr, sizeof(e->dev_addr));
    memcpy(e->iface_addr, f.iface_addr, sizeof(e->iface_addr));
    return UCS_OK;

err:
    fuzz_uct_close(e);
    return status;
}

void fuzz_uct_close(fuzz_uct_t *e)
{
    if (e->iface != NULL) {
        uct_iface_close(e->iface);
    }
    if (e->md != NULL) {
        uct_md_close(e->md);
    }
    if (e->worker != NULL) {
        uct_worker_destroy(e->worker);
    }
    if (e->async != NULL) {
        ucs_async_context_destroy(e->async);
    }
    memset(e, 0, sizeof(*e));
}
