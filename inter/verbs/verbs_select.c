/*
 * Which device, port and GID the verbs transport uses, and how well a device suits it:
 * plain functions over what discovery read (verbs_transport.c), so that the unit test can
 * hand them any machine.
 */
#include "inter/verbs/verbs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

strata_status_t verbs_spec_parse(const char *text, verbs_dev_spec_t *spec_p, char *err,
                                 size_t err_len)
{
    verbs_dev_spec_t spec = {.name = "", .port = 0};
    const char *colon;
    size_t name_len;

    if (text == NULL || text[0] == '\0') {
        *spec_p = spec;
        return STRATA_OK;
    }
    colon    = strchr(text, ':');
    name_len = colon ? (size_t)(colon - text) : strlen(text);
    if (name_len == 0 || name_len >= sizeof(spec.name)) {
        snprintf(err, err_len, "'%s' is not an RDMA device name (mlx5_0, or mlx5_0:1 for a "
                 "port)", text);
        return STRATA_ERR_CONFIG;
    }
    memcpy(spec.name, text, name_len);
    spec.name[name_len] = '\0';
    if (colon != NULL) {
        char *end;
        long port = strtol(colon + 1, &end, 10);

        if (colon[1] < '0' || colon[1] > '9' || *end != '\0' || port < 1 || port > 255) {
            snprintf(err, err_len, "'%s': the port after ':' must be a number from 1 to 255",
                     text);
            return STRATA_ERR_CONFIG;
        }
        spec.port = (int)port;
    }
    *spec_p = spec;
    return STRATA_OK;
}

static bool verbs_name_starts(const char *name, const char *prefix)
{
    return strncmp(name, prefix, strlen(prefix)) == 0;
}

verbs_dev_class_t verbs_dev_classify(const verbs_dev_info_t *dev)
{
    /* efa's verbs device offers SRD and UD queue pairs only: RC QPs cannot be created. */
    if (dev->vendor_id == VERBS_VENDOR_AMAZON || verbs_name_starts(dev->name, "efa")) {
        return VERBS_DEV_EFA;
    }
    /* RoCE devices report the InfiniBand transport too; iWARP has no write with immediate. */
    if (dev->transport != IBV_TRANSPORT_IB) {
        return VERBS_DEV_NO_RC;
    }
    if (dev->vendor_id == VERBS_VENDOR_MELLANOX || verbs_name_starts(dev->name, "mlx5_") ||
        verbs_name_starts(dev->name, "mlx4_")) {
        return VERBS_DEV_CONNECTX;
    }
    return VERBS_DEV_OTHER_RC;
}

/* The first active port of dev, or 0. */
static int verbs_dev_first_active(const verbs_dev_info_t *dev)
{
    for (int i = 0; i < dev->num_ports && i < VERBS_MAX_PORTS; ++i) {
        if (dev->active[i]) {
            return i + 1;
        }
    }
    return 0;
}

static const char *verbs_link_name(uint8_t link_layer)
{
    return link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand";
}

int verbs_dev_score(const verbs_dev_info_t *dev, char *why, size_t why_len)
{
    verbs_dev_class_t cls = verbs_dev_classify(dev);
    int port = verbs_dev_first_active(dev);

    if (!dev->opened) {
        snprintf(why, why_len, "%s could not be opened or queried", dev->name);
        return INTER_PROBE_NONE;
    }
    if (cls == VERBS_DEV_EFA) {
        snprintf(why, why_len, "%s is an EFA device, which has no RC queue pairs (the ofi "
                 "transport drives it)", dev->name);
        return INTER_PROBE_NONE;
    }
    if (cls == VERBS_DEV_NO_RC) {
        snprintf(why, why_len, "%s is not an InfiniBand or RoCE device (transport type %d)",
                 dev->name, dev->transport);
        return INTER_PROBE_NONE;
    }
    if (port == 0) {
        snprintf(why, why_len, "%s has no active port", dev->name);
        return INTER_PROBE_NONE;
    }
    if (cls == VERBS_DEV_CONNECTX) {
        snprintf(why, why_len, "ConnectX %s port %d is active (%s, vendor 0x%04x)", dev->name,
                 port, verbs_link_name(dev->link_layer[port - 1]), dev->vendor_id);
        return INTER_PROBE_NATIVE;
    }
    snprintf(why, why_len, "%s port %d is active (%s, vendor 0x%04x): RC verbs, not a "
             "ConnectX", dev->name, port, verbs_link_name(dev->link_layer[port - 1]),
             dev->vendor_id);
    return INTER_PROBE_FALLBACK;
}

/* "a, b, c" of every device's name into buf. */
static void verbs_list_names(const verbs_dev_info_t *devs, int num_devs, char *buf,
                             size_t len)
{
    size_t used = 0;

    buf[0] = '\0';
    for (int i = 0; i < num_devs && used < len; ++i) {
        int n = snprintf(buf + used, len - used, "%s%s", i ? ", " : "", devs[i].name);

        used += n > 0 ? (size_t)n : 0;
    }
}

/* The best-scoring device with an active port (the first on ties), or -1. */
static int verbs_best_device(const verbs_dev_info_t *devs, int num_devs)
{
    int best = -1, best_score = INTER_PROBE_NONE;
    char why[160];

    for (int i = 0; i < num_devs; ++i) {
        int score = verbs_dev_score(&devs[i], why, sizeof(why));

        if (score > best_score) {
            best       = i;
            best_score = score;
        }
    }
    return best;
}

