/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "remapring_ep.h"

#include <ucs/debug/log.h>
#include <ucs/sys/string.h>
#include <ucs/sys/sys.h>
#include <uct/sm/base/sm_ep.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>


/* Map the receiver's control area and check that it is the interface the
 * address names (pid and fd numbers are reused) */
static ucs_status_t
uct_remapring_ep_map_ctl(uct_remapring_ep_t *ep,
                         const uct_remapring_iface_addr_t *addr)
{
    char path[64];
    struct stat st;
    void *ctl;
    int fd;

    ucs_snprintf_zero(path, sizeof(path), "/proc/%d/fd/%d", addr->pid,
                      addr->ctl_fd);
    fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        ucs_error("remapring: cannot open peer control area %s: %m", path);
        return UCS_ERR_UNREACHABLE;
    }

    if ((fstat(fd, &st) != 0) ||
        (st.st_size < (off_t)uct_remapring_ctl_size(1, 2))) {
        ucs_error("remapring: %s is not a remapring control area", path);
        goto err_close;
    }

    ctl = mmap(NULL, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (ctl == MAP_FAILED) {
        ucs_error("remapring: mmap(%s, %zu) failed: %m", path,
                  (size_t)st.st_size);
        goto err_close;
    }

    close(fd);
    ep->ctl      = ctl;
    ep->ctl_size = st.st_size;
    if ((__atomic_load_n(&ep->ctl->magic, __ATOMIC_ACQUIRE) !=
         UCT_REMAPRING_CTL_MAGIC) ||
        (ep->ctl->version != UCT_REMAPRING_CTL_VERSION) ||
        (ep->ctl->iface_id != addr->iface_id) ||
        (ep->ctl->owner_pid != addr->pid) || (ep->ctl->max_peers == 0) ||
        (ep->ctl->max_peers > UCT_REMAPRING_MAX_PEERS) ||
        (ep->ctl->ring_slots < 2) || !ucs_is_pow2(ep->ctl->ring_slots) ||
        (uct_remapring_ctl_size(ep->ctl->max_peers, ep->ctl->ring_slots) >
         ep->ctl_size)) {
        ucs_error("remapring: %s does not hold the control area of iface"
                  " 0x%" PRIx64 " of pid %d", path, addr->iface_id,
                  addr->pid);
        munmap(ctl, st.st_size);
        return UCS_ERR_UNREACHABLE;
    }

    return UCS_OK;

err_close:
    close(fd);
    return UCS_ERR_UNREACHABLE;
}

/* For the shm wire: open the receiver's pool memfd. A failure (another
 * user's process, a hardened /proc) leaves the cma wire, which needs only
 * ptrace access */
static int uct_remapring_ep_open_pool(uct_remapring_ep_t *ep)
{
    char path[64];
    int fd;

    ucs_snprintf_zero(path, sizeof(path), "/proc/%d/fd/%d", ep->pid,
                      ep->ctl->pool_fd);
    fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        ucs_diag("remapring: cannot open pool %s of pid %d (%m), using the "
                 "cma wire", path, ep->pid);
    }

    return fd;
}

/* Claim a free connection slot and ring its doorbell, so the receiver makes
 * our ring on its next progress */
