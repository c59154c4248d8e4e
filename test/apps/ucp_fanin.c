/*
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * ucp_fanin: many connections into one receiving worker, then quiet; what
 * each side holds per connection, busy and quiet.
 *
 * The receiver (-L port -n conns) has one UCP worker and takes conns TCP
 * connections, one per sending worker, from any number of sender processes
 * (-C host:port -w workers: that many workers, each with its endpoint to
 * the receiver). Once all are connected, each sending worker sends -m
 * tag messages of -s bytes (the tag names the connection and the message;
 * the bytes are a function of both), the receiver checks every byte; then
 * nothing is sent for -q milliseconds while both sides progress, and each
 * side samples its memory at the end of the traffic (busy) and of the
 * quiet time (quiet):
 *   pool_kib  bytes the transport's receive pool memfds hold
 *             ("memfd:remapring-pool*", st_blocks; 0 for other transports)
 *   pin_kib   VmPin of /proc/self/status: memory registered with the device
 *   rss_kib   VmRSS
 * The receiver prints "fanin: phase=busy|quiet conns=N pool_kib= pin_kib=
 * rss_kib=" and "fanin-result: conns= msgs= errors= lost=" and the same
 * figures per connection (busy_pool_kib_per_conn= quiet_pool_kib_per_conn=
 * quiet_pin_kib_per_conn= quiet_rss_kib_per_conn=); each sender process
 * "fanin-sender: workers= pool_kib= pin_kib= rss_kib=" at the end of the
 * quiet time, and the same divided by its workers (..._per_conn=). Exits
 * non-zero on a wrong byte, a lost message, or after -t seconds.
 *
 * usage: ucp_fanin -L port -n conns [-a ip] [-m msgs] [-s size]
 *                  [-q quiet_ms] [-t timeout_sec]
 *        ucp_fanin -C host:port -w workers [-a ip] [-m msgs] [-s size]
 *                  [-t timeout_sec]
 *   the same -m, -s and -a on both sides: 64 messages of 65536 bytes (4 MiB
 *   per connection, four laps of a 1 MiB ring), -q 2000, -t 600
 *   -a  the endpoints are connected through a UCP listener of the receiver
 *       on its IPv4 address ip (UCP's client-server mode, rdma_cm for
 *       rc_verbs, which would otherwise want ud_verbs to wire up), not
 *       from worker addresses; the TCP connection then carries the
 *       listener's port
 */
#define _GNU_SOURCE
#include "ucp_oob.h"

#include <ucp/api/ucp.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define RECV_SLOTS  64 /* receives the receiver keeps posted */
#define SEND_WINDOW 8 /* sends in flight per sending worker */

static unsigned n_msgs      = 64;
static size_t msg_size      = 65536;
static unsigned quiet_ms    = 2000;
static unsigned timeout_sec = 600;
static const char *listen_ip; /* -a */
static double deadline;

typedef struct {
    long pool_kib, pin_kib, rss_kib;
} mem_t;

