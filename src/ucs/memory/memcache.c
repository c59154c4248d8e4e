/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <ucs/memory/memcache.h>
#include <ucs/memory/range_table.h>
#include <ucs/memory/ummunotify.h>

#include <ucs/debug/log_def.h>
#include <ucs/sys/compiler_def.h>
#include <ucs/sys/math.h>
#include <ucs/sys/preprocessor.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


/*
 * Entries live in a range table (range_table.h; overlaps allowed), read
 * under a read lock and changed under the write lock. The notifier's SYNC
 * callback, which runs in the monitor, takes the write lock to unlink an
 * entry. Hence, like the notifier lock, the cache lock is never held across
 * malloc()/free() (a heap trim could wait for the monitor) or across any
 * ucs_ummunotify_ call (lock order: notifier lock -> cache lock).
 *
 * A hit also brackets the lookup with the notifier's generation counter: the
 * kernel releases munmap() when the monitor has read the event, before the
 * monitor took our write lock; the odd counter covers that window.
 *
 * Reference counts: one per user reference, plus one while in the table.
 */


#define UCS_MEMCACHE_MISS_RETRIES 8


enum {
    UCS_MEMCACHE_REGION_IN_TABLE   = UCS_BIT(0),
    UCS_MEMCACHE_REGION_INVALID    = UCS_BIT(1),
    UCS_MEMCACHE_REGION_REGISTERED = UCS_BIT(2),
    UCS_MEMCACHE_REGION_UNCACHED   = UCS_BIT(3)
};


struct ucs_memcache {
    ucs_memcache_params_t params;
    char                  name[64];
    pthread_rwlock_t      lock;
    ucs_range_table_t     table;
    ucs_memcache_region_t *garbage;  /* refcount 0, dropped: to release */
    ucs_ummunotify_t      *notifier;
    ucs_ummunotify_work_t gc_work;
    ucs_memcache_stats_t  stats;
};


/* ---------------------------------------------------------- classification */

/* linux/fs.h of kernels >= 6.11; defined here for older headers */
struct ucs_procmap_query {
    uint64_t size;
    uint64_t query_flags;
    uint64_t query_addr;
    uint64_t vma_start;
    uint64_t vma_end;
    uint64_t vma_flags;
    uint64_t vma_page_size;
    uint64_t vma_offset;
    uint64_t inode;
    uint32_t dev_major;
    uint32_t dev_minor;
    uint32_t vma_name_size;
    uint32_t build_id_size;
    uint64_t vma_name_addr;
    uint64_t build_id_addr;
};

#define UCS_PROCMAP_QUERY         _IOWR('f', 17, struct ucs_procmap_query)
#define UCS_PROCMAP_VMA_READABLE  0x01
#define UCS_PROCMAP_VMA_WRITABLE  0x02
#define UCS_PROCMAP_VMA_EXECUTABLE 0x04
#define UCS_PROCMAP_VMA_SHARED    0x08


typedef struct {
    uintptr_t start;
    uintptr_t end;
    uint64_t  offset;
    uint64_t  inode;
    uint32_t  dev_major;
    uint32_t  dev_minor;
    size_t    page_size;
    int       prot;
    int       shared;
    char      name[128];
} ucs_memcache_vma_t;


static int ucs_memcache_maps_fd       = -1; /* this process' maps */
static int ucs_memcache_procmap_query = 1;  /* until ENOTTY says no */

static const char *ucs_memcache_backing_names[] = {
    [UCS_MEMCACHE_BACKING_ANON]    = "anon",
    [UCS_MEMCACHE_BACKING_MEMFD]   = "memfd",
    [UCS_MEMCACHE_BACKING_HUGETLB] = "hugetlb",
    [UCS_MEMCACHE_BACKING_FILE]    = "file"
};


const char *ucs_memcache_backing_name(ucs_memcache_backing_t backing)
{
    return (backing < UCS_MEMCACHE_BACKING_LAST) ?
           ucs_memcache_backing_names[backing] : "invalid";
}

/*
 * /proc/self/maps resolved at open() time: a descriptor inherited across
 * fork() would describe the parent. The child handler closes it.
 */
