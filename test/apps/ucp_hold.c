/*
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * ucp_hold: two processes (fork, addresses exchanged over a socketpair)
 * send N messages whose sizes are log-uniform from 0 B to a maximum (1 MiB),
 * over UCP active messages and tag messages. The receiver keeps a random
 * fraction of the active-message data descriptors (its callback returns
 * UCS_INPROGRESS) for a random time before ucp_am_data_release(), and
 * defers a fraction of the rendezvous receives the same way. Every byte is
 * checked when it arrives, and again when a held message is released: the
 * content is a function of the seed, the message index and the offset.
 * Prints counts; exits non-zero on any mismatch, loss or duplicate.
 *
 * usage: ucp_hold [-n count] [-s seed] [-M max_size] [-m min_size]
 *                 [-p hold_percent] [-t hold_max_usec] [-H max_held]
 *                 [-T am|tag|both] [-D bytes] [-d seconds] [-S interval_ms]
 *                 [-P max_pause_ms [-E every]] [-L port | -C host:port]
 *   -D  fail if an eager active message of more than this many bytes
 *       arrives without a data descriptor
 *       (the transport delivered it without UCT_CB_PARAM_FLAG_DESC)
 *   -L  be the receiver only, on another host than the sender: listen on
 *       TCP port for the sender's connection (the addresses and results go
 *       over it instead of the socketpair)
 *   -C  be the sender only, connecting to the receiver's host:port; both
 *       sides must be given the same options
 *   -d  send for this many seconds instead of a count (-n, if given, is
 *       then a limit); the sender tells the receiver how many it sent. The
 *       receiver checks duplicates and losses in a window of SEEN_WINDOW
 *       messages: one arriving that far after the first still missing is
 *       an error
 *   -P  the receiver stops progressing (sleeps) for a random 1/4 to all of
 *       max_pause_ms after every E messages it received (-E, default
 *       2000), and prints how many pauses and the longest (as slept, an
 *       oversleep included), and the longest time between two messages'
 *       arrivals with its pauses (as slept) not counted
 *       (what the transport added: an RNR NAK's wait, say); the sender prints
 *       its longest stall, the longest time one send waited for the one
 *       SEND_WINDOW sends before it to complete (from the third window on:
 *       the first ones wait for the connection; the endpoint's wireup,
 *       which ends when the receiver's endpoint back to us is connected,
 *       can still hold a later one: a second or two under emulation)
 *   -S  every interval_ms, each side prints a line "sample SIDE T RSS_KIB
 *       ANON_KIB SHMEM_KIB VMAS RING_VMAS FOLD_VMAS FDS POOL_BLOCKS MESSAGES
 *       HELD" (proc_stats.h; FOLD_VMAS: of the VMAS, those the pool's
 *       folded pages added; POOL_BLOCKS -1 without the module's counter, HELD -1
 *       for the sender), from the start of the traffic, and one at its end
 */
#define _GNU_SOURCE
#include "proc_stats.h"
#include "ucp_oob.h"

#include <ucp/api/ucp.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define AM_ID       7
#define SEND_WINDOW 16
#define SEEN_WINDOW (1ul << 20) /* -d: messages whose arrival is tracked */

typedef struct {
    uint64_t index;
    uint64_t length;
} msg_hdr_t;

typedef enum {
    HELD_DATA,   /* eager data descriptor, released with ucp_am_data_release */
    HELD_RNDV    /* rendezvous descriptor, received later with recv_data_nbx */
} held_kind_t;

typedef struct {
    held_kind_t kind;
    void        *data;
    uint64_t    index;
    size_t      length;
    double      deadline;
} held_t;

typedef struct {
    uint64_t index;
    size_t   length;
    void     *buffer;
    int      done;
} rx_req_t;

static struct {
    uint64_t count;
    uint64_t seed;
    size_t   max_size;
    size_t   min_size;
    double   hold_frac;
    double   hold_usec;
    size_t   max_held;
    int      use_am;
    int      use_tag;
    long     expect_desc; /* -1: no check */
    double   duration;    /* seconds; 0: send count messages */
    double   sample_ms;   /* 0: no samples */
    double   pause_ms;    /* 0: the receiver never pauses */
    uint64_t pause_every;
} opt = {100000, 1, 1 << 20, 0, 0.25, 2000, 1024, 1, 1, -1, 0, 0, 0, 2000};

/* -S: the module's pool block counter, and when the next sample is due */
static struct {
    proc_stats_pool_used_fn_t pool_used;
    double   t0;
    double   next;
} sampler;

