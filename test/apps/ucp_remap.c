/*
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * ucp_remap: a registration cache must follow the application's memory.
 * One process, two UCP workers; worker 0 sends a buffer of SIZE bytes (by
 * default 1 MiB, so that UCP sends it by rendezvous: the receiver reads it
 * with RDMA READ from the sender's registration) to worker 1, several
 * rounds. Between rounds the sender unmaps the buffer and maps new memory
 * at the same address (MAP_FIXED), or remaps it with mremap, and fills it
 * with the round's content. A cache that kept the old registration would
 * let the receiver read the old pages: the round's check fails with
 * "stale". mremap is called as the system call: UCM's hook refuses
 * MREMAP_FIXED. The pages of every unmapped buffer are kept mapped elsewhere
 * (a second mapping of the same memfd) with their old content, so that the
 * old pages live on and stay distinguishable.
 *
 * usage: ucp_remap [-s SIZE] [-r ROUNDS]
 * Prints one line per round; exits 0 when every round's bytes were the
 * round's own.
 */
#define _GNU_SOURCE
#include <ucp/api/ucp.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define TAG 0x5eed

static ucp_worker_h workers[2];

static void die(const char *what, ucs_status_t status)
{
    fprintf(stderr, "ucp_remap: %s: %s\n", what, ucs_status_string(status));
    exit(2);
}

static void done_cb(void *request, ucs_status_t status, void *user_data)
{
    *(ucs_status_t*)user_data = status;
}

static void recv_cb(void *request, ucs_status_t status,
                    const ucp_tag_recv_info_t *info, void *user_data)
{
    *(ucs_status_t*)user_data = status;
}

static ucs_status_t wait_req(void *req, ucs_status_t *status)
{
    if (UCS_PTR_IS_ERR(req)) {
        return UCS_PTR_STATUS(req);
    }
    if (req == NULL) {
        return UCS_OK;
    }
    while (*status == UCS_INPROGRESS) {
        ucp_worker_progress(workers[0]);
        ucp_worker_progress(workers[1]);
    }
    ucp_request_free(req);
    return *status;
}

static uint8_t pattern(unsigned round, size_t offset)
{
    return (uint8_t)(0x40 + 17 * round + offset % 251);
}

/* a fresh memfd of @a size bytes, mapped at @a where (MAP_FIXED if not
 * NULL), and its fd */
static uint8_t *map_new(void *where, size_t size, int *fd_p)
{
    int fd = memfd_create("ucp_remap", 0);
    void *p;

    if ((fd < 0) || (ftruncate(fd, size) != 0)) {
        perror("ucp_remap: memfd");
        exit(2);
    }
    p = mmap(where, size, PROT_READ | PROT_WRITE,
             MAP_SHARED | (where ? MAP_FIXED : 0), fd, 0);
    if (p == MAP_FAILED) {
        perror("ucp_remap: mmap");
        exit(2);
    }
    *fd_p = fd;
    return p;
}

