/*
 * The verbs transport without a device: its address blob, the choice of device, port and
 * GID over made-up machines, the mapping of work completions, and what open and probe say
 * on a machine without RDMA devices (or, where there are some, about one that is absent).
 */
#include "inter/verbs/verbs.h"

#include "common/log_capture.h"

#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

extern const inter_transport_ops_t verbs_transport_ops;

/* Whether a captured line contains both words. */
static bool test_logged(const char *a, const char *b)
{
    for (int i = 0; i < log_capture.count && i < LOG_CAPTURE_LINES; ++i) {
        if (strstr(log_capture.lines[i], a) && strstr(log_capture.lines[i], b)) {
            return true;
        }
    }
    return false;
}

/* --- Address blob ------------------------------------------------------------------------- */

static verbs_addr_t test_addr(uint32_t owner, uint32_t world)
{
    verbs_addr_t addr = {.owner = owner, .world = world, .link_layer = IBV_LINK_LAYER_ETHERNET,
                         .port = 2, .mtu = IBV_MTU_4096, .lid = 0x1234, .psn = 0xabcdef};

    for (int i = 0; i < 16; ++i) {
        addr.gid[i] = (uint8_t)(0xf0 + i);
    }
    return addr;
}

static void test_addr_round_trip(void **state)
{
    uint32_t qpns[3] = {0x11, 0x222222, 0xffffff};
    verbs_addr_t addr = test_addr(1, 3), back;
    uint8_t blob[VERBS_ADDR_HEADER + 12];
    uint32_t magic;

    (void)state;
    assert_int_equal(verbs_addr_size(3), sizeof(blob));
    verbs_addr_encode(&addr, qpns, blob);
    /* Network byte order: "VRB1" reads the same on every host. */
    memcpy(&magic, blob, sizeof(magic));
    assert_int_equal(ntohl(magic), VERBS_ADDR_MAGIC);
    assert_int_equal(verbs_addr_decode(blob, sizeof(blob), &back), STRATA_OK);
    assert_int_equal(back.owner, 1);
    assert_int_equal(back.world, 3);
    assert_int_equal(back.link_layer, IBV_LINK_LAYER_ETHERNET);
    assert_int_equal(back.port, 2);
    assert_int_equal(back.mtu, IBV_MTU_4096);
    assert_int_equal(back.lid, 0x1234);
    assert_int_equal(back.psn, 0xabcdef);
    assert_memory_equal(back.gid, addr.gid, 16);
    /* Entry p is the QP the owner set aside for rank p. */
    for (int p = 0; p < 3; ++p) {
        assert_int_equal(verbs_addr_qpn(blob, &back, p), qpns[p]);
    }
    assert_int_equal(verbs_addr_qpn(blob, &back, 3), 0);
    assert_int_equal(verbs_addr_qpn(blob, &back, -1), 0);
}

static void test_addr_refused(void **state)
{
    uint32_t qpns[4] = {1, 2, 3, 4};
    verbs_addr_t addr = test_addr(3, 4), back;
    uint8_t blob[VERBS_ADDR_HEADER + 16];

    (void)state;
    verbs_addr_encode(&addr, qpns, blob);
    log_capture_start();
    /* Shorter than its header, or than its world's QPNs. */
    assert_int_equal(verbs_addr_decode(blob, VERBS_ADDR_HEADER - 1, &back), STRATA_ERR_INVALID);
    assert_int_equal(verbs_addr_decode(blob, sizeof(blob) - 1, &back), STRATA_ERR_INVALID);
    assert_true(test_logged("rank 3 of 4", "60 bytes"));
    assert_int_equal(verbs_addr_decode(NULL, sizeof(blob), &back), STRATA_ERR_INVALID);
    /* Another transport's address. */
    blob[0] ^= 0xff;
    assert_int_equal(verbs_addr_decode(blob, sizeof(blob), &back), STRATA_ERR_INVALID);
    assert_true(test_logged("not a verbs address", "every rank use the verbs transport"));
    blob[0] ^= 0xff;
    /* An owner outside its world, an MTU or link layer no port has. */
    addr.owner = 4;
    verbs_addr_encode(&addr, qpns, blob);
    assert_int_equal(verbs_addr_decode(blob, sizeof(blob), &back), STRATA_ERR_INVALID);
    addr = test_addr(0, 4);
    addr.mtu = 0;
    verbs_addr_encode(&addr, qpns, blob);
    assert_int_equal(verbs_addr_decode(blob, sizeof(blob), &back), STRATA_ERR_INVALID);
    addr = test_addr(0, 4);
    addr.link_layer = 7;
    verbs_addr_encode(&addr, qpns, blob);
    assert_int_equal(verbs_addr_decode(blob, sizeof(blob), &back), STRATA_ERR_INVALID);
    log_capture_stop();
    addr = test_addr(0, 4);
    verbs_addr_encode(&addr, qpns, blob);
    assert_int_equal(verbs_addr_decode(blob, sizeof(blob), &back), STRATA_OK);
    /* The engine carries INTER_ADDR_MAX bytes: one QPN per rank bounds the world. */
    assert_true(verbs_addr_size((INTER_ADDR_MAX - VERBS_ADDR_HEADER) / 4) <= INTER_ADDR_MAX);
    assert_true(verbs_addr_size((INTER_ADDR_MAX - VERBS_ADDR_HEADER) / 4 + 1) > INTER_ADDR_MAX);
}