static ucs_status_t uct_remapring_ep_claim(uct_remapring_ep_t *ep)
{
    uct_remapring_conn_t *conns = uct_remapring_ctl_conns(ep->ctl,
                                                          ep->ctl->max_peers);
    unsigned index;
    uint32_t state;

    for (index = 0; index < ep->ctl->max_peers; ++index) {
        state = UCT_REMAPRING_CONN_FREE;
        if (__atomic_compare_exchange_n(&conns[index].state, &state,
                                        UCT_REMAPRING_CONN_CLAIMED, 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
            break;
        }
    }

    if (index == ep->ctl->max_peers) {
        ucs_error("remapring: pid %d accepts no more senders (%u connected,"
                  " see UCX_REMAPRING_MAX_PEERS)", ep->pid,
                  ep->ctl->max_peers);
        return UCS_ERR_EXCEEDS_LIMIT;
    }

    ep->conn                = &conns[index];
    ep->index               = index;
    ep->conn->sender_pid    = getpid();
    ep->conn->sender_id     = (uintptr_t)ep;
    ep->conn->wire          = (ep->pool_fd >= 0) ? UCT_REMAPRING_WIRE_SHM :
                                                   UCT_REMAPRING_WIRE_CMA;
    /* the state word is already CLAIMED: the receiver reads sender_pid and
     * wire after its doorbell, which the release below orders */
    __atomic_store_n(&ep->conn->armed, 1, __ATOMIC_RELEASE);
    uct_remapring_ctl_ring_bell(ep->ctl, ep->conn, ep->index);
    return UCS_OK;
}

static UCS_CLASS_INIT_FUNC(uct_remapring_ep_t, const uct_ep_params_t *params)
{
    uct_remapring_iface_t *iface = ucs_derived_of(params->iface,
                                                  uct_remapring_iface_t);
    const uct_remapring_iface_addr_t *addr;
    ucs_status_t status;

    UCT_EP_PARAMS_CHECK_DEV_IFACE_ADDRS(params);
    UCS_CLASS_CALL_SUPER_INIT(uct_base_ep_t, &iface->super);

    addr   = (const uct_remapring_iface_addr_t*)params->iface_addr;
    status = uct_remapring_iface_check_block(iface, addr, UCS_LOG_LEVEL_ERROR);
    if (status != UCS_OK) {
        return status;
    }

    self->pid     = addr->pid;
    self->wire    = NULL;
    self->status  = UCS_OK;
    self->blocked = 0;
    self->stalls  = 0;
    ucs_arbiter_group_init(&self->arb_group);

    status = uct_ep_keepalive_init(&self->keepalive, self->pid);
    if (status != UCS_OK) {
        ucs_error("remapring: peer pid %d is not running", self->pid);
        goto err;
    }

    /* to tell a receiver that stopped crediting from one that is gone; as
     * on the receiver side, without pidfd_open the pid alone is checked */
    self->pidfd = syscall(SYS_pidfd_open, self->pid, 0);

    status = uct_remapring_ep_map_ctl(self, addr);
    if (status != UCS_OK) {
        goto err_close;
    }

    self->pool_fd = (iface->tx.wire == UCT_REMAPRING_WIRE_SHM) ?
                    uct_remapring_ep_open_pool(self) : -1;

    status = uct_remapring_ep_claim(self);
    if (status != UCS_OK) {
        goto err_unmap;
    }

    uct_remapring_md_set_in_use(iface->super.md);
    ucs_debug("remapring: ep %p to pid %d connection %u", self, self->pid,
              self->index);
    return UCS_OK;

err_unmap:
    if (self->pool_fd >= 0) {
        close(self->pool_fd);
    }
    munmap(self->ctl, self->ctl_size);
err_close:
    if (self->pidfd >= 0) {
        close(self->pidfd);
    }
err:
    ucs_arbiter_group_cleanup(&self->arb_group);
    return status;
}

static UCS_CLASS_CLEANUP_FUNC(uct_remapring_ep_t)
{
    /* requests the user left queued are dropped, like UCT's other
     * transports do, and said so */
    uct_remapring_ep_pending_purge(&self->super.super, NULL, NULL);
    ucs_arbiter_group_cleanup(&self->arb_group);
    if (self->wire != NULL) {
        uct_remapring_wire_destroy(self->wire);
    }

    /* the receiver drains what we published, then frees the slot */
    __atomic_store_n(&self->conn->state, UCT_REMAPRING_CONN_CLOSED,
                     __ATOMIC_RELEASE);
    __atomic_store_n(&self->conn->armed, 1, __ATOMIC_RELAXED);
    uct_remapring_ctl_ring_bell(self->ctl, self->conn, self->index);
    munmap(self->ctl, self->ctl_size);
    if (self->pool_fd >= 0) {
        close(self->pool_fd);
    }
    if (self->pidfd >= 0) {
        close(self->pidfd);
    }
}

UCS_CLASS_DEFINE(uct_remapring_ep_t, uct_base_ep_t);
UCS_CLASS_DEFINE_NEW_FUNC(uct_remapring_ep_t, uct_ep_t, const uct_ep_params_t*);
UCS_CLASS_DEFINE_DELETE_FUNC(uct_remapring_ep_t, uct_ep_t);


static void uct_remapring_ep_failed(uct_remapring_ep_t *ep, ucs_status_t status)
{
    if (ep->status != UCS_OK) {
        return;
    }

    ep->status = status;
    ucs_diag("remapring: ep %p to pid %d failed: %s", ep, ep->pid,
             ucs_status_string(status));
    uct_ep_keepalive_check(&ep->super.super, &ep->keepalive, ep->pid, 0,
                           NULL);
}

/* The shm wire: map the receiver's pool through /proc/<pid>/fd/<n>, after
 * the claim declared the wire (the receiver then keeps its ring view as it
 * is, so there is no going back to cma) */
static ucs_status_t
uct_remapring_ep_shm_wire(uct_remapring_ep_t *ep,
                          const uct_remapring_ring_info_t *info)
{
    ucs_status_t status;

    status = uct_remapring_wire_shm_create(
            ep->pool_fd, info->block_size, ep->ctl->pool_blocks,
            uct_remapring_ctl_slot_table(ep->ctl, ep->ctl->max_peers,
                                         ep->ctl->ring_slots, ep->index),
            (size_t)info->block_size * info->nslots, &ep->conn->ring,
            &ep->wire);
    close(ep->pool_fd);
    ep->pool_fd = -1;
    return status;
}

/* The ring is made by the receiver on its progress after we claimed the
 * connection; until then sends wait in the pending queue */
static UCS_F_NOINLINE ucs_status_t
uct_remapring_ep_connect(uct_remapring_ep_t *ep)
{
    uct_remapring_ring_info_t info;
    ucs_status_t status;

    if (ep->status != UCS_OK) {
        return ep->status;
    }

    switch (__atomic_load_n(&ep->conn->state, __ATOMIC_ACQUIRE)) {
    case UCT_REMAPRING_CONN_CLAIMED:
        return UCS_ERR_NO_RESOURCE;
    case UCT_REMAPRING_CONN_READY:
        break;
    default:
        ucs_error("remapring: pid %d refused connection %u", ep->pid,
                  ep->index);
        uct_remapring_ep_failed(ep, UCS_ERR_CONNECTION_RESET);
        return UCS_ERR_CONNECTION_RESET;
    }

    info = ep->conn->ring.info;
    if ((info.block_size != ep->ctl->block_size) ||
        (info.nslots != ep->ctl->ring_slots)) {
        ucs_error("remapring: pid %d ring of %u slots of %u bytes does not "
                  "match its control area (%u of %u)", ep->pid, info.nslots,
                  info.block_size, ep->ctl->ring_slots, ep->ctl->block_size);
        uct_remapring_ep_failed(ep, UCS_ERR_INVALID_PARAM);
        return UCS_ERR_INVALID_PARAM;
    }

    if (ep->pool_fd >= 0) {
        status = uct_remapring_ep_shm_wire(ep, &info);
    } else {
        status = uct_remapring_wire_cma_create(ep->pid, info.view_addr,
                                               (size_t)info.block_size *
                                               info.nslots,
                                               &ep->conn->ring, &ep->wire);
    }
    if (status != UCS_OK) {
        uct_remapring_ep_failed(ep, status);
        return status;
    }

    status = uct_remapring_ring_writer_init(&ep->writer, &info, ep->wire);
    if (status != UCS_OK) {
        uct_remapring_wire_destroy(ep->wire);
        ep->wire = NULL;
        uct_remapring_ep_failed(ep, status);
        return status;
    }

    return UCS_OK;
}

/* Every UCT_REMAPRING_EP_STALL_CHECK sends or pending checks refused for
 * lack of credit, look whether the receiver still exists: the shm wire
 * writes into memory that outlives it, so a dead receiver shows only as a
 * ring that never drains. A zombie counts as gone (pidfd). */
#define UCT_REMAPRING_EP_STALL_CHECK 1024

static UCS_F_NOINLINE ucs_status_t
uct_remapring_ep_stalled(uct_remapring_ep_t *ep)
{
    struct pollfd pfd;
    int gone;

    if ((ep->status != UCS_OK) ||
        ((++ep->stalls % UCT_REMAPRING_EP_STALL_CHECK) != 0)) {
        return (ep->status != UCS_OK) ? ep->status : UCS_ERR_NO_RESOURCE;
    }

    if (ep->pidfd >= 0) {
        pfd.fd     = ep->pidfd;
        pfd.events = POLLIN;
        gone       = poll(&pfd, 1, 0) > 0;
    } else {
        gone = (kill(ep->pid, 0) < 0) && (errno == ESRCH);
    }

    if (!gone) {
        return UCS_ERR_NO_RESOURCE;
    }

    ucs_debug("remapring: ep %p receiver pid %d exited", ep, ep->pid);
    uct_remapring_ep_failed(ep, UCS_ERR_CONNECTION_RESET);
    return ep->status;
}

static UCS_F_ALWAYS_INLINE ucs_status_t
uct_remapring_ep_send(uct_remapring_ep_t *ep, uint8_t id,
                      const struct iovec *iov, size_t iovcnt)
{
    ucs_status_t status;

    if (ucs_unlikely(ep->wire == NULL)) {
        status = uct_remapring_ep_connect(ep);
        if (status != UCS_OK) {
            return status;
        }
    } else if (ucs_unlikely(ep->status != UCS_OK)) {
        return ep->status;
    }

    status = uct_remapring_ring_writer_send(&ep->writer, id, 0, iov, iovcnt);
    if (ucs_likely(status == UCS_OK)) {
        uct_remapring_ctl_ring_bell(ep->ctl, ep->conn, ep->index);
    } else if (status == UCS_ERR_NO_RESOURCE) {
        return uct_remapring_ep_stalled(ep);
    } else if (status != UCS_ERR_EXCEEDS_LIMIT) {
        uct_remapring_ep_failed(ep, status);
    }

    return status;
}

/* Flatten a UCT iov (count/stride unsupported beyond one element) */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_remapring_ep_iov(const uct_iov_t *iov, size_t iovcnt, struct iovec *out,
                     size_t *total_p)
{
    size_t i, total = 0;

    for (i = 0; i < iovcnt; ++i) {
        if (ucs_unlikely(iov[i].count > 1)) {
            ucs_error("remapring: iov count %u is not supported",
                      iov[i].count);
            return UCS_ERR_UNSUPPORTED;
        }

        out[i].iov_base = iov[i].buffer;
        out[i].iov_len  = iov[i].length * iov[i].count;
        total          += out[i].iov_len;
    }

    *total_p = total;
    return UCS_OK;
}

ucs_status_t uct_remapring_ep_am_short(uct_ep_h tl_ep, uint8_t id,
                                       uint64_t header, const void *payload,
                                       unsigned length)
{
    uct_remapring_ep_t *ep = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    struct iovec iov[2]    = {
        {.iov_base = &header, .iov_len = sizeof(header)},
        {.iov_base = (void*)payload, .iov_len = length}
    };
    ucs_status_t status;

    UCT_CHECK_AM_ID(id);
    status = uct_remapring_ep_send(ep, id, iov, 2);
    if (status == UCS_OK) {
        UCT_TL_EP_STAT_OP(&ep->super, AM, SHORT, sizeof(header) + length);
    }

    return status;
}

ucs_status_t uct_remapring_ep_am_short_iov(uct_ep_h tl_ep, uint8_t id,
                                           const uct_iov_t *iov,
                                           size_t iovcnt)
{
    uct_remapring_ep_t *ep = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    struct iovec vec[UCT_REMAPRING_MAX_IOV];
    ucs_status_t status;
    size_t length;

    UCT_CHECK_AM_ID(id);
    UCT_CHECK_PARAM(iovcnt <= UCT_REMAPRING_MAX_IOV, "iovcnt %zu > max %d",
                    iovcnt, UCT_REMAPRING_MAX_IOV);
    status = uct_remapring_ep_iov(iov, iovcnt, vec, &length);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_remapring_ep_send(ep, id, vec, iovcnt);
    if (status == UCS_OK) {
        UCT_TL_EP_STAT_OP(&ep->super, AM, SHORT, length);
    }

    return status;
}

ssize_t uct_remapring_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id,
                                  uct_pack_callback_t pack_cb, void *arg,
                                  unsigned flags)
{
    uct_remapring_ep_t *ep       = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    uct_remapring_iface_t *iface = ucs_derived_of(tl_ep->iface,
                                                  uct_remapring_iface_t);
    struct iovec iov;
    ucs_status_t status;

    UCT_CHECK_AM_ID(id);
    if (ucs_unlikely(ep->wire == NULL)) {
        status = uct_remapring_ep_connect(ep);
        if (status != UCS_OK) {
            return status;
        }
    }

    /* the upper layer's packer cannot write into another process: pack
     * here, then check credit for the real size */
    if (!uct_remapring_ring_writer_can_send(&ep->writer, 0)) {
        return UCS_ERR_NO_RESOURCE;
    }

    iov.iov_base = iface->tx.bounce;
    iov.iov_len  = pack_cb(iface->tx.bounce, arg);
    ucs_assertv(iov.iov_len <= iface->tx.max_bcopy, "packed %zu max %zu",
                iov.iov_len, iface->tx.max_bcopy);

    status = uct_remapring_ep_send(ep, id, &iov, 1);
    if (status != UCS_OK) {
        return status;
    }

    UCT_TL_EP_STAT_OP(&ep->super, AM, BCOPY, iov.iov_len);
    return iov.iov_len;
}

