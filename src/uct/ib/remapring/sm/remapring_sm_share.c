/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

/*
 * Shared copies: a put or get of the shared-memory transport copied by both
 * processes at once.
 *
 * A get_zcopy moves its bytes with process_vm_readv, one core's copy, with
 * the kernel pinning every page of the other side as it goes; meanwhile the
 * process that owns the other side usually spins in its own progress (an
 * MPI rendezvous sender waits for the receiver's get to finish). So the
 * caller (the requester: the connection's sender) splits a long operation
 * into chunks and asks the other process (the helper: the connection's
 * receiver) to take some: a control record in the helper's ring names the
 * operation, and both take chunks from one word in the connection's slot
 * of the helper's control area (uct_remapring_share_t), which both map.
 * The helper copies each chunk it takes between its own memory and the
 * requester's with process_vm_writev/readv, so both cores copy and both
 * pin only the pages of their half. A helper that does not run (busy,
 * asleep, gone) takes no chunk, and the requester copies them all; nothing
 * waits for it.
 *
 * The words, for operation number gen of the connection (the requester
 * counts them):
 *   claim  gen << 32 | next chunk. The requester sets it (release) before
 *          its record is sent, takes chunks by fetch-and-add, and closes it
 *          when it has none left to take, by exchange with gen << 32 |
 *          nchunks: the value it replaces says how many chunks were taken in
 *          all, so how many the helper took. The helper takes a chunk by
 *          compare-and-swap, only while gen is its record's and the next
 *          chunk is below nchunks: a late record, or one of an operation
 *          that finished, takes nothing.
 *   done   chunks the helper finished (release, after its copy returned);
 *          reset by the requester before claim is set. The requester
 *          returns only once done equals what the helper took, so no write
 *          of the helper's lands in its memory after the operation
 *          completed.
 *   back   1 + a chunk the helper took and could not copy (it stops
 *          helping this operation then); the requester copies it.
 * The requester waits only for chunks the helper is copying; if the helper
 * process exits meanwhile, the operation fails with the connection.
 *
 * Sharing pays only if the helper's chunks go about as fast as the
 * requester's. They do not always: on one machine, with the two cores on
 * different dies, UCP tag_bw of 16 MiB between buffers from malloc() that
 * nobody had written moved 7 GB/s shared and 16-23 alone (the helper's
 * process_vm_writev reads its own buffer in user space, there the zero
 * page at every address, at a fifth of the speed at which the requester's
 * process_vm_readv reads it in the kernel; posix+cma's put has the same
 * cost), while at 4 MiB sharing moved 28-32 against 21. Written buffers
 * lost at no size there, but a buffer may be slow to push for any reason.
 * So the requester times what it moves, per
 * size class (the log2 of the length): each shared operation, and now and
 * then a few it copies alone, and keeps a moving average of each. While
 * the alone ones move clearly more (uct_remapring_share_judge()), the next
 * operations of that class go alone, a few at first, twice as many after
 * each loss in a row; the first shared one after them judges again, so
 * sharing comes back when it pays again. Alone ones are measured when a
 * shared one took longer than the requester's own chunks' rate would have
 * for the whole length (its own half, in its own cache, is a poor guide to
 * a copy of all of it: at 4 MiB shared operations took longer than that
 * and still moved more than alone ones), and again after 256 shared ones
 * (each time three operations go at the alone rate).
 *
 * What the helper copies is named by the requester: its own memory by the
 * requester's address, and the helper's memory by an address the requester
 * took from the helper's key. The helper copies out of or into its own
 * memory only what the requester could reach itself with process_vm_readv/
 * writev (the same permission check, on the same two processes), so a
 * request asks nothing of the helper that the requester could not do on its
 * own; an address not mapped fails that chunk (back), it is never touched
 * outside the system call.
 */

#include "remapring_sm.h"

#include <uct/ib/remapring/ring/ring_wire.h>

#include <ucs/debug/log.h>
#include <ucs/time/time.h>

#include <errno.h>
#include <sched.h>

#include <string.h>
#include <sys/uio.h>


/** Spins of a requester waiting for the helper's chunks between two looks
 *  at whether the helper process lives */
#define UCT_REMAPRING_SHARE_CHECK_SPINS 65536

/** ... and before each yield of the core, to a helper that may share it */
#define UCT_REMAPRING_SHARE_YIELD_SPINS 16384