static struct {
    ucp_worker_h worker;
    /* seen[i % seen_window]: message i arrived; every message below
     * seen_lo did. total: messages sent (-d: UINT64_MAX until told) */
    uint8_t      *seen;
    uint64_t     seen_window, seen_lo, total;
    held_t       *held;
    size_t       nheld, cap_held;
    uint64_t     rng;
    uint64_t     errors;
    uint64_t     am_msgs, tag_msgs, am_expected, tag_expected;
    uint64_t     bytes, held_msgs, held_bytes, held_rndv, rndv_msgs;
    uint64_t     no_desc, max_nheld, rndv_inflight;
    uint64_t     npauses, next_pause;
    double       max_pause_us;
    double       last_arrival, paused_us, max_gap_us; /* -P */
} rx;

static int oob_fd = -1;

/* whether the other process has exited (its end of the socket closed), so
 * that a crash on one side fails the run instead of hanging the other */
static int peer_gone(void)
{
    char    c;
    ssize_t n = recv(oob_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);

    return (n == 0) ||
           ((n < 0) && (errno != EAGAIN) && (errno != EWOULDBLOCK) &&
            (errno != EINTR));
}

static void check_peer(unsigned *spins)
{
    if ((++*spins % 4096) == 0 && peer_gone()) {
        fprintf(stderr, "the other process exited\n");
        exit(3);
    }
}

