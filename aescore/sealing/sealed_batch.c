/*
 * sealed_batch.c - the sealed format (Tink AesCtrHmacStreaming) for whole messages, many per call.
 *
 * Per message: HKDF-SHA256 (RFC 5869) derives the keys from the key material, the header's salt and the
 * associated data. ctr-hmac: each segment is AES-CTR from its nonce (aesni_ctr.c) and tagged with
 * HMAC-SHA256(nonce | ciphertext) (sha256.c). gcm: each segment is one AES-GCM call (aesni_gcm.c, CTR and
 * GHASH fused) under the derived key and the segment's 12-byte nonce. Derived keys, key schedules, GHASH key
 * material and HMAC states live on the stack and are wiped before the next message. See sealed_batch.h for the
 * format and the contract.
 */
#include "sealed_batch.h"

#include <string.h>

#define KS_SEALED_MAX_SEGMENTS ((uint64_t)1 << 32)

typedef struct {
    ks_aes_key aes;
    ks_hmac_key mac;
    ks_gcm_key gcm;                 /* gcm only (aes and mac unused) */
} ks_message_keys;

size_t ks_sealed_tag_length(const ks_sealed_params *params) {
    return params->scheme == KS_SCHEME_GCM ? KS_SEALED_GCM_TAG_SIZE : KS_SEALED_TAG_SIZE;
}

/* The GCM path for a requested AES path: itself where the CPU has its carry-less multiply, else AES-NI. */
static ks_isa ks_gcm_path(ks_isa isa) {
    const unsigned available = ks_gcm_cpu_isas();
    if (available & (unsigned)isa) {
        return isa;
    }
    return (available & (unsigned)KS_ISA_AESNI) ? KS_ISA_AESNI : KS_ISA_NONE;
}

size_t ks_sealed_header_length(const ks_sealed_params *params) {
    return 1 + params->derived_size + KS_SEALED_NONCE_PREFIX_SIZE;
}

ks_sealed_status ks_sealed_check(const ks_sealed_params *params) {
    if (params == NULL) {
        return KS_SEALED_ERR_NULL;
    }
    const size_t derived = params->derived_size;
    if (derived != 16 && derived != 24 && derived != 32) {
        return KS_SEALED_ERR_PARAMS;
    }
    if (params->scheme != KS_SCHEME_CTR_HMAC && params->scheme != KS_SCHEME_GCM) {
        return KS_SEALED_ERR_PARAMS;
    }
    /* Tink's minimum: header + tag + at least one byte of plaintext per segment. */
    if (params->segment_size < ks_sealed_header_length(params) + ks_sealed_tag_length(params) + 1 ||
        params->segment_size > KS_SEALED_MAX_SEGMENT_SIZE) {
        return KS_SEALED_ERR_PARAMS;
    }
    if (ks_sha256_compress_of(params->sha) == NULL) {
        return KS_SEALED_ERR_ISA;
    }
    const unsigned isa = (unsigned)params->isa;
    if (isa == KS_ISA_NONE || (isa & (isa - 1)) != 0 || !(ks_cpu_isas() & isa)) {
        return KS_SEALED_ERR_ISA;
    }
    if (params->scheme == KS_SCHEME_GCM && ks_gcm_path(params->isa) == KS_ISA_NONE) {
        return KS_SEALED_ERR_ISA;
    }
    return KS_SEALED_OK;
}

static ks_sealed_status ks_check_ikm(const ks_sealed_params *params, const ks_sealed_ikm *ikm) {
    if (ikm == NULL || ikm->material == NULL) {
        return KS_SEALED_ERR_NULL;
    }
    const size_t needed = params->derived_size > KS_SEALED_MIN_IKM_SIZE ? params->derived_size
                                                                         : KS_SEALED_MIN_IKM_SIZE;
    return ikm->length < needed ? KS_SEALED_ERR_IKM : KS_SEALED_OK;
}

ks_sealed_item_status ks_sealed_ciphertext_length(const ks_sealed_params *params, size_t plaintext_len,
                                                  size_t *out) {
    /* As Tink: the header occupies the front of segment 0, so count it with the plaintext. */
    const size_t tag = ks_sealed_tag_length(params);
    const size_t plaintext_segment = params->segment_size - tag;
    const size_t counted = plaintext_len + ks_sealed_header_length(params);
    const size_t full = counted / plaintext_segment, rest = counted % plaintext_segment;
    if ((uint64_t)full + (rest ? 1 : 0) > KS_SEALED_MAX_SEGMENTS) {
        return KS_ITEM_TOO_MANY_SEGMENTS;
    }
    *out = full * params->segment_size + (rest ? rest + tag : 0);
    return KS_ITEM_OK;
}