ucs_status_t uct_remapring_ep_am_zcopy(uct_ep_h tl_ep, uint8_t id,
                                       const void *header,
                                       unsigned header_length,
                                       const uct_iov_t *iov, size_t iovcnt,
                                       unsigned flags, uct_completion_t *comp)
{
    uct_remapring_ep_t *ep = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    struct iovec vec[UCT_REMAPRING_MAX_IOV + 1];
    ucs_status_t status;
    size_t length;

    UCT_CHECK_AM_ID(id);
    UCT_CHECK_PARAM(iovcnt <= UCT_REMAPRING_MAX_IOV,
                    "iovcnt %zu > max %d", iovcnt, UCT_REMAPRING_MAX_IOV);
    UCT_CHECK_PARAM(header_length <= UCT_REMAPRING_AM_MAX_HDR,
                    "header_length %u > max %d", header_length,
                    UCT_REMAPRING_AM_MAX_HDR);

    vec[0].iov_base = (void*)header;
    vec[0].iov_len  = header_length;
    status          = uct_remapring_ep_iov(iov, iovcnt, vec + 1, &length);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_remapring_ep_send(ep, id, vec, iovcnt + 1);
    if (status == UCS_OK) {
        UCT_TL_EP_STAT_OP(&ep->super, AM, ZCOPY, header_length + length);
    }

    /* the bytes are in the receiver's ring: complete at once */
    return status;
}

