/*
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * ucp_storm: the unexpected-message storm. Two processes (fork, worker
 * addresses exchanged over a socketpair). The sender posts N tag sends of
 * S bytes (ucp_tag_send_nbx, non-blocking, tag STORM_TAG) and then one
 * small message on DONE_TAG; the receiver posts no receive for STORM_TAG
 * and only progresses its worker until ucp_tag_probe_nb() finds the "done"
 * message. All the N messages came over the same endpoint before it, and
 * UCP sends the eager fragments and rendezvous requests of one endpoint in
 * order on one lane, so by then UCP holds all N as unexpected messages (or,
 * for rendezvous, their requests to send). The receiver samples its memory
 * before the storm, while it waits (the peak) and once the "done" message
 * is there; then it posts the N receives and times the drain until all
 * complete, and checks every byte (the content is a function of the
 * message index and the offset).
 *
 * Memory of the receiver, each before the storm and at its peak:
 *   rss_anon, rss_file, rss_shmem  RssAnon, RssFile, RssShmem of
 *                                  /proc/self/status
 *   pool_used    the bytes of remapring's receive pool blocks off their
 *                free lists (remapring_pool_blocks_in_use(), found with
 *                dlsym() in the loaded module)
 *   pool_memfd   the bytes the pool memfds really hold (st_blocks * 512:
 *                the pool punches the pages of a kept block that no kept
 *                message touches, and folds the pages they use in part
 *                into pages of a fold memfd); the pools are the
 *                "memfd:remapring-pool" descriptors this process has once
 *                its worker is created, before it opens any peer's pool,
 *                their fold memfds ("memfd:remapring-pool-fold") and the
 *                copies of small messages ("memfd:remapring-copies")
 *                included
 * and "held bytes per payload byte", (peak - before) / (N * S), for the RSS
 * total, the pool blocks and the pool memfd. The receive buffers (N * S)
 * are allocated and touched before the first sample.
 *
 * The protocol: the sender's endpoint configuration (ucp_ep_print_info(),
 * its "tag_send" line: 0..<egr/short>..A..<egr/bcopy>..B..<rndv>..(inf))
 * gives the protocol UCP takes for S bytes and the thresholds in effect.
 * The receives that completed as they were posted, with no progress, are
 * counted: all of them for eager messages (they were all there), and for
 * rendezvous those whose transport completed the get inside the call
 * (remapring's get_zcopy does).
 *
 * Prints "storm:" lines and one "storm-result:" line of key=value pairs
 * (sizes in bytes, times in microseconds); exits non-zero on a wrong byte,
 * a lost message, or if the storm does not arrive within -t seconds.
 *
 * usage: ucp_storm [-n count] [-s size] [-w warmup] [-t timeout_sec]
 *                  [-i sample_usec] [-v]
 *   -n  messages in the storm (4096), -s their size in bytes (4096),
 *   -w  messages of the same size sent and received both ways before the
 *       first sample (64), -t the storm and the drain must each end within
 *       this time (120 s), -i the memory is sampled this often while the
 *       storm arrives (1000 usec; 0: only before and once it is there),
 *   -v  print the sender's endpoint configuration
 */
#define _GNU_SOURCE
#include <ucp/api/ucp.h>
#include "ucp_oob.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define STORM_TAG  0x5707ull
#define DONE_TAG   0xd0e0ull
#define FLOW_TAG   0xf10eull
#define WARM_TAG   0x3a3eull
#define MAX_POOLS  16
#define INFO_LEN   512

static struct {
    uint64_t count;
    size_t   size;
    unsigned warmup;
    double   timeout;
    double   interval;
    int      verbose;
    uint64_t keep_every; /* -k: one message in this many is kept */
} opt = {4096, 4096, 64, 120, 1000, 0, 1};

/* Sparse storms (-k K > 1): the sender sends K messages for each of the N
 * kept ones, and K - 1 of them (FLOW_TAG) find a receive the receiver
 * posted before the storm, so only one in K stays unexpected: the holds a
 * receiver sees when some of its traffic comes before its receives */
static inline int storm_is_kept(uint64_t j)
{
    return (j % opt.keep_every) == (opt.keep_every - 1);
}

/* what the sender tells the receiver after its endpoint is up */
typedef struct {
    char proto[32];       /* protocol for opt.size: egr/short ... rndv */
    char am_lane[64];     /* transport of the AM lane, e.g. remapring/memory */
    char tag_send[INFO_LEN];
} sender_info_t;

