/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * Fuzz target: what a sender reads from a receiver: its device and
 * interface addresses, and the shared control area they lead to.
 *
 * A real interface (shm wire) is the sender. Each input makes a
 * "receiver" in this process, as hostile as the input: a control area
 * memfd (its header, seals, connection states, then the ring words and the
 * slot table of the connection the sender claims, and the limit), and the
 * addresses that name it (pid, fd, interface id, pid namespace, largest
 * payload; the device address with bytes flipped). The sender's real entry
 * points run on them: uct_iface_is_reachable, uct_ep_create (attach,
 * check, claim), then active messages (connect: ring info, shm wire on a
 * sealed pool, writer), progress and uct_ep_check, uct_ep_destroy.
 *
 * The address names this process, or a process that has exited: never
 * another one, whose file descriptors the target would open. The pool the
 * header names is always a real sealed one of this process, so that the
 * sender uses the shm wire and stores only into it.
 *
 * What must hold: no crash, no store outside the pool (the sanitizers, or
 * SIGSEGV/SIGBUS), and no leak.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "fuzz_uct.h"

#include <uct/ib/remapring/sm/remapring_sm_ctl.h>
#include <uct/ib/remapring/ring/ring_pool.h>

#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define FUZZ_PEERS 4
#define FUZZ_SLOTS 4
#define FUZZ_BLOCK 65536

static fuzz_uct_t sender;
static remapring_pool_t *pool;
static pid_t dead_pid;
static unsigned nerrors;

static ucs_status_t
fuzz_err_handler(void *arg, uct_ep_h ep, ucs_status_t status)
{
    ++nerrors;
    return UCS_OK;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    static const char *settings[] = {"WIRE", "shm", NULL};
    remapring_pool_params_t params;
    uct_component_h component;
    char md_name[64];
    unsigned i;
    uint32_t block;

    component = fuzz_uct_component(0, md_name, sizeof(md_name));
    FUZZ_CHECK(component != NULL);
    FUZZ_CHECK(fuzz_uct_open(component, md_name, settings, fuzz_err_handler,
                             NULL, &sender) == UCS_OK);

    remapring_pool_params_default(&params);
    params.block_size  = FUZZ_BLOCK;
    params.init_blocks = 16;
    params.grow_blocks = 16;
    params.max_blocks  = 16;
    params.name        = "fuzz-ep-addr";
    FUZZ_CHECK(remapring_pool_create(&params, &pool) == UCS_OK);
    for (i = 0; i < 16; ++i) {
        FUZZ_CHECK(remapring_pool_block_get(pool, &block) == UCS_OK);
    }

    /* a pid that names no process */
    dead_pid = fork();
    if (dead_pid == 0) {
        _exit(0);
    }
    FUZZ_CHECK(waitpid(dead_pid, NULL, 0) == dead_pid);
    return 0;
}

/* The receiver's control area, as the input makes it */
static int fuzz_make_ctl(fuzz_input_t *in, uint64_t iface_id, size_t *size_p,
                         uct_remapring_ctl_t **ctl_p)
{
    size_t size = ucs_align_up_pow2(uct_remapring_ctl_size(FUZZ_PEERS,
                                                           FUZZ_SLOTS),
                                    4096);
    uct_remapring_ctl_t *ctl;
    uct_remapring_conn_t *conns;
    uint8_t mask, seals;
    unsigned i;
    int fd;

    fd = memfd_create("fuzz-ctl", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    FUZZ_CHECK(fd >= 0);
    mask = fuzz_u8(in);
    if (mask & 0x01) {
        size = fuzz_u16(in); /* too small, not a page multiple */
    }
    FUZZ_CHECK(ftruncate(fd, size) == 0);
    ctl = (size > 0) ?
                  mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) :
                  MAP_FAILED;
    if (ctl == MAP_FAILED) {
        *ctl_p = NULL;
        return fd;
    }

    if (size >= sizeof(*ctl)) {
        ctl->magic       = UCT_REMAPRING_CTL_MAGIC;
        ctl->version     = UCT_REMAPRING_CTL_VERSION;
        ctl->max_peers   = FUZZ_PEERS;
        ctl->iface_id    = iface_id;
        ctl->owner_pid   = getpid();
        ctl->block_size  = FUZZ_BLOCK;
        ctl->pool_fd     = pool->fd;
        ctl->pool_blocks = 16;
        ctl->ring_slots  = FUZZ_SLOTS;
        ctl->state       = UCT_REMAPRING_CTL_OPEN;
        if (mask & 0x02) {
            ctl->magic ^= fuzz_u64(in);
            ctl->version = fuzz_u32(in);
        }
        if (mask & 0x04) {
            ctl->max_peers  = fuzz_u32(in);
            ctl->ring_slots = fuzz_u32(in);
        }
        if (mask & 0x08) {
            ctl->block_size  = fuzz_u32(in);
            ctl->pool_blocks = fuzz_u32(in);
        }
        if (mask & 0x10) {
            ctl->state     = fuzz_u32(in);
            ctl->owner_pid = fuzz_u32(in);
        }
    }

    if (size >= uct_remapring_ctl_tables_offset(FUZZ_PEERS)) {
        conns = uct_remapring_ctl_conns(ctl, FUZZ_PEERS);
        for (i = 0; i < FUZZ_PEERS; ++i) {
            conns[i].state = (mask & 0x20) ? fuzz_u8(in) % 8 :
                                             UCT_REMAPRING_CONN_FREE;
        }
    }

    seals = (mask & 0x40) ? fuzz_u8(in) :
                            (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
    fcntl(fd, F_ADD_SEALS, seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL));
    *size_p = size;
    *ctl_p  = ctl;
    return fd;
}

