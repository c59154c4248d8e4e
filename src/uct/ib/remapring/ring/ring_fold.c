/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <uct/ib/remapring/ring/ring_fold.h>

#include <ucs/arch/atomic.h>
#include <ucs/debug/log_def.h>
#include <ucs/sys/math.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>


/* CPU-view pages folded now in all the pools of the process, and at most
 * how many: each is a mapping of its own, and the map count limit
 * (vm.max_map_count) is the whole process's. Each pool is serialised by
 * its receiver, but not with the others: atomics. */
static volatile uint64_t remapring_fold_total = 0;
static uint64_t remapring_fold_total_max      = 0;


/* A quarter of vm.max_map_count: a folded page splits the mapping it lands
 * in, two more mappings at most */
static uint64_t remapring_fold_process_max(void)
{
    unsigned long max_map_count = 65530; /* the kernel's default */
    uint64_t max;
    FILE *file;

    /* pools of other threads may read it first at the same time: each
     * finds the same value */
    max = __atomic_load_n(&remapring_fold_total_max, __ATOMIC_RELAXED);
    if (max == 0) {
        file = fopen("/proc/sys/vm/max_map_count", "r");
        if (file != NULL) {
            if (fscanf(file, "%lu", &max_map_count) != 1) {
                max_map_count = 65530;
            }
            fclose(file);
        }
        max = ucs_max(max_map_count / 4, 1);
        __atomic_store_n(&remapring_fold_total_max, max, __ATOMIC_RELAXED);
    }

    return max;
}

static void remapring_fold_list_del(remapring_fold_t *fold, uint32_t index)
{
    remapring_fold_page_t *page = &fold->pages[index];

    if (page->prev == REMAPRING_FOLD_NONE) {
        fold->heads[page->list] = page->next;
    } else {
        fold->pages[page->prev].next = page->next;
    }
    if (page->next == REMAPRING_FOLD_NONE) {
        fold->tails[page->list] = page->prev;
    } else {
        fold->pages[page->next].prev = page->prev;
    }
    --fold->counts[page->list];
}

static void
remapring_fold_list_push(remapring_fold_t *fold, uint32_t index, uint32_t list)
{
    remapring_fold_page_t *page = &fold->pages[index];

    page->list = list;
    page->prev = REMAPRING_FOLD_NONE;
    page->next = fold->heads[list];
    if (page->next == REMAPRING_FOLD_NONE) {
        fold->tails[list] = index;
    } else {
        fold->pages[page->next].prev = index;
    }
    fold->heads[list] = index;
    ++fold->counts[list];
}

/* Move fold page @a index to the head of @a list */
static void
remapring_fold_list_move(remapring_fold_t *fold, uint32_t index, uint32_t list)
{
    remapring_fold_list_del(fold, index);
    remapring_fold_list_push(fold, index, list);
}