typedef struct {
    uint64_t rss_anon, rss_file, rss_shmem; /* bytes */
    uint64_t pool_used; /* bytes of blocks in use */
    uint64_t pool_memfd;                    /* bytes allocated */
} mem_t;

static int oob_fd = -1;

static struct {
    uint64_t (*pool_used)(uint64_t *bytes_p);
    int      fds[MAX_POOLS];
    int      nfds;
} pool;

/* minor page faults of this process so far */
static long minflt(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

static double now_usec(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* word w of message i */
static uint64_t pattern_word(uint64_t i, uint64_t w)
{
    return splitmix64((i << 24) ^ w ^ 0x5707000000000000ull);
}

static void fill(void *buf, uint64_t i, size_t len)
{
    size_t   w;
    uint64_t v;

    for (w = 0; w * 8 < len; ++w) {
        v = pattern_word(i, w);
        memcpy((char*)buf + w * 8, &v, (len - w * 8 < 8) ? len - w * 8 : 8);
    }
}

/* the offset of the first wrong byte of message i in buf, or -1 */
static long check(const void *buf, uint64_t i, size_t len)
{
    size_t   w, off;
    uint64_t v;
    size_t   n;

    for (w = 0; w * 8 < len; ++w) {
        v = pattern_word(i, w);
        n = (len - w * 8 < 8) ? len - w * 8 : 8;
        if (memcmp((const char*)buf + w * 8, &v, n)) {
            for (off = 0; off < n; ++off) {
                if (((const uint8_t*)buf)[w * 8 + off] !=
                    ((const uint8_t*)&v)[off]) {
                    break;
                }
            }
            return (long)(w * 8 + off);
        }
    }
    return -1;
}

static int xfer(int fd, void *buf, size_t len, int out)
{
    return oob_xfer(fd, buf, len, out, "ucp_storm");
}

static void oob_barrier(void)
{
    char c = 0;

    if (xfer(oob_fd, &c, 1, 1) || xfer(oob_fd, &c, 1, 0)) {
        exit(2);
    }
}

/* A barrier that keeps progressing the worker while it waits: what the
 * other side waits for may be this side's pending sends (a rendezvous
 * acknowledgement queued behind a full FIFO) */
static void oob_barrier_progress(ucp_worker_h worker)
{
    char    c = 0;
    ssize_t n;

    if (xfer(oob_fd, &c, 1, 1)) {
        exit(2);
    }
    for (;;) {
        n = recv(oob_fd, &c, 1, MSG_DONTWAIT);
        if (n == 1) {
            return;
        } else if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            fprintf(stderr, "ucp_storm: the other process exited\n");
            exit(3);
        }
        ucp_worker_progress(worker);
    }
}

/* whether the other process has exited, so that a crash on one side fails
 * the run instead of hanging the other */
static int peer_gone(void)
{
    char    c;
    ssize_t n = recv(oob_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);

    return (n == 0) ||
           ((n < 0) && (errno != EAGAIN) && (errno != EWOULDBLOCK) &&
            (errno != EINTR));
}

static void progress_until(ucp_worker_h worker, ucs_status_ptr_t sp,
                           const char *what)
{
    ucs_status_t status;
    unsigned     spins = 0;

    if (sp == NULL) {
        return;
    } else if (UCS_PTR_IS_ERR(sp)) {
        fprintf(stderr, "ucp_storm: %s: %s\n", what,
                ucs_status_string(UCS_PTR_STATUS(sp)));
        exit(2);
    }
    do {
        ucp_worker_progress(worker);
        if ((++spins % 4096) == 0 && peer_gone()) {
            fprintf(stderr, "ucp_storm: %s: the other process exited\n",
                    what);
            exit(3);
        }
        status = ucp_request_check_status(sp);
    } while (status == UCS_INPROGRESS);
    ucp_request_free(sp);
    if (status != UCS_OK) {
        fprintf(stderr, "ucp_storm: %s: %s\n", what,
                ucs_status_string(status));
        exit(2);
    }
}

/* --- memory ---------------------------------------------------------------*/

static size_t parse_size(const char *s, size_t dflt)
{
    char   *end;
    double v;

    if (s == NULL || *s == '\0') {
        return dflt;
    }
    v = strtod(s, &end);
    switch (*end) {
    case 'k': case 'K': v *= 1024;           break;
    case 'm': case 'M': v *= 1024 * 1024;    break;
    case 'g': case 'G': v *= 1024.0 * 1024 * 1024; break;
    }
    return (size_t)v;
}

/* The pool memfds of this process's remapring interfaces, their fold
 * memfds and copies: called once the worker (and its interfaces) exist and before any
 * endpoint, so no peer's pool (also "memfd:remapring-pool", opened through
 * /proc) is open yet */
static void find_pools(void)
{
    DIR           *dir = opendir("/proc/self/fd");
    struct dirent *de;
    char          path[300], link[256];
    ssize_t       n;

    pool.pool_used = (uint64_t(*)(
            uint64_t *))dlsym(RTLD_DEFAULT, "remapring_pool_blocks_in_use");
    pool.nfds      = 0;
    if (dir == NULL) {
        return;
    }
    while ((de = readdir(dir)) != NULL && pool.nfds < MAX_POOLS) {
        snprintf(path, sizeof(path), "/proc/self/fd/%s", de->d_name);
        n = readlink(path, link, sizeof(link) - 1);
        if (n <= 0) {
            continue;
        }
        link[n] = '\0';
        if ((strstr(link, "memfd:remapring-pool") != NULL) ||
            (strstr(link, "memfd:remapring-copies") != NULL)) {
            pool.fds[pool.nfds++] = atoi(de->d_name);
        }
    }
    closedir(dir);
}

static void sample(mem_t *m)
{
    FILE          *f = fopen("/proc/self/status", "r");
    char          line[256];
    unsigned long kb;
    struct stat   st;
    int           k;

    memset(m, 0, sizeof(*m));
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "RssAnon: %lu", &kb) == 1) {
            m->rss_anon = kb * 1024;
        } else if (sscanf(line, "RssFile: %lu", &kb) == 1) {
            m->rss_file = kb * 1024;
        } else if (sscanf(line, "RssShmem: %lu", &kb) == 1) {
            m->rss_shmem = kb * 1024;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    if (pool.pool_used != NULL) {
        pool.pool_used(&m->pool_used);
    }
    for (k = 0; k < pool.nfds; ++k) {
        if (fstat(pool.fds[k], &st) == 0) {
            m->pool_memfd += (uint64_t)st.st_blocks * 512;
        }
    }
}

