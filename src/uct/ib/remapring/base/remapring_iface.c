/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "remapring_iface.inl"

#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/math.h>
#include <ucs/sys/preprocessor.h>
#include <ucs/sys/string.h>
#include <ucs/sys/sys.h>
#include <ucs/time/time.h>

#include <sys/mman.h>


/* Limits of the shared settings, named once for the check and the help
 * texts */
#define UCT_REMAPRING_BLOCK_SIZE_MAX_G 1 /* GiB */
#define UCT_REMAPRING_BLOCK_SIZE_MAX                                           \
    ((size_t)UCT_REMAPRING_BLOCK_SIZE_MAX_G << 30)
#define UCT_REMAPRING_RING_SLOTS_MIN  2
#define UCT_REMAPRING_RX_INLINE_MAX_K (UCT_REMAPRING_RX_INLINE_MAX / 1024)

_Static_assert(UCT_REMAPRING_BLOCK_SIZE_MAX == REMAPRING_RING_BLOCK_MAX,
               "BLOCK_SIZE's limit is the ring's");
_Static_assert(UCT_REMAPRING_RX_INLINE_MAX_K * 1024 ==
                       UCT_REMAPRING_RX_INLINE_MAX,
               "RX_INLINE's limit in KiB");
_Static_assert(UCT_REMAPRING_AM_MAX_HDR < UCT_REMAPRING_MAX_SHORT_AUTO,
               "an am_zcopy header fits the auto MAX_SHORT");

/* "<limit><unit>" for the help texts */
#define UCT_REMAPRING_STR(_macro, _unit) UCS_PP_MAKE_STRING(_macro) _unit

