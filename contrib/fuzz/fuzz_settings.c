/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * Fuzz target: the transport's settings, as a user writes them in the
 * environment (UCX_REMAPRING_<NAME>=<value>).
 *
 * Each input is a list of settings: a name from the transport's
 * configuration table (its own fields and those of UCX's common interface
 * table, found by walking uct_remapring_tl's table), and a value that is
 * either one of the forms the parsers take or nearly do (sizes with and
 * without units, inf, auto, the enum names, powers of two and their
 * neighbours, the documented limits and one past them, negative and
 * overflowing numbers, times and bandwidths, blanks) or raw bytes. Each is
 * applied with uct_config_modify(), as UCX applies the environment, to a
 * fresh copy of the defaults. Then, if the input asks, an interface opens
 * with them, and a sender of this process with the default settings sends
 * it an active message.
 *
 * What must hold, besides no crash, no sanitizer report and no leak:
 * - uct_remapring_sm_iface_config_check() takes the settings or refuses them
 *   with UCS_ERR_INVALID_PARAM; an interface opens only with settings it
 *   takes, and opening takes less than libFuzzer's -timeout and -rss_limit
 *   (a setting that passes the check must not make it allocate or touch
 *   what the machine cannot have);
 * - an interface that opened reports capabilities within its geometry; a
 *   message the default sender may send it arrives whole; once it closed,
 *   every pool block of this process is back.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "fuzz_uct.h"

#include <uct/base/uct_iface.h>
#include <uct/ib/remapring/sm/remapring_sm.h>
#include <uct/ib/remapring/ring/ring_pool.h>

#include <string.h>

#define FUZZ_MAX_NAMES    64
#define FUZZ_MAX_SETTINGS 16
#define FUZZ_MAX_RAW      24
#define FUZZ_AM_ID        3

extern uct_tl_t uct_remapring_tl;

/* Values: what the parsers take, and what they nearly take */
/* clang-format off */
static const char *fuzz_values[] = {
        "0", "1", "2", "3", "4", "7", "8", "15", "16", "17", "31", "32", "63",
        "64", "65", "255", "256", "1023", "1024", "1025", "4095", "4096",
        "4097", "16384", "65535", "65536", "65537", "1k", "2k", "4k", "8k",
        "16k", "64k", "256k", "1m", "1M", "2m", "64m", "1g", "4g", "1t", "1p",
        "inf", "INF", "auto", "AUTO", "-1", "-4096", "4294967295",
        "4294967296", "2147483648", "18446744073709551615",
        "18446744073709551616", "0x1000", "010", "1e3", "1.5k", "", " ", "k",
        "64kb", "64KB", "64 k", " 64k", "64k ", "shm", "cma", "SHM", "verbs",
        "odp", "pinned", "y", "n", "yes", "no", "1us", "1ms", "1s", "0.5us",
        "-1us", "1GBs", "10MBs", "100Gbps", "0Bs", "auto:1", "1,2", "\t"};
/* clang-format on */

static uct_component_h component;
static char md_name[64];
static fuzz_uct_t sender; /* default settings; its md and worker serve the
                             interfaces the inputs open */
static const char *names[FUZZ_MAX_NAMES];
static unsigned nnames;
static unsigned nreceived;
static uint64_t received_hdr;

static ucs_status_t
fuzz_am_handler(void *arg, void *data, size_t length, unsigned flags)
{
    FUZZ_CHECK(length == sizeof(uint64_t));
    memcpy(&received_hdr, data, sizeof(received_hdr));
    ++nreceived;
    return UCS_OK;
}

/* The settings of @a table and of the tables it includes */
static void fuzz_collect_names(const ucs_config_field_t *table)
{
    const ucs_config_field_t *field;

    for (field = table; field->name != NULL; ++field) {
        if (field->parser.read == ucs_config_sscanf_table) {
            fuzz_collect_names(field->parser.arg);
        } else if ((field->offset != UCS_CONFIG_DEPRECATED_FIELD_OFFSET) &&
                   (nnames < FUZZ_MAX_NAMES)) {
            names[nnames++] = field->name;
        }
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    component = fuzz_uct_component(0, md_name, sizeof(md_name));
    FUZZ_CHECK(component != NULL);
    FUZZ_CHECK(fuzz_uct_open(component, md_name, NULL, NULL, NULL, &sender) ==
               UCS_OK);
    fuzz_collect_names(uct_remapring_tl.config.table);
    FUZZ_CHECK(nnames > 10);
    return 0;
}

/* One value: from the list, or raw bytes (up to the first NUL) */
static const char *fuzz_value(fuzz_input_t *in, char *raw)
{
    uint8_t pick = fuzz_u8(in);
    size_t length;

    if (pick < 0xc0) {
        return fuzz_values[pick % ucs_static_array_size(fuzz_values)];
    }

    length = fuzz_u8(in) % FUZZ_MAX_RAW;
    fuzz_bytes(in, raw, length);
    raw[length] = '\0';
    return raw;
}

/* The default sender sends one active message to @a rx, if it may */
static void fuzz_send_to(const fuzz_iface_t *rx)
{
    uint64_t hdr = 0x5e77196500000000ull | rx->attr.cap.am.max_short;
    uct_ep_params_t params;
    ucs_status_t status;
    uct_ep_h ep;
    unsigned i;

    if (!uct_iface_is_reachable(sender.iface, (uct_device_addr_t *)rx->dev_addr,
                                (uct_iface_addr_t *)rx->iface_addr)) {
        return; /* its rings take smaller records than ours */
    }

    memset(&params, 0, sizeof(params));
    params.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR |
                        UCT_EP_PARAM_FIELD_IFACE_ADDR;
    params.iface      = sender.iface;
    params.dev_addr   = (uct_device_addr_t *)rx->dev_addr;
    params.iface_addr = (uct_iface_addr_t *)rx->iface_addr;
    status            = uct_ep_create(&params, &ep);
    if (status != UCS_OK) {
        /* refused: the receiver's pool has no room for a ring (a pool
         * limit the check takes, but too small for one more sender) */
        FUZZ_CHECK(status != UCS_ERR_INVALID_PARAM);
        return;
    }

    nreceived = 0;
    status    = UCS_ERR_NO_RESOURCE;
    for (i = 0; (i < 1000) && (status == UCS_ERR_NO_RESOURCE); ++i) {
        status = uct_ep_am_short(ep, FUZZ_AM_ID, hdr, NULL, 0);
        uct_iface_progress(rx->iface);
        uct_iface_progress(sender.iface);
    }
    FUZZ_CHECK(status == UCS_OK);
    for (i = 0; (i < 1000) && (nreceived == 0); ++i) {
        uct_iface_progress(rx->iface);
        uct_iface_progress(sender.iface);
    }
    FUZZ_CHECK(nreceived == 1);
    FUZZ_CHECK(received_hdr == hdr);

    uct_ep_destroy(ep);
    for (i = 0; i < 16; ++i) {
        uct_iface_progress(rx->iface);
        uct_iface_progress(sender.iface);
    }
}

static void fuzz_open(uct_iface_config_t *config)
{
    uint64_t used = remapring_pool_blocks_in_use(NULL);
    const uct_remapring_iface_config_t *rconfig;
    fuzz_iface_t rx;

    if (fuzz_uct_iface_open(sender.md, sender.worker, config, NULL, NULL,
                            &rx) != UCS_OK) {
        return; /* a resource the settings ask for is not there */
    }

    rconfig = ucs_derived_of(config, uct_remapring_iface_config_t);
    FUZZ_CHECK(rx.attr.cap.am.max_short <= rconfig->block_size);
    FUZZ_CHECK(rx.attr.cap.am.max_bcopy <= rconfig->block_size);
    FUZZ_CHECK(rx.attr.cap.am.max_zcopy <= rconfig->block_size);
    FUZZ_CHECK(uct_iface_set_am_handler(rx.iface, FUZZ_AM_ID, fuzz_am_handler,
                                        NULL, 0) == UCS_OK);
    fuzz_send_to(&rx);

    uct_iface_close(rx.iface);
    FUZZ_CHECK(remapring_pool_blocks_in_use(NULL) == used);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input_t in = {data, size};
    char raw[FUZZ_MAX_RAW + 1];
    uct_iface_config_t *config;
    fuzz_iface_t refused;
    const char *name, *value;
    ucs_status_t status;
    uint8_t flags;
    unsigned i;

    flags = fuzz_u8(&in);
    FUZZ_CHECK(uct_md_iface_config_read(sender.md, "remapring", NULL, NULL,
                                        &config) == UCS_OK);

    for (i = 0; (i < FUZZ_MAX_SETTINGS) && (in.size > 0); ++i) {
        name  = names[fuzz_u8(&in) % nnames];
        value = fuzz_value(&in, raw);
        (void)uct_config_modify(config, name, value);
    }

    status = uct_remapring_sm_iface_config_check(
            ucs_derived_of(config, uct_remapring_sm_iface_config_t));
    FUZZ_CHECK((status == UCS_OK) || (status == UCS_ERR_INVALID_PARAM));
    if (!(flags & 1)) {
        /* the settings alone */
    } else if (status != UCS_OK) {
        /* and the interface does not open with them */
        FUZZ_CHECK(fuzz_uct_iface_open(sender.md, sender.worker, config, NULL,
                                       NULL, &refused) != UCS_OK);
    } else {
        fuzz_open(config);
    }

    uct_config_release(config);
    return 0;
}
