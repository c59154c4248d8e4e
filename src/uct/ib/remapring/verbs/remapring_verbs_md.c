/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "remapring_verbs.h"

#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/sock.h>
#include <ucs/sys/string.h>
#include <ucs/sys/sys.h>

#include <ucs/time/time.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <net/if.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <unistd.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>


/*
 * The memory domain of a verbs device: its protection domain, and
 * registrations of user memory for RDMA READ and WRITE. Once the transport
 * carries traffic, registrations go through the memory cache
 * (src/ucs/memory/memcache.h), which the kernel's unmap events keep
 * coherent: a buffer unmapped and mapped again at the same address is
 * registered anew, the old pinned pages are never written. Before that,
 * each registration is its own ibv_reg_mr.
 */


#define UCT_REMAPRING_VERBS_ACCESS (IBV_ACCESS_LOCAL_WRITE | \
                                    IBV_ACCESS_REMOTE_WRITE | \
                                    IBV_ACCESS_REMOTE_READ)


static uct_md_ops_t uct_remapring_verbs_md_ops;

/* rdma_cm's context of device @a name: the context its ids use, so that a
 * QP made on an id and our protection domain agree. rdma_cm keeps its
 * devices open for the life of the process. */
static struct ibv_context *uct_remapring_verbs_find_ctx(const char *name)
{
    struct ibv_context **list, *ctx = NULL;
    int i, num = 0;

    list = rdma_get_devices(&num);
    if (list == NULL) {
        ucs_debug("rdma_get_devices() failed: %m");
        return NULL;
    }

    for (i = 0; i < num; ++i) {
        if (!strcmp(ibv_get_device_name(list[i]->device), name)) {
            ctx = list[i];
            break;
        }
    }

    rdma_free_devices(list);
    return ctx;
}

/* The IP address a GID carries, if any: IPv4-mapped (RoCE), or a global
 * IPv6 one of RoCE v2 (a link-local one would need the interface too) */
static int uct_remapring_verbs_gid_ip(const struct ibv_gid_entry *entry,
                                      struct sockaddr_storage *ss)
{
    static const uint8_t v4_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                          0xff, 0xff};
    const uint8_t *raw = entry->gid.raw;
    struct sockaddr_in6 *sin6;
    struct sockaddr_in *sin;

    memset(ss, 0, sizeof(*ss));
    if (!memcmp(raw, v4_prefix, sizeof(v4_prefix))) {
        sin             = (struct sockaddr_in*)ss;
        sin->sin_family = AF_INET;
        memcpy(&sin->sin_addr, &raw[12], 4);
        return 1;
    }

    if ((entry->gid_type == IBV_GID_TYPE_ROCE_V2) &&
        !((raw[0] == 0xfe) && ((raw[1] & 0xc0) == 0x80))) {
        sin6              = (struct sockaddr_in6*)ss;
        sin6->sin6_family = AF_INET6;
        memcpy(&sin6->sin6_addr, raw, 16);
        return 1;
    }

    return 0;
}

/* Whether network interface @a name under @a sysfs_net is an IPoIB one
 * whose hardware address (4 bytes of flags and QP number, then the port's
 * GID) carries @a gid */
static int uct_remapring_verbs_ipoib_of(const char *sysfs_net,
                                        const char *name,
                                        const union ibv_gid *gid)
{
    char path[PATH_MAX], text[128];
    unsigned byte;
    int i, n, pos;
    FILE *file;

    snprintf(path, sizeof(path), "%s/%s/type", sysfs_net, name);
    file = fopen(path, "r");
    if (file == NULL) {
        return 0;
    }
    n = fscanf(file, "%d", &i);
    fclose(file);
    if ((n != 1) || (i != 32)) { /* ARPHRD_INFINIBAND */
        return 0;
    }

    snprintf(path, sizeof(path), "%s/%s/address", sysfs_net, name);
    file = fopen(path, "r");
    if (file == NULL) {
        return 0;
    }
    n = (fgets(text, sizeof(text), file) != NULL);
    fclose(file);
    if (!n) {
        return 0;
    }

    /* "xx:xx:...": 20 bytes, the GID from the fifth on */
    for (i = 0, pos = 0; i < 20; ++i) {
        if ((sscanf(&text[pos], "%2x", &byte) != 1) ||
            ((i >= 4) && (byte != gid->raw[i - 4]))) {
            return 0;
        }
        pos += 2;
        if ((i < 19) && (text[pos++] != ':')) {
            return 0;
        }
    }
    return 1;
}