static int ucs_memcache_maps_open(void)
{
    int fd, expected = -1;

    fd = __atomic_load_n(&ucs_memcache_maps_fd, __ATOMIC_ACQUIRE);
    if (fd >= 0) {
        return fd;
    }

    fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        ucs_error("memcache: failed to open /proc/self/maps: %m");
        return -1;
    }

    if (!__atomic_compare_exchange_n(&ucs_memcache_maps_fd, &expected, fd, 0,
                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        close(fd);
        fd = expected;
    }
    return fd;
}

/*
 * PROCMAP_QUERY: the VMA covering 'addr' in one ioctl, without formatting
 * and parsing the whole maps file. Returns 1 found, 0 not mapped, -1 the
 * kernel does not have it.
 */
static int ucs_memcache_vma_query(uintptr_t addr, ucs_memcache_vma_t *vma)
{
    struct ucs_procmap_query q;
    int fd;

    fd = ucs_memcache_maps_open();
    if (fd < 0) {
        return 0;
    }

    memset(&q, 0, sizeof(q));
    q.size          = sizeof(q);
    q.query_addr    = addr;
    q.vma_name_addr = (uintptr_t)vma->name;
    q.vma_name_size = sizeof(vma->name);
    /* The whole name, not only its first byte: a checker that does not
     * know this ioctl (valgrind) cannot see the kernel write the name, and
     * takes what it did not see written for uninitialised */
    memset(vma->name, 0, sizeof(vma->name));
    if (ioctl(fd, UCS_PROCMAP_QUERY, &q) < 0) {
        if ((errno == ENOTTY) || (errno == EINVAL) || (errno == EOPNOTSUPP)) {
            return -1;
        }
        return 0; /* ENOENT: nothing mapped at addr */
    }

    vma->start     = q.vma_start;
    vma->end       = q.vma_end;
    vma->offset    = q.vma_offset;
    vma->inode     = q.inode;
    vma->dev_major = q.dev_major;
    vma->dev_minor = q.dev_minor;
    vma->page_size = q.vma_page_size;
    vma->shared    = !!(q.vma_flags & UCS_PROCMAP_VMA_SHARED);
    vma->prot      = ((q.vma_flags & UCS_PROCMAP_VMA_READABLE) ?
                      PROT_READ : 0) |
                     ((q.vma_flags & UCS_PROCMAP_VMA_WRITABLE) ?
                      PROT_WRITE : 0) |
                     ((q.vma_flags & UCS_PROCMAP_VMA_EXECUTABLE) ?
                      PROT_EXEC : 0);
    if (q.vma_name_size == 0) {
        vma->name[0] = '\0';
    }
    return 1;
}

/* The same from /proc/self/maps text (kernels before 6.11). */
static int ucs_memcache_vma_parse(uintptr_t addr, ucs_memcache_vma_t *vma)
{
    unsigned long start, end, offset, inode;
    unsigned dev_major, dev_minor;
    char perms[8], *line = NULL;
    size_t line_size = 0;
    int found = 0, n;
    FILE *file;

    file = fopen("/proc/self/maps", "re");
    if (file == NULL) {
        ucs_error("memcache: failed to open /proc/self/maps: %m");
        return 0;
    }

    while (getline(&line, &line_size, file) > 0) {
        n = 0;
        if (sscanf(line, "%lx-%lx %7s %lx %x:%x %lu %n", &start, &end, perms,
                   &offset, &dev_major, &dev_minor, &inode, &n) < 7) {
            continue;
        }
        if ((addr < start) || (addr >= end)) {
            continue;
        }

        vma->start     = start;
        vma->end       = end;
        vma->offset    = offset;
        vma->inode     = inode;
        vma->dev_major = dev_major;
        vma->dev_minor = dev_minor;
        vma->shared    = (perms[3] == 's');
        vma->prot      = ((perms[0] == 'r') ? PROT_READ : 0) |
                         ((perms[1] == 'w') ? PROT_WRITE : 0) |
                         ((perms[2] == 'x') ? PROT_EXEC : 0);
        snprintf(vma->name, sizeof(vma->name), "%s", line + n);
        vma->name[strcspn(vma->name, "\n")] = '\0';
        /* the text has no page size: recognize what we can by name */
        vma->page_size = strstr(vma->name, "anon_hugepage") ?
                         (2ul << 20) : (size_t)sysconf(_SC_PAGESIZE);
        found          = 1;
        break;
    }

    free(line);
    fclose(file);
    return found;
}

