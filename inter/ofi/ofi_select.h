/*
 * Choosing what libfabric offers: the API version to ask for, the entries that are exactly
 * the provider asked for (never a variant fabric such as efa-direct), the entry of a rail's
 * device, and whether an entry's limits carry the engine's messages. Pure functions over
 * fi_info lists, so that captured descriptions of real nodes test them (tests/inter).
 */
#ifndef STRATA_INTER_OFI_SELECT_H
#define STRATA_INTER_OFI_SELECT_H

#include <strata/strata.h>

#include <rdma/fabric.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* 1.10: the first API whose fi_mr_attr carries the memory's iface (FI_HMEM). */
#define OFI_MIN_VERSION     FI_VERSION(1, 10)
/* The libfabric these headers describe; options newer than it are compiled out. */
#define OFI_HEADERS_VERSION FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION)

/**
 * The API version to ask fi_getinfo for: the highest that both the headers compiled in
 * and the library loaded know (the efa provider keeps device RDMA off below 1.18).
 * STRATA_ERR_UNSUPPORTED, logged, when that is below OFI_MIN_VERSION.
 */
strata_status_t ofi_select_api_version(uint32_t headers, uint32_t library, uint32_t *version_p);

/** libfabric's name for strata's provider setting: "tcp" is "tcp;ofi_rxm", "verbs" is
 *  "verbs;ofi_rxm"; any other name is libfabric's already. */
const char *ofi_select_provider_name(const char *provider);

/**
 * The fabric to name in the hints where a provider offers several under one provider name
 * (efa: "efa", not "efa-direct", whose sends stop at the MTU); NULL where any will do.
 */
const char *ofi_select_fabric_name(const char *prov_name);

/**
 * Whether info belongs to prov_name exactly: the same ';'-separated provider layers
 * ("tcp;ofi_rxm"), compared without case as libfabric does, and not a variant fabric of
 * the core provider ("efa-direct" under prov_name "efa").
 */
bool ofi_select_is_provider(const struct fi_info *info, const char *prov_name);

/** Whether info is on device: its domain's name or its NIC's device name (EFA domains are
 *  "<device>-rdm" and "<device>-dgrm"; the device is what topology and users name). */
bool ofi_select_is_device(const struct fi_info *info, const char *device);

typedef enum ofi_pick {
    OFI_PICK_DEVICE,   /**< the entry of the device asked for */
    OFI_PICK_DEFAULT,  /**< no device asked for: the preferred entry */
    OFI_PICK_FALLBACK, /**< the device is not offered: the preferred entry instead */
    OFI_PICK_NONE      /**< nothing usable, or the device was required and is not offered */
} ofi_pick_t;

/**
 * The entry of list to open for prov_name on device (NULL or "": any), among the RDM
 * entries of that provider exactly that carry a 32-bit immediate. The preferred entry is off
 * loopback, then IPv4, then first listed. *pick_p is set unless OFI_PICK_NONE.
 */
ofi_pick_t ofi_select_pick(struct fi_info *list, const char *prov_name, const char *device,
                           bool required, struct fi_info **pick_p);

/** The devices of prov_name in list, comma-separated into buf (for messages). */
void ofi_select_devices(const struct fi_info *list, const char *prov_name, char *buf,
                        size_t size);

/** What an endpoint can carry, from its fi_info and, where offered, fi_getopt. */
typedef struct ofi_limits {
    uint64_t max_msg_size; /**< largest send */
    uint64_t max_rma_size; /**< largest write or read */
    size_t   inject_size;  /**< largest send without a completion */
} ofi_limits_t;

/** The limits info advertises (ep_attr->max_msg_size for both sends and RMA). */
void ofi_select_limits(const struct fi_info *info, ofi_limits_t *limits_p);

/**
 * Whether an endpoint with these limits carries the engine's messages of msg_bytes
 * (header included): STRATA_OK, or STRATA_ERR_UNSUPPORTED with one log line naming the
 * provider (what), both sizes and the setting to lower.
 */
strata_status_t ofi_select_check_limits(const ofi_limits_t *limits, size_t msg_bytes,
                                        const char *what);

#endif