ks_sealed_item_status ks_sealed_plaintext_length(const ks_sealed_params *params, size_t ciphertext_len,
                                                 size_t *out, uint32_t *segment) {
    const size_t header = ks_sealed_header_length(params);
    *out = 0;
    *segment = 0;
    if (ciphertext_len < header) {
        return KS_ITEM_SHORT_HEADER;
    }
    if (ciphertext_len == header) {
        return KS_ITEM_MISSING_SEGMENT;
    }
    /* Segment 0 spans segment_size bytes from the start of the header, every later one segment_size. */
    const size_t full = ciphertext_len / params->segment_size, rest = ciphertext_len % params->segment_size;
    const uint64_t segments = (uint64_t)full + (rest ? 1 : 0);
    if (segments > KS_SEALED_MAX_SEGMENTS) {
        *segment = (uint32_t)(KS_SEALED_MAX_SEGMENTS - 1);
        return KS_ITEM_TOO_MANY_SEGMENTS;
    }
    /* The last segment's bytes: segment 0 carries the header before its ciphertext, later ones do not. */
    const size_t last = segments == 1 ? ciphertext_len - header : (rest ? rest : params->segment_size);
    if (last < ks_sealed_tag_length(params)) {
        *segment = (uint32_t)(segments - 1);
        return KS_ITEM_SHORT_SEGMENT;
    }
    *out = ciphertext_len - header - (size_t)segments * ks_sealed_tag_length(params);
    return KS_ITEM_OK;
}

static void ks_segment_nonce(uint8_t nonce[KS_BLOCK_SIZE], const uint8_t *prefix, uint32_t index, int last) {
    memcpy(nonce, prefix, KS_SEALED_NONCE_PREFIX_SIZE);
    nonce[7] = (uint8_t)(index >> 24);
    nonce[8] = (uint8_t)(index >> 16);
    nonce[9] = (uint8_t)(index >> 8);
    nonce[10] = (uint8_t)index;
    nonce[11] = last ? 1 : 0;
    memset(nonce + 12, 0, 4);
}

/* HKDF-SHA256: ctr-hmac takes a 2-block output (D + 32 <= 64 bytes), aes key then mac key; gcm the first D
 * bytes as its AES-GCM key. */
static ks_sealed_status ks_derive(const ks_sealed_params *params, ks_sha256_compress_fn compress,
                                  const ks_sealed_ikm *ikm, const uint8_t *salt, const uint8_t *info,
                                  size_t info_len, ks_message_keys *keys) {
    uint8_t prk[KS_SHA256_DIGEST_SIZE], okm[2 * KS_SHA256_DIGEST_SIZE];
    ks_hmac_key hmac;
    ks_sha256_ctx ctx;
    const uint8_t one = 1, two = 2;
    ks_hmac_init(&hmac, compress, salt, params->derived_size);
    ks_hmac_begin(&hmac, &ctx);
    ks_sha256_update(&ctx, ikm->material, ikm->length);
    ks_hmac_end(&hmac, &ctx, prk);
    ks_hmac_init(&hmac, compress, prk, sizeof prk);
    ks_hmac_begin(&hmac, &ctx);
    ks_sha256_update(&ctx, info, info_len);
    ks_sha256_update(&ctx, &one, 1);
    ks_hmac_end(&hmac, &ctx, okm);
    ks_status status;
    if (params->scheme == KS_SCHEME_GCM) {
        /* D <= 32 bytes: the first HKDF block is the whole output. */
        status = ks_gcm_init(okm, params->derived_size, &keys->gcm);
    } else {
        ks_hmac_begin(&hmac, &ctx);
        ks_sha256_update(&ctx, okm, KS_SHA256_DIGEST_SIZE);
        ks_sha256_update(&ctx, info, info_len);
        ks_sha256_update(&ctx, &two, 1);
        ks_hmac_end(&hmac, &ctx, okm + KS_SHA256_DIGEST_SIZE);
        status = ks_expand_key(okm, params->derived_size, &keys->aes);
        ks_hmac_init(&keys->mac, compress, okm + params->derived_size, KS_SHA256_DIGEST_SIZE);
    }
    ks_sha256_wipe(prk, sizeof prk);
    ks_sha256_wipe(okm, sizeof okm);
    ks_sha256_wipe(&hmac, sizeof hmac);
    ks_sha256_wipe(&ctx, sizeof ctx);
    return status == KS_OK ? KS_SEALED_OK : KS_SEALED_ERR_ISA;
}

