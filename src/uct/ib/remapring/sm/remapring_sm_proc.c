/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "remapring_sm_proc.h"

#include <ucs/debug/log.h>
#include <ucs/sys/sys.h>

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>


/* Most exits taken from the epoll set per poll; the rest wait for the
 * next one */
#define UCT_REMAPRING_WATCH_BATCH 16


ucs_status_t uct_remapring_watch_init(uct_remapring_watch_t *watch)
{
    watch->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (watch->epfd < 0) {
        ucs_error("epoll_create1() failed: %m");
        return UCS_ERR_IO_ERROR;
    }

    ucs_list_head_init(&watch->by_pid);
    return UCS_OK;
}

void uct_remapring_watch_cleanup(uct_remapring_watch_t *watch)
{
    close(watch->epfd);
}

void uct_remapring_watch_poll(uct_remapring_watch_t *watch)
{
    struct epoll_event events[UCT_REMAPRING_WATCH_BATCH];
    uct_remapring_proc_t *proc, *tmp;
    int i, n;

    /* a pidfd reads ready once its process exited, and stays so */
    n = epoll_wait(watch->epfd, events, UCT_REMAPRING_WATCH_BATCH, 0);
    for (i = 0; i < n; ++i) {
        proc = events[i].data.ptr;
        proc->exit_cb(proc);
    }

    ucs_list_for_each_safe(proc, tmp, &watch->by_pid, list) {
        if (uct_remapring_proc_exited(proc)) {
            proc->exit_cb(proc);
        }
    }
}

ucs_status_t uct_remapring_proc_open(uct_remapring_watch_t *watch, pid_t pid,
                                     uct_remapring_proc_exit_cb_t exit_cb,
                                     uct_remapring_proc_t *proc)
{
    struct epoll_event event;

    proc->pid        = pid;
    proc->exit_cb    = exit_cb;
    proc->start_time = 0;
    proc->pidfd      = syscall(SYS_pidfd_open, pid, 0);
    if (proc->pidfd >= 0) {
        event.events   = EPOLLIN;
        event.data.ptr = proc;
        if (epoll_ctl(watch->epfd, EPOLL_CTL_ADD, proc->pidfd, &event) == 0) {
            return UCS_OK;
        }

        ucs_debug("epoll_ctl(pidfd of pid %d) failed: %m", pid);
        close(proc->pidfd);
        proc->pidfd = -1;
    } else if (errno == ESRCH) {
        return UCS_ERR_UNREACHABLE;
    }

    /* no pidfd_open (Linux before 5.3, seccomp, valgrind): watch the pid,
     * and its start time to tell a reused pid */
    proc->start_time = ucs_sys_get_proc_create_time(pid);
    if (proc->start_time == 0) {
        return UCS_ERR_UNREACHABLE;
    }

    ucs_list_add_tail(&watch->by_pid, &proc->list);
    return UCS_OK;
}

int uct_remapring_proc_exited(const uct_remapring_proc_t *proc)
{
    struct pollfd pfd;

    if (proc->pidfd >= 0) {
        pfd.fd      = proc->pidfd;
        pfd.events  = POLLIN;
        pfd.revents = 0;
        return (poll(&pfd, 1, 0) == 1) && (pfd.revents & POLLIN);
    }

    return ((kill(proc->pid, 0) < 0) && (errno == ESRCH)) ||
           (ucs_sys_get_proc_create_time(proc->pid) != proc->start_time);
}

void uct_remapring_proc_close(uct_remapring_watch_t *watch,
                              uct_remapring_proc_t *proc)
{
    if (proc->pidfd >= 0) {
        /* explicitly: a fork child's copy of the pidfd would keep it in the
         * epoll set after close() */
        epoll_ctl(watch->epfd, EPOLL_CTL_DEL, proc->pidfd, NULL);
        close(proc->pidfd);
        proc->pidfd = -1;
    } else if (proc->start_time != 0) {
        ucs_list_del(&proc->list);
        proc->start_time = 0;
    }
}