static double now_sec(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void check_deadline(const char *what)
{
    if (now_sec() > deadline) {
        fprintf(stderr, "ucp_fanin: timed out (%u s) %s\n", timeout_sec, what);
        exit(3);
    }
}

/* message @a tag's bytes: word w is a function of the tag and w */
static void fill(uint64_t *buf, uint64_t tag)
{
    uint64_t base = splitmix64(tag);
    size_t w;

    for (w = 0; w < msg_size / 8; ++w) {
        buf[w] = base + w * 0x2545f4914f6cdd1dull;
    }
}

static int check(const uint64_t *buf, uint64_t tag)
{
    uint64_t base = splitmix64(tag);
    size_t w;

    for (w = 0; w < msg_size / 8; ++w) {
        if (buf[w] != base + w * 0x2545f4914f6cdd1dull) {
            fprintf(stderr,
                    "ucp_fanin: connection %" PRIu64 " message %" PRIu64
                    ": word %zu is %016" PRIx64 "\n",
                    tag >> 32, tag & 0xffffffffu, w, buf[w]);
            return 1;
        }
    }
    return 0;
}

static void sample(mem_t *m)
{
    char path[300], link[256], line[256];
    struct dirent *d;
    struct stat st;
    FILE *f;
    DIR *dir;

    memset(m, 0, sizeof(*m));
    f = fopen("/proc/self/status", "r");
    while ((f != NULL) && (fgets(line, sizeof(line), f) != NULL)) {
        sscanf(line, "VmPin: %ld", &m->pin_kib);
        sscanf(line, "VmRSS: %ld", &m->rss_kib);
    }
    if (f != NULL) {
        fclose(f);
    }

    dir = opendir("/proc/self/fd");
    while ((dir != NULL) && ((d = readdir(dir)) != NULL)) {
        snprintf(path, sizeof(path), "/proc/self/fd/%s", d->d_name);
        ssize_t n = readlink(path, link, sizeof(link) - 1);
        if (n <= 0) {
            continue;
        }
        link[n] = '\0';
        if ((strstr(link, "memfd:remapring-pool") != NULL) &&
            (stat(path, &st) == 0)) {
            m->pool_kib += (long)st.st_blocks / 2;
        }
    }
    if (dir != NULL) {
        closedir(dir);
    }
}

static ucp_context_h init_context(void)
{
    ucp_params_t params = {0};
    ucp_context_h ctx;
    ucs_status_t status;

    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features   = UCP_FEATURE_TAG;
    status            = ucp_init(&params, NULL, &ctx);
    if (status != UCS_OK) {
        fprintf(stderr, "ucp_init: %s\n", ucs_status_string(status));
        exit(2);
    }
    return ctx;
}

static ucp_worker_h init_worker(ucp_context_h ctx)
{
    ucp_worker_params_t params = {0};
    ucp_worker_h worker;
    ucs_status_t status;

    params.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    params.thread_mode = UCS_THREAD_MODE_SINGLE;
    status             = ucp_worker_create(ctx, &params, &worker);
    if (status != UCS_OK) {
        fprintf(stderr, "ucp_worker_create: %s\n", ucs_status_string(status));
        exit(2);
    }
    return worker;
}

/* whether @a fd has a byte (or EOF) to read, without waiting */
static int readable(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};

    return poll(&p, 1, 0) > 0;
}


/* @a ip (IPv4) and @a port (network order) as a socket address */
static struct sockaddr_in ip_addr(const char *ip, uint16_t port)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = port};

    if (inet_pton(AF_INET, ip, &sin.sin_addr) != 1) {
        fprintf(stderr, "ucp_fanin: bad IPv4 address %s\n", ip);
        exit(2);
    }
    return sin;
}

/* a peer that goes (the senders close when done): nothing to do */
static void ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
}


/* ------------------------------------------------------------- receiver */

static ucp_ep_h *server_eps; /* -a: the endpoints of the senders' requests */
static unsigned n_server_eps;

static void conn_cb(ucp_conn_request_h request, void *arg)
{
    ucp_ep_params_t params = {0};
    ucs_status_t status;

    params.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST |
                        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.conn_request   = request;
    params.err_mode       = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = ep_error;
    status                = ucp_ep_create((ucp_worker_h)arg, &params,
                                          &server_eps[n_server_eps]);
    if (status != UCS_OK) {
        fprintf(stderr, "ucp_fanin: server ucp_ep_create: %s\n",
                ucs_status_string(status));
        exit(2);
    }
    ++n_server_eps;
}

/* -a: a listener on listen_ip; its port in *@a port_p (network order) */
static ucp_listener_h
listen_ucp(ucp_worker_h worker, unsigned conns, uint16_t *port_p)
{
    struct sockaddr_in sin       = ip_addr(listen_ip, 0);
    ucp_listener_params_t params = {0};
    ucp_listener_attr_t attr     = {0};
    ucp_listener_h listener;
    ucs_status_t status;

    server_eps = calloc(conns, sizeof(*server_eps));
    if (server_eps == NULL) {
        exit(2);
    }
    params.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                        UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    params.sockaddr.addr    = (struct sockaddr *)&sin;
    params.sockaddr.addrlen = sizeof(sin);
    params.conn_handler.cb  = conn_cb;
    params.conn_handler.arg = worker;
    status                  = ucp_listener_create(worker, &params, &listener);
    if (status == UCS_OK) {
        attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
        status          = ucp_listener_query(listener, &attr);
    }
    if (status != UCS_OK) {
        fprintf(stderr, "ucp_fanin: a listener on %s: %s\n", listen_ip,
                ucs_status_string(status));
        exit(2);
    }
    *port_p = ((struct sockaddr_in *)&attr.sockaddr)->sin_port;
    return listener;
}