int uct_remapring_verbs_ipoib_addr(const char *sysfs_net,
                                   const union ibv_gid *gid,
                                   const struct ifaddrs *ifaddrs,
                                   struct sockaddr_storage *ss, char *ifname,
                                   size_t max)
{
    const struct ifaddrs *ifa;
    const uint8_t *raw;
    int pass;

    for (pass = 0; pass < 2; ++pass) {
        for (ifa = ifaddrs; ifa != NULL; ifa = ifa->ifa_next) {
            if ((ifa->ifa_addr == NULL) ||
                (ifa->ifa_addr->sa_family != (pass ? AF_INET6 : AF_INET))) {
                continue;
            }

            raw = ((const struct sockaddr_in6*)ifa->ifa_addr)->sin6_addr.s6_addr;
            if (pass && (((raw[0] == 0xfe) && ((raw[1] & 0xc0) == 0x80)) ||
                         IN6_IS_ADDR_LOOPBACK(raw))) {
                continue; /* link-local: rdma_cm would need the scope */
            }

            if (!uct_remapring_verbs_ipoib_of(sysfs_net, ifa->ifa_name, gid)) {
                continue;
            }

            memset(ss, 0, sizeof(*ss));
            memcpy(ss, ifa->ifa_addr,
                   pass ? sizeof(struct sockaddr_in6) :
                          sizeof(struct sockaddr_in));
            ucs_strncpy_zero(ifname, ifa->ifa_name, max);
            return 1;
        }
    }

    return 0;
}

/* An InfiniBand port's address: its IPoIB interface's, which rdma_cm
 * resolves over IPoIB (ARP or neighbour discovery) */
static int uct_remapring_verbs_ib_port_addr(struct ibv_context *ctx,
                                            uint8_t port, int gid_index,
                                            struct sockaddr_storage *ss,
                                            int *index_p, union ibv_gid *gid_p,
                                            int *ifindex_p)
{
    char ifname[IF_NAMESIZE];
    struct ifaddrs *ifaddrs;
    int index = (gid_index < 0) ? 0 : gid_index;
    int found;

    if ((ibv_query_gid(ctx, port, index, gid_p) != 0) ||
        (getifaddrs(&ifaddrs) != 0)) {
        return 0;
    }

    found = uct_remapring_verbs_ipoib_addr("/sys/class/net", gid_p, ifaddrs,
                                           ss, ifname, sizeof(ifname));
    freeifaddrs(ifaddrs);
    if (!found) {
        ucs_debug("%s:%u: no IPoIB interface with an address carries GID %d",
                  ibv_get_device_name(ctx->device), port, index);
        return 0;
    }

    *index_p = index;
    if (ifindex_p != NULL) {
        *ifindex_p = if_nametoindex(ifname);
    }
    return 1;
}

/* The IP address of a port: on RoCE from its GID table, the entry
 * @a gid_index names (-1: auto, an IPv4-mapped GID, RoCE v2 first, else a
 * global IPv6 RoCE v2 one); on InfiniBand its IPoIB interface's */
int uct_remapring_verbs_port_gid(struct ibv_context *ctx, uint8_t port,
                                 int gid_index, struct sockaddr_storage *ss,
                                 int *index_p, union ibv_gid *gid_p,
                                 int *ifindex_p)
{
    struct ibv_port_attr port_attr;
    struct ibv_gid_entry entry;
    int index, pass, first, last;

    if (ibv_query_port(ctx, port, &port_attr) != 0) {
        return 0;
    }

    if (port_attr.link_layer == IBV_LINK_LAYER_INFINIBAND) {
        return uct_remapring_verbs_ib_port_addr(ctx, port, gid_index, ss,
                                                index_p, gid_p, ifindex_p);
    }

    first = (gid_index < 0) ? 0 : gid_index;
    last  = (gid_index < 0) ? port_attr.gid_tbl_len - 1 :
                              ucs_min(gid_index, port_attr.gid_tbl_len - 1);
    for (pass = (gid_index < 0) ? 0 : 2; pass < 3; ++pass) {
        for (index = first; index <= last; ++index) {
            if ((ibv_query_gid_ex(ctx, port, index, &entry, 0) != 0) ||
                !uct_remapring_verbs_gid_ip(&entry, ss) ||
                ((pass == 0) && ((ss->ss_family != AF_INET) ||
                                 (entry.gid_type != IBV_GID_TYPE_ROCE_V2))) ||
                ((pass == 1) && (ss->ss_family != AF_INET))) {
                continue;
            }

            *index_p = index;
            *gid_p   = entry.gid;
            if (ifindex_p != NULL) {
                *ifindex_p = entry.ndev_ifindex;
            }
            return 1;
        }
    }

    return 0;
}

int uct_remapring_verbs_port_addr(struct ibv_context *ctx, uint8_t port,
                                  int gid_index, struct sockaddr_storage *ss,
                                  int *ifindex_p)
{
    union ibv_gid gid;
    int index;

    return uct_remapring_verbs_port_gid(ctx, port, gid_index, ss, &index, &gid,
                                        ifindex_p);
}