/* One process_vm_readv/writev pass over a whole iov, retried on partial
 * transfers */
static ucs_status_t
uct_remapring_ep_rma(uct_remapring_ep_t *ep, const uct_iov_t *iov,
                     size_t iovcnt, uint64_t remote_addr, uct_rkey_t rkey,
                     int write)
{
    const uct_remapring_rkey_t *key = (const uct_remapring_rkey_t*)rkey;
    struct iovec local[UCT_REMAPRING_MAX_IOV];
    struct iovec remote;
    size_t length, done, i;
    ucs_status_t status;
    ssize_t ret;

    UCT_CHECK_PARAM(iovcnt <= UCT_REMAPRING_MAX_IOV, "iovcnt %zu > max %d",
                    iovcnt, UCT_REMAPRING_MAX_IOV);
    if (ep->status != UCS_OK) {
        return ep->status;
    }

    status = uct_remapring_ep_iov(iov, iovcnt, local, &length);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_remapring_rkey_check(key, ep->pid, remote_addr, length);
    if (status != UCS_OK) {
        return status;
    }

    for (done = 0, i = 0; done < length;) {
        remote.iov_base = (void*)(remote_addr + done);
        remote.iov_len  = length - done;
        ret = write ? process_vm_writev(ep->pid, local + i, iovcnt - i,
                                        &remote, 1, 0) :
                      process_vm_readv(ep->pid, local + i, iovcnt - i,
                                       &remote, 1, 0);
        if (ret < 0) {
            if (errno == EINTR) {
                continue;
            }

            status = (errno == ESRCH) ? UCS_ERR_CONNECTION_RESET :
                                        UCS_ERR_IO_ERROR;
            ucs_error("remapring: process_vm_%s(pid %d, %p, %zu) failed: %m",
                      write ? "writev" : "readv", ep->pid, remote.iov_base,
                      remote.iov_len);
            if (status == UCS_ERR_CONNECTION_RESET) {
                uct_remapring_ep_failed(ep, status);
            }
            return status;
        } else if (ret == 0) {
            ucs_error("remapring: process_vm_%s(pid %d, %p, %zu) made no"
                      " progress", write ? "writev" : "readv", ep->pid,
                      remote.iov_base, remote.iov_len);
            return UCS_ERR_IO_ERROR;
        }

        done += ret;
        /* skip the local pieces that are done */
        while ((i < iovcnt) && ((size_t)ret >= local[i].iov_len)) {
            ret -= local[i++].iov_len;
        }
        if (i < iovcnt) {
            local[i].iov_base = UCS_PTR_BYTE_OFFSET(local[i].iov_base, ret);
            local[i].iov_len -= ret;
        }
    }

    return UCS_OK;
}