static uint64_t rss(const mem_t *m)
{
    return m->rss_anon + m->rss_file + m->rss_shmem;
}

static void peak_of(mem_t *peak, const mem_t *m)
{
#define PEAK_FIELD(_f) if (m->_f > peak->_f) peak->_f = m->_f
    PEAK_FIELD(rss_anon);
    PEAK_FIELD(rss_file);
    PEAK_FIELD(rss_shmem);
    PEAK_FIELD(pool_used);
    PEAK_FIELD(pool_memfd);
#undef PEAK_FIELD
}

static void print_mem(const char *what, const mem_t *m)
{
    printf("storm: %-7s rss %" PRIu64 " (anon %" PRIu64 ", file %" PRIu64
           ", shmem %" PRIu64 ")", what, rss(m), m->rss_anon, m->rss_file,
           m->rss_shmem);
    if (pool.pool_used != NULL) {
        printf(", pool blocks %" PRIu64 ", pool memfd %" PRIu64,
               m->pool_used, m->pool_memfd);
    }
    printf("\n");
}

/* --- UCP -----------------------------------------------------------------*/

static void setup(ucp_context_h *ctx_p, ucp_worker_h *worker_p,
                  ucp_ep_h *ep_p, int is_receiver)
{
    ucp_params_t        params  = {0};
    ucp_worker_params_t wparams = {0};
    ucp_ep_params_t     eparams = {0};
    ucp_address_t       *peer;
    ucs_status_t        status;

    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features   = UCP_FEATURE_TAG;
    status = ucp_init(&params, NULL, ctx_p);
    if (status != UCS_OK) {
        fprintf(stderr, "ucp_storm: ucp_init: %s\n",
                ucs_status_string(status));
        exit(2);
    }
    wparams.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    status = ucp_worker_create(*ctx_p, &wparams, worker_p);
    if (status != UCS_OK) {
        fprintf(stderr, "ucp_storm: ucp_worker_create: %s\n",
                ucs_status_string(status));
        exit(2);
    }
    if (is_receiver) {
        find_pools();
    }
    if (oob_exchange_address(*worker_p, oob_fd, &peer, "ucp_storm") != 0) {
        exit(2);
    }
    eparams.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    eparams.address    = peer;
    status = ucp_ep_create(*worker_p, &eparams, ep_p);
    free(peer);
    if (status != UCS_OK) {
        fprintf(stderr, "ucp_storm: ucp_ep_create: %s\n",
                ucs_status_string(status));
        exit(2);
    }
}