static int ucs_memcache_vma_find(uintptr_t addr, ucs_memcache_vma_t *vma)
{
    int ret;

    if (__atomic_load_n(&ucs_memcache_procmap_query, __ATOMIC_RELAXED)) {
        ret = ucs_memcache_vma_query(addr, vma);
        if (ret >= 0) {
            return ret;
        }
        ucs_debug("memcache: no PROCMAP_QUERY, parsing /proc/self/maps");
        __atomic_store_n(&ucs_memcache_procmap_query, 0, __ATOMIC_RELAXED);
    }
    return ucs_memcache_vma_parse(addr, vma);
}

static ucs_memcache_backing_t
ucs_memcache_vma_backing(const ucs_memcache_vma_t *vma)
{
    if (vma->page_size > (size_t)sysconf(_SC_PAGESIZE)) {
        return UCS_MEMCACHE_BACKING_HUGETLB;
    }
    if (vma->inode == 0) {
        return UCS_MEMCACHE_BACKING_ANON; /* private anon, [heap], [stack] */
    }
    if (!strncmp(vma->name, "/memfd:", 7) ||
        !strncmp(vma->name, "/dev/zero", 9) || /* MAP_SHARED|MAP_ANON */
        !strncmp(vma->name, "/SYSV", 5)) {     /* shmget */
        return UCS_MEMCACHE_BACKING_MEMFD;
    }
    return UCS_MEMCACHE_BACKING_FILE;
}

ucs_status_t ucs_memcache_classify(void *address, size_t length,
                                   ucs_memcache_info_t *info)
{
    uintptr_t addr = (uintptr_t)address;
    uintptr_t end  = addr + length;
    ucs_memcache_backing_t backing;
    ucs_memcache_vma_t vma;
    uint64_t next_offset = 0;
    int first            = 1;

    memset(info, 0, sizeof(*info));
    while (addr < end) {
        if (!ucs_memcache_vma_find(addr, &vma) || (vma.start > addr)) {
            ucs_debug("memcache: %p..%p: nothing mapped at 0x%lx", address,
                      UCS_PTR_BYTE_OFFSET(address, length), addr);
            info->mem_type = UCS_MEMORY_TYPE_UNKNOWN;
            return UCS_ERR_INVALID_ADDR;
        }

        backing = ucs_memcache_vma_backing(&vma);
        if (first) {
            info->mem_type  = UCS_MEMORY_TYPE_HOST;
            info->backing   = backing;
            info->offset    = (backing == UCS_MEMCACHE_BACKING_ANON) ? 0 :
                              vma.offset + (addr - vma.start);
            info->inode     = vma.inode;
            info->dev_major = vma.dev_major;
            info->dev_minor = vma.dev_minor;
            info->page_size = vma.page_size;
            info->prot      = vma.prot;
            info->flags     = vma.shared ? UCS_MEMCACHE_INFO_FLAG_SHARED : 0;
            first           = 0;
        } else if ((backing != info->backing) || (vma.inode != info->inode) ||
                   ((backing != UCS_MEMCACHE_BACKING_ANON) &&
                    (vma.offset != next_offset))) {
            info->flags |= UCS_MEMCACHE_INFO_FLAG_MIXED;
        }

        next_offset = vma.offset + (vma.end - vma.start);
        addr        = vma.end;
    }

    return UCS_OK;
}

/* ----------------------------------------------------------------- table */

/* The monitor sets INVALID under the lock while the miss path sets its own
 * flags without it: every change of region->flags is atomic. */
