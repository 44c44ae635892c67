/*
 * aesni_gcm.h - AES-GCM (NIST SP 800-38D) with CTR and GHASH fused in one pass: 128-bit AES-NI + PCLMULQDQ,
 * VAES + VPCLMULQDQ on ymm, and on zmm (x86-64 intrinsics only).
 *
 * Like aesni_ctr.h: no allocation, no threads, no Python; every function returns a ks_status code and the
 * Cython module (_aesni.pyx, _aesni_gcm.pxi) validates arguments, releases the GIL and raises exceptions.
 *
 * Only 12-byte nonces and 16-byte tags. With nonce N, J0 = N || 0x00000001, the tag mask is AES_K(J0) and
 * data block i (from 0) is XORed with AES_K(N || BE32(i + 2)); a message holds at most 2**32 - 2 blocks
 * (KS_GCM_MAX_DATA bytes), so the 32-bit counter never wraps.
 */
#ifndef KS_AESNI_GCM_H
#define KS_AESNI_GCM_H

#include "aesni_ctr.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KS_GCM_NONCE_SIZE 12
#define KS_GCM_TAG_SIZE 16
/* Powers of H kept per key: a batch of n blocks (up to 32, on zmm) is hashed with H^n..H^1 and a single
 * reduction. */
#define KS_GCM_POWERS 32
/* Longest message: 2**32 - 2 blocks. */
#define KS_GCM_MAX_DATA ((((uint64_t)1) << 36) - 32)

/*
 * GHASH key material: H^32, H^31, ..., H^1, each multiplied by x^-1 and stored bit-reflected (the block
 * byte-reversed and read as a little-endian 128-bit integer, so a carry-less multiply of two such values is
 * the field product without the one-bit shift), followed by three zero blocks so vector loads for a short
 * tail stay inside the array; and the same powers with their two halves XORed, for Karatsuba. Immutable after ks_ghash_init; safe to share between threads.
 */
typedef struct {
    uint8_t powers[(KS_GCM_POWERS + 3) * KS_BLOCK_SIZE];
    /* For Karatsuba: entry i holds (high qword ^ low qword) of powers[i] in both qwords. */
    uint8_t folded[(KS_GCM_POWERS + 3) * KS_BLOCK_SIZE];
} ks_ghash_key;

/* An AES-GCM key: the expanded AES key and the GHASH key for H = AES_K(0^128). */
typedef struct {
    ks_aes_key aes;
    ks_ghash_key ghash;
} ks_gcm_key;

/* Bit mask of ks_isa paths that can run GCM here: ks_cpu_isas() plus PCLMULQDQ (aesni) or VPCLMULQDQ. */
unsigned ks_gcm_cpu_isas(void);

/* 1 if the aesni (xmm) path runs its VEX-encoded build (AVX present and enabled by the OS, and the environment
 * variable KEYSTREAM_GCM_XMM not "sse"), 0 if its legacy-SSE build. Same results either way. */
int ks_gcm_xmm_vex(void);

/* Prepare GHASH under the 16-byte hash key h. Requires KS_ISA_AESNI in ks_gcm_cpu_isas(). */
ks_status ks_ghash_init(const uint8_t h[KS_BLOCK_SIZE], ks_ghash_key *out);

/* Expand a 16/24/32-byte AES key and compute its GHASH key. */
ks_status ks_gcm_init(const uint8_t *key, size_t key_len, ks_gcm_key *out);

/* GHASH_H(A, C): A and C each zero-padded to whole blocks, then the block len64(A) || len64(C) in bits. */
ks_status ks_ghash(const ks_ghash_key *key, ks_isa isa, const uint8_t *aad, size_t aad_len, const uint8_t *data,
                   size_t len, uint8_t out[KS_BLOCK_SIZE]);

/*
 * Encrypt len bytes of in to out (out may equal in; no other overlap) and write the 16-byte tag.
 * KS_ERR_RANGE if len > KS_GCM_MAX_DATA.
 */
