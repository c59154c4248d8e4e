/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * What the RDMA transport takes of a device: uct_remapring_verbs_limits()
 * fed with device and port attributes as ibv_query_device() and
 * ibv_query_port() report them (no device is opened: this host has none,
 * and the figures of devices it could never have are the point), and the
 * RNR timer's code. The figures named mlx5 are a ConnectX-5's, as
 * ibv_devinfo -v prints them; those named "a small NIC" are made up, within
 * what the verbs API allows, to reach every limit at once. Reachability is
 * checked against this host's routing table (netlink, and ip(8) to compare).
 * InfiniBand ports' IPoIB addresses are looked up in a fake sysfs tree.
 */

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>

#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <list>
#include <string>
#include <vector>

extern "C" {
#include <uct/ib/remapring/verbs/remapring_verbs.h>
}

namespace {

const size_t block = 128 * 1024; /* UCX_REMAPRING_BLOCK_SIZE's default */

void mlx5(struct ibv_device_attr *dev, struct ibv_port_attr *port)
{
    *dev                = {};
    dev->max_qp_wr      = 32768;
    dev->max_sge        = 30;
    dev->max_sge_rd     = 30;
    dev->max_cqe        = 4194303;
    dev->max_srq        = 8388608;
    dev->max_srq_wr     = 32767;
    dev->max_srq_sge    = 31;
    *port               = {};
    port->max_msg_sz    = 1u << 30;
}

void small_nic(struct ibv_device_attr *dev, struct ibv_port_attr *port)
{
    *dev                = {};
    dev->max_qp_wr      = 128;
    dev->max_sge        = 4;
    dev->max_sge_rd     = 1;
    dev->max_cqe        = 767;
    dev->max_srq        = 16;
    dev->max_srq_wr     = 511;
    dev->max_srq_sge    = 1;
    *port               = {};
    port->max_msg_sz    = 1u << 31;
}

} // namespace

TEST(verbs_limits, mlx5_takes_the_settings)
{
    struct ibv_device_attr dev;
    struct ibv_port_attr port;
    uct_remapring_verbs_limits_t limits;

    mlx5(&dev, &port);
    ASSERT_EQ(UCS_OK, uct_remapring_verbs_limits("mlx5_0:1", &dev, &port, 256,
                                                 1024, block, &limits));
    EXPECT_EQ(256u, limits.sq_size);
    EXPECT_EQ(1024u, limits.srq_size);
    /* room to grow with the connections: up to 8192 */
    EXPECT_EQ(8192u, limits.srq_max);
    /* the transport's own bound on an iov, under the device's 30 */
    EXPECT_EQ(UCT_REMAPRING_MAX_IOV, limits.send_sge);
    EXPECT_EQ(UCT_REMAPRING_MAX_IOV, limits.read_sge);
    EXPECT_EQ(size_t(1) << 30, limits.max_msg);
}

TEST(verbs_limits, small_nic_bounds_every_figure)
{
    struct ibv_device_attr dev;
    struct ibv_port_attr port;
    uct_remapring_verbs_limits_t limits;

    small_nic(&dev, &port);
    ASSERT_EQ(UCS_OK, uct_remapring_verbs_limits("small0:1", &dev, &port, 256,
                                                 1024, block, &limits));
    EXPECT_EQ(128u, limits.sq_size);   /* max_qp_wr */
    /* max_srq_wr (511), under what the CQ leaves besides a QP's requests
     * (767 - 128) */
    EXPECT_EQ(511u, limits.srq_size);
    EXPECT_EQ(511u, limits.srq_max); /* the device's own bound */
    EXPECT_EQ(4u, limits.send_sge);    /* max_sge */
    EXPECT_EQ(1u, limits.read_sge);    /* max_sge_rd */
    EXPECT_EQ(size_t(1) << 31, limits.max_msg);

    /* a CQ that bounds the receive requests before the SRQ does */
    dev.max_cqe = 400;
    ASSERT_EQ(UCS_OK, uct_remapring_verbs_limits("small0:1", &dev, &port, 256,
                                                 1024, block, &limits));
    EXPECT_EQ(400u - 128u, limits.srq_size);
}

TEST(verbs_limits, no_read_limit_reads_as_it_writes)
{
    struct ibv_device_attr dev;
    struct ibv_port_attr port;
    uct_remapring_verbs_limits_t limits;

    small_nic(&dev, &port);
    dev.max_sge_rd = 0;
    ASSERT_EQ(UCS_OK, uct_remapring_verbs_limits("small0:1", &dev, &port, 64,
                                                 64, block, &limits));
    EXPECT_EQ(4u, limits.read_sge);
    EXPECT_EQ(64u, limits.sq_size);
    EXPECT_EQ(64u, limits.srq_size);
}

