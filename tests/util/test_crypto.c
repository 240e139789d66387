/*
 * SHA-256 against the FIPS 180-2 examples and lengths around the padding's boundaries,
 * HMAC-SHA256 against RFC 4231's test cases 1-7 with the input split at every point, the
 * comparison and the random bytes.
 */
#include "util/util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

static void hex(const unsigned char *bytes, size_t len, char *out)
{
    for (size_t i = 0; i < len; ++i) {
        snprintf(out + 2 * i, 3, "%02x", bytes[i]);
    }
}

static void check_sha256(const void *data, size_t len, const char *expect)
{
    unsigned char digest[UTIL_SHA256_LEN];
    char text[2 * UTIL_SHA256_LEN + 1];
    util_sha256_t ctx;

    util_sha256_init(&ctx);
    util_sha256_update(&ctx, data, len);
    util_sha256_final(&ctx, digest);
    hex(digest, sizeof(digest), text);
    assert_string_equal(text, expect);
}

static void test_sha256_fips180(void **state)
{
    static const char two_blocks[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    unsigned char digest[UTIL_SHA256_LEN];
    char text[2 * UTIL_SHA256_LEN + 1], *million = malloc(1000000);
    util_sha256_t ctx;

    (void)state;
    check_sha256("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    check_sha256("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    check_sha256(two_blocks, strlen(two_blocks),
                 "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    assert_non_null(million);
    memset(million, 'a', 1000000);
    check_sha256(million, 1000000,
                 "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    /* The same million, fed in uneven pieces that cross block boundaries. */
    util_sha256_init(&ctx);
    for (size_t done = 0, piece = 1; done < 1000000; done += piece, piece = piece % 127 + 1) {
        util_sha256_update(&ctx, million + done, piece < 1000000 - done ? piece : 1000000 - done);
    }
    util_sha256_final(&ctx, digest);
    hex(digest, sizeof(digest), text);
    assert_string_equal(text, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    /* Lengths either side of the padding's boundaries (digests from coreutils' sha256sum). */
    check_sha256(million, 55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
    check_sha256(million, 56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
    check_sha256(million, 63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34");
    check_sha256(million, 64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
    check_sha256(million, 119,
                 "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb");
    free(million);
}

typedef struct hmac_case {
    unsigned char key[131];
    size_t        key_len;
    unsigned char data[160];
    size_t        data_len;
    const char   *mac; /* hex; case 5 gives only the first 128 bits */
} hmac_case_t;

static void fill(unsigned char *dst, size_t *len_p, unsigned char byte, size_t n)
{
    memset(dst, byte, n);
    *len_p = n;
}

static void text(unsigned char *dst, size_t *len_p, const char *s)
{
    *len_p = strlen(s);
    memcpy(dst, s, *len_p);
}

static void test_hmac_rfc4231(void **state)
{
    hmac_case_t c[7];
    unsigned char mac[UTIL_SHA256_LEN], split[UTIL_SHA256_LEN];
    char got[2 * UTIL_SHA256_LEN + 1];

    (void)state;
    memset(c, 0, sizeof(c));
    fill(c[0].key, &c[0].key_len, 0x0b, 20);
    text(c[0].data, &c[0].data_len, "Hi There");
    c[0].mac = "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7";
    text(c[1].key, &c[1].key_len, "Jefe");
    text(c[1].data, &c[1].data_len, "what do ya want for nothing?");
    c[1].mac = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
    fill(c[2].key, &c[2].key_len, 0xaa, 20);
    fill(c[2].data, &c[2].data_len, 0xdd, 50);
    c[2].mac = "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe";
    for (int i = 0; i < 25; ++i) {
        c[3].key[i] = (unsigned char)(i + 1);
    }
    c[3].key_len = 25;
    fill(c[3].data, &c[3].data_len, 0xcd, 50);
    c[3].mac = "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b";
    fill(c[4].key, &c[4].key_len, 0x0c, 20);
    text(c[4].data, &c[4].data_len, "Test With Truncation");
    c[4].mac = "a3b6167473100ee06e0c796c2955552b";
    fill(c[5].key, &c[5].key_len, 0xaa, 131);
    text(c[5].data, &c[5].data_len, "Test Using Larger Than Block-Size Key - Hash Key First");
    c[5].mac = "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54";
    fill(c[6].key, &c[6].key_len, 0xaa, 131);
    text(c[6].data, &c[6].data_len,
         "This is a test using a larger than block-size key and a larger than block-size data. "
         "The key needs to be hashed before being used by the HMAC algorithm.");
    c[6].mac = "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2";
    for (int i = 0; i < 7; ++i) {
        const void *parts[1] = {c[i].data};

        util_hmac_sha256(c[i].key, c[i].key_len, parts, &c[i].data_len, 1, mac);
        hex(mac, sizeof(mac), got);
        got[strlen(c[i].mac)] = '\0';
        if (strcmp(got, c[i].mac) != 0) {
            fail_msg("RFC 4231 test case %d: got %s, expected %s", i + 1, got, c[i].mac);
        }
        /* The message in two parts, split anywhere, gives the same MAC. */
        for (size_t cut = 0; cut <= c[i].data_len; ++cut) {
            const void *two[2] = {c[i].data, c[i].data + cut};
            size_t lens[2] = {cut, c[i].data_len - cut};

            util_hmac_sha256(c[i].key, c[i].key_len, two, lens, 2, split);
            assert_memory_equal(split, mac, sizeof(mac));
        }
    }
}

static void test_equal_and_random(void **state)
{
    unsigned char a[32], b[32];

    (void)state;
    assert_int_equal(util_random_bytes(a, sizeof(a)), STRATA_OK);
    memcpy(b, a, sizeof(a));
    assert_true(util_crypto_equal(a, b, sizeof(a)));
    for (size_t i = 0; i < sizeof(a); ++i) {
        b[i] ^= 0x10;
        assert_false(util_crypto_equal(a, b, sizeof(a)));
        b[i] ^= 0x10;
    }
    assert_true(util_crypto_equal(a, b, 0));
    assert_int_equal(util_random_bytes(b, sizeof(b)), STRATA_OK);
    assert_false(util_crypto_equal(a, b, sizeof(a))); /* 2^-256 to be wrong */
    util_crypto_wipe(a, sizeof(a));
    memset(b, 0, sizeof(b));
    assert_memory_equal(a, b, sizeof(a));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_fips180),
        cmocka_unit_test(test_hmac_rfc4231),
        cmocka_unit_test(test_equal_and_random),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