ucs_status_t uct_remapring_ep_put_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                        size_t iovcnt, uint64_t remote_addr,
                                        uct_rkey_t rkey,
                                        uct_completion_t *comp)
{
    uct_remapring_ep_t *ep = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    ucs_status_t status;

    status = uct_remapring_ep_rma(ep, iov, iovcnt, remote_addr, rkey, 1);
    if (status == UCS_OK) {
        UCT_TL_EP_STAT_OP(&ep->super, PUT, ZCOPY,
                          uct_iov_total_length(iov, iovcnt));
    }

    return status;
}

ucs_status_t uct_remapring_ep_get_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                        size_t iovcnt, uint64_t remote_addr,
                                        uct_rkey_t rkey,
                                        uct_completion_t *comp)
{
    uct_remapring_ep_t *ep = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    ucs_status_t status;

    status = uct_remapring_ep_rma(ep, iov, iovcnt, remote_addr, rkey, 0);
    if (status == UCS_OK) {
        UCT_TL_EP_STAT_OP(&ep->super, GET, ZCOPY,
                          uct_iov_total_length(iov, iovcnt));
    }

    return status;
}

/* Whether a record of @a length (SIZE_MAX: the largest) could go now;
 * reloads the released head. pending_add asks for the largest record: the
 * caller's send may need that much, and UCP retries a BUSY answer without
 * progressing, so a wrong BUSY locks two senders up */
