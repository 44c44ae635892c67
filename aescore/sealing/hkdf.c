/*
 * hkdf.c - HKDF-SHA256 (RFC 5869) into a caller's buffer; see hkdf.h.
 *
 * Extract: PRK = HMAC(salt, IKM). Expand: T(i) = HMAC(PRK, T(i-1) | info | i) for i = 1..N, N = ceil(L/32),
 * T(0) empty; the output is the first L bytes of T(1) | ... | T(N), written block by block into `out`.
 */
#include "hkdf.h"

#include <string.h>

ks_hkdf_status ks_hkdf_sha256(ks_sha256_compress_fn compress, const uint8_t *ikm, size_t ikm_len,
                              const uint8_t *salt, size_t salt_len, const uint8_t *info, size_t info_len,
                              uint8_t *out, size_t out_len) {
    if (compress == NULL || out == NULL || (ikm == NULL && ikm_len) || (salt == NULL && salt_len) ||
        (info == NULL && info_len)) {
        return KS_HKDF_ERR_NULL;
    }
    if (out_len == 0 || out_len > KS_HKDF_SHA256_MAX_LENGTH) {
        return KS_HKDF_ERR_LENGTH;
    }
    static const uint8_t nothing = 0; /* empty inputs: never hand memcpy a NULL pointer */
    ikm = ikm_len ? ikm : &nothing;
    info = info_len ? info : &nothing;
    uint8_t prk[KS_SHA256_DIGEST_SIZE], block[KS_SHA256_DIGEST_SIZE];
    ks_hmac_key hmac;
    ks_sha256_ctx ctx;

    ks_hmac_init(&hmac, compress, salt, salt_len);
    ks_hmac_begin(&hmac, &ctx);
    ks_sha256_update(&ctx, ikm, ikm_len);
    ks_hmac_end(&hmac, &ctx, prk);

    ks_hmac_init(&hmac, compress, prk, sizeof prk);
    size_t written = 0;
    for (unsigned counter = 1; written < out_len; counter++) {
        const uint8_t index = (uint8_t)counter;
        ks_hmac_begin(&hmac, &ctx);
        if (counter > 1) {
            ks_sha256_update(&ctx, block, sizeof block);
        }
        ks_sha256_update(&ctx, info, info_len);
        ks_sha256_update(&ctx, &index, 1);
        ks_hmac_end(&hmac, &ctx, block);
        const size_t take = out_len - written < sizeof block ? out_len - written : sizeof block;
        memcpy(out + written, block, take);
        written += take;
    }
    ks_sha256_wipe(prk, sizeof prk);
    ks_sha256_wipe(block, sizeof block);
    ks_sha256_wipe(&hmac, sizeof hmac);
    ks_sha256_wipe(&ctx, sizeof ctx);
    return KS_HKDF_OK;
}