/** Seconds a requester waits for chunks the helper took before it fails the
 *  operation and the connection: a helper stopped (SIGSTOP, a debugger)
 *  between taking a chunk and its system call, and resumed later, still
 *  copies that chunk then */
#define UCT_REMAPRING_SHARE_TIMEOUT 10

/** Operations of a size class that go alone after a first loss, and at most
 *  after losses in a row */
#define UCT_REMAPRING_SHARE_BACKOFF_MIN 4u
#define UCT_REMAPRING_SHARE_BACKOFF_MAX 1024u

/** Shared operations of a class after which its alone figure is measured
 *  again, and how many go alone to measure it: the first one after shared
 *  ones finds the other half's pages cold (4 MiB alone: 0.44 bytes a tick
 *  the first time, 6-9 after) and is not counted */
#define UCT_REMAPRING_SHARE_ALONE_AGE   256u
#define UCT_REMAPRING_SHARE_PROBE       3u

/** How much more the alone operations of a class must move (moving
 *  averages of both, each operation's rate weighing a quarter) for sharing
 *  to lose: single operations' rates spread over 2x and more either way
 *  (1 MiB ping-pong, shared 1.8-16 bytes a tick, alone 4.7-13), and a
 *  loss costs the shared gain where there is one (with 1.25, UCP am_bw at
 *  4 MiB went alone in one run, 29 GB/s against 32 shared); where sharing
 *  lost, alone ones moved 2.5-3 times as much */
#define UCT_REMAPRING_SHARE_MARGIN      1.5

/** Shortest and longest chunk. An operation is cut in two halves, each
 *  process copying one with a single system call, up to halves of the
 *  longest chunk; longer ones in chunks of that size (at most
 *  UCT_REMAPRING_SHARE_MAX_CHUNKS of them). Shorter chunks go to whichever
 *  process takes each first, and their lines are then often in the other
 *  core's caches: the copy itself ran at half the speed (perf), UCP tag_bw
 *  on two cores, medians of three runs, halves against 256 KiB chunks:
 *  1 MiB 38 against 28 GB/s, 4 MiB 71 against 44, 16 MiB 56 against 25; at
 *  64 MiB, out of cache, any chunk from 1 MiB on moved about 24 GB/s, and
 *  halves of 32 MiB varied from 8 to 31 (docs/performance.md). A helper
 *  that starts late leaves its half to the requester, which takes every
 *  chunk still free. */
#define UCT_REMAPRING_SHARE_CHUNK_MIN  (64 * UCS_KBYTE)
#define UCT_REMAPRING_SHARE_CHUNK_MAX  (8 * UCS_MBYTE)


static UCS_F_ALWAYS_INLINE uint64_t uct_remapring_share_word(uint32_t gen,
                                                             uint32_t chunk)
{
    return ((uint64_t)gen << 32) | chunk;
}

/* The chunk size for an operation of @a length bytes: two halves, up to
 * the longest chunk, at most the chunk count */
static size_t uct_remapring_share_chunk(size_t length)
{
    size_t chunk = ucs_min(length / 2, UCT_REMAPRING_SHARE_CHUNK_MAX);

    chunk = ucs_max(chunk,
                    ucs_div_round_up(length, UCT_REMAPRING_SHARE_MAX_CHUNKS));
    chunk = ucs_max(chunk, UCT_REMAPRING_SHARE_CHUNK_MIN);
    return ucs_align_up_pow2(chunk, UCS_KBYTE * 4);
}

/* The bytes of chunk @a index of @a req: the last may be short */
static size_t uct_remapring_share_chunk_length(
        const uct_remapring_share_req_t *req, uint32_t index)
{
    return ucs_min(req->chunk, req->length - (size_t)index * req->chunk);
}

/* Copy chunk @a index of the operation @a req names between this process's
 * side and process @a pid's; 0 or the errno. @a helper: this process is
 * the helper. */
