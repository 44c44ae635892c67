/*
 * sealed_batch.c - the sealed format (Tink AesCtrHmacStreaming) for whole messages, many per call.
 *
 * Per message: HKDF-SHA256 (RFC 5869) derives the AES and HMAC keys from the key material, the header's salt
 * and the associated data; each segment is AES-CTR from its nonce (aesni_ctr.c) and tagged with
 * HMAC-SHA256(nonce | ciphertext) (sha256.c). Derived keys, key schedules and HMAC states live on the
 * stack and are wiped before the next message. See sealed_batch.h for the format and the contract.
 */
#include "sealed_batch.h"

#include <string.h>

#define KS_SEALED_MAX_SEGMENTS ((uint64_t)1 << 32)

typedef struct {
    ks_aes_key aes;
    ks_hmac_key mac;
} ks_message_keys;

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
    /* Tink's minimum: header + tag + at least one byte of plaintext per segment. */
    if (params->segment_size < ks_sealed_header_length(params) + KS_SEALED_TAG_SIZE + 1 ||
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
    const size_t plaintext_segment = params->segment_size - KS_SEALED_TAG_SIZE;
    const size_t counted = plaintext_len + ks_sealed_header_length(params);
    const size_t full = counted / plaintext_segment, rest = counted % plaintext_segment;
    if ((uint64_t)full + (rest ? 1 : 0) > KS_SEALED_MAX_SEGMENTS) {
        return KS_ITEM_TOO_MANY_SEGMENTS;
    }
    *out = full * params->segment_size + (rest ? rest + KS_SEALED_TAG_SIZE : 0);
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
    if (last < KS_SEALED_TAG_SIZE) {
        *segment = (uint32_t)(segments - 1);
        return KS_ITEM_SHORT_SEGMENT;
    }
    *out = ciphertext_len - header - (size_t)segments * KS_SEALED_TAG_SIZE;
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

/* HKDF-SHA256 with a 2-block output (D + 32 <= 64 bytes): aes key then mac key into `keys`. */
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
    ks_hmac_begin(&hmac, &ctx);
    ks_sha256_update(&ctx, okm, KS_SHA256_DIGEST_SIZE);
    ks_sha256_update(&ctx, info, info_len);
    ks_sha256_update(&ctx, &two, 1);
    ks_hmac_end(&hmac, &ctx, okm + KS_SHA256_DIGEST_SIZE);
    ks_status status = ks_expand_key(okm, params->derived_size, &keys->aes);
    ks_hmac_init(&keys->mac, compress, okm + params->derived_size, KS_SHA256_DIGEST_SIZE);
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
    const size_t first = params->segment_size - header - KS_SEALED_TAG_SIZE;
    const size_t later = params->segment_size - KS_SEALED_TAG_SIZE;
    size_t position = 0;
    uint8_t nonce[KS_BLOCK_SIZE];
    for (uint64_t index = 0;; index++) {
        const size_t size = index == 0 ? first : later, remaining = item->input_len - position;
        const int last = remaining <= size;
        const size_t length = last ? remaining : size;
        ks_segment_nonce(nonce, prefix, (uint32_t)index, last);
        if (length && ks_ctr_xor(&keys.aes, params->isa, nonce, 0, item->input + position, out, length,
                                 KS_STORE_CACHED) != KS_OK) {
            status = KS_SEALED_ERR_ISA;
            break;
        }
        ks_tag(&keys.mac, nonce, out, length, out + length);
        out += length + KS_SEALED_TAG_SIZE;
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

/* Try the candidates on segment 0; on success `keys` holds the verifying one's keys. */
static int ks_select(const ks_sealed_params *params, ks_sha256_compress_fn compress,
                     const ks_sealed_ikm *candidates, size_t candidate_count, ks_sealed_item *item,
                     const uint8_t *salt, const uint8_t nonce[KS_BLOCK_SIZE], const uint8_t *segment,
                     size_t body_len, ks_message_keys *keys) {
    for (size_t c = 0; c < candidate_count; c++) {
        if (ks_derive(params, compress, &candidates[c], salt, item->associated_data, item->associated_data_len,
                      keys) == KS_SEALED_OK &&
            ks_verify(&keys->mac, nonce, segment, body_len)) {
            item->candidate = (uint32_t)c;
            return 1;
        }
        ks_sha256_wipe(keys, sizeof *keys);
    }
    return 0;
}

static ks_sealed_status ks_open_one(const ks_sealed_params *params, ks_sha256_compress_fn compress,
                                    const ks_sealed_ikm *candidates, size_t candidate_count,
                                    ks_sealed_item *item) {
    const size_t header = ks_sealed_header_length(params), length = item->input_len;
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
        if (segment_len < KS_SEALED_TAG_SIZE) {
            item->status = KS_ITEM_SHORT_SEGMENT;
            break;
        }
        const size_t body = segment_len - KS_SEALED_TAG_SIZE;
        ks_segment_nonce(nonce, prefix, (uint32_t)index, last);
        if (!have_keys) {
            have_keys = ks_select(params, compress, candidates, candidate_count, item, salt, nonce, in + position,
                                  body, &keys);
            if (!have_keys) {
                item->status = KS_ITEM_NO_KEY;
                break;
            }
        } else if (!ks_verify(&keys.mac, nonce, in + position, body)) {
            item->status = KS_ITEM_BAD_TAG;
            break;
        }
        if (item->output != NULL && body) {
            if (written + body > item->output_len) {
                status = KS_SEALED_ERR_OUTPUT;
                break;
            }
            if (ks_ctr_xor(&keys.aes, params->isa, nonce, 0, in + position, item->output + written, body,
                           KS_STORE_CACHED) != KS_OK) {
                status = KS_SEALED_ERR_ISA;
                break;
            }
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