ucs_status_t remapring_fold_init(remapring_fold_t *fold, const char *name,
                                 unsigned page_shift, uint64_t ncpu_pages,
                                 uint32_t max_pages)
{
    size_t page_size = 1ul << page_shift;
    unsigned list;
    char *meta;

    memset(fold, 0, sizeof(*fold));
    fold->fd         = -1;
    fold->name       = name;
    fold->page_shift = page_shift;
    fold->unit_shift = page_shift - 6; /* 64 units */
    fold->max_pages  = (page_shift < 6) ? 0 : max_pages;
    for (list = 0; list < REMAPRING_FOLD_LIST_LAST; ++list) {
        fold->heads[list] = REMAPRING_FOLD_NONE;
        fold->tails[list] = REMAPRING_FOLD_NONE;
    }

    if (fold->max_pages == 0) {
        return UCS_OK;
    }

    /* The two scratch pages, then the arrays: untouched, hence unbacked,
     * until used */
    fold->meta_size = ucs_align_up(
            2 * page_size +
                    (ncpu_pages * (sizeof(*fold->vmask) + sizeof(*fold->of))) +
                    ((size_t)fold->max_pages * sizeof(*fold->pages)),
            page_size);
    meta = mmap(NULL, fold->meta_size, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (meta == MAP_FAILED) {
        ucs_error("failed to map %zu bytes of fold state: %m", fold->meta_size);
        return UCS_ERR_NO_MEMORY;
    }

    /* made now, not at the first fold: a pool's descriptors stay the same
     * while it lives */
    fold->fd = memfd_create(fold->name, MFD_CLOEXEC);
    if (fold->fd < 0) {
        ucs_debug("fold: memfd_create failed: %m; no folding in this pool");
        munmap(meta, fold->meta_size);
        fold->meta_size = 0;
        fold->max_pages = 0;
        return UCS_OK;
    }

    fold->snap  = (uint64_t *)meta;
    fold->back  = (uint64_t *)(meta + page_size);
    fold->vmask = (uint64_t *)(meta + 2 * page_size);
    fold->pages = (remapring_fold_page_t *)(fold->vmask + ncpu_pages);
    fold->of    = (uint32_t *)(fold->pages + fold->max_pages);
    return UCS_OK;
}

void remapring_fold_cleanup(remapring_fold_t *fold)
{
    ucs_atomic_sub64(&remapring_fold_total, fold->nfolded);
    if (fold->fd >= 0) {
        close(fold->fd);
    }
    if (fold->meta_size > 0) {
        munmap(fold->snap, fold->meta_size);
    }
    fold->max_pages = 0;
    fold->nfolded   = 0;
}

/* Make more fold pages */
static ucs_status_t remapring_fold_grow(remapring_fold_t *fold)
{
    unsigned count, i;

    if (fold->npages >= fold->max_pages) {
        return UCS_ERR_NO_RESOURCE;
    }

    count = ucs_min(REMAPRING_FOLD_GROW, fold->max_pages - fold->npages);

    /* no mapping of its own: written with pwrite(), read through the CPU
     * views mapped onto it */
    if (ftruncate(fold->fd, (off_t)(fold->npages + count)
                                    << fold->page_shift) != 0) {
        ucs_debug("fold: failed to make %u more pages: %m", count);
        return UCS_ERR_NO_MEMORY;
    }

    for (i = count; i > 0; --i) {
        fold->pages[fold->npages + i - 1].mask  = 0;
        fold->pages[fold->npages + i - 1].nrefs = 0;
        remapring_fold_list_push(fold, fold->npages + i - 1,
                                 REMAPRING_FOLD_LIST_CLEAN);
    }
    fold->npages += count;
    return UCS_OK;
}

/* A fold page where @a mask fits: of the recently used open ones, the one
 * it leaves with the fewest free units; else a free one, resident first */
static uint32_t remapring_fold_find(remapring_fold_t *fold, uint64_t mask)
{
    uint32_t index = fold->heads[REMAPRING_FOLD_LIST_OPEN];
    uint32_t best  = REMAPRING_FOLD_NONE;
    unsigned tried, left, best_left = REMAPRING_FOLD_UNITS;

    for (tried = 0;
         (index != REMAPRING_FOLD_NONE) && (tried < REMAPRING_FOLD_SCAN);
         ++tried, index = fold->pages[index].next) {
        if ((fold->pages[index].mask & mask) != 0) {
            continue;
        }

        left = __builtin_popcountll(~(fold->pages[index].mask | mask));
        if (left < best_left) {
            best      = index;
            best_left = left;
            if (left == 0) {
                break;
            }
        }
    }

    if (best != REMAPRING_FOLD_NONE) {
        return best;
    }

    if (fold->heads[REMAPRING_FOLD_LIST_FREE] != REMAPRING_FOLD_NONE) {
        return fold->heads[REMAPRING_FOLD_LIST_FREE];
    }

    if ((fold->heads[REMAPRING_FOLD_LIST_CLEAN] == REMAPRING_FOLD_NONE) &&
        (remapring_fold_grow(fold) != UCS_OK)) {
        return REMAPRING_FOLD_NONE;
    }

    return fold->heads[REMAPRING_FOLD_LIST_CLEAN];
}

/* The first run of set bits of *@a mask_p: its first unit and how many;
 * the run is cleared from the mask */
static unsigned remapring_fold_next_run(uint64_t *mask_p, unsigned *count_p)
{
    uint64_t mask  = *mask_p;
    unsigned first = __builtin_ctzll(mask);
    uint64_t rest  = mask >> first;
    unsigned count = (rest == (UINT64_MAX >> first)) ?
                             (REMAPRING_FOLD_UNITS - first) :
                             (unsigned)__builtin_ctzll(~rest);

    *mask_p  = (count == REMAPRING_FOLD_UNITS) ?
                       0 :
                       (mask & ~(((UINT64_C(1) << count) - 1) << first));
    *count_p = count;
    return first;
}

/* Word @a word of the fold page changed on the old page since the copy (a
 * store raced with the fold): carry the changed bytes over, except those
 * stored into the fold page since the remap */
static void remapring_fold_merge_word(remapring_fold_t *fold,
                                      volatile uint64_t *word, uint64_t snap,
                                      uint64_t back)
{
    uint64_t current, want, byte;
    unsigned i;

    do {
        current = *word;
        want    = current;
        for (i = 0; i < 8; ++i) {
            byte = UINT64_C(0xff) << (i * 8);
            if (((back ^ snap) & byte) && !((current ^ snap) & byte)) {
                want = (want & ~byte) | (back & byte);
            }
        }
        if (want == current) {
            return;
        }
    } while (ucs_atomic_cswap64(word, current, want) != current);

    ++fold->nmerged;
}

/* Fold page @a index now also carries CPU-view page @a cpu_page */
static void remapring_fold_claim(remapring_fold_t *fold, uint32_t index,
                                 uint64_t cpu_page, uint64_t mask)
{
    remapring_fold_page_t *page = &fold->pages[index];

    page->mask |= mask;
    page->nrefs++;
    remapring_fold_list_move(fold, index,
                             (page->mask == UINT64_MAX) ?
                                     REMAPRING_FOLD_LIST_FULL :
                                     REMAPRING_FOLD_LIST_OPEN);
    fold->of[cpu_page]    = index + 1;
    fold->vmask[cpu_page] = mask;
    fold->nfolded++;
    fold->nfolds++;
}

int remapring_fold_page(remapring_fold_t *fold, uint64_t cpu_page, void *addr,
                        uint64_t mask, int pool_fd, off_t pool_offset)
{
    size_t page_size    = 1ul << fold->page_shift;
    unsigned unit_words = (1u << fold->unit_shift) / sizeof(uint64_t);
    off_t fold_offset;
    uint64_t runs;
    size_t length;
    unsigned first, count, word, end;
    uint32_t index;
    ssize_t ret;

    if ((mask == 0) || (mask == UINT64_MAX) ||
        (fold->nfolded >= fold->max_pages) || (fold->of[cpu_page] != 0)) {
        return 0; /* nothing to gain, the limit, or folded already */
    }

    if (ucs_atomic_fadd64(&remapring_fold_total, 1) >=
        remapring_fold_process_max()) {
        ucs_atomic_sub64(&remapring_fold_total, 1);
        return 0;
    }

    index = remapring_fold_find(fold, mask);
    if (index == REMAPRING_FOLD_NONE) {
        goto err_total;
    }

    /* copy the used units, through a snapshot kept for the check below;
     * the other units of the fold page are other pages' */
    fold_offset = (off_t)index << fold->page_shift;
    for (runs = mask; runs != 0;) {
        first  = remapring_fold_next_run(&runs, &count);
        length = (size_t)count << fold->unit_shift;
        memcpy(fold->snap + first * unit_words,
               UCS_PTR_BYTE_OFFSET(addr, (size_t)first << fold->unit_shift),
               length);
        if (pwrite(fold->fd, fold->snap + first * unit_words, length,
                   fold_offset + ((off_t)first << fold->unit_shift)) !=
            (ssize_t)length) {
            ucs_debug("fold: writing fold page %u failed: %m", index);
            goto err_total;
        }
    }

    /* the page moves: MAP_FIXED replaces it at once, never unmapped */
    if (mmap(addr, page_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
             fold->fd, fold_offset) == MAP_FAILED) {
        ucs_debug("fold: mmap of a page at %p failed: %m; no more folding "
                  "in this pool",
                  addr);
        fold->max_pages = 0;
        goto err_total;
    }

    /* stores that reached the old page after the copy */
    ret = pread(pool_fd, fold->back, page_size, pool_offset);
    if (ret != (ssize_t)page_size) {
        ucs_debug("fold: reading back the page at %p failed: %m", addr);
        if (mmap(addr, page_size, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_FIXED, pool_fd, pool_offset) != MAP_FAILED) {
            goto err_total;
        }
        /* the copy stays: only a racing store could be missing from it */
        ucs_error("fold: failed to map the page at %p back: %m", addr);
        remapring_fold_claim(fold, index, cpu_page, mask);
        return 1;
    }

    for (runs = mask; runs != 0;) {
        first = remapring_fold_next_run(&runs, &count);
        end   = (first + count) * unit_words;
        for (word = first * unit_words; word < end; ++word) {
            if (ucs_unlikely(fold->back[word] != fold->snap[word])) {
                remapring_fold_merge_word(fold,
                                          (volatile uint64_t *)addr + word,
                                          fold->snap[word], fold->back[word]);
            }
        }
    }

    /* Touch the page through its new mapping now, as the copy out of it
     * would later: where the first access to a fresh mapping is slow (under
     * some hypervisors several microseconds for each page, whether or not
     * the kernel populated it), that cost is the fold's, paid where the
     * transport runs, and not the upper layer's, paid where it consumes
     * what it kept. An atomic add of 0 loses no racing store. */
    ucs_atomic_add64((volatile uint64_t *)addr +
                             __builtin_ctzll(mask) * unit_words,
                     0);

    remapring_fold_claim(fold, index, cpu_page, mask);
    return 1;

err_total:
    ucs_atomic_sub64(&remapring_fold_total, 1);
    return 0;
}

void remapring_fold_unpage(remapring_fold_t *fold, uint64_t cpu_page)
{
    remapring_fold_page_t *page;
    uint32_t index;

    if (!remapring_fold_is_folded(fold, cpu_page)) {
        return;
    }

    index = fold->of[cpu_page] - 1;
    page  = &fold->pages[index];
    page->mask &= ~fold->vmask[cpu_page];
    page->nrefs--;
    fold->of[cpu_page]    = REMAPRING_FOLD_MAPPED;
    fold->vmask[cpu_page] = 0;
    fold->nfolded--;
    ucs_atomic_sub64(&remapring_fold_total, 1);

    /* at the head of its list: reused first while its lines are warm */
    remapring_fold_list_move(fold, index,
                             (page->nrefs == 0) ? REMAPRING_FOLD_LIST_FREE :
                                                  REMAPRING_FOLD_LIST_OPEN);
}

void remapring_fold_shrink(remapring_fold_t *fold, uint64_t cpu_page,
                           uint64_t mask)
{
    remapring_fold_page_t *page;
    uint32_t index;

    if (!remapring_fold_is_folded(fold, cpu_page) || (fold->unit_shift > 6)) {
        return;
    }

    index = fold->of[cpu_page] - 1;
    page  = &fold->pages[index];
    mask &= fold->vmask[cpu_page];
    fold->vmask[cpu_page] &= ~mask;
    page->mask &= ~mask;
    remapring_fold_list_move(fold, index, REMAPRING_FOLD_LIST_OPEN);
}

void remapring_fold_trim(remapring_fold_t *fold)
{
    uint32_t index;

    while (fold->counts[REMAPRING_FOLD_LIST_FREE] > REMAPRING_FOLD_KEEP) {
        index = fold->tails[REMAPRING_FOLD_LIST_FREE];
        /* failure only costs memory: the page stays as it is */
        if (fallocate(fold->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                      (off_t)index << fold->page_shift,
                      1l << fold->page_shift) != 0) {
            ucs_debug("fold: punching page %u failed: %m", index);
        }
        remapring_fold_list_move(fold, index, REMAPRING_FOLD_LIST_CLEAN);
    }
}

void remapring_fold_release(remapring_fold_t *fold, uint64_t cpu_page,
                            unsigned count)
{
    unsigned page;

    for (page = 0; (fold->nfolded > 0) && (page < count); ++page) {
        remapring_fold_unpage(fold, cpu_page + page);
    }
}

ucs_status_t remapring_fold_restore(remapring_fold_t *fold, uint64_t cpu_page,
                                    unsigned count, void *addr, int pool_fd,
                                    off_t pool_offset)
{
    size_t page_size = 1ul << fold->page_shift;
    unsigned page, run;

    if (fold->meta_size == 0) {
        return UCS_OK; /* folding is off */
    }

    remapring_fold_release(fold, cpu_page, count);

    /* one mmap per run of pages mapped elsewhere: each merges back into the
     * mapping around it */
    for (page = 0; page < count; page += run) {
        if (fold->of[cpu_page + page] == 0) {
            run = 1;
            continue;
        }

        for (run = 1;
             (page + run < count) && (fold->of[cpu_page + page + run] != 0);
             ++run) {
        }

        if (mmap(UCS_PTR_BYTE_OFFSET(addr, (size_t)page * page_size),
                 (size_t)run * page_size, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_FIXED, pool_fd,
                 pool_offset + ((off_t)page * page_size)) == MAP_FAILED) {
            ucs_error("fold: failed to map %u pages at %p back: %m", run,
                      UCS_PTR_BYTE_OFFSET(addr, (size_t)page * page_size));
            return UCS_ERR_NO_MEMORY;
        }

        memset(&fold->of[cpu_page + page], 0, run * sizeof(*fold->of));
    }

    return UCS_OK;
}