/* --- Device names, devices, GIDs ------------------------------------------------------------ */

static void test_spec_parse(void **state)
{
    verbs_dev_spec_t spec;
    char err[160];
    static const char *const bad[] = {":1", "mlx5_0:", "mlx5_0:x", "mlx5_0:0", "mlx5_0:256",
                                      "mlx5_0:1x", "mlx5_0:-1",
                                      "a_name_far_longer_than_any_device_name_the_kernel_gives_"
                                      "to_an_rdma_device"};

    (void)state;
    assert_int_equal(verbs_spec_parse("", &spec, err, sizeof(err)), STRATA_OK);
    assert_string_equal(spec.name, "");
    assert_int_equal(spec.port, 0);
    assert_int_equal(verbs_spec_parse(NULL, &spec, err, sizeof(err)), STRATA_OK);
    assert_string_equal(spec.name, "");
    assert_int_equal(verbs_spec_parse("mlx5_0", &spec, err, sizeof(err)), STRATA_OK);
    assert_string_equal(spec.name, "mlx5_0");
    assert_int_equal(spec.port, 0);
    assert_int_equal(verbs_spec_parse("mlx5_10:2", &spec, err, sizeof(err)), STRATA_OK);
    assert_string_equal(spec.name, "mlx5_10");
    assert_int_equal(spec.port, 2);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
        err[0] = '\0';
        assert_int_equal(verbs_spec_parse(bad[i], &spec, err, sizeof(err)), STRATA_ERR_CONFIG);
        assert_non_null(strstr(err, bad[i]));
    }
}

static verbs_dev_info_t test_dev(const char *name, uint32_t vendor, int transport, int ports,
                                 unsigned active_mask, uint8_t link_layer)
{
    verbs_dev_info_t dev = {.vendor_id = vendor, .transport = transport, .num_ports = ports,
                            .opened = true};

    snprintf(dev.name, sizeof(dev.name), "%s", name);
    for (int p = 0; p < ports; ++p) {
        dev.active[p]     = (active_mask >> p) & 1u;
        dev.link_layer[p] = link_layer;
    }
    return dev;
}

#define TEST_IB  IBV_TRANSPORT_IB
#define TEST_ETH IBV_LINK_LAYER_ETHERNET
#define TEST_INF IBV_LINK_LAYER_INFINIBAND