static int uct_remapring_ep_can_send(uct_remapring_ep_t *ep, size_t length)
{
    if ((ep->wire == NULL) && (uct_remapring_ep_connect(ep) != UCS_OK)) {
        return 0;
    }

    if (length == SIZE_MAX) {
        length = uct_remapring_ring_writer_max_payload(&ep->writer);
    }

    if (uct_remapring_ring_writer_can_send(&ep->writer, length)) {
        return 1;
    }

    /* a receiver found gone lets the pending queue run into the error */
    return uct_remapring_ep_stalled(ep) != UCS_ERR_NO_RESOURCE;
}

static void uct_remapring_ep_block(uct_remapring_iface_t *iface,
                                   uct_remapring_ep_t *ep)
{
    if (!ep->blocked) {
        ep->blocked = 1;
        ucs_list_add_tail(&iface->tx.blocked, &ep->list);
    }
}

ucs_status_t uct_remapring_ep_pending_add(uct_ep_h tl_ep,
                                          uct_pending_req_t *req,
                                          unsigned flags)
{
    uct_remapring_ep_t *ep       = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    uct_remapring_iface_t *iface = ucs_derived_of(tl_ep->iface,
                                                  uct_remapring_iface_t);

    if (ucs_arbiter_group_is_empty(&ep->arb_group) && !ep->blocked &&
        (ep->status == UCS_OK) &&
        uct_remapring_ep_can_send(ep, SIZE_MAX)) {
        return UCS_ERR_BUSY;
    }

    uct_pending_req_arb_group_push(&ep->arb_group, req);
    /* dispatched once the ring has credit again */
    uct_remapring_ep_block(iface, ep);
    UCT_TL_EP_STAT_PEND(&ep->super);
    return UCS_OK;
}

