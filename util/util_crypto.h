/*
 * The little cryptography the rendezvous needs, without a dependency: SHA-256 (FIPS 180-4),
 * HMAC-SHA256 (RFC 2104), a comparison that takes the same time wherever the inputs differ,
 * and random bytes from the kernel (getrandom).
 */
#ifndef STRATA_UTIL_CRYPTO_H
#define STRATA_UTIL_CRYPTO_H

#include <strata/types.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define UTIL_SHA256_LEN       32
#define UTIL_SHA256_BLOCK_LEN 64

typedef struct util_sha256 {
    uint32_t      state[8];
    uint64_t      bytes;                        /* hashed so far */
    unsigned char block[UTIL_SHA256_BLOCK_LEN]; /* bytes % 64 of them wait here */
} util_sha256_t;

void util_sha256_init(util_sha256_t *ctx);
void util_sha256_update(util_sha256_t *ctx, const void *data, size_t len);
void util_sha256_final(util_sha256_t *ctx, unsigned char digest[UTIL_SHA256_LEN]);

/** HMAC-SHA256 of the concatenation of num_parts parts (parts[i], lens[i]) under key. */
void util_hmac_sha256(const void *key, size_t key_len, const void *const *parts,
                      const size_t *lens, size_t num_parts, unsigned char mac[UTIL_SHA256_LEN]);

/** Whether a and b hold the same len bytes, in time that depends on len only. */
bool util_crypto_equal(const void *a, const void *b, size_t len);

/** len bytes from the kernel's generator; STRATA_ERR_IO (logged) if it cannot give them. */
strata_status_t util_random_bytes(void *buf, size_t len);

/** Zero memory that held a secret, in a way the compiler does not remove. */
void util_crypto_wipe(void *buf, size_t len);

#endif
