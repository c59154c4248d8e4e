/*
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * vm-rsh: run a command on the other guest of the test bed, as rsh or ssh
 * would, so that MPI launchers (Open MPI's plm rsh, MPICH hydra's rsh
 * launcher) can start their daemons there without an ssh server.
 *
 *   vm-rsh -d [-p PORT]                       serve: run what clients send
 *   vm-rsh [ssh options] [-p PORT] HOST CMD... run CMD on HOST
 *
 * The client joins CMD with spaces and the server runs it with /bin/sh -c,
 * as sshd does; stdin is /dev/null (ssh -n), stdout and stderr come back
 * separately, and the client exits with the command's status (128 + signal
 * if it was killed, 255 if the connection failed). A client that goes away
 * takes the command's process group with it (SIGHUP, then SIGKILL).
 * ssh's usual options (-x, -n, -l USER, -o OPT, ...) are accepted and
 * ignored. The client retries the connection for VM_RSH_WAIT seconds
 * (default 60) while the server is not listening yet, so that
 * `vm-rsh PEER true` also waits for a peer that is still booting.
 *
 * There is no authentication: the server belongs in a guest whose only
 * network is the test bed's private link. The port defaults to VM_RSH_PORT
 * or 7180.
 *
 * Wire: the client sends a 4-byte length and the command; the server sends
 * frames of an 8-byte header (type, length; network order) and the data:
 * FRAME_OUT and FRAME_ERR carry output, FRAME_EXIT the 4-byte status.
 */

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define VM_RSH_DEFAULT_PORT "7180"
#define VM_RSH_MAX_CMD      (1u << 20)

enum {
    FRAME_OUT  = 1,
    FRAME_ERR  = 2,
    FRAME_EXIT = 3
};

static int write_full(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    ssize_t ret;

    while (len > 0) {
        ret = write(fd, p, len);
        if (ret < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -1;
        }
        p   += ret;
        len -= ret;
    }
    return 0;
}

/* returns 1 when len bytes were read, 0 on a clean EOF before any, -1 */
static int read_full(int fd, void *buf, size_t len)
{
    char *p = buf;
    size_t got = 0;
    ssize_t ret;

    while (got < len) {
        ret = read(fd, p + got, len - got);
        if (ret < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -1;
        }
        if (ret == 0) {
            return (got == 0) ? 0 : -1;
        }
        got += ret;
    }
    return 1;
}

static int send_frame(int sock, uint32_t type, const void *data, uint32_t len)
{
    uint32_t hdr[2] = {htonl(type), htonl(len)};

    if (write_full(sock, hdr, sizeof(hdr)) < 0) {
        return -1;
    }
    return write_full(sock, data, len);
}

