/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef REMAPRING_RING_COPY_H_
#define REMAPRING_RING_COPY_H_

/*
 * Copies: right-sized descriptors for small messages the upper layer may
 * keep.
 *
 * A small record is delivered out of a copy rather than in place: kept in
 * the ring, a 256-byte message would keep a page or a share of a fold page
 * (ring_fold.h) whose other parts random releases leave empty; copied into
 * the upper layer's own buffers, it costs what their size classes round it
 * to (UCP's default classes are 64 bytes and 1 KiB: some 1150 bytes for a
 * 256-byte message with UCP's headroom). A copy costs its size rounded to
 * the page's share: each page of copies holds elements of one size, n of
 * them, each a 16-byte multiple of at most page / n bytes, and a copy takes
 * the class with the most elements per page that still fits it.
 *
 * - Memory: a memfd of max_bytes, mapped whole, sparse: a page holds memory
 *   once written. A page whose elements are all free goes to a list of
 *   empty pages, reused the latest first. remapring_copy_trim(), which
 *   the receiver calls now and then (off the path of a release: a drain
 *   releases many one after another), punches out of the memfd the empty
 *   pages that were not needed since its last call (the fewest there were
 *   on the list since), past a few: a page punched and used again faults
 *   in again, some microseconds. The memfd's name shows the copies in
 *   /proc/<pid>/maps, and its size what they hold.
 *   So the memory of copies follows what is kept: a storm of kept messages
 *   costs its pages while it is kept, and a few pages after.
 * - An element's page, found from any address in it, says its class; an
 *   element is put back by any address inside it. The last open page of a
 *   class stays its class's when it empties.
 * - A copy goes into its class's spare element, taken in advance
 *   (remapring_copy_spare()); only if the upper layer keeps it is the
 *   spare used up (remapring_copy_keep()) and another taken next time.
 *   A message copied and released at once (delivered to a receive posted
 *   before it) costs the copy alone.
 * - Past max_bytes, remapring_copy_get() finds no element: the caller
 *   delivers as before copies (the upper layer copies).
 *
 * Not thread safe: serialised by the receiver, as the pool is.
 */

#include <ucs/sys/compiler_def.h>
#include <ucs/type/status.h>

#include <stddef.h>
#include <stdint.h>
#include <uct/ib/remapring/ring/ring_api.h>

/* the base a transport of ours in another module calls (ring_api.h) */
REMAPRING_API_BEGIN

BEGIN_C_DECLS


#define REMAPRING_COPY_ALIGN   16 /* elements' size and alignment */
#define REMAPRING_COPY_CLASSES 256 /* elements per page at most */
#define REMAPRING_COPY_KEEP    8 /* empty pages kept resident */
#define REMAPRING_COPY_NONE    UINT32_MAX


/**
 * A page of copies.
 */
typedef struct remapring_copy_page {
    uint16_t nelems; /* elements it holds: its class; 0 while unused */
    uint16_t nfree; /* of them free */
    uint16_t bump; /* elements handed out at least once */
    uint16_t free; /* first free element plus one (through the elements
                      themselves), or 0 */
    uint32_t prev; /* on its class's list of pages with free elements, or */
    uint32_t next; /* on the list of empty pages */
} remapring_copy_page_t;


/**
 * Copies of one receiver.
 */
typedef struct remapring_copies {
    int fd; /* the memfd, or -1 */
    char *base; /* its mapping, or NULL if there are no copies */
    size_t max_bytes;
    unsigned page_shift;
    uint32_t npages; /* pages handed out at least once (high water) */
    remapring_copy_page_t *pages; /* [max_bytes / page] */
    uint32_t open[REMAPRING_COPY_CLASSES + 1]; /* by elements per page:
                                                      pages with free
                                                      elements, or NONE */
    uint32_t empty; /* empty pages still resident, the latest first, or
                       NONE */
    uint32_t empty_tail;
    uint32_t nempty;
    uint32_t nempty_low; /* fewest empty pages since the last trim */
    uint32_t clean; /* empty pages given back, or NONE */
    uint64_t resident_pages; /* pages in use, or empty and resident */
    uint64_t nelems_used; /* elements handed out now */
    uint16_t class_of[REMAPRING_COPY_CLASSES + 1]; /* by size in
                                                         16-byte units: the
                                                         class, or 0 */
    uint16_t elem_size[REMAPRING_COPY_CLASSES + 1]; /* by class */
    uint32_t elem_recip[REMAPRING_COPY_CLASSES + 1]; /* by class:
                                                          2^32 / size,
                                                          rounded up */
    void *spare[REMAPRING_COPY_CLASSES + 1]; /* by class: an element
                                                   taken, the next copy's */
} remapring_copies_t;


/**
 * Set up copies of at most @a max_bytes (rounded down to pages; 0: none),
 * in a memfd named @a name. Nothing is backed until used.
 */
ucs_status_t remapring_copy_init(remapring_copies_t *copies, const char *name,
                                 size_t max_bytes);


/**
 * Unmap and close the copies. Elements still out are gone with them.
 */
void remapring_copy_cleanup(remapring_copies_t *copies);


/**
 * Elements per page of the class for @a size bytes, 0 if none fits it (a
 * size above a page, or 0).
 */
static inline unsigned
remapring_copy_class(const remapring_copies_t *copies, size_t size)
{
    size_t units = (size + REMAPRING_COPY_ALIGN - 1) / REMAPRING_COPY_ALIGN;

    return (units <= REMAPRING_COPY_CLASSES) ? copies->class_of[units] : 0;
}


/**
 * An element of at least @a size bytes, 16-byte aligned, or NULL (no
 * class fits, or max_bytes are in use).
 */
void *remapring_copy_get(remapring_copies_t *copies, size_t size);


/**
 * Take a spare element of class @a n (remapring_copy_spare()).
 */
void *remapring_copy_spare_get(remapring_copies_t *copies, unsigned n);


/**
 * The spare element of the class for @a size bytes, which stays the
 * class's until remapring_copy_keep(), or NULL (no class fits, or
 * max_bytes are in use); its class in *@a class_p.
 */
static UCS_F_ALWAYS_INLINE void *
remapring_copy_spare(remapring_copies_t *copies, size_t size, unsigned *class_p)
{
    unsigned n = remapring_copy_class(copies, size);

    *class_p = n;
    if (ucs_likely(copies->spare[n] != NULL)) {
        return copies->spare[n];
    }

    return (n == 0) ? NULL : remapring_copy_spare_get(copies, n);
}


/**
 * The spare element of class @a n is kept by the upper layer: it is in use
 * until put back (remapring_copy_put()).
 */
static UCS_F_ALWAYS_INLINE void
remapring_copy_keep(remapring_copies_t *copies, unsigned n)
{
    copies->spare[n] = NULL;
}


/**
 * Put back the element that @a addr lies in.
 */
void remapring_copy_put(remapring_copies_t *copies, void *addr);


/**
 * Now and then: put the spare elements back, and give back the empty pages
 * past the few kept resident (a class's last page too, once empty).
 */
void remapring_copy_trim(remapring_copies_t *copies);


/**
 * Bytes that copies hold: pages in use (spare elements are), and empty ones
 * still resident.
 */
static inline uint64_t remapring_copy_resident(const remapring_copies_t *copies)
{
    return copies->resident_pages << copies->page_shift;
}

END_C_DECLS

REMAPRING_API_END

#endif
