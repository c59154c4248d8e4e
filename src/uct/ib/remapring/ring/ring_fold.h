/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef REMAPRING_RING_FOLD_H_
#define REMAPRING_RING_FOLD_H_

/*
 * Folding: the partly used pages of held records, shared.
 *
 * A detached block keeps the pages its held records touch (ring_pool.h). A
 * record of 4 KiB and a header touches two pages, a 256-byte one a whole
 * page: with 1 % of the messages held at random, a held record keeps twice
 * or sixteen times its payload. Folding gives those bytes back. The used
 * part of a partly used page is written (pwrite) into a page of a second
 * memfd (the fold memfd), at the same offsets, and the CPU-view page is
 * mapped onto that page (one mmap(MAP_FIXED) of one page). CPU-view pages
 * of different records, of any blocks, whose used parts do not overlap
 * share one fold page. The addresses the upper layer holds stay valid and
 * keep their contents; the pool memfd's page under them is then punched.
 * The fold memfd has no mapping of its own: only CPU-view pages map it.
 *
 * - A page is cut into 64 units (64 bytes with 4 KiB pages); a mask says
 *   which units a page uses. Records are 64-byte aligned, so a held record
 *   uses whole units. Only the first and the last page of a record can be
 *   partly used; the pages between are whole and never folded.
 * - A fold page is shared by the CPU-view pages mapped onto it; their masks
 *   do not overlap. A held record released gives its units back (shrink),
 *   and a CPU-view page whose last held record is released all of its
 *   units (unpage); a fold page no CPU-view page uses is free. Free fold
 *   pages stay resident for reuse, up to a few; the rest are punched. A
 *   CPU-view page unpaged still maps its fold page until the pool maps its
 *   block back onto its own memfd pages (restore, one mmap per run of such
 *   pages), before it hands the block out again.
 * - A fold touches the page through its new mapping: the first access to a
 *   fresh mapping costs microseconds under some hypervisors, and this way
 *   the fold pays it, not the upper layer reading what it kept.
 * - Stores that race with a fold: the upper layer may store into a kept
 *   message from another thread while the receiver folds its page (UCP
 *   hands AM and stream data to its user). A store that lands on the old
 *   page between the copy and the remap is carried over: after the remap
 *   (whose TLB shootdown has made every earlier store visible), the old
 *   page is read back from the pool memfd (pread) and each 8-byte word
 *   that differs from the copy is merged into the fold page with
 *   compare-and-swap, byte by byte, keeping bytes stored since the remap.
 *   Only a byte stored twice in that window of a few microseconds, the
 *   second time back to its value before the copy, can end with the first
 *   store's value.
 * - Each folded page is a mapping of its own (a VMA): at most max_pages
 *   CPU-view pages are folded at a time, well below the kernel's map count
 *   limit; past it, and if an mmap fails, pages are kept as they are.
 *
 * Not thread safe: called by the pool, serialised by the receiver.
 */

#include <ucs/sys/compiler_def.h>
#include <ucs/type/status.h>

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

BEGIN_C_DECLS


#define REMAPRING_FOLD_NONE UINT32_MAX /* no fold page */
#define REMAPRING_FOLD_MAPPED                                                  \
    UINT32_MAX /* of[]: unpaged, not mapped
                                                back yet */
#define REMAPRING_FOLD_UNITS 64 /* per page: one bit of a mask each */
#define REMAPRING_FOLD_SCAN  64 /* open fold pages tried per fold */
#define REMAPRING_FOLD_KEEP  4 /* free fold pages kept resident */
#define REMAPRING_FOLD_GROW  64 /* fold pages made per growth */


/**
 * A page of the fold memfd.
 */
typedef struct remapring_fold_page {
    uint64_t mask; /* units used by the CPU-view pages mapped onto it */
    uint32_t nrefs; /* CPU-view pages mapped onto it */
    uint32_t list; /* which list it is on: remapring_fold_list_t */
    uint32_t prev; /* links of that list */
    uint32_t next;
} remapring_fold_page_t;


/**
 * Lists of fold pages.
 */
typedef enum {
    REMAPRING_FOLD_LIST_OPEN, /* in use, with free units */
    REMAPRING_FOLD_LIST_FULL, /* in use, every unit used */
    REMAPRING_FOLD_LIST_FREE, /* free, still resident */
    REMAPRING_FOLD_LIST_CLEAN, /* free, punched or never touched */
    REMAPRING_FOLD_LIST_LAST
} remapring_fold_list_t;


/**
 * Fold state of one pool.
 */