static inline void ucs_memcache_flag_set(ucs_memcache_region_t *region,
                                         uint32_t flag)
{
    __atomic_or_fetch(&region->flags, flag, __ATOMIC_ACQ_REL);
}

static inline void ucs_memcache_flag_clear(ucs_memcache_region_t *region,
                                           uint32_t flag)
{
    __atomic_and_fetch(&region->flags, ~flag, __ATOMIC_ACQ_REL);
}

/* Whether @a flag is set; read atomically too (ThreadSanitizer: a plain
 * read beside the monitor's atomic update is a data race) */
static inline int
ucs_memcache_flag_test(ucs_memcache_region_t *region, uint32_t flag)
{
    return !!(__atomic_load_n(&region->flags, __ATOMIC_ACQUIRE) & flag);
}

static inline ucs_memcache_region_t *ucs_memcache_region(ucs_range_t *range)
{
    return ucs_container_of(range, ucs_memcache_region_t, range);
}

/* A region covering [start, end). Called with the lock (read or write). */
static ucs_memcache_region_t *
ucs_memcache_find(ucs_memcache_t *cache, uintptr_t start, uintptr_t end)
{
    ucs_range_t *range = ucs_range_table_find_cover(&cache->table, start, end);

    return (range == NULL) ? NULL : ucs_memcache_region(range);
}

static void ucs_memcache_insert(ucs_memcache_t *cache,
                                ucs_memcache_region_t *region)
{
    ucs_range_table_insert(&cache->table, &region->range);
    ucs_memcache_flag_set(region, UCS_MEMCACHE_REGION_IN_TABLE);
}

static void ucs_memcache_remove(ucs_memcache_t *cache,
                                ucs_memcache_region_t *region)
{
    ucs_range_table_remove(&cache->table, &region->range);
    ucs_memcache_flag_clear(region, UCS_MEMCACHE_REGION_IN_TABLE);
}

static void ucs_memcache_wrlock(void *arg)
{
    pthread_rwlock_wrlock(&((ucs_memcache_t*)arg)->lock);
}

static void ucs_memcache_unlock(void *arg)
{
    pthread_rwlock_unlock(&((ucs_memcache_t*)arg)->lock);
}

/* ------------------------------------------------------------ lifetimes */


/* Deregister and free. Never called in the monitor or with a lock held. */
static void ucs_memcache_region_release(ucs_memcache_t *cache,
                                        ucs_memcache_region_t *region)
{
    if (region->watch != NULL) {
        ucs_ummunotify_unregister(region->watch);
    }
    if (ucs_memcache_flag_test(region, UCS_MEMCACHE_REGION_REGISTERED) &&
        (cache->params.dereg != NULL)) {
        cache->params.dereg(cache->params.arg, region);
    }
    free(region);
}

static void ucs_memcache_gc(ucs_memcache_t *cache)
{
    ucs_memcache_region_t *region, *next;

    if (__atomic_load_n(&cache->garbage, __ATOMIC_RELAXED) == NULL) {
        return;
    }

    pthread_rwlock_wrlock(&cache->lock);
    region = cache->garbage;
    __atomic_store_n(&cache->garbage, NULL, __ATOMIC_RELAXED);
    pthread_rwlock_unlock(&cache->lock);

    for (; region != NULL; region = next) {
        next = region->next;
        ucs_memcache_region_release(cache, region);
    }
}

static void ucs_memcache_gc_work(ucs_ummunotify_work_t *work)
{
    ucs_memcache_gc(ucs_container_of(work, ucs_memcache_t, gc_work));
}

/* Drop the table's reference. Called with the write lock. */
static int ucs_memcache_unlink(ucs_memcache_t *cache,
                               ucs_memcache_region_t *region)
{
    ucs_memcache_flag_set(region, UCS_MEMCACHE_REGION_INVALID);
    if (!ucs_memcache_flag_test(region, UCS_MEMCACHE_REGION_IN_TABLE)) {
        return 0; /* not inserted yet: the miss path sees INVALID */
    }

    ucs_memcache_remove(cache, region);
    if (__atomic_sub_fetch(&region->refcount, 1, __ATOMIC_ACQ_REL) == 0) {
        region->next = cache->garbage;
        __atomic_store_n(&cache->garbage, region, __ATOMIC_RELAXED);
        return 1;
    }
    return 0;
}

