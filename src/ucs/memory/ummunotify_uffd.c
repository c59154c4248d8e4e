/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "ummunotify_int.h"

#include <ucs/debug/log_def.h>
#include <ucs/sys/compiler_def.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


/*
 * userfaultfd engine.
 *
 * One userfaultfd per process, opened O_NONBLOCK (on a blocking one, poll()
 * reports POLLERR at once and read() then blocks), with the non-cooperative
 * events UNMAP, REMOVE and REMAP and never EVENT_FORK (with it, fork() would
 * wait for us to read a FORK event and hand us a userfaultfd for the child).
 * Ranges are registered in MODE_WP: we never write-protect anything, so no
 * page fault is ever delivered; the registration only makes the kernel tell
 * us about unmaps.
 *
 * Kernel behaviour this code relies on (measured on 6.18):
 *  - munmap(), madvise() and mremap() of a registered range queue an event
 *    and make the caller sleep, uninterruptibly, until the event is read()
 *    from the userfaultfd - read, not applied. The monitor therefore makes
 *    the generation counter odd before read() and even after it applied the
 *    batch: a lookup that starts after munmap() returned either spins on the
 *    odd counter or sees the invalidation applied.
 *  - UNMAP carries the whole munmap() argument, not only the registered part.
 *    mmap(MAP_FIXED) over a registered range gives UNMAP, and the new mapping
 *    is not registered.
 *  - mremap() move gives REMAP(from, to, len) then UNMAP(old); the moved
 *    pages stay registered at 'to'. Shrinking gives UNMAP of the tail.
 *  - madvise(DONTNEED/FREE/REMOVE) gives REMOVE; the mapping stays.
 *  - mprotect, MADV_PAGEOUT, growing in place: no event (nothing to do).
 *  - fallocate(PUNCH_HOLE) and ftruncate() shrink of a memfd: no event.
 *  - The monitor must never unmap registered memory itself (or free() what
 *    might be trimmed): it would wait for itself.
 */


#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY          1
#endif
#ifndef USERFAULTFD_IOC_NEW
#define USERFAULTFD_IOC_NEW          _IO(0xAA, 0x00)
#endif
#ifndef UFFD_FEATURE_WP_HUGETLBFS_SHMEM
#define UFFD_FEATURE_WP_HUGETLBFS_SHMEM (1 << 12)
#endif
#ifndef UFFD_FEATURE_WP_ASYNC
#define UFFD_FEATURE_WP_ASYNC        (1 << 15)
#endif

#define UCS_UFFD_REQUIRED_FEATURES   (UFFD_FEATURE_EVENT_UNMAP | \
                                      UFFD_FEATURE_EVENT_REMOVE | \
                                      UFFD_FEATURE_EVENT_REMAP)
#define UCS_UFFD_OPTIONAL_FEATURES   (UFFD_FEATURE_WP_HUGETLBFS_SHMEM | \
                                      UFFD_FEATURE_WP_ASYNC)
#define UCS_UFFD_READ_BATCH          64


typedef enum {
    UCS_UFFD_MONITOR_IDLE,
    UCS_UFFD_MONITOR_RUNNING,
    UCS_UFFD_MONITOR_STOPPING
} ucs_uffd_monitor_state_t;


static struct {
    int                      fd;
    int                      exit_pipe[2];
    pthread_t                thread;
    ucs_uffd_monitor_state_t state;
    uint64_t                 features;
    uint64_t                 spin_ns;
    int                      prereport;  /* ummunotify_prereport.c */
} ucs_uffd = {
    .fd        = -1,
    .exit_pipe = {-1, -1},
    .state     = UCS_UFFD_MONITOR_IDLE
};


static uint64_t ucs_uffd_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (ts.tv_sec * 1000000000ull) + ts.tv_nsec;
}

/*
 * Open a userfaultfd. UFFD_USER_MODE_ONLY is enough for us (we never handle
 * kernel-mode faults) and is what vm.unprivileged_userfaultfd=0 still allows
 * without CAP_SYS_PTRACE; /dev/userfaultfd is the last resort.
 */
static int ucs_uffd_open_fd(char *why, size_t max)
{
    int flags = O_CLOEXEC | O_NONBLOCK;
    int fd, dev, err;

    fd = syscall(SYS_userfaultfd, flags | UFFD_USER_MODE_ONLY);
    if (fd >= 0) {
        return fd;
    }

    fd = syscall(SYS_userfaultfd, flags);
    if (fd >= 0) {
        return fd;
    }

    err = errno;
    dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
    if (dev >= 0) {
        fd = ioctl(dev, USERFAULTFD_IOC_NEW, flags);
        close(dev);
        if (fd >= 0) {
            return fd;
        }
    }

    snprintf(why, max, "userfaultfd() failed: %s; /dev/userfaultfd: %s",
             strerror(err), strerror(errno));
    return -1;
}

