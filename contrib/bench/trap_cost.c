/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * trap_cost: what the kernel's ways of stopping a process's munmap() cost by
 * themselves, with nothing reported: the floor under any source of unmap
 * events built on them (contrib/bench/unmap_cost.sh prints it first).
 * Each way runs in a child of its own (a seccomp filter cannot be taken
 * back), which times munmap() of a touched LEN-byte mapping without the
 * filter, then installs it and times the same again:
 *   allow    a filter that lets every call through: the filter's own cost
 *   trap     SECCOMP_RET_TRAP: the kernel sends the calling thread SIGSYS,
 *            whose handler issues the call again from one instruction the
 *            filter lets through, and returns its result; an interception
 *            in the unmapping thread, without patching any library
 *   notify   SECCOMP_RET_USER_NOTIF with a supervisor thread that only
 *            reads each notification and answers CONTINUE (with
 *            SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP where the kernel has it,
 *            Linux 6.6: the same-CPU switch the seccomp source uses)
 * Prints per way the p50 and p99 in microseconds without and with the
 * filter, and what the filter adds at the median.
 *
 * usage: trap_cost [-n ITERS] [-s LEN] [allow|trap|notify ...]
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

#include <ucs/memory/seccomp_compat.h>

#include "bench_time.h"

#define FILTER_LEN 9

#if defined(__x86_64__)
/* trap_syscall(nr, a0, ..., a5): the one system call instruction the trap
 * filter lets through; trap_syscall_ip, the address the kernel reports for
 * it (seccomp_compat.h) */
REMAPRING_SECCOMP_SYSCALL_ASM(trap_syscall, ".globl");
long trap_syscall(long nr, long a0, long a1, long a2, long a3, long a4,
                  long a5);
extern const char trap_syscall_ip[];

static void trap_handler(int sig, siginfo_t *si, void *arg)
{
    greg_t *r = ((ucontext_t*)arg)->uc_mcontext.gregs;

    (void)sig;
    r[REG_RAX] = trap_syscall(si->si_syscall, r[REG_RDI], r[REG_RSI],
                              r[REG_RDX], r[REG_R10], r[REG_R8], r[REG_R9]);
}
#  define HAVE_TRAP 1
#else
#  define HAVE_TRAP 0
#endif

static unsigned iters = 20000;
static size_t len     = 4096;

static void time_munmap(uint64_t *t)
{
    unsigned i;
    uint64_t t0;
    char *p;

    for (i = 0; i < iters; ++i) {
        p = mmap(NULL, len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            perror("trap_cost: mmap");
            exit(1);
        }
        memset(p, 1, len);
        t0 = now_ns();
        if (munmap(p, len) != 0) {
            perror("trap_cost: munmap");
            exit(1);
        }
        t[i] = now_ns() - t0;
    }
    qsort(t, iters, sizeof(*t), cmp_u64);
}

/* every call but munmap() passes; munmap() gets ACTION, or passes when
 * made from the instruction at IP (ip 0: no such instruction); the
 * listener's fd, 0, or -1 with errno set */
static int install(unsigned action, unsigned long ip, unsigned flags)
{
    struct sock_filter f[FILTER_LEN] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_munmap, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                 offsetof(struct seccomp_data, instruction_pointer)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)ip, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                 offsetof(struct seccomp_data, instruction_pointer) + 4),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)(ip >> 32), 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, action)
    };
    struct sock_fprog prog = {FILTER_LEN, f};

    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        perror("trap_cost: PR_SET_NO_NEW_PRIVS");
        exit(1);
    }
    return syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog);
}

static void *supervisor(void *arg)
{
    int fd = *(int*)arg;
    struct seccomp_notif req;
    struct seccomp_notif_resp resp;

    for (;;) {
        memset(&req, 0, sizeof(req));
        if (ioctl(fd, SECCOMP_IOCTL_NOTIF_RECV, &req) != 0) {
            if (errno == EINTR || errno == ENOENT) {
                continue;
            }
            perror("trap_cost: SECCOMP_IOCTL_NOTIF_RECV");
            exit(1);
        }
        memset(&resp, 0, sizeof(resp));
        resp.id    = req.id;
        resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
        ioctl(fd, SECCOMP_IOCTL_NOTIF_SEND, &resp); /* ENOENT: caller gone */
    }
    return NULL;
}

