/*
 * What the UCX transport sees and asks of UCX: its network devices and transports, the
 * UCX_TLS and UCX_NET_DEVICES a rail's context is created with, and the name a rail takes
 * from the lanes its endpoints use. Opening and closing are ucx_transport.c.
 */
#include "inter/ucx/ucx_internal.h"

#include <uct/api/uct.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The shared-memory transports of UCX (its "shm" alias, ucp_context.c) and names that
 * include them. */
static const char *const ucx_shm_names[] = {"posix", "sysv", "xpmem", "knem", "cma", "mm",
                                            "sm",    "shm",  "all"};

/* Append name to a comma-separated list unless it is there. */
static void ucx_list_add(char *list, size_t size, const char *name)
{
    size_t len = strlen(name), used = strlen(list);

    for (const char *p = list; (p = strstr(p, name)) != NULL; p += len) {
        if ((p == list || p[-1] == ',') && (p[len] == ',' || p[len] == '\0')) {
            return;
        }
    }
    if (used + len + 2 <= size) {
        snprintf(list + used, size - used, "%s%s", used ? "," : "", name);
    }
}

/* UCX's network devices (uct's resources of type NET), comma-separated. */
static void ucx_net_devices(char *list, size_t size)
{
    uct_component_h *components;
    unsigned num_components;

    list[0] = '\0';
    if (uct_query_components(&components, &num_components) != UCS_OK) {
        return;
    }
    for (unsigned c = 0; c < num_components; ++c) {
        uct_component_attr_t attr = {.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT};

        if (uct_component_query(components[c], &attr) != UCS_OK || attr.md_resource_count == 0) {
            continue;
        }
        uct_md_resource_desc_t mds[attr.md_resource_count];

        attr.field_mask   = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
        attr.md_resources = mds;
        if (uct_component_query(components[c], &attr) != UCS_OK) {
            continue;
        }
        for (unsigned m = 0; m < attr.md_resource_count; ++m) {
            uct_tl_resource_desc_t *tls;
            uct_md_config_t *md_config;
            unsigned num_tls;
            uct_md_h md;

            if (uct_md_config_read(components[c], NULL, NULL, &md_config) != UCS_OK) {
                continue;
            }
            if (uct_md_open(components[c], mds[m].md_name, md_config, &md) == UCS_OK) {
                if (uct_md_query_tl_resources(md, &tls, &num_tls) == UCS_OK) {
                    for (unsigned t = 0; t < num_tls; ++t) {
                        if (tls[t].dev_type == UCT_DEVICE_TYPE_NET) {
                            ucx_list_add(list, size, tls[t].dev_name);
                        }
                    }
                    uct_release_tl_resource_list(tls);
                }
                uct_md_close(md);
            }
            uct_config_release(md_config);
        }
    }
    uct_release_component_list(components);
}

/*
 * The devices iface names (comma-separated; "mlx5_0" also names "mlx5_0:1") among UCX's
 * network devices, into net_devices; false when one is not there.
 */
static bool ucx_match_devices(const char *iface, const char *devices, char *net_devices,
                              size_t size, char *missing, size_t missing_size)
{
    char want[256], have[1024], *save_w = NULL, *save_h = NULL;

    net_devices[0] = '\0';
    snprintf(want, sizeof(want), "%s", iface);
    for (char *w = strtok_r(want, ",", &save_w); w != NULL; w = strtok_r(NULL, ",", &save_w)) {
        size_t len = strlen(w);
        bool found = false;

        snprintf(have, sizeof(have), "%s", devices);
        for (char *h = strtok_r(have, ",", &save_h); h != NULL; h = strtok_r(NULL, ",", &save_h)) {
            if (strcmp(h, w) == 0 || (strncmp(h, w, len) == 0 && h[len] == ':')) {
                ucx_list_add(net_devices, size, h);
                found = true;
            }
        }
        if (!found) {
            snprintf(missing, missing_size, "%s", w);
            return false;
        }
    }
    return true;
}

/* The transports and network devices of a context, from ucp_context_print_info's
 * "resource" lines ("... -- tcp/eth0"), without UCX's loopback "self". */
void ucx_context_resources(ucp_context_h context, char *tls, size_t tls_size,
                           char *devices, size_t devices_size)
{
    char *text = NULL, *save = NULL, name[64], dev[64];
    size_t text_len = 0;
    FILE *stream = open_memstream(&text, &text_len);

    tls[0] = devices[0] = '\0';
    if (stream == NULL) {
        return;
    }
    ucp_context_print_info(context, stream);
    fclose(stream);
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        const char *res = strstr(line, "resource"), *arrow = strstr(line, "-- ");

        if (res == NULL || arrow == NULL || sscanf(arrow + 3, "%63[^/]/%63s", name, dev) != 2 ||
            strcmp(name, "self") == 0) {
            continue;
        }
        ucx_list_add(tls, tls_size, name);
        if (strncmp(dev, "memory", 6) != 0) {
            ucx_list_add(devices, devices_size, dev);
        }
    }
    free(text);
}

/*
 * Add what an endpoint's lanes use ("lane[0]:  2:tcp/lo.0 md[1] -> ...") to the rail's
 * name: with peer failure handling UCX 1.13 leaves out transports that cannot detect a dead
 * peer (its posix and sysv shared memory), so the context's list would overstate.
 */