static double now_usec(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* -S: prints a sample if one is due (or if force) */
static void sample(const char *side, uint64_t msgs, long held, int force)
{
    proc_stats_t s;
    double       t;

    if (!opt.sample_ms) {
        return;
    }
    t = now_usec();
    if (!force && (t < sampler.next)) {
        return;
    }
    proc_stats_read(&s, sampler.pool_used);
    printf("sample %s %.3f %ld %ld %ld %ld %ld %ld %ld %ld %" PRIu64 " %ld\n",
           side, (t - sampler.t0) / 1e6, s.rss_kib, s.anon_kib, s.shmem_kib,
           s.vmas, s.ring_vmas, s.fold_vmas, s.fds, s.blocks, msgs, held);
    fflush(stdout);
    while (sampler.next <= t) {
        sampler.next += opt.sample_ms * 1e3;
    }
}

/* -S: a buffer used in part by each message (a send or receive buffer,
 * the window of arrived messages) is made resident whole at the start, so
 * that its pages, touched as larger messages or later indices come, are
 * not taken for growth. A zero is stored in each page through a volatile
 * pointer: the compiler drops a memset() of memory it knows is zeroed
 * (calloc), and turns malloc() and memset() into calloc() */
static void touch(void *buf, size_t len)
{
    volatile char *p = buf;
    size_t        off;

    if (opt.sample_ms) {
        for (off = 0; off < len; off += 4096) {
            p[off] = 0;
        }
    }
}

static void sample_start(void)
{
    sampler.t0   = now_usec();
    sampler.next = sampler.t0;
}

/* size of message i: log-uniform in [min_size, max_size], 0 included */
static size_t msg_size(uint64_t i)
{
    double u   = (splitmix64(splitmix64(opt.seed ^ 0x512e) ^ i) >> 11) *
                 0x1.0p-53;
    double top = log2((double)(opt.max_size - opt.min_size) + 2.0);
    size_t s   = (size_t)floor(exp2(u * top)) - 1;

    return opt.min_size + (s > opt.max_size - opt.min_size ?
                           opt.max_size - opt.min_size : s);
}

/* 1 if message i goes over the tag API, 0 for active messages */
static int msg_is_tag(uint64_t i)
{
    if (!opt.use_am) {
        return 1;
    } else if (!opt.use_tag) {
        return 0;
    }
    return (splitmix64(splitmix64(opt.seed ^ 0x7a67) ^ i) & 3) == 0;
}

/* the content of message i: word w is a hash of (seed, i) and w */
static uint64_t pattern_base(uint64_t i)
{
    return splitmix64(splitmix64(opt.seed) ^ i);
}

static uint64_t pattern_word(uint64_t base, uint64_t w)
{
    return splitmix64(base + (w << 32) + w);
}

static void fill(void *buf, uint64_t i, size_t len)
{
    uint64_t base = pattern_base(i);
    size_t   w;
    uint64_t v;

    for (w = 0; w < len / 8; ++w) {
        v = pattern_word(base, w);
        memcpy((char*)buf + w * 8, &v, 8);
    }
    if (len % 8) {
        v = pattern_word(base, w);
        memcpy((char*)buf + w * 8, &v, len % 8);
    }
}

/* returns 0 if buf holds the content of message i */
static int check(const void *buf, uint64_t i, size_t len, const char *when)
{
    uint64_t base = pattern_base(i);
    size_t   w, off;
    uint64_t v, got;

    for (w = 0; w * 8 < len; ++w) {
        v = pattern_word(base, w);
        if (len - w * 8 >= 8) {
            memcpy(&got, (const char*)buf + w * 8, 8);
            if (got == v) {
                continue;
            }
        } else if (!memcmp((const char*)buf + w * 8, &v, len - w * 8)) {
            continue;
        }
        for (off = w * 8; off < len && off < w * 8 + 8; ++off) {
            if (((const uint8_t*)buf)[off] != ((uint8_t*)&v)[off - w * 8]) {
                break;
            }
        }
        fprintf(stderr, "mismatch %s: message %" PRIu64 " length %zu "
                "offset %zu\n", when, i, len, off);
        ++rx.errors;
        return -1;
    }
    return 0;
}

static void mark_seen(uint64_t i, size_t len, int is_tag)
{
    if (i >= rx.total) {
        fprintf(stderr, "bad message index %" PRIu64 "\n", i);
        ++rx.errors;
        return;
    }
    if (i >= rx.seen_lo + rx.seen_window) {
        fprintf(stderr, "message %" PRIu64 " arrived %" PRIu64 " messages "
                "after message %" PRIu64 ", not arrived yet\n", i,
                i - rx.seen_lo, rx.seen_lo);
        ++rx.errors;
        return;
    }
    if ((i < rx.seen_lo) || rx.seen[i % rx.seen_window]) {
        fprintf(stderr, "duplicate message %" PRIu64 "\n", i);
        ++rx.errors;
    }
    rx.seen[i % rx.seen_window] = 1;
    /* -d: the slots below the first missing message are reused */
    while ((rx.seen_window < rx.total) && (rx.seen_lo < rx.total) &&
           rx.seen[rx.seen_lo % rx.seen_window]) {
        rx.seen[rx.seen_lo++ % rx.seen_window] = 0;
    }
    if (len != msg_size(i)) {
        fprintf(stderr, "message %" PRIu64 ": length %zu, expected %zu\n",
                i, len, msg_size(i));
        ++rx.errors;
    }
    if (msg_is_tag(i) != is_tag) {
        fprintf(stderr, "message %" PRIu64 " came over the wrong API\n", i);
        ++rx.errors;
    }
    rx.bytes += len;
}

static uint64_t rx_rand(void)
{
    return rx.rng = splitmix64(rx.rng);
}

static int want_hold(void)
{
    return (rx.nheld < opt.max_held) &&
           ((rx_rand() >> 11) * 0x1.0p-53 < opt.hold_frac);
}

static void hold(held_kind_t kind, void *data, uint64_t i, size_t len)
{
    held_t *h;

    if (rx.nheld == rx.cap_held) {
        rx.cap_held = rx.cap_held ? 2 * rx.cap_held : 64;
        rx.held     = realloc(rx.held, rx.cap_held * sizeof(*rx.held));
        if (rx.held == NULL) {
            fprintf(stderr, "out of memory\n");
            exit(2);
        }
    }
    h = &rx.held[rx.nheld++];

    h->kind     = kind;
    h->data     = data;
    h->index    = i;
    h->length   = len;
    h->deadline = now_usec() + (rx_rand() >> 11) * 0x1.0p-53 * opt.hold_usec;
    if (rx.nheld > rx.max_nheld) {
        rx.max_nheld = rx.nheld;
    }
}

static void rndv_done(void *request, ucs_status_t status, size_t length,
                      void *user_data)
{
    rx_req_t *r = user_data;

    if (status != UCS_OK) {
        fprintf(stderr, "rendezvous receive of message %" PRIu64 ": %s\n",
                r->index, ucs_status_string(status));
        ++rx.errors;
    }
    r->done = 1;
}

static void rndv_finish(rx_req_t *r)
{
    check(r->buffer, r->index, r->length, "after rendezvous");
    ++rx.am_msgs;
    free(r->buffer);
    free(r);
}

/* receives rendezvous message i into a fresh buffer */
static void rndv_recv(void *desc, uint64_t i, size_t len)
{
    rx_req_t          *r = calloc(1, sizeof(*r));
    ucp_request_param_t param;
    ucs_status_ptr_t  sp;
    unsigned          spins = 0;

    r->index  = i;
    r->length = len;
    r->buffer = malloc(len ? len : 1);
    if (r == NULL || r->buffer == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.recv_am   = rndv_done;
    param.user_data    = r;
    sp = ucp_am_recv_data_nbx(rx.worker, desc, r->buffer, len, &param);
    if (UCS_PTR_IS_ERR(sp)) {
        fprintf(stderr, "ucp_am_recv_data_nbx: %s\n",
                ucs_status_string(UCS_PTR_STATUS(sp)));
        ++rx.errors;
        free(r->buffer);
        free(r);
        return;
    } else if (sp == NULL) {
        rndv_finish(r);
        return;
    }
    ++rx.rndv_inflight;
    while (!r->done) {
        ucp_worker_progress(rx.worker);
        check_peer(&spins);
    }
    --rx.rndv_inflight;
    ucp_request_free(sp);
    rndv_finish(r);
}

/* -P: a message arrived; the longest time between two, the receiver's own
 * pauses not counted, is how long the transport kept messages from it */
static void arrived(void)
{
    double now = now_usec(), gap;

    if (opt.pause_ms <= 0) {
        return;
    }
    gap = now - rx.last_arrival - rx.paused_us;
    if ((rx.last_arrival > 0) && (gap > rx.max_gap_us)) {
        rx.max_gap_us = gap;
    }
    rx.last_arrival = now;
    rx.paused_us    = 0;
}

static ucs_status_t am_cb(void *arg, const void *header, size_t header_length,
                          void *data, size_t length,
                          const ucp_am_recv_param_t *param)
{
    msg_hdr_t hdr;

    if (header_length != sizeof(hdr)) {
        fprintf(stderr, "header length %zu\n", header_length);
        ++rx.errors;
        return UCS_OK;
    }
    memcpy(&hdr, header, sizeof(hdr));
    mark_seen(hdr.index, length, 0);
    arrived();

    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
        ++rx.rndv_msgs;
        /* a rendezvous receive started from here would nest progress in
         * the callback: keep the descriptor, receive it from the main loop */
        if (want_hold()) {
            ++rx.held_rndv;
            hold(HELD_RNDV, data, hdr.index, length);
        } else {
            hold(HELD_RNDV, data, hdr.index, length);
            rx.held[rx.nheld - 1].deadline = 0;
        }
        return UCS_INPROGRESS;
    }

    check(data, hdr.index, length, "on arrival");
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA)) {
        ++rx.no_desc;
        if ((opt.expect_desc >= 0) && (length > (size_t)opt.expect_desc)) {
            fprintf(stderr, "message %" PRIu64 " length %zu arrived without "
                    "a data descriptor\n", hdr.index, length);
            ++rx.errors;
        }
        ++rx.am_msgs;
        return UCS_OK;
    }
    if (want_hold()) {
        ++rx.held_msgs;
        rx.held_bytes += length;
        hold(HELD_DATA, data, hdr.index, length);
        return UCS_INPROGRESS;
    }
    ++rx.am_msgs;
    return UCS_OK;
}

