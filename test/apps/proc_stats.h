/*
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * What a test program costs the system, read from /proc/self, and the
 * transport's own count of receive pool blocks in use: shared by the
 * programs that watch resources come back (ucp_kill) or stay flat
 * (ucp_hold -S). Header only: each program is built from one source file.
 */
#ifndef REMAPRING_TEST_PROC_STATS_H
#define REMAPRING_TEST_PROC_STATS_H

#include <dirent.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    long rss_kib; /* VmRSS: resident */
    long anon_kib; /* RssAnon: of it, private anonymous memory */
    long shmem_kib; /* RssShmem: of it, shared memory (the memfds) */
    long vmas; /* all mappings (lines of /proc/self/maps) */
    long ring_vmas; /* of them, mappings of the transport's memfds */
    long fold_vmas; /* of them, those the pool's folded pages added */
    long fds; /* open file descriptors */
    long blocks; /* pool blocks in use; -1: the counter was not found */
} proc_stats_t;

/* Entries of a directory, less "." and ".." and the descriptor that reads
 * it; -1 if it cannot be opened */
static inline long proc_stats_count_dir(const char *path)
{
    struct dirent *d;
    long n = 0;
    DIR *dir;

    dir = opendir(path);
    if (dir == NULL) {
        return -1;
    }
    while ((d = readdir(dir)) != NULL) {
        n += (d->d_name[0] != '.');
    }
    closedir(dir);
    return n - 1;
}

/* Open file descriptors of this process */
static inline long proc_stats_fds(void)
{
    return proc_stats_count_dir("/proc/self/fd");
}

/* What proc_stats_vmas() keeps of the mapping before the current one */
typedef struct {
    int           pool; /* a pool memfd's page, or a page folded from one */
    int           folded; /* it ends in a folded page */
    unsigned long end; /* its end address */
    unsigned long inode; /* its pool memfd's inode; 0: not known yet */
    unsigned long off_end; /* offset in that memfd at its end */
} proc_stats_prev_map_t;

/* One line of /proc/self/maps into the count of mappings folding added:
 * a page the pool folded (ring_fold.h) is a mapping of the fold memfd
 * ("memfd:remapring-pool-fold") inside a mapping of the pool memfd
 * ("memfd:remapring-pool"), splitting it. A folded page right after a pool
 * mapping, and a pool mapping right after a folded page (same memfd, the
 * offset going on), would be one mapping without folding. Returns 1 for a
 * line that would not be a mapping of its own, else 0. */
static inline int proc_stats_fold_split(const char *line,
                                        proc_stats_prev_map_t *prev)
{
    unsigned long start, end, off, inode;
    int fold, pool, joins;

    fold = (strstr(line, "memfd:remapring-pool-fold") != NULL);
    pool = !fold && (strstr(line, "memfd:remapring-pool ") != NULL);
    if ((!fold && !pool) ||
        (sscanf(line, "%lx-%lx %*s %lx %*s %lu", &start, &end, &off,
                &inode) != 4)) {
        prev->pool = 0;
        return 0;
    }

    joins = prev->pool && (prev->end == start);
    if (pool) {
        /* a pool mapping joins only a chain that ended in a folded page,
         * of the same memfd where that is known */
        joins = joins && prev->folded &&
                ((prev->inode == 0) ||
                 ((prev->inode == inode) && (prev->off_end == off)));
        prev->inode   = inode;
        prev->off_end = off + (end - start);
    } else if (joins) {
        prev->off_end += end - start;
    } else {
        prev->inode = 0; /* a chain starting with a folded page */
    }
    prev->pool   = 1;
    prev->folded = fold;
    prev->end    = end;
    return joins;
}

/* Mappings of this process, all of them in *all_p and those folding added
 * in *fold_p (each if not NULL); returns those of the transport's memfds
 * (pools, ring views, control areas, folded pages: "memfd:remapring-..."),
 * or -1 if /proc/self/maps cannot be read */
static inline long proc_stats_vmas(long *all_p, long *fold_p)
{
    FILE *f = fopen("/proc/self/maps", "r");
    proc_stats_prev_map_t prev = {0};
    char line[512];
    long n = 0, all = 0, split = 0;
    size_t len;
    int bol = 1;

    if (f == NULL) {
        return -1;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        /* a line longer than the buffer comes in pieces: count it once */
        if (bol) {
            all++;
            n += (strstr(line, "memfd:remapring") != NULL);
            split += proc_stats_fold_split(line, &prev);
        }
        len = strlen(line);
        bol = (len > 0) && (line[len - 1] == '\n');
    }
    fclose(f);
    if (all_p != NULL) {
        *all_p = all;
    }
    if (fold_p != NULL) {
        *fold_p = split;
    }
    return n;
}

/* The module's count of pool blocks in use, process-wide, and their bytes
 * (the one symbol the module exports for tests and tools) */
typedef uint64_t (*proc_stats_pool_used_fn_t)(uint64_t *bytes_p);

/* That function, if the module is loaded (preloaded, or linked); NULL
 * otherwise */
static inline proc_stats_pool_used_fn_t proc_stats_pool_used_fn(void)
{
    return (proc_stats_pool_used_fn_t)dlsym(RTLD_DEFAULT,
                                            "remapring_pool_blocks_in_use");
}

/* RSS and its anonymous and shared parts, in KiB (-1 where unknown) */
static inline void proc_stats_rss(proc_stats_t *s)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];

    s->rss_kib = s->anon_kib = s->shmem_kib = -1;
    if (f == NULL) {
        return;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        sscanf(line, "VmRSS: %ld", &s->rss_kib);
        sscanf(line, "RssAnon: %ld", &s->anon_kib);
        sscanf(line, "RssShmem: %ld", &s->shmem_kib);
    }
    fclose(f);
}

/* Everything above; pool_used from proc_stats_pool_used_fn() or NULL */
static inline void
proc_stats_read(proc_stats_t *s, proc_stats_pool_used_fn_t pool_used)
{
    proc_stats_rss(s);
    s->ring_vmas = proc_stats_vmas(&s->vmas, &s->fold_vmas);
    s->fds       = proc_stats_fds();
    s->blocks    = (pool_used != NULL) ? (long)pool_used(NULL) : -1;
}

#endif