void verbs_no_device_line(int err, char *msg, size_t msg_len)
{
    (void)err; /* ENOSYS (no kernel support) and an empty list read the same to a user */
    snprintf(msg, msg_len, "no RDMA device (ibv_get_device_list found none)");
}

/* The port of the named device (its first active one where none is named). */
static strata_status_t verbs_select_port(const verbs_dev_info_t *dev,
                                         const verbs_dev_spec_t *spec, int *port_p, char *msg,
                                         size_t msg_len)
{
    verbs_dev_class_t cls = verbs_dev_classify(dev);
    char why[160];

    if (!dev->opened || cls == VERBS_DEV_EFA || cls == VERBS_DEV_NO_RC) {
        verbs_dev_score(dev, why, sizeof(why));
        snprintf(msg, msg_len, "RDMA device '%s' cannot carry the verbs transport: %s",
                 spec->name, why);
        return STRATA_ERR_CONFIG;
    }
    if (spec->port == 0) {
        *port_p = verbs_dev_first_active(dev);
        if (*port_p == 0) {
            snprintf(msg, msg_len, "RDMA device '%s' has no active port", spec->name);
            return STRATA_ERR_CONFIG;
        }
    } else if (spec->port > dev->num_ports) {
        snprintf(msg, msg_len, "RDMA device '%s' has no port %d (ports 1 to %d)", spec->name,
                 spec->port, dev->num_ports);
        return STRATA_ERR_CONFIG;
    } else if (!dev->active[spec->port - 1]) {
        snprintf(msg, msg_len, "port %d of RDMA device '%s' is not active", spec->port,
                 spec->name);
        return STRATA_ERR_CONFIG;
    } else {
        *port_p = spec->port;
    }
    snprintf(msg, msg_len, "%s port %d", dev->name, *port_p);
    return STRATA_OK;
}

strata_status_t verbs_select_device(const verbs_dev_info_t *devs, int num_devs,
                                    const verbs_dev_spec_t *spec, bool required, int *index_p,
                                    int *port_p, bool *fallback_p, char *msg, size_t msg_len)
{
    char names[256], why[160];
    int best;

    *fallback_p = false;
    verbs_list_names(devs, num_devs, names, sizeof(names));
    for (int i = 0; spec->name[0] != '\0' && i < num_devs; ++i) {
        if (strcmp(devs[i].name, spec->name) == 0) {
            *index_p = i;
            return verbs_select_port(&devs[i], spec, port_p, msg, msg_len);
        }
    }
    if (num_devs == 0) {
        verbs_no_device_line(0, why, sizeof(why));
        if (spec->name[0] != '\0') {
            snprintf(msg, msg_len, "no RDMA device '%s': %s", spec->name, why);
            return STRATA_ERR_CONFIG;
        }
        snprintf(msg, msg_len, "%s", why);
        return STRATA_ERR_UNSUPPORTED;
    }
    if (spec->name[0] != '\0' && required) {
        snprintf(msg, msg_len, "no RDMA device '%s'; devices present: %s", spec->name, names);
        return STRATA_ERR_CONFIG;
    }
    best = verbs_best_device(devs, num_devs);
    if (best < 0) {
        snprintf(msg, msg_len, "no RDMA device here can carry the verbs transport (an active "
                 "InfiniBand or RoCE port); devices present: %s", names);
        return spec->name[0] != '\0' ? STRATA_ERR_CONFIG : STRATA_ERR_UNSUPPORTED;
    }
    *index_p    = best;
    *port_p     = verbs_dev_first_active(&devs[best]);
    *fallback_p = spec->name[0] != '\0';
    if (*fallback_p) {
        snprintf(msg, msg_len, "no RDMA device '%s' (devices present: %s); using %s port %d",
                 spec->name, names, devs[best].name, *port_p);
    } else {
        snprintf(msg, msg_len, "%s port %d", devs[best].name, *port_p);
    }
    return STRATA_OK;
}

static bool verbs_gid_is_ipv4(const uint8_t *raw)
{
    static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

    return memcmp(raw, prefix, sizeof(prefix)) == 0;
}

int verbs_select_gid(const verbs_gid_info_t *gids, int num_gids, int wanted)
{
    int v2 = -1, v1 = -1;

    for (int i = 0; i < num_gids; ++i) {
        const verbs_gid_info_t *gid = &gids[i];

        if (wanted >= 0) {
            if (gid->index == (uint32_t)wanted) {
                return wanted;
            }
            continue;
        }
        if (gid->type == IBV_GID_TYPE_ROCE_V2 && verbs_gid_is_ipv4(gid->raw)) {
            return (int)gid->index; /* routable, and what RoCE fabrics are set up for */
        }
        if (gid->type == IBV_GID_TYPE_ROCE_V2 && v2 < 0) {
            v2 = (int)gid->index;
        } else if (gid->type == IBV_GID_TYPE_ROCE_V1 && v1 < 0) {
            v1 = (int)gid->index;
        }
    }
    return v2 >= 0 ? v2 : v1;
}

enum ibv_mtu verbs_path_mtu(enum ibv_mtu local, enum ibv_mtu remote)
{
    return local < remote ? local : remote;
}