static int uct_remapring_share_copy(const uct_remapring_share_req_t *req,
                                    uint32_t index, pid_t pid, void *own_base,
                                    int helper)
{
    size_t offset       = (size_t)index * req->chunk;
    size_t length       = uct_remapring_share_chunk_length(req, index);
    uint64_t other_base = helper ? req->requester_addr : req->helper_addr;
    struct iovec local, remote;
    int write;

    local.iov_base  = UCS_PTR_BYTE_OFFSET(own_base, offset);
    local.iov_len   = length;
    remote.iov_base = (void *)(uintptr_t)(other_base + offset);
    remote.iov_len  = length;
    /* a get: the helper writes, the requester reads */
    write = helper ? req->helper_writes : !req->helper_writes;
    return remapring_proc_vm_xfer(pid, &local, 1, &remote, 1, length, write);
}

/* The requester copies every chunk it can take; the number it copied, the
 * bytes in them (@a bytes_p), and the errno of the one that failed (then it
 * stops) */
static unsigned uct_remapring_share_take(uct_remapring_share_t *share,
                                         const uct_remapring_share_req_t *req,
                                         pid_t pid, void *local, int *err_p,
                                         size_t *bytes_p)
{
    unsigned mine = 0;
    uint32_t index;

    for (;;) {
        index = (uint32_t)__atomic_fetch_add(&share->claim, 1,
                                             __ATOMIC_ACQ_REL);
        if (index >= req->nchunks) {
            return mine;
        }

        *err_p = uct_remapring_share_copy(req, index, pid, local, 0);
        if (*err_p != 0) {
            return mine;
        }

        *bytes_p += uct_remapring_share_chunk_length(req, index);
        ++mine;
    }
}

/* @a avg moved a quarter of the way to @a rate; @a rate if @a avg is none */
static double uct_remapring_share_average(double avg, double rate)
{
    return (avg == 0) ? rate : (avg + (rate - avg) / 4);
}

int uct_remapring_share_judge(uct_remapring_share_class_t *cls,
                              ucs_time_t own, ucs_time_t total,
                              size_t own_bytes, size_t length)
{
    if (!cls->shared_warm) {
        /* the class's first shared one, or the first after a run alone,
         * finds the other half's pages cold: not counted */
        cls->shared_warm = 1;
        return 0;
    }

    cls->shared_rate = uct_remapring_share_average(
            cls->shared_rate,
            (double)length / ucs_max(total, (ucs_time_t)1));
    if ((cls->alone_rate == 0) ||
        (++cls->since_alone > UCT_REMAPRING_SHARE_ALONE_AGE)) {
        /* nothing recent to compare with: measure some alone if this one
         * took longer than our own rate over the whole length */
        if ((double)total * own_bytes > (double)own * length) {
            cls->skip  = UCT_REMAPRING_SHARE_PROBE;
            cls->fresh = 1;
        }
        return 0;
    }

    if (cls->shared_rate * UCT_REMAPRING_SHARE_MARGIN >= cls->alone_rate) {
        cls->backoff = 0;
        return 0;
    }

    cls->backoff = (cls->backoff == 0) ?
                           UCT_REMAPRING_SHARE_BACKOFF_MIN :
                           ucs_min(cls->backoff * 2,
                                   UCT_REMAPRING_SHARE_BACKOFF_MAX);
    cls->skip    = cls->backoff;
    cls->fresh   = 1;
    return 1;
}

void uct_remapring_share_alone_done(uct_remapring_share_class_t *cls,
                                    ucs_time_t ticks, size_t length)
{
    cls->since_alone = 0;
    if (cls->skip == 0) {
        cls->shared_warm = 0; /* the run ends */
    }

    if (cls->fresh) {
        /* the first of a run after shared ones finds the other half's
         * pages cold: not counted */
        cls->fresh = 0;
        return;
    }

    cls->alone_rate = uct_remapring_share_average(
            cls->alone_rate, (double)length / ucs_max(ticks, (ucs_time_t)1));
}

/* Wait until the helper finished the @a taken chunks it took: 0, ESRCH if
 * its process exited meanwhile, ETIMEDOUT past UCT_REMAPRING_SHARE_TIMEOUT
 * (logged) */