static void teardown(ucp_context_h ctx, ucp_worker_h worker, ucp_ep_h ep)
{
    ucp_request_param_t param = {0};

    oob_barrier_progress(worker);
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags        = 0;
    progress_until(worker, ucp_ep_close_nbx(ep, &param), "ucp_ep_close_nbx");
    oob_barrier_progress(worker);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
}

static void send_wait(ucp_worker_h worker, ucp_ep_h ep, const void *buf,
                      size_t len, ucp_tag_t tag)
{
    ucp_request_param_t param = {0};

    progress_until(worker, ucp_tag_send_nbx(ep, buf, len, tag, &param),
                   "send");
}

static void recv_wait(ucp_worker_h worker, void *buf, size_t len,
                      ucp_tag_t tag)
{
    ucp_request_param_t param = {0};

    progress_until(worker, ucp_tag_recv_nbx(worker, buf, len, tag,
                                            UINT64_MAX, &param), "receive");
}

/* The warm-up: messages of the storm's size both ways, received as they
 * are expected, so that the connections, their rings and UCP's pools for
 * that size exist before the first sample */
static void warmup(ucp_worker_h worker, ucp_ep_h ep, void *buf,
                   int is_receiver)
{
    unsigned k;

    for (k = 0; k < opt.warmup; ++k) {
        if (is_receiver) {
            recv_wait(worker, buf, opt.size, WARM_TAG);
            send_wait(worker, ep, buf, opt.size, WARM_TAG);
        } else {
            send_wait(worker, ep, buf, opt.size, WARM_TAG);
            recv_wait(worker, buf, opt.size, WARM_TAG);
        }
    }
}

/* From the "tag_send" line of the endpoint's configuration, e.g.
 * "# tag_send: 0..<egr/short>..2041..<egr/bcopy>..8193..<rndv>..(inf)",
 * the protocol for @a size bytes */
static void proto_for(const char *line, size_t size, char *proto,
                      size_t max)
{
    const char *p = strstr(line, ": 0");
    const char *lt, *gt;
    size_t     end;

    snprintf(proto, max, "unknown");
    if (p == NULL) {
        return;
    }
    p += 3;
    while ((lt = strstr(p, "..<")) != NULL) {
        gt = strstr(lt, ">..");
        if (gt == NULL) {
            return;
        }
        end = (strncmp(gt + 3, "(inf)", 5) == 0) ? SIZE_MAX :
              strtoull(gt + 3, NULL, 10);
        if (size < end) {
            snprintf(proto, max, "%.*s", (int)(gt - lt - 3), lt + 3);
            return;
        }
        p = gt + 3;
    }
}