int main(int argc, char **argv)
{
    size_t size = 1 << 20, i, bad;
    unsigned rounds = 6, round;
    ucp_params_t params = {};
    ucp_worker_params_t wparams = {};
    ucp_ep_params_t eparams = {};
    ucp_request_param_t sparam = {}, rparam = {};
    ucp_context_h context;
    ucp_address_t *address;
    size_t address_length;
    ucs_status_t status, sstatus, rstatus;
    ucp_ep_h ep;
    uint8_t *buf, *rbuf, *keep;
    void *sreq, *rreq;
    int c, fd, errors = 0;

    while ((c = getopt(argc, argv, "s:r:h")) != -1) {
        switch (c) {
        case 's': size   = strtoull(optarg, NULL, 0); break;
        case 'r': rounds = strtoul(optarg, NULL, 0);  break;
        default:
            fprintf(stderr, "usage: ucp_remap [-s SIZE] [-r ROUNDS]\n");
            return c == 'h' ? 0 : 2;
        }
    }
    size = (size + 4095) & ~(size_t)4095;

    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features   = UCP_FEATURE_TAG;
    status = ucp_init(&params, NULL, &context);
    if (status != UCS_OK) {
        die("ucp_init", status);
    }

    wparams.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    for (i = 0; i < 2; ++i) {
        status = ucp_worker_create(context, &wparams, &workers[i]);
        if (status != UCS_OK) {
            die("ucp_worker_create", status);
        }
    }

    status = ucp_worker_get_address(workers[1], &address, &address_length);
    if (status != UCS_OK) {
        die("ucp_worker_get_address", status);
    }
    eparams.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    eparams.address    = address;
    status = ucp_ep_create(workers[0], &eparams, &ep);
    if (status != UCS_OK) {
        die("ucp_ep_create", status);
    }
    ucp_worker_release_address(workers[1], address);

    sparam.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                          UCP_OP_ATTR_FIELD_USER_DATA;
    sparam.cb.send      = done_cb;
    sparam.user_data    = &sstatus;
    rparam.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                          UCP_OP_ATTR_FIELD_USER_DATA;
    rparam.cb.recv      = recv_cb;
    rparam.user_data    = &rstatus;

    rbuf = malloc(size);
    buf  = map_new(NULL, size, &fd);
    for (round = 0; round < rounds; ++round) {
        if (round > 0) {
            /* the old pages stay, with their content, at another address */
            keep = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
            if (keep == MAP_FAILED) {
                perror("ucp_remap: mmap");
                return 2;
            }
            close(fd);
            if (round % 2) {
                /* new memory at the same address */
                buf = map_new(buf, size, &fd);
                printf("round %u: new memory mapped at %p\n", round, buf);
            } else {
                /* another file's pages moved to the same address */
                uint8_t *other = map_new(NULL, size, &fd);
                /* the system call itself: UCM's mremap hook in UCX 1.13
                 * refuses MREMAP_FIXED (ENODEV) */
                if ((void*)syscall(SYS_mremap, other, size, size,
                                   MREMAP_MAYMOVE | MREMAP_FIXED,
                                   buf) != buf) {
                    perror("ucp_remap: mremap");
                    return 2;
                }
                printf("round %u: new memory moved to %p (mremap)\n", round,
                       buf);
            }
        }

        for (i = 0; i < size; ++i) {
            buf[i] = pattern(round, i);
        }
        memset(rbuf, 0, size);

        sstatus = rstatus = UCS_INPROGRESS;
        rreq = ucp_tag_recv_nbx(workers[1], rbuf, size, TAG, (ucp_tag_t)-1,
                                &rparam);
        sreq = ucp_tag_send_nbx(ep, buf, size, TAG, &sparam);
        status = wait_req(sreq, &sstatus);
        if (status != UCS_OK) {
            die("send", status);
        }
        status = wait_req(rreq, &rstatus);
        if (status != UCS_OK) {
            die("receive", status);
        }

        for (i = 0, bad = 0; i < size; ++i) {
            bad += rbuf[i] != pattern(round, i);
        }
        if (bad == 0) {
            printf("round %u: %zu bytes, all this round's\n", round, size);
        } else {
            ++errors;
            printf("round %u: %zu of %zu bytes wrong%s\n", round, bad, size,
                   ((round > 0) && (rbuf[0] == pattern(round - 1, 0))) ?
                   ": stale, the previous round's pages were read" : "");
        }
    }

    sstatus = UCS_INPROGRESS;
    sparam.flags         = UCP_EP_CLOSE_FLAG_FORCE;
    sparam.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
    wait_req(ucp_ep_close_nbx(ep, &sparam), &sstatus);
    ucp_worker_destroy(workers[0]);
    ucp_worker_destroy(workers[1]);
    ucp_cleanup(context);
    free(rbuf);
    printf("%s: %u rounds, %d wrong\n", errors ? "FAIL" : "PASS", rounds,
           errors);
    return errors ? 1 : 0;
}