/*
 * SYNC notifier callback, in the monitor (or in the unmapping thread with
 * the ucm engine): unlink only; freeing goes to the worker.
 */
static void ucs_memcache_invalidate_cb(void *arg,
                                       const ucs_ummunotify_event_t *event)
{
    ucs_memcache_t *cache         = arg;
    ucs_memcache_region_t *region = (void*)(uintptr_t)event->cookie;
    int gc;

    pthread_rwlock_wrlock(&cache->lock);
    gc = ucs_memcache_unlink(cache, region);
    ++cache->stats.invalidations;
    pthread_rwlock_unlock(&cache->lock);

    if (gc) {
        ucs_ummunotify_defer(&cache->gc_work);
    }
}

/* fork() hooks, run with the notifier lock held (see ummunotify.h) */
static void ucs_memcache_fork_prepare(void *arg)
{
    ucs_memcache_t *cache = arg;

    pthread_rwlock_wrlock(&cache->lock);
}

static void ucs_memcache_fork_parent(void *arg)
{
    ucs_memcache_t *cache = arg;

    pthread_rwlock_unlock(&cache->lock);
}

/* Nothing is watched in the child: empty the table; the registrations are
 * released by the next get/put/destroy in the child. */
static void ucs_memcache_fork_child(void *arg)
{
    ucs_memcache_t *cache = arg;

    while (cache->table.count > 0) {
        ucs_memcache_unlink(cache,
                            ucs_memcache_region(
                                    cache->table.ranges[cache->table.count - 1]));
    }
    pthread_rwlock_init(&cache->lock, NULL);
}

static void ucs_memcache_atfork_child(void)
{
    if (ucs_memcache_maps_fd >= 0) {
        close(ucs_memcache_maps_fd);
        ucs_memcache_maps_fd = -1;
    }
}

UCS_STATIC_INIT {
    pthread_atfork(NULL, NULL, ucs_memcache_atfork_child);
}

UCS_STATIC_CLEANUP {
    if (ucs_memcache_maps_fd >= 0) {
        close(ucs_memcache_maps_fd);
        ucs_memcache_maps_fd = -1;
    }
}

/* ------------------------------------------------------------------- API */

ucs_status_t ucs_memcache_create(const ucs_memcache_params_t *params,
                                 ucs_memcache_t **cache_p)
{
    ucs_ummunotify_params_t nparams;
    pthread_rwlockattr_t attr;
    ucs_memcache_t *cache;
    ucs_status_t status;

    cache = calloc(1, sizeof(*cache));
    if (cache == NULL) {
        ucs_error("memcache: failed to allocate cache");
        return UCS_ERR_NO_MEMORY;
    }

    cache->params       = *params;
    cache->gc_work.func = ucs_memcache_gc_work;
    snprintf(cache->name, sizeof(cache->name), "%s",
             (params->name != NULL) ? params->name : "memcache");

    /* the monitor is a writer; a stream of readers must not starve it, or
     * every munmap() of watched memory waits with it */
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr,
                                  PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&cache->lock, &attr);
    pthread_rwlockattr_destroy(&attr);

    memset(&nparams, 0, sizeof(nparams));
    nparams.mode         = UCS_UMMUNOTIFY_MODE_SYNC;
    nparams.cb           = ucs_memcache_invalidate_cb;
    nparams.arg          = cache;
    nparams.fork_prepare = ucs_memcache_fork_prepare;
    nparams.fork_parent  = ucs_memcache_fork_parent;
    nparams.fork_child   = ucs_memcache_fork_child;
    status               = ucs_ummunotify_open(&nparams, &cache->notifier);
    if (status != UCS_OK) {
        goto err_free;
    }

    *cache_p = cache;
    return UCS_OK;

err_free:
    pthread_rwlock_destroy(&cache->lock);
    free(cache);
    return status;
}

