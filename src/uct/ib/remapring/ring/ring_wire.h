/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef REMAPRING_RING_WIRE_H_
#define REMAPRING_RING_WIRE_H_

/*
 * A wire is how a ring writer puts bytes into the reader's ring view and
 * exchanges the control words. The ring protocol (ring.h) is the same for
 * every wire; a wire only knows:
 *
 * - write: place segments at ring offsets. Ring offset o lands at byte
 *   (o & (window_size - 1)) of the reader's ring view. A segment never
 *   crosses the end of the window (records never cross a slot). Segments
 *   are written in order; a COMMIT segment is a record header, and a wire
 *   that can store in order (can_stamp) stores its first 8 bytes, the stamp,
 *   last, with release: that is the record's commit (STAMP). When write
 *   returns, the bytes are in the reader's memory or the write failed.
 * - publish_tail: make every record below tail visible to the reader (TAIL
 *   commit). It is ordered after the bytes it covers (store-release, or an
 *   RDMA write after the data on the same QP), never implied by the order
 *   of bytes inside one write.
 * - limit: the reader's last published limit (load-acquire); the writer may
 *   write below it. stalled: the writer found too little below it, which
 *   the reader takes as a request for a larger grant.
 *
 * A wire that stores into the reader's blocks mapped in the writer (shm)
 * also shows them (direct), so that the writer stores a record itself,
 * without a call through ops; it stores the same bytes in the same
 * order as write, the stamp last with release.
 *
 * A wire is used by one writer thread at a time.
 */

#include <ucs/sys/compiler_def.h>
#include <ucs/type/status.h>

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#include <string.h>
#include <sys/types.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

BEGIN_C_DECLS


/* Most segments one write may carry: PAD header, record header, payload */
#define REMAPRING_WIRE_MAX_SEGS 18


typedef struct remapring_wire remapring_wire_t;
typedef struct remapring_ring_ctl remapring_ring_ctl_t;


/**
 * One piece of a write: @a length bytes from @a buffer to ring offset
 * @a offset.
 */
typedef struct remapring_wire_seg {
    uint64_t offset; /* ring offset of the destination */
    const void *buffer; /* local source */
    uint32_t length;
    uint32_t commit; /* a record header: its first 8 bytes go last */
} remapring_wire_seg_t;


/**
 * Wire operations.
 */
typedef struct remapring_wire_ops {
    /** Write segments into the reader's ring view. */
    ucs_status_t (*write)(remapring_wire_t *wire,
                          const remapring_wire_seg_t *segs, unsigned nsegs);
    /** Publish the tail after the bytes below it were written. */
    void (*publish_tail)(remapring_wire_t *wire, uint64_t tail);
    /** Read the reader's limit. */
    uint64_t (*limit)(remapring_wire_t *wire);
    /** Tell the reader the writer ran out of credit (the stalls word). */
    void (*stalled)(remapring_wire_t *wire);
    /** The number of the reader's last request to give back credit (the
     *  reclaim word, load-acquired); NULL if the wire carries none. */
    uint64_t (*reclaim)(remapring_wire_t *wire);
    /** Answer request @a seq: the writer keeps below @a bound from now on
     *  (bound, then the yielded word with release). */
    void (*yield)(remapring_wire_t *wire, uint64_t seq, uint64_t bound);
    /** Free the wire. */
    void (*destroy)(remapring_wire_t *wire);
} remapring_wire_ops_t;


/**
 * The reader's blocks as a wire that stores into them sees them: block b is
 * at base + (b << block_shift), the block under slot s is slot_table[s]
 * (the reader writes it, the writer loads it relaxed: a slot is credited
 * with release after its entry changed), and blocks below file_blocks are
 * in the reader's memfd. The writer's direct path
 * (remapring_ring_writer_direct_begin) stores there itself; a block at
 * or past file_blocks sends it the general way (write), which looks again.
 */
typedef struct remapring_wire_direct {
    char *base; /* NULL: the wire has no direct stores */
    const uint32_t *slot_table;
    uint32_t file_blocks;
    unsigned block_shift;
} remapring_wire_direct_t;


/**
 * Wire base; concrete wires embed it first.
 */
struct remapring_wire {
    const remapring_wire_ops_t *ops;
    size_t window_size; /* W, a power of two */
    int can_stamp; /* stores in order: STAMP commit works */
    remapring_wire_direct_t direct; /* base NULL unless the writer
                                           stores into the reader's blocks
                                           itself (shm) */
};


/**
 * Position in the ring view of ring offset @a offset.
 */
static inline size_t
remapring_wire_view_pos(const remapring_wire_t *wire, uint64_t offset)
{
    return (size_t)(offset & (wire->window_size - 1));
}


