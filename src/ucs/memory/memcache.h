/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef UCS_MEMCACHE_H_
#define UCS_MEMCACHE_H_

/*
 * Memtype/registration cache kept coherent by the notifier.
 *
 * Maps an address range to what backs it (memory type, anonymous / memfd +
 * offset / hugetlb / file) and to a memory domain's registration of it. A
 * miss classifies the range (PROCMAP_QUERY ioctl on kernels that have it,
 * /proc/self/maps otherwise), asks the notifier to watch it, and calls the
 * user's registration callback. Any change the kernel reports for the range
 * (munmap, MAP_FIXED over, mremap, madvise DONTNEED/FREE/REMOVE, brk
 * shrink) drops the entry before munmap() returns to its caller; the
 * deregistration callback then runs, outside the notifier's monitor, once
 * the last user has put the region.
 *
 * Why not ucs_rcache: UCS's registration cache learns of unmaps only from
 * UCM's VM_UNMAPPED event, that is from UCM's hooks (binary patching of
 * mmap/munmap/madvise/brk, which fails with static binaries and some
 * allocators) or from an external source declared before it is made; with
 * neither it refuses to be created. This cache asks the notifier to watch
 * exactly the ranges it holds, and the kernel reports their changes whatever
 * the process's hooks, before munmap() returns. It also keeps what backs a
 * range (memory type, memfd and offset), which answers detect_memory_type
 * without a system call; ucs_rcache keeps the registration alone. The two
 * work together: what the notifier reports also goes to UCM
 * (ucm_bridge.c), so UCS's own caches drop those ranges too.
 *
 * Costs: a hit is a read lock, a binary search and one atomic increment: no
 * system call. A miss costs the classification (one ioctl per VMA), one
 * UFFDIO_REGISTER, and the registration callback.
 *
 * Thread safety: every function may be called from any thread. The
 * callbacks are called without any cache lock held: reg from the thread
 * calling ucs_memcache_get(); dereg from the thread dropping the last
 * reference (ucs_memcache_put(), ucs_memcache_destroy()) or from the
 * notifier's worker thread (entries dropped because the kernel reported a
 * change). Callbacks may allocate, free and unmap memory; they must not
 * call ucs_memcache_ functions on the same cache.
 *
 * Typical use by a memory domain:
 *
 *   mem_reg(address, length):
 *       ucs_memcache_get(cache, address, length, &region);
 *       memh = region->memh;        // what reg_cb stored
 *       ... hand region to the user as the memh ...
 *   mem_dereg(region):
 *       ucs_memcache_put(cache, region);
 *   detect_mem_type(address, length):
 *       ucs_memcache_mem_type(cache, address, length, &mem_type);
 */

#include <ucs/memory/memory_type.h>
#include <ucs/memory/range_table.h>
#include <ucs/type/status.h>
#include <ucs/sys/compiler_def.h>
#include <stddef.h>
#include <stdint.h>

BEGIN_C_DECLS


typedef struct ucs_memcache        ucs_memcache_t;
typedef struct ucs_memcache_region ucs_memcache_region_t;


/**
 * What backs a range.
 */
typedef enum {
    UCS_MEMCACHE_BACKING_ANON,    /**< private anonymous, heap, stack */
    UCS_MEMCACHE_BACKING_MEMFD,   /**< memfd or other shmem: 'offset' valid */
    UCS_MEMCACHE_BACKING_HUGETLB, /**< hugetlbfs / MAP_HUGETLB: 'offset' */
    UCS_MEMCACHE_BACKING_FILE,    /**< regular file: 'offset' valid */
    UCS_MEMCACHE_BACKING_LAST
} ucs_memcache_backing_t;


/**
 * Classification flags.
 */
enum {
    UCS_MEMCACHE_INFO_FLAG_SHARED = UCS_BIT(0), /**< MAP_SHARED */
    UCS_MEMCACHE_INFO_FLAG_MIXED  = UCS_BIT(1)  /**< the range spans
                                                     mappings of different
                                                     backing; the info
                                                     describes the first */
};


/**
 * Classification of a range.
 */
typedef struct {
    ucs_memory_type_t      mem_type;  /**< UCS_MEMORY_TYPE_HOST when mapped */
    ucs_memcache_backing_t backing;   /**< what backs the range */
    uint64_t               offset;    /**< file/memfd offset of the range
                                           start (not for ANON) */
    uint64_t               inode;     /**< backing inode, 0 for ANON */
    uint32_t               dev_major; /**< backing device */
    uint32_t               dev_minor; /**< backing device */
    size_t                 page_size; /**< kernel page size of the mapping */
    int                    prot;      /**< PROT_READ/WRITE/EXEC of first */
    unsigned               flags;     /**< UCS_MEMCACHE_INFO_FLAG_xx */
} ucs_memcache_info_t;


/**
 * A cached region. The public part is read-only for the user, except
 * 'memh', which the registration callback fills.
 */
struct ucs_memcache_region {
    ucs_range_t           range;    /**< page aligned, end exclusive */
    ucs_memcache_info_t   info;     /**< classification */
    void                  *memh;    /**< memory domain's registration */