/* releases the held messages whose time has come (all if force) */
static void release_due(int force)
{
    double t = now_usec();
    held_t h;
    size_t k;

    for (k = 0; k < rx.nheld;) {
        if (!force && rx.held[k].deadline > t) {
            ++k;
            continue;
        }
        h           = rx.held[k];
        rx.held[k]  = rx.held[--rx.nheld];
        if (h.kind == HELD_DATA) {
            check(h.data, h.index, h.length, "after holding");
            ucp_am_data_release(rx.worker, h.data);
            ++rx.am_msgs;
        } else {
            rndv_recv(h.data, h.index, h.length);
        }
    }
}

/* the messages of each API among the first rx.total */
static void count_expected(void)
{
    uint64_t i;

    rx.am_expected = rx.tag_expected = 0;
    for (i = 0; i < rx.total; ++i) {
        if (msg_is_tag(i)) {
            ++rx.tag_expected;
        } else {
            ++rx.am_expected;
        }
    }
}

static void tag_done(void *request, ucs_status_t status,
                     const ucp_tag_recv_info_t *info, void *user_data)
{
    rx_req_t *r = user_data;

    if ((status == UCS_ERR_CANCELED) && (r->index >= rx.total)) {
        /* -d: the receive for a message the sender did not send */
    } else if (status != UCS_OK) {
        fprintf(stderr, "tag receive %" PRIu64 ": %s\n", r->index,
                ucs_status_string(status));
        ++rx.errors;
    } else {
        r->length = info->length;
        arrived();
    }
    r->done = 1;
}

static int xfer(int fd, void *buf, size_t len, int out)
{
    return oob_xfer(fd, buf, len, out, "ucp_hold");
}

/* -d: reads the number of messages sent, once the sender has written it;
 * returns 0 when it has, -1 if not yet */
