/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * What the fuzz targets that go through UCT share: the remapring component,
 * an interface opened through UCT's public API (fuzz_input.h: the input).
 */

#ifndef REMAPRING_FUZZ_UCT_H_
#define REMAPRING_FUZZ_UCT_H_

#include "fuzz_input.h"

#include <uct/api/uct.h>
#include <ucs/async/async_fwd.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/** The headroom the interfaces the targets open ask for */
#define FUZZ_UCT_RX_HEADROOM 16

/** One remapring interface, its attributes and addresses */
typedef struct {
    uct_iface_h iface;
    uct_iface_attr_t attr;
    uint8_t dev_addr[64];
    uint8_t iface_addr[64];
} fuzz_iface_t;

/** One memory domain, worker and remapring interface */
typedef struct {
    ucs_async_context_t *async;
    uct_worker_h worker;
    uct_md_h md;
    uct_md_attr_t md_attr;
    uct_iface_h iface;
    uct_iface_attr_t attr;
    uint8_t dev_addr[64];
    uint8_t iface_addr[64];
} fuzz_uct_t;

/**
 * Quiet UCX (log level, unless UCX_LOG_LEVEL is set) and find the
 * remapring component and the name of its @a index-th memory domain;
 * aborts if there is none.
 */
uct_component_h fuzz_uct_component(unsigned index, char *md_name, size_t max);

/**
 * Open an interface on @a md_name with UCX_REMAPRING_<name>=<value>
 * settings (@a settings: NULL-terminated pairs, or NULL) and an error
 * handler (or NULL).
 */
ucs_status_t fuzz_uct_open(uct_component_h component, const char *md_name,
                           const char **settings,
                           uct_error_handler_t err_handler, void *err_arg,
                           fuzz_uct_t *e);

/**
 * Open an interface on @a md and @a worker with @a config (and an error
 * handler, or NULL), progress enabled, and fill in @a f. Returns what
 * uct_iface_open() returned; what follows an open must not fail.
 */
ucs_status_t fuzz_uct_iface_open(uct_md_h md, uct_worker_h worker,
                                 uct_iface_config_t *config,
                                 uct_error_handler_t err_handler, void *err_arg,
                                 fuzz_iface_t *f);

/** Close what fuzz_uct_open() opened */
void fuzz_uct_close(fuzz_uct_t *e);

#endif