typedef struct remapring_fold {
    int fd; /* fold memfd, or -1 if folding is off */
    const char *name; /* memfd name */
    unsigned page_shift;
    unsigned unit_shift; /* log2(page size / 64) */
    uint32_t max_pages; /* CPU-view pages folded at a time; 0: off */
    uint32_t npages; /* fold pages made */
    uint32_t nfolded; /* CPU-view pages folded now */
    uint32_t heads[REMAPRING_FOLD_LIST_LAST];
    uint32_t tails[REMAPRING_FOLD_LIST_LAST];
    uint32_t counts[REMAPRING_FOLD_LIST_LAST];
    size_t meta_size; /* the arrays below, one mapping */
    remapring_fold_page_t *pages; /* [max_pages] */
    uint32_t *of; /* [ncpu_pages]: fold page of each CPU-view page plus
                     one, or 0 if it is not folded; or MAPPED if it left
                     its fold page but is still mapped onto one */
    uint64_t *vmask; /* [ncpu_pages]: units it uses there */
    uint64_t *snap; /* one page: what a fold copied */
    uint64_t *back; /* one page: the old page, read back */
    uint64_t nfolds; /* folds done */
    uint64_t nmerged; /* words a racing store changed, carried over */
} remapring_fold_t;


/**
 * Set up folding for a pool of @a ncpu_pages CPU-view pages, at most
 * @a max_pages of them folded at a time (0: never): the fold memfd (empty)
 * and the bookkeeping (unbacked until used). Folding is off if the memfd
 * cannot be made.
 */
ucs_status_t remapring_fold_init(remapring_fold_t *fold, const char *name,
                                 unsigned page_shift, uint64_t ncpu_pages,
                                 uint32_t max_pages);


/**
 * Release what folding made. The CPU view is the caller's to unmap.
 */
void remapring_fold_cleanup(remapring_fold_t *fold);


/**
 * Fold CPU-view page @a cpu_page, mapped at @a addr, of which the units in
 * @a mask are used; @a pool_fd at @a pool_offset is the memfd page under
 * it now. On success the caller may punch that memfd page.
 *
 * @return 1 if the page was folded, 0 if it stays as it is.
 */
int remapring_fold_page(remapring_fold_t *fold, uint64_t cpu_page, void *addr,
                        uint64_t mask, int pool_fd, off_t pool_offset);


/**
 * The last held record of folded CPU-view page @a cpu_page was released:
 * its units go back to its fold page. The CPU view stays mapped onto that
 * page until remapring_fold_restore().
 */
void remapring_fold_unpage(remapring_fold_t *fold, uint64_t cpu_page);


/**
 * The last held record of CPU-view pages [@a cpu_page, + @a count) was
 * released: those still folded leave their fold pages (unpage). They stay
 * mapped onto them until remapring_fold_restore().
 */
void remapring_fold_release(remapring_fold_t *fold, uint64_t cpu_page,
                            unsigned count);


/**
 * Map CPU-view pages [@a cpu_page, + @a count), at @a addr, that were
 * folded back onto their own pages of @a pool_fd, from @a pool_offset (the
 * pool is about to hand their block out again); those still folded are
 * unpaged first.
 *
 * @return UCS_OK, or UCS_ERR_NO_MEMORY if an mmap failed (logged): the
 *         pages from there on still map fold pages.
 */
ucs_status_t remapring_fold_restore(remapring_fold_t *fold, uint64_t cpu_page,
                                    unsigned count, void *addr, int pool_fd,
                                    off_t pool_offset);


/**
 * A held record on folded CPU-view page @a cpu_page, which other held
 * records still use, was released: the units in @a mask were its alone, and
 * are free in the fold page from now on. Units no larger than a record's
 * alignment (64 bytes) are never shared by two records; with larger ones
 * (pages above 4 KiB) the mask stays as it is.
 */
void remapring_fold_shrink(remapring_fold_t *fold, uint64_t cpu_page,
                           uint64_t mask);


/**
 * Punch the free fold pages past the few kept resident.
 */
void remapring_fold_trim(remapring_fold_t *fold);


/**
 * Whether there are free fold pages to punch.
 */
static inline int remapring_fold_trimmable(const remapring_fold_t *fold)
{
    return fold->counts[REMAPRING_FOLD_LIST_FREE] > REMAPRING_FOLD_KEEP;
}


/**
 * Mask of the units of a page that bytes [@a start, @a end) of it use.
 */
static inline uint64_t
remapring_fold_mask(const remapring_fold_t *fold, size_t start, size_t end)
{
    unsigned first = start >> fold->unit_shift;
    unsigned last  = (end - 1) >> fold->unit_shift;

    return ((last == REMAPRING_FOLD_UNITS - 1) ?
                    UINT64_MAX :
                    ((UINT64_C(1) << (last + 1)) - 1)) &
           ~((UINT64_C(1) << first) - 1);
}


/**
 * Whether CPU-view page @a cpu_page is folded now.
 */
static inline int
remapring_fold_is_folded(const remapring_fold_t *fold, uint64_t cpu_page)
{
    return (fold->nfolded > 0) && (fold->of[cpu_page] != 0) &&
           (fold->of[cpu_page] != REMAPRING_FOLD_MAPPED);
}


/**
 * Fold pages that hold memory: in use, or free and not punched yet.
 */
static inline uint32_t remapring_fold_resident(const remapring_fold_t *fold)
{
    return fold->npages - fold->counts[REMAPRING_FOLD_LIST_CLEAN];
}

END_C_DECLS

#endif