static int total_told(int fd)
{
    uint64_t total;
    char     c;

    if (recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) != 1) {
        return -1;
    } else if (xfer(fd, &total, sizeof(total), 0)) {
        exit(2);
    }
    rx.total = total;
    count_expected();
    return 0;
}

static void oob_barrier(int fd)
{
    char c = 0;

    if (xfer(fd, &c, 1, 1) || xfer(fd, &c, 1, 0)) {
        exit(2);
    }
}

static void wait_req(ucp_worker_h worker, ucs_status_ptr_t sp,
                     const char *what)
{
    ucs_status_t status;
    unsigned     spins = 0;

    if (sp == NULL) {
        return;
    } else if (UCS_PTR_IS_ERR(sp)) {
        fprintf(stderr, "%s: %s\n", what,
                ucs_status_string(UCS_PTR_STATUS(sp)));
        exit(2);
    }
    do {
        ucp_worker_progress(worker);
        check_peer(&spins);
        status = ucp_request_check_status(sp);
    } while (status == UCS_INPROGRESS);
    ucp_request_free(sp);
    if (status != UCS_OK) {
        fprintf(stderr, "%s: %s\n", what, ucs_status_string(status));
        exit(2);
    }
}

/* context, worker and an endpoint to the peer whose address comes over fd */
static void setup(int fd, ucp_context_h *ctx_p, ucp_worker_h *worker_p,
                  ucp_ep_h *ep_p)
{
    ucp_params_t        params = {0};
    ucp_worker_params_t wparams = {0};
    ucp_ep_params_t     eparams = {0};
    ucp_address_t       *peer;
    ucs_status_t        status;

    params.field_mask   = UCP_PARAM_FIELD_FEATURES;
    params.features     = UCP_FEATURE_AM | UCP_FEATURE_TAG;
    status = ucp_init(&params, NULL, ctx_p);
    if (status != UCS_OK) {
        fprintf(stderr, "ucp_init: %s\n", ucs_status_string(status));
        exit(2);
    }
    wparams.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    status = ucp_worker_create(*ctx_p, &wparams, worker_p);
    if (status != UCS_OK) {
        fprintf(stderr, "ucp_worker_create: %s\n", ucs_status_string(status));
        exit(2);
    }
    if (oob_exchange_address(*worker_p, fd, &peer, "ucp_hold") != 0) {
        exit(2);
    }
    eparams.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    eparams.address    = peer;
    status = ucp_ep_create(*worker_p, &eparams, ep_p);
    free(peer);
    if (status != UCS_OK) {
        fprintf(stderr, "ucp_ep_create: %s\n", ucs_status_string(status));
        exit(2);
    }
}

static void teardown(int fd, ucp_context_h ctx, ucp_worker_h worker,
                     ucp_ep_h ep)
{
    ucp_request_param_t param = {0};

    oob_barrier(fd);
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags        = 0;
    wait_req(worker, ucp_ep_close_nbx(ep, &param), "ucp_ep_close_nbx");
    oob_barrier(fd);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
}

