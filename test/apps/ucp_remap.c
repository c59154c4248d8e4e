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
 * -m METHOD chooses how the memory is replaced between rounds:
 *   alt       (default) mmap(MAP_FIXED) and mremap in turn, as above
 *   munmap    munmap(), then new memory mapped at the address
 *             (MAP_FIXED_NOREPLACE)
 *   rawunmap  the same through syscall(): what UCM's hooks never see
 *   fixed     mmap(MAP_FIXED) over the old mapping
 *   mremap    another mapping moved over it (mremap MREMAP_FIXED)
 *   dontneed  madvise(MADV_DONTNEED) of a private anonymous buffer: its
 *             pages are dropped, new ones fault in
 *   shm       System V shared memory: shmdt(), a new segment attached at
 *             the same address
 *   malloc    malloc() a buffer each round and free() it after: whatever
 *             the allocator (glibc, or a preloaded jemalloc or tcmalloc)
 *             does with its memory; a round whose buffer is not at an
 *             earlier round's address tests nothing and says so
 * In every method but alt the old pages are not kept elsewhere: a stale
 * registration still pins them, with the old round's bytes.
 *
 * -a IP connects the workers through a listener on IP (UCP's client-server
 * mode, rdma_cm), for transports such as rc_verbs that would otherwise
 * need an auxiliary transport (ud_verbs) to wire up.
 *
 * usage: ucp_remap [-s SIZE] [-r ROUNDS] [-m METHOD] [-a IP]
 * Prints one line per round; exits 0 when every round's bytes were the
 * round's own. The last line counts the rounds that read a previous
 * round's bytes ("stale").
 */
#define _GNU_SOURCE
#include <ucp/api/ucp.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
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

static ucp_ep_h server_ep;
static ucp_listener_h listener;

static void conn_cb(ucp_conn_request_h request, void *arg)
{
    ucp_ep_params_t params = {};
    ucs_status_t status;

    params.field_mask   = UCP_EP_PARAM_FIELD_CONN_REQUEST;
    params.conn_request = request;
    status = ucp_ep_create(workers[1], &params, &server_ep);
    if (status != UCS_OK) {
        die("server ucp_ep_create", status);
    }
}

/* worker 0 connects to a listener of worker 1 on ip */
static ucp_ep_h connect_sockaddr(const char *ip)
{
    ucp_listener_params_t lparams = {};
    ucp_listener_attr_t lattr = {};
    ucp_ep_params_t eparams = {};
    struct sockaddr_in sin = {};
    ucs_status_t status;
    ucp_ep_h ep;

    sin.sin_family = AF_INET;
    if (inet_pton(AF_INET, ip, &sin.sin_addr) != 1) {
        fprintf(stderr, "ucp_remap: bad IPv4 address %s\n", ip);
        exit(2);
    }
    lparams.field_mask       = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                               UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lparams.sockaddr.addr    = (struct sockaddr*)&sin;
    lparams.sockaddr.addrlen = sizeof(sin);
    lparams.conn_handler.cb  = conn_cb;
    status = ucp_listener_create(workers[1], &lparams, &listener);
    if (status != UCS_OK) {
        die("ucp_listener_create", status);
    }
    lattr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    status = ucp_listener_query(listener, &lattr);
    if (status != UCS_OK) {
        die("ucp_listener_query", status);
    }
    sin.sin_port = ((struct sockaddr_in*)&lattr.sockaddr)->sin_port;

    eparams.field_mask       = UCP_EP_PARAM_FIELD_FLAGS |
                               UCP_EP_PARAM_FIELD_SOCK_ADDR;
    eparams.flags            = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    eparams.sockaddr.addr    = (struct sockaddr*)&sin;
    eparams.sockaddr.addrlen = sizeof(sin);
    status = ucp_ep_create(workers[0], &eparams, &ep);
    if (status != UCS_OK) {
        die("ucp_ep_create", status);
    }
    while (server_ep == NULL) {
        ucp_worker_progress(workers[0]);
        ucp_worker_progress(workers[1]);
    }
    return ep;
}

static void fail_errno(const char *what)
{
    perror(what);
    exit(2);
}

static uint8_t *map_anon_at(void *where, size_t size)
{
    void *p = mmap(where, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS |
                   (where ? MAP_FIXED_NOREPLACE : 0), -1, 0);

    if ((p == MAP_FAILED) || (where && (p != where))) {
        fail_errno("ucp_remap: mmap");
    }
    return p;
}

static int shm_id = -1;

static uint8_t *shm_new(void *where, size_t size)
{
    void *p;

    shm_id = shmget(IPC_PRIVATE, size, IPC_CREAT | 0600);
    if (shm_id < 0) {
        fail_errno("ucp_remap: shmget");
    }
    p = shmat(shm_id, where, 0);
    shmctl(shm_id, IPC_RMID, NULL); /* gone with the last detach */
    if (p == (void*)-1) {
        fail_errno("ucp_remap: shmat");
    }
    return p;
}

/* Replace the memory at buf by METHOD (not alt, not malloc); return the
 * buffer to use this round. */
