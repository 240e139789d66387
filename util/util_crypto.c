/*
 * SHA-256 and HMAC-SHA256 written from FIPS 180-4 and RFC 2104, checked against their test
 * vectors (tests/util/test_crypto.c); constant-time comparison; getrandom.
 */
#include "util_crypto.h"
#include "util_log.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

static const uint32_t util_sha256_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2,
};

static uint32_t util_rotr(uint32_t x, int n)
{
    return (x >> n) | (x << (32 - n));
}

static void util_sha256_block(util_sha256_t *ctx, const unsigned char *p)
{
    uint32_t w[64], s[8], t1, t2;

    for (int i = 0; i < 16; ++i) {
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
    }
    for (int i = 16; i < 64; ++i) {
        uint32_t s0 = util_rotr(w[i - 15], 7) ^ util_rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = util_rotr(w[i - 2], 17) ^ util_rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);

        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    memcpy(s, ctx->state, sizeof(s));
    for (int i = 0; i < 64; ++i) {
        t1 = s[7] + (util_rotr(s[4], 6) ^ util_rotr(s[4], 11) ^ util_rotr(s[4], 25)) +
             ((s[4] & s[5]) ^ (~s[4] & s[6])) + util_sha256_k[i] + w[i];
        t2 = (util_rotr(s[0], 2) ^ util_rotr(s[0], 13) ^ util_rotr(s[0], 22)) +
             ((s[0] & s[1]) ^ (s[0] & s[2]) ^ (s[1] & s[2]));
        memmove(&s[1], &s[0], 7 * sizeof(s[0]));
        s[4] += t1;
        s[0] = t1 + t2;
    }
    for (int i = 0; i < 8; ++i) {
        ctx->state[i] += s[i];
    }
}

void util_sha256_init(util_sha256_t *ctx)
{
    static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

    memcpy(ctx->state, h0, sizeof(h0));
    ctx->bytes = 0;
}

void util_sha256_update(util_sha256_t *ctx, const void *data, size_t len)
{
    const unsigned char *p = data;
    size_t used = (size_t)(ctx->bytes % UTIL_SHA256_BLOCK_LEN), take;

    ctx->bytes += len;
    while (len > 0) {
        take = UTIL_SHA256_BLOCK_LEN - used;
        if (used == 0 && len >= UTIL_SHA256_BLOCK_LEN) {
            util_sha256_block(ctx, p); /* whole blocks straight from the input */
            take = UTIL_SHA256_BLOCK_LEN;
        } else {
            take = take < len ? take : len;
            memcpy(ctx->block + used, p, take);
            used += take;
            if (used == UTIL_SHA256_BLOCK_LEN) {
                util_sha256_block(ctx, ctx->block);
                used = 0;
            }
        }
        p += take;
        len -= take;
    }
}

void util_sha256_final(util_sha256_t *ctx, unsigned char digest[UTIL_SHA256_LEN])
{
    static const unsigned char pad[UTIL_SHA256_BLOCK_LEN] = {0x80};
    uint64_t bits = ctx->bytes * 8;
    size_t used = (size_t)(ctx->bytes % UTIL_SHA256_BLOCK_LEN);
    unsigned char length[8];

    for (int i = 0; i < 8; ++i) {
        length[i] = (unsigned char)(bits >> (56 - 8 * i));
    }
    /* 0x80, zeros up to 56 mod 64, then the length in bits, big-endian */
    util_sha256_update(ctx, pad, used < 56 ? 56 - used : 120 - used);
    util_sha256_update(ctx, length, sizeof(length));
    for (int i = 0; i < 8; ++i) {
        digest[4 * i]     = (unsigned char)(ctx->state[i] >> 24);
        digest[4 * i + 1] = (unsigned char)(ctx->state[i] >> 16);
        digest[4 * i + 2] = (unsigned char)(ctx->state[i] >> 8);
        digest[4 * i + 3] = (unsigned char)ctx->state[i];
    }
    util_crypto_wipe(ctx, sizeof(*ctx));
}

void util_hmac_sha256(const void *key, size_t key_len, const void *const *parts,
                      const size_t *lens, size_t num_parts, unsigned char mac[UTIL_SHA256_LEN])
{
    unsigned char k[UTIL_SHA256_BLOCK_LEN] = {0}, pad[UTIL_SHA256_BLOCK_LEN];
    unsigned char inner[UTIL_SHA256_LEN];
    util_sha256_t ctx;

    if (key_len > UTIL_SHA256_BLOCK_LEN) { /* long keys are hashed first (RFC 2104) */
        util_sha256_init(&ctx);
        util_sha256_update(&ctx, key, key_len);
        util_sha256_final(&ctx, k);
    } else if (key_len > 0) {
        memcpy(k, key, key_len);
    }
    for (int i = 0; i < UTIL_SHA256_BLOCK_LEN; ++i) {
        pad[i] = k[i] ^ 0x36;
    }
    util_sha256_init(&ctx);
    util_sha256_update(&ctx, pad, sizeof(pad));
    for (size_t i = 0; i < num_parts; ++i) {
        util_sha256_update(&ctx, parts[i], lens[i]);
    }
    util_sha256_final(&ctx, inner);
    for (int i = 0; i < UTIL_SHA256_BLOCK_LEN; ++i) {
        pad[i] = k[i] ^ 0x5c;
    }
    util_sha256_init(&ctx);
    util_sha256_update(&ctx, pad, sizeof(pad));
    util_sha256_update(&ctx, inner, sizeof(inner));
    util_sha256_final(&ctx, mac);
    util_crypto_wipe(k, sizeof(k));
    util_crypto_wipe(pad, sizeof(pad));
    util_crypto_wipe(inner, sizeof(inner));
}

bool util_crypto_equal(const void *a, const void *b, size_t len)
{
    const volatile unsigned char *x = a, *y = b;
    unsigned char diff = 0;

    for (size_t i = 0; i < len; ++i) {
        diff |= x[i] ^ y[i];
    }
    return diff == 0;
}

strata_status_t util_random_bytes(void *buf, size_t len)
{
    unsigned char *p = buf;
    ssize_t got;

    while (len > 0) {
        got = getrandom(p, len, 0);
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got <= 0) {
            UTIL_LOG_ERROR("random: getrandom failed: %s", strerror(errno));
            return STRATA_ERR_IO;
        }
        p += got;
        len -= (size_t)got;
    }
    return STRATA_OK;
}

void util_crypto_wipe(void *buf, size_t len)
{
    volatile unsigned char *p = buf;

    while (len-- > 0) {
        *p++ = 0;
    }
}