static void ks_tag(const ks_hmac_key *mac, const uint8_t nonce[KS_BLOCK_SIZE], const uint8_t *ciphertext,
                   size_t len, uint8_t tag[KS_SEALED_TAG_SIZE]) {
    ks_sha256_ctx ctx;
    ks_hmac_begin(mac, &ctx);
    ks_sha256_update(&ctx, nonce, KS_BLOCK_SIZE);
    ks_sha256_update(&ctx, ciphertext, len);
    ks_hmac_end(mac, &ctx, tag);
}

/* Constant-time: every byte is compared whatever the earlier ones were. */
static int ks_tags_equal(const uint8_t *a, const uint8_t *b) {
    uint8_t difference = 0;
    for (size_t i = 0; i < KS_SEALED_TAG_SIZE; i++) {
        difference |= (uint8_t)(a[i] ^ b[i]);
    }
    return difference == 0;
}

static int ks_verify(const ks_hmac_key *mac, const uint8_t nonce[KS_BLOCK_SIZE], const uint8_t *segment,
                     size_t body_len) {
    uint8_t expected[KS_SEALED_TAG_SIZE];
    ks_tag(mac, nonce, segment, body_len, expected);
    const int equal = ks_tags_equal(expected, segment + body_len);
    ks_sha256_wipe(expected, sizeof expected);
    return equal;
}

static ks_sealed_status ks_seal_one(const ks_sealed_params *params, ks_sha256_compress_fn compress,
                                    const ks_sealed_ikm *ikm, ks_sealed_item *item) {
    const size_t derived = params->derived_size, header = ks_sealed_header_length(params);
    size_t expected;
    item->status = ks_sealed_ciphertext_length(params, item->input_len, &expected);
    if (item->status != KS_ITEM_OK) {
        return KS_SEALED_OK;
    }
    if (item->output == NULL || item->random == NULL || (item->input == NULL && item->input_len) ||
        (item->associated_data == NULL && item->associated_data_len)) {
        return KS_SEALED_ERR_NULL;
    }
    if (item->output_len != expected) {
        return KS_SEALED_ERR_OUTPUT;
    }
    ks_message_keys keys;
    const uint8_t *salt = item->random, *prefix = item->random + derived;
    ks_sealed_status status =
        ks_derive(params, compress, ikm, salt, item->associated_data, item->associated_data_len, &keys);
    if (status != KS_SEALED_OK) {
        ks_sha256_wipe(&keys, sizeof keys);
        return status;
    }
    uint8_t *out = item->output;
    out[0] = (uint8_t)header;
    memcpy(out + 1, item->random, derived + KS_SEALED_NONCE_PREFIX_SIZE);
    out += header;
    const size_t tag = ks_sealed_tag_length(params);
    const size_t first = params->segment_size - header - tag;
    const size_t later = params->segment_size - tag;
    const ks_isa gcm_isa = ks_gcm_path(params->isa);
    size_t position = 0;
    uint8_t nonce[KS_BLOCK_SIZE];
    for (uint64_t index = 0;; index++) {
        const size_t size = index == 0 ? first : later, remaining = item->input_len - position;
        const int last = remaining <= size;
        const size_t length = last ? remaining : size;
        ks_segment_nonce(nonce, prefix, (uint32_t)index, last);
        if (params->scheme == KS_SCHEME_GCM) {
            /* The GCM nonce is the first 12 bytes of the segment nonce; the segment has no associated data. */
            if (ks_gcm_seal(&keys.gcm, gcm_isa, nonce, NULL, 0, item->input + position, out, length,
                            out + length) != KS_OK) {
                status = KS_SEALED_ERR_ISA;
                break;
            }
        } else {
            if (length && ks_ctr_xor(&keys.aes, params->isa, nonce, 0, item->input + position, out, length,
                                     KS_STORE_CACHED) != KS_OK) {
                status = KS_SEALED_ERR_ISA;
                break;
            }
            ks_tag(&keys.mac, nonce, out, length, out + length);
        }
        out += length + tag;
        position += length;
        if (last) {
            break;
        }
    }
    ks_sha256_wipe(&keys, sizeof keys);
    return status;
}

