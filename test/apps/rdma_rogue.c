/*
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * rdma_rogue: a sender of the RDMA transport (remaprdma) that breaks its
 * rules, written against the wire as src/uct/ib/remapring/verbs/
 * remapring_verbs.h describes it (rdma_cm and rdma-core only, no UCX): it
 * connects to a receiving interface in pinned mode as any host on the
 * fabric can, takes the slot table entries of its first credit, and
 * writes where they do not point.
 *
 * usage: rdma_rogue -a ADDR -p PORT -i IFACE_ID [-n CONNS] [-t SECONDS]
 *   ADDR, PORT  the interface's rdma_cm address and port, IFACE_ID its
 *               id (hex), all three from its log line "... listens on
 *               ADDR:PORT ... interface 0xID"
 *   without -n  three attacks, each on a connection of its own (the first
 *               write outside breaks a QP): a write of 64 bytes inside the
 *               block behind its slot 0, which must land, then a write of
 *               a whole block to one of: the 64 bytes straddling that
 *               block's end, the next block of the pool, the block before,
 *               each outside every block its own slots were given. Prints
 *               a line per attack; exits 0 if every write outside failed
 *               with a remote access error, 1 if any landed (or failed
 *               otherwise), 2 if it could not get that far
 *   -n CONNS    opens CONNS connections at once, waits until each is
 *               accepted or refused, prints "accepted A refused R" and the
 *               status each refusal carries, and exits 0
 *   -t          how long to wait for any one answer (default 30 s)
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* the wire (remapring_verbs.h): magics, version, mode, private data */
#define WIRE_MAGIC       0x726d7662u
#define WIRE_VERSION     3
#define WIRE_MODE_PINNED 2
#define TABLE_SLOTS      4096 /* the ring's most slots */

typedef struct {
    uint32_t magic;
    uint16_t version;
    uint16_t table_slots;
    uint64_t iface_id;
    uint64_t sender_id;
    uint64_t table_addr;
    uint32_t table_rkey;
    uint32_t max_payload;
} __attribute__((packed)) wire_req_t;

typedef struct {
    uint32_t magic;
    uint16_t version;
    uint16_t mode;
    uint64_t view_addr;
    uint64_t nonce;
    uint32_t view_rkey;
    uint32_t block_size;
    uint32_t nslots;
    uint32_t reserve;
    uint32_t inline_max;
    uint32_t align;
    uint32_t align_offset;
    uint32_t rec_align;
    uint32_t imm_window;
} __attribute__((packed)) wire_rep_t;

typedef struct {
    uint32_t magic;
    int32_t status;
} __attribute__((packed)) wire_rej_t;

typedef struct {
    uint64_t addr;
    uint32_t rkey;
    uint32_t reserved;
} wire_slot_t;

typedef struct {
    struct rdma_cm_id *id;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    wire_slot_t *table;
    struct ibv_mr *table_mr;
    wire_rep_t rep;
    int state; /* 0 connecting, 1 up, -1 refused or failed */
    int rej_status; /* the receiver's, 0 if none */
    int cm_status; /* the connection manager's */
} conn_t;

static struct rdma_event_channel *channel;
static struct sockaddr_storage dst;
static uint64_t iface_id;
static double wait_sec = 30;

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The next CM event within the wait, or NULL */
static struct rdma_cm_event *cm_event(void)
{
    double end = now() + wait_sec;
    struct rdma_cm_event *event;

    while (now() < end) {
        if (rdma_get_cm_event(channel, &event) == 0) {
            return event;
        }
        if (errno != EAGAIN) {
            perror("rdma_get_cm_event");
            return NULL;
        }
        usleep(1000);
    }
    fprintf(stderr, "rdma_rogue: no connection event in %.0f s\n", wait_sec);
    return NULL;
}

static conn_t *conn_of(struct rdma_cm_id *id, conn_t *conns, int n)
{
    int i;

    for (i = 0; i < n; ++i) {
        if (conns[i].id == id) {
            return &conns[i];
        }
    }
    return NULL;
}