/* clang-format off */
ucs_config_field_t uct_remapring_iface_config_table[] = {
    {"", "", NULL,
     ucs_offsetof(uct_remapring_iface_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_iface_config_table)},

    {"BLOCK_SIZE", "auto",
     "Size of one receive pool block, which is also the size of one ring slot\n"
     "and the largest message carried in one record: UCP sends eager up to\n"
     "about this size, and by rendezvous above it. A power of two, at least\n"
     "the system page size and at most "
     UCT_REMAPRING_STR(UCT_REMAPRING_BLOCK_SIZE_MAX_G, "g") "; auto: "
     UCT_REMAPRING_STR(UCT_REMAPRING_SM_BLOCK_SIZE_K, "k") " on the\n"
     "shared-memory transport (remapring), where a 128 KiB message then goes\n"
     "eager in one record, "
     UCT_REMAPRING_STR(UCT_REMAPRING_RDMA_BLOCK_SIZE_K, "k") " on the RDMA transport\n"
     "(remaprdma), whose pinned staging and idle window grow with it.",
     ucs_offsetof(uct_remapring_iface_config_t, block_size),
     UCS_CONFIG_TYPE_MEMUNITS},

    {"RING_SLOTS", "auto",
     "Number of slots in the ring window each connected sender writes into;\n"
     "the window is RING_SLOTS * BLOCK_SIZE bytes of address space. A power\n"
     "of two between " UCS_PP_MAKE_STRING(UCT_REMAPRING_RING_SLOTS_MIN)
     " and " UCS_PP_MAKE_STRING(REMAPRING_RING_SLOTS_MAX) ". Each remapped\n"
     "slot costs one VMA, counted against vm.max_map_count. auto: 4 with\n"
     "blocks of " UCT_REMAPRING_STR(UCT_REMAPRING_IDLE_BYTES_K, "k") " or more, else 8 (a 1 MiB window with the\n"
     "default blocks of either transport).",
     ucs_offsetof(uct_remapring_iface_config_t, ring_slots),
     UCS_CONFIG_TYPE_ULUNITS},

    {"POOL_MAX", "1g",
     "Largest memory the receive pool of one interface may use. A connected\n"
     "sender's ring takes IDLE_SLOTS blocks of it (RING_SLOTS on the cma\n"
     "wire), more while it is busy; a sender that finds no room for its ring\n"
     "is refused. A message held in place keeps only the pages it touches.\n"
     "When the pool is nearly full, messages are delivered to be copied\n"
     "instead of kept in place, so that holds never stop the senders. At\n"
     "least RING_SLOTS * BLOCK_SIZE.",
     ucs_offsetof(uct_remapring_iface_config_t, pool_max),
     UCS_CONFIG_TYPE_MEMUNITS},

    {"IDLE_SLOTS", "auto",
     "Ring slots granted to a sender while it is quiet: what an idle\n"
     "connected sender holds of the pool. Each time the sender runs out of\n"
     "credit its grant doubles, up to RING_SLOTS, while the pool has room;\n"
     "when its ring goes quiet the receiver asks for the slots past this\n"
     "grant back, and the sender gives them back from its progress. A power\n"
     "of two between 1 and RING_SLOTS; auto: 1 with blocks of "
     UCT_REMAPRING_STR(UCT_REMAPRING_IDLE_BYTES_K, "k") " or more,\n"
     "else 2 (" UCT_REMAPRING_STR(UCT_REMAPRING_IDLE_BYTES_K, "k") " with the default blocks of either transport).",
     ucs_offsetof(uct_remapring_iface_config_t, idle_slots),
     UCS_CONFIG_TYPE_ULUNITS},

    {"CREDIT_BATCH", "auto",
     "Number of ring slots the receiver consumes before it returns them to\n"
     "the sender as credit. Between 1 and RING_SLOTS / 2; auto: RING_SLOTS / 2.",
     ucs_offsetof(uct_remapring_iface_config_t, credit_batch),
     UCS_CONFIG_TYPE_ULUNITS},

    {"FOLD_PAGES", "0",
     "Pages of kept messages the receive pool may fold at a time; 0 (the\n"
     "default) turns folding off. A message kept in place keeps the pages it\n"
     "touches; where it starts or ends in part of a page, folding copies\n"
     "that part into a page shared with the parts of other kept messages, at\n"
     "the same offsets, and maps it in place, so that a kept message costs\n"
     "about its bytes. Caveat: folding remaps memory the upper layer holds.\n"
     "A store the upper layer makes into a kept message while its page is\n"
     "folded is carried over, but a byte stored twice in those microseconds,\n"
     "the second time back to its old value, may keep the first value; and\n"
     "a kept message that another memory domain registered with pinning\n"
     "(an RDMA device without ODP) keeps the old page there while the CPU\n"
     "sees the folded one. Each folded page is one mapping; all the pools of\n"
     "a process fold at most a quarter of vm.max_map_count pages.",
     ucs_offsetof(uct_remapring_iface_config_t, fold_pages),
     UCS_CONFIG_TYPE_UINT},

    {"RX_INLINE", "1k",
     "Largest message delivered to the upper layer to be copied, as the data\n"
     "inline in UCX's shared memory FIFOs, rather than with a descriptor it\n"
     "may keep in place: a kept small message then never holds receive pool\n"
     "memory (UCP copies it into its own right-sized buffers). At most "
     UCT_REMAPRING_STR(UCT_REMAPRING_RX_INLINE_MAX_K, "k") ";\n"
     "0 keeps every message in place.",
     ucs_offsetof(uct_remapring_iface_config_t, rx_inline),
     UCS_CONFIG_TYPE_MEMUNITS},

    {"RX_COPY", "512",
     "Largest message delivered out of a right-sized copy the upper layer\n"
     "may keep, rather than in place to be copied by it (at most RX_INLINE;\n"
     "0: none): a kept small message then costs its size rounded to a share\n"
     "of a page (a page of copies holds copies of one size), not the upper\n"
     "layer's buffer of the next size it has (UCP's default sizes are 64\n"
     "bytes and 1 KiB). Copies are made while the upper layer keeps some of\n"
     "them (1 in 1024 of late, or more); when it keeps none, one small\n"
     "message in 64 still goes through a copy, to see whether keeping\n"
     "resumes. Copying reads the message: above 512 bytes a UCT ping-pong\n"
     "whose handler reads nothing fell behind posix's. Copies take at most a\n"
     "quarter of POOL_MAX; past that, messages are delivered in place to be\n"
     "copied.",
     ucs_offsetof(uct_remapring_iface_config_t, rx_copy),
     UCS_CONFIG_TYPE_MEMUNITS},

    {"MAX_SHORT", "auto",
     "Largest payload of an active message sent with am_short (8 bytes of\n"
     "header included); at most half of BLOCK_SIZE. auto: "
     UCT_REMAPRING_STR(UCT_REMAPRING_MAX_SHORT_AUTO, " bytes") ",\n"
     "or half of BLOCK_SIZE if that is less. am_short stores the message into\n"
     "the ring as am_zcopy does, without a request to complete, so the upper\n"
     "layer sends up to this size the short way.",
     ucs_offsetof(uct_remapring_iface_config_t, max_short),
     UCS_CONFIG_TYPE_MEMUNITS},

    {"BW", "auto",
     "Bandwidth reported to the upper layer. auto: the figure measured for\n"
     "this transport (and, on the shared-memory transport, for the wire this\n"
     "process sends with; see the transport's help).",
     ucs_offsetof(uct_remapring_iface_config_t, bandwidth),
     UCS_CONFIG_TYPE_BW},

    {"LATENCY", "auto",
     "One-way latency reported to the upper layer. auto: the figure measured\n"
     "for this transport, as BW.",
     ucs_offsetof(uct_remapring_iface_config_t, latency),
     UCS_CONFIG_TYPE_TIME_UNITS},

    {"OVERHEAD", "auto",
     "Send overhead reported to the upper layer. auto: the figure measured\n"
     "for this transport, as BW.",
     ucs_offsetof(uct_remapring_iface_config_t, overhead),
     UCS_CONFIG_TYPE_TIME_UNITS},

    {NULL}
};
/* clang-format on */

