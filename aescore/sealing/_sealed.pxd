# C declarations for the sealed batch core: sealed_batch.h (seal/open many messages), sha256.h (SHA-256
# paths), hkdf.h (HKDF-SHA256 into a caller's buffer) and the AES path names of aesni_ctr.h.

from libc.stdint cimport uint8_t, uint32_t


cdef extern from "aesni_ctr.h" nogil:
    ctypedef enum ks_isa:
        KS_ISA_NONE
        KS_ISA_AESNI
        KS_ISA_VAES256
        KS_ISA_VAES512

    unsigned ks_cpu_isas()


cdef extern from "sha256.h" nogil:
    ctypedef enum ks_sha256_impl:
        KS_SHA256_NONE
        KS_SHA256_SCALAR
        KS_SHA256_SHANI
        KS_SHA256_BMI2
        KS_SHA256_AVX2

    ctypedef void (*ks_sha256_compress_fn)(uint32_t *state, const uint8_t *blocks, size_t count)

    ctypedef struct ks_sha256_ctx:
        pass

    ctypedef struct ks_hmac_key:
        pass

    unsigned ks_sha256_impls()
    ks_sha256_compress_fn ks_sha256_compress_of(ks_sha256_impl impl)
    void ks_sha256_init(ks_sha256_ctx *ctx, ks_sha256_compress_fn compress)
    void ks_sha256_update(ks_sha256_ctx *ctx, const uint8_t *data, size_t length)
    void ks_sha256_final(ks_sha256_ctx *ctx, uint8_t *digest)
    void ks_hmac_init(ks_hmac_key *hmac, ks_sha256_compress_fn compress, const uint8_t *key, size_t key_len)
    void ks_hmac_begin(const ks_hmac_key *hmac, ks_sha256_ctx *ctx)
    void ks_hmac_end(const ks_hmac_key *hmac, ks_sha256_ctx *ctx, uint8_t *tag)
    void ks_sha256_wipe(void *pointer, size_t length)


cdef extern from "hkdf.h" nogil:
    ctypedef enum ks_hkdf_status:
        KS_HKDF_OK
        KS_HKDF_ERR_NULL
        KS_HKDF_ERR_LENGTH

    const size_t KS_HKDF_SHA256_MAX_LENGTH

    ks_hkdf_status ks_hkdf_sha256(ks_sha256_compress_fn compress, const uint8_t *ikm, size_t ikm_len,
                                  const uint8_t *salt, size_t salt_len, const uint8_t *info, size_t info_len,
                                  uint8_t *out, size_t out_len)


cdef extern from "sealed_batch.h" nogil:
    ctypedef enum ks_sealed_status:
        KS_SEALED_OK
        KS_SEALED_ERR_NULL
        KS_SEALED_ERR_PARAMS
        KS_SEALED_ERR_IKM
        KS_SEALED_ERR_ISA
        KS_SEALED_ERR_OUTPUT

    ctypedef enum ks_sealed_item_status:
        KS_ITEM_OK
        KS_ITEM_SHORT_HEADER
        KS_ITEM_BAD_HEADER
        KS_ITEM_MISSING_SEGMENT
        KS_ITEM_SHORT_SEGMENT
        KS_ITEM_NO_KEY
        KS_ITEM_BAD_TAG
        KS_ITEM_TOO_MANY_SEGMENTS

    ctypedef enum ks_sealed_scheme:
        KS_SCHEME_CTR_HMAC
        KS_SCHEME_GCM

    ctypedef struct ks_sealed_params:
        size_t derived_size
        size_t segment_size
        ks_isa isa
        ks_sha256_impl sha
        ks_sealed_scheme scheme

    ctypedef struct ks_sealed_ikm:
        const uint8_t *material
        size_t length

    ctypedef struct ks_sealed_item:
        const uint8_t *input
        size_t input_len
        const uint8_t *associated_data
        size_t associated_data_len
        const uint8_t *random
        uint8_t *output
        size_t output_len
        int status
        uint32_t segment
        uint32_t candidate

    size_t ks_sealed_header_length(const ks_sealed_params *params)
    size_t ks_sealed_tag_length(const ks_sealed_params *params)
    ks_sealed_status ks_sealed_check(const ks_sealed_params *params)
    ks_sealed_item_status ks_sealed_ciphertext_length(const ks_sealed_params *params, size_t plaintext_len,
                                                      size_t *out)
    ks_sealed_item_status ks_sealed_plaintext_length(const ks_sealed_params *params, size_t ciphertext_len,
                                                     size_t *out, uint32_t *segment)
    ks_sealed_status ks_sealed_seal(const ks_sealed_params *params, const ks_sealed_ikm *ikm,
                                    ks_sealed_item *items, size_t count)
    ks_sealed_status ks_sealed_open(const ks_sealed_params *params, const ks_sealed_ikm *candidates,
                                    size_t candidate_count, ks_sealed_item *items, size_t count)