typedef struct {
    void *req;
    int done;
    ucs_status_t status;
    ucp_tag_recv_info_t info;
    uint64_t *buf;
} recv_slot_t;

static void recv_done(void *request, ucs_status_t status,
                      const ucp_tag_recv_info_t *info, void *arg)
{
    recv_slot_t *slot = arg;

    slot->status = status;
    slot->info   = *info;
    slot->done   = 1;
}

static void recv_post(ucp_worker_h worker, recv_slot_t *slot)
{
    ucp_request_param_t param = {0};
    ucs_status_ptr_t sp;

    /* the callback every time: UCP 1.13 completes a receive that matches
     * an unexpected message at once without filling recv_info */
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA |
                         UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param.cb.recv   = recv_done;
    param.user_data = slot;
    slot->done      = 0;
    sp = ucp_tag_recv_nbx(worker, slot->buf, msg_size, 0, 0, &param);
    if (UCS_PTR_IS_ERR(sp)) {
        fprintf(stderr, "ucp_tag_recv_nbx: %s\n",
                ucs_status_string(UCS_PTR_STATUS(sp)));
        exit(2);
    }
    slot->req = sp;
}

static void print_mem(const char *phase, unsigned conns, const mem_t *m)
{
    printf("fanin: phase=%s conns=%u pool_kib=%ld pin_kib=%ld rss_kib=%ld\n",
           phase, conns, m->pool_kib, m->pin_kib, m->rss_kib);
    fflush(stdout);
}

