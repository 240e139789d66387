/*
 * Choosing among fi_getinfo's entries, on a captured description of an EFA node (p4d's four
 * NICs, listed as libfabric 2.x lists them: every efa-direct entry first, then the efa RDM
 * entries, then the efa DGRAM ones) with tcp;ofi_rxm beside it: asking for efa never gives
 * efa-direct, each rail's device gives that NIC, an unknown device falls back (or fails when
 * required), tcp means tcp;ofi_rxm, the API version is the highest both sides know, and
 * efa-direct's MTU-sized sends are refused at open.
 */
#include "inter/ofi/ofi_select.h"
#include "util/util.h"

#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

/* p4d.24xlarge: four EFA devices, as rdma-core names them. */
static const char *const efa_devices[] = {"rdmap16s27", "rdmap32s27", "rdmap144s27",
                                          "rdmap160s27"};
#define NUM_EFA (sizeof(efa_devices) / sizeof(efa_devices[0]))

#define EFA_DIRECT_MTU 8928          /* what efa-direct advertises as max_msg_size */
#define ENGINE_MSG     (65536 + 16)  /* STRATA_INTER_MSG_SIZE's default plus the header */

/* --- A NIC object of our own: fi_freeinfo closes it, fi_dupinfo asks it for a copy. ---- */

typedef struct test_nic {
    struct fid_nic        nic;
    struct fi_device_attr device;
    char                  name[32];
} test_nic_t;

static struct fid_nic *test_nic_new(const char *name);

static int test_nic_close(struct fid *fid)
{
    free(container_of(fid, test_nic_t, nic.fid));
    return 0;
}

static int test_nic_control(struct fid *fid, int command, void *arg)
{
    test_nic_t *nic = container_of(fid, test_nic_t, nic.fid);

    if (command != FI_DUP) {
        return -FI_ENOSYS;
    }
    *(struct fid_nic **)arg = test_nic_new(nic->name);
    return *(struct fid_nic **)arg ? 0 : -FI_ENOMEM;
}

static struct fi_ops test_nic_ops = {
    .size    = sizeof(struct fi_ops),
    .close   = test_nic_close,
    .control = test_nic_control,
};

static struct fid_nic *test_nic_new(const char *name)
{
    test_nic_t *nic = calloc(1, sizeof(*nic));

    if (nic == NULL) {
        return NULL;
    }
    snprintf(nic->name, sizeof(nic->name), "%s", name);
    nic->device.name       = nic->name;
    nic->nic.fid.fclass    = FI_CLASS_NIC;
    nic->nic.fid.ops       = &test_nic_ops;
    nic->nic.device_attr   = &nic->device;
    return &nic->nic;
}

/* --- The captured listing --------------------------------------------------------------- */

typedef struct entry_desc {
    const char      *prov_name;
    const char      *fabric;
    const char      *domain;
    const char      *nic;         /* NULL: no NIC object */
    enum fi_ep_type  ep_type;
    uint32_t         addr_format;
    uint64_t         max_msg_size;
    size_t           inject_size;
} entry_desc_t;

/* One entry: built with fi_allocinfo, then copied by fi_dupinfo as fi_getinfo's are. */
static struct fi_info *entry_new(const entry_desc_t *d)
{
    struct fi_info *info = fi_allocinfo(), *dup;

    assert_non_null(info);
    info->fabric_attr->prov_name    = strdup(d->prov_name);
    info->fabric_attr->name         = strdup(d->fabric);
    info->domain_attr->name         = strdup(d->domain);
    info->domain_attr->cq_data_size = 4;
    info->ep_attr->type             = d->ep_type;
    info->ep_attr->max_msg_size     = d->max_msg_size;
    info->tx_attr->inject_size      = d->inject_size;
    info->addr_format               = d->addr_format;
    info->caps                      = FI_MSG | FI_RMA;
    info->nic                       = d->nic ? test_nic_new(d->nic) : NULL;
    dup                             = fi_dupinfo(info);
    fi_freeinfo(info);
    assert_non_null(dup);
    return dup;
}

static void append(struct fi_info **tail_p, struct fi_info ***link_p, const entry_desc_t *d)
{
    struct fi_info *info = entry_new(d);

    **link_p = info;
    *link_p  = &info->next;
    *tail_p  = info;
}

/* efa-direct for every NIC, then efa RDM, then efa DGRAM, then tcp;ofi_rxm on eth0 and lo. */
static struct fi_info *p4d_listing(void)
{
    struct fi_info *list = NULL, *tail = NULL, **link = &list;
    char domain[64];

