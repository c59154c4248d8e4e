/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <uct/ib/remapring/ring/ring_copy.h>

#include <ucs/debug/log_def.h>
#include <ucs/sys/math.h>

#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>


ucs_status_t remapring_copy_init(remapring_copies_t *copies, const char *name,
                                 size_t max_bytes)
{
    size_t page_size = sysconf(_SC_PAGESIZE);
    size_t npages    = max_bytes / page_size;
    unsigned n;

    memset(copies, 0, sizeof(*copies));
    copies->fd         = -1;
    copies->page_shift = __builtin_ctzl(page_size);
    copies->empty      = REMAPRING_COPY_NONE;
    copies->empty_tail = REMAPRING_COPY_NONE;
    copies->clean      = REMAPRING_COPY_NONE;
    for (n = 0; n <= REMAPRING_COPY_CLASSES; ++n) {
        copies->open[n] = REMAPRING_COPY_NONE;
    }

    if ((npages == 0) || (npages >= REMAPRING_COPY_NONE) ||
        (page_size / REMAPRING_COPY_ALIGN > REMAPRING_COPY_CLASSES)) {
        return UCS_OK; /* none: every get finds no element */
    }

    /* the class of each size: as many to a page as fit; and their sizes */
    for (n = 1; n <= REMAPRING_COPY_CLASSES; ++n) {
        copies->class_of[n]  = ucs_min(page_size / (n * REMAPRING_COPY_ALIGN),
                                       REMAPRING_COPY_CLASSES);
        copies->elem_size[n] = (page_size / n) &
                               ~(size_t)(REMAPRING_COPY_ALIGN - 1);
        /* exact for offsets in a page: the error, below the size, times
         * an offset stays below 2^32 */
        copies->elem_recip[n] = (uint32_t)((UINT64_C(1) << 32) /
                                           copies->elem_size[n]) +
                                1;
    }

    /* a sparse memfd: a page holds memory once written, until punched */
    copies->fd = memfd_create(name, MFD_CLOEXEC);
    if (copies->fd < 0) {
        ucs_error("copies: memfd_create(%s) failed: %m", name);
        return UCS_ERR_NO_MEMORY;
    }

    if (ftruncate(copies->fd, npages * page_size) != 0) {
        ucs_error("copies: ftruncate(%zu) failed: %m", npages * page_size);
        goto err_close;
    }

    copies->base = mmap(NULL, npages * page_size, PROT_READ | PROT_WRITE,
                        MAP_SHARED, copies->fd, 0);
    if (copies->base == MAP_FAILED) {
        ucs_error("copies: failed to map %zu bytes: %m", npages * page_size);
        goto err_close;
    }

    copies->pages = mmap(NULL, npages * sizeof(*copies->pages),
                         PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (copies->pages == MAP_FAILED) {
        ucs_error("copies: failed to map %zu bytes of page state: %m",
                  npages * sizeof(*copies->pages));
        munmap(copies->base, npages * page_size);
        goto err_close;
    }

    copies->max_bytes = npages * page_size;
    return UCS_OK;

err_close:
    close(copies->fd);
    copies->fd    = -1;
    copies->base  = NULL;
    copies->pages = NULL;
    return UCS_ERR_NO_MEMORY;
}

void remapring_copy_cleanup(remapring_copies_t *copies)
{
    if (copies->base == NULL) {
        return;
    }

    munmap(copies->pages,
           (copies->max_bytes >> copies->page_shift) * sizeof(*copies->pages));
    munmap(copies->base, copies->max_bytes);
    close(copies->fd);
    copies->fd        = -1;
    copies->base      = NULL;
    copies->pages     = NULL;
    copies->max_bytes = 0;
}

static inline char *
remapring_copy_page_addr(const remapring_copies_t *copies, uint32_t index)
{
    return copies->base + ((size_t)index << copies->page_shift);
}

/* Page @a index of class @a n gets a free element: onto the head of its
 * class's open list */
static void
remapring_copy_open_push(remapring_copies_t *copies, uint32_t index, unsigned n)
{
    remapring_copy_page_t *page = &copies->pages[index];

    page->prev = REMAPRING_COPY_NONE;
    page->next = copies->open[n];
    if (page->next != REMAPRING_COPY_NONE) {
        copies->pages[page->next].prev = index;
    }
    copies->open[n] = index;
}

static void
remapring_copy_open_del(remapring_copies_t *copies, uint32_t index, unsigned n)
{
    remapring_copy_page_t *page = &copies->pages[index];

    if (page->prev == REMAPRING_COPY_NONE) {
        copies->open[n] = page->next;
    } else {
        copies->pages[page->prev].next = page->next;
    }
    if (page->next != REMAPRING_COPY_NONE) {
        copies->pages[page->next].prev = page->prev;
    }
}

/* A page for class @a n: an empty resident one, the latest first; else one
 * given back; else a new one. NONE if max_bytes are in use. */
static uint32_t remapring_copy_page_new(remapring_copies_t *copies, unsigned n)
{
    remapring_copy_page_t *page;
    uint32_t index;

    if (copies->empty != REMAPRING_COPY_NONE) {
        index         = copies->empty;
        copies->empty = copies->pages[index].next;
        if (copies->empty == REMAPRING_COPY_NONE) {
            copies->empty_tail = REMAPRING_COPY_NONE;
        } else {
            copies->pages[copies->empty].prev = REMAPRING_COPY_NONE;
        }
        --copies->nempty;
        copies->nempty_low = ucs_min(copies->nempty_low, copies->nempty);
    } else if (copies->clean != REMAPRING_COPY_NONE) {
        index         = copies->clean;
        copies->clean = copies->pages[index].next;
        ++copies->resident_pages;
    } else if ((((size_t)copies->npages + 1) << copies->page_shift) <=
               copies->max_bytes) {
        index = copies->npages++;
        ++copies->resident_pages;
    } else {
        return REMAPRING_COPY_NONE;
    }

    page         = &copies->pages[index];
    page->nelems = n;
    page->nfree  = n;
    page->bump   = 0;
    page->free   = 0;
    remapring_copy_open_push(copies, index, n);
    return index;
}

/* An element of class @a n (not 0), or NULL */
static void *remapring_copy_get_class(remapring_copies_t *copies, unsigned n)
{
    remapring_copy_page_t *page;
    uint32_t index;
    unsigned elem;
    char *addr;

    index = copies->open[n];
    if (ucs_unlikely(index == REMAPRING_COPY_NONE)) {
        index = remapring_copy_page_new(copies, n);
        if (index == REMAPRING_COPY_NONE) {
            return NULL;
        }
    }

    page = &copies->pages[index];
    addr = remapring_copy_page_addr(copies, index);
    if (page->free != 0) {
        elem       = page->free - 1;
        page->free = *(uint16_t *)(addr + elem * copies->elem_size[n]);
    } else {
        elem = page->bump++;
    }

    if (--page->nfree == 0) {
        remapring_copy_open_del(copies, index, n);
    }
    ++copies->nelems_used;
    return addr + elem * copies->elem_size[n];
}

void *remapring_copy_get(remapring_copies_t *copies, size_t size)
{
    unsigned n = remapring_copy_class(copies, size);

    if ((n == 0) || (copies->base == NULL)) {
        return NULL;
    }

    return remapring_copy_get_class(copies, n);
}

void *remapring_copy_spare_get(remapring_copies_t *copies, unsigned n)
{
    if (copies->base == NULL) {
        return NULL;
    }

    copies->spare[n] = remapring_copy_get_class(copies, n);
    return copies->spare[n];
}

/* Empty page @a index leaves the open list of class @a n: to the head of the
 * empty list, reused first while warm */
static void remapring_copy_empty_push(remapring_copies_t *copies,
                                      uint32_t index, unsigned n)
{
    remapring_copy_page_t *page = &copies->pages[index];

    remapring_copy_open_del(copies, index, n);
    page->nelems = 0;
    page->prev   = REMAPRING_COPY_NONE;
    page->next   = copies->empty;
    if (copies->empty == REMAPRING_COPY_NONE) {
        copies->empty_tail = index;
    } else {
        copies->pages[copies->empty].prev = index;
    }
    copies->empty = index;
    ++copies->nempty;
}

void remapring_copy_put(remapring_copies_t *copies, void *addr)
{
    size_t offset = (char *)addr - copies->base;
    uint32_t index;
    remapring_copy_page_t *page;
    size_t elem_size;
    unsigned n, elem;

    if (ucs_unlikely(offset >= copies->max_bytes)) {
        goto err;
    }

    index = offset >> copies->page_shift;
    page  = &copies->pages[index];
    n     = page->nelems;
    if (ucs_unlikely((n == 0) || (page->nfree >= n))) {
        goto err;
    }

    elem_size = copies->elem_size[n];
    elem      = ((offset & ((1ul << copies->page_shift) - 1)) *
            (uint64_t)copies->elem_recip[n]) >>
           32;

    *(uint16_t *)(remapring_copy_page_addr(copies, index) +
                  elem * elem_size) = page->free;
    page->free                      = elem + 1;
    --copies->nelems_used;
    if (page->nfree++ == 0) {
        remapring_copy_open_push(copies, index, n);
    }
    if ((page->nfree < n) ||
        ((copies->open[n] == index) && (page->next == REMAPRING_COPY_NONE))) {
        return; /* in use, or its class's last open page */
    }

    remapring_copy_empty_push(copies, index, n);
    return;

err:
    ucs_error("copies %p: %p is not a copy in use", copies, addr);
}

void remapring_copy_trim(remapring_copies_t *copies)
{
    uint32_t index, release;
    unsigned n;

    if (copies->base == NULL) {
        return;
    }

    /* spares back, and the pages of classes that emptied */
    for (n = 1; n <= REMAPRING_COPY_CLASSES; ++n) {
        if (copies->spare[n] != NULL) {
            remapring_copy_put(copies, copies->spare[n]);
            copies->spare[n] = NULL;
        }
        index = copies->open[n];
        if ((index != REMAPRING_COPY_NONE) &&
            (copies->pages[index].nfree == copies->pages[index].nelems)) {
            remapring_copy_empty_push(copies, index, n);
        }
    }

    /* those not needed since the last trim, past a few */
    release = (copies->nempty_low > REMAPRING_COPY_KEEP) ?
                      (copies->nempty_low - REMAPRING_COPY_KEEP) :
                      0;
    for (; release > 0; --release) {
        /* the one empty longest */
        index                                  = copies->empty_tail;
        copies->empty_tail                     = copies->pages[index].prev;
        copies->pages[copies->empty_tail].next = REMAPRING_COPY_NONE;
        --copies->nempty;

        /* failure only costs memory: the page stays resident */
        if (fallocate(copies->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                      (off_t)index << copies->page_shift,
                      1l << copies->page_shift) != 0) {
            ucs_debug("copies: giving back page %u failed: %m", index);
        }
        copies->pages[index].next = copies->clean;
        copies->clean             = index;
        --copies->resident_pages;
    }
    copies->nempty_low = copies->nempty;
}
