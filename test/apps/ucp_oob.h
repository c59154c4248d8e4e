/*
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * The out-of-band exchange of the two-process UCP test programs (ucp_hold,
 * ucp_kill, ucp_storm): bytes over a socket, and each side's worker
 * address for the other to connect to. Header only: each program is built
 * from one source file.
 */
#ifndef REMAPRING_TEST_UCP_OOB_H
#define REMAPRING_TEST_UCP_OOB_H

#include <ucp/api/ucp.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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

#endif