void ucs_memcache_destroy(ucs_memcache_t *cache)
{
    ucs_memcache_region_t *region;
    size_t leaked = 0;
    int gc;

    for (;;) {
        pthread_rwlock_wrlock(&cache->lock);
        if (cache->table.count == 0) {
            pthread_rwlock_unlock(&cache->lock);
            break;
        }
        region = ucs_memcache_region(
                cache->table.ranges[cache->table.count - 1]);
        gc     = ucs_memcache_unlink(cache, region);
        pthread_rwlock_unlock(&cache->lock);
        if (!gc) {
            ++leaked;
        }
        ucs_memcache_gc(cache);
    }

    /* let a gc already queued on the worker finish, then release the
     * rest here; close() also waits for deferred work */
    ucs_ummunotify_flush();
    ucs_memcache_gc(cache);
    ucs_ummunotify_close(cache->notifier);
    ucs_memcache_gc(cache);

    if (leaked > 0) {
        ucs_warn("memcache %s: %zu regions still held at destroy",
                 cache->name, leaked);
    }

    ucs_range_table_cleanup(&cache->table);
    pthread_rwlock_destroy(&cache->lock);
    free(cache);
}

ucs_status_t ucs_memcache_lookup(ucs_memcache_t *cache, void *address,
                                 size_t length,
                                 ucs_memcache_region_t **region_p)
{
    uintptr_t start = (uintptr_t)address;
    uintptr_t end   = start + length;
    ucs_memcache_region_t *region;
    uint64_t gen;

    for (;;) {
        gen = ucs_ummunotify_read_begin();
        pthread_rwlock_rdlock(&cache->lock);
        region = ucs_memcache_find(cache, start, end);
        if (region != NULL) {
            __atomic_add_fetch(&region->refcount, 1, __ATOMIC_RELAXED);
        }
        pthread_rwlock_unlock(&cache->lock);

        if (ucs_likely(!ucs_ummunotify_read_retry(gen))) {
            break;
        }

        /* an invalidation was applied meanwhile: look again */
        if (region != NULL) {
            ucs_memcache_put(cache, region);
        }
    }

    if (region == NULL) {
        return UCS_ERR_NO_ELEM;
    }

    __atomic_add_fetch(&cache->stats.hits, 1, __ATOMIC_RELAXED);
    *region_p = region;
    return UCS_OK;
}

