/*
 * hkdf.h - HKDF-SHA256 (RFC 5869: extract, then expand) into a caller's buffer, over sha256.h's HMAC.
 *
 * For key material the caller keeps in memory it locks and zeroes: the output is written only into `out`,
 * and every intermediate value (the pseudorandom key, the HMAC pads' states, the last output block) is
 * zeroed before the call returns. No allocation, no Python. Returns a status code, never aborts.
 */
#ifndef KS_HKDF_H
#define KS_HKDF_H

#include <stddef.h>
#include <stdint.h>

#include "sha256.h"

#ifdef __cplusplus
extern "C" {
#endif

/* RFC 5869 2.3: at most 255 blocks of the hash's output. */
#define KS_HKDF_SHA256_MAX_LENGTH (255u * KS_SHA256_DIGEST_SIZE)

typedef enum {
    KS_HKDF_OK = 0,
    KS_HKDF_ERR_NULL = 1,     /* a NULL pointer with a non-zero length, or no compression function */
    KS_HKDF_ERR_LENGTH = 2    /* out_len is 0 or more than KS_HKDF_SHA256_MAX_LENGTH */
} ks_hkdf_status;

/* OKM = HKDF-Expand(HKDF-Extract(salt, ikm), info, out_len) into `out`. An empty salt is the RFC's default
 * (32 zero bytes: the same HMAC key). `out` may not overlap the inputs. On an error `out` is untouched. */
ks_hkdf_status ks_hkdf_sha256(ks_sha256_compress_fn compress, const uint8_t *ikm, size_t ikm_len,
                              const uint8_t *salt, size_t salt_len, const uint8_t *info, size_t info_len,
                              uint8_t *out, size_t out_len);

#ifdef __cplusplus
}
#endif

#endif /* KS_HKDF_H */