int uct_remapring_verbs_route(const struct sockaddr_storage *dst, int *oif_p,
                              int *local_p)
{
    struct {
        struct nlmsghdr nh;
        struct rtmsg    rt;
        char            attrs[RTA_SPACE(16)];
    } req;
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    struct timeval timeout    = {.tv_sec = 1};
    char reply[8192];
    const struct rtmsg *rt;
    struct nlmsghdr *nh;
    struct rtattr *rta;
    const void *ip;
    int fd, attrlen, ret = -1;
    ssize_t len;
    size_t iplen;

    if (!ucs_sockaddr_is_known_af((const struct sockaddr*)dst)) {
        return -1;
    }

    ip = ucs_sockaddr_get_inet_addr((const struct sockaddr*)dst);
    ucs_sockaddr_inet_addr_size(dst->ss_family, &iplen);

    memset(&req, 0, sizeof(req));
    req.nh.nlmsg_len    = NLMSG_LENGTH(sizeof(req.rt));
    req.nh.nlmsg_type   = RTM_GETROUTE;
    req.nh.nlmsg_flags  = NLM_F_REQUEST;
    req.nh.nlmsg_seq    = 1;
    req.rt.rtm_family   = dst->ss_family;
    req.rt.rtm_dst_len  = iplen * 8;
    rta                 = (struct rtattr*)((char*)&req +
                                           NLMSG_ALIGN(req.nh.nlmsg_len));
    rta->rta_type       = RTA_DST;
    rta->rta_len        = RTA_LENGTH(iplen);
    memcpy(RTA_DATA(rta), ip, iplen);
    req.nh.nlmsg_len    = NLMSG_ALIGN(req.nh.nlmsg_len) +
                          RTA_ALIGN(rta->rta_len);

    fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (fd < 0) {
        ucs_debug("netlink socket: %m");
        return -1;
    }

    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    if (sendto(fd, &req, req.nh.nlmsg_len, 0, (struct sockaddr*)&kernel,
               sizeof(kernel)) < 0) {
        ucs_debug("netlink RTM_GETROUTE: %m");
        goto out;
    }

    len = recv(fd, reply, sizeof(reply), 0);
    for (nh = (struct nlmsghdr*)reply; (len > 0) && NLMSG_OK(nh, len);
         nh = NLMSG_NEXT(nh, len)) {
        if (nh->nlmsg_type != RTM_NEWROUTE) {
            break; /* NLMSG_ERROR: no route */
        }

        rt       = NLMSG_DATA(nh);
        *local_p = (rt->rtm_type == RTN_LOCAL);
        *oif_p   = 0;
        attrlen  = RTM_PAYLOAD(nh);
        for (rta = RTM_RTA(rt); RTA_OK(rta, attrlen);
             rta = RTA_NEXT(rta, attrlen)) {
            if ((rta->rta_type == RTA_OIF) &&
                (RTA_PAYLOAD(rta) >= sizeof(int))) {
                memcpy(oif_p, RTA_DATA(rta), sizeof(int));
            }
        }
        ret = 0;
        break;
    }

out:
    close(fd);
    return ret;
}

int uct_remapring_verbs_routable(const struct sockaddr_storage *ours,
                                 int ifindex,
                                 const struct sockaddr_storage *peer)
{
    int oif, local;

    if ((ours->ss_family != peer->ss_family) ||
        !ucs_sockaddr_is_known_af((const struct sockaddr*)ours)) {
        return 0;
    }

    if (!ucs_sockaddr_ip_cmp((const struct sockaddr*)ours,
                             (const struct sockaddr*)peer) ||
        (ifindex == 0)) {
        return 1; /* our own port, or no interface to route by */
    }

    /* another address of this host is another port (or not a port at all):
     * a route leaves by an interface, a local address does not */
    return (uct_remapring_verbs_route(peer, &oif, &local) == 0) && !local &&
           (oif == ifindex);
}

/* Whether some port of @a ctx is active and has an address */
static int uct_remapring_verbs_ctx_usable(struct ibv_context *ctx)
{
    struct ibv_device_attr attr;
    struct sockaddr_storage ss;
    struct ibv_port_attr port_attr;
    uint8_t port;

    if (ibv_query_device(ctx, &attr) != 0) {
        return 0;
    }

    for (port = 1; port <= attr.phys_port_cnt; ++port) {
        if ((ibv_query_port(ctx, port, &port_attr) == 0) &&
            (port_attr.state == IBV_PORT_ACTIVE) &&
            uct_remapring_verbs_port_addr(ctx, port, -1, &ss, NULL)) {
            return 1;
        }
    }

    return 0;
}