/* in the child: install WAY; 0, or 2 when this kernel or arch lacks it */
static int setup(const char *way, char *note, size_t max)
{
    static int fd; /* the supervisor's, for the child's whole life */
    struct sigaction sa;
    pthread_t thread;

    if (!strcmp(way, "allow")) {
        if (install(SECCOMP_RET_ALLOW, 0, 0) != 0) {
            snprintf(note, max, "no filter: %s", strerror(errno));
            return 2;
        }
        return 0;
    }
    if (!strcmp(way, "trap")) {
#if HAVE_TRAP
        memset(&sa, 0, sizeof(sa));
        sa.sa_sigaction = trap_handler;
        sa.sa_flags     = SA_SIGINFO;
        sigaction(SIGSYS, &sa, NULL);
        if (install(SECCOMP_RET_TRAP, (unsigned long)trap_syscall_ip, 0)) {
            snprintf(note, max, "no filter: %s", strerror(errno));
            return 2;
        }
        return 0;
#else
        snprintf(note, max, "not on this architecture");
        return 2;
#endif
    }
    fd = install(SECCOMP_RET_USER_NOTIF, 0, SECCOMP_FILTER_FLAG_NEW_LISTENER);
    if (fd < 0) {
        snprintf(note, max, "no listener: %s", strerror(errno));
        return 2;
    }
    snprintf(note, max, "%s-CPU wake-up",
             ioctl(fd, SECCOMP_IOCTL_NOTIF_SET_FLAGS,
                   SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP) ? "cross" : "same");
    if (pthread_create(&thread, NULL, supervisor, &fd) != 0) {
        fprintf(stderr, "trap_cost: no supervisor thread\n");
        return 1;
    }
    return 0;
}

static int run(const char *way)
{
    uint64_t *before = calloc(iters, sizeof(*before));
    uint64_t *after  = calloc(iters, sizeof(*after));
    char note[64]    = "";
    int ret;

    if ((before == NULL) || (after == NULL)) {
        fprintf(stderr, "trap_cost: no memory\n");
        return 1;
    }
    time_munmap(before);
    ret = setup(way, note, sizeof(note));
    if (ret == 2) {
        printf("%-7s skipped: %s\n", way, note);
        return 0;
    } else if (ret != 0) {
        return 1;
    }
    time_munmap(after);
    printf("%-7s without p50_us=%.2f p99_us=%.2f  with p50_us=%.2f "
           "p99_us=%.2f  added_us=%.2f%s%s\n", way, before[iters / 2] / 1e3,
           before[(size_t)iters * 99 / 100] / 1e3, after[iters / 2] / 1e3,
           after[(size_t)iters * 99 / 100] / 1e3,
           ((double)after[iters / 2] - (double)before[iters / 2]) / 1e3,
           note[0] ? "  " : "", note);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    static const char *all[] = {"allow", "trap", "notify"};
    const char **ways        = all;
    int nways = 3, c, i, status;
    pid_t pid;

    while ((c = getopt(argc, argv, "n:s:h")) != -1) {
        switch (c) {
        case 'n':
            iters = strtoul(optarg, NULL, 0);
            break;
        case 's':
            len = strtoul(optarg, NULL, 0);
            break;
        default:
            fprintf(stderr, "usage: trap_cost [-n ITERS] [-s LEN] "
                            "[allow|trap|notify ...]\n");
            return 2;
        }
    }
    if ((iters < 2) || (len == 0)) {
        fprintf(stderr, "trap_cost: -n must be 2 or more, -s above 0\n");
        return 2;
    }
    if (optind < argc) {
        ways  = (const char**)&argv[optind];
        nways = argc - optind;
    }
    for (i = 0; i < nways; ++i) {
        if (strcmp(ways[i], "allow") && strcmp(ways[i], "trap") &&
            strcmp(ways[i], "notify")) {
            fprintf(stderr, "trap_cost: no way called '%s'\n", ways[i]);
            return 2;
        }
    }
    printf("munmap() of a touched %zu-byte mapping, %u times, without and "
           "with each filter\n", len, iters);
    fflush(stdout);
    for (i = 0; i < nways; ++i) {
        pid = fork();
        if (pid == 0) {
            _exit(run(ways[i]));
        }
        if ((pid < 0) || (waitpid(pid, &status, 0) != pid) ||
            !WIFEXITED(status) || (WEXITSTATUS(status) != 0)) {
            fprintf(stderr, "trap_cost: %s failed\n", ways[i]);
            return 1;
        }
    }
    return 0;
}
