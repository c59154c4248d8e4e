/**
 * Copyright (c) remapring contributors. See file LICENSE for terms.
 *
 * What the RDMA transport takes of a device: uct_remapring_verbs_limits()
 * fed with device and port attributes as ibv_query_device() and
 * ibv_query_port() report them (no device is opened: this host has none,
 * and the figures of devices it could never have are the point), and the
 * RNR timer's code. The figures named mlx5 are a ConnectX-5's, as
 * ibv_devinfo -v prints them; those named "a small NIC" are made up, within
 * what the verbs API allows, to reach every limit at once.
 */

#include <gtest/gtest.h>

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