static int sender(int fd)
{
    ucp_context_h       ctx;
    ucp_worker_h        worker;
    ucp_ep_h            ep;
    ucp_request_param_t param = {0};
    ucs_status_ptr_t    reqs[SEND_WINDOW] = {NULL};
    msg_hdr_t           hdrs[SEND_WINDOW];
    void                *bufs[SEND_WINDOW];
    uint64_t            i, bytes = 0, ntag = 0;
    size_t              len;
    int                 k;
    char                result;
    double              deadline;

    double              t, max_stall_us = 0;
    uint64_t            stall_at = 0;

    setup(fd, &ctx, &worker, &ep);
    for (k = 0; k < SEND_WINDOW; ++k) {
        bufs[k] = malloc(opt.max_size ? opt.max_size : 1);
        if (bufs[k] == NULL) {
            return 2;
        }
        touch(bufs[k], opt.max_size);
    }
    oob_barrier(fd);
    sample_start();
    deadline = now_usec() + opt.duration * 1e6;

    for (i = 0; i < opt.count; ++i) {
        if (opt.duration && (now_usec() >= deadline)) {
            break;
        }
        sample("sender", i, -1, 0);
        k = i % SEND_WINDOW;
        t = now_usec();
        wait_req(worker, reqs[k], "send");
        t = now_usec() - t;
        /* the first window's completions wait for the connection too */
        if ((i >= 2 * SEND_WINDOW) && (t > max_stall_us)) {
            max_stall_us = t;
            stall_at     = i;
        }
        reqs[k] = NULL;
        len = msg_size(i);
        fill(bufs[k], i, len);
        param.op_attr_mask = 0;
        if (msg_is_tag(i)) {
            reqs[k] = ucp_tag_send_nbx(ep, bufs[k], len, i, &param);
            ++ntag;
        } else {
            hdrs[k].index  = i;
            hdrs[k].length = len;
            reqs[k] = ucp_am_send_nbx(ep, AM_ID, &hdrs[k], sizeof(hdrs[k]),
                                      bufs[k], len, &param);
        }
        if (UCS_PTR_IS_ERR(reqs[k])) {
            fprintf(stderr, "send %" PRIu64 ": %s\n", i,
                    ucs_status_string(UCS_PTR_STATUS(reqs[k])));
            return 2;
        }
        bytes += len;
        ucp_worker_progress(worker);
    }
    for (k = 0; k < SEND_WINDOW; ++k) {
        wait_req(worker, reqs[k], "send");
    }
    param.op_attr_mask = 0;
    wait_req(worker, ucp_worker_flush_nbx(worker, &param), "flush");
    sample("sender", i, -1, 1);
    printf("sender: %" PRIu64 " messages (%" PRIu64 " tag), %" PRIu64
           " bytes\n", i, ntag, bytes);
    if (opt.pause_ms > 0) {
        printf("sender: longest stall %.1f ms, before message %" PRIu64 "\n",
               max_stall_us / 1e3, stall_at);
    }
    fflush(stdout);
    /* -d: the receiver learns how many messages there were */
    if (opt.duration && xfer(fd, &i, sizeof(i), 1)) {
        return 2;
    }

    /* keep progressing (rendezvous gets, credits) until the receiver is
     * done */
    for (;;) {
        ssize_t n = recv(fd, &result, 1, MSG_DONTWAIT);
        if (n == 1) {
            break;
        } else if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            fprintf(stderr, "receiver gone\n");
            return 2;
        }
        ucp_worker_progress(worker);
    }
    teardown(fd, ctx, worker, ep);
    for (k = 0; k < SEND_WINDOW; ++k) {
        free(bufs[k]);
    }
    return 0;
}