/*
 * UFFDIO_API may be called once per descriptor, so the supported optional
 * features are probed on a throw-away descriptor first.
 */
static ucs_status_t ucs_uffd_open(char *why, size_t max)
{
    struct uffdio_api api;
    uint64_t optional = 0;
    int fd;

    fd = ucs_uffd_open_fd(why, max);
    if (fd < 0) {
        return UCS_ERR_UNSUPPORTED;
    }

    memset(&api, 0, sizeof(api));
    api.api = UFFD_API;
    if (ioctl(fd, UFFDIO_API, &api) == 0) {
        optional = api.features & UCS_UFFD_OPTIONAL_FEATURES;
    }
    close(fd);

    fd = ucs_uffd_open_fd(why, max);
    if (fd < 0) {
        return UCS_ERR_UNSUPPORTED;
    }

    memset(&api, 0, sizeof(api));
    api.api      = UFFD_API;
    api.features = UCS_UFFD_REQUIRED_FEATURES | optional;
    if (ioctl(fd, UFFDIO_API, &api) < 0) {
        snprintf(why, max, "UFFDIO_API(features 0x%llx) failed: %m",
                 (unsigned long long)(UCS_UFFD_REQUIRED_FEATURES | optional));
        close(fd);
        return UCS_ERR_UNSUPPORTED;
    }

    ucs_uffd.fd       = fd;
    ucs_uffd.features = api.features;
    return UCS_OK;
}

/*
 * A write-protect fault can only come from someone else write-protecting our
 * pages through this descriptor, which nobody does; if one ever arrives,
 * resolve it rather than leave a thread asleep forever.
 */
static void ucs_uffd_resolve_fault(const struct uffd_msg *msg)
{
    long page = sysconf(_SC_PAGESIZE);
    struct uffdio_writeprotect wp;

    wp.range.start = msg->arg.pagefault.address & ~(page - 1);
    wp.range.len   = page;
    wp.mode        = 0; /* clear WP and wake the faulting thread */
    ioctl(ucs_uffd.fd, UFFDIO_WRITEPROTECT, &wp);
}

/* Whether an event is queued. */
static int ucs_uffd_readable(void)
{
    struct pollfd pfd = {.fd = ucs_uffd.fd, .events = POLLIN};

    return poll(&pfd, 1, 0) > 0;
}

/*
 * Read and apply what the kernel queued. Returns 1 if there may be more
 * (a full batch was read; with the pre-report: one is queued), 0 if not, -1
 * on a fatal error. 'again': the last call returned 1.
 */
static int ucs_uffd_handle(int again)
{
    struct uffd_msg msgs[UCS_UFFD_READ_BATCH];
    ucs_ummunotify_range_t report[UCS_UFFD_READ_BATCH];
    unsigned i, r, count, nreport = 0;
    ucs_ummunotify_event_type_t type;
    size_t batch;
    ssize_t ret;

    /*
     * With the pre-report, UCM learns the range from the arguments of the
     * blocked call before read() lets it return. Then read one event at a
     * time: the oldest one, queued before the scan, so its thread was seen
     * asleep in the call (see ummunotify_prereport.c).
     */
    if (ucs_uffd.prereport) {
        ucs_ummunotify_prereport(again);
        batch = 1;
    } else {
        batch = UCS_UFFD_READ_BATCH;
    }

    /* odd before read(): the munmap() caller is released by the read */
    ucs_ummunotify_seq_begin();

    ret = read(ucs_uffd.fd, msgs, batch * sizeof(msgs[0]));
    if (ret < 0) {
        ucs_ummunotify_seq_end();
        if ((errno == EAGAIN) || (errno == EINTR)) {
            /* poll() woke us for an event another reader took, or for
             * a fault that was resolved meanwhile: nothing to do */
            return 0;
        }
        ucs_error("notifier: read(userfaultfd) failed: %m");
        return -1;
    }

    count = ret / sizeof(msgs[0]);

    /*
     * UCS caches do not look at our counter: for them, the window between
     * read() (which lets munmap() return) and ucm_vm_munmap() is not
     * closed, only kept short. So report to UCM first, then apply to our
     * own clients, whose readers the odd counter holds back meanwhile.
     * UCM handlers run without our lock (they may allocate).
     */
    for (i = 0; i < count; ++i) {
        switch (msgs[i].event) {
        case UFFD_EVENT_UNMAP:
        case UFFD_EVENT_REMOVE:
            report[nreport].start = msgs[i].arg.remove.start;
            report[nreport].end   = msgs[i].arg.remove.end;
            ++nreport;
            break;
        case UFFD_EVENT_REMAP:
            /* the pages left [from, from + len); 'to' stays registered
             * with no registration of ours (a later unmap there is
             * reported for nobody) */
            report[nreport].start = msgs[i].arg.remap.from;
            report[nreport].end   = msgs[i].arg.remap.from +
                                    msgs[i].arg.remap.len;
            ++nreport;
            break;
        case UFFD_EVENT_PAGEFAULT:
            ucs_uffd_resolve_fault(&msgs[i]);
            break;
        default:
            break;
        }
    }

    if (ucs_uffd.prereport) {
        for (i = 0; i < nreport; ++i) {
            ucs_ummunotify_prereport_check(report[i].start, report[i].end);
        }
    }

    if (ucs_ummunotify_config.ucm_report) {
        for (i = 0; i < nreport; ++i) {
            ucs_ummunotify_ucm_report(report[i].start, report[i].end);
        }
    }

    ucs_ummunotify_lock();
    for (i = 0, r = 0; i < count; ++i) {
        switch (msgs[i].event) {
        case UFFD_EVENT_UNMAP:
            type = UCS_UMMUNOTIFY_EVENT_UNMAP;
            break;
        case UFFD_EVENT_REMOVE:
            type = UCS_UMMUNOTIFY_EVENT_REMOVE;
            break;
        case UFFD_EVENT_REMAP:
            type = UCS_UMMUNOTIFY_EVENT_REMAP;
            break;
        default:
            continue;
        }
        ucs_ummunotify_apply(type, report[r].start, report[r].end);
        ++r;
    }
    ucs_ummunotify_unlock();

    ucs_ummunotify_seq_end();
    if (ucs_uffd.prereport) {
        return ucs_uffd_readable();
    }
    return (count == UCS_UFFD_READ_BATCH);
}