/**
 * Write segments; writer side.
 */
static inline ucs_status_t
remapring_wire_write(remapring_wire_t *wire, const remapring_wire_seg_t *segs,
                     unsigned nsegs)
{
    return wire->ops->write(wire, segs, nsegs);
}


/**
 * Publish the tail; writer side, after remapring_wire_write() returned
 * UCS_OK for every byte below @a tail.
 */
static inline void
remapring_wire_publish_tail(remapring_wire_t *wire, uint64_t tail)
{
    wire->ops->publish_tail(wire, tail);
}


/**
 * Read the reader's limit; writer side.
 */
static inline uint64_t remapring_wire_limit(remapring_wire_t *wire)
{
    return wire->ops->limit(wire);
}


/**
 * Tell the reader the writer ran out of credit; writer side.
 */
static inline void remapring_wire_stalled(remapring_wire_t *wire)
{
    wire->ops->stalled(wire);
}


/**
 * The stalls word of the ring control words @a ctl: one more (the writer
 * alone writes it). For wires that see the control words in memory.
 */
void remapring_wire_ctl_stalled(remapring_ring_ctl_t *ctl);


/**
 * The reclaim word of @a ctl, load-acquired; and the answer to it (bound,
 * then yielded with release). For wires that see the control words in
 * memory.
 */
uint64_t remapring_wire_ctl_reclaim(remapring_ring_ctl_t *ctl);
void remapring_wire_ctl_yield(remapring_ring_ctl_t *ctl, uint64_t seq,
                              uint64_t bound);


/* Copies into the reader's memory of at least this many bytes that land
 * just past their source take remapring_wire_copy_apart() */
#define REMAPRING_WIRE_COPY_APART_MIN 2048


/**
 * Copy @a length bytes to @a dest with non-temporal stores, then a store
 * fence: the stores that follow (a record's stamp, the tail) are ordered
 * after them. See remapring_wire_copy().
 */
static inline void
remapring_wire_copy_apart(void *dest, const void *src, size_t length)
{
#if defined(__x86_64__)
    char *d       = (char *)dest;
    const char *s = (const char *)src;
    size_t head   = (-(uintptr_t)d) & 63;
    __m128i v0, v1, v2, v3;

    head = (head < length) ? head : length;
    memcpy(d, s, head);
    d += head;
    s += head;
    length -= head;
    for (; length >= 64; d += 64, s += 64, length -= 64) {
        v0 = _mm_loadu_si128((const __m128i *)s);
        v1 = _mm_loadu_si128((const __m128i *)(s + 16));
        v2 = _mm_loadu_si128((const __m128i *)(s + 32));
        v3 = _mm_loadu_si128((const __m128i *)(s + 48));
        _mm_stream_si128((__m128i *)d, v0);
        _mm_stream_si128((__m128i *)(d + 16), v1);
        _mm_stream_si128((__m128i *)(d + 32), v2);
        _mm_stream_si128((__m128i *)(d + 48), v3);
    }
    _mm_sfence();
    memcpy(d, s, length);
#else
    memcpy(dest, src, length);
#endif
}


/**
 * Copy @a length bytes of the writer's at @a src into the reader's memory at
 * @a dest: memcpy, except where @a dest is 1 to 63 bytes past @a src modulo
 * a page (x86-64, at least REMAPRING_WIRE_COPY_APART_MIN bytes). There each
 * load of the source matches, on the 12 address bits the CPU compares, a
 * store it has just queued to the destination, and waits for it; with the
 * destination's lines in the reader's cache each store waits for its line,
 * and the copy for all of them (and glibc's rep movsb, from about 2 KiB,
 * falls back to a slow way at such a distance). A source at page offset
 * 0x40 under the first record of a slot (payload at 0x68) is one.
 * Between the two cores of the test machine (contrib/bench/copy_bench.c,
 * one way, memcpy 40 bytes past against 104 past): 4 KiB 1.46 against
 * 0.92 us, 64 KiB 12.0 against 5.1, 128 KiB 20.0 against 9.4; this copy 40
 * past: 1.05, 5.1 and 9.0. Writer side.
 */
static inline void
remapring_wire_copy(void *dest, const void *src, size_t length)
{
#if defined(__x86_64__)
    if (ucs_unlikely((length >= REMAPRING_WIRE_COPY_APART_MIN) &&
                     ((((uintptr_t)dest - (uintptr_t)src) & 4095) - 1 < 63))) {
        remapring_wire_copy_apart(dest, src, length);
        return;
    }
#endif
    memcpy(dest, src, length);
}


