/*
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * The out-of-band exchange of the UCP test programs (ucp_hold, ucp_kill,
 * ucp_storm, ucp_fanin): bytes over a socket, each side's worker address
 * for the other to connect to, the TCP connection between two hosts, and
 * the mix their message contents are made of. Header only: each program is
 * built from one source file.
 */
#ifndef REMAPRING_TEST_UCP_OOB_H
#define REMAPRING_TEST_UCP_OOB_H

#include <ucp/api/ucp.h>

#include <errno.h>
#include <stdint.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A 64-bit mix (splitmix64): the content of a message, which both sides
 * compute from what names it */
static inline uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x  = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x  = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Largest worker address taken from the other side */
#define OOB_MAX_ADDRESS 65536

/*
 * Write (@a out) or read @a len bytes over @a fd. Returns 0, or -1 if the
 * other side closed or an error came; @a who names the program in the line
 * then printed, NULL to print nothing (a peer's death is expected).
 */
static inline int oob_xfer(int fd, void *buf, size_t len, int out,
                           const char *who)
{
    ssize_t n;

    while (len > 0) {
        n = out ? write(fd, buf, len) : read(fd, buf, len);
        if (n <= 0) {
            if ((n < 0) && (errno == EINTR)) {
                continue;
            }
            if (who == NULL) {
            } else if (n == 0) {
                fprintf(stderr, "%s: the other process exited\n", who);
            } else {
                fprintf(stderr, "%s: oob %s: %m\n", who,
                        out ? "write" : "read");
            }
            return -1;
        }
        buf  = (char*)buf + n;
        len -= n;
    }
    return 0;
}

/*
 * Send @a worker's address over @a fd and read the other side's into
 * *@a peer_p (malloc'd, for the caller to free after ucp_ep_create()).
 * Returns 0 or -1, with a line unless @a who is NULL.
 */
static inline int oob_exchange_address(ucp_worker_h worker, int fd,
                                       ucp_address_t **peer_p,
                                       const char *who)
{
    ucp_address_t *addr, *peer;
    size_t len, peer_len;

    if (ucp_worker_get_address(worker, &addr, &len) != UCS_OK) {
        return -1;
    }
    if (oob_xfer(fd, &len, sizeof(len), 1, who) ||
        oob_xfer(fd, addr, len, 1, who) ||
        oob_xfer(fd, &peer_len, sizeof(peer_len), 0, who) ||
        (peer_len > OOB_MAX_ADDRESS)) {
        ucp_worker_release_address(worker, addr);
        return -1;
    }
    ucp_worker_release_address(worker, addr);

    peer = malloc(peer_len);
    if ((peer == NULL) || oob_xfer(fd, peer, peer_len, 0, who)) {
        free(peer);
        return -1;
    }

    *peer_p = peer;
    return 0;
}

/*
 * A socket listening on TCP @a port (any address, IPv6 and IPv4), for
 * @a backlog connections; -1 with a line naming @a who on failure.
 */
static inline int oob_listen(const char *port, int backlog, const char *who)
{
    struct sockaddr_in6 sa = {.sin6_family = AF_INET6,
                              .sin6_port   = htons(atoi(port))};
    int one = 1, lfd;

    lfd = socket(AF_INET6, SOCK_STREAM, 0);
    if ((lfd < 0) ||
        (setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0) ||
        (bind(lfd, (struct sockaddr*)&sa, sizeof(sa)) < 0) ||
        (listen(lfd, backlog) < 0)) {
        fprintf(stderr, "%s: listen on port %s: %m\n", who, port);
        if (lfd >= 0) {
            close(lfd);
        }
        return -1;
    }
    return lfd;
}

/* The receiver's end across hosts: one connection accepted on @a port */
static inline int oob_accept_one(const char *port, const char *who)
{
    int lfd, fd;

    lfd = oob_listen(port, 1, who);
    if (lfd < 0) {
        return -1;
    }
    fd = accept(lfd, NULL, NULL);
    if (fd < 0) {
        fprintf(stderr, "%s: accept: %m\n", who);
    }
    close(lfd);
    return fd;
}

/* The sender's end: connected to @a hostport (host:port, changed in
 * place), retried for 30 s while the receiver is not listening yet */
static inline int oob_connect(char *hostport, const char *who)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;
    char *colon = strrchr(hostport, ':');
    int fd, tries;

    if (colon == NULL) {
        fprintf(stderr, "%s: %s: host:port expected\n", who, hostport);
        return -1;
    }
    *colon = '\0';
    if (getaddrinfo(hostport, colon + 1, &hints, &ai) != 0) {
        fprintf(stderr, "%s: cannot resolve %s\n", who, hostport);
        *colon = ':';
        return -1;
    }
    *colon = ':';
    for (tries = 0; tries < 300; ++tries) {
        fd = socket(ai->ai_family, SOCK_STREAM, 0);
        if ((fd >= 0) && (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)) {
            freeaddrinfo(ai);
            return fd;
        }
        if (fd >= 0) {
            close(fd);
        }
        usleep(100000);
    }
    fprintf(stderr, "%s: connect to %s: %m\n", who, hostport);
    freeaddrinfo(ai);
    return -1;
}

#endif