static void describe_ep(ucp_ep_h ep, sender_info_t *info)
{
    char   *text = NULL, *line, *save, *p;
    size_t len   = 0;
    FILE   *f    = open_memstream(&text, &len);

    memset(info, 0, sizeof(*info));
    snprintf(info->proto, sizeof(info->proto), "unknown");
    snprintf(info->am_lane, sizeof(info->am_lane), "unknown");
    if (f == NULL) {
        return;
    }
    ucp_ep_print_info(ep, f);
    fclose(f);
    if (opt.verbose) {
        fprintf(stderr, "%s", text);
    }
    for (line = strtok_r(text, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        if (strstr(line, " tag_send: ") != NULL) {
            for (p = line; *p == '#' || *p == ' '; ++p) {
            }
            snprintf(info->tag_send, sizeof(info->tag_send), "%s", p);
            proto_for(line, opt.size, info->proto, sizeof(info->proto));
        } else if (strstr(line, "lane[") != NULL &&
                   (strstr(line, " am ") != NULL ||
                    ((strlen(line) > 3) &&
                     !strcmp(line + strlen(line) - 3, " am")))) {
            /* "lane[0]:  3:remapring/memory.0 md[2] ... am ..." */
            p = strchr(line, ':');
            if (p != NULL && (p = strchr(p + 1, ':')) != NULL) {
                sscanf(p + 1, "%63[^ .]", info->am_lane);
            }
        }
    }
    free(text);
}

/* --- the sender ----------------------------------------------------------*/

static int sender(void)
{
    ucp_context_h       ctx;
    ucp_worker_h        worker;
    ucp_ep_h            ep;
    ucp_request_param_t param = {0};
    ucs_status_ptr_t    *reqs;
    sender_info_t       info;
    uint64_t            i, first_open = 0, done_msg;
    ucs_status_ptr_t    done_req;
    ucs_status_t        status;
    char                *buf, result;
    double              t0, t_post;
    ssize_t             n;
    uint64_t            total = opt.count * opt.keep_every;
    char                *flow;

    setup(&ctx, &worker, &ep, 0);
    buf  = malloc(opt.count * opt.size + 8);
    flow = malloc(opt.size);
    reqs = calloc(total, sizeof(*reqs));
    if (buf == NULL || flow == NULL || reqs == NULL) {
        fprintf(stderr, "ucp_storm: sender: out of memory\n");
        return 2;
    }
    for (i = 0; i < opt.count; ++i) {
        fill(buf + i * opt.size, i, opt.size);
    }
    fill(flow, UINT64_MAX, opt.size);
    warmup(worker, ep, buf, 0);
    describe_ep(ep, &info);
    if (xfer(oob_fd, &info, sizeof(info), 1)) {
        return 2;
    }

    oob_barrier(); /* the receiver has taken its first sample */
    t0 = now_usec();
    for (i = 0; i < total; ++i) {
        reqs[i] = storm_is_kept(i) ?
                  ucp_tag_send_nbx(ep, buf + (i / opt.keep_every) * opt.size,
                                   opt.size, STORM_TAG, &param) :
                  ucp_tag_send_nbx(ep, flow, opt.size, FLOW_TAG, &param);
        if (UCS_PTR_IS_ERR(reqs[i])) {
            fprintf(stderr, "ucp_storm: send %" PRIu64 ": %s\n", i,
                    ucs_status_string(UCS_PTR_STATUS(reqs[i])));
            return 2;
        }
        if ((i % 64) == 0) {
            ucp_worker_progress(worker);
        }
    }
    done_msg = opt.count;
    done_req = ucp_tag_send_nbx(ep, &done_msg, sizeof(done_msg), DONE_TAG,
                                &param);
    if (UCS_PTR_IS_ERR(done_req)) {
        fprintf(stderr, "ucp_storm: send done: %s\n",
                ucs_status_string(UCS_PTR_STATUS(done_req)));
        return 2;
    }
    t_post = now_usec() - t0;

    /* progress (pending sends, rendezvous) until the receiver is through;
     * take completed sends off on the way */
    for (;;) {
        n = recv(oob_fd, &result, 1, MSG_DONTWAIT);
        if (n == 1) {
            break;
        } else if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            fprintf(stderr, "ucp_storm: sender: the receiver exited\n");
            return 3;
        }
        ucp_worker_progress(worker);
        while (first_open < total) {
            if (reqs[first_open] != NULL) {
                status = ucp_request_check_status(reqs[first_open]);
                if (status == UCS_INPROGRESS) {
                    break;
                }
                ucp_request_free(reqs[first_open]);
                reqs[first_open] = NULL;
                if (status != UCS_OK) {
                    fprintf(stderr, "ucp_storm: send %" PRIu64 ": %s\n",
                            first_open, ucs_status_string(status));
                    return 2;
                }
            }
            ++first_open;
        }
    }
    progress_until(worker, done_req, "send done");
    for (i = first_open; i < total; ++i) {
        progress_until(worker, reqs[i], "send");
    }
    printf("storm: sender posted %" PRIu64 " sends in %.0f usec\n",
           total, t_post);
    fflush(stdout);
    teardown(ctx, worker, ep);
    free(reqs);
    free(flow);
    free(buf);
    return 0;
}

/* --- the receiver --------------------------------------------------------*/

static struct {
    uint32_t *length;
    uint8_t  *done;
    uint64_t ndone;
    uint64_t nflow; /* FLOW_TAG messages received */
    uint64_t errors;
} rx;

static void flow_done(void *request, ucs_status_t status,
                      const ucp_tag_recv_info_t *info, void *user_data)
{
    if ((status != UCS_OK) || (info->length != opt.size)) {
        fprintf(stderr, "ucp_storm: flow receive: %s, %zu bytes\n",
                ucs_status_string(status), info->length);
        ++rx.errors;
    }
    ++rx.nflow;
}

