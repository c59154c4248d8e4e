/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "ummunotify_int.h"

#include <ucs/debug/log_def.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>


/*
 * Pre-report: tell UCM about a range before read() releases the thread that
 * unmaps it.
 *
 * When the userfaultfd is readable, an UNMAP/REMOVE/REMAP event is queued
 * and the thread that caused it sleeps in its system call (munmap, madvise,
 * mremap, mmap(MAP_FIXED), brk) until the event is read. Its arguments are
 * in /proc/self/task/<tid>/syscall: "nr a0 a1 a2 a3 a4 a5 sp pc", in hex
 * after the decimal number, "running" for a task on a run queue, "-1 sp pc"
 * for one that sleeps outside a system call. The kernel takes the task off
 * the CPU before it prints a sleeping task's registers, so a blocked task's
 * arguments are exact. From them the monitor derives the range the call
 * changes and reports it to UCM before read(); the report from the event
 * itself still follows after read().
 *
 * What this relies on:
 *  - The thread sets its sleeping state before the event wakes the monitor,
 *    and the kernel hands events out oldest first. The monitor scans, then
 *    reads one event: that event was queued before the scan, so its thread
 *    was asleep in the call during the scan.
 *  - Reporting a range too early, twice, or for a call that turns out not
 *    to touch watched memory (a thread asleep in munmap() for another
 *    reason, on the mmap lock say) only invalidates more than needed.
 *
 * What it does not cover:
 *  - A thread that is runnable during the scan although its event is
 *    queued: completing an event wakes every thread waiting on an event of
 *    this userfaultfd, and each sleeps again only when it gets a CPU. With
 *    two threads unmapping watched memory at once, the second can be missed;
 *    its range is then reported after read() only, as without the scan.
 *  - process_madvise(): its ranges are behind a pointer (in this process)
 *    or in another process, whose threads are not in our task list.
 *  - brk() issued other than through the C library's sbrk()/brk(): the old
 *    break is taken from sbrk(0), which lags behind such a call.
 * Missed or not, every event is reported after read() as before.
 *
 * Cost: one getdents64 and one pread per thread of the process per event
 * (the files stay open, up to UCS_PREREPORT_MAX_TASKS threads), no
 * allocation, nothing logged above trace.
 */


#define UCS_PREREPORT_MAX_TASKS   256
#define UCS_PREREPORT_MAX_RANGES  16
#define UCS_PREREPORT_MAX_RUNNING 16
#define UCS_PREREPORT_RETRIES     4
#define UCS_PREREPORT_LINE        256  /* a syscall file is < 200 bytes */



typedef struct {
    pid_t tid;
    int   fd;   /* /proc/self/task/<tid>/syscall, -1: not open */
} ucs_prereport_task_t;


static struct {
    int                    dir_fd;    /* /proc/self/task, -1: inactive */
    uintptr_t              page;
    pid_t                  self_tid;  /* the monitor, 0: not known yet */
    unsigned               cur;       /* which of tasks[] is current */
    unsigned               ntasks[2];
    ucs_prereport_task_t   tasks[2][UCS_PREREPORT_MAX_TASKS];
    unsigned               nranges;   /* reported by the last scan */
    ucs_ummunotify_range_t ranges[UCS_PREREPORT_MAX_RANGES];
    unsigned               nrunning;  /* seen running by the last scan */
    int                    running[UCS_PREREPORT_MAX_RUNNING];
    char                   dents[8192] __attribute__((aligned(8)));
} ucs_prereport = {
    .dir_fd = -1
};

ucs_ummunotify_prereport_stats_t ucs_ummunotify_prereport_stats;


static void ucs_prereport_close_tasks(unsigned set)
{
    unsigned i;

    for (i = 0; i < ucs_prereport.ntasks[set]; ++i) {
        if (ucs_prereport.tasks[set][i].fd >= 0) {
            close(ucs_prereport.tasks[set][i].fd);
        }
    }
    ucs_prereport.ntasks[set] = 0;
}