static ucs_arbiter_cb_result_t
uct_remapring_ep_process_pending(ucs_arbiter_t *arbiter,
                                 ucs_arbiter_group_t *group,
                                 ucs_arbiter_elem_t *elem, void *arg)
{
    uct_remapring_iface_t *iface = arg;
    uct_remapring_ep_t *ep       = ucs_container_of(group, uct_remapring_ep_t,
                                                    arb_group);
    uct_pending_req_t *req       = ucs_container_of(elem, uct_pending_req_t,
                                                    priv);
    ucs_status_t status;

    status = req->func(req);
    if (status == UCS_OK) {
        return UCS_ARBITER_CB_RESULT_REMOVE_ELEM;
    } else if (status == UCS_INPROGRESS) {
        return UCS_ARBITER_CB_RESULT_NEXT_GROUP;
    }

    uct_remapring_ep_block(iface, ep);
    return UCS_ARBITER_CB_RESULT_DESCHED_GROUP;
}

unsigned uct_remapring_ep_progress_pending(uct_remapring_iface_t *iface)
{
    uct_remapring_ep_t *ep, *tmp;
    unsigned count = 0;

    if (ucs_likely(ucs_list_is_empty(&iface->tx.blocked))) {
        return 0;
    }

    ucs_list_for_each_safe(ep, tmp, &iface->tx.blocked, list) {
        if ((ep->status != UCS_OK) || uct_remapring_ep_can_send(ep, 0)) {
            ucs_list_del(&ep->list);
            ep->blocked = 0;
            ucs_arbiter_group_schedule(&iface->tx.arbiter, &ep->arb_group);
            ++count;
        }
    }

    if (count > 0) {
        ucs_arbiter_dispatch(&iface->tx.arbiter, 1,
                             uct_remapring_ep_process_pending, iface);
    }

    return count;
}

static ucs_arbiter_cb_result_t
uct_remapring_ep_purge_cb(ucs_arbiter_t *arbiter, ucs_arbiter_group_t *group,
                          ucs_arbiter_elem_t *elem, void *arg)
{
    uct_purge_cb_args_t *args = arg;
    uct_pending_req_t *req    = ucs_container_of(elem, uct_pending_req_t,
                                                 priv);

    if (args->cb != NULL) {
        args->cb(req, args->arg);
    } else {
        ucs_warn("remapring: ep %p cancelling user pending request %p",
                 ucs_container_of(group, uct_remapring_ep_t, arb_group), req);
    }

    return UCS_ARBITER_CB_RESULT_REMOVE_ELEM;
}

void uct_remapring_ep_pending_purge(uct_ep_h tl_ep,
                                    uct_pending_purge_callback_t cb,
                                    void *arg)
{
    uct_remapring_ep_t *ep       = ucs_derived_of(tl_ep, uct_remapring_ep_t);
    uct_remapring_iface_t *iface = ucs_derived_of(tl_ep->iface,
                                                  uct_remapring_iface_t);
    uct_purge_cb_args_t args     = {cb, arg};

    ucs_arbiter_group_purge(&iface->tx.arbiter, &ep->arb_group,
                            uct_remapring_ep_purge_cb, &args);
    if (ep->blocked) {
        ucs_list_del(&ep->list);
        ep->blocked = 0;
    }
}

ucs_status_t uct_remapring_ep_flush(uct_ep_h tl_ep, unsigned flags,
                                    uct_completion_t *comp)
{
    uct_remapring_ep_t *ep = ucs_derived_of(tl_ep, uct_remapring_ep_t);

    if (flags & UCT_FLUSH_FLAG_CANCEL) {
        return UCS_OK;
    }

    if (!ucs_arbiter_group_is_empty(&ep->arb_group)) {
        UCT_TL_EP_STAT_FLUSH_WAIT(&ep->super);
        return UCS_ERR_NO_RESOURCE;
    }

    UCT_TL_EP_STAT_FLUSH(&ep->super);
    return UCS_OK;
}

ucs_status_t uct_remapring_ep_check(uct_ep_h tl_ep, unsigned flags,
                                    uct_completion_t *comp)
{
    uct_remapring_ep_t *ep = ucs_derived_of(tl_ep, uct_remapring_ep_t);

    UCT_EP_KEEPALIVE_CHECK_PARAM(flags, comp);
    uct_ep_keepalive_check(tl_ep, &ep->keepalive, ep->pid, flags, comp);
    return UCS_OK;
}