/* Its QP, slot table and the request, once the route is resolved */
static int conn_request(conn_t *c)
{
    struct ibv_qp_init_attr qp_attr;
    struct rdma_conn_param param;
    struct ibv_recv_wr wr, *bad;
    wire_req_t req;
    int i;

    c->pd    = ibv_alloc_pd(c->id->verbs);
    c->cq    = (c->pd == NULL) ? NULL :
                                 ibv_create_cq(c->id->verbs, 64, NULL, NULL, 0);
    c->table = calloc(TABLE_SLOTS, sizeof(*c->table));
    if ((c->cq == NULL) || (c->table == NULL)) {
        fprintf(stderr, "rdma_rogue: no PD, CQ or table\n");
        return -1;
    }

    c->table_mr = ibv_reg_mr(c->pd, c->table, TABLE_SLOTS * sizeof(*c->table),
                             IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    memset(&qp_attr, 0, sizeof(qp_attr));
    qp_attr.send_cq          = c->cq;
    qp_attr.recv_cq          = c->cq;
    qp_attr.qp_type          = IBV_QPT_RC;
    qp_attr.cap.max_send_wr  = 8;
    qp_attr.cap.max_recv_wr  = 32;
    qp_attr.cap.max_send_sge = 1;
    qp_attr.cap.max_recv_sge = 1;
    if ((c->table_mr == NULL) || rdma_create_qp(c->id, c->pd, &qp_attr)) {
        perror("rdma_rogue: table registration or rdma_create_qp");
        return -1;
    }

    /* the credits are writes with immediate: each takes a receive */
    memset(&wr, 0, sizeof(wr));
    for (i = 0; i < 32; ++i) {
        if (ibv_post_recv(c->id->qp, &wr, &bad)) {
            perror("rdma_rogue: ibv_post_recv");
            return -1;
        }
    }

    memset(&req, 0, sizeof(req));
    req.magic       = WIRE_MAGIC;
    req.version     = WIRE_VERSION;
    req.table_slots = TABLE_SLOTS;
    req.iface_id    = iface_id;
    req.sender_id   = ((uint64_t)getpid() << 32) ^ (uintptr_t)c;
    req.table_addr  = (uintptr_t)c->table;
    req.table_rkey  = c->table_mr->rkey;
    req.max_payload = 64;

    memset(&param, 0, sizeof(param));
    param.private_data        = &req;
    param.private_data_len    = sizeof(req);
    param.responder_resources = 1;
    param.initiator_depth     = 1;
    param.retry_count         = 7;
    param.rnr_retry_count     = 7;
    if (rdma_connect(c->id, &param)) {
        perror("rdma_rogue: rdma_connect");
        return -1;
    }
    return 0;
}

/* Start @a n connections and run their CM events until each is up or
 * refused; -1 on a failure of our own */
static int conns_open(conn_t *conns, int n)
{
    struct rdma_cm_event *event;
    int i, open = n;
    conn_t *c;

    for (i = 0; i < n; ++i) {
        memset(&conns[i], 0, sizeof(conns[i]));
        if (rdma_create_id(channel, &conns[i].id, NULL, RDMA_PS_TCP) ||
            rdma_resolve_addr(conns[i].id, NULL, (struct sockaddr *)&dst,
                              5000)) {
            perror("rdma_rogue: rdma_create_id or rdma_resolve_addr");
            return -1;
        }
    }

    while (open > 0) {
        event = cm_event();
        if (event == NULL) {
            return -1;
        }

        c = conn_of(event->id, conns, n);
        if (c == NULL) {
            rdma_ack_cm_event(event);
            continue;
        }

        switch (event->event) {
        case RDMA_CM_EVENT_ADDR_RESOLVED:
            if (rdma_resolve_route(c->id, 5000)) {
                perror("rdma_rogue: rdma_resolve_route");
                return -1;
            }
            break;
        case RDMA_CM_EVENT_ROUTE_RESOLVED:
            if (conn_request(c)) {
                return -1;
            }
            break;
        case RDMA_CM_EVENT_ESTABLISHED:
            if (event->param.conn.private_data_len >= sizeof(c->rep)) {
                memcpy(&c->rep, event->param.conn.private_data, sizeof(c->rep));
            }
            c->state = 1;
            --open;
            break;
        case RDMA_CM_EVENT_REJECTED:
            c->rej_status = 0;
            c->cm_status  = event->status;
            if (event->param.conn.private_data_len >= sizeof(wire_rej_t)) {
                wire_rej_t rej;

                memcpy(&rej, event->param.conn.private_data, sizeof(rej));
                if (rej.magic == WIRE_MAGIC) {
                    c->rej_status = rej.status;
                }
            }
            c->state = -1;
            --open;
            break;
        default:
            fprintf(stderr, "rdma_rogue: connection event %s\n",
                    rdma_event_str(event->event));
            c->state = -1;
            --open;
            break;
        }
        rdma_ack_cm_event(event);
    }
    return 0;
}

static void conn_close(conn_t *c)
{
    if (c->id == NULL) {
        return;
    }
    if (c->state == 1) {
        rdma_disconnect(c->id);
    }
    if (c->id->qp != NULL) {
        rdma_destroy_qp(c->id);
    }
    rdma_destroy_id(c->id);
    if (c->table_mr != NULL) {
        ibv_dereg_mr(c->table_mr);
    }
    if (c->cq != NULL) {
        ibv_destroy_cq(c->cq);
    }
    if (c->pd != NULL) {
        ibv_dealloc_pd(c->pd);
    }
    free(c->table);
    c->id = NULL;
}

/* The next completion within the wait: its status, or -1 */
static int completion(conn_t *c, struct ibv_wc *wc)
{
    double end = now() + wait_sec;
    int n;

    while (now() < end) {
        n = ibv_poll_cq(c->cq, 1, wc);
        if (n > 0) {
            return wc->status;
        } else if (n < 0) {
            break;
        }
        usleep(100);
    }
    fprintf(stderr, "rdma_rogue: no completion in %.0f s\n", wait_sec);
    return -1;
}

/* RDMA WRITE of @a length bytes of @a buf to @a addr with @a rkey: the
 * completion's status, or -1 */
static int rogue_write(conn_t *c, struct ibv_mr *mr, size_t length,
                       uint64_t addr, uint32_t rkey)
{
    struct ibv_send_wr wr, *bad;
    struct ibv_sge sge;
    struct ibv_wc wc;

    sge.addr   = (uintptr_t)mr->addr;
    sge.length = length;
    sge.lkey   = mr->lkey;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id               = 1; /* the receives' are 0 */
    wr.opcode              = IBV_WR_RDMA_WRITE;
    wr.send_flags          = IBV_SEND_SIGNALED;
    wr.sg_list             = &sge;
    wr.num_sge             = 1;
    wr.wr.rdma.remote_addr = addr;
    wr.wr.rdma.rkey        = rkey;
    if (ibv_post_send(c->id->qp, &wr, &bad)) {
        perror("rdma_rogue: ibv_post_send");
        return -1;
    }

    do {
        if (completion(c, &wc) < 0) {
            return -1;
        }
    } while (wc.wr_id != 1); /* a credit, or receives flushed */
    return wc.status;
}

/* Whether [addr, addr + length) touches a block behind one of the first
 * @a credited slots of @a c */
static int
own_block(const conn_t *c, unsigned credited, uint64_t addr, size_t length)
{
    uint64_t block = c->rep.block_size;
    unsigned i;

    for (i = 0; i < credited; ++i) {
        if ((addr < c->table[i].addr + block) &&
            (c->table[i].addr < addr + length)) {
            return 1;
        }
    }
    return 0;
}

/* One attack on a fresh connection: 0 if the write outside failed with a
 * remote access error, 1 if it landed or failed otherwise, 2 if it could
 * not be made */
static int attack(int target, const char *what)
{
    static char *buf;
    static size_t buf_size;
    struct ibv_mr *mr = NULL;
    struct ibv_wc wc;
    uint64_t base, addr = 0;
    unsigned credited;
    size_t length;
    int k, st, ret = 2;
    conn_t c;

    if ((conns_open(&c, 1) != 0) || (c.state != 1)) {
        fprintf(stderr,
                "rdma_rogue: the interface did not accept (status"
                " %d, reject reason %d)\n",
                c.rej_status, c.cm_status);
        goto out;
    }

    if ((c.rep.magic != WIRE_MAGIC) || (c.rep.mode != WIRE_MODE_PINNED) ||
        (c.rep.block_size == 0) || (c.rep.nslots > TABLE_SLOTS)) {
        fprintf(stderr, "rdma_rogue: not a pinned-mode ring (mode %u)\n",
                c.rep.mode);
        goto out;
    }

    /* the first credit: the entries, then the immediate (the limit in
     * slots) */
    do {
        st = completion(&c, &wc);
    } while ((st == IBV_WC_SUCCESS) &&
             (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM));
    if (st != IBV_WC_SUCCESS) {
        fprintf(stderr, "rdma_rogue: no credit (status %d)\n", st);
        goto out;
    }
    credited = ntohl(wc.imm_data);
    if ((credited == 0) || (credited > c.rep.nslots)) {
        fprintf(stderr, "rdma_rogue: a credit of %u slots\n", credited);
        goto out;
    }

    length = c.rep.block_size;
    if (buf_size < length) {
        free(buf);
        buf      = malloc(length);
        buf_size = length;
        if (buf == NULL) {
            goto out;
        }
    }
    memset(buf, 0xee, length);
    mr = ibv_reg_mr(c.pd, buf, length, IBV_ACCESS_LOCAL_WRITE);
    if (mr == NULL) {
        perror("rdma_rogue: ibv_reg_mr");
        goto out;
    }

    /* its own block takes the write: the key works */
    base = c.table[0].addr;
    st   = rogue_write(&c, mr, 64, base, c.table[0].rkey);
    if (st != IBV_WC_SUCCESS) {
        fprintf(stderr,
                "rdma_rogue: a write into its own block failed:"
                " %s\n",
                st < 0 ? "no completion" : ibv_wc_status_str(st));
        goto out;
    }

    switch (target) {
    case 0: /* straddling the end of the block: one key, one block */
        addr   = base + c.rep.block_size - 32;
        length = 64;
        break;
    default: /* the nearest block above (1) or below (2) none of its own */
        for (k = 1; k < 64; ++k) {
            addr = base + (target == 1 ? k : -k) * (int64_t)c.rep.block_size;
            if (!own_block(&c, credited, addr, length)) {
                break;
            }
        }
        break;
    }

    st = rogue_write(&c, mr, length, addr, c.table[0].rkey);
    printf("%s: %zu bytes at 0x%" PRIx64 " (its block 0x%" PRIx64 "): %s\n",
           what, length, addr, base,
           st < 0 ? "no completion" : ibv_wc_status_str(st));
    ret = (st == IBV_WC_REM_ACCESS_ERR) ? 0 : 1;

out:
    if (mr != NULL) {
        ibv_dereg_mr(mr);
    }
    conn_close(&c);
    return ret;
}

static void usage(const char *prog)
{
    fprintf(stderr,
            "usage: %s -a ADDR -p PORT -i IFACE_ID [-n CONNS]"
            " [-t SECONDS]\n",
            prog);
}

int main(int argc, char **argv)
{
    static const char *what[] = {"across the end of its block",
                                 "the next block", "the block before"};
    const char *host = NULL, *port = NULL;
    struct addrinfo hints, *ai;
    int c, i, nconns = 0, accepted = 0, refused = 0, ret = 0, r;
    conn_t *conns;

    while ((c = getopt(argc, argv, "a:p:i:n:t:h")) != -1) {
        switch (c) {
        case 'a':
            host = optarg;
            break;
        case 'p':
            port = optarg;
            break;
        case 'i':
            iface_id = strtoull(optarg, NULL, 16);
            break;
        case 'n':
            nconns = atoi(optarg);
            break;
        case 't':
            wait_sec = atof(optarg);
            break;
        default:
            usage(argv[0]);
            return 2;
        }
    }
    if ((host == NULL) || (port == NULL) || (iface_id == 0) || (nconns < 0)) {
        usage(argv[0]);
        return 2;
    }

    memset(&hints, 0, sizeof(hints));
    hints.ai_flags = AI_NUMERICSERV;
    if (getaddrinfo(host, port, &hints, &ai) != 0) {
        fprintf(stderr, "rdma_rogue: no address %s:%s\n", host, port);
        return 2;
    }
    memcpy(&dst, ai->ai_addr, ai->ai_addrlen);
    freeaddrinfo(ai);

    channel = rdma_create_event_channel();
    if ((channel == NULL) ||
        (fcntl(channel->fd, F_SETFL,
               fcntl(channel->fd, F_GETFL) | O_NONBLOCK) != 0)) {
        perror("rdma_rogue: rdma_create_event_channel");
        return 2;
    }

    if (nconns > 0) {
        conns = calloc(nconns, sizeof(*conns));
        if ((conns == NULL) || (conns_open(conns, nconns) != 0)) {
            return 2;
        }
        for (i = 0; i < nconns; ++i) {
            if (conns[i].state == 1) {
                ++accepted;
            } else {
                ++refused;
                printf("refused: status %d, reject reason %d\n",
                       conns[i].rej_status, conns[i].cm_status);
            }
        }
        printf("accepted %d refused %d\n", accepted, refused);
        for (i = 0; i < nconns; ++i) {
            conn_close(&conns[i]);
        }
        return 0;
    }

    for (i = 0; i < 3; ++i) {
        r   = attack(i, what[i]);
        ret = (r > ret) ? r : ret;
    }
    printf("%s\n", ret == 0 ? "every write outside its ring failed" :
                   ret == 1 ? "a write outside its ring did not fail" :
                              "an attack could not be made");
    return ret;
}