static int uct_remapring_share_wait(uct_remapring_sm_peer_t *peer,
                                    uct_remapring_share_t *share,
                                    uint64_t taken)
{
    double start   = 0;
    unsigned spins = 0;

    while (__atomic_load_n(&share->done, __ATOMIC_ACQUIRE) < taken) {
        if (++spins < UCT_REMAPRING_SHARE_CHECK_SPINS) {
            if ((spins % UCT_REMAPRING_SHARE_YIELD_SPINS) == 0) {
                /* the helper may wait for this core */
                sched_yield();
            }
            continue;
        }

        spins = 0;
        if (uct_remapring_proc_exited(&peer->remote.proc)) {
            return ESRCH; /* its chunk may be half copied */
        }

        if (start == 0) {
            start = ucs_get_accurate_time();
        } else if (ucs_get_accurate_time() - start >
                   UCT_REMAPRING_SHARE_TIMEOUT) {
            ucs_error("%s: the receiver did not finish %" PRIu64 " shared "
                      "chunks in %d s (stopped, or not following the "
                      "protocol)",
                      peer->super.name, taken - share->done,
                      UCT_REMAPRING_SHARE_TIMEOUT);
            return ETIMEDOUT;
        }
    }

    return 0;
}

/* Ask the receiver to share the copy @a req names: its words first, then
 * the record; false if the record could not be sent now (no credit, a
 * connection not ready or with sends waiting) */
static int uct_remapring_share_ask(uct_remapring_sm_peer_t *peer,
                                   uct_remapring_share_t *share,
                                   const uct_remapring_share_req_t *req)
{
    struct iovec iov = {.iov_base = (void *)req, .iov_len = sizeof(*req)};

    if ((peer->super.wire == NULL) || (peer->super.backlog != NULL) ||
        !ucs_list_is_empty(&peer->super.iface->tx.blocked)) {
        return 0;
    }

    share->done = 0;
    share->back = 0;
    __atomic_store_n(&share->claim, uct_remapring_share_word(req->gen, 0),
                     __ATOMIC_RELEASE);
    if (remapring_ring_writer_send(&peer->super.writer,
                                   UCT_REMAPRING_AM_ID_CONTROL, 0, &iov,
                                   1) != UCS_OK) {
        return 0;
    }

    uct_remapring_remote_ring_bell(&peer->remote);
    return 1;
}

int uct_remapring_sm_share_rma(uct_remapring_sm_peer_t *peer, void *local,
                               size_t length, uint64_t remote_addr, int write)
{
    uct_remapring_sm_iface_t *iface = ucs_derived_of(peer->super.iface,
                                                     uct_remapring_sm_iface_t);
    uct_remapring_share_t *share    = &peer->remote.conn->share;
    pid_t pid                       = peer->remote.proc.pid;
    size_t chunk                    = uct_remapring_share_chunk(length);
    uct_remapring_share_class_t *cls =
            &iface->share.cls[ucs_ilog2(length)];
    ucs_time_t start, own_done;
    uct_remapring_share_req_t req;
    size_t own_bytes = 0;
    unsigned mine, taken;
    int err = 0, wait_err;
    uint32_t last;
    uint64_t back;

    if (cls->skip > 0) {
        /* sharing lost at this size lately, or its alone figure is due */
        struct iovec local_iov = {.iov_base = local, .iov_len = length};
        struct iovec remote    = {.iov_base = (void *)(uintptr_t)remote_addr,
                                  .iov_len  = length};

        --cls->skip;
        ++iface->share.alone;
        start = ucs_get_time();
        err   = remapring_proc_vm_xfer(pid, &local_iov, 1, &remote, 1, length,
                                       write);
        if (err == 0) {
            uct_remapring_share_alone_done(cls, ucs_get_time() - start,
                                           length);
        }
        return err;
    }

    req.kind           = UCT_REMAPRING_CONTROL_SHARE;
    req.helper_writes  = !write;
    req.reserved       = 0;
    req.gen            = ++peer->share_gen;
    req.nchunks        = ucs_div_round_up(length, chunk);
    req.chunk          = chunk;
    req.length         = length;
    req.helper_addr    = remote_addr;
    req.requester_addr = (uintptr_t)local;

    /* past 64 chunks of 4 GiB, or when the request cannot be sent now */
    if ((chunk > UINT32_MAX) || !uct_remapring_share_ask(peer, share, &req)) {
        return -1;
    }

    ++iface->share.asked;
    start    = ucs_get_time();
    mine     = uct_remapring_share_take(share, &req, pid, local, &err,
                                        &own_bytes);
    own_done = ucs_get_time();
    /* close the operation: what claim held says how many were taken */
    last = ucs_min((uint32_t)__atomic_exchange_n(
                           &share->claim,
                           uct_remapring_share_word(req.gen, req.nchunks),
                           __ATOMIC_ACQ_REL),
                   req.nchunks);
    if (last < mine + (err != 0)) {
        ucs_error("%s: shared copy word rewritten (%u chunks taken, %u of "
                  "them ours)",
                  peer->super.name, last, mine + (err != 0));
        return EPROTO;
    }

    taken    = last - mine - (err != 0);
    wait_err = uct_remapring_share_wait(peer, share, taken);
    if (wait_err != 0) {
        return wait_err;
    }

    if ((taken > 0) && (own_bytes > 0) && (err == 0) &&
        uct_remapring_share_judge(cls, own_done - start,
                                  ucs_get_time() - start, own_bytes,
                                  length)) {
        ucs_trace("%s: a shared copy of %zu bytes moved less than one "
                  "copied alone; the next %u of this size go alone",
                  peer->super.name, length, cls->skip);
        ++iface->share.lost;
    }

    iface->share.given += taken;
    back = __atomic_load_n(&share->back, __ATOMIC_RELAXED);
    if ((err == 0) && (back != 0)) {
        if (back > req.nchunks) {
            ucs_error("%s: the receiver gave back chunk %" PRIu64 " of %u",
                      peer->super.name, back - 1, req.nchunks);
            return EPROTO;
        }

        /* the helper could not copy this one; it is ours to try */
        err = uct_remapring_share_copy(&req, back - 1, pid, local, 0);
    }

    return err;
}