static int receiver(const char *port, unsigned conns)
{
    uint64_t total = (uint64_t)conns * n_msgs, got = 0, posted = 0;
    uint64_t errors     = 0;
    ucp_context_h ctx   = init_context();
    ucp_worker_h worker = init_worker(ctx);
    recv_slot_t slots[RECV_SLOTS];
    ucp_listener_h listener = NULL;
    unsigned *seen, i, c;
    ucp_address_t *peer = NULL;
    uint16_t ucp_port   = 0;
    mem_t busy, quiet;
    double end;
    int lfd, *fds;
    char byte = 0;

    fds  = calloc(conns, sizeof(*fds));
    seen = calloc(conns, sizeof(*seen));
    lfd  = oob_listen(port, conns, "ucp_fanin");
    if ((fds == NULL) || (seen == NULL) || (lfd < 0)) {
        return 2;
    }

    if (listen_ip != NULL) {
        listener = listen_ucp(worker, conns, &ucp_port);
    }

    /* every sending worker, before any traffic */
    for (c = 0; c < conns; ++c) {
        fds[c] = accept(lfd, NULL, NULL);
        if ((fds[c] < 0) ||
            ((listen_ip != NULL) ? oob_xfer(fds[c], &ucp_port, sizeof(ucp_port),
                                            1, "ucp_fanin") :
                                   oob_exchange_address(worker, fds[c], &peer,
                                                        "ucp_fanin")) ||
            oob_xfer(fds[c], &c, sizeof(c), 1, "ucp_fanin")) {
            fprintf(stderr, "ucp_fanin: connection %u failed\n", c);
            return 2;
        }
        if (listen_ip == NULL) {
            free(peer);
        }
        check_deadline("while the senders connected");
    }
    close(lfd);

    for (i = 0; i < RECV_SLOTS; ++i) {
        slots[i].buf  = malloc(msg_size);
        slots[i].req  = NULL;
        slots[i].done = 0;
        if (slots[i].buf == NULL) {
            return 2;
        }
        if (posted < total) {
            recv_post(worker, &slots[i]);
            ++posted;
        }
    }
    for (c = 0; c < conns; ++c) {
        if (oob_xfer(fds[c], &byte, 1, 1, "ucp_fanin")) {
            return 2;
        }
    }

    while (got < total) {
        ucp_worker_progress(worker);
        for (i = 0; i < RECV_SLOTS; ++i) {
            if (!slots[i].done) {
                continue;
            }
            if (slots[i].req != NULL) {
                ucp_request_free(slots[i].req);
            }
            c = (unsigned)(slots[i].info.sender_tag >> 32);
            if ((slots[i].status != UCS_OK) ||
                (slots[i].info.length != msg_size) || (c >= conns)) {
                fprintf(stderr,
                        "ucp_fanin: a receive ended with %s, %zu"
                        " bytes, tag %" PRIx64 "\n",
                        ucs_status_string(slots[i].status),
                        slots[i].info.length, slots[i].info.sender_tag);
                ++errors;
            } else {
                errors += check(slots[i].buf, slots[i].info.sender_tag);
                ++seen[c];
            }
            ++got;
            slots[i].done = 0;
            slots[i].req  = NULL;
            if (posted < total) {
                recv_post(worker, &slots[i]);
                ++posted;
            }
        }
        check_deadline("while the messages came");
    }

    sample(&busy);
    print_mem("busy", conns, &busy);

    /* nothing sent now; both sides progress */
    end = now_sec() + quiet_ms / 1000.0;
    while (now_sec() < end) {
        ucp_worker_progress(worker);
    }
    sample(&quiet);
    print_mem("quiet", conns, &quiet);

    /* the senders sample too, then close */
    for (c = 0; c < conns; ++c) {
        if (oob_xfer(fds[c], &byte, 1, 1, "ucp_fanin")) {
            return 2;
        }
    }
    for (c = 0; c < conns; ++c) {
        while (!readable(fds[c])) {
            ucp_worker_progress(worker);
            check_deadline("while the senders closed");
        }
        close(fds[c]);
    }

    for (c = 0; c < conns; ++c) {
        if (seen[c] != n_msgs) {
            fprintf(stderr, "ucp_fanin: connection %u: %u of %u messages\n", c,
                    seen[c], n_msgs);
            ++errors;
        }
    }
    printf("fanin-result: conns=%u msgs=%" PRIu64 " errors=%" PRIu64
           " busy_pool_kib_per_conn=%.1f quiet_pool_kib_per_conn=%.1f"
           " busy_pin_kib_per_conn=%.1f quiet_pin_kib_per_conn=%.1f"
           " quiet_rss_kib_per_conn=%.1f\n",
           conns, got, errors, (double)busy.pool_kib / conns,
           (double)quiet.pool_kib / conns, (double)busy.pin_kib / conns,
           (double)quiet.pin_kib / conns, (double)quiet.rss_kib / conns);
    fflush(stdout);

    for (i = 0; i < RECV_SLOTS; ++i) {
        if (slots[i].req != NULL) {
            ucp_request_cancel(worker, slots[i].req);
            ucp_request_free(slots[i].req);
        }
        free(slots[i].buf);
    }
    for (c = 0; c < n_server_eps; ++c) {
        ucp_request_param_t param = {0};
        void *req;

        param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        param.flags        = UCP_EP_CLOSE_FLAG_FORCE;
        req                = ucp_ep_close_nbx(server_eps[c], &param);
        while (UCS_PTR_IS_PTR(req) &&
               (ucp_request_check_status(req) == UCS_INPROGRESS)) {
            ucp_worker_progress(worker);
        }
        if (UCS_PTR_IS_PTR(req)) {
            ucp_request_free(req);
        }
    }
    if (listener != NULL) {
        ucp_listener_destroy(listener);
    }
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    return errors ? 1 : 0;
}


/* --------------------------------------------------------------- sender */

typedef struct {
    int fd;
    unsigned id; /* the receiver's number for this connection */
    ucp_worker_h worker;
    ucp_ep_h ep;
    unsigned sent, done;
    void *reqs[SEND_WINDOW];
    uint64_t *bufs[SEND_WINDOW];
} send_conn_t;

