/*
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * ucp_kill: a peer killed (SIGKILL) at a random moment of UCP traffic, many
 * times over; the survivor must see an error soon and get every resource
 * the peer cost it back.
 *
 * The survivor (this process) keeps one UCP context and worker for all the
 * trials. Each trial it starts a victim (itself again, exec'd, so that the
 * victim's UCX starts clean), exchanges worker addresses with it over a
 * socketpair, and both stream to each other, in the trial's kind:
 *   tag   eager tag messages (1 KiB) both ways
 *   am    active messages (1 KiB) both ways
 *   rndv  tag messages of 256 KiB both ways (rendezvous)
 * After the survivor's first message from the victim and a random delay
 * (0 to -w milliseconds), it kills the victim and counts the time until its
 * endpoint fails (the error handler, or a request completing with an
 * error). Then it cancels its receives, closes the endpoint (force), and
 * progresses, taking unexpected messages off the worker (what the victim
 * wrote before it died is still delivered), until its open file
 * descriptors, the mappings of the transport's memfds (/proc/self/maps)
 * and the blocks of the transport's receive pools in use
 * (remapring_pool_blocks_in_use(), found with dlsym() in the preloaded
 * module) are what they were before the victim came: within a second, or
 * the trial fails (it waits up to 10 s, to tell slow from lost).
 *
 * A first trial, where the victim exits on its own, warms the process up
 * (lazily started threads and caches); the counts before each later trial
 * are compared with those after it, and the last with the first.
 *
 * Prints one line per failing trial and a tally; exits 0 only if every
 * trial saw its error within -e milliseconds of the kill and got its
 * resources back.
 *
 * usage: ucp_kill [-n trials] [-k tag|am|rndv|all] [-w max_delay_ms]
 *                 [-e max_error_ms] [-s seed] [-v]
 *   -n  trials (200), -k the kinds, taken in turn (all), -w 200, -e 1000
 */
#define _GNU_SOURCE
#include "proc_stats.h"
#include "ucp_oob.h"

#include <ucp/api/ucp.h>

#include <errno.h>
#include <fcntl.h>
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

#define AM_ID      11
#define SMALL_SIZE 1024
#define LARGE_SIZE (256 * 1024)
#define WINDOW     8
#define TAG_MASK   UINT64_MAX

typedef enum {
    KIND_TAG,
    KIND_AM,
    KIND_RNDV,
    KIND_LAST
} kind_t;

static const char *kind_names[] = {"tag", "am", "rndv"};

typedef struct {
    long fds;
    long vmas;
    long blocks; /* -1: the module's counter was not found */
} counts_t;

typedef struct {
    int         done;
    ucs_status_t status;
} req_t;

static struct {
    ucp_context_h context;
    ucp_worker_h  worker;
    ucp_ep_h      ep;
    int           ep_failed;
    ucs_status_t  ep_status;
    uint64_t      am_count;
    proc_stats_pool_used_fn_t pool_used;
} g;

static double now_sec(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void take_counts(counts_t *c)
{
    /* the transport's memfd mappings only: the rest of the process's
     * mappings move with malloc and UCX's memory pools, which keep what
     * they grew to */
    c->fds    = proc_stats_fds();
    c->vmas   = proc_stats_vmas(NULL, NULL);
    c->blocks = (g.pool_used != NULL) ? (long)g.pool_used(NULL) : -1;
}

static int counts_equal(const counts_t *a, const counts_t *b)
{
    return (a->fds == b->fds) && (a->vmas == b->vmas) &&
           (a->blocks == b->blocks);
}

static void req_init(void *request)
{
    req_t *r = request;

    r->done   = 0;
    r->status = UCS_INPROGRESS;
}

static void req_cb(void *request, ucs_status_t status, void *arg)
{
    req_t *r = request;

    (void)arg;
    r->done   = 1;
    r->status = status;
}

static void recv_cb(void *request, ucs_status_t status,
                    const ucp_tag_recv_info_t *info, void *arg)
{
    (void)info;
    req_cb(request, status, arg);
}

static void ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)arg;
    (void)ep;
    if (!g.ep_failed) {
        g.ep_failed = 1;
        g.ep_status = status;
    }
}