static ucs_status_t
uct_remapring_verbs_query_md_resources(uct_component_t *component,
                                       uct_md_resource_desc_t **resources_p,
                                       unsigned *num_resources_p)
{
    struct ibv_context **list;
    uct_md_resource_desc_t *resources;
    int i, num = 0;

    *resources_p     = NULL;
    *num_resources_p = 0;

    /* without rdma_cm (no /dev/infiniband/rdma_cm, no device) there is no
     * verbs device to offer */
    list = rdma_get_devices(&num);
    if (list == NULL) {
        ucs_debug("no rdma_cm devices: %m");
        return UCS_OK;
    }

    for (i = 0; i < num; ++i) {
        if (!uct_remapring_verbs_ctx_usable(list[i])) {
            ucs_debug("%s has no active port with an IP address",
                      ibv_get_device_name(list[i]->device));
            continue;
        }

        resources = ucs_realloc(*resources_p,
                                sizeof(*resources) * (*num_resources_p + 1),
                                "remapring_md_resources");
        if (resources == NULL) {
            rdma_free_devices(list);
            return UCS_ERR_NO_MEMORY;
        }

        ucs_strncpy_zero(resources[*num_resources_p].md_name,
                         ibv_get_device_name(list[i]->device),
                         sizeof(resources[*num_resources_p].md_name));
        *resources_p = resources;
        ++*num_resources_p;
    }

    rdma_free_devices(list);
    return UCS_OK;
}

ucs_status_t
uct_remapring_verbs_query_tl_devices(uct_md_h uct_md,
                                     uct_tl_device_resource_t **devices_p,
                                     unsigned *num_devices_p)
{
    uct_remapring_verbs_md_t *md = ucs_derived_of(uct_md,
                                                  uct_remapring_verbs_md_t);
    struct ibv_context *ctx;
    uct_tl_device_resource_t *devices = NULL;
    struct ibv_port_attr port_attr;
    struct ibv_device_attr attr;
    struct sockaddr_storage ss;
    unsigned num = 0;
    uint8_t port;

    ctx = md->dev->ctx;
    if (ibv_query_device(ctx, &attr) != 0) {
        ucs_error("ibv_query_device(%s) failed: %m", md->dev->name);
        return UCS_ERR_IO_ERROR;
    }

    for (port = 1; port <= attr.phys_port_cnt; ++port) {
        if ((ibv_query_port(ctx, port, &port_attr) != 0) ||
            (port_attr.state != IBV_PORT_ACTIVE) ||
            !uct_remapring_verbs_port_addr(ctx, port, md->dev->gid_index,
                                           &ss, NULL)) {
            if ((port_attr.state == IBV_PORT_ACTIVE) &&
                (md->dev->gid_index >= 0)) {
                ucs_diag("%s:%u: GID %d carries no IP address"
                         " (UCX_REMAPRDMA_GID_INDEX): not offered",
                         md->dev->name, port, md->dev->gid_index);
            }
            continue;
        }

        devices = ucs_realloc(devices, sizeof(*devices) * (num + 1),
                              "remapring_tl_devices");
        if (devices == NULL) {
            return UCS_ERR_NO_MEMORY;
        }

        ucs_snprintf_zero(devices[num].name, sizeof(devices[num].name), "%s:%u",
                          md->dev->name, port);
        devices[num].type       = UCT_DEVICE_TYPE_NET;
        devices[num].sys_device = UCS_SYS_DEVICE_ID_UNKNOWN;
        ++num;
    }

    *devices_p     = devices;
    *num_devices_p = num;
    return UCS_OK;
}

static ucs_status_t uct_remapring_verbs_md_query(uct_md_h uct_md,
                                                 uct_md_attr_t *md_attr)
{
    md_attr->rkey_packed_size     = sizeof(uct_remapring_verbs_rkey_t);
    md_attr->cap.flags            = UCT_MD_FLAG_REG | UCT_MD_FLAG_NEED_RKEY |
                                    UCT_MD_FLAG_NEED_MEMH;
    md_attr->cap.reg_mem_types    = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    md_attr->cap.alloc_mem_types  = 0;
    md_attr->cap.access_mem_types = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    md_attr->cap.detect_mem_types = 0;
    md_attr->cap.max_alloc        = ULONG_MAX; /* no alloc (no FLAG_ALLOC): a
                                                  bound on buffer sizes, as
                                                  UCX's ib md reports */
    md_attr->cap.max_reg          = ULONG_MAX;
    /* what UCX's own verbs memory domains assume */
    md_attr->reg_cost             = ucs_linear_func_make(16e-6, 0.06e-9);
    memset(&md_attr->local_cpus, 0xff, sizeof(md_attr->local_cpus));
    return UCS_OK;
}