TEST(verbs_limits, devices_that_cannot_carry_the_ring)
{
    struct ibv_device_attr dev;
    struct ibv_port_attr port;
    uct_remapring_verbs_limits_t limits;

    /* no shared receive queue */
    mlx5(&dev, &port);
    dev.max_srq = 0;
    EXPECT_EQ(UCS_ERR_UNSUPPORTED,
              uct_remapring_verbs_limits("nosrq0:1", &dev, &port, 256, 1024,
                                         block, &limits));

    /* messages shorter than a block */
    mlx5(&dev, &port);
    port.max_msg_sz = 64 * 1024;
    EXPECT_EQ(UCS_ERR_UNSUPPORTED,
              uct_remapring_verbs_limits("short0:1", &dev, &port, 256, 1024,
                                         block, &limits));
    EXPECT_EQ(UCS_OK,
              uct_remapring_verbs_limits("short0:1", &dev, &port, 256, 1024,
                                         64 * 1024, &limits));

    /* fewer send requests than the transport needs */
    mlx5(&dev, &port);
    dev.max_qp_wr = 8;
    EXPECT_EQ(UCS_ERR_UNSUPPORTED,
              uct_remapring_verbs_limits("tiny0:1", &dev, &port, 256, 1024,
                                         block, &limits));

    /* a CQ too small for one QP's requests and the least receive ones */
    mlx5(&dev, &port);
    dev.max_cqe = 256 + 10;
    EXPECT_EQ(UCS_ERR_UNSUPPORTED,
              uct_remapring_verbs_limits("tiny0:1", &dev, &port, 256, 1024,
                                         block, &limits));

    /* no gather entry at all */
    mlx5(&dev, &port);
    dev.max_sge = 0;
    EXPECT_EQ(UCS_ERR_UNSUPPORTED,
              uct_remapring_verbs_limits("nosge0:1", &dev, &port, 256, 1024,
                                         block, &limits));
}

TEST(verbs_limits, imm_window_halves_as_the_srq_fills)
{
    /* the defaults: 128, an SRQ of up to 8192, 64 for progress at first */
    EXPECT_EQ(128u, uct_remapring_verbs_imm_window(128, 8192, 64));
    EXPECT_EQ(128u, uct_remapring_verbs_imm_window(128, 8192, 8192 - 4096));
    EXPECT_EQ(64u, uct_remapring_verbs_imm_window(128, 8192, 8192 - 4095));
    EXPECT_EQ(64u, uct_remapring_verbs_imm_window(128, 8192, 8192 - 2048));
    EXPECT_EQ(32u, uct_remapring_verbs_imm_window(128, 8192, 8192 - 2047));
    /* never below 32, even with no room left at all */
    EXPECT_EQ(32u, uct_remapring_verbs_imm_window(128, 8192, 8192));
    EXPECT_EQ(32u, uct_remapring_verbs_imm_window(128, 8192, 20000));
    /* a setting below the floor is kept as it is */
    EXPECT_EQ(8u, uct_remapring_verbs_imm_window(8, 8192, 8192));
    EXPECT_EQ(2u, uct_remapring_verbs_imm_window(2, 64, 64));
    /* a small device's SRQ (511): 128 never fits, 32 at once */
    EXPECT_EQ(32u, uct_remapring_verbs_imm_window(128, 511, 64));

    /* 100 peers, each connected both ways (a receiving QP of its window, a
     * sending one of a window of 8 slots and 4), fit in 8192 */
    unsigned need = 64, peers;
    for (peers = 0; ; ++peers) {
        unsigned window = uct_remapring_verbs_imm_window(128, 8192, need);
        if (need + window + 12 > 8192) {
            break;
        }
        need += window + 12;
    }
    EXPECT_GE(peers, 100u);
    EXPECT_LE(peers, 127u);
}