ks_sealed_status ks_sealed_seal(const ks_sealed_params *params, const ks_sealed_ikm *ikm, ks_sealed_item *items,
                                size_t count) {
    ks_sealed_status status = ks_sealed_check(params);
    if (status == KS_SEALED_OK) {
        status = ks_check_ikm(params, ikm);
    }
    if (status != KS_SEALED_OK) {
        return status;
    }
    if (items == NULL && count) {
        return KS_SEALED_ERR_NULL;
    }
    ks_sha256_compress_fn compress = ks_sha256_compress_of(params->sha);
    for (size_t i = 0; i < count; i++) {
        status = ks_seal_one(params, compress, ikm, &items[i]);
        if (status != KS_SEALED_OK) {
            return status;
        }
    }
    return KS_SEALED_OK;
}

/* GCM tag check without decrypting (for a malformed message, whose plaintext has nowhere to go):
 * GHASH_H(ciphertext) xor AES_K(J0) against the tag, every byte compared. 1 authentic, 0 not, -1 core error. */
static int ks_gcm_verify(const ks_gcm_key *key, ks_isa isa, const uint8_t nonce[KS_BLOCK_SIZE],
                         const uint8_t *ciphertext, size_t len) {
    uint8_t j0[KS_BLOCK_SIZE], mask[KS_BLOCK_SIZE], hash[KS_BLOCK_SIZE];
    memcpy(j0, nonce, KS_GCM_NONCE_SIZE);
    j0[12] = 0;
    j0[13] = 0;
    j0[14] = 0;
    j0[15] = 1;
    memset(mask, 0, sizeof mask);
    int result = -1;
    if (ks_ghash(&key->ghash, isa, NULL, 0, ciphertext, len, hash) == KS_OK &&
        ks_ctr_xor(&key->aes, isa, j0, 0, mask, mask, KS_BLOCK_SIZE, KS_STORE_CACHED) == KS_OK) {
        uint8_t difference = 0;
        for (size_t i = 0; i < KS_SEALED_GCM_TAG_SIZE; i++) {
            difference |= (uint8_t)(hash[i] ^ mask[i] ^ ciphertext[len + i]);
        }
        result = difference == 0;
    }
    ks_sha256_wipe(mask, sizeof mask);
    ks_sha256_wipe(hash, sizeof hash);
    return result;
}

/* Authenticate one segment (`body` bytes then its tag) and, when `out` is not NULL, write its plaintext there.
 * ctr-hmac checks the HMAC before decrypting; gcm decrypts and checks in one pass and zeroes `out` when the
 * tag does not match (aesni_gcm.h), so no unauthenticated plaintext remains either way.
 * 1 authentic, 0 not, -1 core error. */
static int ks_open_segment(const ks_sealed_params *params, const ks_message_keys *keys,
                           const uint8_t nonce[KS_BLOCK_SIZE], const uint8_t *segment, size_t body, uint8_t *out) {
    if (params->scheme == KS_SCHEME_GCM) {
        const ks_isa isa = ks_gcm_path(params->isa);
        if (out == NULL) {
            return ks_gcm_verify(&keys->gcm, isa, nonce, segment, body);
        }
        const ks_status status = ks_gcm_open(&keys->gcm, isa, nonce, NULL, 0, segment, out, body, segment + body);
        return status == KS_OK ? 1 : status == KS_ERR_TAG ? 0 : -1;
    }
    if (!ks_verify(&keys->mac, nonce, segment, body)) {
        return 0;
    }
    if (out != NULL && body &&
        ks_ctr_xor(&keys->aes, params->isa, nonce, 0, segment, out, body, KS_STORE_CACHED) != KS_OK) {
        return -1;
    }
    return 1;
}

/* Try the candidates on segment 0; on 1 `keys` holds the verifying one's keys (and `out` its plaintext);
 * 0 when none verifies, -1 on a core error. */
static int ks_select(const ks_sealed_params *params, ks_sha256_compress_fn compress,
                     const ks_sealed_ikm *candidates, size_t candidate_count, ks_sealed_item *item,
                     const uint8_t *salt, const uint8_t nonce[KS_BLOCK_SIZE], const uint8_t *segment,
                     size_t body_len, uint8_t *out, ks_message_keys *keys) {
    for (size_t c = 0; c < candidate_count; c++) {
        if (ks_derive(params, compress, &candidates[c], salt, item->associated_data, item->associated_data_len,
                      keys) == KS_SEALED_OK) {
            const int result = ks_open_segment(params, keys, nonce, segment, body_len, out);
            if (result != 0) {
                if (result > 0) {
                    item->candidate = (uint32_t)c;
                }
                return result;
            }
        }
        ks_sha256_wipe(keys, sizeof *keys);
    }
    return 0;
}