static ucs_status_t uct_remapring_verbs_reg(uct_remapring_md_t *super,
                                            void *address, size_t length,
                                            uct_remapring_memh_t **memh_p)
{
    uct_remapring_verbs_md_t *md = ucs_derived_of(super,
                                                  uct_remapring_verbs_md_t);
    uct_remapring_verbs_memh_t *memh;

    memh = ucs_malloc(sizeof(*memh), "uct_remapring_verbs_memh_t");
    if (memh == NULL) {
        ucs_error("failed to allocate a memory handle");
        return UCS_ERR_NO_MEMORY;
    }

    memh->mr = ibv_reg_mr(md->dev->pd, address, length,
                          UCT_REMAPRING_VERBS_ACCESS);
    if (memh->mr == NULL) {
        ucs_error("ibv_reg_mr(%s, %p, %zu) failed: %m", md->dev->name, address,
                  length);
        ucs_free(memh);
        return UCS_ERR_IO_ERROR;
    }

    memh->super.address   = address;
    memh->super.length    = length;
    memh->super.region    = NULL;
    memh->super.allocated = 0;
    *memh_p               = &memh->super;
    return UCS_OK;
}

/* ibv_dereg_mr may be called from any thread */
static void
uct_remapring_verbs_dereg(uct_remapring_md_t *md, uct_remapring_memh_t *super)
{
    uct_remapring_verbs_memh_t *memh =
            ucs_derived_of(super, uct_remapring_verbs_memh_t);

    if (ibv_dereg_mr(memh->mr) != 0) {
        ucs_warn("ibv_dereg_mr(%p) failed: %m", super->address);
    }
    ucs_free(memh);
}

static ucs_status_t
uct_remapring_verbs_mkey_pack(uct_md_h md, uct_mem_h uct_memh,
                              const uct_md_mkey_pack_params_t *params,
                              void *rkey_buffer)
{
    const uct_remapring_verbs_memh_t *memh = uct_memh;
    uct_remapring_verbs_rkey_t rkey;

    rkey.magic   = UCT_REMAPRING_VERBS_RKEY_MAGIC;
    rkey.address = (uintptr_t)memh->super.address;
    rkey.length  = memh->super.length;
    rkey.rkey    = memh->mr->rkey;
    rkey.check   = uct_remapring_rkey_check_word(
              &rkey, ucs_offsetof(uct_remapring_verbs_rkey_t, check));
    memcpy(rkey_buffer, &rkey, sizeof(rkey));
    return UCS_OK;
}

static ucs_status_t uct_remapring_verbs_rkey_unpack(uct_component_t *component,
                                                    const void *rkey_buffer,
                                                    uct_rkey_t *rkey_p,
                                                    void **handle_p)
{
    uct_remapring_verbs_rkey_t *rkey;

    rkey = ucs_malloc(sizeof(*rkey), "uct_remapring_verbs_rkey_t");
    if (rkey == NULL) {
        ucs_error("failed to allocate an rkey");
        return UCS_ERR_NO_MEMORY;
    }

    memcpy(rkey, rkey_buffer, sizeof(*rkey));
    if ((rkey->magic != UCT_REMAPRING_VERBS_RKEY_MAGIC) ||
        (rkey->check !=
         uct_remapring_rkey_check_word(
                 rkey, ucs_offsetof(uct_remapring_verbs_rkey_t, check))) ||
        (rkey->address + rkey->length < rkey->address)) {
        ucs_error("malformed verbs rkey (range 0x%" PRIx64 "+%" PRIu64
                  " key 0x%x)",
                  rkey->address, rkey->length, rkey->rkey);
        ucs_free(rkey);
        return UCS_ERR_INVALID_PARAM;
    }

    *rkey_p   = (uintptr_t)rkey;
    *handle_p = NULL;
    return UCS_OK;
}

/* What an ODP write probe found */
typedef enum {
    UCT_REMAPRING_ODP_EXACT,      /* the bytes land where they were sent */
    UCT_REMAPRING_ODP_PAGE_START, /* at the start of their page instead */
    UCT_REMAPRING_ODP_BROKEN      /* elsewhere, or the probe failed */
} uct_remapring_odp_probe_t;

/* Seconds an ODP probe waits for its write */
#define UCT_REMAPRING_ODP_PROBE_TIMEOUT 10.0

/*
 * Where RDMA WRITEs into an ODP region land: an RC QP connected to itself
 * writes, from a pinned buffer into fresh pages registered with ODP, 8
 * bytes to offset 64 of the first page, and two pages and 128 bytes,
 * several packets, from the start of the second. Some soft-RoCE kernels
 * (rxe's ODP in 7.3.4) place every packet at the start of its page: with
 * a path MTU of a page, packets of a write that starts on a page land
 * where they were sent, and the odp mode then aligns records to pages;
 * with a smaller MTU they overwrite each other, and the pinned mode is
 * used.
 */