static void *ucs_uffd_monitor(void *arg)
{
    uint64_t spin_until = 0;
    struct pollfd pfd[2];
    int timeout, ret;

    pfd[0].fd     = ucs_uffd.fd;
    pfd[0].events = POLLIN;
    pfd[1].fd     = ucs_uffd.exit_pipe[0];
    pfd[1].events = POLLIN;

    for (;;) {
        /*
         * The wake-up of a sleeping monitor is most of what a munmap() of
         * watched memory costs; events come in bursts, so stay awake
         * (poll with zero timeout) for spin_ns after the last one.
         */
        timeout = ((spin_until != 0) && (ucs_uffd_now_ns() < spin_until)) ?
                  0 : -1;
        ret     = poll(pfd, 2, timeout);
        if (ret < 0) {
            if (errno == EINTR) {
                continue;
            }
            ucs_error("notifier: poll(userfaultfd) failed: %m");
            break;
        }

        if (pfd[1].revents != 0) {
            break; /* stop() */
        }

        if (ret == 0) {
            continue;
        }

        if (pfd[0].revents & (POLLERR | POLLHUP | POLLNVAL)) {
            ucs_error("notifier: userfaultfd poll events 0x%x",
                      pfd[0].revents);
            break;
        }

        /* drain everything queued, then spin */
        ret = 0;
        do {
            ret = ucs_uffd_handle(ret);
        } while (ret > 0);
        if (ret < 0) {
            break;
        }

        if (ucs_uffd.spin_ns != 0) {
            spin_until = ucs_uffd_now_ns() + ucs_uffd.spin_ns;
        }
    }

    return NULL;
}

