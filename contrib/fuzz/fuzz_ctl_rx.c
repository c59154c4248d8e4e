/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * Fuzz target: the receiver's control area and pool as the receiver reads
 * them, written by a hostile sender.
 *
 * Each input opens a real receiving interface (one of four small
 * geometries, shm), and connects one honest sender to it first: a real
 * interface of this process on the shm wire, or on the cma wire if the
 * input picks it and process_vm_writev() to ourselves is allowed. The rest
 * of the input is a script of steps, interleaved with the progress of both:
 * - the honest sender sends pattern-checked active messages (am_short,
 *   am_bcopy) with a sequence number;
 * - the receiver progresses (a few calls, or past the point where it arms
 *   its doorbells), holding some of the records it delivers, which a later
 *   step releases;
 * - the hostile sender claims a connection slot as a sender does, or writes
 *   any of its words: the state (every value, and garbage), sender_pid
 *   (our pid, 1, 0, -1, a pid that exited, huge), sender_id, wire, armed;
 *   its ring control words (info, tail, stalls, limit); its slot table; the
 *   doorbell words (active[], summary) and the header; and the pool blocks
 *   of its ring: records that follow the protocol or not, random bytes,
 *   replays of an earlier record at another offset, stamps of other
 *   offsets; and it closes its connection.
 * The hostile sender writes only connections other than the honest
 * sender's (taken, free or offered), and only the blocks that back its own
 * ring: what is checked is that a sender that scribbles its own connection
 * and ring hurts neither the receiver nor the other senders. The doorbell
 * words and the header are everyone's: writing them may delay the honest
 * sender (a doorbell it rang is cleared) or fail it (the header says the
 * interface closed), but loses none of its accepted messages.
 *
 * What must hold, besides no crash and no sanitizer report:
 * - every message delivered has its payload inside a block of the
 *   receiver's pool (its CPU view) that backs one of its rings, or, up to
 *   UCX_REMAPRING_RX_COPY, inside one copy of the receiver's copies (the
 *   honest sender sends larger messages where there are copies, so that
 *   the copies are the hostile sender's);
 * - the honest sender's messages whose send returned UCS_OK all arrive, in
 *   order and byte-exact, once the scribbling stopped and the receiver got
 *   a bounded number of progress calls to drain them (and its connection
 *   closed), and those held stay intact until released;
 * - every progress loop is bounded (libFuzzer's -timeout catches a spin);
 * - once both senders closed, the pool blocks in use in this process
 *   (remapring_pool_blocks_in_use(NULL)) are what they were before the honest
 *   sender connected, with the interface still open; and after it closed,
 *   what they were before it opened.
 *
 * A record a hostile sender wrote and the upper layer holds is released
 * through the interface's release callback directly: the pointer to it
 * that the receiver stores in the record's reserve, as the upper layer
 * stores its own descriptor in the headroom, is in memory the sender can
 * still write while the record's block backs its ring.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "fuzz_uct.h"

#include <uct/ib/remapring/sm/remapring_sm.h>

#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#define FUZZ_PRESETS   4
#define FUZZ_AM_SHORT  1
#define FUZZ_AM_BCOPY  2
#define FUZZ_MAX_SENT  1024
#define FUZZ_MAX_HELD  16
#define FUZZ_MAX_STEPS 512
#define FUZZ_MAGIC     0x6f6e6573u
#define FUZZ_MAX_PEERS 70 /* the largest MAX_PEERS below */

/* The receiver's geometries: pools small enough to run short of blocks */
static const char *fuzz_presets[FUZZ_PRESETS][16] = {
        {"BLOCK_SIZE", "4k", "RING_SLOTS", "4", "IDLE_SLOTS", "1",
         "CREDIT_BATCH", "1", "MAX_PEERS", "4", "POOL_MAX", "64k", "RX_INLINE",
         "1k", NULL},
        {"BLOCK_SIZE", "4k", "RING_SLOTS", "4", "IDLE_SLOTS", "2",
         "CREDIT_BATCH", "2", "MAX_PEERS", "4", "POOL_MAX", "32k", "RX_INLINE",
         "0", NULL},
        {"BLOCK_SIZE", "4k", "RING_SLOTS", "2", "IDLE_SLOTS", "1",
         "CREDIT_BATCH", "1", "MAX_PEERS", "3", "POOL_MAX", "16k", "RX_INLINE",
         "256", NULL},
        {"BLOCK_SIZE", "4k", "RING_SLOTS", "8", "IDLE_SLOTS", "4",
         "CREDIT_BATCH", "4", "MAX_PEERS", "70", "POOL_MAX", "128k",
         "RX_INLINE", "1k", NULL}};

static const char *fuzz_sender_settings[2][16] = {
        {"WIRE", "shm", "BLOCK_SIZE", "4k", "RING_SLOTS", "2", "CREDIT_BATCH",
         "1", "IDLE_SLOTS", "1", "MAX_PEERS", "1", "POOL_MAX", "8k", NULL},
        {"WIRE", "cma", "BLOCK_SIZE", "4k", "RING_SLOTS", "2", "CREDIT_BATCH",
         "1", "IDLE_SLOTS", "1", "MAX_PEERS", "1", "POOL_MAX", "8k", NULL}};

typedef struct {
    void *desc;
    int honest;
    uint32_t seq;
    int copy; /* in the receiver's copies */
} fuzz_held_t;

static fuzz_uct_t base; /* the shm sender, and the domain and worker */
static fuzz_iface_t cma_sender;
static int have_cma;
static uct_iface_config_t *rx_configs[FUZZ_PRESETS];
static pid_t dead_pid;

/* this input's state */
static uct_remapring_sm_iface_t *rx;
static unsigned honest_index;
static uint32_t nsent, ndelivered;
static uint32_t sent_length[FUZZ_MAX_SENT];
static fuzz_held_t held[FUZZ_MAX_HELD];
static unsigned nheld;
static uint8_t hold_mode; /* bit 0: honest records, bit 1: the others */
static uint8_t touched[FUZZ_MAX_PEERS]; /* slots the hostile sender wrote */

static ucs_status_t
fuzz_err_handler(void *arg, uct_ep_h ep, ucs_status_t status)
{
    return UCS_OK;
}

/* One interface on the shared memory domain and worker */
static ucs_status_t fuzz_iface_open(uct_iface_config_t *config, fuzz_iface_t *f)
{
    return fuzz_uct_iface_open(base.md, base.worker, config, fuzz_err_handler,
                               NULL, f);
}

static uct_iface_config_t *fuzz_config(const char **settings)
{
    uct_iface_config_t *config;

    FUZZ_CHECK(uct_md_iface_config_read(base.md, "remapring", NULL, NULL,
                                        &config) == UCS_OK);
    for (; *settings != NULL; settings += 2) {
        FUZZ_CHECK(uct_config_modify(config, settings[0], settings[1]) ==
                   UCS_OK);
    }
    return config;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    uct_iface_config_t *config;
    uct_component_h component;
    char md_name[64], src[8] = "cma", dst[8] = "";
    struct iovec local  = {src, sizeof(src)};
    struct iovec remote = {dst, sizeof(dst)};
    unsigned i;

    component = fuzz_uct_component(0, md_name, sizeof(md_name));
    FUZZ_CHECK(component != NULL);
    FUZZ_CHECK(fuzz_uct_open(component, md_name, fuzz_sender_settings[0],
                             fuzz_err_handler, NULL, &base) == UCS_OK);

    for (i = 0; i < FUZZ_PRESETS; ++i) {
        rx_configs[i] = fuzz_config(fuzz_presets[i]);
    }

    /* the cma wire writes with process_vm_writev(), which ptrace rules
     * may refuse even to ourselves */
    have_cma = (process_vm_writev(getpid(), &local, 1, &remote, 1, 0) ==
                sizeof(src));
    if (have_cma) {
        config = fuzz_config(fuzz_sender_settings[1]);
        FUZZ_CHECK(fuzz_iface_open(config, &cma_sender) == UCS_OK);
        uct_config_release(config);
    }

    /* a pid that names no process */
    dead_pid = fork();
    if (dead_pid == 0) {
        _exit(0);
    }
    FUZZ_CHECK(waitpid(dead_pid, NULL, 0) == dead_pid);
    return 0;
}

/* --------------------------------------------------------------- honest */

/* Header (magic, sequence number), then the pattern */
static void fuzz_fill(uint8_t *buffer, uint32_t seq, size_t length)
{
    uint64_t hdr = ((uint64_t)seq << 32) | FUZZ_MAGIC;

    memcpy(buffer, &hdr, sizeof(hdr));
    fuzz_pattern_fill(buffer, seq, sizeof(hdr), length);
}

static void fuzz_check_honest(const uint8_t *data, size_t length, uint32_t seq)
{
    uint64_t hdr;

    FUZZ_CHECK(seq < nsent);
    FUZZ_CHECK(length == sent_length[seq]);
    memcpy(&hdr, data, sizeof(hdr));
    FUZZ_CHECK(hdr == (((uint64_t)seq << 32) | FUZZ_MAGIC));
    FUZZ_CHECK(fuzz_pattern_match(data, seq, sizeof(hdr), length));
}

typedef struct {
    uint32_t seq;
    size_t length;
} fuzz_pack_arg_t;

static size_t fuzz_pack(void *dest, void *arg)
{
    fuzz_pack_arg_t *pack = arg;

    fuzz_fill(dest, pack->seq, pack->length);
    return pack->length;
}

static void fuzz_send(fuzz_input_t *in, uct_ep_h ep, const fuzz_iface_t *tx)
{
    static uint8_t buffer[4096];
    uint8_t kind = fuzz_u8(in);
    size_t max   = (kind & 1) ? tx->attr.cap.am.max_bcopy :
                                tx->attr.cap.am.max_short;
    /* above the copies: a copy does not say which ring it came from */
    size_t least = ucs_max(sizeof(uint64_t), rx->super.rx.copy_max + 1);
    size_t length;
    fuzz_pack_arg_t pack;
    ucs_status_t status;
    ssize_t packed;

    if (nsent == FUZZ_MAX_SENT) {
        return;
    }

    FUZZ_CHECK(least <= max);
    length = least + (fuzz_u16(in) % (max - least + 1));

    if (kind & 1) {
        pack.seq    = nsent;
        pack.length = length;
        packed      = uct_ep_am_bcopy(ep, FUZZ_AM_BCOPY, fuzz_pack, &pack, 0);
        status      = (packed < 0) ? (ucs_status_t)packed : UCS_OK;
        FUZZ_CHECK((packed < 0) || ((size_t)packed == length));
    } else {
        fuzz_fill(buffer, nsent, length);
        status = uct_ep_am_short(ep, FUZZ_AM_SHORT, *(uint64_t *)buffer,
                                 buffer + sizeof(uint64_t),
                                 length - sizeof(uint64_t));
    }

    if (status == UCS_OK) {
        sent_length[nsent++] = length;
    }
}

/* ------------------------------------------------------------- receiver */

/* Whether [data, + length) is in the receiver's copies; then it must lie in
 * one copy, after the headroom and the release pointer */
static int fuzz_in_copies(const void *data, size_t length)
{
    const remapring_copies_t *copies = &rx->super.rx.copies;
    size_t offset, page_size, elem_size, start;
    const remapring_copy_page_t *page;

    offset = (const char *)data - copies->base;
    if ((copies->base == NULL) || (offset >= copies->max_bytes)) {
        return 0;
    }

    /* the copy starts copy_offset before the payload (a payload of 0
     * bytes may end its copy) */
    FUZZ_CHECK(offset >= rx->super.rx.copy_offset);
    start     = offset - rx->super.rx.copy_offset;
    page_size = 1ul << copies->page_shift;
    page      = &copies->pages[start >> copies->page_shift];
    FUZZ_CHECK(page->nelems > 0);
    FUZZ_CHECK(length <= rx->super.rx.copy_max);
    elem_size = copies->elem_size[page->nelems];
    FUZZ_CHECK((start & (page_size - 1)) % elem_size == 0);
    FUZZ_CHECK(rx->super.rx.copy_offset + length <= elem_size);
    return 1;
}

static ucs_status_t
fuzz_am_handler(void *arg, void *data, size_t length, unsigned flags)
{
    remapring_pool_t *pool = rx->super.rx.pool;
    remapring_ring_t *honest_ring;
    remapring_pool_block_t *b;
    uint32_t block;
    int honest;

    if (fuzz_in_copies(data, length)) {
        /* the hostile sender's (the honest one's are larger): read it all,
         * keep it at times */
        FUZZ_CHECK(flags & UCT_CB_PARAM_FLAG_DESC);
        fuzz_read_all(data, length);
        if ((nheld == FUZZ_MAX_HELD) || !(hold_mode & 2)) {
            return UCS_OK;
        }

        held[nheld].desc   = (char *)data - FUZZ_UCT_RX_HEADROOM;
        held[nheld].honest = 0;
        held[nheld].copy   = 1;
        ++nheld;
        return UCS_INPROGRESS;
    }

    /* inside one block of the pool, which backs a ring of this receiver */
    block = remapring_pool_block_of(pool, data);
    FUZZ_CHECK(block != REMAPRING_POOL_BLOCK_NONE);
    FUZZ_CHECK((length == 0) ||
               (remapring_pool_block_of(pool, (char *)data + length - 1) ==
                block));
    b = &pool->blocks[block];
    FUZZ_CHECK(b->state == REMAPRING_POOL_BLOCK_ATTACHED);
    FUZZ_CHECK((b->owner != NULL) && (b->owner->pool == pool));

    honest_ring = rx->rx.conns[honest_index].ring;
    honest      = (honest_ring != NULL) && (b->owner == honest_ring);
    if (honest) {
        FUZZ_CHECK(((uintptr_t)arg == FUZZ_AM_SHORT) ||
                   ((uintptr_t)arg == FUZZ_AM_BCOPY));
        fuzz_check_honest(data, length, ndelivered);
        ++ndelivered;
    } else {
        /* the upper layer reads it all */
        fuzz_read_all(data, length);
    }

    if (!(flags & UCT_CB_PARAM_FLAG_DESC) || (nheld == FUZZ_MAX_HELD) ||
        !(hold_mode & (honest ? 1 : 2))) {
        return UCS_OK;
    }

    held[nheld].desc   = (char *)data - FUZZ_UCT_RX_HEADROOM;
    held[nheld].honest = honest;
    held[nheld].seq    = ndelivered - 1;
    held[nheld].copy   = 0;
    ++nheld;
    return UCS_INPROGRESS;
}

static void fuzz_release(unsigned i)
{
    fuzz_held_t h = held[i];

    held[i] = held[--nheld];
    if (h.honest) {
        /* never overwritten while held */
        fuzz_check_honest((uint8_t *)h.desc + FUZZ_UCT_RX_HEADROOM,
                          sent_length[h.seq], h.seq);
        uct_iface_release_desc(h.desc);
    } else if (h.copy) {
        /* in the receiver's memory: its descriptor pointer too */
        uct_iface_release_desc(h.desc);
    } else {
        rx->super.rx.release_desc.cb(&rx->super.rx.release_desc, h.desc);
    }
}

/* Every polled ring as if its last UCT_REMAPRING_RX_ARM_AFTER - 1 polls
 * found it empty */
static void fuzz_idle_rings(void)
{
    uct_remapring_rx_conn_t *rx_conn;

    ucs_list_for_each(rx_conn, &rx->rx.active, list) {
        rx_conn->idle_polls = UCT_REMAPRING_RX_ARM_AFTER - 1;
    }
}

static void fuzz_progress(const fuzz_iface_t *tx, unsigned count)
{
    while (count-- > 0) {
        uct_iface_progress(&rx->super.super.super);
        uct_iface_progress(tx->iface);
    }
}

/* -------------------------------------------------------------- hostile */

static uct_remapring_conn_t *fuzz_conn(unsigned index)
{
    return &rx->rx.ctl.conns[index];
}

/* A slot of the control area other than the honest sender's */
static unsigned fuzz_pick(fuzz_input_t *in)
{
    unsigned index = fuzz_u8(in) % rx->rx.ctl.max_peers;

    if (index == honest_index) {
        index = (index + 1) % rx->rx.ctl.max_peers;
    }
    touched[index] = 1;
    return index;
}

static int32_t fuzz_pid(fuzz_input_t *in)
{
    switch (fuzz_u8(in) % 7) {
    case 0:
        return getpid();
    case 1:
        return 1;
    case 2:
        return 0;
    case 3:
        return -1;
    case 4:
        return INT32_MAX;
    case 5:
        return dead_pid;
    default:
        return fuzz_u32(in);
    }
}

static void fuzz_bell(unsigned index)
{
    uct_remapring_ctl_t *ctl = rx->rx.ctl.ctl;

    __atomic_fetch_or(&ctl->active[index / 64], UCS_BIT(index % 64),
                      __ATOMIC_RELEASE);
    __atomic_fetch_or(&ctl->summary, UCS_BIT(index / 64), __ATOMIC_RELEASE);
}

/* Take a slot as a sender does, perhaps with lies in it */
static void fuzz_claim(fuzz_input_t *in, unsigned index)
{
    uct_remapring_conn_t *conn = fuzz_conn(index);
    uint8_t how                = fuzz_u8(in);
    uint32_t from              = (how & 1) ? UCT_REMAPRING_CONN_OFFERED :
                                             UCT_REMAPRING_CONN_FREE;
    uint32_t to                = (how & 1) ? UCT_REMAPRING_CONN_READY :
                                             UCT_REMAPRING_CONN_CLAIMED;

    if (how & 2) {
        uct_remapring_conn_set_state(conn, to); /* whatever it was */
    } else if (!__atomic_compare_exchange_n(&conn->state, &from, to, 0,
                                            __ATOMIC_ACQ_REL,
                                            __ATOMIC_RELAXED)) {
        return;
    }

    conn->sender_pid = (how & 4) ? fuzz_pid(in) : getpid();
    conn->sender_id  = fuzz_u64(in);
    conn->wire       = (how & 8) ? fuzz_u32(in) : ((how >> 4) & 1);
    __atomic_store_n(&conn->armed, 1, __ATOMIC_RELEASE);
    fuzz_bell(index);
}

static void fuzz_write_conn(fuzz_input_t *in, unsigned index)
{
    uct_remapring_conn_t *conn = fuzz_conn(index);
    uint8_t value;

    switch (fuzz_u8(in) % 6) {
    case 0:
        value = fuzz_u8(in);
        __atomic_store_n(&conn->state, (value < 8) ? value : fuzz_u32(in),
                         __ATOMIC_RELEASE);
        break;
    case 1:
        conn->sender_pid = fuzz_pid(in);
        break;
    case 2:
        conn->sender_id = fuzz_u64(in);
        break;
    case 3:
        value      = fuzz_u8(in);
        conn->wire = (value < 3) ? value : fuzz_u32(in);
        break;
    case 4:
        value = fuzz_u8(in);
        __atomic_store_n(&conn->armed, (value < 2) ? value : fuzz_u32(in),
                         __ATOMIC_RELEASE);
        break;
    default:
        /* any word of the slot, the ring words included */
        ((uint32_t *)conn)[fuzz_u8(in) % (sizeof(*conn) / 4)] = fuzz_u32(in);
        break;
    }
}

static void fuzz_write_ring_ctl(fuzz_input_t *in, unsigned index)
{
    remapring_ring_ctl_t *ctl     = &fuzz_conn(index)->ring;
    remapring_ring_t *ring        = rx->rx.conns[index].ring;
    uint64_t head                 = (ring != NULL) ? ring->head : 0;
    uint8_t what                  = fuzz_u8(in);
    uint64_t value;

    /* near the reader's head, or anything */
    switch ((what >> 3) % 4) {
    case 0:
        value = head + (64 * (uint64_t)(fuzz_u8(in) % 8));
        break;
    case 1:
        value = head - (64 * (uint64_t)(fuzz_u8(in) % 8));
        break;
    case 2:
        value = head + ((uint64_t)fuzz_u8(in) << 12);
        break;
    default:
        value = fuzz_u64(in);
        break;
    }

    switch (what % 5) {
    case 0:
        ((uint32_t *)&ctl->info)[fuzz_u8(in) % (sizeof(ctl->info) / 4)] =
                (uint32_t)value;
        break;
    case 1:
        __atomic_store_n(&ctl->tail, value, __ATOMIC_RELEASE);
        break;
    case 2:
        __atomic_store_n(&ctl->stalls,
                         (what & 0x80) ? value : (ctl->stalls + 1),
                         __ATOMIC_RELAXED);
        break;
    case 3:
        __atomic_store_n(&ctl->limit, value, __ATOMIC_RELEASE);
        break;
    default:
        memcpy(&ctl->info, &value, sizeof(value)); /* the magic */
        break;
    }
}

static void fuzz_write_table(fuzz_input_t *in, unsigned index)
{
    uct_remapring_ctl_area_t *area = &rx->rx.ctl;
    uint32_t *table = uct_remapring_ctl_slot_table(area->ctl, area->max_peers,
                                                   area->ring_slots, index);
    remapring_ring_t *honest     = rx->rx.conns[honest_index].ring;
    unsigned entry               = fuzz_u8(in) % area->ring_slots;
    uint32_t value;

    switch (fuzz_u8(in) % 4) {
    case 0:
        value = REMAPRING_POOL_BLOCK_NONE;
        break;
    case 1:
        value = fuzz_u8(in) % (rx->super.rx.pool->nblocks + 1);
        break;
    case 2:
        /* a block of the honest sender's ring */
        value = (honest != NULL) ? honest->slots[fuzz_u8(in) % honest->nslots] :
                                   0;
        break;
    default:
        value = fuzz_u32(in);
        break;
    }
    __atomic_store_n(&table[entry], value, __ATOMIC_RELAXED);
}

static void fuzz_write_shared(fuzz_input_t *in)
{
    uct_remapring_ctl_t *ctl = rx->rx.ctl.ctl;
    uint8_t what             = fuzz_u8(in);
    uint64_t value           = fuzz_u64(in);
    /* the doorbell words fill one or more cache lines before the
     * connections */
    unsigned nwords = (uct_remapring_ctl_conns_offset(rx->rx.ctl.max_peers) -
                       ucs_offsetof(uct_remapring_ctl_t, active)) /
                      sizeof(uint64_t);

    switch (what % 5) {
    case 0:
        __atomic_fetch_or(&ctl->active[fuzz_u8(in) % nwords], value,
                          __ATOMIC_RELEASE);
        break;
    case 1:
        __atomic_store_n(&ctl->active[fuzz_u8(in) % nwords], value,
                         __ATOMIC_RELEASE);
        break;
    case 2:
        __atomic_fetch_or(&ctl->summary, value, __ATOMIC_RELEASE);
        break;
    case 3:
        __atomic_store_n(&ctl->summary, value, __ATOMIC_RELEASE);
        break;
    default:
        /* a word of the header */
        ((uint32_t *)ctl)[(what >> 3) %
                          (ucs_offsetof(uct_remapring_ctl_t, summary) / 4)] =
                (uint32_t)value;
        break;
    }
}

/* Where ring offset @a offset of the hostile ring lands in the pool, with
 * @a room_p bytes to the end of its block; NULL if no block backs it */
static uint8_t *
fuzz_ring_addr(remapring_ring_t *ring, uint64_t offset, size_t *room_p)
{
    uint32_t block = ring->slots[(offset >> ring->block_shift) % ring->nslots];

    if (block >= ring->pool->nblocks) {
        return NULL;
    }

    *room_p = ring->block_size - (offset & (ring->block_size - 1));
    return (uint8_t *)remapring_pool_block_addr(ring->pool, block) +
           (offset & (ring->block_size - 1));
}

static void fuzz_store(remapring_ring_t *ring, uint64_t offset,
                       const void *bytes, size_t length)
{
    uint8_t *addr;
    size_t room;

    addr = fuzz_ring_addr(ring, offset, &room);
    if (addr != NULL) {
        memcpy(addr, bytes, ucs_min(length, room));
    }
}

static void fuzz_write_records(fuzz_input_t *in, unsigned index)
{
    static uint8_t last[256];
    static size_t last_length;
    remapring_ring_t *ring     = rx->rx.conns[index].ring;
    uint8_t what               = fuzz_u8(in);
    uint64_t offset, stamp;
    remapring_ring_hdr_t hdr;
    uint8_t bytes[256];
    size_t length;

    if (ring == NULL) {
        return;
    }

    /* at the head, a little past it, or in another lap */
    offset = ring->head + (64 * (uint64_t)((what >> 2) % 4));
    if (what & 0x40) {
        offset += (uint64_t)(fuzz_u8(in) % 4) * ring->window_size;
    }

    switch (what % 4) {
    case 0:
        /* a record: DATA, PAD or another type, stamped for its offset */
        hdr.type   = (fuzz_u8(in) & 1) ? REMAPRING_RING_REC_DATA :
                                         REMAPRING_RING_REC_PAD;
        hdr.am_id  = fuzz_u8(in);
        hdr.flags  = fuzz_u8(in);
        hdr.stamp  = offset ^ ring->nonce;
        hdr.length = fuzz_u16(in);
        switch (fuzz_u8(in) % 8) {
        case 0:
            hdr.length = ring->block_size - (offset & (ring->block_size - 1));
            break;
        case 1:
            hdr.length = fuzz_u32(in);
            break;
        case 2:
            hdr.type = fuzz_u8(in);
            break;
        case 3:
            hdr.am_id %= UCT_AM_ID_MAX;
            hdr.length %= 64;
            break;
        default:
            hdr.am_id %= UCT_AM_ID_MAX;
            hdr.length %= ring->block_size;
            break;
        }
        hdr.reserved = 0;
        /* the payload first (some of it), then the header */
        length = fuzz_u8(in);
        fuzz_bytes(in, bytes, length);
        fuzz_store(ring,
                   remapring_ring_payload_pos(&ring->layout, offset,
                                              hdr.length),
                   bytes, length);
        fuzz_store(ring, offset, &hdr, sizeof(hdr));
        memcpy(last, &hdr, sizeof(hdr));
        memcpy(last + sizeof(hdr), bytes,
               ucs_min(length, sizeof(last) - sizeof(hdr)));
        last_length = sizeof(hdr) + ucs_min(length, sizeof(last) - sizeof(hdr));
        break;
    case 1:
        /* random bytes anywhere in the window */
        length = fuzz_u8(in) % 64;
        fuzz_bytes(in, bytes, length);
        fuzz_store(ring, ring->head + (fuzz_u16(in) % ring->window_size), bytes,
                   length);
        break;
    case 2:
        /* an earlier record again, at another offset */
        fuzz_store(ring, offset, last, last_length);
        break;
    default:
        /* the stamp of another offset, or of a lap before */
        switch (fuzz_u8(in) % 4) {
        case 0:
            stamp = (offset + 64) ^ ring->nonce;
            break;
        case 1:
            stamp = (offset - ring->window_size) ^ ring->nonce;
            break;
        case 2:
            stamp = offset ^ fuzz_conn(index)->ring.info.nonce;
            break;
        default:
            stamp = fuzz_u64(in);
            break;
        }
        fuzz_store(ring, offset, &stamp, sizeof(stamp));
        break;
    }
}

/* A sender's close: CLOSED, and the doorbell */
static void fuzz_close(unsigned index)
{
    uct_remapring_conn_t *conn = fuzz_conn(index);

    uct_remapring_conn_set_state(conn, UCT_REMAPRING_CONN_CLOSED);
    __atomic_store_n(&conn->armed, 1, __ATOMIC_RELEASE);
    fuzz_bell(index);
}

/* ---------------------------------------------------------------- input */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input_t in = {data, size};
    const fuzz_iface_t *tx;
    fuzz_iface_t shm_sender, receiver;
    uint64_t base_used, used;
    uct_ep_params_t params;
    unsigned i, step, index;
    uct_ep_h ep;
    uint8_t op;

    op = fuzz_u8(&in);
    memset(&shm_sender, 0, sizeof(shm_sender));
    shm_sender.iface = base.iface;
    shm_sender.attr  = base.attr;
    tx               = ((op & 1) && have_cma) ? &cma_sender : &shm_sender;

    base_used = remapring_pool_blocks_in_use(NULL);
    FUZZ_CHECK(fuzz_iface_open(rx_configs[(op >> 1) % FUZZ_PRESETS],
                               &receiver) == UCS_OK);
    rx = ucs_derived_of(receiver.iface, uct_remapring_sm_iface_t);
    for (i = 0; i < UCT_AM_ID_MAX; ++i) {
        FUZZ_CHECK(uct_iface_set_am_handler(receiver.iface, i, fuzz_am_handler,
                                            (void *)(uintptr_t)i, 0) == UCS_OK);
    }

    nsent      = 0;
    ndelivered = 0;
    nheld      = 0;
    hold_mode  = 0;
    memset(touched, 0, sizeof(touched));
    used = remapring_pool_blocks_in_use(NULL);

    /* the honest sender connects first */
    memset(&params, 0, sizeof(params));
    params.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR |
                        UCT_EP_PARAM_FIELD_IFACE_ADDR;
    params.iface      = tx->iface;
    params.dev_addr   = (uct_device_addr_t *)receiver.dev_addr;
    params.iface_addr = (uct_iface_addr_t *)receiver.iface_addr;
    FUZZ_CHECK(uct_ep_create(&params, &ep) == UCS_OK);
    honest_index = ucs_derived_of(ucs_derived_of(ep, uct_remapring_ep_t)->peer,
                                  uct_remapring_sm_peer_t)
                           ->remote.index;
    FUZZ_CHECK(honest_index < rx->rx.ctl.max_peers);

    for (step = 0; (step < FUZZ_MAX_STEPS) && (in.size > 0); ++step) {
        op = fuzz_u8(&in);
        switch (op % 16) {
        case 0:
        case 1:
            fuzz_send(&in, ep, tx);
            break;
        case 2:
            hold_mode = fuzz_u8(&in);
            fuzz_progress(tx, 1 + (op >> 4));
            break;
        case 3:
            /* the rings sleep on their doorbells: as after
             * UCT_REMAPRING_RX_ARM_AFTER empty polls, without making them
             * (they were most of this target's time) */
            hold_mode = 0;
            fuzz_idle_rings();
            fuzz_progress(tx, 1 + (op >> 4));
            break;
        case 4:
            fuzz_claim(&in, fuzz_pick(&in));
            break;
        case 5:
            fuzz_write_conn(&in, fuzz_pick(&in));
            break;
        case 6:
            fuzz_write_ring_ctl(&in, fuzz_pick(&in));
            break;
        case 7:
            fuzz_write_table(&in, fuzz_pick(&in));
            break;
        case 8:
            fuzz_write_shared(&in);
            break;
        case 9:
        case 10:
        case 11:
            fuzz_write_records(&in, fuzz_pick(&in));
            break;
        case 12:
            if (nheld > 0) {
                fuzz_release(fuzz_u8(&in) % nheld);
            }
            break;
        case 13:
            fuzz_close(fuzz_pick(&in));
            break;
        case 14:
            (void)uct_ep_check(ep, 0, NULL);
            uct_iface_progress(tx->iface);
            break;
        default:
            uct_iface_progress(&rx->super.super.super);
            break;
        }
    }

    /* The scribbling stopped: what the honest sender sent arrives, before
     * its connection closes and after */
    hold_mode = 0;
    for (i = 0; (i < 64) && (ndelivered < nsent); ++i) {
        fuzz_progress(tx, 8);
    }
    while (nheld > 0) {
        fuzz_release(0);
    }
    uct_ep_destroy(ep);
    for (i = 0; (i < 16 * rx->super.rx.nslots) &&
                (rx->rx.conns[honest_index].ring != NULL);
         ++i) {
        fuzz_progress(tx, 2);
    }
    FUZZ_CHECK(ndelivered == nsent);

    /* The hostile sender closes what it touched; then every block is back
     * but those of the rings offered */
    for (index = 0; index < rx->rx.ctl.max_peers; ++index) {
        if (touched[index]) {
            fuzz_close(index);
        }
    }
    for (i = 0; (i < 16 * rx->super.rx.nslots) &&
                (remapring_pool_blocks_in_use(NULL) != used);
         ++i) {
        fuzz_progress(tx, 2);
    }
    FUZZ_CHECK(nheld == 0);
    FUZZ_CHECK(remapring_pool_blocks_in_use(NULL) == used);

    uct_iface_close(receiver.iface);
    rx = NULL;
    FUZZ_CHECK(remapring_pool_blocks_in_use(NULL) == base_used);
    return 0;
}