static uct_remapring_odp_probe_t
uct_remapring_verbs_odp_probe(uct_remapring_verbs_dev_t *dev)
{
    static const uint64_t pattern = 0x6f6470726f626521ull; /* "!eborpdo" */
    size_t page = ucs_get_page_size();
    size_t big  = 2 * page + 128;  /* the multi-packet write */
    size_t words = big / sizeof(uint64_t);
    uct_remapring_odp_probe_t result = UCT_REMAPRING_ODP_BROKEN;
    struct ibv_qp_init_attr init     = {};
    struct ibv_qp_attr attr;
    struct ibv_send_wr wr[2] = {}, *bad_wr;
    struct ibv_port_attr port_attr;
    struct ibv_mr *src_mr = NULL, *dst_mr = NULL;
    struct ibv_device_attr dev_attr;
    struct sockaddr_storage ss;
    struct ibv_cq *cq;
    struct ibv_qp *qp = NULL;
    struct ibv_sge sge[2];
    struct ibv_wc wc;
    union ibv_gid gid;
    uint64_t *src = NULL;
    uint64_t *dst, *big_dst;
    ucs_time_t deadline;
    int index, n, done = 0, ok = 1;
    size_t i;
    uint8_t port;

    if (ibv_query_device(dev->ctx, &dev_attr) != 0) {
        return result;
    }

    for (port = 1; port <= dev_attr.phys_port_cnt; ++port) {
        if ((ibv_query_port(dev->ctx, port, &port_attr) == 0) &&
            (port_attr.state == IBV_PORT_ACTIVE) &&
            uct_remapring_verbs_port_gid(dev->ctx, port, dev->gid_index, &ss,
                                         &index, &gid, NULL)) {
            break;
        }
    }
    if (port > dev_attr.phys_port_cnt) {
        return result;
    }

    dst = mmap(NULL, 4 * page, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cq  = ibv_create_cq(dev->ctx, 4, NULL, NULL, 0);
    if ((dst == MAP_FAILED) || (cq == NULL) ||
        (ucs_posix_memalign((void**)&src, 64, big + 64, "odp_probe") != 0)) {
        goto out;
    }

    for (i = 0; i < words; ++i) {
        src[i] = pattern ^ i;
    }
    src[words] = pattern;
    big_dst    = (uint64_t*)UCS_PTR_BYTE_OFFSET(dst, page);
    src_mr     = ibv_reg_mr(dev->pd, src, big + 64, IBV_ACCESS_LOCAL_WRITE);
    dst_mr     = ibv_reg_mr(dev->pd, dst, 4 * page,
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                            IBV_ACCESS_ON_DEMAND);
    init.send_cq          = cq;
    init.recv_cq          = cq;
    init.qp_type          = IBV_QPT_RC;
    init.cap.max_send_wr  = 2;
    init.cap.max_recv_wr  = 1;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    qp = ((src_mr != NULL) && (dst_mr != NULL)) ?
         ibv_create_qp(dev->pd, &init) : NULL;
    if (qp == NULL) {
        goto out;
    }

    memset(&attr, 0, sizeof(attr));
    attr.qp_state        = IBV_QPS_INIT;
    attr.port_num        = port;
    attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
    if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                                 IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
        goto out;
    }

    memset(&attr, 0, sizeof(attr));
    attr.qp_state               = IBV_QPS_RTR;
    attr.path_mtu               = port_attr.active_mtu;
    attr.dest_qp_num            = qp->qp_num;
    attr.max_dest_rd_atomic     = 1;
    attr.min_rnr_timer          = 12;
    attr.ah_attr.is_global      = 1;
    attr.ah_attr.grh.dgid       = gid;
    attr.ah_attr.grh.sgid_index = index;
    attr.ah_attr.grh.hop_limit  = 64;
    attr.ah_attr.dlid           = port_attr.lid; /* InfiniBand; 0 on RoCE */
    attr.ah_attr.port_num       = port;
    if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                 IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                 IBV_QP_MAX_DEST_RD_ATOMIC |
                                 IBV_QP_MIN_RNR_TIMER) != 0) {
        goto out;
    }

    memset(&attr, 0, sizeof(attr));
    attr.qp_state      = IBV_QPS_RTS;
    attr.timeout       = 18;
    attr.retry_cnt     = 7;
    attr.rnr_retry     = 7;
    attr.max_rd_atomic = 1;
    if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_TIMEOUT |
                                 IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                 IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) != 0) {
        goto out;
    }

    /* 8 bytes inside the first page, then the pages from the second on */
    sge[0].addr   = (uintptr_t)&src[words];
    sge[0].length = sizeof(pattern);
    sge[1].addr   = (uintptr_t)src;
    sge[1].length = big;
    for (i = 0; i < 2; ++i) {
        sge[i].lkey      = src_mr->lkey;
        wr[i].opcode     = IBV_WR_RDMA_WRITE;
        wr[i].send_flags = IBV_SEND_SIGNALED;
        wr[i].sg_list    = &sge[i];
        wr[i].num_sge    = 1;
        wr[i].wr.rdma.rkey = dst_mr->rkey;
    }
    wr[0].wr.rdma.remote_addr = (uintptr_t)dst + 64;
    wr[0].next                = &wr[1];
    wr[1].wr.rdma.remote_addr = (uintptr_t)big_dst;
    if (ibv_post_send(qp, wr, &bad_wr) != 0) {
        goto out;
    }

    deadline = ucs_get_time() +
               ucs_time_from_sec(UCT_REMAPRING_ODP_PROBE_TIMEOUT);
    while ((done < 2) && ok && (ucs_get_time() < deadline)) {
        n = ibv_poll_cq(cq, 1, &wc);
        if (n == 0) {
            sched_yield();
        } else {
            ok    = (n == 1) && (wc.status == IBV_WC_SUCCESS);
            done += ok;
        }
    }
    if (done < 2) {
        goto out;
    }

    for (i = 0; (i < words) && (big_dst[i] == (pattern ^ i)); ++i)
        ;
    if (i < words) {
        ucs_diag("ODP probe on %s: a write of %zu bytes from the"
                 " start of a page differs at byte %zu (path MTU %d bytes)",
                 dev->name, big, i * sizeof(uint64_t),
                 128 << port_attr.active_mtu);
    } else if (dst[8] == pattern) {
        result = UCT_REMAPRING_ODP_EXACT;
    } else if (dst[0] == pattern) {
        result = UCT_REMAPRING_ODP_PAGE_START;
    }