void ucx_name_from_lanes(ucx_transport_t *ucx, ucp_ep_h ep)
{
    char *text = NULL, *save = NULL, tl[64], dev[64];
    size_t text_len = 0;
    FILE *stream = open_memstream(&text, &text_len);

    if (stream == NULL) {
        return;
    }
    ucp_ep_print_info(ep, stream);
    fclose(stream);
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        const char *lane = strstr(line, "lane["), *colon = lane ? strchr(lane, ':') : NULL;
        char *dot;

        if (colon == NULL || sscanf(colon + 1, " %*d:%63[^/]/%63s", tl, dev) != 2 ||
            strcmp(tl, "self") == 0) {
            continue;
        }
        if ((dot = strrchr(dev, '.')) != NULL) {
            *dot = '\0'; /* "lo.0": the device's path index */
        }
        ucx_list_add(ucx->lane_tls, sizeof(ucx->lane_tls), tl);
        if (strncmp(dev, "memory", 6) != 0) {
            ucx_list_add(ucx->lane_devices, sizeof(ucx->lane_devices), dev);
        }
    }
    free(text);
    if (ucx->lane_tls[0] != '\0') {
        char name[sizeof(ucx->base.name)];

        snprintf(name, sizeof(name), "ucx %s %s", ucx->lane_tls,
                 ucx->lane_devices[0] ? ucx->lane_devices : "-");
        if (strcmp(name, ucx->base.name) != 0) {
            UTIL_LOG_INFO("rail %d: the endpoints to peers use %s", ucx->rail, name + 4);
            snprintf(ucx->base.name, sizeof(ucx->base.name), "%s", name);
        }
    }
}

bool ucx_names_shared_memory(const char *tls)
{
    char copy[256], *save = NULL;

    if (tls[0] == '^') {
        return false; /* a list of exclusions */
    }
    snprintf(copy, sizeof(copy), "%s", tls);
    for (char *t = strtok_r(copy, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        for (size_t i = 0; i < UTIL_ARRAY_SIZE(ucx_shm_names); ++i) {
            if (strncmp(t, ucx_shm_names[i], strlen(ucx_shm_names[i])) == 0) {
                return true;
            }
        }
    }
    return false;
}

/* UCX_TLS and UCX_NET_DEVICES for the rail: from STRATA_UCX_TLS, the shared-memory setting
 * and the device asked for (checked against what UCX sees). */
static strata_status_t ucx_choose(const inter_transport_params_t *params,
                                  const ucx_config_t *config, const char **tls_p,
                                  char *net_devices, size_t size)
{
    char devices[512], missing[128] = "";
    const char *iface = params->iface ? params->iface : "";

    *tls_p = config->tls;
    if (!params->shared_memory) {
        if (ucx_names_shared_memory(config->tls)) {
            UTIL_LOG_ERROR("ucx: STRATA_INTER_SHARED_MEMORY=no, but STRATA_UCX_TLS='%s' names "
                           "shared-memory transports", config->tls);
            return STRATA_ERR_CONFIG;
        }
        *tls_p = config->tls[0] ? config->tls : "^shm";
    }
    net_devices[0] = '\0';
    if (iface[0] == '\0') {
        return STRATA_OK;
    }
    ucx_net_devices(devices, sizeof(devices));
    if (ucx_match_devices(iface, devices, net_devices, size, missing, sizeof(missing))) {
        return STRATA_OK;
    }
    if (params->required) {
        UTIL_LOG_ERROR("ucx: rail %d: no network device '%s'; UCX sees: %s", params->rail,
                       missing, devices[0] ? devices : "none");
        return STRATA_ERR_CONFIG;
    }
    UTIL_LOG_WARN("ucx: rail %d: no network device '%s' (from the rail plan); UCX sees %s, "
                  "so the rail uses UCX's default devices", params->rail, missing,
                  devices[0] ? devices : "none");
    net_devices[0] = '\0';
    return STRATA_OK;
}

strata_status_t ucx_context_create(const inter_transport_params_t *params,
                                   const ucx_config_t *config, ucp_context_h *context_p)
{
    ucp_params_t ucp_params = {
        .field_mask        = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                             UCP_PARAM_FIELD_ESTIMATED_NUM_EPS,
        .features          = UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_AM,
        .mt_workers_shared = 1, /* registration from any thread beside the proxy */
        .estimated_num_eps = (size_t)UTIL_MAX(params->world_size, 1),
    };
    char net_devices[256];
    ucp_config_t *ucp_config;
    const char *tls;
    strata_status_t status = ucx_choose(params, config, &tls, net_devices, sizeof(net_devices));
    ucs_status_t ucs;

    if (status != STRATA_OK) {
        return status;
    }
    ucs = ucp_config_read(NULL, NULL, &ucp_config);
    if (ucs == UCS_OK && tls[0] != '\0') {
        ucs = ucp_config_modify(ucp_config, "TLS", tls);
    }
    if (ucs == UCS_OK && net_devices[0] != '\0') {
        ucs = ucp_config_modify(ucp_config, "NET_DEVICES", net_devices);
    }
    if (ucs == UCS_OK) {
        ucs = ucp_init(&ucp_params, ucp_config, context_p);
    }
    if (ucp_config != NULL) {
        ucp_config_release(ucp_config);
    }
    if (ucs != UCS_OK) {
        UTIL_LOG_ERROR("ucx: rail %d: ucp_init with TLS '%s', devices '%s': %s", params->rail,
                       tls[0] ? tls : "(UCX's default)",
                       net_devices[0] ? net_devices : "(UCX's default)", ucs_status_string(ucs));
        return ucs == UCS_ERR_NO_DEVICE ? STRATA_ERR_UNSUPPORTED : STRATA_ERR_TRANSPORT;
    }
    return STRATA_OK;
}