static void
wait_req(send_conn_t *conns, unsigned n, void *req, const char *what)
{
    ucs_status_t status;
    unsigned w;

    if (req == NULL) {
        return;
    }
    if (UCS_PTR_IS_ERR(req)) {
        fprintf(stderr, "ucp_fanin: %s: %s\n", what,
                ucs_status_string(UCS_PTR_STATUS(req)));
        exit(2);
    }
    while ((status = ucp_request_check_status(req)) == UCS_INPROGRESS) {
        for (w = 0; w < n; ++w) {
            ucp_worker_progress(conns[w].worker);
        }
        check_deadline(what);
    }
    ucp_request_free(req);
    if (status != UCS_OK) {
        fprintf(stderr, "ucp_fanin: %s: %s\n", what, ucs_status_string(status));
        exit(2);
    }
}

static int sender(char *hostport, unsigned workers)
{
    ucp_context_h ctx         = init_context();
    ucp_request_param_t param = {0};
    ucp_ep_params_t eparams   = {0};
    send_conn_t *conns;
    ucp_address_t *peer = NULL;
    struct sockaddr_in sin;
    ucs_status_t status;
    unsigned w, k, busy;
    uint16_t ucp_port;
    uint64_t tag;
    mem_t m;
    char byte;

    conns = calloc(workers, sizeof(*conns));
    if (conns == NULL) {
        return 2;
    }

    for (w = 0; w < workers; ++w) {
        conns[w].worker = init_worker(ctx);
        conns[w].fd     = oob_connect(hostport, "ucp_fanin");
        if ((conns[w].fd < 0) ||
            ((listen_ip != NULL) ?
                     oob_xfer(conns[w].fd, &ucp_port, sizeof(ucp_port), 0,
                              "ucp_fanin") :
                     oob_exchange_address(conns[w].worker, conns[w].fd, &peer,
                                          "ucp_fanin")) ||
            oob_xfer(conns[w].fd, &conns[w].id, sizeof(conns[w].id), 0,
                     "ucp_fanin")) {
            return 2;
        }
        if (listen_ip != NULL) {
            sin                = ip_addr(listen_ip, ucp_port);
            eparams.field_mask = UCP_EP_PARAM_FIELD_FLAGS |
                                 UCP_EP_PARAM_FIELD_SOCK_ADDR |
                                 UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                 UCP_EP_PARAM_FIELD_ERR_HANDLER;
            eparams.flags            = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
            eparams.sockaddr.addr    = (struct sockaddr *)&sin;
            eparams.sockaddr.addrlen = sizeof(sin);
            eparams.err_mode         = UCP_ERR_HANDLING_MODE_PEER;
            eparams.err_handler.cb   = ep_error;
        } else {
            eparams.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
            eparams.address    = peer;
        }
        status = ucp_ep_create(conns[w].worker, &eparams, &conns[w].ep);
        free(peer);
        peer = NULL;
        if (status != UCS_OK) {
            fprintf(stderr, "ucp_ep_create: %s\n", ucs_status_string(status));
            return 2;
        }
        for (k = 0; k < SEND_WINDOW; ++k) {
            conns[w].bufs[k] = malloc(msg_size);
            if (conns[w].bufs[k] == NULL) {
                return 2;
            }
        }
    }

    for (w = 0; w < workers; ++w) {
        if (oob_xfer(conns[w].fd, &byte, 1, 0, "ucp_fanin")) {
            return 2;
        }
    }

    /* each worker keeps SEND_WINDOW sends in flight until all are done */
    do {
        busy = 0;
        for (w = 0; w < workers; ++w) {
            send_conn_t *sc = &conns[w];

            ucp_worker_progress(sc->worker);
            for (k = 0; k < SEND_WINDOW; ++k) {
                if (sc->reqs[k] != NULL) {
                    status = ucp_request_check_status(sc->reqs[k]);
                    if (status == UCS_INPROGRESS) {
                        ++busy;
                        continue;
                    }
                    ucp_request_free(sc->reqs[k]);
                    sc->reqs[k] = NULL;
                    if (status != UCS_OK) {
                        fprintf(stderr, "ucp_fanin: a send failed: %s\n",
                                ucs_status_string(status));
                        return 1;
                    }
                }
                if (sc->sent == n_msgs) {
                    continue;
                }
                tag = ((uint64_t)sc->id << 32) | sc->sent++;
                fill(sc->bufs[k], tag);
                param.op_attr_mask = 0;
                sc->reqs[k] = ucp_tag_send_nbx(sc->ep, sc->bufs[k], msg_size,
                                               tag, &param);
                if (UCS_PTR_IS_ERR(sc->reqs[k])) {
                    fprintf(stderr, "ucp_tag_send_nbx: %s\n",
                            ucs_status_string(UCS_PTR_STATUS(sc->reqs[k])));
                    return 1;
                }
                busy += (sc->reqs[k] != NULL);
            }
            busy += (sc->sent < n_msgs);
        }
        check_deadline("while sending");
    } while (busy > 0);

    /* quiet until the receiver has sampled: progress answers it */
    while (!readable(conns[0].fd)) {
        for (w = 0; w < workers; ++w) {
            ucp_worker_progress(conns[w].worker);
        }
        check_deadline("while quiet");
    }
    for (w = 0; w < workers; ++w) {
        if (oob_xfer(conns[w].fd, &byte, 1, 0, "ucp_fanin")) {
            return 2;
        }
    }

    sample(&m);
    printf("fanin-sender: workers=%u pool_kib=%ld pin_kib=%ld rss_kib=%ld"
           " pool_kib_per_conn=%.1f pin_kib_per_conn=%.1f"
           " rss_kib_per_conn=%.1f\n",
           workers, m.pool_kib, m.pin_kib, m.rss_kib,
           (double)m.pool_kib / workers, (double)m.pin_kib / workers,
           (double)m.rss_kib / workers);
    fflush(stdout);

    for (w = 0; w < workers; ++w) {
        param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        /* flushed; with a listener, forced (its endpoints fail the
         * receiver's side, which handles it) */
        param.flags = (listen_ip != NULL) ? UCP_EP_CLOSE_FLAG_FORCE : 0;
        wait_req(conns, workers, ucp_ep_close_nbx(conns[w].ep, &param),
                 "ucp_ep_close_nbx");
    }
    for (w = 0; w < workers; ++w) {
        close(conns[w].fd);
        ucp_worker_destroy(conns[w].worker);
        for (k = 0; k < SEND_WINDOW; ++k) {
            free(conns[w].bufs[k]);
        }
    }
    ucp_cleanup(ctx);
    free(conns);
    return 0;
}