static ucs_status_t am_cb(void *arg, const void *header, size_t header_length,
                          void *data, size_t length,
                          const ucp_am_recv_param_t *param)
{
    (void)arg;
    (void)header;
    (void)header_length;
    (void)data;
    (void)length;
    (void)param;
    g.am_count++;
    return UCS_OK; /* the data is not kept */
}

static int xfer(int fd, void *buf, size_t len, int out)
{
    return oob_xfer(fd, buf, len, out, NULL);
}

static int setup_ucp(void)
{
    ucp_params_t params          = {0};
    ucp_worker_params_t wparams  = {0};
    ucp_am_handler_param_t amp   = {0};
    ucs_status_t status;

    params.field_mask   = UCP_PARAM_FIELD_FEATURES |
                          UCP_PARAM_FIELD_REQUEST_SIZE |
                          UCP_PARAM_FIELD_REQUEST_INIT;
    params.features     = UCP_FEATURE_TAG | UCP_FEATURE_AM;
    params.request_size = sizeof(req_t);
    params.request_init = req_init;
    status = ucp_init(&params, NULL, &g.context);
    if (status != UCS_OK) {
        fprintf(stderr, "ucp_init: %s\n", ucs_status_string(status));
        return -1;
    }

    wparams.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    status = ucp_worker_create(g.context, &wparams, &g.worker);
    if (status != UCS_OK) {
        fprintf(stderr, "ucp_worker_create: %s\n", ucs_status_string(status));
        return -1;
    }

    amp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                     UCP_AM_HANDLER_PARAM_FIELD_CB;
    amp.id         = AM_ID;
    amp.cb         = am_cb;
    status = ucp_worker_set_am_recv_handler(g.worker, &amp);
    if (status != UCS_OK) {
        fprintf(stderr, "set_am_recv_handler: %s\n",
                ucs_status_string(status));
        return -1;
    }
    return 0;
}

/* Sends the worker's address over fd, reads the peer's and connects */
static int connect_peer(int fd)
{
    ucp_ep_params_t eparams = {0};
    ucp_address_t *peer;
    ucs_status_t status;

    if (oob_exchange_address(g.worker, fd, &peer, NULL) != 0) {
        return -1;
    }

    g.ep_failed            = 0;
    g.ep_status            = UCS_OK;
    eparams.field_mask     = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                             UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                             UCP_EP_PARAM_FIELD_ERR_HANDLER;
    eparams.address        = peer;
    eparams.err_mode       = UCP_ERR_HANDLING_MODE_PEER;
    eparams.err_handler.cb = ep_err_cb;
    status = ucp_ep_create(g.worker, &eparams, &g.ep);
    free(peer);
    if (status != UCS_OK) {
        fprintf(stderr, "ucp_ep_create: %s\n", ucs_status_string(status));
        return -1;
    }
    return 0;
}

/* One traffic slot: a send or a receive in flight, with its buffer */
typedef struct {
    req_t *req;
    void  *buf;
} slot_t;

typedef struct {
    kind_t   kind;
    uint64_t tag;
    size_t   size;
    slot_t   tx[WINDOW];
    slot_t   rx[WINDOW];
    uint64_t received; /* messages from the peer */
    int      error;    /* a request completed with an error */
    ucs_status_t status; /* the first such error */
    const char *what;    /* and the operation */
} traffic_t;

static void traffic_init(traffic_t *t, kind_t kind, uint64_t tag)
{
    int i;

    memset(t, 0, sizeof(*t));
    t->kind = kind;
    t->tag  = tag;
    t->size = (kind == KIND_RNDV) ? LARGE_SIZE : SMALL_SIZE;
    for (i = 0; i < WINDOW; ++i) {
        t->tx[i].buf = calloc(1, t->size);
        t->rx[i].buf = calloc(1, t->size);
    }
}

static void traffic_failed(traffic_t *t, ucs_status_t status,
                           const char *what)
{
    if (!t->error) {
        t->error  = 1;
        t->status = status;
        t->what   = what;
    }
}