static int receiver(int fd)
{
    ucp_context_h             ctx;
    ucp_ep_h                  ep;
    ucp_am_handler_param_t    hparam = {0};
    ucp_request_param_t       param  = {0};
    rx_req_t                  treq;
    ucs_status_ptr_t          sp     = NULL;
    uint64_t                  next_tag = 0, i, lost = 0;
    void                      *tbuf;
    unsigned                  spins  = 0;
    double                    t0, t1;
    char                      result = 1;
    ucs_status_t              status;

    setup(fd, &ctx, &rx.worker, &ep);
    if (opt.duration) {
        rx.total          = UINT64_MAX;
        rx.seen_window    = SEEN_WINDOW;
        rx.am_expected    = UINT64_MAX;
        rx.tag_expected   = UINT64_MAX;
    } else {
        rx.total          = opt.count;
        rx.seen_window    = opt.count;
        count_expected();
    }
    rx.seen = calloc(rx.seen_window, 1);
    tbuf    = malloc(opt.max_size ? opt.max_size : 1);
    if (rx.seen == NULL || tbuf == NULL) {
        return 2;
    }
    touch(tbuf, opt.max_size);
    touch(rx.seen, rx.seen_window);
    rx.rng        = splitmix64(opt.seed ^ 0x5eed);
    rx.next_pause = opt.pause_every;

    hparam.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                        UCP_AM_HANDLER_PARAM_FIELD_CB |
                        UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    hparam.id         = AM_ID;
    hparam.cb         = am_cb;
    hparam.flags      = UCP_AM_FLAG_WHOLE_MSG;
    status = ucp_worker_set_am_recv_handler(rx.worker, &hparam);
    if (status != UCS_OK) {
        fprintf(stderr, "ucp_worker_set_am_recv_handler: %s\n",
                ucs_status_string(status));
        return 2;
    }
    oob_barrier(fd);
    t0 = now_usec();
    sample_start();

    while ((rx.am_msgs < rx.am_expected) || (rx.tag_msgs < rx.tag_expected) ||
           (sp != NULL)) {
        /* -d: the sender says how many messages it sent when it is done;
         * a receive posted for one it did not send is cancelled */
        if ((rx.total == UINT64_MAX) && ((spins % 256) == 0) &&
            (total_told(fd) == 0) && (sp != NULL) &&
            (treq.index >= rx.total)) {
            ucp_request_cancel(rx.worker, sp);
        }
        /* one tag receive posted at a time, in index order */
        if ((sp == NULL) && (rx.tag_msgs < rx.tag_expected)) {
            while ((next_tag < rx.total) && !msg_is_tag(next_tag)) {
                ++next_tag;
            }
            treq.index         = next_tag;
            treq.done          = 0;
            param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                 UCP_OP_ATTR_FIELD_USER_DATA |
                                 UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
            param.cb.recv      = tag_done;
            param.user_data    = &treq;
            sp = ucp_tag_recv_nbx(rx.worker, tbuf, opt.max_size, next_tag,
                                  UINT64_MAX, &param);
            if ((sp == NULL) || UCS_PTR_IS_ERR(sp)) {
                fprintf(stderr, "ucp_tag_recv_nbx: %s\n",
                        ucs_status_string(UCS_PTR_STATUS(sp)));
                return 2;
            }
        }
        ucp_worker_progress(rx.worker);
        if ((sp != NULL) && treq.done && (treq.index >= rx.total)) {
            ucp_request_free(sp); /* cancelled */
            sp = NULL;
        } else if ((sp != NULL) && treq.done) {
            ucp_request_free(sp);
            sp = NULL;
            mark_seen(treq.index, treq.length, 1);
            check(tbuf, treq.index, treq.length, "tag receive");
            ++rx.tag_msgs;
            ++next_tag;
        }
        if ((spins % 64) == 0 || rx.nheld >= opt.max_held) {
            release_due(0);
        }
        /* -P: no progress for a while, as a busy application makes none */
        if ((opt.pause_ms > 0) &&
            (rx.am_msgs + rx.tag_msgs >= rx.next_pause)) {
            double pause_us = opt.pause_ms * 1e3 *
                              (0.25 + 0.75 * (rx_rand() % 1000) / 999.0);
            double since = now_usec();

            usleep((useconds_t)pause_us);
            /* what the pause took, not what it asked for: a loaded host
             * (or a guest under TCG) oversleeps by far more than the gaps
             * the transport makes */
            pause_us = now_usec() - since;
            rx.paused_us += pause_us;
            ++rx.npauses;
            if (pause_us > rx.max_pause_us) {
                rx.max_pause_us = pause_us;
            }
            rx.next_pause = rx.am_msgs + rx.tag_msgs + opt.pause_every;
        }
        sample("receiver", rx.am_msgs + rx.tag_msgs, rx.nheld, 0);
        check_peer(&spins);
        if (rx.errors > 20) {
            break;
        }
    }
    release_due(1);
    t1 = now_usec();
    sample("receiver", rx.am_msgs + rx.tag_msgs, rx.nheld, 1);

    for (i = rx.seen_lo; (i < rx.total) && (i < rx.seen_lo + rx.seen_window);
         ++i) {
        lost += !rx.seen[i % rx.seen_window];
    }
    if (rx.total == UINT64_MAX) {
        lost = 0; /* stopped by errors before the sender was done */
    }
    if (lost && !rx.errors) {
        fprintf(stderr, "%" PRIu64 " messages lost\n", lost);
    }
    printf("receiver: %" PRIu64 " messages (%" PRIu64 " am, %" PRIu64
           " tag, %" PRIu64 " am rendezvous), %" PRIu64 " bytes, "
           "%.1f s, %.0f MB/s\n", rx.am_msgs + rx.tag_msgs, rx.am_msgs,
           rx.tag_msgs, rx.rndv_msgs, rx.bytes, (t1 - t0) / 1e6,
           rx.bytes / (t1 - t0));
    printf("receiver: held %" PRIu64 " eager messages (%" PRIu64 " bytes), "
           "deferred %" PRIu64 " rendezvous, at most %" PRIu64 " at once; "
           "%" PRIu64 " without a data descriptor\n", rx.held_msgs,
           rx.held_bytes, rx.held_rndv, rx.max_nheld, rx.no_desc);
    if (opt.pause_ms > 0) {
        printf("receiver: %" PRIu64 " pauses, longest %.1f ms; longest gap"
               " between messages, pauses not counted, %.1f ms\n",
               rx.npauses, rx.max_pause_us / 1e3, rx.max_gap_us / 1e3);
    }
    printf("receiver: %" PRIu64 " errors, %" PRIu64 " lost\n", rx.errors,
           lost);
    fflush(stdout);

    result = (rx.errors || lost) ? 1 : 0;
    if (xfer(fd, &result, 1, 1)) {
        return 2;
    }
    teardown(fd, ctx, rx.worker, ep);
    free(tbuf);
    free(rx.held);
    free(rx.seen);
    return result;
}