static void test_dev_score(void **state)
{
    verbs_dev_info_t cx = test_dev("mlx5_0", VERBS_VENDOR_MELLANOX, TEST_IB, 1, 1, TEST_INF);
    verbs_dev_info_t roce = test_dev("mlx5_1", VERBS_VENDOR_MELLANOX, TEST_IB, 2, 2, TEST_ETH);
    verbs_dev_info_t down = test_dev("mlx5_2", VERBS_VENDOR_MELLANOX, TEST_IB, 1, 0, TEST_INF);
    verbs_dev_info_t efa = test_dev("rdmap16s27", VERBS_VENDOR_AMAZON, IBV_TRANSPORT_UNSPECIFIED,
                                    1, 1, IBV_LINK_LAYER_UNSPECIFIED);
    verbs_dev_info_t rxe = test_dev("rxe0", 0, TEST_IB, 1, 1, TEST_ETH);
    verbs_dev_info_t siw = test_dev("siw0", 0, IBV_TRANSPORT_IWARP, 1, 1, TEST_ETH);
    verbs_dev_info_t closed = cx;
    char why[160];

    (void)state;
    closed.opened = false;
    assert_int_equal(verbs_dev_score(&cx, why, sizeof(why)), INTER_PROBE_NATIVE);
    assert_non_null(strstr(why, "ConnectX mlx5_0 port 1"));
    assert_non_null(strstr(why, "InfiniBand"));
    assert_int_equal(verbs_dev_score(&roce, why, sizeof(why)), INTER_PROBE_NATIVE);
    assert_non_null(strstr(why, "mlx5_1 port 2"));
    assert_non_null(strstr(why, "RoCE"));
    assert_int_equal(verbs_dev_score(&down, why, sizeof(why)), INTER_PROBE_NONE);
    assert_non_null(strstr(why, "no active port"));
    /* efa's verbs device has no RC queue pairs: ofi drives it, not this transport. */
    assert_int_equal(verbs_dev_classify(&efa), VERBS_DEV_EFA);
    assert_int_equal(verbs_dev_score(&efa, why, sizeof(why)), INTER_PROBE_NONE);
    assert_non_null(strstr(why, "EFA"));
    assert_int_equal(verbs_dev_score(&rxe, why, sizeof(why)), INTER_PROBE_FALLBACK);
    assert_non_null(strstr(why, "not a ConnectX"));
    assert_int_equal(verbs_dev_classify(&siw), VERBS_DEV_NO_RC);
    assert_int_equal(verbs_dev_score(&siw, why, sizeof(why)), INTER_PROBE_NONE);
    assert_int_equal(verbs_dev_score(&closed, why, sizeof(why)), INTER_PROBE_NONE);
    /* Named like a ConnectX but reporting another vendor id: the driver name decides. */
    cx.vendor_id = 0x15b3;
    assert_int_equal(verbs_dev_classify(&cx), VERBS_DEV_CONNECTX);
}

typedef struct test_pick {
    strata_status_t status;
    int             index, port;
    bool            fallback;
    char            msg[320];
} test_pick_t;

static test_pick_t test_select(const verbs_dev_info_t *devs, int num, const char *text,
                               bool required)
{
    test_pick_t pick = {.index = -1, .port = -1};
    verbs_dev_spec_t spec;
    char err[160];

    assert_int_equal(verbs_spec_parse(text, &spec, err, sizeof(err)), STRATA_OK);
    pick.status = verbs_select_device(devs, num, &spec, required, &pick.index, &pick.port,
                                      &pick.fallback, pick.msg, sizeof(pick.msg));
    return pick;
}