static int traffic_post(traffic_t *t, slot_t *s, int is_tx)
{
    ucp_request_param_t p = {0};
    ucs_status_ptr_t sp;

    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK;
    if (is_tx) {
        p.cb.send = req_cb;
        if (t->kind == KIND_AM) {
            sp = ucp_am_send_nbx(g.ep, AM_ID, NULL, 0, s->buf, t->size, &p);
        } else {
            sp = ucp_tag_send_nbx(g.ep, s->buf, t->size, t->tag, &p);
        }
    } else {
        if (t->kind == KIND_AM) {
            return 0; /* active messages arrive through am_cb */
        }
        p.cb.recv = recv_cb;
        sp = ucp_tag_recv_nbx(g.worker, s->buf, t->size, t->tag, TAG_MASK,
                              &p);
    }

    if (UCS_PTR_IS_ERR(sp)) {
        traffic_failed(t, UCS_PTR_STATUS(sp), is_tx ? "send" : "receive");
        return -1;
    }
    if (sp == NULL) {
        t->received += !is_tx;
        s->req       = NULL;
        return 0;
    }
    /* UCP calls request_init once per request memory, not per use; a
     * callback comes only from a later progress */
    s->req         = sp;
    s->req->done   = 0;
    s->req->status = UCS_INPROGRESS;
    return 0;
}

/* Reaps finished requests and posts new ones (unless stopped); returns
 * 0, or -1 once something failed */
static int traffic_step(traffic_t *t, int post)
{
    int i, side;
    slot_t *s;

    ucp_worker_progress(g.worker);
    for (side = 0; side < 2; ++side) {
        for (i = 0; i < WINDOW; ++i) {
            s = side ? &t->rx[i] : &t->tx[i];
            if (s->req != NULL) {
                if (!s->req->done) {
                    continue;
                }
                if (s->req->status != UCS_OK) {
                    traffic_failed(t, s->req->status,
                                   side ? "receive" : "send");
                } else if (side) {
                    ++t->received;
                }
                ucp_request_free(s->req);
                s->req = NULL;
            }
            if (post && !t->error && !g.ep_failed) {
                traffic_post(t, s, !side);
            }
        }
    }
    if (t->kind == KIND_AM) {
        t->received = g.am_count;
    }
    return (t->error || g.ep_failed) ? -1 : 0;
}

static void close_ep(void);

/* Cancels the receives still in flight, closes the endpoint (which ends
 * the sends) and waits for them all; frees the buffers */
static void traffic_cleanup(traffic_t *t)
{
    double deadline = now_sec() + 5;
    int i, side, busy;
    slot_t *s;

    for (side = 0; side < 2; ++side) {
        for (i = 0; i < WINDOW; ++i) {
            s = side ? &t->rx[i] : &t->tx[i];
            if ((s->req != NULL) && !s->req->done) {
                ucp_request_cancel(g.worker, s->req);
            }
        }
    }
    close_ep();
    do {
        ucp_worker_progress(g.worker);
        busy = 0;
        for (side = 0; side < 2; ++side) {
            for (i = 0; i < WINDOW; ++i) {
                s = side ? &t->rx[i] : &t->tx[i];
                if ((s->req != NULL) && s->req->done) {
                    ucp_request_free(s->req);
                    s->req = NULL;
                }
                busy |= (s->req != NULL);
            }
        }
    } while (busy && (now_sec() < deadline));
    if (busy) {
        fprintf(stderr, "ucp_kill: requests still in flight after 5 s\n");
    }
    for (i = 0; i < WINDOW; ++i) {
        free(t->tx[i].buf);
        free(t->rx[i].buf);
    }
}

/* Closes the endpoint (force: the peer is gone) and waits for it */
static void close_ep(void)
{
    ucp_request_param_t p = {0};
    ucs_status_ptr_t sp;

    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags        = UCP_EP_CLOSE_FLAG_FORCE;
    sp = ucp_ep_close_nbx(g.ep, &p);
    if (UCS_PTR_IS_PTR(sp)) {
        while (ucp_request_check_status(sp) == UCS_INPROGRESS) {
            ucp_worker_progress(g.worker);
        }
        ucp_request_free(sp);
    }
    g.ep = NULL;
}