static ucs_status_t ucs_uffd_start(char *why, size_t max)
{
    sigset_t all, old;
    cpu_set_t cpus;
    ucs_status_t status;
    int ret;

    status = ucs_uffd_open(why, max);
    if (status != UCS_OK) {
        return status;
    }

    if (pipe2(ucs_uffd.exit_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
        snprintf(why, max, "pipe2() failed: %m");
        status = UCS_ERR_IO_ERROR;
        goto err_close_fd;
    }

    ucs_uffd.spin_ns = (uint64_t)(ucs_ummunotify_config.spin * 1e9);

    /* with UCM's hooks on, UCM reports before the unmap: nothing to gain */
    ucs_uffd.prereport = ucs_ummunotify_config.ucm_report &&
                         ucs_ummunotify_ucm_is_external() &&
                         ucs_ummunotify_prereport_open();

    /* no signal handler may run on the monitor: one that unmaps watched
     * memory would deadlock it */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    ret = pthread_create(&ucs_uffd.thread, NULL, ucs_uffd_monitor, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (ret != 0) {
        snprintf(why, max, "pthread_create() failed: %s", strerror(ret));
        status = UCS_ERR_IO_ERROR;
        goto err_close_pipe;
    }

    if (ucs_ummunotify_config.cpu >= 0) {
        CPU_ZERO(&cpus);
        CPU_SET(ucs_ummunotify_config.cpu, &cpus);
        ret = pthread_setaffinity_np(ucs_uffd.thread, sizeof(cpus), &cpus);
        if (ret != 0) {
            ucs_diag("notifier: failed to pin monitor to cpu %d: %s",
                     ucs_ummunotify_config.cpu, strerror(ret));
        }
    }

    ucs_uffd.state = UCS_UFFD_MONITOR_RUNNING;
    snprintf(why, max, "fd %d features 0x%llx spin %llu ns%s%s",
             ucs_uffd.fd, (unsigned long long)ucs_uffd.features,
             (unsigned long long)ucs_uffd.spin_ns,
             (ucs_uffd.features & UFFD_FEATURE_WP_ASYNC) ?
             ", file mappings watchable" : "",
             ucs_uffd.prereport ? ", pre-report to ucm" : "");
    return UCS_OK;

err_close_pipe:
    ucs_ummunotify_prereport_close();
    ucs_uffd.prereport = 0;
    close(ucs_uffd.exit_pipe[0]);
    close(ucs_uffd.exit_pipe[1]);
    ucs_uffd.exit_pipe[0] = ucs_uffd.exit_pipe[1] = -1;
err_close_fd:
    close(ucs_uffd.fd);
    ucs_uffd.fd = -1;
    return status;
}

/* Closes the userfaultfd, the exit pipe and the pre-report's files; the
 * monitor thread must not run. */
static void ucs_uffd_release(void)
{
    close(ucs_uffd.fd);
    close(ucs_uffd.exit_pipe[0]);
    close(ucs_uffd.exit_pipe[1]);
    ucs_ummunotify_prereport_close();
    ucs_uffd.fd           = -1;
    ucs_uffd.exit_pipe[0] = ucs_uffd.exit_pipe[1] = -1;
    ucs_uffd.prereport    = 0;
    ucs_uffd.state        = UCS_UFFD_MONITOR_IDLE;
}

static void ucs_uffd_stop(void)
{
    char c = 0;

    if (ucs_uffd.state != UCS_UFFD_MONITOR_RUNNING) {
        return;
    }

    ucs_uffd.state = UCS_UFFD_MONITOR_STOPPING;
    if (write(ucs_uffd.exit_pipe[1], &c, 1) < 0) {
        ucs_error("notifier: failed to wake monitor: %m");
    }
    pthread_join(ucs_uffd.thread, NULL);

    /* Closing the last reference releases the context: the kernel clears
     * every VMA's registration and wakes whoever still waits on an event. */
    ucs_uffd_release();
}

static ucs_status_t ucs_uffd_subscribe(uintptr_t start, uintptr_t end)
{
    struct uffdio_register reg;

    memset(&reg, 0, sizeof(reg));
    reg.range.start = start;
    reg.range.len   = end - start;
    reg.mode        = UFFDIO_REGISTER_MODE_WP;
    if (ioctl(ucs_uffd.fd, UFFDIO_REGISTER, &reg) == 0) {
        return UCS_OK;
    }

    /* ENOMEM: a hole in the range; EINVAL: a mapping the kernel can't watch
     * in WP mode (file without WP_ASYNC, VM_PFNMAP, ...); EBUSY: another
     * userfaultfd watches it. Not fatal for the caller: debug level. */
    ucs_debug("notifier: UFFDIO_REGISTER(0x%lx..0x%lx) failed: %m", start,
              end);
    return (errno == ENOMEM) ? UCS_ERR_INVALID_ADDR : UCS_ERR_UNSUPPORTED;
}

static void ucs_uffd_unsubscribe(uintptr_t start, uintptr_t end)
{
    struct uffdio_range range;

    range.start = start;
    range.len   = end - start;
    if (ioctl(ucs_uffd.fd, UFFDIO_UNREGISTER, &range) < 0) {
        /* the range may be gone or replaced: nothing left to unwatch */
        ucs_trace("notifier: UFFDIO_UNREGISTER(0x%lx..0x%lx): %m", start,
                  end);
    }
}

static int ucs_uffd_fork_child(void)
{
    /* the monitor thread does not exist here; the descriptors are the
     * parent's */
    ucs_uffd_release();
    return 0;
}

const ucs_ummunotify_ops_t ucs_ummunotify_uffd_ops = {
    .name        = "uffd",
    .type        = UCS_UMMUNOTIFY_ENGINE_UFFD,
    .start       = ucs_uffd_start,
    .stop        = ucs_uffd_stop,
    .subscribe   = ucs_uffd_subscribe,
    .unsubscribe = ucs_uffd_unsubscribe,
    .fork_child  = ucs_uffd_fork_child
};