    for (size_t i = 0; i < NUM_EFA; ++i) {
        snprintf(domain, sizeof(domain), "%s-rdm", efa_devices[i]);
        append(&tail, &link, &(entry_desc_t){"efa", "efa-direct", domain, efa_devices[i],
                                             FI_EP_RDM, FI_ADDR_EFA, EFA_DIRECT_MTU, 32});
    }
    for (size_t i = 0; i < NUM_EFA; ++i) {
        snprintf(domain, sizeof(domain), "%s-rdm", efa_devices[i]);
        append(&tail, &link, &(entry_desc_t){"efa", "efa", domain, efa_devices[i], FI_EP_RDM,
                                             FI_ADDR_EFA, UINT64_MAX, 4032});
    }
    for (size_t i = 0; i < NUM_EFA; ++i) {
        snprintf(domain, sizeof(domain), "%s-dgrm", efa_devices[i]);
        append(&tail, &link, &(entry_desc_t){"efa", "efa", domain, efa_devices[i], FI_EP_DGRAM,
                                             FI_ADDR_EFA, EFA_DIRECT_MTU, 32});
    }
    append(&tail, &link, &(entry_desc_t){"tcp;ofi_rxm", "127.0.0.0/8", "lo", "lo", FI_EP_RDM,
                                         FI_SOCKADDR_IN, UINT64_MAX, 64});
    append(&tail, &link, &(entry_desc_t){"tcp;ofi_rxm", "172.31.0.0/20", "eth0", "eth0",
                                         FI_EP_RDM, FI_SOCKADDR_IN, UINT64_MAX, 64});
    (void)tail;
    return list;
}

static const char *nic_of(const struct fi_info *info)
{
    return info->nic ? info->nic->device_attr->name : "";
}

static int setup(void **state)
{
    util_log_set_level(STRATA_LOG_LEVEL_ERROR); /* the refusals print their one line */
    *state = p4d_listing();
    return 0;
}

static int teardown(void **state)
{
    fi_freeinfo(*state);
    return 0;
}

/* --- Cases -------------------------------------------------------------------------------- */

static void test_efa_is_never_efa_direct(void **state)
{
    struct fi_info *list = *state, *pick = NULL;

    assert_string_equal(ofi_select_fabric_name("efa"), "efa");
    assert_null(ofi_select_fabric_name("tcp;ofi_rxm"));
    for (struct fi_info *cur = list; cur != NULL; cur = cur->next) {
        bool direct = strcmp(cur->fabric_attr->name, "efa-direct") == 0;

        assert_true(!direct || !ofi_select_is_provider(cur, "efa"));
    }
    /* efa-direct comes first in the listing; the efa RDM entry of the first NIC wins. */
    assert_int_equal(ofi_select_pick(list, "efa", NULL, false, &pick), OFI_PICK_DEFAULT);
    assert_string_equal(pick->fabric_attr->name, "efa");
    assert_string_equal(pick->domain_attr->name, "rdmap16s27-rdm");
    assert_int_equal(pick->ep_attr->type, FI_EP_RDM);
}

static void test_each_rail_finds_its_nic(void **state)
{
    struct fi_info *list = *state, *pick;
    char domain[64];

    for (size_t i = 0; i < NUM_EFA; ++i) {
        pick = NULL;
        assert_int_equal(ofi_select_pick(list, "efa", efa_devices[i], true, &pick),
                         OFI_PICK_DEVICE);
        snprintf(domain, sizeof(domain), "%s-rdm", efa_devices[i]);
        assert_string_equal(nic_of(pick), efa_devices[i]);
        assert_string_equal(pick->domain_attr->name, domain); /* RDM, never -dgrm */
        assert_string_equal(pick->fabric_attr->name, "efa");
        /* The domain's own name names it too (STRATA_INTER_IFACE=rdmap16s27-rdm). */
        assert_int_equal(ofi_select_pick(list, "efa", domain, true, &pick), OFI_PICK_DEVICE);
        assert_string_equal(nic_of(pick), efa_devices[i]);
    }
}

static void test_unknown_device(void **state)
{
    struct fi_info *list = *state, *pick = NULL;
    char devices[256];

    /* From the rail plan: the default, which the transport warns about. */
    assert_int_equal(ofi_select_pick(list, "efa", "mlx5_0", false, &pick), OFI_PICK_FALLBACK);
    assert_string_equal(pick->domain_attr->name, "rdmap16s27-rdm");
    assert_string_equal(pick->fabric_attr->name, "efa");
    /* From STRATA_INTER_IFACE: nothing. */
    pick = NULL;
    assert_int_equal(ofi_select_pick(list, "efa", "mlx5_0", true, &pick), OFI_PICK_NONE);
    assert_null(pick);
    /* What the warning lists: every NIC once, however many fabrics list it. */
    ofi_select_devices(list, "efa", devices, sizeof(devices));
    assert_string_equal(devices, "rdmap16s27, rdmap32s27, rdmap144s27, rdmap160s27");
    ofi_select_devices(list, "tcp;ofi_rxm", devices, sizeof(devices));
    assert_string_equal(devices, "lo, eth0");
}