ucs_status_t ucs_memcache_get(ucs_memcache_t *cache, void *address,
                              size_t length, ucs_memcache_region_t **region_p)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    ucs_memcache_region_t *region, *existing;
    ucs_ummunotify_reg_t *watch;
    ucs_status_t status;
    unsigned attempt;
    void *old;

    if (length == 0) {
        return UCS_ERR_INVALID_PARAM;
    }

    if (ucs_memcache_lookup(cache, address, length, region_p) == UCS_OK) {
        return UCS_OK;
    }

    ucs_memcache_gc(cache);
    __atomic_add_fetch(&cache->stats.misses, 1, __ATOMIC_RELAXED);

    for (attempt = 0; attempt < UCS_MEMCACHE_MISS_RETRIES; ++attempt) {
        region = calloc(1, sizeof(*region));
        if (region == NULL) {
            ucs_error("memcache %s: failed to allocate region", cache->name);
            return UCS_ERR_NO_MEMORY;
        }

        region->range.start    = (uintptr_t)address & ~(page - 1);
        region->range.end      = ((uintptr_t)address + length + page - 1) &
                           ~(page - 1);
        region->refcount = 1; /* the caller's */

        /* Watch first, classify second: a change after the watch starts is
         * reported (and marks the region INVALID); one before it is seen
         * by the classification. */
        status = ucs_ummunotify_register(cache->notifier, (void*)region->range.start,
                                         region->range.end - region->range.start,
                                         (uintptr_t)region, &watch);
        if (status == UCS_ERR_UNSUPPORTED) {
            watch = NULL;
            ucs_memcache_flag_set(region, UCS_MEMCACHE_REGION_UNCACHED);
        } else if (status != UCS_OK) {
            free(region);
            return status;
        }
        region->watch = watch;

        status = ucs_memcache_classify((void*)region->range.start,
                                       region->range.end - region->range.start,
                                       &region->info);
        if (status != UCS_OK) {
            goto err_release;
        }

        if (cache->params.reg != NULL) {
            status = cache->params.reg(cache->params.arg, region);
            if (status != UCS_OK) {
                goto err_release;
            }
            ucs_memcache_flag_set(region, UCS_MEMCACHE_REGION_REGISTERED);
        }

        if (ucs_memcache_flag_test(region, UCS_MEMCACHE_REGION_UNCACHED)) {
            __atomic_add_fetch(&cache->stats.uncached, 1, __ATOMIC_RELAXED);
            *region_p = region;
            return UCS_OK;
        }

        status = ucs_range_table_reserve(&cache->table, ucs_memcache_wrlock,
                                         ucs_memcache_unlock, cache, &old);
        if (status != UCS_OK) {
            goto err_release;
        }

        if (ucs_memcache_flag_test(region, UCS_MEMCACHE_REGION_INVALID)) {
            /* the memory changed while we classified/registered it */
            pthread_rwlock_unlock(&cache->lock);
            free(old);
            ucs_memcache_region_release(cache, region);
            __atomic_add_fetch(&cache->stats.retries, 1, __ATOMIC_RELAXED);
            continue;
        }

        existing = ucs_memcache_find(cache, (uintptr_t)address,
                                     (uintptr_t)address + length);
        if (existing != NULL) {
            /* another thread won the race */
            __atomic_add_fetch(&existing->refcount, 1, __ATOMIC_RELAXED);
            pthread_rwlock_unlock(&cache->lock);
            free(old);
            ucs_memcache_region_release(cache, region);
            *region_p = existing;
            return UCS_OK;
        }

        region->refcount = 2; /* the caller's and the table's */
        ucs_memcache_insert(cache, region);
        pthread_rwlock_unlock(&cache->lock);
        free(old);

        ucs_trace("memcache %s: region 0x%lx..0x%lx %s", cache->name,
                  region->range.start, region->range.end,
                  ucs_memcache_backing_name(region->info.backing));
        *region_p = region;
        return UCS_OK;
    }

    ucs_debug("memcache %s: %p length %zu kept changing during registration",
              cache->name, address, length);
    return UCS_ERR_INVALID_ADDR;

err_release:
    ucs_memcache_flag_set(region, UCS_MEMCACHE_REGION_INVALID);
    ucs_memcache_region_release(cache, region);
    return status;
}

void ucs_memcache_put(ucs_memcache_t *cache, ucs_memcache_region_t *region)
{
    if (__atomic_sub_fetch(&region->refcount, 1, __ATOMIC_ACQ_REL) == 0) {
        /* only dropped (not in the table) regions get here */
        ucs_memcache_region_release(cache, region);
    }
}

int ucs_memcache_region_is_valid(const ucs_memcache_region_t *region)
{
    (void)ucs_ummunotify_read_begin();
    return !(__atomic_load_n(&region->flags, __ATOMIC_ACQUIRE) &
             (UCS_MEMCACHE_REGION_INVALID | UCS_MEMCACHE_REGION_UNCACHED));
}

ucs_status_t ucs_memcache_mem_type(ucs_memcache_t *cache, void *address,
                                   size_t length,
                                   ucs_memory_type_t *mem_type_p)
{
    ucs_memcache_region_t *region;
    ucs_memcache_info_t info;
    ucs_status_t status;

    if (ucs_memcache_lookup(cache, address, length, &region) == UCS_OK) {
        *mem_type_p = region->info.mem_type;
        ucs_memcache_put(cache, region);
        return UCS_OK;
    }

    status      = ucs_memcache_classify(address, length, &info);
    *mem_type_p = info.mem_type;
    return status;
}

void ucs_memcache_get_stats(ucs_memcache_t *cache,
                            ucs_memcache_stats_t *stats_p)
{
    pthread_rwlock_rdlock(&cache->lock);
    *stats_p = cache->stats;
    pthread_rwlock_unlock(&cache->lock);
}