/* The ring the receiver made for the connection the sender claimed */
static void
fuzz_make_ring(fuzz_input_t *in, uct_remapring_ctl_t *ctl, unsigned index)
{
    uct_remapring_conn_t *conn = &uct_remapring_ctl_conns(ctl,
                                                          FUZZ_PEERS)[index];
    uint32_t *table = uct_remapring_ctl_slot_table(ctl, FUZZ_PEERS, FUZZ_SLOTS,
                                                   index);
    remapring_ring_info_t *info     = &conn->ring.info;
    uint8_t mask                    = fuzz_u8(in);
    unsigned i;

    info->magic        = REMAPRING_RING_CTL_MAGIC;
    info->view_addr    = 0;
    info->nonce        = 0x5eed;
    info->block_size   = FUZZ_BLOCK;
    info->nslots       = FUZZ_SLOTS;
    info->reserve      = 32;
    info->inline_max   = 1024;
    info->align        = 1;
    info->align_offset = 0;
    info->commit       = REMAPRING_RING_COMMIT_STAMP;
    info->rec_align    = 0;
    if (mask & 0x01) {
        fuzz_bytes(in, info, sizeof(*info));
        info->view_addr = 0; /* unused on the shm wire */
    }
    for (i = 0; i < FUZZ_SLOTS; ++i) {
        table[i] = (mask & 0x02) ? fuzz_u32(in) : index * FUZZ_SLOTS + i;
    }
    conn->ring.tail  = 0;
    conn->ring.limit = (mask & 0x04) ? fuzz_u64(in) :
                                       (uint64_t)FUZZ_BLOCK * FUZZ_SLOTS;
    uct_remapring_conn_set_state(conn, (mask & 0x08) ?
                                               fuzz_u8(in) % 8 :
                                               UCT_REMAPRING_CONN_READY);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input_t in = {data, size};
    uct_remapring_iface_addr_t addr;
    uint8_t dev_addr[sizeof(sender.dev_addr)];
    uct_remapring_ctl_t *ctl;
    uct_remapring_conn_t *conns;
    uct_ep_params_t params;
    uint64_t iface_id = 0x1234abcd5678ef00ull, payload = 0;
    size_t ctl_size = 0;
    uct_ep_h ep;
    unsigned i, index;
    uint8_t mask;
    int fd;

    fd   = fuzz_make_ctl(&in, iface_id, &ctl_size, &ctl);
    mask = fuzz_u8(&in);

    memcpy(&addr, sender.iface_addr, sizeof(addr));
    addr.pid      = (mask & 0x01) ? ((mask & 0x02) ? dead_pid : 0) : getpid();
    addr.ctl_fd   = (mask & 0x04) ? ((mask & 0x08) ? pool->fd : -1) : fd;
    addr.iface_id = (mask & 0x10) ? fuzz_u64(&in) : iface_id;
    if (mask & 0x20) {
        addr.pid_ns = fuzz_u64(&in);
    }
    addr.max_payload = (mask & 0x40) ? fuzz_u32(&in) : FUZZ_BLOCK;

    memcpy(dev_addr, sender.dev_addr, sizeof(dev_addr));
    if (mask & 0x80) {
        for (i = fuzz_u8(&in) % 4; i > 0; --i) {
            dev_addr[fuzz_u8(&in) % sender.attr.device_addr_len] ^= fuzz_u8(
                    &in);
        }
    }

    (void)uct_iface_is_reachable(sender.iface, (uct_device_addr_t *)dev_addr,
                                 (uct_iface_addr_t *)&addr);

    memset(&params, 0, sizeof(params));
    params.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR |
                        UCT_EP_PARAM_FIELD_IFACE_ADDR;
    params.iface      = sender.iface;
    params.dev_addr   = (uct_device_addr_t *)dev_addr;
    params.iface_addr = (uct_iface_addr_t *)&addr;
    if (uct_ep_create(&params, &ep) != UCS_OK) {
        goto out;
    }

    /* the receiver answers the claim */
    if ((ctl != NULL) &&
        (ctl_size >= uct_remapring_ctl_size(FUZZ_PEERS, FUZZ_SLOTS))) {
        conns = uct_remapring_ctl_conns(ctl, FUZZ_PEERS);
        for (index = 0; index < FUZZ_PEERS; ++index) {
            if (conns[index].sender_pid == getpid()) {
                fuzz_make_ring(&in, ctl, index);
                break;
            }
        }
    }

    /* the sender sends, and the receiver changes its words meanwhile */
    while (in.size > 0) {
        mask = fuzz_u8(&in);
        switch (mask % 4) {
        case 0:
            (void)uct_ep_am_short(ep, mask >> 3, payload, &payload,
                                  fuzz_u8(&in) % 9);
            ++payload;
            break;
        case 1:
            uct_worker_progress(sender.worker);
            break;
        case 2:
            (void)uct_ep_check(ep, 0, NULL);
            break;
        default:
            if ((ctl != NULL) &&
                (ctl_size >= uct_remapring_ctl_size(FUZZ_PEERS, FUZZ_SLOTS))) {
                /* any word of the area */
                i = fuzz_u16(&in) % (ctl_size / sizeof(uint32_t));
                ((uint32_t *)ctl)[i] = fuzz_u32(&in);
            }
            break;
        }
    }

    uct_ep_destroy(ep);
    uct_worker_progress(sender.worker);
out:
    if (ctl != NULL) {
        munmap(ctl, ctl_size);
    }
    close(fd);
    return 0;
}