/* Sparse storms: a receive posted for each FLOW_TAG message, all into one
 * buffer (what they carry is not looked at) */
static ucs_status_ptr_t *post_flow(ucp_worker_h worker, void *flow,
                                   uint64_t nflow)
{
    ucp_request_param_t param;
    ucs_status_ptr_t *reqs = calloc(nflow ? nflow : 1, sizeof(*reqs));
    uint64_t i;

    for (i = 0; (reqs != NULL) && (i < nflow); ++i) {
        param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                             UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
        param.cb.recv      = flow_done;
        reqs[i] = ucp_tag_recv_nbx(worker, flow, opt.size, FLOW_TAG,
                                   UINT64_MAX, &param);
        if ((reqs[i] == NULL) || UCS_PTR_IS_ERR(reqs[i])) {
            fprintf(stderr, "ucp_storm: flow receive %" PRIu64 ": %s\n", i,
                    ucs_status_string(UCS_PTR_STATUS(reqs[i])));
            free(reqs);
            return NULL;
        }
    }
    return reqs;
}

static void recv_done(void *request, ucs_status_t status,
                      const ucp_tag_recv_info_t *info, void *user_data)
{
    uint64_t i = (uintptr_t)user_data;

    if (status != UCS_OK) {
        fprintf(stderr, "ucp_storm: receive %" PRIu64 ": %s\n", i,
                ucs_status_string(status));
        ++rx.errors;
    } else {
        rx.length[i] = info->length;
    }
    rx.done[i] = 1;
    ++rx.ndone;
}