TEST(verbs_limits, rnr_timer_codes)
{
    /* IBTA's table, rounded up */
    EXPECT_EQ(1, uct_remapring_verbs_rnr_code(10e-6));
    EXPECT_EQ(2, uct_remapring_verbs_rnr_code(15e-6));
    EXPECT_EQ(12, uct_remapring_verbs_rnr_code(0.64e-3));
    EXPECT_EQ(13, uct_remapring_verbs_rnr_code(0.65e-3));
    EXPECT_EQ(14, uct_remapring_verbs_rnr_code(1e-3)); /* the default */
    EXPECT_EQ(30, uct_remapring_verbs_rnr_code(327.68e-3));
    EXPECT_EQ(31, uct_remapring_verbs_rnr_code(491.52e-3));
    /* never 0, the connection manager's 655.36 ms */
    EXPECT_EQ(1, uct_remapring_verbs_rnr_code(0));
    EXPECT_EQ(31, uct_remapring_verbs_rnr_code(10.0));
}

/*
 * Reachability by route (uct_remapring_verbs_route() and _routable()),
 * against this host's real routing table: what the kernel says through
 * netlink must be what `ip route get` says, and a peer is reachable from a
 * port only where the route leaves by the port's interface.
 */
namespace {

struct sockaddr_storage v4(const char *ip)
{
    struct sockaddr_storage ss = {};
    auto *sin                  = (struct sockaddr_in*)&ss;

    sin->sin_family = AF_INET;
    EXPECT_EQ(1, inet_pton(AF_INET, ip, &sin->sin_addr)) << ip;
    return ss;
}

/* The first IPv4 address of an interface that is up and not loopback, its
 * prefix length and its interface's index; false if there is none */
bool host_ipv4(std::string *ip, unsigned *prefix, int *ifindex)
{
    struct ifaddrs *list, *ifa;
    char buf[INET_ADDRSTRLEN];
    bool found = false;

    if (getifaddrs(&list) != 0) {
        return false;
    }

    for (ifa = list; (ifa != nullptr) && !found; ifa = ifa->ifa_next) {
        if ((ifa->ifa_addr == nullptr) ||
            (ifa->ifa_addr->sa_family != AF_INET) ||
            (ifa->ifa_flags & IFF_LOOPBACK) || !(ifa->ifa_flags & IFF_UP)) {
            continue;
        }

        inet_ntop(AF_INET, &((struct sockaddr_in*)ifa->ifa_addr)->sin_addr,
                  buf, sizeof(buf));
        *ip      = buf;
        *prefix  = __builtin_popcount(
                ((struct sockaddr_in*)ifa->ifa_netmask)->sin_addr.s_addr);
        *ifindex = if_nametoindex(ifa->ifa_name);
        found    = (*ifindex != 0);
    }

    freeifaddrs(list);
    return found;
}

/* `ip -o route get IP`: the interface index it names, 0 for a local
 * address, -1 for no route */
int ip_route_get(const std::string &ip)
{
    std::string cmd = "ip -o route get " + ip + " 2>/dev/null", out;
    char line[512], dev[IF_NAMESIZE + 1];
    FILE *f = popen(cmd.c_str(), "r");
    const char *p;

    if (f == nullptr) {
        return -2;
    }
    while (fgets(line, sizeof(line), f) != nullptr) {
        out += line;
    }
    if (pclose(f) != 0) {
        return -1;
    }
    if (out.compare(0, 6, "local ") == 0) {
        return 0;
    }
    p = strstr(out.c_str(), " dev ");
    if ((p == nullptr) || (sscanf(p, " dev %16s", dev) != 1)) {
        return -2;
    }
    return if_nametoindex(dev);
}

} // namespace

TEST(verbs_route, netlink_says_what_ip_route_says)
{
    std::string ip, other;
    unsigned prefix;
    int ifindex, oif, local;
    struct in_addr a;

    if (system("ip -V >/dev/null 2>&1") != 0) {
        GTEST_SKIP() << "no ip(8) (iproute2) to compare with";
    }
    if (!host_ipv4(&ip, &prefix, &ifindex)) {
        GTEST_SKIP() << "no IPv4 address on an interface that is up";
    }

    /* a local address: no interface to leave by */
    auto self = v4(ip.c_str());
    ASSERT_EQ(0, uct_remapring_verbs_route(&self, &oif, &local));
    EXPECT_TRUE(local);
    auto lo = v4("127.0.0.1");
    ASSERT_EQ(0, uct_remapring_verbs_route(&lo, &oif, &local));
    EXPECT_TRUE(local);

    /* another address of the interface's subnet, and one outside it */
    inet_pton(AF_INET, ip.c_str(), &a);
    a.s_addr ^= htonl((prefix < 31) ? 1u : 0u) ^ htonl((prefix < 30) ? 2u : 0u);
    other = inet_ntoa(a);
    for (const std::string &dst : {other, std::string("198.51.100.7")}) {
        int want = ip_route_get(dst);
        auto ss  = v4(dst.c_str());
        int ret  = uct_remapring_verbs_route(&ss, &oif, &local);

        ASSERT_NE(-2, want) << "cannot read ip route get " << dst;
        if (want < 0) {
            EXPECT_EQ(-1, ret) << dst;
        } else {
            ASSERT_EQ(0, ret) << dst;
            EXPECT_EQ(want == 0, (bool)local) << dst;
            if (want > 0) {
                EXPECT_EQ(want, oif) << dst;
            }
        }
    }
}

