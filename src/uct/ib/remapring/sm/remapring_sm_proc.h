/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifndef UCT_REMAPRING_SM_PROC_H_
#define UCT_REMAPRING_SM_PROC_H_

/*
 * Liveness of the processes at the other end of shared-memory connections.
 * Another process is watched through a pidfd, which also sees a zombie as
 * gone, or by its pid and start time where pidfd_open is unavailable (Linux
 * before 5.3, seccomp filters, valgrind). An interface keeps the pidfds of
 * all its peers in one epoll set, so one system call tells whether any of
 * them exited.
 *
 * Why not UCT's keepalive (uct_ep_keepalive_check): it watches one process
 * per endpoint by its start time, through /proc, at each ep_check. A
 * receiver has no endpoints to its senders, yet must give a dead sender's
 * ring back to its pool; and the shared-memory wire writes into memory
 * that outlives the receiver, so a sender learns of a dead receiver only
 * this way. A pidfd is one fd per process and no /proc read per check.
 */

#include <ucs/datastruct/list.h>
#include <ucs/type/status.h>

#include <sys/types.h>


typedef struct uct_remapring_proc uct_remapring_proc_t;


/** Called from uct_remapring_watch_poll() for a process that exited */
typedef void (*uct_remapring_proc_exit_cb_t)(uct_remapring_proc_t *proc);


/**
 * Another process, watched for its exit; embedded in its owner's state.
 */
struct uct_remapring_proc {
    pid_t pid;
    int pidfd; /* or -1: by pid alone */
    unsigned long start_time; /* without pidfd: pid reuse */
    uct_remapring_proc_exit_cb_t exit_cb; /* or NULL: not in a watch */
    ucs_list_link_t list; /* without pidfd, in watch */
};


/**
 * The processes one interface watches: their pidfds in one epoll set, so
 * that one system call tells whether any of them exited.
 */
typedef struct uct_remapring_watch {
    int epfd;
    ucs_list_link_t by_pid; /* watched without pidfd */
} uct_remapring_watch_t;


/**
 * Make an empty watch.
 */
ucs_status_t uct_remapring_watch_init(uct_remapring_watch_t *watch);


/**
 * Free a watch; every process must have been closed.
 */
void uct_remapring_watch_cleanup(uct_remapring_watch_t *watch);


/**
 * Call the exit callback of every watched process that exited. A callback
 * may close its own process, and no other.
 */
void uct_remapring_watch_poll(uct_remapring_watch_t *watch);


/**
 * Start watching process @a pid; @a exit_cb is called from
 * uct_remapring_watch_poll() once it exited, until the process is closed.
 *
 * @return UCS_OK, or UCS_ERR_UNREACHABLE if it does not exist (not logged).
 */
ucs_status_t uct_remapring_proc_open(uct_remapring_watch_t *watch, pid_t pid,
                                     uct_remapring_proc_exit_cb_t exit_cb,
                                     uct_remapring_proc_t *proc);


/**
 * Whether the process exited (a zombie counts, where a pidfd watches it; a
 * reused pid counts, where the pid alone is watched).
 */
int uct_remapring_proc_exited(const uct_remapring_proc_t *proc);


/**
 * Stop watching.
 */
void uct_remapring_proc_close(uct_remapring_watch_t *watch,
                              uct_remapring_proc_t *proc);

#endif