static void test_select_device(void **state)
{
    verbs_dev_info_t devs[4] = {
        test_dev("rdmap16s27", VERBS_VENDOR_AMAZON, IBV_TRANSPORT_UNSPECIFIED, 1, 1, 0),
        test_dev("rxe0", 0, TEST_IB, 1, 1, TEST_ETH),
        test_dev("mlx5_0", VERBS_VENDOR_MELLANOX, TEST_IB, 2, 2, TEST_ETH), /* port 1 down */
        test_dev("mlx5_1", VERBS_VENDOR_MELLANOX, TEST_IB, 1, 1, TEST_INF),
    };
    test_pick_t pick;

    (void)state;
    /* Nothing named: the best score, the first on ties, on its first active port. */
    pick = test_select(devs, 4, "", false);
    assert_int_equal(pick.status, STRATA_OK);
    assert_int_equal(pick.index, 2);
    assert_int_equal(pick.port, 2);
    assert_false(pick.fallback);
    pick = test_select(devs, 4, "mlx5_1", true);
    assert_int_equal(pick.status, STRATA_OK);
    assert_int_equal(pick.index, 3);
    assert_int_equal(pick.port, 1);
    pick = test_select(devs, 4, "rxe0", true);
    assert_int_equal(pick.status, STRATA_OK);
    assert_int_equal(pick.index, 1);
    pick = test_select(devs, 4, "mlx5_0:2", true);
    assert_int_equal(pick.status, STRATA_OK);
    assert_int_equal(pick.port, 2);
    /* A named port that is down or absent. */
    pick = test_select(devs, 4, "mlx5_0:1", false);
    assert_int_equal(pick.status, STRATA_ERR_CONFIG);
    assert_non_null(strstr(pick.msg, "port 1 of RDMA device 'mlx5_0' is not active"));
    pick = test_select(devs, 4, "mlx5_0:3", false);
    assert_int_equal(pick.status, STRATA_ERR_CONFIG);
    assert_non_null(strstr(pick.msg, "no port 3"));
    /* A device that cannot carry RC. */
    pick = test_select(devs, 4, "rdmap16s27", true);
    assert_int_equal(pick.status, STRATA_ERR_CONFIG);
    assert_non_null(strstr(pick.msg, "EFA"));
    /* An absent device: required, an error naming it and the devices present. */
    pick = test_select(devs, 4, "mlx5_9", true);
    assert_int_equal(pick.status, STRATA_ERR_CONFIG);
    assert_non_null(strstr(pick.msg, "no RDMA device 'mlx5_9'"));
    assert_non_null(strstr(pick.msg, "devices present: rdmap16s27, rxe0, mlx5_0, mlx5_1"));
    /* From the rail plan: the best device instead, said. */
    pick = test_select(devs, 4, "mlx5_9", false);
    assert_int_equal(pick.status, STRATA_OK);
    assert_true(pick.fallback);
    assert_int_equal(pick.index, 2);
    assert_non_null(strstr(pick.msg, "using mlx5_0 port 2"));
    /* Only devices this transport cannot use. */
    pick = test_select(devs, 1, "", false);
    assert_int_equal(pick.status, STRATA_ERR_UNSUPPORTED);
    assert_non_null(strstr(pick.msg, "devices present: rdmap16s27"));
    /* rxe alone is taken, at a lower score. */
    pick = test_select(devs, 2, "", false);
    assert_int_equal(pick.status, STRATA_OK);
    assert_int_equal(pick.index, 1);
}

static void test_select_no_device(void **state)
{
    test_pick_t pick;

    (void)state;
    pick = test_select(NULL, 0, "", false);
    assert_int_equal(pick.status, STRATA_ERR_UNSUPPORTED);
    assert_string_equal(pick.msg, "no RDMA device (ibv_get_device_list found none)");
    pick = test_select(NULL, 0, "mlx5_0:1", true);
    assert_int_equal(pick.status, STRATA_ERR_CONFIG);
    assert_non_null(strstr(pick.msg, "no RDMA device 'mlx5_0'"));
    assert_non_null(strstr(pick.msg, "ibv_get_device_list found none"));
}

static verbs_gid_info_t test_gid(uint32_t index, uint32_t type, bool ipv4)
{
    verbs_gid_info_t gid = {.index = index, .type = type};

    if (ipv4) {
        gid.raw[10] = gid.raw[11] = 0xff;
        gid.raw[12] = 10;
        gid.raw[15] = (uint8_t)index;
    } else {
        gid.raw[0] = 0xfe;
        gid.raw[1] = 0x80;
    }
    return gid;
}

static void test_select_gid(void **state)
{
    verbs_gid_info_t gids[4] = {
        test_gid(0, IBV_GID_TYPE_ROCE_V1, false), test_gid(1, IBV_GID_TYPE_ROCE_V2, false),
        test_gid(2, IBV_GID_TYPE_ROCE_V1, true), test_gid(5, IBV_GID_TYPE_ROCE_V2, true),
    };
    verbs_gid_info_t ib = test_gid(0, IBV_GID_TYPE_IB, false);

    (void)state;
    assert_int_equal(verbs_select_gid(gids, 4, -1), 5);  /* RoCE v2 with IPv4 */
    assert_int_equal(verbs_select_gid(gids, 3, -1), 1);  /* RoCE v2 */
    assert_int_equal(verbs_select_gid(gids, 1, -1), 0);  /* RoCE v1 only */
    assert_int_equal(verbs_select_gid(gids, 4, 2), 2);   /* asked for, listed */
    assert_int_equal(verbs_select_gid(gids, 4, 3), -1);  /* asked for, empty */
    assert_int_equal(verbs_select_gid(gids, 0, -1), -1);
    assert_int_equal(verbs_select_gid(&ib, 1, -1), -1);
    assert_int_equal(verbs_path_mtu(IBV_MTU_4096, IBV_MTU_1024), IBV_MTU_1024);
    assert_int_equal(verbs_path_mtu(IBV_MTU_2048, IBV_MTU_4096), IBV_MTU_2048);
}