static void test_tcp_means_rxm(void **state)
{
    struct fi_info *list = *state, *pick = NULL;
    const char *tcp = ofi_select_provider_name("tcp");

    assert_string_equal(tcp, "tcp;ofi_rxm");
    assert_string_equal(ofi_select_provider_name("verbs"), "verbs;ofi_rxm");
    assert_string_equal(ofi_select_provider_name("efa"), "efa");
    assert_int_equal(ofi_select_pick(list, tcp, NULL, false, &pick), OFI_PICK_DEFAULT);
    assert_string_equal(pick->domain_attr->name, "eth0"); /* off loopback first */
    assert_int_equal(ofi_select_pick(list, tcp, "lo", true, &pick), OFI_PICK_DEVICE);
    assert_string_equal(pick->domain_attr->name, "lo");
    /* Layers compare whole and without case; one layer is not the other. */
    assert_int_equal(ofi_select_pick(list, "TCP;OFI_RXM", "eth0", true, &pick), OFI_PICK_DEVICE);
    assert_int_equal(ofi_select_pick(list, "tcp", NULL, false, &pick), OFI_PICK_NONE);
    assert_int_equal(ofi_select_pick(list, "tcp;ofi_rxm;x", NULL, false, &pick), OFI_PICK_NONE);
    assert_int_equal(ofi_select_pick(list, "ofi_rxm", NULL, false, &pick), OFI_PICK_NONE);
    /* Neither provider's device is found under the other. */
    assert_int_equal(ofi_select_pick(list, tcp, "rdmap16s27", true, &pick), OFI_PICK_NONE);
    assert_int_equal(ofi_select_pick(list, "efa", "eth0", true, &pick), OFI_PICK_NONE);
}

static void test_limits(void **state)
{
    struct fi_info *list = *state;
    ofi_limits_t limits;

    /* The first entry is efa-direct: its sends stop at the MTU, below the engine's. */
    assert_string_equal(list->fabric_attr->name, "efa-direct");
    ofi_select_limits(list, &limits);
    assert_int_equal(limits.max_msg_size, EFA_DIRECT_MTU);
    assert_int_equal(ofi_select_check_limits(&limits, ENGINE_MSG, "efa-direct"),
                     STRATA_ERR_UNSUPPORTED);
    assert_int_equal(ofi_select_check_limits(&limits, EFA_DIRECT_MTU, "efa-direct"), STRATA_OK);
    for (struct fi_info *cur = list; cur != NULL; cur = cur->next) {
        if (ofi_select_is_provider(cur, "efa") && cur->ep_attr->type == FI_EP_RDM) {
            ofi_select_limits(cur, &limits);
            assert_int_equal(ofi_select_check_limits(&limits, ENGINE_MSG, "efa"), STRATA_OK);
        }
    }
}

static void test_api_version(void **state)
{
    uint32_t version = 0;

    (void)state;
    /* Debian's 1.17 headers with a newer library: what the headers know. */
    assert_int_equal(ofi_select_api_version(FI_VERSION(1, 17), FI_VERSION(1, 22), &version),
                     STRATA_OK);
    assert_int_equal(version, FI_VERSION(1, 17));
    /* New headers, older library: what the library knows (1.18: efa keeps device RDMA). */
    assert_int_equal(ofi_select_api_version(FI_VERSION(2, 6), FI_VERSION(1, 18), &version),
                     STRATA_OK);
    assert_int_equal(version, FI_VERSION(1, 18));
    assert_int_equal(ofi_select_api_version(FI_VERSION(1, 10), FI_VERSION(1, 10), &version),
                     STRATA_OK);
    assert_int_equal(version, FI_VERSION(1, 10));
    /* Below fi_mr_attr.iface: refused, and version left alone. */
    version = 7;
    assert_int_equal(ofi_select_api_version(FI_VERSION(1, 9), FI_VERSION(1, 20), &version),
                     STRATA_ERR_UNSUPPORTED);
    assert_int_equal(version, 7);
    /* This build: never below what the engine needs, never above what the headers know. */
    assert_int_equal(ofi_select_api_version(OFI_HEADERS_VERSION, fi_version(), &version),
                     STRATA_OK);
    assert_true(version >= OFI_MIN_VERSION && version <= OFI_HEADERS_VERSION);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_efa_is_never_efa_direct, setup, teardown),
        cmocka_unit_test_setup_teardown(test_each_rail_finds_its_nic, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_device, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tcp_means_rxm, setup, teardown),
        cmocka_unit_test_setup_teardown(test_limits, setup, teardown),
        cmocka_unit_test(test_api_version),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