static double now_sec(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Server side of one connection: run the command, relay its output. */
static int serve_one(int sock)
{
    int out[2] = {-1, -1}, err[2] = {-1, -1};
    int open_fds, status = 0, exited = 0, devnull, i, ret;
    uint32_t len, code;
    struct pollfd pfd[3];
    double exit_time = 0;
    char buf[65536];
    char *cmd;
    pid_t pid;

    signal(SIGCHLD, SIG_DFL);
    signal(SIGPIPE, SIG_IGN);

    if (read_full(sock, &len, sizeof(len)) != 1) {
        fprintf(stderr, "vm-rsh: no command from the client\n");
        return 1;
    }
    len = ntohl(len);
    if (len > VM_RSH_MAX_CMD) {
        fprintf(stderr, "vm-rsh: command of %u bytes refused\n", len);
        return 1;
    }
    cmd = calloc(1, len + 1);
    if ((cmd == NULL) || (read_full(sock, cmd, len) != 1)) {
        fprintf(stderr, "vm-rsh: short command from the client\n");
        return 1;
    }

    if ((pipe2(out, O_CLOEXEC) < 0) || (pipe2(err, O_CLOEXEC) < 0)) {
        fprintf(stderr, "vm-rsh: pipe: %m\n");
        return 1;
    }

    pid = fork();
    if (pid < 0) {
        fprintf(stderr, "vm-rsh: fork: %m\n");
        return 1;
    }
    if (pid == 0) {
        setsid();
        devnull = open("/dev/null", O_RDONLY);
        dup2(devnull, 0);
        dup2(out[1], 1);
        dup2(err[1], 2);
        signal(SIGPIPE, SIG_DFL);
        execl("/bin/sh", "sh", "-c", cmd, (char*)NULL);
        fprintf(stderr, "vm-rsh: exec /bin/sh: %m\n");
        _exit(127);
    }
    close(out[1]);
    close(err[1]);

    pfd[0].fd     = out[0];
    pfd[1].fd     = err[0];
    pfd[2].fd     = sock;
    for (i = 0; i < 3; ++i) {
        pfd[i].events = POLLIN;
    }
    open_fds = 2;

    /* Until both pipes are closed and the command is reaped; descendants
     * that keep the pipes after the command exits get two seconds. */
    while ((open_fds > 0) && !(exited && (now_sec() - exit_time > 2.0))) {
        if (!exited && (waitpid(pid, &status, WNOHANG) == pid)) {
            exited    = 1;
            exit_time = now_sec();
        }
        ret = poll(pfd, 3, 200);
        if (ret < 0) {
            if (errno == EINTR) {
                continue;
            }
            break;
        }
        if (pfd[2].revents & (POLLIN | POLLHUP | POLLERR)) {
            /* the client sends nothing more: readable means it is gone */
            kill(-pid, SIGHUP);
            usleep(500000);
            kill(-pid, SIGKILL);
            waitpid(pid, &status, 0);
            return 1;
        }
        for (i = 0; i < 2; ++i) {
            if (!(pfd[i].revents & (POLLIN | POLLHUP | POLLERR))) {
                continue;
            }
            ret = read(pfd[i].fd, buf, sizeof(buf));
            if (ret > 0) {
                if (send_frame(sock, (i == 0) ? FRAME_OUT : FRAME_ERR, buf,
                               ret) < 0) {
                    kill(-pid, SIGKILL);
                    waitpid(pid, &status, 0);
                    return 1;
                }
            } else if ((ret == 0) || (errno != EINTR)) {
                close(pfd[i].fd);
                pfd[i].fd = -1;
                --open_fds;
            }
        }
    }

    if (!exited) {
        waitpid(pid, &status, 0);
    }
    code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    code = htonl(code);
    send_frame(sock, FRAME_EXIT, &code, sizeof(code));
    shutdown(sock, SHUT_WR);
    free(cmd);
    return 0;
}

static int serve(const char *port)
{
    struct addrinfo hints = {
        .ai_family   = AF_INET,
        .ai_socktype = SOCK_STREAM,
        .ai_flags    = AI_PASSIVE
    };
    struct addrinfo *ai;
    int lsock, sock, one = 1, ret;

    ret = getaddrinfo(NULL, port, &hints, &ai);
    if (ret != 0) {
        fprintf(stderr, "vm-rsh: port %s: %s\n", port, gai_strerror(ret));
        return 1;
    }
    lsock = socket(ai->ai_family, ai->ai_socktype, 0);
    if ((lsock < 0) ||
        (setsockopt(lsock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0) ||
        (bind(lsock, ai->ai_addr, ai->ai_addrlen) < 0) ||
        (listen(lsock, 64) < 0)) {
        fprintf(stderr, "vm-rsh: listen on port %s: %m\n", port);
        return 1;
    }
    freeaddrinfo(ai);

    /* connection handlers are reaped by the kernel */
    signal(SIGCHLD, SIG_IGN);
    for (;;) {
        sock = accept4(lsock, NULL, NULL, SOCK_CLOEXEC);
        if (sock < 0) {
            if (errno == EINTR) {
                continue;
            }
            fprintf(stderr, "vm-rsh: accept: %m\n");
            return 1;
        }
        setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (fork() == 0) {
            close(lsock);
            _exit(serve_one(sock));
        }
        close(sock);
    }
}

static int connect_retry(const char *host, const char *port, double wait)
{
    struct addrinfo hints = {
        .ai_family   = AF_INET,
        .ai_socktype = SOCK_STREAM
    };
    double deadline = now_sec() + wait;
    struct addrinfo *ai;
    int sock, one = 1, ret;

    for (;;) {
        ret = getaddrinfo(host, port, &hints, &ai);
        if (ret != 0) {
            fprintf(stderr, "vm-rsh: %s: %s\n", host, gai_strerror(ret));
            return -1;
        }
        sock = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
        if (sock < 0) {
            fprintf(stderr, "vm-rsh: socket: %m\n");
            freeaddrinfo(ai);
            return -1;
        }
        ret = connect(sock, ai->ai_addr, ai->ai_addrlen);
        freeaddrinfo(ai);
        if (ret == 0) {
            setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            return sock;
        }
        close(sock);
        if (((errno != ECONNREFUSED) && (errno != EHOSTUNREACH) &&
             (errno != ENETUNREACH) && (errno != ETIMEDOUT)) ||
            (now_sec() > deadline)) {
            fprintf(stderr, "vm-rsh: connect to %s port %s: %m\n", host,
                    port);
            return -1;
        }
        usleep(250000);
    }
}

static int client(const char *host, const char *port, int argc, char **argv)
{
    const char *wait_env = getenv("VM_RSH_WAIT");
    uint32_t hdr[2], type, len, code;
    size_t cmd_len = 0, off = 0;
    char *cmd, *data;
    int sock, i, ret;

    for (i = 0; i < argc; ++i) {
        cmd_len += strlen(argv[i]) + 1;
    }
    if (cmd_len > VM_RSH_MAX_CMD) {
        fprintf(stderr, "vm-rsh: command too long (%zu bytes)\n", cmd_len);
        return 255;
    }
    cmd = malloc(cmd_len);
    if (cmd == NULL) {
        fprintf(stderr, "vm-rsh: out of memory\n");
        return 255;
    }
    for (i = 0; i < argc; ++i) {
        off += sprintf(cmd + off, "%s%s", (i > 0) ? " " : "", argv[i]);
    }

    sock = connect_retry(host, port, wait_env ? atof(wait_env) : 60.0);
    if (sock < 0) {
        return 255;
    }
    len = htonl(off);
    if ((write_full(sock, &len, sizeof(len)) < 0) ||
        (write_full(sock, cmd, off) < 0)) {
        fprintf(stderr, "vm-rsh: send to %s: %m\n", host);
        return 255;
    }
    free(cmd);

    data = malloc(65536);
    if (data == NULL) {
        fprintf(stderr, "vm-rsh: out of memory\n");
        return 255;
    }
    for (;;) {
        ret = read_full(sock, hdr, sizeof(hdr));
        if (ret != 1) {
            fprintf(stderr, "vm-rsh: connection to %s lost\n", host);
            return 255;
        }
        type = ntohl(hdr[0]);
        len  = ntohl(hdr[1]);
        if ((len > 65536) || (read_full(sock, data, len) != 1)) {
            fprintf(stderr, "vm-rsh: bad frame from %s\n", host);
            return 255;
        }
        if ((type == FRAME_EXIT) && (len == sizeof(code))) {
            memcpy(&code, data, sizeof(code));
            return ntohl(code) & 0xff;
        }
        if ((type == FRAME_OUT) || (type == FRAME_ERR)) {
            write_full((type == FRAME_OUT) ? 1 : 2, data, len);
        }
    }
}

static void usage(void)
{
    fprintf(stderr,
            "usage: vm-rsh -d [-p PORT]             serve\n"
            "       vm-rsh [-p PORT] HOST CMD...     run CMD on HOST\n"
            "  ssh options (-x -n -T -l USER -o OPT ...) are ignored\n");
}

int main(int argc, char **argv)
{
    const char *port = getenv("VM_RSH_PORT");
    int daemon_mode  = 0;
    int c;

    if (port == NULL) {
        port = VM_RSH_DEFAULT_PORT;
    }

    /* '+': stop at HOST, the command's own options are not ours */
    while ((c = getopt(argc, argv, "+dp:l:o:i:F:E:c:m:xXnTtqaAkCv46")) != -1) {
        switch (c) {
        case 'd':
            daemon_mode = 1;
            break;
        case 'p':
            port = optarg;
            break;
        case '?':
            usage();
            return 255;
        default:
            break;
        }
    }

    if (daemon_mode) {
        return serve(port);
    }
    if (argc - optind < 2) {
        usage();
        return 255;
    }
    return client(argv[optind], port, argc - optind - 1, argv + optind + 1);
}