ucs_status_t uct_remapring_sm_rx_control(uct_remapring_iface_t *tl_iface,
                                         remapring_ring_t *ring,
                                         const void *payload, size_t length)
{
    uct_remapring_sm_iface_t *iface = ucs_derived_of(tl_iface,
                                                     uct_remapring_sm_iface_t);
    unsigned index = ucs_container_of(ring->ctl, uct_remapring_conn_t, ring) -
                     iface->rx.ctl.conns;
    uct_remapring_share_t *share = &iface->rx.ctl.conns[index].share;
    pid_t pid                    = iface->rx.conns[index].sender.pid;
    uct_remapring_share_req_t req;
    uint64_t word;
    int err;

    if (length != sizeof(req)) {
        ucs_error("iface %p connection %u: control record of %zu bytes, "
                  "expected %zu",
                  iface, index, length, sizeof(req));
        return UCS_ERR_INVALID_PARAM;
    }

    memcpy(&req, payload, sizeof(req));
    if ((req.kind != UCT_REMAPRING_CONTROL_SHARE) || (req.chunk == 0) ||
        (req.nchunks == 0) || (req.nchunks > UCT_REMAPRING_SHARE_MAX_CHUNKS) ||
        (req.nchunks != ucs_div_round_up(req.length, req.chunk)) ||
        (req.helper_writes > 1)) {
        ucs_error("iface %p connection %u: bad share request (kind %u, "
                  "%" PRIu64 " bytes in %u chunks of %u)",
                  iface, index, req.kind, req.length, req.nchunks, req.chunk);
        return UCS_ERR_INVALID_PARAM;
    }

    if ((iface->share.min == SIZE_MAX) || !remapring_ring_is_empty(ring)) {
        /* sharing is off here; or more of that sender's records wait
         * behind its request (traffic both ways, its own messages for us
         * to take: both cores are busy, and helping would make it wait
         * for our chunks while it has work): the requester copies all */
        return UCS_OK;
    }

    for (;;) {
        word = __atomic_load_n(&share->claim, __ATOMIC_ACQUIRE);
        if (((word >> 32) != req.gen) || ((uint32_t)word >= req.nchunks)) {
            return UCS_OK; /* finished, or taken */
        }

        if (!__atomic_compare_exchange_n(&share->claim, &word, word + 1, 0,
                                         __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
            continue;
        }

        err = uct_remapring_share_copy(&req, (uint32_t)word, pid,
                                       (void *)(uintptr_t)req.helper_addr, 1);
        if (err != 0) {
            ucs_debug("iface %p connection %u: shared chunk %u failed: %s; "
                      "given back",
                      iface, index, (uint32_t)word, strerror(err));
            share->back = (uint32_t)word + 1;
            __atomic_fetch_add(&share->done, 1, __ATOMIC_RELEASE);
            return UCS_OK;
        }

        ++iface->share.helped;
        __atomic_fetch_add(&share->done, 1, __ATOMIC_RELEASE);
    }
}