/* --- Completions -------------------------------------------------------------------------- */

static void test_wc_mapping(void **state)
{
    verbs_ctx_t rx = {.kind = VERBS_CTX_RX}, tx = {.kind = VERBS_CTX_TX, .peer = 1};
    struct ibv_wc wc;
    inter_cqe_t cqe;

    (void)state;
    memset(&wc, 0, sizeof(wc));
    wc.status   = IBV_WC_SUCCESS;
    wc.opcode   = IBV_WC_RECV_RDMA_WITH_IMM;
    wc.imm_data = htonl(0x40000007u);
    wc.byte_len = 4096;
    verbs_wc_to_cqe(&wc, &rx, &cqe);
    assert_int_equal(cqe.kind, INTER_CQE_IMM);
    assert_int_equal(cqe.status, STRATA_OK);
    assert_int_equal(cqe.imm, 0x40000007u);
    assert_ptr_equal(cqe.context, &rx); /* the receive it consumed, to post again */
    wc.opcode   = IBV_WC_RECV;
    wc.byte_len = 80;
    verbs_wc_to_cqe(&wc, &rx, &cqe);
    assert_int_equal(cqe.kind, INTER_CQE_RECV);
    assert_int_equal(cqe.length, 80);
    assert_int_equal(cqe.imm, 0);
    wc.opcode = IBV_WC_RDMA_WRITE;
    verbs_wc_to_cqe(&wc, &tx, &cqe);
    assert_int_equal(cqe.kind, INTER_CQE_LOCAL);
    assert_ptr_equal(cqe.context, &tx);
    wc.opcode = IBV_WC_SEND;
    verbs_wc_to_cqe(&wc, &tx, &cqe);
    assert_int_equal(cqe.kind, INTER_CQE_LOCAL);
    wc.opcode   = IBV_WC_RDMA_READ;
    wc.byte_len = 300;
    verbs_wc_to_cqe(&wc, &tx, &cqe);
    assert_int_equal(cqe.kind, INTER_CQE_LOCAL);
    assert_int_equal(cqe.length, 300);
    /* Errors: the opcode is not valid then, so what was posted decides the kind. */
    wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
    wc.status = IBV_WC_WR_FLUSH_ERR;
    verbs_wc_to_cqe(&wc, &tx, &cqe);
    assert_int_equal(cqe.kind, INTER_CQE_LOCAL);
    assert_int_equal(cqe.status, STRATA_ERR_CANCELLED);
    wc.opcode = IBV_WC_RDMA_WRITE;
    verbs_wc_to_cqe(&wc, &rx, &cqe);
    assert_int_equal(cqe.kind, INTER_CQE_RECV);
    assert_int_equal(cqe.status, STRATA_ERR_CANCELLED);
    wc.status = IBV_WC_RETRY_EXC_ERR;
    verbs_wc_to_cqe(&wc, &tx, &cqe);
    assert_int_equal(cqe.status, STRATA_ERR_TRANSPORT);
    assert_int_equal(verbs_wc_status(IBV_WC_REM_ACCESS_ERR), STRATA_ERR_TRANSPORT);
    assert_int_equal(verbs_wc_status(IBV_WC_RNR_RETRY_EXC_ERR), STRATA_ERR_TRANSPORT);
    assert_int_equal(verbs_wc_status(IBV_WC_LOC_LEN_ERR), STRATA_ERR_TRANSPORT);
    assert_int_equal(verbs_wc_status(IBV_WC_SUCCESS), STRATA_OK);
}

/* --- This machine ------------------------------------------------------------------------- */