static void usage(const char *prog)
{
    fprintf(stderr, "usage: %s [-n count] [-s seed] [-M max_size] "
            "[-m min_size] [-p hold_percent] [-t hold_max_usec] "
            "[-H max_held] [-T am|tag|both] [-D bytes] [-d seconds] "
            "[-S interval_ms] [-P max_pause_ms [-E every]] "
            "[-L port | -C host:port]\n", prog);
    exit(2);
}

int main(int argc, char **argv)
{
    int   sv[2], c, st, rc, count_given = 0;
    char  *listen_port = NULL, *connect_addr = NULL;
    pid_t pid;

    while ((c = getopt(argc, argv, "n:s:M:m:p:t:H:T:D:d:S:P:E:L:C:h")) != -1) {
        switch (c) {
        case 'n':
            opt.count   = strtoull(optarg, NULL, 0);
            count_given = 1;
            break;
        case 'd': opt.duration    = atof(optarg);              break;
        case 'S': opt.sample_ms   = atof(optarg);              break;
        case 'P': opt.pause_ms    = atof(optarg);              break;
        case 'E': opt.pause_every = strtoull(optarg, NULL, 0); break;
        case 's': opt.seed        = strtoull(optarg, NULL, 0); break;
        case 'M': opt.max_size    = strtoull(optarg, NULL, 0); break;
        case 'm': opt.min_size    = strtoull(optarg, NULL, 0); break;
        case 'p': opt.hold_frac   = atof(optarg) / 100.0;      break;
        case 't': opt.hold_usec   = atof(optarg);              break;
        case 'H': opt.max_held    = strtoull(optarg, NULL, 0); break;
        case 'D': opt.expect_desc = atol(optarg);              break;
        case 'L': listen_port     = optarg;                    break;
        case 'C': connect_addr    = optarg;                    break;
        case 'T':
            opt.use_am  = strcmp(optarg, "tag") != 0;
            opt.use_tag = strcmp(optarg, "am") != 0;
            break;
        default:
            usage(argv[0]);
        }
    }
    if ((opt.count == 0) || (opt.min_size > opt.max_size) ||
        (opt.max_held == 0) || (opt.duration < 0) || (opt.sample_ms < 0)) {
        usage(argv[0]);
    }
    if (opt.duration && !count_given) {
        opt.count = UINT64_MAX;
    }
    if (opt.duration) {
        printf("ucp_hold: messages for %.0f s", opt.duration);
    } else {
        printf("ucp_hold: %" PRIu64 " messages", opt.count);
    }
    printf(", %zu..%zu bytes log-uniform, "
           "seed %" PRIu64 ", hold %.0f%% up to %.0f usec (at most %zu), "
           "%s\n", opt.min_size, opt.max_size, opt.seed,
           opt.hold_frac * 100, opt.hold_usec, opt.max_held,
           opt.use_am && opt.use_tag ? "am and tag" :
           opt.use_am ? "am" : "tag");
    if (opt.sample_ms) {
        sampler.pool_used = proc_stats_pool_used_fn();
        printf("samples every %.0f ms: sample side t_s rss_kib anon_kib "
               "shmem_kib vmas ring_vmas fold_vmas fds pool_blocks messages "
               "held%s\n",
               opt.sample_ms,
               sampler.pool_used == NULL ?
                       " (no remapring_pool_blocks_in_use(): pool_blocks -1)" :
                       "");
    }
    fflush(stdout);

    if ((listen_port != NULL) || (connect_addr != NULL)) {
        if ((listen_port != NULL) && (connect_addr != NULL)) {
            usage(argv[0]);
        }
        oob_fd = (listen_port != NULL) ? oob_accept_one(listen_port, "ucp_hold") :
                 oob_connect(connect_addr, "ucp_hold");
        if (oob_fd < 0) {
            return 2;
        }
        if (connect_addr != NULL) {
            return sender(oob_fd);
        }
        rc = receiver(oob_fd);
        if (rc == 0) {
            printf("PASS\n");
        }
        return rc;
    }

    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0) {
        perror("socketpair");
        return 2;
    }
    pid = fork();
    if (pid < 0) {
        perror("fork");
        return 2;
    } else if (pid == 0) {
        close(sv[0]);
        oob_fd = sv[1];
        _exit(sender(sv[1]));
    }
    close(sv[1]);
    oob_fd = sv[0];
    rc     = receiver(sv[0]);
    if (waitpid(pid, &st, 0) < 0) {
        perror("waitpid");
        return 2;
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st)) {
        fprintf(stderr, "sender failed (status 0x%x)\n", st);
        return rc ? rc : 1;
    }
    if (rc == 0) {
        printf("PASS\n");
    }
    return rc;
}