out:
    if (qp != NULL) {
        ibv_destroy_qp(qp);
    }
    if (dst_mr != NULL) {
        ibv_dereg_mr(dst_mr);
    }
    if (src_mr != NULL) {
        ibv_dereg_mr(src_mr);
    }
    if (cq != NULL) {
        ibv_destroy_cq(cq);
    }
    if (dst != MAP_FAILED) {
        munmap(dst, 4 * page);
    }
    ucs_free(src);
    return result;
}

void uct_remapring_verbs_dev_probe_odp(uct_remapring_verbs_dev_t *dev)
{
    if (!dev->odp || dev->odp_probed) {
        return;
    }

    dev->odp_probed = 1;
    switch (uct_remapring_verbs_odp_probe(dev)) {
    case UCT_REMAPRING_ODP_EXACT:
        break;
    case UCT_REMAPRING_ODP_PAGE_START:
        ucs_diag("%s places an ODP write that starts inside a"
                 " page at the start of the page: in odp mode records start"
                 " on pages",
                 dev->name);
        dev->odp_rec_align = ucs_get_page_size();
        break;
    default:
        ucs_diag("an ODP write on %s did not land as sent: the"
                 " pinned mode is used",
                 dev->name);
        dev->odp = 0;
        break;
    }
}

static void uct_remapring_verbs_md_close(uct_md_h uct_md)
{
    uct_remapring_verbs_md_t *md = ucs_derived_of(uct_md,
                                                  uct_remapring_verbs_md_t);

    /* the cache deregisters what it holds before the domain goes */
    uct_remapring_md_cleanup(&md->super);
    if (ibv_dealloc_pd(md->dev->pd) != 0) {
        ucs_warn("ibv_dealloc_pd(%s) failed: %m", md->dev->name);
    }

    ucs_free(md->dev);
    ucs_free(md);
}

static const uct_remapring_md_ops_t uct_remapring_verbs_md_reg_ops = {
        .cache_name = "remapring-verbs",
        .reg        = uct_remapring_verbs_reg,
        .dereg      = uct_remapring_verbs_dereg};