static int test_device_count(void)
{
    int num = 0;
    struct ibv_device **list = ibv_get_device_list(&num);

    if (list == NULL) {
        return 0;
    }
    ibv_free_device_list(list);
    return num;
}

/* A named device that does not exist: a configuration error naming it, and what there is. */
static void test_open_absent_device(void **state)
{
    inter_transport_params_t params = {.rank = 0, .world_size = 2, .iface = "strata_nodev0:1",
                                       .required = true, .msg_bytes = 4096};
    inter_transport_t *tp = NULL;

    (void)state;
    log_capture_start();
    assert_int_equal(verbs_transport_ops.open(&params, &tp), STRATA_ERR_CONFIG);
    log_capture_stop();
    assert_null(tp);
    assert_true(test_logged("no RDMA device 'strata_nodev0'",
                            test_device_count() ? "devices present" : "found none"));
    /* A malformed name is a configuration error too. */
    params.iface = "mlx5_0:x";
    log_capture_start();
    assert_int_equal(verbs_transport_ops.open(&params, &tp), STRATA_ERR_CONFIG);
    log_capture_stop();
    assert_true(test_logged("mlx5_0:x", "port after ':'"));
}

/* What this machine shows without RDMA devices: open, probe and the registry all say so. */
static void test_no_device_here(void **state)
{
    inter_transport_params_t params = {.rank = 0, .world_size = 2, .iface = "",
                                       .msg_bytes = 4096};
    const inter_transport_ops_t *ops = NULL;
    inter_transport_t *tp = NULL;
    inter_probe_t probe = {.score = -1};
    char why[256];

    (void)state;
    if (test_device_count() > 0) {
        skip(); /* this machine has RDMA devices: the engine_verbs test drives them */
    }
    log_capture_start();
    assert_int_equal(verbs_transport_ops.open(&params, &tp), STRATA_ERR_UNSUPPORTED);
    log_capture_stop();
    assert_null(tp);
    assert_true(test_logged("verbs: rail 0", "no RDMA device (ibv_get_device_list found none)"));
    verbs_transport_ops.probe(&params, &probe);
    assert_int_equal(probe.score, INTER_PROBE_NONE);
    assert_string_equal(probe.why, "no RDMA device (ibv_get_device_list found none)");
    log_capture_start();
    assert_int_equal(inter_transport_select("verbs", &params, &ops, why, sizeof(why)),
                     STRATA_ERR_UNSUPPORTED);
    log_capture_stop();
    assert_null(ops);
    assert_true(test_logged("STRATA_INTER_TRANSPORT=verbs cannot run here", "no RDMA device"));
}

/* Bad parameters and settings are refused before any device is looked at. */
static void test_open_refuses(void **state)
{
    inter_transport_params_t params = {.rank = 2, .world_size = 2, .iface = "",
                                       .msg_bytes = 4096};
    inter_transport_t *tp = NULL;

    (void)state;
    log_capture_start();
    assert_int_equal(verbs_transport_ops.open(&params, &tp), STRATA_ERR_INVALID);
    params.rank       = 0;
    params.world_size = (INTER_ADDR_MAX - VERBS_ADDR_HEADER) / 4 + 1;
    assert_int_equal(verbs_transport_ops.open(&params, &tp), STRATA_ERR_UNSUPPORTED);
    assert_true(test_logged("a QPN per rank", "at most 1013 ranks"));
    params.world_size = 2;
    setenv("STRATA_VERBS_TIMEOUT", "40", 1);
    assert_int_equal(verbs_transport_ops.open(&params, &tp), STRATA_ERR_CONFIG);
    assert_true(test_logged("TIMEOUT 40", "out of range"));
    unsetenv("STRATA_VERBS_TIMEOUT");
    log_capture_stop();
    assert_null(tp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_addr_round_trip),
        cmocka_unit_test(test_addr_refused),
        cmocka_unit_test(test_spec_parse),
        cmocka_unit_test(test_dev_score),
        cmocka_unit_test(test_select_device),
        cmocka_unit_test(test_select_no_device),
        cmocka_unit_test(test_select_gid),
        cmocka_unit_test(test_wc_mapping),
        cmocka_unit_test(test_open_absent_device),
        cmocka_unit_test(test_open_refuses),
        cmocka_unit_test(test_no_device_here),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
