/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "remapring_sm_ctl.h"

#include <ucs/arch/bitops.h>
#include <ucs/debug/log.h>
#include <ucs/sys/string.h>
#include <ucs/sys/sys.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>


/* Seals of the control area: its size is fixed once made, and senders
 * check them before they map it */
#define UCT_REMAPRING_CTL_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)


ucs_status_t uct_remapring_ctl_create(const uct_remapring_ctl_params_t *params,
                                      uct_remapring_ctl_area_t *area)
{
    uct_remapring_ctl_t *ctl;
    char name[64];
    size_t size;
    int fd;

    size = ucs_align_up_pow2(uct_remapring_ctl_size(params->max_peers,
                                                    params->ring_slots),
                             ucs_get_page_size());
    ucs_snprintf_zero(name, sizeof(name), "remapring-ctl-%d", getpid());
    /* senders open it through /proc/<pid>/fd/<fd>, CLOEXEC does not matter */
    fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
        ucs_error("memfd_create(%s) failed: %m", name);
        return UCS_ERR_IO_ERROR;
    }

    if (ftruncate(fd, size) != 0) {
        ucs_error("ftruncate(%s, %zu) failed: %m", name, size);
        goto err_close;
    }

    /* its size is fixed for good: senders map it whole */
    if (fcntl(fd, F_ADD_SEALS, UCT_REMAPRING_CTL_SEALS) != 0) {
        ucs_error("sealing %s failed: %m", name);
        goto err_close;
    }

    ctl = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (ctl == MAP_FAILED) {
        ucs_error("mmap(%s, %zu) failed: %m", name, size);
        goto err_close;
    }

    /* a new memfd reads as zeros: every connection is FREE */
    ctl->version     = UCT_REMAPRING_CTL_VERSION;
    ctl->max_peers   = params->max_peers;
    ctl->iface_id    = params->iface_id;
    ctl->owner_pid   = getpid();
    ctl->block_size  = params->block_size;
    ctl->pool_fd     = params->pool_fd;
    ctl->pool_blocks = params->pool_blocks;
    ctl->ring_slots  = params->ring_slots;
    ctl->state       = UCT_REMAPRING_CTL_OPEN;
    __atomic_store_n(&ctl->magic, UCT_REMAPRING_CTL_MAGIC, __ATOMIC_RELEASE);

    area->fd         = fd;
    area->ctl        = ctl;
    area->size       = size;
    area->conns      = uct_remapring_ctl_conns(ctl, params->max_peers);
    area->max_peers  = params->max_peers;
    area->ring_slots = params->ring_slots;
    return UCS_OK;

err_close:
    close(fd);
    return UCS_ERR_IO_ERROR;
}

void uct_remapring_ctl_destroy(uct_remapring_ctl_area_t *area)
{
    __atomic_store_n(&area->ctl->state, UCT_REMAPRING_CTL_CLOSED,
                     __ATOMIC_RELEASE);
    munmap(area->ctl, area->size);
    close(area->fd);
}

void uct_remapring_ctl_doorbells(uct_remapring_ctl_area_t *area,
                                 void (*cb)(void *arg, unsigned index),
                                 void *arg)
{
    uct_remapring_ctl_t *ctl = area->ctl;
    uint64_t summary, word;
    unsigned w, b;

    if (ucs_likely(__atomic_load_n(&ctl->summary, __ATOMIC_RELAXED) == 0)) {
        return;
    }

    summary = __atomic_exchange_n(&ctl->summary, 0, __ATOMIC_ACQUIRE);
    ucs_for_each_bit(w, summary) {
        if (w * 64 >= area->max_peers) {
            continue; /* a sender set a bit of no connection */
        }

        word = __atomic_exchange_n(&ctl->active[w], 0, __ATOMIC_ACQUIRE);
        ucs_for_each_bit(b, word) {
            if ((w * 64) + b < area->max_peers) {
                cb(arg, (w * 64) + b);
            }
        }
    }
}