TEST(verbs_route, reachable_where_the_route_leaves_by_the_port)
{
    std::string ip, other;
    unsigned prefix;
    int ifindex;
    struct in_addr a;

    if (!host_ipv4(&ip, &prefix, &ifindex) || (prefix > 29)) {
        GTEST_SKIP() << "no IPv4 subnet of 8 addresses or more on an"
                        " interface that is up";
    }

    inet_pton(AF_INET, ip.c_str(), &a);
    a.s_addr ^= htonl(2);
    other = inet_ntoa(a);

    auto ours = v4(ip.c_str());
    auto peer = v4(other.c_str());
    auto lo2  = v4("127.0.0.2");
    struct sockaddr_storage v6 = {};
    v6.ss_family = AF_INET6;

    /* our own address: the port loops back */
    EXPECT_TRUE(uct_remapring_verbs_routable(&ours, ifindex, &ours));
    /* a neighbour, routed out through the port's interface */
    EXPECT_TRUE(uct_remapring_verbs_routable(&ours, ifindex, &peer));
    /* the same neighbour, from a port on another interface */
    EXPECT_FALSE(uct_remapring_verbs_routable(&ours, ifindex + 1000, &peer));
    /* an address of this host that is not our port's */
    EXPECT_FALSE(uct_remapring_verbs_routable(&ours, ifindex, &lo2));
    /* another family */
    EXPECT_FALSE(uct_remapring_verbs_routable(&ours, ifindex, &v6));
    /* no interface known: the family decides */
    EXPECT_TRUE(uct_remapring_verbs_routable(&ours, 0, &lo2));
}

/*
 * InfiniBand ports: the address of the IPoIB interface whose hardware
 * address carries the port's GID. This host has no InfiniBand port: the
 * interfaces are a fake sysfs tree (a directory of type and address files,
 * as /sys/class/net has them) and a fake getifaddrs() list, named so.
 */
namespace {

class fake_ipoib {
public:
    fake_ipoib()
    {
        char tmpl[] = "/tmp/fake-sysfs-net.XXXXXX";

        root = mkdtemp(tmpl);
    }

    ~fake_ipoib()
    {
        std::string cmd = "rm -rf '" + root + "'";

        for (auto *ifa : addrs) {
            delete ifa;
        }
        for (auto *ss : storage) {
            delete ss;
        }
        (void)system(cmd.c_str());
    }

    /* a network interface of ARPHRD type @a type whose hardware address is
     * @a hwaddr ("xx:xx:...") */
    void netdev(const char *name, int type, const char *hwaddr)
    {
        std::string dir = root + "/" + name;

        ASSERT_EQ(0, mkdir(dir.c_str(), 0755));
        write(dir + "/type", std::to_string(type) + "\n");
        write(dir + "/address", std::string(hwaddr) + "\n");
    }

    /* an address of interface @a name, appended to the list */
    void addr(const char *name, int family, const char *ip)
    {
        auto *ifa = new struct ifaddrs();
        auto *ss  = new struct sockaddr_storage();

        ss->ss_family = family;
        if (family == AF_INET) {
            inet_pton(AF_INET, ip, &((struct sockaddr_in*)ss)->sin_addr);
        } else {
            inet_pton(AF_INET6, ip, &((struct sockaddr_in6*)ss)->sin6_addr);
        }
        storage.push_back(ss);
        names.push_back(name);
        ifa->ifa_name = const_cast<char*>(names.back().c_str());
        ifa->ifa_addr = (struct sockaddr*)ss;
        if (!addrs.empty()) {
            addrs.back()->ifa_next = ifa;
        }
        addrs.push_back(ifa);
    }

