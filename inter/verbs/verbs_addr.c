/*
 * The verbs transport's address blob: one rank's port path and the QPN it set aside for
 * each rank, in network byte order so that ranks of any endianness read it alike.
 */
#include "inter/verbs/verbs.h"

#include <arpa/inet.h>
#include <string.h>

#define VERBS_ADDR_VERSION 1u

/* Offsets of the header's fields (VERBS_ADDR_HEADER bytes). */
enum {
    VERBS_OFF_MAGIC   = 0,
    VERBS_OFF_OWNER   = 4,
    VERBS_OFF_WORLD   = 8,
    VERBS_OFF_PSN     = 12,
    VERBS_OFF_LID     = 16,
    VERBS_OFF_LINK    = 18,
    VERBS_OFF_PORT    = 19,
    VERBS_OFF_MTU     = 20,
    VERBS_OFF_GID     = 24,
    VERBS_OFF_VERSION = 40,
};

static void verbs_put32(uint8_t *p, uint32_t value)
{
    value = htonl(value);
    memcpy(p, &value, sizeof(value));
}

static uint32_t verbs_get32(const uint8_t *p)
{
    uint32_t value;

    memcpy(&value, p, sizeof(value));
    return ntohl(value);
}

size_t verbs_addr_size(int world)
{
    return VERBS_ADDR_HEADER + 4u * (size_t)(world > 0 ? world : 0);
}

void verbs_addr_encode(const verbs_addr_t *addr, const uint32_t *qpns, void *buf)
{
    uint8_t *p = buf;
    uint16_t lid = htons(addr->lid);

    memset(p, 0, VERBS_ADDR_HEADER);
    verbs_put32(p + VERBS_OFF_MAGIC, VERBS_ADDR_MAGIC);
    verbs_put32(p + VERBS_OFF_OWNER, addr->owner);
    verbs_put32(p + VERBS_OFF_WORLD, addr->world);
    verbs_put32(p + VERBS_OFF_PSN, addr->psn & 0xffffffu);
    memcpy(p + VERBS_OFF_LID, &lid, sizeof(lid));
    p[VERBS_OFF_LINK] = addr->link_layer;
    p[VERBS_OFF_PORT] = addr->port;
    p[VERBS_OFF_MTU]  = addr->mtu;
    memcpy(p + VERBS_OFF_GID, addr->gid, sizeof(addr->gid));
    verbs_put32(p + VERBS_OFF_VERSION, VERBS_ADDR_VERSION);
    for (uint32_t i = 0; i < addr->world; ++i) {
        verbs_put32(p + VERBS_ADDR_HEADER + 4u * i, qpns[i] & 0xffffffu);
    }
}

strata_status_t verbs_addr_decode(const void *buf, size_t len, verbs_addr_t *addr_p)
{
    const uint8_t *p = buf;
    verbs_addr_t addr;
    uint16_t lid;

    if (buf == NULL || len < VERBS_ADDR_HEADER) {
        UTIL_LOG_ERROR("verbs: a peer address of %zu bytes is shorter than its %d-byte header",
                       len, VERBS_ADDR_HEADER);
        return STRATA_ERR_INVALID;
    }
    if (verbs_get32(p + VERBS_OFF_MAGIC) != VERBS_ADDR_MAGIC ||
        verbs_get32(p + VERBS_OFF_VERSION) != VERBS_ADDR_VERSION) {
        UTIL_LOG_ERROR("verbs: a peer address is not a verbs address of version %u (magic "
                       "0x%08x, version %u): does every rank use the verbs transport?",
                       VERBS_ADDR_VERSION, verbs_get32(p + VERBS_OFF_MAGIC),
                       verbs_get32(p + VERBS_OFF_VERSION));
        return STRATA_ERR_INVALID;
    }
    memset(&addr, 0, sizeof(addr));
    addr.owner      = verbs_get32(p + VERBS_OFF_OWNER);
    addr.world      = verbs_get32(p + VERBS_OFF_WORLD);
    addr.psn        = verbs_get32(p + VERBS_OFF_PSN);
    memcpy(&lid, p + VERBS_OFF_LID, sizeof(lid));
    addr.lid        = ntohs(lid);
    addr.link_layer = p[VERBS_OFF_LINK];
    addr.port       = p[VERBS_OFF_PORT];
    addr.mtu        = p[VERBS_OFF_MTU];
    memcpy(addr.gid, p + VERBS_OFF_GID, sizeof(addr.gid));
    if (addr.world == 0 || addr.world > (INTER_ADDR_MAX - VERBS_ADDR_HEADER) / 4u ||
        addr.owner >= addr.world || len < verbs_addr_size((int)addr.world)) {
        UTIL_LOG_ERROR("verbs: a peer address of %zu bytes claims rank %u of %u ranks, "
                       "which takes %zu bytes", len, addr.owner, addr.world,
                       (size_t)VERBS_ADDR_HEADER + 4u * (size_t)addr.world);
        return STRATA_ERR_INVALID;
    }
    if (addr.mtu < IBV_MTU_256 || addr.mtu > IBV_MTU_4096 ||
        (addr.link_layer != IBV_LINK_LAYER_INFINIBAND &&
         addr.link_layer != IBV_LINK_LAYER_ETHERNET)) {
        UTIL_LOG_ERROR("verbs: rank %u's address has MTU code %u and link layer %u, not "
                       "an InfiniBand or RoCE port's", addr.owner, addr.mtu, addr.link_layer);
        return STRATA_ERR_INVALID;
    }
    *addr_p = addr;
    return STRATA_OK;
}

uint32_t verbs_addr_qpn(const void *buf, const verbs_addr_t *addr, int rank)
{
    if (rank < 0 || (uint32_t)rank >= addr->world) {
        return 0;
    }
    return verbs_get32((const uint8_t *)buf + VERBS_ADDR_HEADER + 4u * (uint32_t)rank);
}