static ks_sealed_status ks_open_one(const ks_sealed_params *params, ks_sha256_compress_fn compress,
                                    const ks_sealed_ikm *candidates, size_t candidate_count,
                                    ks_sealed_item *item) {
    const size_t header = ks_sealed_header_length(params), length = item->input_len;
    const size_t tag = ks_sealed_tag_length(params);
    const uint8_t *in = item->input;
    item->segment = 0;
    item->candidate = 0;
    if ((in == NULL && length) || (item->associated_data == NULL && item->associated_data_len)) {
        return KS_SEALED_ERR_NULL;
    }
    if (length < header) {
        item->status = KS_ITEM_SHORT_HEADER;
        return KS_SEALED_OK;
    }
    if (in[0] != header) {
        item->status = KS_ITEM_BAD_HEADER;
        return KS_SEALED_OK;
    }
    const uint8_t *salt = in + 1, *prefix = in + 1 + params->derived_size;
    ks_message_keys keys;
    int have_keys = 0;
    size_t position = header, written = 0;
    uint8_t nonce[KS_BLOCK_SIZE];
    ks_sealed_status status = KS_SEALED_OK;
    item->status = KS_ITEM_OK;
    for (uint64_t index = 0;; index++) {
        const size_t size = index == 0 ? params->segment_size - header : params->segment_size;
        const size_t remaining = length - position;
        item->segment = (uint32_t)index;
        if (remaining == 0) {
            item->status = KS_ITEM_MISSING_SEGMENT;
            break;
        }
        if (index >= KS_SEALED_MAX_SEGMENTS) {
            item->status = KS_ITEM_TOO_MANY_SEGMENTS;
            break;
        }
        const int last = remaining <= size;
        const size_t segment_len = last ? remaining : size;
        if (segment_len < tag) {
            item->status = KS_ITEM_SHORT_SEGMENT;
            break;
        }
        const size_t body = segment_len - tag;
        ks_segment_nonce(nonce, prefix, (uint32_t)index, last);
        uint8_t *target = NULL;
        if (item->output != NULL) {
            if (written + body > item->output_len) {
                status = KS_SEALED_ERR_OUTPUT;
                break;
            }
            target = item->output + written;
        }
        int result;
        if (!have_keys) {
            result = ks_select(params, compress, candidates, candidate_count, item, salt, nonce, in + position,
                               body, target, &keys);
            have_keys = result > 0;
        } else {
            result = ks_open_segment(params, &keys, nonce, in + position, body, target);
        }
        if (result < 0) {
            status = KS_SEALED_ERR_ISA;
            break;
        }
        if (result == 0) {
            item->status = index == 0 ? KS_ITEM_NO_KEY : KS_ITEM_BAD_TAG;
            break;
        }
        written += body;
        position += segment_len;
        if (last) {
            break;
        }
    }
    if (have_keys) {
        ks_sha256_wipe(&keys, sizeof keys);
    }
    if (status == KS_SEALED_OK && item->status == KS_ITEM_OK && item->output != NULL &&
        written != item->output_len) {
        status = KS_SEALED_ERR_OUTPUT;
    }
    if ((status != KS_SEALED_OK || item->status != KS_ITEM_OK) && item->output != NULL) {
        ks_sha256_wipe(item->output, item->output_len); /* no plaintext of a failed message leaves */
    }
    return status;
}

ks_sealed_status ks_sealed_open(const ks_sealed_params *params, const ks_sealed_ikm *candidates,
                                size_t candidate_count, ks_sealed_item *items, size_t count) {
    ks_sealed_status status = ks_sealed_check(params);
    if (status != KS_SEALED_OK) {
        return status;
    }
    if ((candidates == NULL && candidate_count) || (items == NULL && count)) {
        return KS_SEALED_ERR_NULL;
    }
    for (size_t c = 0; c < candidate_count; c++) {
        status = ks_check_ikm(params, &candidates[c]);
        if (status != KS_SEALED_OK) {
            return status;
        }
    }
    ks_sha256_compress_fn compress = ks_sha256_compress_of(params->sha);
    for (size_t i = 0; i < count; i++) {
        status = ks_open_one(params, compress, candidates, candidate_count, &items[i]);
        if (status != KS_SEALED_OK) {
            return status;
        }
    }
    return KS_SEALED_OK;
}