/* UCX_REMAPRING_<_name>: a bad value, and what it must be */
#define UCT_REMAPRING_CONFIG_BAD(_name, _fmt, _value, _rule, ...)              \
    ucs_error("UCX_REMAPRING_" _name "=" _fmt " must be " _rule, _value,       \
              ##__VA_ARGS__)

void uct_remapring_iface_config_resolve(uct_remapring_iface_config_t *config,
                                        size_t block_size_auto)
{
    int large;

    if (config->block_size == UCS_MEMUNITS_AUTO) {
        config->block_size = block_size_auto;
    }

    /* the same memory as 128 KiB blocks gave: a 1 MiB window, 256 KiB idle */
    large = config->block_size >= UCT_REMAPRING_IDLE_BYTES_K * UCS_KBYTE;
    if (config->ring_slots == UCS_ULUNITS_AUTO) {
        config->ring_slots = large ? 4 : 8;
    }

    if (config->credit_batch == UCS_ULUNITS_AUTO) {
        config->credit_batch = ucs_max(config->ring_slots / 2, (size_t)1);
    }

    if (config->idle_slots == UCS_ULUNITS_AUTO) {
        config->idle_slots = large ? 1 : 2;
    }
}

ucs_status_t
uct_remapring_iface_config_check(const uct_remapring_iface_config_t *config)
{
    size_t page_size = ucs_get_page_size();
    size_t window;

    if ((config->block_size == UCS_MEMUNITS_INF) ||
        (config->block_size == UCS_MEMUNITS_AUTO) ||
        !ucs_is_pow2(config->block_size) || (config->block_size < page_size) ||
        (config->block_size > UCT_REMAPRING_BLOCK_SIZE_MAX)) {
        UCT_REMAPRING_CONFIG_BAD("BLOCK_SIZE", "%zu", config->block_size,
                                 "a power of two between the page size (%zu)"
                                 " and %zu",
                                 page_size, UCT_REMAPRING_BLOCK_SIZE_MAX);
        return UCS_ERR_INVALID_PARAM;
    }

    if ((config->ring_slots < UCT_REMAPRING_RING_SLOTS_MIN) ||
        !ucs_is_pow2(config->ring_slots) ||
        (config->ring_slots > REMAPRING_RING_SLOTS_MAX)) {
        UCT_REMAPRING_CONFIG_BAD("RING_SLOTS", "%zu", config->ring_slots,
                                 "a power of two between %d and %d",
                                 UCT_REMAPRING_RING_SLOTS_MIN,
                                 REMAPRING_RING_SLOTS_MAX);
        return UCS_ERR_INVALID_PARAM;
    }

    window = (size_t)config->ring_slots * config->block_size;
    if ((config->pool_max == UCS_MEMUNITS_AUTO) ||
        ((config->pool_max != UCS_MEMUNITS_INF) &&
         (config->pool_max < window))) {
        UCT_REMAPRING_CONFIG_BAD("POOL_MAX", "%zu", config->pool_max,
                                 "at least RING_SLOTS * BLOCK_SIZE (%zu)",
                                 window);
        return UCS_ERR_INVALID_PARAM;
    }

    if ((config->max_short != UCS_MEMUNITS_AUTO) &&
        ((config->max_short < sizeof(uint64_t)) ||
         (config->max_short > config->block_size / 2))) {
        UCT_REMAPRING_CONFIG_BAD("MAX_SHORT", "%zu", config->max_short,
                                 "between %zu and half of BLOCK_SIZE (%zu)",
                                 sizeof(uint64_t), config->block_size / 2);
        return UCS_ERR_INVALID_PARAM;
    }

    if (config->rx_inline > UCT_REMAPRING_RX_INLINE_MAX) {
        UCT_REMAPRING_CONFIG_BAD("RX_INLINE", "%zu", config->rx_inline,
                                 "at most %d", UCT_REMAPRING_RX_INLINE_MAX);
        return UCS_ERR_INVALID_PARAM;
    }

    if ((config->idle_slots < 1) || !ucs_is_pow2(config->idle_slots) ||
        (config->idle_slots > config->ring_slots)) {
        UCT_REMAPRING_CONFIG_BAD("IDLE_SLOTS", "%zu", config->idle_slots,
                                 "a power of two between 1 and RING_SLOTS"
                                 " (%zu)",
                                 config->ring_slots);
        return UCS_ERR_INVALID_PARAM;
    }

    if ((config->credit_batch < 1) ||
        (config->credit_batch > config->ring_slots / 2)) {
        UCT_REMAPRING_CONFIG_BAD("CREDIT_BATCH", "%zu", config->credit_batch,
                                 "between 1 and RING_SLOTS / 2 (%zu)",
                                 config->ring_slots / 2);
        return UCS_ERR_INVALID_PARAM;
    }

    if ((config->bandwidth != UCS_CONFIG_BW_AUTO) &&
        !(config->bandwidth > 0)) {
        UCT_REMAPRING_CONFIG_BAD("BW", "%.0fB/s", config->bandwidth,
                                 "more than zero, or auto");
        return UCS_ERR_INVALID_PARAM;
    }

    if (config->latency == UCS_TIME_INFINITY) {
        ucs_error("UCX_REMAPRING_LATENCY must be a time or auto, not inf");
        return UCS_ERR_INVALID_PARAM;
    }

    if (config->overhead == UCS_TIME_INFINITY) {
        ucs_error("UCX_REMAPRING_OVERHEAD must be a time or auto, not inf");
        return UCS_ERR_INVALID_PARAM;
    }

    return UCS_OK;
}

size_t
uct_remapring_iface_config_max_short(const uct_remapring_iface_config_t *config)
{
    if (config->max_short == UCS_MEMUNITS_AUTO) {
        return ucs_min(UCT_REMAPRING_MAX_SHORT_AUTO, config->block_size / 2);
    }

    return config->max_short;
}

ucs_status_t uct_remapring_iface_check_peer(uct_remapring_iface_t *iface,
                                            uint32_t max_payload,
                                            const char *peer_name,
                                            ucs_log_level_t log_level)
{
    if (ucs_likely(max_payload >= iface->tx.max_bcopy)) {
        return UCS_OK;
    }

    ucs_log(log_level,
            "%s takes payloads of up to %u bytes, this process"
            " sends up to %zu: peers must use the same"
            " UCX_REMAPRING_BLOCK_SIZE and AM alignment",
            peer_name, max_payload, iface->tx.max_bcopy);
    return UCS_ERR_UNREACHABLE;
}

/* The AM payload alignment the upper layer asked for (1: none) */
static ucs_status_t
uct_remapring_iface_am_alignment(const uct_iface_params_t *params,
                                 unsigned *align_p, unsigned *offset_p)
{
    size_t align, offset;
    ucs_status_t status;

    /* UCT's own rules: an offset without an alignment is refused */
    status = uct_iface_param_am_alignment(params, SIZE_MAX, 0, 0, &align,
                                          &offset);
    if (status != UCS_OK) {
        return status;
    }

    if (!(params->field_mask & UCT_IFACE_PARAM_FIELD_AM_ALIGNMENT)) {
        *align_p  = 1;
        *offset_p = 0;
        return UCS_OK;
    }

    if ((align == 0) || !ucs_is_pow2(align) ||
        (align > UCT_REMAPRING_AM_ALIGN_MAX)) {
        ucs_error("AM alignment %zu must be a power of two of at most %u",
                  align, UCT_REMAPRING_AM_ALIGN_MAX);
        return UCS_ERR_INVALID_PARAM;
    }

    /* (payload + offset) % align == 0 is the rule, whatever the offset's
     * size: UCP asks for the data after its own header to be aligned
     * (offset = sizeof(ucp_am_hdr_t), often as large as the alignment) */
    *align_p  = align;
    *offset_p = offset % align;
    return UCS_OK;
}

/* Where payloads go in this interface's records, and the largest message
 * it sends and takes */
static ucs_status_t
uct_remapring_iface_init_layout(uct_remapring_iface_t *iface,
                                const uct_iface_params_t *params,
                                const uct_remapring_iface_config_t *config,
                                unsigned *align_p, unsigned *align_offset_p)
{
    remapring_ring_layout_t layout;
    ucs_status_t status;

    iface->rx.rx_headroom = (params->field_mask &
                             UCT_IFACE_PARAM_FIELD_RX_HEADROOM) ?
                                    params->rx_headroom :
                                    0;
    status = uct_remapring_iface_am_alignment(params, align_p, align_offset_p);
    if (status != UCS_OK) {
        return status;
    }

    /* in front of a kept payload: the upper layer's headroom, and our
     * release descriptor before it */
    iface->rx.headroom = iface->rx.rx_headroom + sizeof(uct_recv_desc_t *);
    remapring_ring_layout_init(&iface->rx.layout, iface->rx.headroom,
                               config->rx_inline, *align_p, *align_offset_p);
    if (!remapring_ring_geometry_valid(config->block_size, config->ring_slots,
                                       &iface->rx.layout)) {
        ucs_error("rx_headroom %u and AM alignment %u leave too little of a"
                  " block of %zu bytes (UCX_REMAPRING_BLOCK_SIZE)",
                  iface->rx.rx_headroom, *align_p, config->block_size);
        return UCS_ERR_INVALID_PARAM;
    }

    iface->rx.nslots       = config->ring_slots;
    iface->rx.credit_batch = config->credit_batch;
    iface->rx.idle_slots   = config->idle_slots;
    iface->rx.max_payload  = remapring_ring_max_payload(config->block_size,
                                                        &iface->rx.layout);

    /* what we send, a receiver whose headroom is at most
     * UCT_REMAPRING_HEADROOM_MAX and whose AM alignment is at most
     * UCT_REMAPRING_AM_ALIGN_MAX (or a share of a block) takes: peers of
     * one UCX, whatever headroom and alignment each interface was opened
     * with, are reachable */
    remapring_ring_layout_init(&layout, UCT_REMAPRING_HEADROOM_MAX, 0,
                               ucs_min((size_t)UCT_REMAPRING_AM_ALIGN_MAX,
                                       config->block_size /
                                               UCT_REMAPRING_AM_ALIGN_SHARE),
                               0);
    iface->tx.max_bcopy = ucs_min(remapring_ring_max_payload(config->block_size,
                                                             &layout),
                                  iface->rx.max_payload);
    iface->tx.max_short = ucs_min(uct_remapring_iface_config_max_short(config),
                                  iface->tx.max_bcopy);
    return UCS_OK;
}

/* The figures reported to UCP: the transport's, unless set */
static void
uct_remapring_iface_init_perf(uct_remapring_iface_t *iface,
                              const uct_remapring_iface_init_params_t *init,
                              const uct_remapring_iface_config_t *config)
{
    iface->perf.bandwidth = (config->bandwidth == UCS_CONFIG_BW_AUTO) ?
                                    init->bandwidth :
                                    config->bandwidth;
    iface->perf.latency   = (config->latency == UCS_TIME_AUTO) ?
                                    init->latency :
                                    ucs_time_to_sec(config->latency);
    iface->perf.overhead  = (config->overhead == UCS_TIME_AUTO) ?
                                    init->overhead :
                                    ucs_time_to_sec(config->overhead);
}

static void uct_remapring_iface_release_desc(uct_recv_desc_t *self,
                                             void *desc)
{
    uct_remapring_iface_t *iface = ucs_container_of(self,
                                                    uct_remapring_iface_t,
                                                    rx.release_desc);

    remapring_ring_release(iface->rx.pool, desc);
}

static void uct_remapring_iface_release_copy(uct_recv_desc_t *self,
                                             void *desc)
{
    uct_remapring_iface_t *iface = ucs_container_of(self,
                                                    uct_remapring_iface_t,
                                                    rx.copy_release_desc);

    remapring_copy_put(&iface->rx.copies, desc);
}

/* The receive pool: address space for four times the memory (blocks
 * detached under holds keep only their held pages) */
static ucs_status_t
uct_remapring_iface_pool_create(uct_remapring_iface_t *iface,
                                const uct_remapring_iface_init_params_t *init,
                                const uct_remapring_iface_config_t *config)
{
    int unlimited = (config->pool_max == UCS_MEMUNITS_INF);
    remapring_pool_params_t params;

    remapring_pool_params_default(&params);
    params.block_size = config->block_size;
    params.max_bytes  = unlimited ? 0 : config->pool_max;
    params.max_blocks =
            ucs_min((unlimited ? UCT_REMAPRING_POOL_SPACE_MAX :
                                 ucs_min(4 * config->pool_max,
                                         UCT_REMAPRING_POOL_SPACE_MAX)) /
                            config->block_size,
                    UINT32_MAX / 2);
    params.init_blocks = ucs_min(config->ring_slots * 2, params.max_blocks);
    params.grow_blocks = config->ring_slots;
    params.name        = "remapring-pool";
    params.fold_pages  = config->fold_pages;
    if (init->pool_pin_cb != NULL) {
        /* a pinned page stays the device's: never punched out */
        params.punch       = 0;
        params.init_blocks = 0;
        params.grow_cb     = init->pool_pin_cb;
        params.grow_arg    = iface;
    }

    return remapring_pool_create(&params, &iface->rx.pool);
}

/* Copies of small messages: the payload after the upper layer's headroom
 * and our release descriptor, aligned as asked (copies are 16-byte aligned:
 * a larger alignment has none) */
static ucs_status_t
uct_remapring_iface_copies_init(uct_remapring_iface_t *iface,
                                const uct_remapring_iface_config_t *config,
                                unsigned align, unsigned align_offset)
{
    size_t space = (config->pool_max == UCS_MEMUNITS_INF) ?
                           UCT_REMAPRING_COPY_SPACE_MAX :
                           ucs_min(config->pool_max / 4,
                                   UCT_REMAPRING_COPY_SPACE_MAX);

    iface->rx.copy_max   = ucs_min(config->rx_copy, config->rx_inline);
    iface->rx.copy_kept  = UCT_REMAPRING_COPY_KEPT_ONE; /* on at first */
    iface->rx.copy_probe = 0;
    iface->rx.copy_offset =
            ((iface->rx.copy_max > 0) && (align <= REMAPRING_COPY_ALIGN)) ?
                    (ucs_align_up(
                             iface->rx.headroom + align_offset,
                             ucs_max(align,
                                     (unsigned)REMAPRING_RING_PAYLOAD_ALIGN)) -
                     align_offset) :
                    0;
    return remapring_copy_init(&iface->rx.copies, "remapring-copies",
                               (iface->rx.copy_offset == 0) ? 0 : space);
}

/* With AM alignment, the payloads of small messages (inline records, which
 * put the payload right after the header) are copied to a buffer where
 * they are aligned before the handler sees them: every data pointer the
 * upper layer gets is aligned, not only those it may keep */
static ucs_status_t
uct_remapring_iface_aligned_init(uct_remapring_iface_t *iface,
                                 const uct_remapring_iface_config_t *config,
                                 unsigned align, unsigned align_offset)
{
    int ret;

    iface->rx.aligned     = NULL;
    iface->rx.aligned_buf = NULL;
    if ((align == 1) || (config->rx_inline == 0)) {
        return UCS_OK;
    }

    /* posix_memalign() takes multiples of a pointer's size only; such a
     * base is aligned to any smaller power of two too */
    ret = posix_memalign(&iface->rx.aligned_buf, ucs_max(align, sizeof(void *)),
                         config->rx_inline + align);
    if (ret != 0) {
        ucs_error("failed to allocate %zu bytes for aligned small messages: %s",
                  config->rx_inline + align, strerror(ret));
        return UCS_ERR_NO_MEMORY;
    }

    iface->rx.aligned = UCS_PTR_BYTE_OFFSET(iface->rx.aligned_buf,
                                            (align - align_offset) % align);
    return UCS_OK;
}

/* The buffer am_bcopy, put_bcopy and get_bcopy pack into: mapped, not
 * allocated: a block can be up to 1 GiB, and only the pages the largest
 * bcopy packed so far are ever faulted in */
static ucs_status_t uct_remapring_iface_bounce_map(uct_remapring_iface_t *iface)
{
    iface->tx.bounce = ucs_mmap(NULL, iface->tx.max_bcopy,
                                PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
                                0, "remapring_bounce");
    if (iface->tx.bounce == MAP_FAILED) {
        ucs_error("failed to map a %zu byte bounce buffer: %m",
                  iface->tx.max_bcopy);
        return UCS_ERR_NO_MEMORY;
    }

    return UCS_OK;
}

UCS_CLASS_INIT_FUNC(uct_remapring_iface_t,
                    const uct_remapring_iface_init_params_t *init, uct_md_h md,
                    uct_worker_h worker, const uct_iface_params_t *params,
                    const uct_remapring_iface_config_t *config)
{
    unsigned align, align_offset;
    ucs_status_t status;

    UCT_CHECK_PARAM(params->field_mask & UCT_IFACE_PARAM_FIELD_OPEN_MODE,
                    "UCT_IFACE_PARAM_FIELD_OPEN_MODE is not defined");
    if (!(params->open_mode & UCT_IFACE_OPEN_MODE_DEVICE)) {
        ucs_error("only UCT_IFACE_OPEN_MODE_DEVICE is supported");
        return UCS_ERR_UNSUPPORTED;
    }

    /* one thread at a time per interface, as UCX's shared memory
     * transports; UCP serialises a multi-threaded worker itself */
    if (ucs_derived_of(worker, uct_priv_worker_t)->thread_mode ==
        UCS_THREAD_MODE_MULTI) {
        ucs_error("a multi-threaded worker is not supported");
        return UCS_ERR_INVALID_PARAM;
    }

    status = uct_remapring_iface_config_check(config);
    if (status != UCS_OK) {
        return status;
    }

    UCS_CLASS_CALL_SUPER_INIT(uct_base_iface_t, init->tl_ops,
                              &uct_remapring_iface_internal_ops, md, worker,
                              params,
                              &config->super UCS_STATS_ARG(
                                      (params->field_mask &
                                       UCT_IFACE_PARAM_FIELD_STATS_ROOT) ?
                                              params->stats_root :
                                              NULL) UCS_STATS_ARG("remapring"));

    status = uct_remapring_iface_init_layout(self, params, config, &align,
                                             &align_offset);
    if (status != UCS_OK) {
        return status;
    }

    self->ops                     = init->ops;
    self->id                      = ucs_generate_uuid((uintptr_t)self);
    self->rx.release_desc.cb      = uct_remapring_iface_release_desc;
    self->rx.copy_release_desc.cb = uct_remapring_iface_release_copy;
    self->tx.dispatching          = NULL;
    self->tx.nerrs_queued         = 0;
    uct_remapring_iface_init_perf(self, init, config);
    ucs_list_head_init(&self->tx.blocked);
    ucs_arbiter_init(&self->tx.arbiter);
    kh_init_inplace(uct_remapring_peers, &self->tx.peers);

    status = uct_remapring_iface_pool_create(self, init, config);
    if (status != UCS_OK) {
        goto err_arbiter;
    }

    status = uct_remapring_iface_copies_init(self, config, align, align_offset);
    if (status != UCS_OK) {
        goto err_pool;
    }

    status = uct_remapring_iface_aligned_init(self, config, align,
                                              align_offset);
    if (status != UCS_OK) {
        goto err_copies;
    }

    status = uct_remapring_iface_bounce_map(self);
    if (status != UCS_OK) {
        goto err_aligned;
    }

    return UCS_OK;

err_aligned:
    free(self->rx.aligned_buf);
err_copies:
    remapring_copy_cleanup(&self->rx.copies);
err_pool:
    remapring_pool_destroy(self->rx.pool);
err_arbiter:
    kh_destroy_inplace(uct_remapring_peers, &self->tx.peers);
    ucs_arbiter_cleanup(&self->tx.arbiter);
    return status;
}

static UCS_CLASS_CLEANUP_FUNC(uct_remapring_iface_t)
{
    remapring_pool_stats_t stats;

    remapring_pool_get_stats(self->rx.pool, &stats);
    ucs_debug("iface %p pool: %u blocks, %" PRIu64 " remaps, %" PRIu64
              " punches, %" PRIu64 " folds; %u detached blocks kept whole"
              " (%.0f%% of them released within the age)",
              self, stats.nblocks, stats.nremaps, stats.npunches, stats.nfolds,
              stats.punch_window, stats.brief * 100.0);

    ucs_munmap(self->tx.bounce, self->tx.max_bcopy);
    free(self->rx.aligned_buf);
    remapring_copy_cleanup(&self->rx.copies);
    remapring_pool_destroy(self->rx.pool);
    kh_destroy_inplace(uct_remapring_peers, &self->tx.peers);
    ucs_arbiter_cleanup(&self->tx.arbiter);
}

UCS_CLASS_DEFINE(uct_remapring_iface_t, uct_base_iface_t);


void uct_remapring_iface_ring_params(uct_remapring_iface_t *iface,
                                     remapring_ring_params_t *params)
{
    remapring_ring_params_default(params);
    params->nslots       = iface->rx.nslots;
    params->headroom     = iface->rx.headroom;
    params->inline_max   = iface->rx.layout.inline_max;
    params->align        = iface->rx.layout.align;
    params->align_offset = iface->rx.layout.align_offset;
    params->credit_batch = iface->rx.credit_batch;
    params->grant_min    = iface->rx.idle_slots;
}

void uct_remapring_iface_maintain(uct_remapring_iface_t *iface)
{
    remapring_pool_punch_aged(iface->rx.pool);
    remapring_copy_trim(&iface->rx.copies);
}


/* ------------------------------------------------------------- interface */

void uct_remapring_iface_query(uct_remapring_iface_t *iface,
                               uct_iface_attr_t *iface_attr)
{
    uct_base_iface_query(&iface->super, iface_attr);

    iface_attr->cap.flags = UCT_IFACE_FLAG_AM_SHORT | UCT_IFACE_FLAG_AM_BCOPY |
                            UCT_IFACE_FLAG_AM_ZCOPY | UCT_IFACE_FLAG_PENDING |
                            UCT_IFACE_FLAG_CB_SYNC |
                            UCT_IFACE_FLAG_CONNECT_TO_IFACE |
                            UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE;

    /* the 8-byte header included, as UCX's transports count it */
    iface_attr->cap.am.max_short = iface->tx.max_short;
    iface_attr->cap.am.max_bcopy = iface->tx.max_bcopy;
    iface_attr->cap.am.min_zcopy = 0;
    iface_attr->cap.am.max_zcopy = iface->tx.max_bcopy -
                                   UCT_REMAPRING_AM_MAX_HDR;
    iface_attr->cap.am.opt_zcopy_align = 1;
    iface_attr->cap.am.align_mtu       = 1;
    iface_attr->cap.am.max_hdr         = UCT_REMAPRING_AM_MAX_HDR;
    iface_attr->cap.am.max_iov         = UCT_REMAPRING_MAX_IOV;

    iface_attr->latency = ucs_linear_func_make(iface->perf.latency, 0);
    iface_attr->bandwidth.dedicated = iface->perf.bandwidth;
    iface_attr->bandwidth.shared    = 0;
    iface_attr->overhead            = iface->perf.overhead;
    iface_attr->priority            = 0;
}

ucs_status_t uct_remapring_iface_flush(uct_iface_h tl_iface, unsigned flags,
                                       uct_completion_t *comp)
{
    uct_remapring_iface_t *iface = ucs_derived_of(tl_iface,
                                                  uct_remapring_iface_t);

    if (comp != NULL) {
        return UCS_ERR_UNSUPPORTED;
    }

    if (!ucs_list_is_empty(&iface->tx.blocked) ||
        (iface->tx.nerrs_queued > 0)) {
        UCT_TL_IFACE_STAT_FLUSH_WAIT(&iface->super);
        return UCS_INPROGRESS;
    }

    UCT_TL_IFACE_STAT_FLUSH(&iface->super);
    return UCS_OK;
}

ucs_status_t uct_remapring_iface_fence(uct_iface_h tl_iface, unsigned flags)
{
    /* sends are ordered: each one is in the receiver's memory when it
     * returns */
    ucs_memory_cpu_fence();
    UCT_TL_IFACE_STAT_FENCE(ucs_derived_of(tl_iface, uct_base_iface_t));
    return UCS_OK;
}

/* clang-format off */
uct_iface_internal_ops_t uct_remapring_iface_internal_ops = {
    .iface_estimate_perf = uct_base_iface_estimate_perf,
    .iface_vfs_refresh   = (uct_iface_vfs_refresh_func_t)ucs_empty_function,
    .ep_query            = (uct_ep_query_func_t)
                           ucs_empty_function_return_unsupported,
    .ep_invalidate       = (uct_ep_invalidate_func_t)
                           ucs_empty_function_return_unsupported,
};
/* clang-format on */