/* Takes the unexpected tag messages a dead peer left off the worker */
static void drain_unexpected(void)
{
    ucp_request_param_t p = {0};
    ucp_tag_recv_info_t info;
    ucp_tag_message_h msg;
    ucs_status_ptr_t sp;
    void *buf;

    while ((msg = ucp_tag_probe_nb(g.worker, 0, 0, 1, &info)) != NULL) {
        buf = malloc(info.length ? info.length : 1);
        sp  = ucp_tag_msg_recv_nbx(g.worker, buf, info.length, msg, &p);
        if (UCS_PTR_IS_PTR(sp)) {
            while (ucp_request_check_status(sp) == UCS_INPROGRESS) {
                ucp_worker_progress(g.worker);
            }
            ucp_request_free(sp);
        }
        free(buf);
    }
}

/* Whether fd has something to read, without waiting */
static int readable(int fd)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};

    return poll(&pfd, 1, 0) > 0;
}

/* The victim: connects, streams until it is killed. In the warm-up
 * (stop_after > 0): once it has received stop_after messages it says so,
 * and streams on (the survivor may not have had its own yet) until the
 * survivor says it has closed; then it exits. */
static int victim_main(int fd, kind_t kind, uint64_t tag, uint64_t stop_after)
{
    int said = 0;
    traffic_t t;
    char c = 1;

    if (setup_ucp() || connect_peer(fd)) {
        return 1;
    }
    traffic_init(&t, kind, tag);
    for (;;) {
        traffic_step(&t, 1);
        if (stop_after && !said && (t.received >= stop_after)) {
            xfer(fd, &c, 1, 1);
            said = 1;
        }
        if (said && readable(fd)) {
            _exit(0);
        }
        if (!stop_after && (t.error || g.ep_failed)) {
            return 1;
        }
    }
}

static pid_t start_victim(const char *self, int *fd_p, kind_t kind,
                          uint64_t tag, uint64_t stop_after)
{
    char fdarg[16], kindarg[16], tagarg[32], stoparg[32];
    int sv[2];
    pid_t pid;

    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        perror("socketpair");
        return -1;
    }
    pid = fork();
    if (pid < 0) {
        perror("fork");
        return -1;
    }
    if (pid == 0) {
        fcntl(sv[1], F_SETFD, 0); /* the victim's end stays open */
        snprintf(fdarg, sizeof(fdarg), "%d", sv[1]);
        snprintf(kindarg, sizeof(kindarg), "%d", (int)kind);
        snprintf(tagarg, sizeof(tagarg), "%llu", (unsigned long long)tag);
        snprintf(stoparg, sizeof(stoparg), "%llu",
                 (unsigned long long)stop_after);
        execl(self, self, "--victim", fdarg, kindarg, tagarg, stoparg,
              (char*)NULL);
        _exit(127);
    }
    close(sv[1]);
    *fd_p = sv[0];
    return pid;
}

static uint64_t rnd_state;