static ucs_status_t
uct_remapring_verbs_md_open(uct_component_t *component, const char *name,
                            const uct_md_config_t *config, uct_md_h *md_p)
{
    const uct_remapring_verbs_md_config_t *md_config =
            ucs_derived_of(config, uct_remapring_verbs_md_config_t);
    struct ibv_device_attr_ex attr;
    uct_remapring_verbs_dev_t *dev;
    uct_remapring_verbs_md_t *md;
    uint32_t rc_caps;

    md  = ucs_calloc(1, sizeof(*md), "uct_remapring_verbs_md_t");
    dev = ucs_calloc(1, sizeof(*dev), "uct_remapring_verbs_dev_t");
    if ((md == NULL) || (dev == NULL)) {
        ucs_error("failed to allocate memory domain %s", name);
        goto err_free;
    }

    dev->ctx = uct_remapring_verbs_find_ctx(name);
    if (dev->ctx == NULL) {
        ucs_error("no rdma_cm device %s", name);
        goto err_free;
    }

    memset(&attr, 0, sizeof(attr));
    if (ibv_query_device_ex(dev->ctx, NULL, &attr) != 0) {
        ucs_error("ibv_query_device_ex(%s) failed: %m", name);
        goto err_free;
    }

    /* explicit ODP, for the writes into the ring view */
    rc_caps  = attr.odp_caps.per_transport_caps.rc_odp_caps;
    dev->odp = (attr.odp_caps.general_caps & IBV_ODP_SUPPORT) &&
               (rc_caps & IBV_ODP_SUPPORT_WRITE) &&
               (rc_caps & IBV_ODP_SUPPORT_READ);
    dev->max_rd_atomic = ucs_min(attr.orig_attr.max_qp_rd_atom, 16);
    dev->gid_index     = (md_config->gid_index == UCS_ULUNITS_AUTO) ?
                                 -1 :
                                 (int)md_config->gid_index;
    ucs_strncpy_zero(dev->name, name, sizeof(dev->name));

    dev->pd = ibv_alloc_pd(dev->ctx);
    if (dev->pd == NULL) {
        ucs_error("ibv_alloc_pd(%s) failed: %m", name);
        goto err_free;
    }

    /* probed when an interface first needs to know (every UCX process
     * opens every memory domain, most never use it) */
    dev->odp_rec_align = REMAPRING_RING_ALIGN;
    dev->odp_probed    = 0;

    uct_remapring_md_init(&md->super, component, &uct_remapring_verbs_md_ops,
                          &uct_remapring_verbs_md_reg_ops, config);
    md->dev = dev;
    ucs_debug("memory domain %s, %s ODP", name, dev->odp ? "with" : "without");
    *md_p = &md->super.super;
    return UCS_OK;

err_free:
    ucs_free(dev);
    ucs_free(md);
    return UCS_ERR_NO_DEVICE;
}

/* clang-format off */
static uct_md_ops_t uct_remapring_verbs_md_ops = {
    .close                  = uct_remapring_verbs_md_close,
    .query                  = uct_remapring_verbs_md_query,
    .mem_alloc              = (uct_md_mem_alloc_func_t)
                              ucs_empty_function_return_unsupported,
    .mem_free               = (uct_md_mem_free_func_t)
                              ucs_empty_function_return_unsupported,
    .mem_advise             = (uct_md_mem_advise_func_t)
                              ucs_empty_function_return_unsupported,
    .mem_reg                = uct_remapring_md_mem_reg,
    .mem_dereg              = uct_remapring_md_mem_dereg,
    .mem_query              = (uct_md_mem_query_func_t)
                              ucs_empty_function_return_unsupported,
    .mkey_pack              = uct_remapring_verbs_mkey_pack,
    .is_sockaddr_accessible = ucs_empty_function_return_zero_int,
    .detect_memory_type     = (uct_md_detect_memory_type_func_t)
                              ucs_empty_function_return_unsupported,
};
/* clang-format on */

/* UCX_REMAPRING_<NAME> sets a memory domain setting for both transports,
 * UCX_REMAPRDMA_<NAME> for this one only */
static ucs_config_field_t uct_remapring_verbs_md_config_table[] = {
    {UCT_REMAPRING_CONFIG_PREFIX, "", NULL,
     ucs_offsetof(uct_remapring_verbs_md_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_remapring_md_config_table)},

    {"GID_INDEX", "auto",
     "The entry of a port's GID table whose IP address the port is offered\n"
     "and connected with (rdma_cm listens on it; a peer's route to it is\n"
     "what makes the peer reachable). auto: an IPv4-mapped GID, RoCE v2\n"
     "first, else a global IPv6 RoCE v2 one. A port whose chosen entry\n"
     "carries no IP address is not offered. An InfiniBand port is offered\n"
     "with the address of its IPoIB interface, the one whose hardware\n"
     "address carries the GID (auto: GID 0), IPv4 first.",
     ucs_offsetof(uct_remapring_verbs_md_config_t, gid_index),
     UCS_CONFIG_TYPE_ULUNITS},

    {NULL}
};

UCT_REMAPRING_COMPONENT_DEFINE(uct_remapring_verbs_component,
                               UCT_REMAPRING_VERBS_NAME,
                               UCT_REMAPRING_VERBS_CONFIG_PREFIX,
                               uct_remapring_verbs_md_config_table,
                               uct_remapring_verbs_md_config_t,
                               uct_remapring_verbs_query_md_resources,
                               uct_remapring_verbs_md_open,
                               uct_remapring_verbs_rkey_unpack);