/**
 * Copy one segment to @a dest, a COMMIT segment's stamp last with release
 * (dest is 8-byte aligned: records start on 64-byte boundaries): the write
 * of the in-order wires (local, shm).
 */
static inline void
remapring_wire_copy_seg(void *dest, const remapring_wire_seg_t *seg)
{
    uint64_t stamp;

    if (!seg->commit) {
        remapring_wire_copy(dest, seg->buffer, seg->length);
        return;
    }

    memcpy((char *)dest + sizeof(stamp),
           (const char *)seg->buffer + sizeof(stamp),
           seg->length - sizeof(stamp));
    memcpy(&stamp, seg->buffer, sizeof(stamp));
    __atomic_store_n((uint64_t *)dest, stamp, __ATOMIC_RELEASE);
}


/**
 * Destroy a wire.
 */
static inline void remapring_wire_destroy(remapring_wire_t *wire)
{
    wire->ops->destroy(wire);
}


/**
 * In-process wire: memcpy into a ring view mapped in this process, control
 * words in @a ctl. For tests and the benchmark; the writer may run in
 * another thread than the reader.
 *
 * @param [in]  view         Reader's ring view.
 * @param [in]  window_size  Size of the ring view.
 * @param [in]  ctl          Ring control area.
 * @param [out] wire_p       New wire.
 */
ucs_status_t remapring_wire_local_create(void *view, size_t window_size,
                                         remapring_ring_ctl_t *ctl,
                                         remapring_wire_t **wire_p);


/**
 * Cross-memory-attach wire: process_vm_writev() into the ring view of
 * process @a pid at @a remote_view. The kernel resolves the address through
 * the reader's page tables at the time of each write, so a block remapped
 * under a slot is seen by the next write, as an RDMA WRITE to an ODP region.
 * Control words live in @a ctl, memory shared by both processes.
 *
 * Errors of write: UCS_ERR_CONNECTION_RESET if the reader is gone (ESRCH),
 * UCS_ERR_INVALID_ADDR if the ring view is not mapped there (EFAULT),
 * UCS_ERR_UNSUPPORTED if the kernel denies access (EPERM), UCS_ERR_IO_ERROR
 * otherwise.
 *
 * @param [in]  pid          Reader process.
 * @param [in]  remote_view  Reader's ring view, in its address space.
 * @param [in]  window_size  Size of the ring view.
 * @param [in]  ctl          Ring control area, mapped in this process.
 * @param [out] wire_p       New wire.
 */
ucs_status_t
remapring_wire_cma_create(pid_t pid, uint64_t remote_view, size_t window_size,
                          remapring_ring_ctl_t *ctl, remapring_wire_t **wire_p);

/**
 * Move @a length bytes between @a local and @a remote, in process @a pid's
 * address space (to it if @a write, else from it), with process_vm_writev
 * or process_vm_readv: the one loop of the cma wire and of the
 * shared-memory transport's put and get. A call moves what it can; the rest
 * is moved by the next one, the pieces advanced on both sides, which need
 * not be cut alike. EINTR is retried. The arrays are consumed.
 *
 * @return 0, or the errno of the call that failed (EFAULT for one that
 *         moved nothing, which is where an unmapped page stops it).
 */
int remapring_proc_vm_xfer(pid_t pid, struct iovec *local, size_t nlocal,
                           struct iovec *remote, size_t nremote, size_t length,
                           int write);

/**
 * Shared-memory wire: the writer maps the reader's pool (@a pool_fd, opened
 * through /proc/<pid>/fd/<n>) and copies each segment into the block the
 * reader's shared slot table names for its slot; no system call per
 * message. Entries of the table that name no block of the pool are refused
 * with UCS_ERR_INVALID_ADDR.
 *
 * @param [in]  pool_fd      Reader's pool memfd, sealed as the pool seals
 *                           it (else UCS_ERR_UNSUPPORTED); the wire maps it
 *                           and keeps a copy, the caller keeps (and may
 *                           close) this fd.
 * @param [in]  block_size   Reader's block size B.
 * @param [in]  pool_blocks  Largest number of blocks the pool may have.
 * @param [in]  slot_table   window_size / B words, written by the reader.
 * @param [in]  window_size  Size of the ring window.
 * @param [in]  ctl          Ring control area, mapped in this process.
 * @param [out] wire_p       New wire.
 */
ucs_status_t
remapring_wire_shm_create(int pool_fd, size_t block_size, uint32_t pool_blocks,
                          const uint32_t *slot_table, size_t window_size,
                          remapring_ring_ctl_t *ctl, remapring_wire_t **wire_p);


END_C_DECLS

#endif
