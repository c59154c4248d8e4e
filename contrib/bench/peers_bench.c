/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * peers_bench: what connected senders cost a receiving interface, through
 * UCT's API in one process (one receiving interface, N sending interfaces,
 * all on the shm wire unless UCX_REMAPRING_WIRE says otherwise).
 *
 * For each N it connects N senders (each sends one message, so that the
 * receiver took it on), lets every ring go idle, and prints
 * - the receive pool blocks in use for them (remapring_pool_blocks_in_use(NULL)
 *   after the connections, less before; it includes the two rings the
 *   receiver keeps made in advance), in MiB and per connected sender;
 * - the cost of one progress call of the receiver with all N idle (ns);
 * then, for each k of the active list, k of the senders send a burst (B
 * messages of S bytes each, enough to run out of credit and be granted more)
 * while the receiver progresses, and it prints the pool blocks at the
 * burst's peak and once every ring went idle again.
 *
 * usage: peers_bench [-n list] [-a list] [-b burst] [-s size] [-c calls]
 *   -n  connected senders, comma separated (default 1,16,256,1000)
 *   -a  senders active in a burst (default 1,4,16; those above N skipped)
 *   -b  messages per active sender in a burst (default 2000)
 *   -s  message size in bytes (default 8192)
 *   -c  progress calls timed per point (default 200000)
 * The module is linked, or preloaded; its settings are UCX_REMAPRING_*.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <uct/ib/remapring/base/remapring_iface.h>
#include <uct/ib/remapring/ring/ring_pool.h>

#include <uct/api/uct.h>
#include <ucs/async/async_fwd.h>
#include <ucs/sys/string.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>


#define PEERS_BENCH_MAX_LIST 16
#define PEERS_BENCH_AM_ID    7


typedef struct {
    uct_iface_h iface;
    uct_iface_attr_t attr;
    uct_ep_h ep;
} peers_bench_sender_t;


typedef struct {
    uct_component_h component;
    uct_md_h md;
    ucs_async_context_t *async;
    uct_worker_h rx_worker;
    uct_worker_h tx_worker;
    uct_iface_h rx;
    uct_iface_attr_t rx_attr;
    void *rx_dev_addr;
    void *rx_iface_addr;
    uint64_t received;
    size_t block_size;
} peers_bench_t;


static double peers_bench_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + (ts.tv_nsec * 1e-9);
}

static unsigned peers_bench_parse_list(const char *arg, unsigned *list)
{
    char *copy = strdup(arg), *tok, *save = NULL;
    unsigned n = 0;

    for (tok = strtok_r(copy, ",", &save);
         (tok != NULL) && (n < PEERS_BENCH_MAX_LIST);
         tok = strtok_r(NULL, ",", &save)) {
        list[n++] = strtoul(tok, NULL, 0);
    }
    free(copy);
    return n;
}

static ucs_status_t
peers_bench_am(void *arg, void *data, size_t length, unsigned flags)
{
    ++((peers_bench_t *)arg)->received;
    return UCS_OK;
}