int ucs_ummunotify_prereport_open(void)
{
    ucs_prereport.dir_fd = open("/proc/self/task",
                                O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (ucs_prereport.dir_fd < 0) {
        ucs_debug("notifier: no pre-report, open(/proc/self/task): %m");
        return 0;
    }

    ucs_prereport.page      = sysconf(_SC_PAGESIZE);
    ucs_prereport.self_tid  = 0;
    ucs_prereport.cur       = 0;
    ucs_prereport.ntasks[0] = ucs_prereport.ntasks[1] = 0;
    ucs_prereport.nranges   = 0;
    return 1;
}

void ucs_ummunotify_prereport_close(void)
{
    if (ucs_prereport.dir_fd < 0) {
        return;
    }

    ucs_prereport_close_tasks(0);
    ucs_prereport_close_tasks(1);
    close(ucs_prereport.dir_fd);
    ucs_prereport.dir_fd = -1;
}

static void ucs_prereport_add(uintptr_t start, uintptr_t len)
{
    uintptr_t page = ucs_prereport.page;
    uintptr_t end  = start + len;

    if ((len == 0) || (end < start)) {
        return;
    }

    start &= ~(page - 1);
    end    = (end + page - 1) & ~(page - 1);
    if (end == 0) {
        return;
    }

    ucs_trace("notifier: pre-report 0x%lx..0x%lx", start, end);
    ucs_ummunotify_ucm_report(start, end);
    if (ucs_prereport.nranges < UCS_PREREPORT_MAX_RANGES) {
        ucs_prereport.ranges[ucs_prereport.nranges].start = start;
        ucs_prereport.ranges[ucs_prereport.nranges].end   = end;
        ++ucs_prereport.nranges;
    }
}

/* Report what the system call in 'line' (a syscall file) is changing.
 * Returns nonzero if the task is running. */
static int ucs_prereport_parse(const char *line)
{
    unsigned long a[6];
    uintptr_t brk;
    char *end;
    long nr;
    int i;

    if (line[0] == 'r') {
        return 1; /* "running" */
    }

    if ((line[0] < '0') || (line[0] > '9')) {
        return 0; /* "-1 sp pc": not in a system call */
    }

    nr = strtol(line, &end, 10);
    for (i = 0; i < 6; ++i) {
        line = end;
        a[i] = strtoul(line, &end, 16);
        if (end == line) {
            return 0;
        }
    }

    switch (nr) {
    case SYS_munmap:
        ucs_prereport_add(a[0], a[1]);
        break;
    case SYS_madvise:
        if (ucs_ummunotify_madv_discards((long)a[2])) {
            ucs_prereport_add(a[0], a[1]);
        }
        break;
    case SYS_mremap:
        /* shrink: the tail; move: all of it; MREMAP_FIXED: the target */
        ucs_prereport_add(a[0], a[1]);
        if (a[3] & MREMAP_FIXED) {
            ucs_prereport_add(a[4], a[2]);
        }
        break;
    case SYS_mmap:
        if (a[3] & MAP_FIXED) {
            ucs_prereport_add(a[0], a[1]);
        }
        break;
    case SYS_brk:
        /* the C library updates its break after the call returns */
        brk = (uintptr_t)sbrk(0);
        if ((brk != (uintptr_t)-1) && (a[0] != 0) && (a[0] < brk)) {
            ucs_prereport_add(a[0], brk - a[0]);
        }
        break;
    default:
        break;
    }
    return 0;
}

/* Reads a syscall file into 'line' (UCS_PREREPORT_LINE bytes), terminated.
 * Returns the length, or <= 0 if nothing could be read. */
static ssize_t ucs_prereport_pread(int fd, char *line)
{
    ssize_t len = pread(fd, line, UCS_PREREPORT_LINE - 1, 0);

    if (len > 0) {
        line[len] = '\0';
    }
    return len;
}

static int ucs_prereport_open_task(pid_t tid)
{
    char path[32];

    snprintf(path, sizeof(path), "%d/syscall", (int)tid);
    return openat(ucs_prereport.dir_fd, path, O_RDONLY | O_CLOEXEC);
}

/* Reports what the thread whose syscall file is 'fd' is changing; returns
 * nonzero if it is running. */
static int ucs_prereport_read(int fd)
{
    char line[UCS_PREREPORT_LINE];

    return (ucs_prereport_pread(fd, line) > 0) && ucs_prereport_parse(line);
}

/* The syscall file of 'tid', kept open from the last scan if it was there;
 * the search starts where the last one matched, as tasks keep their order. */
static int ucs_prereport_task_fd(pid_t tid, unsigned *hint, int *cached)
{
    unsigned old = ucs_prereport.cur;
    unsigned n   = ucs_prereport.ntasks[old];
    ucs_prereport_task_t *task;
    unsigned i;
    int fd;

    for (i = 0; i < n; ++i) {
        task = &ucs_prereport.tasks[old][(*hint + i) % n];
        if ((task->tid == tid) && (task->fd >= 0)) {
            fd       = task->fd;
            task->fd = -1; /* moves to the new set */
            *hint    = (*hint + i + 1) % n;
            *cached  = 1;
            return fd;
        }
    }

    *cached = 0;
    return ucs_prereport_open_task(tid);
}

static void ucs_prereport_task(pid_t tid, unsigned *hint)
{
    unsigned new = ucs_prereport.cur ^ 1;
    char line[UCS_PREREPORT_LINE];
    int fd, cached, running;
    ssize_t len;

    fd = ucs_prereport_task_fd(tid, hint, &cached);
    if (fd < 0) {
        return; /* gone meanwhile */
    }

    len = ucs_prereport_pread(fd, line);
    if ((len < 0) && cached) {
        /* the thread that had this tid exited: the file is of a new one */
        close(fd);
        fd = ucs_prereport_open_task(tid);
        if (fd < 0) {
            return;
        }
        len = ucs_prereport_pread(fd, line);
    }

    if (len <= 0) {
        close(fd);
        return;
    }

    running = ucs_prereport_parse(line);

    if (ucs_prereport.ntasks[new] == UCS_PREREPORT_MAX_TASKS) {
        close(fd);
        return;
    }

    ucs_prereport.tasks[new][ucs_prereport.ntasks[new]].tid = tid;
    ucs_prereport.tasks[new][ucs_prereport.ntasks[new]].fd  = fd;
    ++ucs_prereport.ntasks[new];
    if (running && (ucs_prereport.nrunning < UCS_PREREPORT_MAX_RUNNING)) {
        ucs_prereport.running[ucs_prereport.nrunning++] = fd;
    }
}

/*
 * Completing an event wakes every thread that waits on another event of
 * this userfaultfd; each is runnable until it gets a CPU and sleeps again.
 * Read the files of the threads seen running a few more times, giving up
 * the CPU in between, so that such a thread is seen in its call.
 */
static void ucs_prereport_retry_running(void)
{
    unsigned round, i, n;

    for (round = 0; (round < UCS_PREREPORT_RETRIES) &&
                    (ucs_prereport.nrunning > 0); ++round) {
        sched_yield();
        for (i = 0, n = 0; i < ucs_prereport.nrunning; ++i) {
            if (ucs_prereport_read(ucs_prereport.running[i])) {
                ucs_prereport.running[n++] = ucs_prereport.running[i];
            }
        }
        ucs_prereport.nrunning = n;
    }
}

int ucs_ummunotify_prereport_active(void)
{
    return ucs_prereport.dir_fd >= 0;
}

void ucs_ummunotify_prereport(int woken)
{
    unsigned hint = 0;
    struct dirent64 *d;
    ssize_t len, off;
    pid_t tid;

    if (ucs_prereport.self_tid == 0) {
        ucs_prereport.self_tid = gettid();
    }

    ucs_prereport.nranges                       = 0;
    ucs_prereport.nrunning                      = 0;
    ucs_prereport.ntasks[ucs_prereport.cur ^ 1] = 0;
    if (lseek(ucs_prereport.dir_fd, 0, SEEK_SET) < 0) {
        return;
    }

    while ((len = getdents64(ucs_prereport.dir_fd, ucs_prereport.dents,
                             sizeof(ucs_prereport.dents))) > 0) {
        for (off = 0; off < len; off += d->d_reclen) {
            d   = (struct dirent64*)(ucs_prereport.dents + off);
            tid = atoi(d->d_name); /* 0 for "." and ".." */
            if ((tid > 0) && (tid != ucs_prereport.self_tid)) {
                ucs_prereport_task(tid, &hint);
            }
        }
    }

    /* the files of threads that exited */
    ucs_prereport_close_tasks(ucs_prereport.cur);
    ucs_prereport.cur ^= 1;

    if (woken) {
        ucs_prereport_retry_running();
    }

    __atomic_fetch_add(&ucs_ummunotify_prereport_stats.scans, 1,
                       __ATOMIC_RELAXED);
}

void ucs_ummunotify_prereport_check(uintptr_t start, uintptr_t end)
{
    unsigned i;

    for (i = 0; i < ucs_prereport.nranges; ++i) {
        if ((ucs_prereport.ranges[i].start <= start) &&
            (end <= ucs_prereport.ranges[i].end)) {
            __atomic_fetch_add(&ucs_ummunotify_prereport_stats.covered, 1,
                               __ATOMIC_RELAXED);
            return;
        }
    }

    ucs_trace("notifier: 0x%lx..0x%lx was not pre-reported", start, end);
    __atomic_fetch_add(&ucs_ummunotify_prereport_stats.missed, 1,
                       __ATOMIC_RELAXED);
}