static void usage(const char *prog)
{
    fprintf(stderr,
            "usage: %s -L port -n conns [-a ip] [-m msgs] [-s size]"
            " [-q quiet_ms] [-t timeout_sec]\n"
            "       %s -C host:port -w workers [-a ip] [-m msgs] [-s size]"
            " [-t timeout_sec]\n",
            prog, prog);
    exit(2);
}

int main(int argc, char **argv)
{
    char *port = NULL, *hostport = NULL;
    unsigned conns = 0, workers = 0;
    int c;

    while ((c = getopt(argc, argv, "L:C:n:w:a:m:s:q:t:h")) != -1) {
        switch (c) {
        case 'a':
            listen_ip = optarg;
            break;
        case 'L':
            port = optarg;
            break;
        case 'C':
            hostport = optarg;
            break;
        case 'n':
            conns = atoi(optarg);
            break;
        case 'w':
            workers = atoi(optarg);
            break;
        case 'm':
            n_msgs = atoi(optarg);
            break;
        case 's':
            msg_size = strtoul(optarg, NULL, 0);
            break;
        case 'q':
            quiet_ms = atoi(optarg);
            break;
        case 't':
            timeout_sec = atoi(optarg);
            break;
        default:
            usage(argv[0]);
        }
    }
    if (((port == NULL) == (hostport == NULL)) ||
        ((port != NULL) && (conns == 0)) ||
        ((hostport != NULL) && (workers == 0)) || (n_msgs == 0) ||
        (msg_size < 8) || (msg_size % 8 != 0)) {
        usage(argv[0]);
    }

    setvbuf(stdout, NULL, _IOLBF, 0);
    deadline = now_sec() + timeout_sec;
    return (port != NULL) ? receiver(port, conns) : sender(hostport, workers);
}
