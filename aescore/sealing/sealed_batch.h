/*
 * sealed_batch.h - seal and open many small messages of the sealed format in one call (no Python, no GIL).
 *
 * Two schemes share the layout (docs/formats.md). ctr-hmac is Tink's AesCtrHmacStreaming:
 *
 *     ciphertext = header | segment_0 | ... | segment_n
 *     header     = header_length (1 byte, = 1 + D + 7) | salt (D bytes) | nonce_prefix (7 bytes)
 *     segment_i  = AES-CTR(aes_key, nonce_i, plaintext_i) | HMAC-SHA256(mac_key, nonce_i | ciphertext_i)
 *     nonce_i    = nonce_prefix | i (u32, big-endian) | last (1 byte) | 0x00000000
 *     aes_key | mac_key = HKDF-SHA256(ikm, salt, info = associated data), D + 32 bytes
 *
 * gcm is Tink's AesGcmHkdfStreaming, the same header and segmentation with a 16-byte tag:
 *     segment_i  = AES-GCM(aes_key, nonce_i[0..12), no associated data, plaintext_i) (ciphertext | tag)
 *     aes_key    = HKDF-SHA256(ikm, salt, info = associated data), D bytes
 * Segment i carries segment_size bytes of ciphertext (tag included), the first header_length fewer, the
 * last at most that many; a plaintext segment is sealed as "last" when no byte follows it.
 *
 * The caller supplies every buffer: inputs, the per-item randomness (salt then nonce prefix: D + 7 bytes
 * from the OS's CSPRNG, one per item, never reused) and outputs of the exact sizes ks_sealed_ciphertext_length
 * and ks_sealed_plaintext_length give. Call-level problems return a ks_sealed_status; each item gets its own
 * ks_sealed_item_status. Open writes a segment's plaintext only after its tag verified; a failed item's
 * output is zeroed.
 */
#ifndef KS_SEALED_BATCH_H
#define KS_SEALED_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "aesni_ctr.h"
#include "aesni_gcm.h"
#include "sha256.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Call-level status. */
typedef enum {
    KS_SEALED_OK = 0,
    KS_SEALED_ERR_NULL = 1,         /* a required pointer was NULL */
    KS_SEALED_ERR_PARAMS = 2,       /* derived size not 16/24/32, or segment size outside the format's range */
    KS_SEALED_ERR_IKM = 3,          /* key material shorter than max(16, derived size) */
    KS_SEALED_ERR_ISA = 4,          /* the AES or SHA-256 path is unknown or not supported by this CPU */
    KS_SEALED_ERR_OUTPUT = 5        /* an output buffer does not have the exact expected size */
} ks_sealed_status;

/* Per-item status (ks_sealed_item.status). */
typedef enum {
    KS_ITEM_OK = 0,
    KS_ITEM_SHORT_HEADER = 1,       /* open: fewer bytes than the header */
    KS_ITEM_BAD_HEADER = 2,         /* open: the length byte does not match the key type */
    KS_ITEM_MISSING_SEGMENT = 3,    /* open: header only (segment `segment` is missing) */
    KS_ITEM_SHORT_SEGMENT = 4,      /* open: the last segment is shorter than its tag */
    KS_ITEM_NO_KEY = 5,             /* open: the first segment verifies under no candidate */
    KS_ITEM_BAD_TAG = 6,            /* open: a later segment fails authentication */
    KS_ITEM_TOO_MANY_SEGMENTS = 7   /* the message needs segment number 2**32 */
} ks_sealed_item_status;

/* The construction of every segment (ks_sealed_params.scheme). */
typedef enum {
    KS_SCHEME_CTR_HMAC = 0,         /* AES-CTR then HMAC-SHA256, 32-byte tags */
    KS_SCHEME_GCM = 1               /* AES-GCM, 16-byte tags; needs PCLMULQDQ (aesni_gcm.h) */
} ks_sealed_scheme;

#define KS_SEALED_TAG_SIZE 32
#define KS_SEALED_GCM_TAG_SIZE 16
#define KS_SEALED_NONCE_PREFIX_SIZE 7
#define KS_SEALED_MIN_IKM_SIZE 16
#define KS_SEALED_MAX_SEGMENT_SIZE 2147483647u

typedef struct {
    size_t derived_size;            /* AES key bytes: 16, 24 or 32 (also the salt size) */
    size_t segment_size;            /* ciphertext segment size, tag included */
    ks_isa isa;                     /* AES-CTR path (aesni_ctr.h) */
    ks_sha256_impl sha;             /* SHA-256 compression (sha256.h) */
    ks_sealed_scheme scheme;        /* ctr-hmac or gcm; gcm runs on `isa` when ks_gcm_cpu_isas() has it, else
                                       on 128-bit AES-NI + PCLMULQDQ */
} ks_sealed_params;

/* Tag bytes after every segment: 32 (ctr-hmac) or 16 (gcm). */
size_t ks_sealed_tag_length(const ks_sealed_params *params);

typedef struct {
    const uint8_t *material;
    size_t length;
} ks_sealed_ikm;

typedef struct {
    const uint8_t *input;           /* plaintext (seal) or ciphertext (open) */
    size_t input_len;
    const uint8_t *associated_data; /* the HKDF info; may be NULL when associated_data_len is 0 */
    size_t associated_data_len;
    const uint8_t *random;          /* seal: derived_size salt bytes then 7 nonce prefix bytes */
    uint8_t *output;                /* open: NULL to verify only (when the plaintext length is unknown) */
    size_t output_len;
    int status;                     /* out: a ks_sealed_item_status */
    uint32_t segment;               /* out: the failing segment, for statuses that name one */
    uint32_t candidate;             /* out, open: index of the candidate that verified */
} ks_sealed_item;

/* Header bytes: 1 + derived_size + 7. */
size_t ks_sealed_header_length(const ks_sealed_params *params);

/* Check params (sizes, ISA and SHA paths). */
ks_sealed_status ks_sealed_check(const ks_sealed_params *params);

/* Exact ciphertext length for a plaintext; KS_ITEM_TOO_MANY_SEGMENTS when it needs segment 2**32. */
ks_sealed_item_status ks_sealed_ciphertext_length(const ks_sealed_params *params, size_t plaintext_len,
                                                  size_t *out);

/* Plaintext length of a well-formed ciphertext; otherwise the structural problem (short header, missing or
 * short segment, too many segments) with *segment set where one is named. Tags are not looked at. */
ks_sealed_item_status ks_sealed_plaintext_length(const ks_sealed_params *params, size_t ciphertext_len,
                                                 size_t *out, uint32_t *segment);

/* Seal every item under `ikm`. */
ks_sealed_status ks_sealed_seal(const ks_sealed_params *params, const ks_sealed_ikm *ikm, ks_sealed_item *items,
                                size_t count);

/* Open every item: the first segment is tried under each candidate in order (newest first); the one that
 * verifies is used for the item's other segments. */
ks_sealed_status ks_sealed_open(const ks_sealed_params *params, const ks_sealed_ikm *candidates,
                                size_t candidate_count, ks_sealed_item *items, size_t count);

#ifdef __cplusplus
}
#endif

#endif /* KS_SEALED_BATCH_H */