static int receiver(void)
{
    ucp_context_h       ctx;
    ucp_worker_h        worker;
    ucp_ep_h            ep;
    ucp_request_param_t param;
    ucp_tag_recv_info_t tinfo;
    ucs_status_ptr_t    *reqs;
    sender_info_t       info;
    mem_t               before, held, peak, m;
    uint64_t            i, ready = 0, done_msg = 0, payload;
    unsigned            spins = 0;
    double              t0, t_arrive, t_drain, t_next, deadline;
    long                flt0, flt_arrive, flt_drain;
    char                *buf, result, *flow;
    long                off;
    uint64_t            nflow = opt.count * (opt.keep_every - 1);
    ucs_status_ptr_t    *flow_reqs;

    payload = opt.count * opt.size;
    setup(&ctx, &worker, &ep, 1);
    buf       = malloc(payload + 8);
    reqs      = calloc(opt.count, sizeof(*reqs));
    rx.length = calloc(opt.count, sizeof(*rx.length));
    rx.done   = calloc(opt.count, 1);
    if (buf == NULL || reqs == NULL || rx.length == NULL || rx.done == NULL) {
        fprintf(stderr, "ucp_storm: receiver: out of memory\n");
        return 2;
    }
    /* the receive buffers are the application's: in RSS before the storm */
    memset(buf, 0xa5, payload + 8);
    memset(reqs, 0, opt.count * sizeof(*reqs));
    memset(rx.length, 0, opt.count * sizeof(*rx.length));
    warmup(worker, ep, buf, 1);
    if (xfer(oob_fd, &info, sizeof(info), 0)) {
        return 2;
    }
    info.proto[sizeof(info.proto) - 1]       = '\0';
    info.am_lane[sizeof(info.am_lane) - 1]   = '\0';
    info.tag_send[sizeof(info.tag_send) - 1] = '\0';
    printf("storm: %" PRIu64 " messages of %zu bytes (%" PRIu64 " bytes), "
           "sender's AM lane %s, protocol %s\n", opt.count, opt.size,
           payload, info.am_lane, info.proto);
    printf("storm: sender's %s\n", info.tag_send);
    if (pool.pool_used == NULL) {
        printf("storm: no remapring module in this process: no pool "
               "figures\n");
    } else {
        printf("storm: %d remapring pool and fold memfd(s)\n", pool.nfds);
    }

    /* the flow receives and their requests: in RSS before the storm */
    flow      = malloc(opt.size);
    flow_reqs = (flow == NULL) ? NULL : post_flow(worker, flow, nflow);
    if (flow_reqs == NULL) {
        fprintf(stderr, "ucp_storm: receiver: out of memory\n");
        return 2;
    }
    if (nflow > 0) {
        printf("storm: one message in %" PRIu64 " kept: %" PRIu64
               " receives posted before the storm\n", opt.keep_every, nflow);
    }

    for (i = 0; i < 3; ++i) {
        ucp_worker_progress(worker);
    }
    sample(&before);
    peak = before;
    oob_barrier(); /* the storm starts */
    flt0     = minflt();
    t0       = now_usec();
    t_next   = t0 + opt.interval;
    deadline = t0 + opt.timeout * 1e6;
    while (ucp_tag_probe_nb(worker, DONE_TAG, UINT64_MAX, 0, &tinfo) ==
           NULL) {
        ucp_worker_progress(worker);
        if ((++spins % 256) == 0) {
            if (now_usec() >= t_next) {
                if (opt.interval > 0) {
                    sample(&m);
                    peak_of(&peak, &m);
                }
                t_next = now_usec() + (opt.interval > 0 ? opt.interval :
                                       1000);
                if (t_next > deadline) {
                    fprintf(stderr, "ucp_storm: the storm did not arrive "
                            "in %.0f s\n", opt.timeout);
                    return 4;
                }
            }
            if ((spins % 65536) == 0 && peer_gone()) {
                fprintf(stderr, "ucp_storm: the sender exited\n");
                return 3;
            }
        }
    }
    /* the flow messages came before "done": the last of them may still be
     * completing (rendezvous) */
    while (rx.nflow < nflow) {
        ucp_worker_progress(worker);
        if (now_usec() > deadline) {
            fprintf(stderr, "ucp_storm: %" PRIu64 " of %" PRIu64 " flow "
                    "messages received in %.0f s\n", rx.nflow, nflow,
                    opt.timeout);
            return 4;
        }
    }
    t_arrive   = now_usec() - t0;
    flt_arrive = minflt() - flt0;
    sample(&held);
    peak_of(&peak, &held);

    /* the drain: every receive posted, in order, then progress until all
     * are complete */
    flt0 = minflt();
    t0   = now_usec();
    for (i = 0; i < opt.count; ++i) {
        /* no immediate completion: UCP 1.13 fills no recv_info then, the
         * callback gives the length */
        param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                             UCP_OP_ATTR_FIELD_USER_DATA |
                             UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
        param.cb.recv      = recv_done;
        param.user_data    = (void*)(uintptr_t)i;
        reqs[i] = ucp_tag_recv_nbx(worker, buf + i * opt.size, opt.size,
                                   STORM_TAG, UINT64_MAX, &param);
        if ((reqs[i] == NULL) || UCS_PTR_IS_ERR(reqs[i])) {
            fprintf(stderr, "ucp_storm: receive %" PRIu64 ": %s\n", i,
                    ucs_status_string(UCS_PTR_STATUS(reqs[i])));
            return 2;
        }
        ready += rx.done[i];
    }
    while (rx.ndone < opt.count) {
        ucp_worker_progress(worker);
        if ((++spins % 65536) == 0) {
            if (peer_gone()) {
                fprintf(stderr, "ucp_storm: the sender exited\n");
                return 3;
            }
            if (now_usec() > t0 + opt.timeout * 1e6) {
                fprintf(stderr, "ucp_storm: the drain did not end in %.0f"
                        " s: %" PRIu64 " of %" PRIu64 " received\n",
                        opt.timeout, rx.ndone, opt.count);
                return 4;
            }
        }
    }
    t_drain   = now_usec() - t0;
    flt_drain = minflt() - flt0;
    for (i = 0; i < opt.count; ++i) {
        if (reqs[i] != NULL) {
            ucp_request_free(reqs[i]);
        }
    }
    for (i = 0; i < nflow; ++i) {
        ucp_request_free(flow_reqs[i]);
    }
    recv_wait(worker, &done_msg, sizeof(done_msg), DONE_TAG);
    if (done_msg != opt.count) {
        fprintf(stderr, "ucp_storm: the done message says %" PRIu64 "\n",
                done_msg);
        ++rx.errors;
    }

    for (i = 0; i < opt.count && rx.errors < 20; ++i) {
        if (rx.length[i] != opt.size) {
            fprintf(stderr, "ucp_storm: message %" PRIu64 ": %u bytes\n", i,
                    rx.length[i]);
            ++rx.errors;
        } else if ((off = check(buf + i * opt.size, i, opt.size)) >= 0) {
            fprintf(stderr, "ucp_storm: message %" PRIu64 ": wrong byte at"
                    " offset %ld\n", i, off);
            ++rx.errors;
        }
    }

    print_mem("before", &before);
    print_mem("held", &held);
    print_mem("peak", &peak);
    printf("storm: arrived in %.0f usec (%ld page faults); drained in %.0f"
           " usec (%ld page faults), %.1f MB/s, %.0f messages/s; %" PRIu64
           " of %" PRIu64 " receives complete when posted\n", t_arrive,
           flt_arrive, t_drain, flt_drain, payload / t_drain,
           opt.count / t_drain * 1e6, ready, opt.count);
    printf("storm-result: size=%zu count=%" PRIu64 " keep_every=%" PRIu64
           " payload=%" PRIu64 " proto=%s am_lane=%s", opt.size, opt.count,
           opt.keep_every, payload, info.proto, info.am_lane);
    printf(" rss_before=%" PRIu64 " rss_peak=%" PRIu64 " rss_per_byte=%.4f",
           rss(&before), rss(&peak),
           ((double)rss(&peak) - rss(&before)) / payload);
    printf(" anon_per_byte=%.4f file_per_byte=%.4f shmem_per_byte=%.4f",
           ((double)peak.rss_anon - before.rss_anon) / payload,
           ((double)peak.rss_file - before.rss_file) / payload,
           ((double)peak.rss_shmem - before.rss_shmem) / payload);
    if (pool.pool_used != NULL) {
        printf(" pool_before=%" PRIu64 " pool_peak=%" PRIu64
               " pool_per_byte=%.4f memfd_before=%" PRIu64
               " memfd_peak=%" PRIu64 " memfd_per_byte=%.4f",
               before.pool_used, peak.pool_used,
               ((double)peak.pool_used - before.pool_used) / payload,
               before.pool_memfd, peak.pool_memfd,
               ((double)peak.pool_memfd - before.pool_memfd) / payload);
    } else {
        printf(" pool_per_byte=- memfd_per_byte=-");
    }
    printf(" arrive_usec=%.0f arrive_faults=%ld drain_usec=%.0f"
           " drain_faults=%ld drain_mbps=%.2f ready_at_post=%" PRIu64
           " errors=%" PRIu64 "\n", t_arrive, flt_arrive, t_drain, flt_drain,
           payload / t_drain, ready, rx.errors);
    fflush(stdout);

    result = rx.errors ? 1 : 0;
    if (xfer(oob_fd, &result, 1, 1)) {
        return 2;
    }
    teardown(ctx, worker, ep);
    free(rx.done);
    free(rx.length);
    free(reqs);
    free(flow_reqs);
    free(flow);
    free(buf);
    return result;
}