    /* uct_remapring_verbs_ipoib_addr() for @a gid: the address found, or
     * "" */
    std::string lookup(const union ibv_gid &gid, std::string *ifname)
    {
        struct sockaddr_storage ss;
        char name[IF_NAMESIZE], text[64];

        if (!uct_remapring_verbs_ipoib_addr(root.c_str(), &gid,
                                            addrs.empty() ? nullptr :
                                                            addrs.front(),
                                            &ss, name, sizeof(name))) {
            return "";
        }
        *ifname = name;
        inet_ntop(ss.ss_family,
                  (ss.ss_family == AF_INET) ?
                          (void*)&((struct sockaddr_in*)&ss)->sin_addr :
                          (void*)&((struct sockaddr_in6*)&ss)->sin6_addr,
                  text, sizeof(text));
        return text;
    }

private:
    static void write(const std::string &path, const std::string &text)
    {
        FILE *f = fopen(path.c_str(), "w");

        ASSERT_NE(nullptr, f) << path;
        fputs(text.c_str(), f);
        fclose(f);
    }

    std::string root;
    std::list<std::string> names;
    std::vector<struct ifaddrs*> addrs;
    std::vector<struct sockaddr_storage*> storage;
};

/* a port GID: the default subnet prefix and a GUID */
union ibv_gid port_gid(uint8_t last)
{
    union ibv_gid gid = {};

    gid.raw[0]  = 0xfe;
    gid.raw[1]  = 0x80;
    gid.raw[8]  = 0x98;
    gid.raw[9]  = 0x03;
    gid.raw[10] = 0x9b;
    gid.raw[11] = 0x03;
    gid.raw[15] = last;
    return gid;
}

} // namespace

TEST(verbs_ipoib, fake_port_finds_its_interface)
{
    fake_ipoib fake;
    std::string ifname;

    /* two ports' IPoIB interfaces, a pkey child of the first, an Ethernet
     * one; the hardware address is 4 bytes of flags and QPN, then the GID */
    fake.netdev("eth0", 1, "52:54:00:12:34:56");
    fake.netdev("ib0", 32, "00:00:10:29:fe:80:00:00:00:00:00:00:98:03:9b:03:"
                           "00:00:00:01");
    fake.netdev("ib0.8001", 32, "00:00:11:07:fe:80:00:00:00:00:00:00:98:03:"
                                "9b:03:00:00:00:01");
    fake.netdev("ib1", 32, "00:00:10:49:fe:80:00:00:00:00:00:00:98:03:9b:03:"
                           "00:00:00:02");
    fake.addr("eth0", AF_INET, "10.0.0.5");
    fake.addr("ib1", AF_INET6, "fe80::9a03:9b03:0:2");
    fake.addr("ib1", AF_INET6, "2001:db8::2");
    fake.addr("ib0", AF_INET6, "2001:db8::1");
    fake.addr("ib0.8001", AF_INET, "192.168.7.1");
    fake.addr("ib0", AF_INET, "192.168.1.1");

    /* IPv4 first, in the list's order: the pkey child's comes first */
    EXPECT_EQ("192.168.7.1", fake.lookup(port_gid(1), &ifname));
    EXPECT_EQ("ib0.8001", ifname);
    /* no IPv4: a global IPv6 address, never the link-local one */
    EXPECT_EQ("2001:db8::2", fake.lookup(port_gid(2), &ifname));
    EXPECT_EQ("ib1", ifname);
    /* a GID no interface carries: no address, the port is not offered */
    EXPECT_EQ("", fake.lookup(port_gid(3), &ifname));
}

TEST(verbs_ipoib, fake_port_without_an_address)
{
    fake_ipoib fake;
    std::string ifname;

    /* IPoIB interface with only a link-local address, and an Ethernet
     * interface whose address happens to end in the GID's bytes */
    fake.netdev("ib0", 32, "00:00:10:29:fe:80:00:00:00:00:00:00:98:03:9b:03:"
                           "00:00:00:01");
    fake.netdev("eth1", 1, "fe:80:00:00:00:00:00:00:98:03:9b:03:00:00:00:01");
    fake.addr("ib0", AF_INET6, "fe80::9a03:9b03:0:1");
    fake.addr("eth1", AF_INET, "10.1.1.1");
    EXPECT_EQ("", fake.lookup(port_gid(1), &ifname));
    /* an interface with a short or garbled hardware address */
    fake.netdev("ib9", 32, "00:00:10:29:fe:80");
    fake.addr("ib9", AF_INET, "10.9.9.9");
    EXPECT_EQ("", fake.lookup(port_gid(1), &ifname));
}