uct_remapring_conn_state_t
uct_remapring_ctl_set_unless_closed(uct_remapring_ctl_area_t *area,
                                    unsigned index,
                                    uct_remapring_conn_state_t state)
{
    uint32_t *word = &area->conns[index].state;
    uint32_t old   = __atomic_load_n(word, __ATOMIC_ACQUIRE);

    /* release on success: a ring's words before READY */
    while ((uct_remapring_conn_state_fold(old) != UCT_REMAPRING_CONN_CLOSED) &&
           !__atomic_compare_exchange_n(word, &old, state, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
    }

    return uct_remapring_conn_state_fold(old);
}

void uct_remapring_ctl_release(uct_remapring_ctl_area_t *area, unsigned index)
{
    /* a slot is FREE with no sender named: the next sender's pid, written
     * last, tells its claim is complete */
    area->conns[index].sender_pid = 0;
    area->conns[index].sender_id  = 0;
    area->conns[index].armed      = 0;
    uct_remapring_conn_set_state(&area->conns[index], UCT_REMAPRING_CONN_FREE);
}

int uct_remapring_ctl_offer_begin(uct_remapring_ctl_area_t *area,
                                  unsigned index)
{
    uint32_t state = UCT_REMAPRING_CONN_FREE;

    /* a plain store would overwrite the claim of a sender that took the
     * slot since it was seen FREE, and that sender would find its
     * connection released */
    return __atomic_compare_exchange_n(&area->conns[index].state, &state,
                                       UCT_REMAPRING_CONN_OFFERING, 0,
                                       __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

void uct_remapring_ctl_offer_end(uct_remapring_ctl_area_t *area,
                                 unsigned index, int made)
{
    /* no sender moves an OFFERING slot: a store is enough, and its release
     * orders the ring words before OFFERED */
    uct_remapring_conn_set_state(&area->conns[index],
                                 made ? UCT_REMAPRING_CONN_OFFERED :
                                        UCT_REMAPRING_CONN_FREE);
}


/* Check the header of a control area mapped from @a path: @a ctl is a copy,
 * so that what is checked is what is used */
static int uct_remapring_remote_valid(const uct_remapring_ctl_t *ctl,
                                      size_t size,
                                      const uct_remapring_iface_addr_t *addr)
{
    return (ctl->magic == UCT_REMAPRING_CTL_MAGIC) &&
           (ctl->version == UCT_REMAPRING_CTL_VERSION) &&
           (ctl->iface_id == addr->iface_id) &&
           (ctl->owner_pid == addr->pid) && (ctl->max_peers > 0) &&
           (ctl->max_peers <= UCT_REMAPRING_MAX_PEERS) &&
           (ctl->ring_slots >= 2) && ucs_is_pow2(ctl->ring_slots) &&
           (uct_remapring_ctl_size(ctl->max_peers, ctl->ring_slots) <= size);
}

ucs_status_t uct_remapring_remote_attach(const uct_remapring_iface_addr_t *addr,
                                         uct_remapring_watch_t *watch,
                                         uct_remapring_proc_exit_cb_t exit_cb,
                                         uct_remapring_remote_t *remote)
{
    uct_remapring_ctl_t hdr;
    struct stat st;
    char path[64];
    void *ctl;
    int fd, seals;

    if (uct_remapring_proc_open(watch, addr->pid, exit_cb, &remote->proc) !=
        UCS_OK) {
        ucs_error("peer pid %d is not running", addr->pid);
        return UCS_ERR_UNREACHABLE;
    }

    ucs_snprintf_zero(path, sizeof(path), "/proc/%d/fd/%d", addr->pid,
                      addr->ctl_fd);
    fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        ucs_error("cannot open peer control area %s: %m", path);
        goto err_proc;
    }

    if ((fstat(fd, &st) != 0) ||
        (st.st_size < (off_t)uct_remapring_ctl_size(1, 2))) {
        ucs_error("%s is not a remapring control area", path);
        goto err_close;
    }

    /* a control area that could shrink would fault us on its next load */
    seals = fcntl(fd, F_GET_SEALS);
    if ((seals < 0) ||
        ((seals & UCT_REMAPRING_CTL_SEALS) != UCT_REMAPRING_CTL_SEALS)) {
        ucs_error("control area %s of pid %d is not sealed"
                  " (seals 0x%x, want 0x%x)", path, addr->pid, seals,
                  UCT_REMAPRING_CTL_SEALS);
        goto err_close;
    }

    ctl = mmap(NULL, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (ctl == MAP_FAILED) {
        ucs_error("mmap(%s, %zu) failed: %m", path,
                  (size_t)st.st_size);
        goto err_close;
    }

    close(fd);
    /* the magic, stored last with release, says the rest is written */
    hdr.magic = __atomic_load_n(&((uct_remapring_ctl_t*)ctl)->magic,
                                __ATOMIC_ACQUIRE);
    memcpy(UCS_PTR_BYTE_OFFSET(&hdr, sizeof(hdr.magic)),
           UCS_PTR_BYTE_OFFSET(ctl, sizeof(hdr.magic)),
           ucs_offsetof(uct_remapring_ctl_t, summary) - sizeof(hdr.magic));
    if ((hdr.magic == UCT_REMAPRING_CTL_MAGIC) &&
        (hdr.version != UCT_REMAPRING_CTL_VERSION)) {
        ucs_error("pid %d speaks version %u of the connection protocol, this"
                  " process %u: peers must load the same remapring",
                  addr->pid, hdr.version, UCT_REMAPRING_CTL_VERSION);
        munmap(ctl, st.st_size);
        goto err_proc;
    } else if (!uct_remapring_remote_valid(&hdr, st.st_size, addr)) {
        ucs_error("%s does not hold the control area of iface"
                  " 0x%" PRIx64 " of pid %d",
                  path, addr->iface_id, addr->pid);
        munmap(ctl, st.st_size);
        goto err_proc;
    }

    remote->ctl         = ctl;
    remote->ctl_size    = st.st_size;
    remote->iface_id    = addr->iface_id;
    remote->max_peers   = hdr.max_peers;
    remote->ring_slots  = hdr.ring_slots;
    remote->block_size  = hdr.block_size;
    remote->pool_blocks = hdr.pool_blocks;
    remote->pool_fd     = hdr.pool_fd;
    remote->conn        = NULL;
    remote->index       = 0;
    return UCS_OK;

err_close:
    close(fd);
err_proc:
    uct_remapring_proc_close(watch, &remote->proc);
    return UCS_ERR_UNREACHABLE;
}

ucs_status_t uct_remapring_remote_claim(uct_remapring_remote_t *remote,
                                        uint64_t sender_id,
                                        uct_remapring_wire_type_t wire)
{
    uct_remapring_conn_t *conns = uct_remapring_ctl_conns(remote->ctl,
                                                          remote->max_peers);
    /* a ring made in advance is one of the shm wire's: such a sender takes
     * one first and writes at once; another claims a free slot first */
    static const struct {
        uint32_t from;
        uint32_t to;
    } shm_order[] = {{UCT_REMAPRING_CONN_OFFERED, UCT_REMAPRING_CONN_READY},
                     {UCT_REMAPRING_CONN_FREE, UCT_REMAPRING_CONN_CLAIMED}},
      cma_order[] = {{UCT_REMAPRING_CONN_FREE, UCT_REMAPRING_CONN_CLAIMED},
                     {UCT_REMAPRING_CONN_OFFERED, UCT_REMAPRING_CONN_CLAIMED}};
    const typeof(shm_order[0]) *order = (wire == UCT_REMAPRING_WIRE_SHM) ?
                                        shm_order : cma_order;
    unsigned index, pass;
    uint32_t state;

    for (pass = 0; pass < 2; ++pass) {
        for (index = 0; index < remote->max_peers; ++index) {
            state = order[pass].from;
            if (__atomic_compare_exchange_n(&conns[index].state, &state,
                                            order[pass].to, 0,
                                            __ATOMIC_ACQ_REL,
                                            __ATOMIC_RELAXED)) {
                goto claimed;
            }
        }
    }

    if (pass == 2) {
        ucs_error("pid %d accepts no more senders (%u connected,"
                  " see UCX_REMAPRING_MAX_PEERS)",
                  remote->proc.pid, remote->max_peers);
        return UCS_ERR_EXCEEDS_LIMIT;
    }

claimed:
    remote->conn            = &conns[index];
    remote->index           = index;
    remote->conn->sender_id = sender_id;
    remote->conn->wire      = wire;
    /* the pid last, with release: a receiver that reads it (acquire) reads
     * id and wire too; one that woke for a stale doorbell bit before it was
     * written reads 0 (the receiver clears it when it frees the slot), and
     * waits for our doorbell below */
    __atomic_store_n(&remote->conn->sender_pid, getpid(), __ATOMIC_RELEASE);
    __atomic_store_n(&remote->conn->armed, 1, __ATOMIC_RELEASE);
    uct_remapring_remote_ring_bell(remote);
    return UCS_OK;
}

ucs_status_t uct_remapring_remote_state(const uct_remapring_remote_t *remote,
                                        const char **reason_p)
{
    if (__atomic_load_n(&remote->ctl->state, __ATOMIC_ACQUIRE) !=
        UCT_REMAPRING_CTL_OPEN) {
        *reason_p = "the receiving interface was closed";
        return UCS_ERR_CONNECTION_RESET;
    }

    switch (uct_remapring_conn_state(remote->conn)) {
    case UCT_REMAPRING_CONN_CLAIMED:
        return UCS_INPROGRESS;
    case UCT_REMAPRING_CONN_READY:
        return UCS_OK;
    case UCT_REMAPRING_CONN_FAILED:
        *reason_p = "the receiver refused or failed the connection";
        return UCS_ERR_CONNECTION_RESET;
    default:
        /* FREE or CLOSED: the receiver took the slot back */
        *reason_p = "the receiver released the connection";
        return UCS_ERR_CONNECTION_RESET;
    }
}

/* CLAIMED, READY or FAILED -> CLOSED or RESET; a slot the receiver already
 * took back (FREE, and perhaps claimed by another sender since) is left
 * alone */
static int uct_remapring_remote_close(uct_remapring_conn_t *conn, int reset)
{
    uint32_t state = uct_remapring_conn_state(conn);

    while ((state == UCT_REMAPRING_CONN_CLAIMED) ||
           (state == UCT_REMAPRING_CONN_READY) ||
           (state == UCT_REMAPRING_CONN_FAILED)) {
        if (__atomic_compare_exchange_n(&conn->state, &state,
                                        reset ? UCT_REMAPRING_CONN_RESET :
                                                UCT_REMAPRING_CONN_CLOSED,
                                        0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
            return 1;
        }
    }

    return 0;
}

void uct_remapring_remote_detach(uct_remapring_remote_t *remote,
                                 uct_remapring_watch_t *watch, int reset)
{
    if ((remote->conn != NULL) &&
        uct_remapring_remote_close(remote->conn, reset)) {
        /* the receiver drains what we published, then frees the slot */
        __atomic_store_n(&remote->conn->armed, 1, __ATOMIC_RELAXED);
        uct_remapring_remote_ring_bell(remote);
    }
    remote->conn = NULL;

    munmap(remote->ctl, remote->ctl_size);
    uct_remapring_proc_close(watch, &remote->proc);
}