static void usage(const char *prog)
{
    fprintf(stderr, "usage: %s [-n count] [-s size] [-k keep_every] "
            "[-w warmup] [-t timeout_sec] [-i sample_usec] [-v]\n", prog);
    exit(2);
}

int main(int argc, char **argv)
{
    int   sv[2], c, st, rc;
    pid_t pid;

    while ((c = getopt(argc, argv, "n:s:k:w:t:i:vh")) != -1) {
        switch (c) {
        case 'n': opt.count   = strtoull(optarg, NULL, 0);       break;
        case 's': opt.size    = parse_size(optarg, 0);           break;
        case 'k': opt.keep_every = strtoull(optarg, NULL, 0);    break;
        case 'w': opt.warmup  = strtoul(optarg, NULL, 0);        break;
        case 't': opt.timeout = atof(optarg);                    break;
        case 'i': opt.interval = atof(optarg);                   break;
        case 'v': opt.verbose = 1;                               break;
        default:
            usage(argv[0]);
        }
    }
    if ((opt.count == 0) || (opt.size < 8) || (opt.size > UINT32_MAX) ||
        (opt.timeout <= 0) || (opt.keep_every == 0) ||
        (opt.count > UINT64_MAX / opt.keep_every)) {
        usage(argv[0]);
    }
    fflush(stdout);

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
        _exit(sender());
    }
    close(sv[1]);
    oob_fd = sv[0];
    rc     = receiver();
    if (rc != 0) {
        kill(pid, SIGKILL);
    }
    if (waitpid(pid, &st, 0) < 0) {
        perror("waitpid");
        return 2;
    }
    if (rc == 0 && (!WIFEXITED(st) || WEXITSTATUS(st))) {
        fprintf(stderr, "ucp_storm: the sender failed (status 0x%x)\n", st);
        return 1;
    }
    if (rc == 0) {
        printf("PASS\n");
    }
    return rc;
}