static uint8_t *replace(const char *method, uint8_t *buf, size_t size)
{
    uint8_t *other;

    if (!strcmp(method, "munmap")) {
        munmap(buf, size);
        return map_anon_at(buf, size);
    } else if (!strcmp(method, "rawunmap")) {
        syscall(SYS_munmap, buf, size);
        return map_anon_at(buf, size);
    } else if (!strcmp(method, "fixed")) {
        if (mmap(buf, size, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
                 0) != (void*)buf) {
            fail_errno("ucp_remap: mmap(MAP_FIXED)");
        }
        return buf;
    } else if (!strcmp(method, "mremap")) {
        other = map_anon_at(NULL, size);
        memset(other, 0, size);
        if ((void*)syscall(SYS_mremap, other, size, size,
                           MREMAP_MAYMOVE | MREMAP_FIXED, buf) != buf) {
            fail_errno("ucp_remap: mremap");
        }
        return buf;
    } else if (!strcmp(method, "dontneed")) {
        if (madvise(buf, size, MADV_DONTNEED) != 0) {
            fail_errno("ucp_remap: madvise");
        }
        return buf;
    } else if (!strcmp(method, "shm")) {
        if (shmdt(buf) != 0) {
            fail_errno("ucp_remap: shmdt");
        }
        return shm_new(buf, size);
    }
    fprintf(stderr, "ucp_remap: unknown method %s\n", method);
    exit(2);
}

int main(int argc, char **argv)
{
    const char *method = "alt", *ip = NULL;
    uint8_t *seen[64] = {NULL};
    unsigned stale = 0, untested = 0, k;
    int reused;
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
    uint8_t *buf = NULL, *rbuf, *keep;
    void *sreq, *rreq;
    int c, fd, errors = 0;

    while ((c = getopt(argc, argv, "s:r:m:a:h")) != -1) {
        switch (c) {
        case 'a': ip     = optarg;                    break;
        case 's': size   = strtoull(optarg, NULL, 0); break;
        case 'r': rounds = strtoul(optarg, NULL, 0);  break;
        case 'm': method = optarg;                    break;
        default:
            fprintf(stderr, "usage: ucp_remap [-s SIZE] [-r ROUNDS] "
                    "[-m alt|munmap|rawunmap|fixed|mremap|dontneed|shm|"
                    "malloc] [-a IP]\n");
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

    if (ip != NULL) {
        ucp_request_param_t fparam = {};
        ucs_status_t fstatus       = UCS_INPROGRESS;

        ep = connect_sockaddr(ip);
        /* the client's lanes are final once a flush completes */
        fparam.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                              UCP_OP_ATTR_FIELD_USER_DATA;
        fparam.cb.send      = done_cb;
        fparam.user_data    = &fstatus;
        status = wait_req(ucp_ep_flush_nbx(ep, &fparam), &fstatus);
        if (status != UCS_OK) {
            die("ucp_ep_flush_nbx", status);
        }
    } else {
        status = ucp_worker_get_address(workers[1], &address,
                                        &address_length);
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
    }

    sparam.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                          UCP_OP_ATTR_FIELD_USER_DATA;
    sparam.cb.send      = done_cb;
    sparam.user_data    = &sstatus;
    rparam.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                          UCP_OP_ATTR_FIELD_USER_DATA;
    rparam.cb.recv      = recv_cb;
    rparam.user_data    = &rstatus;

    if (rounds > 64) {
        rounds = 64;
    }
    rbuf = malloc(size);
    if (!strcmp(method, "alt")) {
        buf = map_new(NULL, size, &fd);
    } else if (!strcmp(method, "shm")) {
        buf = shm_new(NULL, size);
    } else if (strcmp(method, "malloc")) {
        buf = map_anon_at(NULL, size);
    }
    for (round = 0; round < rounds; ++round) {
        if (!strcmp(method, "malloc")) {
            buf = malloc(size);
            if (buf == NULL) {
                fail_errno("ucp_remap: malloc");
            }
            /* the same pages (jemalloc varies a large block's offset
             * within its first page) */
            for (k = 0, reused = 0; k < round; ++k) {
                reused |= ((uintptr_t)seen[k] >> 12) ==
                          ((uintptr_t)buf >> 12);
            }
            seen[round] = buf;
            untested   += (round > 0) && !reused;
            if (round > 0) {
                printf("round %u: malloc() gave %p%s\n", round, buf,
                       reused ? ", an earlier round's pages" :
                                ", a new address: nothing to test");
            }
        } else if ((round > 0) && strcmp(method, "alt")) {
            buf = replace(method, buf, size);
            printf("round %u: memory at %p replaced (%s)\n", round, buf,
                   method);
        } else if (round > 0) {
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
            for (k = 0, reused = 0; k < round; ++k) {
                reused |= (rbuf[0] == pattern(k, 0)) &&
                          (rbuf[size - 1] == pattern(k, size - 1));
            }
            stale += reused;
            printf("round %u: %zu of %zu bytes wrong%s\n", round, bad, size,
                   reused ? ": stale, an earlier round's pages were read" :
                            "");
        }
        if (!strcmp(method, "malloc")) {
            free(buf);
        }
    }

    sstatus = UCS_INPROGRESS;
    sparam.flags         = UCP_EP_CLOSE_FLAG_FORCE;
    sparam.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
    wait_req(ucp_ep_close_nbx(ep, &sparam), &sstatus);
    if (server_ep != NULL) {
        sstatus = UCS_INPROGRESS;
        wait_req(ucp_ep_close_nbx(server_ep, &sparam), &sstatus);
        ucp_listener_destroy(listener);
    }
    ucp_worker_destroy(workers[0]);
    ucp_worker_destroy(workers[1]);
    ucp_cleanup(context);
    free(rbuf);
    printf("%s: %u rounds, %d wrong, %u stale, %u untested (method %s)\n",
           errors ? "FAIL" : "PASS", rounds, errors, stale, untested, method);
    return errors ? 1 : 0;
}