static uint64_t rnd(void)
{
    uint64_t z = (rnd_state += 0x9e3779b97f4a7c15ULL);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

typedef struct {
    int    trials;
    int    errors_late;  /* error seen later than the bound, or never */
    int    leaks;        /* resources not back */
    int    setup_failed;
    double max_error_ms;
    double sum_error_ms;
} tally_t;

static void print_counts(const char *what, const counts_t *c)
{
    fprintf(stderr, "   %s: %ld fds, %ld remapring mappings, %ld pool blocks\n", what,
            c->fds, c->vmas, c->blocks);
}

/* One trial; returns 0 when it passed */
static int trial(const char *self, int n, kind_t kind, int warmup,
                 double max_delay_ms, double max_error_ms, int verbose,
                 tally_t *tally)
{
    counts_t before, after;
    double t_start, t_kill = 0, t_err = 0, t_gone = 0, delay, deadline;
    uint64_t tag = 0x1000 + n;
    int fd, status, killed = 0, ok = 1, i;
    traffic_t t;
    pid_t pid;
    char c;

    take_counts(&before);
    pid = start_victim(self, &fd, kind, tag, warmup ? 64 : 0);
    if ((pid < 0) || connect_peer(fd)) {
        fprintf(stderr, "trial %d: setup failed\n", n);
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
        }
        tally->setup_failed++;
        return -1;
    }

    traffic_init(&t, kind, tag);
    delay   = (rnd() % (uint64_t)(max_delay_ms * 1000 + 1)) * 1e-6;
    t_start = 0;
    deadline = now_sec() + 30;
    for (;;) {
        if (traffic_step(&t, !killed) != 0) {
            t_err = now_sec();
            break;
        }
        if (warmup) {
            if ((t.received >= 64) && readable(fd)) {
                break; /* both have had theirs */
            }
        } else if (!killed) {
            if ((t_start == 0) && (t.received > 0)) {
                t_start = now_sec();
            }
            if ((t_start > 0) && (now_sec() - t_start >= delay)) {
                t_kill = now_sec();
                kill(pid, SIGKILL);
                killed = 1;
            }
        } else if ((t_gone == 0) && (waitpid(pid, &status, WNOHANG) == pid)) {
            t_gone = now_sec();
        }
        if (now_sec() > deadline) {
            fprintf(stderr, "trial %d (%s): %llu messages from the peer in"
                    " 30 s%s\n", n, kind_names[kind],
                    (unsigned long long)t.received,
                    warmup ? ", in the warm-up" : "");
            break;
        }
    }

    if (warmup) {
        /* the victim progresses until it reads that we closed */
        xfer(fd, &c, 1, 0);
        traffic_cleanup(&t);
        drain_unexpected();
        xfer(fd, &c, 1, 1);
        waitpid(pid, &status, 0);
        ok = WIFEXITED(status) && (WEXITSTATUS(status) == 0) && !t_err;
    } else {
        if (!killed) {
            fprintf(stderr, "trial %d (%s): failed before the kill: %s\n", n,
                    kind_names[kind], g.ep_failed ?
                    ucs_status_string(g.ep_status) :
                    t.error ? t.what : "no traffic for 30 s");
            if (t.error) {
                fprintf(stderr, "   the %s: %s\n", t.what,
                        ucs_status_string(t.status));
            }
            kill(pid, SIGKILL);
            ok = 0;
        } else if (t_err == 0) {
            fprintf(stderr, "trial %d (%s): no error 30 s after the kill\n",
                    n, kind_names[kind]);
            tally->errors_late++;
            ok = 0;
        } else {
            double ms = (t_err - t_kill) * 1e3;

            tally->sum_error_ms += ms;
            if (ms > tally->max_error_ms) {
                tally->max_error_ms = ms;
            }
            if (ms > max_error_ms) {
                fprintf(stderr, "trial %d (%s): error %.1f ms after the kill"
                        " (gone after %.1f ms)\n", n, kind_names[kind], ms,
                        t_gone ? (t_gone - t_kill) * 1e3 : -1.0);
                tally->errors_late++;
                ok = 0;
            } else if (verbose) {
                fprintf(stderr, "trial %d (%s): killed %.1f ms into traffic,"
                        " error after %.1f ms (%s)\n", n, kind_names[kind],
                        delay * 1e3, ms, g.ep_failed ?
                        ucs_status_string(g.ep_status) : "a request");
            }
        }
        if (!t_gone) {
            waitpid(pid, &status, 0);
        }
        traffic_cleanup(&t);
        drain_unexpected();
    }
    close(fd);

    /* the resources come back, within a second (waited for up to 10 s,
     * to tell slow from lost) */
    t_start  = now_sec();
    deadline = t_start + (warmup ? 1 : 10);
    do {
        /* the transport looks for exited peers every so many progress
         * calls (UCT_REMAPRING_CHECK_PERIOD): progress as an application
         * waiting for something would, between two looks at /proc */
        for (i = 0; i < 10000; ++i) {
            ucp_worker_progress(g.worker);
        }
        /* what the peer wrote before it died may still be arriving */
        drain_unexpected();
        take_counts(&after);
    } while (!counts_equal(&before, &after) && (now_sec() < deadline));
    if (!warmup && (!counts_equal(&before, &after) ||
                    (now_sec() - t_start > 1))) {
        fprintf(stderr, "trial %d (%s): resources not back after %.3f s\n",
                n, kind_names[kind], now_sec() - t_start);
        print_counts("before", &before);
        print_counts("after", &after);
        tally->leaks++;
        ok = 0;
    }
    if (!warmup) {
        tally->trials++;
    }
    return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
    double max_delay_ms = 200, max_error_ms = 1000;
    int trials = 200, verbose = 0, kinds = 0, i, o, failed = 0;
    counts_t first, last;
    tally_t tally[KIND_LAST] = {{0}};
    kind_t kind;

    if ((argc == 6) && !strcmp(argv[1], "--victim")) {
        return victim_main(atoi(argv[2]), (kind_t)atoi(argv[3]),
                           strtoull(argv[4], NULL, 0),
                           strtoull(argv[5], NULL, 0));
    }

    rnd_state = (uint64_t)time(NULL);
    while ((o = getopt(argc, argv, "n:k:w:e:s:v")) != -1) {
        switch (o) {
        case 'n': trials = atoi(optarg); break;
        case 'w': max_delay_ms = atof(optarg); break;
        case 'e': max_error_ms = atof(optarg); break;
        case 's': rnd_state = strtoull(optarg, NULL, 0); break;
        case 'v': verbose = 1; break;
        case 'k':
            for (i = 0; i < KIND_LAST; ++i) {
                if (!strcmp(optarg, kind_names[i])) {
                    kinds |= 1 << i;
                }
            }
            if (!kinds && strcmp(optarg, "all")) {
                fprintf(stderr, "-k: tag, am, rndv or all\n");
                return 2;
            }
            break;
        default:
            fprintf(stderr, "usage: %s [-n trials] [-k tag|am|rndv|all]"
                    " [-w max_delay_ms] [-e max_error_ms] [-s seed] [-v]\n",
                    argv[0]);
            return 2;
        }
    }
    if ((trials < 1) || (max_delay_ms < 0) || (max_error_ms <= 0)) {
        fprintf(stderr, "-n, -w, -e: positive numbers\n");
        return 2;
    }
    if (!kinds) {
        kinds = (1 << KIND_LAST) - 1;
    }
    fprintf(stderr, "ucp_kill: %d trials, seed %llu, kill 0-%.0f ms into"
            " traffic, error within %.0f ms\n", trials,
            (unsigned long long)rnd_state, max_delay_ms, max_error_ms);

    signal(SIGPIPE, SIG_IGN);
    g.pool_used = proc_stats_pool_used_fn();
    if (g.pool_used == NULL) {
        fprintf(stderr, "ucp_kill: no remapring_pool_blocks_in_use(): is"
                        " the remapring module preloaded?\n");
        return 2;
    }
    if (setup_ucp()) {
        return 1;
    }

    /* the warm-up trial: every kind once, the victim exiting on its own */
    for (i = 0; i < KIND_LAST; ++i) {
        if ((kinds & (1 << i)) &&
            trial(argv[0], -1 - i, (kind_t)i, 1, 0, 0, 0, &tally[i])) {
            fprintf(stderr, "ucp_kill: the warm-up failed\n");
            return 1;
        }
    }
    take_counts(&first);

    for (i = 0, kind = 0; i < trials; ++i) {
        while (!(kinds & (1 << kind))) {
            kind = (kind + 1) % KIND_LAST;
        }
        failed += (trial(argv[0], i, kind, 0, max_delay_ms, max_error_ms,
                         verbose, &tally[kind]) != 0);
        kind = (kind + 1) % KIND_LAST;
    }
    take_counts(&last);

    for (i = 0; i < KIND_LAST; ++i) {
        if (tally[i].trials == 0) {
            continue;
        }
        printf("%-4s: %3d trials, %d errors late or missing, %d with"
               " resources not back, %d setup failures; error after the"
               " kill: mean %.1f ms, max %.1f ms\n", kind_names[i],
               tally[i].trials, tally[i].errors_late, tally[i].leaks,
               tally[i].setup_failed,
               tally[i].sum_error_ms /
               (tally[i].trials - tally[i].errors_late ?: 1),
               tally[i].max_error_ms);
    }
    printf("before the first trial: %ld fds, %ld remapring mappings, %ld pool"
           " blocks;"
           " after the last: %ld, %ld, %ld\n", first.fds, first.vmas,
           first.blocks, last.fds, last.vmas, last.blocks);
    if (!counts_equal(&first, &last)) {
        printf("FAIL: the resources drifted over the trials\n");
        failed++;
    }
    ucp_worker_destroy(g.worker);
    ucp_cleanup(g.context);
    printf("%s: %d of %d trials failed\n", failed ? "FAIL" : "PASS", failed,
           trials);
    return failed ? 1 : 0;
}