ks_status ks_gcm_seal(const ks_gcm_key *key, ks_isa isa, const uint8_t nonce[KS_GCM_NONCE_SIZE],
                      const uint8_t *aad, size_t aad_len, const uint8_t *in, uint8_t *out, size_t len,
                      uint8_t tag[KS_GCM_TAG_SIZE]);

/*
 * Decrypt len bytes of in to out (out may equal in; no other overlap) and check the tag in constant time.
 * KS_ERR_TAG if it does not verify: out[0..len) is then zeroed, so no unauthenticated plaintext remains.
 */
ks_status ks_gcm_open(const ks_gcm_key *key, ks_isa isa, const uint8_t nonce[KS_GCM_NONCE_SIZE],
                      const uint8_t *aad, size_t aad_len, const uint8_t *in, uint8_t *out, size_t len,
                      const uint8_t tag[KS_GCM_TAG_SIZE]);

/*
 * An AES-GCM encryption fed in pieces: ks_gcm_seal_start, ks_gcm_seal_update for each piece (any size, even 0),
 * ks_gcm_seal_finish for the tag. The ciphertext and tag are those of ks_gcm_seal over the concatenated pieces,
 * and each update writes exactly its own piece's ciphertext: whole blocks go through the same stitched bulk
 * code as ks_gcm_seal; a block split between two updates is finished with the keystream block kept here.
 * Holds keystream and the tag mask AES_K(J0): finish wipes it; ks_gcm_seal_wipe wipes an abandoned one.
 * Encryption only: a decryption fed in pieces would hand out plaintext before its tag is checked.
 * Never start two encryptions with the same (key, nonce).
 */
typedef struct {
    uint8_t counter[KS_BLOCK_SIZE]; /* reflected counter block of the last data block used (J0 at the start) */
    uint8_t mask[KS_BLOCK_SIZE];    /* AES_K(J0), XORed into the tag */
    uint8_t acc[KS_BLOCK_SIZE];     /* reflected GHASH of the associated data and the whole blocks so far */
    uint8_t stream[KS_BLOCK_SIZE];  /* keystream of the block begun by the last update */
    uint8_t partial[KS_BLOCK_SIZE]; /* that block's ciphertext so far, zeros after it */
    uint64_t aad_len;
    uint64_t len;                   /* data bytes encrypted so far */
    uint32_t partial_len;           /* bytes of that block used: 0..15 */
    uint32_t state;                 /* nonzero between start and finish */
} ks_gcm_seal_state;

/* Start encrypting one message under key with nonce, authenticating aad. KS_ERR_ISA: a path this CPU lacks. */
ks_status ks_gcm_seal_start(ks_gcm_seal_state *state, const ks_gcm_key *key, ks_isa isa,
                            const uint8_t nonce[KS_GCM_NONCE_SIZE], const uint8_t *aad, size_t aad_len);

/*
 * Encrypt the next len bytes of in to out (out may equal in; no other overlap). key is the one given to
 * start; isa may differ between calls (every path gives the same bytes). KS_ERR_RANGE, with nothing written and
 * the state unchanged, if the message would pass KS_GCM_MAX_DATA; KS_ERR_KEY_STATE if not started or finished.
 */
ks_status ks_gcm_seal_update(ks_gcm_seal_state *state, const ks_gcm_key *key, ks_isa isa, const uint8_t *in,
                             uint8_t *out, size_t len);

/* Write the 16-byte tag and wipe the state (KS_ERR_KEY_STATE if it was not started or is finished). */
ks_status ks_gcm_seal_finish(ks_gcm_seal_state *state, const ks_gcm_key *key, uint8_t tag[KS_GCM_TAG_SIZE]);

/* Overwrite an encryption's state with zeros (an encryption abandoned before finish). */
void ks_gcm_seal_wipe(ks_gcm_seal_state *state);

/* Overwrite a GCM or GHASH key with zeros in a way the compiler cannot elide. */
void ks_gcm_wipe(ks_gcm_key *key);
void ks_ghash_wipe(ks_ghash_key *key);

#ifdef __cplusplus
}
#endif

#endif /* KS_AESNI_GCM_H */
