/*
 * Choosing among what fi_getinfo offers (ofi_select.h): pure functions over fi_info lists.
 */
#include "inter/ofi/ofi_select.h"
#include "util/util.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

strata_status_t ofi_select_api_version(uint32_t headers, uint32_t library, uint32_t *version_p)
{
    uint32_t version = UTIL_MIN(headers, library);

    if (version < OFI_MIN_VERSION) {
        UTIL_LOG_ERROR("ofi: libfabric %u.%u (headers %u.%u, library %u.%u) is older than the "
                       "%u.%u the engine needs (fi_mr_attr.iface)", FI_MAJOR(version),
                       FI_MINOR(version), FI_MAJOR(headers), FI_MINOR(headers),
                       FI_MAJOR(library), FI_MINOR(library), FI_MAJOR(OFI_MIN_VERSION),
                       FI_MINOR(OFI_MIN_VERSION));
        return STRATA_ERR_UNSUPPORTED;
    }
    *version_p = version;
    return STRATA_OK;
}

const char *ofi_select_provider_name(const char *provider)
{
    if (strcmp(provider, "tcp") == 0) {
        return "tcp;ofi_rxm";
    }
    if (strcmp(provider, "verbs") == 0) {
        return "verbs;ofi_rxm";
    }
    return provider; /* "shm", "efa", or a libfabric name given as is */
}

/* Providers that offer several fabrics under one name, and the one the engine can use. */
static const struct {
    const char *prov_name;
    const char *fabric;
} ofi_named_fabrics[] = {
    /* efa-direct (listed first) sends no more than the MTU and does no emulation. */
    {.prov_name = "efa", .fabric = "efa"},
};

const char *ofi_select_fabric_name(const char *prov_name)
{
    for (size_t i = 0; i < UTIL_ARRAY_SIZE(ofi_named_fabrics); ++i) {
        if (strcasecmp(prov_name, ofi_named_fabrics[i].prov_name) == 0) {
            return ofi_named_fabrics[i].fabric;
        }
    }
    return NULL;
}

/* Length of the first ';'-separated layer of name. */
static size_t ofi_layer_length(const char *name)
{
    const char *end = strchr(name, ';');

    return end ? (size_t)(end - name) : strlen(name);
}

/* The same layers, in the same order, compared without case (as libfabric compares). */
static bool ofi_same_layers(const char *a, const char *b)
{
    for (;;) {
        size_t la = ofi_layer_length(a), lb = ofi_layer_length(b);

        if (la != lb || strncasecmp(a, b, la) != 0) {
            return false;
        }
        if (a[la] == '\0' || b[lb] == '\0') {
            return a[la] == b[lb];
        }
        a += la + 1;
        b += lb + 1;
    }
}

/* A fabric named "<core>-<variant>" is another fabric of the core provider (efa-direct). */
static bool ofi_is_variant_fabric(const struct fi_info *info, const char *prov_name)
{
    const char *fabric = info->fabric_attr ? info->fabric_attr->name : NULL;
    size_t core = ofi_layer_length(prov_name);

    return fabric != NULL && strncasecmp(fabric, prov_name, core) == 0 && fabric[core] == '-';
}

bool ofi_select_is_provider(const struct fi_info *info, const char *prov_name)
{
    const char *named_fabric = ofi_select_fabric_name(prov_name);
    const char *fabric;

    if (info->fabric_attr == NULL || info->fabric_attr->prov_name == NULL ||
        !ofi_same_layers(info->fabric_attr->prov_name, prov_name) ||
        ofi_is_variant_fabric(info, prov_name)) {
        return false;
    }
    fabric = info->fabric_attr->name;
    return named_fabric == NULL || (fabric != NULL && strcasecmp(fabric, named_fabric) == 0);
}

static const char *ofi_nic_name(const struct fi_info *info)
{
    return (info->nic && info->nic->device_attr) ? info->nic->device_attr->name : NULL;
}

bool ofi_select_is_device(const struct fi_info *info, const char *device)
{
    const char *domain = info->domain_attr ? info->domain_attr->name : NULL;
    const char *nic = ofi_nic_name(info);

    return (domain != NULL && strcmp(domain, device) == 0) ||
           (nic != NULL && strcmp(nic, device) == 0);
}

static bool ofi_usable(const struct fi_info *info, const char *prov_name)
{
    /* Reliable datagrams, and the immediate is 32 bits of remote CQ data. */
    return info->ep_attr != NULL && info->ep_attr->type == FI_EP_RDM &&
           info->domain_attr != NULL && info->domain_attr->cq_data_size >= sizeof(uint32_t) &&
           ofi_select_is_provider(info, prov_name);
}

/* Preference among entries when no device is named: off loopback first, then IPv4. */
static int ofi_default_rank(const struct fi_info *info)
{
    const char *domain = info->domain_attr->name ? info->domain_attr->name : "";

    return (strcmp(domain, "lo") == 0 ? 2 : 0) + (info->addr_format == FI_SOCKADDR_IN ? 0 : 1);
}

ofi_pick_t ofi_select_pick(struct fi_info *list, const char *prov_name, const char *device,
                           bool required, struct fi_info **pick_p)
{
    bool named = device != NULL && device[0] != '\0';
    struct fi_info *best = NULL;

    for (struct fi_info *cur = list; cur != NULL; cur = cur->next) {
        if (!ofi_usable(cur, prov_name)) {
            continue;
        }
        if (named && ofi_select_is_device(cur, device)) {
            *pick_p = cur;
            return OFI_PICK_DEVICE;
        }
        if (best == NULL || ofi_default_rank(cur) < ofi_default_rank(best)) {
            best = cur;
        }
    }
    if (best == NULL || (named && required)) {
        return OFI_PICK_NONE;
    }
    *pick_p = best;
    return named ? OFI_PICK_FALLBACK : OFI_PICK_DEFAULT;
}

void ofi_select_devices(const struct fi_info *list, const char *prov_name, char *buf,
                        size_t size)
{
    size_t used = 0;

    if (size == 0) {
        return;
    }
    buf[0] = '\0';
    for (const struct fi_info *cur = list; cur != NULL && used < size; cur = cur->next) {
        const char *name = ofi_nic_name(cur);

        if (!ofi_usable(cur, prov_name)) {
            continue;
        }
        name = name ? name : cur->domain_attr->name;
        if (name != NULL && strstr(buf, name) == NULL) { /* once each, as NICs repeat */
            int n = snprintf(buf + used, size - used, "%s%s", used ? ", " : "", name);

            used += n > 0 ? (size_t)n : 0;
        }
    }
}

void ofi_select_limits(const struct fi_info *info, ofi_limits_t *limits_p)
{
    /* ep_attr->max_msg_size bounds every transfer; fi_getopt may refine it per kind. */
    limits_p->max_msg_size = info->ep_attr->max_msg_size;
    limits_p->max_rma_size = info->ep_attr->max_msg_size;
    limits_p->inject_size  = info->tx_attr->inject_size;
}

strata_status_t ofi_select_check_limits(const ofi_limits_t *limits, size_t msg_bytes,
                                        const char *what)
{
    if (limits->max_msg_size < msg_bytes) {
        UTIL_LOG_ERROR("ofi: %s sends messages of at most %llu bytes, but the engine's reach "
                       "%zu (STRATA_INTER_MSG_SIZE plus a header): lower STRATA_INTER_MSG_SIZE "
                       "below %llu, or choose another provider", what,
                       (unsigned long long)limits->max_msg_size, msg_bytes,
                       (unsigned long long)limits->max_msg_size);
        return STRATA_ERR_UNSUPPORTED;
    }
    return STRATA_OK;
}