static ucs_status_t
peers_bench_open_iface(peers_bench_t *b, uct_worker_h worker,
                       uct_iface_h *iface_p, uct_iface_attr_t *attr)
{
    uct_iface_params_t params = {};
    uct_iface_config_t *config;
    char value[64];
    ucs_status_t status;

    status = uct_md_iface_config_read(b->md, "remapring", NULL, NULL, &config);
    if (status != UCS_OK) {
        return status;
    }

    if ((uct_config_get(config, "BLOCK_SIZE", value, sizeof(value)) !=
         UCS_OK) ||
        (ucs_str_to_memunits(value, &b->block_size) != UCS_OK)) {
        fprintf(stderr, "peers_bench: cannot read BLOCK_SIZE\n");
        uct_config_release(config);
        return UCS_ERR_INVALID_PARAM;
    }

    if (b->block_size == UCS_MEMUNITS_AUTO) {
        b->block_size = UCT_REMAPRING_SM_BLOCK_SIZE_K * UCS_KBYTE;
    }

    params.field_mask = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                        UCT_IFACE_PARAM_FIELD_DEVICE;
    params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    params.mode.device.tl_name  = "remapring";
    params.mode.device.dev_name = "memory";
    status = uct_iface_open(b->md, worker, &params, config, iface_p);
    uct_config_release(config);
    if (status != UCS_OK) {
        return status;
    }

    uct_iface_progress_enable(*iface_p, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    return uct_iface_query(*iface_p, attr);
}

static ucs_status_t peers_bench_init(peers_bench_t *b)
{
    uct_component_h *components;
    uct_component_attr_t cattr;
    uct_md_resource_desc_t mdr[4];
    uct_md_config_t *md_config;
    unsigned i, n;
    ucs_status_t status;

    status = uct_query_components(&components, &n);
    if (status != UCS_OK) {
        return status;
    }

    b->component = NULL;
    for (i = 0; i < n; ++i) {
        cattr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
                           UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
        if ((uct_component_query(components[i], &cattr) == UCS_OK) &&
            !strcmp(cattr.name, "remapring") && (cattr.md_resource_count > 0)) {
            cattr.field_mask   = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
            cattr.md_resources = mdr;
            if (cattr.md_resource_count <= 4) {
                uct_component_query(components[i], &cattr);
                b->component = components[i];
            }
        }
    }

    if (b->component == NULL) {
        fprintf(stderr, "peers_bench: no remapring component: is the"
                        " module loaded (LD_PRELOAD)?\n");
        uct_release_component_list(components);
        return UCS_ERR_NO_DEVICE;
    }

    status = uct_md_config_read(b->component, NULL, NULL, &md_config);
    if (status == UCS_OK) {
        status = uct_md_open(b->component, mdr[0].md_name, md_config, &b->md);
        uct_config_release(md_config);
    }
    uct_release_component_list(components);
    if (status != UCS_OK) {
        return status;
    }

    status = ucs_async_context_create(UCS_ASYNC_MODE_POLL, &b->async);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_worker_create(b->async, UCS_THREAD_MODE_SINGLE, &b->rx_worker);
    if (status != UCS_OK) {
        return status;
    }

    return uct_worker_create(b->async, UCS_THREAD_MODE_SINGLE, &b->tx_worker);
}

static ucs_status_t peers_bench_open_rx(peers_bench_t *b)
{
    ucs_status_t status;

    b->received = 0;
    status      = peers_bench_open_iface(b, b->rx_worker, &b->rx, &b->rx_attr);
    if (status != UCS_OK) {
        return status;
    }

    b->rx_dev_addr   = calloc(1, b->rx_attr.device_addr_len);
    b->rx_iface_addr = calloc(1, b->rx_attr.iface_addr_len);
    if ((b->rx_dev_addr == NULL) || (b->rx_iface_addr == NULL)) {
        return UCS_ERR_NO_MEMORY;
    }

    status = uct_iface_get_device_address(b->rx, b->rx_dev_addr);
    if (status == UCS_OK) {
        status = uct_iface_get_address(b->rx, b->rx_iface_addr);
    }
    if (status == UCS_OK) {
        status = uct_iface_set_am_handler(b->rx, PEERS_BENCH_AM_ID,
                                          peers_bench_am, b, 0);
    }
    return status;
}

static void peers_bench_close_rx(peers_bench_t *b)
{
    uct_iface_close(b->rx);
    free(b->rx_dev_addr);
    free(b->rx_iface_addr);
}

static void peers_bench_progress(peers_bench_t *b)
{
    uct_worker_progress(b->tx_worker);
    uct_worker_progress(b->rx_worker);
}

typedef struct {
    const void *buf;
    size_t size;
} peers_bench_pack_t;

static size_t peers_bench_pack(void *dest, void *arg)
{
    peers_bench_pack_t *p = arg;

    memcpy(dest, p->buf, p->size);
    return p->size;
}

/* Send one message of @a size from @a s if there is room now */
static ucs_status_t
peers_bench_try_send(peers_bench_sender_t *s, void *buf, size_t size)
{
    peers_bench_pack_t pack;
    ssize_t ret;

    if (size <= s->attr.cap.am.max_short) {
        return uct_ep_am_short(s->ep, PEERS_BENCH_AM_ID, 0, buf,
                               size - sizeof(uint64_t));
    }

    pack.buf  = buf;
    pack.size = size;
    ret = uct_ep_am_bcopy(s->ep, PEERS_BENCH_AM_ID, peers_bench_pack, &pack, 0);
    return (ret < 0) ? (ucs_status_t)ret : UCS_OK;
}

/* Send one message of @a size from @a s, progressing until there is room */
static int peers_bench_send(peers_bench_t *b, peers_bench_sender_t *s,
                            void *buf, size_t size)
{
    double deadline = peers_bench_now() + 10.0;
    ucs_status_t status;

    for (;;) {
        status = peers_bench_try_send(s, buf, size);
        if (status == UCS_OK) {
            return 0;
        } else if ((status != UCS_ERR_NO_RESOURCE) ||
                   (peers_bench_now() > deadline)) {
            fprintf(stderr, "peers_bench: send failed: %s\n",
                    ucs_status_string(status));
            return -1;
        }
        peers_bench_progress(b);
    }
}

/* Progress until @a count messages arrived and then @a idle calls more,
 * for the rings to go idle */
static int peers_bench_settle(peers_bench_t *b, uint64_t count, unsigned idle)
{
    double deadline = peers_bench_now() + 30.0;
    unsigned i;

    while (b->received < count) {
        if (peers_bench_now() > deadline) {
            fprintf(stderr, "peers_bench: %lu of %lu messages arrived\n",
                    b->received, count);
            return -1;
        }
        peers_bench_progress(b);
    }

    for (i = 0; i < idle; ++i) {
        peers_bench_progress(b);
    }
    return 0;
}

static double peers_bench_mib(peers_bench_t *b, uint64_t blocks)
{
    return (double)blocks * b->block_size / (1024.0 * 1024.0);
}

static int peers_bench_point(peers_bench_t *b, unsigned nsenders,
                             const unsigned *active, unsigned nactive,
                             unsigned burst, size_t size, unsigned calls)
{
    peers_bench_sender_t *senders;
    uint64_t base, used, peak;
    uct_ep_params_t params = {};
    double start, ns, deadline;
    unsigned i, j, k, done;
    unsigned *sent;
    void *buf;
    int ret = -1;

    senders = calloc(nsenders, sizeof(*senders));
    sent    = calloc(nsenders, sizeof(*sent));
    buf     = calloc(1, size);
    if ((senders == NULL) || (sent == NULL) || (buf == NULL) ||
        (peers_bench_open_rx(b) != UCS_OK)) {
        fprintf(stderr, "peers_bench: cannot open the receiver\n");
        goto out;
    }

    for (i = 0; i < nsenders; ++i) {
        if (peers_bench_open_iface(b, b->tx_worker, &senders[i].iface,
                                   &senders[i].attr) != UCS_OK) {
            fprintf(stderr, "peers_bench: cannot open sender %u\n", i);
            goto out_close;
        }
    }

    /* the senders' own interfaces keep rings made in advance too: counted
     * before any connection */
    for (i = 0; i < 1000; ++i) {
        peers_bench_progress(b);
    }
    base = remapring_pool_blocks_in_use(NULL);

    params.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR |
                        UCT_EP_PARAM_FIELD_IFACE_ADDR;
    params.dev_addr   = b->rx_dev_addr;
    params.iface_addr = b->rx_iface_addr;
    for (i = 0; i < nsenders; ++i) {
        params.iface = senders[i].iface;
        if (uct_ep_create(&params, &senders[i].ep) != UCS_OK) {
            fprintf(stderr, "peers_bench: sender %u cannot connect\n", i);
            goto out_close;
        }
        if (peers_bench_send(b, &senders[i], buf, 64) != 0) {
            goto out_close;
        }
    }
    if (peers_bench_settle(b, nsenders, 20000) != 0) {
        goto out_close;
    }

    used  = remapring_pool_blocks_in_use(NULL) - base;
    start = peers_bench_now();
    for (i = 0; i < calls; ++i) {
        uct_worker_progress(b->rx_worker);
    }
    ns = (peers_bench_now() - start) * 1e9 / calls;
    printf("%8u  %9.1f  %10.1f  %10.1f", nsenders, peers_bench_mib(b, used),
           peers_bench_mib(b, used) * 1024.0 / nsenders, ns);

    for (k = 0; k < nactive; ++k) {
        if (active[k] > nsenders) {
            printf("  %9s  %9s", "-", "-");
            continue;
        }

        /* each active sender writes until it runs out of credit, then the
         * receiver progresses once: the rings fill, and their senders are
         * granted more */
        peak = 0;
        memset(sent, 0, nsenders * sizeof(*sent));
        deadline = peers_bench_now() + 60.0;
        for (done = 0; done < active[k];) {
            done = 0;
            for (j = 0; j < active[k]; ++j) {
                while ((sent[j] < burst) &&
                       (peers_bench_try_send(&senders[j], buf, size) ==
                        UCS_OK)) {
                    ++sent[j];
                }
                done += (sent[j] == burst);
            }
            peers_bench_progress(b);
            if (remapring_pool_blocks_in_use(NULL) - base > peak) {
                peak = remapring_pool_blocks_in_use(NULL) - base;
            }
            if (peers_bench_now() > deadline) {
                fprintf(stderr, "peers_bench: the burst did not end\n");
                goto out_close;
            }
        }
        if (peers_bench_settle(b, b->received, 20000) != 0) {
            goto out_close;
        }
        printf("  %9.1f  %9.1f", peers_bench_mib(b, peak),
               peers_bench_mib(b, remapring_pool_blocks_in_use(NULL) - base));
    }
    printf("\n");
    fflush(stdout);
    ret = 0;

out_close:
    for (i = 0; i < nsenders; ++i) {
        if (senders[i].ep != NULL) {
            uct_ep_destroy(senders[i].ep);
        }
    }
    for (i = 0; i < 1000; ++i) {
        peers_bench_progress(b);
    }
    for (i = 0; i < nsenders; ++i) {
        if (senders[i].iface != NULL) {
            uct_iface_close(senders[i].iface);
        }
    }
    peers_bench_close_rx(b);
out:
    free(senders);
    free(sent);
    free(buf);
    return ret;
}

static void peers_bench_usage(const char *prog)
{
    printf("usage: %s [-n list] [-a list] [-b burst] [-s size] [-c calls]\n"
           "  -n  connected senders, comma separated (default "
           "1,16,256,1000)\n"
           "  -a  senders active in a burst (default 1,4,16)\n"
           "  -b  messages per active sender in a burst (default 2000)\n"
           "  -s  message size in bytes (default 8192)\n"
           "  -c  progress calls timed per point (default 200000)\n",
           prog);
}

int main(int argc, char **argv)
{
    unsigned nlist[PEERS_BENCH_MAX_LIST] = {1, 16, 256, 1000};
    unsigned alist[PEERS_BENCH_MAX_LIST] = {1, 4, 16};
    unsigned nn = 4, na = 3, burst = 2000, calls = 200000, i;
    size_t size     = 8192;
    peers_bench_t b = {};
    struct rlimit rl;
    int c;

    while ((c = getopt(argc, argv, "n:a:b:s:c:h")) != -1) {
        switch (c) {
        case 'n':
            nn = peers_bench_parse_list(optarg, nlist);
            break;
        case 'a':
            na = peers_bench_parse_list(optarg, alist);
            break;
        case 'b':
            burst = strtoul(optarg, NULL, 0);
            break;
        case 's':
            size = strtoul(optarg, NULL, 0);
            break;
        case 'c':
            calls = strtoul(optarg, NULL, 0);
            break;
        default:
            peers_bench_usage(argv[0]);
            return (c == 'h') ? 0 : 2;
        }
    }

    if ((size < 64) || (calls == 0) || (nn == 0)) {
        peers_bench_usage(argv[0]);
        return 2;
    }

    /* a few descriptors per interface and per connection */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }

    if (peers_bench_init(&b) != UCS_OK) {
        return 1;
    }

    printf("remapring receive pool: blocks in use for N connected senders"
           " (MiB, KiB per sender, with the 2 rings made in advance),\n"
           "a receiver progress call with all idle (ns), and for k active"
           " senders of %u x %zu B: pool at the burst's peak and once idle"
           " again (MiB)\n",
           burst, size);
    printf("%8s  %9s  %10s  %10s", "senders", "idle MiB", "KiB/sender",
           "ns/call");
    for (i = 0; i < na; ++i) {
        printf("  %4u:peak  %4u:idle", alist[i], alist[i]);
    }
    printf("\n");

    for (i = 0; i < nn; ++i) {
        if (peers_bench_point(&b, nlist[i], alist, na, burst, size, calls) !=
            0) {
            return 1;
        }
    }

    uct_worker_destroy(b.tx_worker);
    uct_worker_destroy(b.rx_worker);
    ucs_async_context_destroy(b.async);
    uct_md_close(b.md);
    return 0;
}