    /* private */
    volatile uint32_t     refcount;
    volatile uint32_t     flags;
    void                  *watch;
    ucs_memcache_region_t *next;
};


/**
 * Register a region with the memory domain. Fill region->memh.
 *
 * @return UCS_OK, or an error that ucs_memcache_get() returns as is.
 */
typedef ucs_status_t (*ucs_memcache_reg_cb_t)(void *arg,
                                              ucs_memcache_region_t *region);


/**
 * Deregister a region registered by the callback above.
 */
typedef void (*ucs_memcache_dereg_cb_t)(void *arg,
                                        ucs_memcache_region_t *region);


/**
 * Cache parameters.
 */
typedef struct {
    const char              *name;   /**< for logs */
    ucs_memcache_reg_cb_t   reg;     /**< may be NULL: type cache only */
    ucs_memcache_dereg_cb_t dereg;   /**< may be NULL */
    void                    *arg;    /**< passed to the callbacks */
} ucs_memcache_params_t;


/**
 * Counters, for tests and benchmarks.
 */
typedef struct {
    uint64_t hits;          /**< lookups served from the cache */
    uint64_t misses;        /**< lookups that classified and registered */
    uint64_t invalidations; /**< entries dropped on a kernel report */
    uint64_t retries;       /**< misses that raced with an invalidation */
    uint64_t uncached;      /**< regions the kernel could not watch */
} ucs_memcache_stats_t;


/**
 * Create a cache. Opens a notifier client (starting the engine if needed).
 *
 * @param [in]  params   Parameters (copied).
 * @param [out] cache_p  Filled with the cache.
 */
ucs_status_t ucs_memcache_create(const ucs_memcache_params_t *params,
                                 ucs_memcache_t **cache_p);


/**
 * Destroy a cache: deregister every region nobody holds. Regions still held
 * are reported and leaked.
 *
 * @param [in] cache  Cache to destroy.
 */
void ucs_memcache_destroy(ucs_memcache_t *cache);


/**
 * Find a region covering [address, address + length), or create one: a
 * miss classifies, watches and registers the page-aligned range. Takes a
 * reference; release it with @ref ucs_memcache_put.
 *
 * If the kernel cannot watch the memory (e.g. a device mapping), the region
 * is still classified and registered but not cached: each get makes a new
 * one, dropped by its last put.
 *
 * @param [in]  cache     Cache.
 * @param [in]  address   Start of the buffer.
 * @param [in]  length    Length of the buffer, > 0.
 * @param [out] region_p  Filled with the region.
 *
 * @return UCS_OK; UCS_ERR_INVALID_ADDR if part of the range is not mapped
 *         (or it kept changing under us); the reg callback's error.
 */
ucs_status_t ucs_memcache_get(ucs_memcache_t *cache, void *address,
                              size_t length, ucs_memcache_region_t **region_p);


/**
 * Hit-only lookup: like @ref ucs_memcache_get but never creates a region.
 * No system call.
 *
 * @return UCS_OK with a reference taken, or UCS_ERR_NO_ELEM.
 */
ucs_status_t ucs_memcache_lookup(ucs_memcache_t *cache, void *address,
                                 size_t length,
                                 ucs_memcache_region_t **region_p);


/**
 * Release a reference taken by get/lookup. The last reference of a region
 * that has been dropped from the cache deregisters and frees it.
 *
 * @param [in] cache   Cache.
 * @param [in] region  Region.
 */
void ucs_memcache_put(ucs_memcache_t *cache, ucs_memcache_region_t *region);


/**
 * @return Nonzero while the region is in the cache, zero once the kernel
 *         reported a change to it (its memh must no longer be used for new
 *         operations). One load.
 */
int ucs_memcache_region_is_valid(const ucs_memcache_region_t *region);


/**
 * Memory type of a buffer: from the cache on a hit, else by classifying it
 * (one ioctl, nothing cached).
 *
 * @param [out] mem_type_p  UCS_MEMORY_TYPE_HOST for mapped memory.
 *
 * @return UCS_OK or UCS_ERR_INVALID_ADDR (not mapped).
 */
ucs_status_t ucs_memcache_mem_type(ucs_memcache_t *cache, void *address,
                                   size_t length,
                                   ucs_memory_type_t *mem_type_p);


/**
 * Classify a range without caching it (PROCMAP_QUERY or /proc/self/maps).
 *
 * @param [in]  address  Start.
 * @param [in]  length   Length, > 0.
 * @param [out] info_p   Classification of the range.
 *
 * @return UCS_OK, or UCS_ERR_INVALID_ADDR if part of it is not mapped.
 */
ucs_status_t ucs_memcache_classify(void *address, size_t length,
                                   ucs_memcache_info_t *info_p);


/**
 * @return Name of a backing kind ("anon", "memfd", "hugetlb", "file").
 */
const char *ucs_memcache_backing_name(ucs_memcache_backing_t backing);


/**
 * Read the cache's counters.
 */
void ucs_memcache_get_stats(ucs_memcache_t *cache,
                            ucs_memcache_stats_t *stats_p);

END_C_DECLS

#endif
