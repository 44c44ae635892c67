/*
 * sha256.h - SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104) for the sealed batch core (sealed_batch.c).
 *
 * Four compression functions: SHA-NI intrinsics (SHA256RNDS2/MSG1/MSG2, on this project's Zen 3 hosts), a
 * portable scalar one, the same scalar rounds compiled for BMI2, and BMI2 rounds beside a message schedule
 * computed four words at a time in vector registers (AVX2; CPUs without SHA-NI, such as Intel Xeons before
 * Ice Lake). The caller picks one per context from ks_sha256_impls() (CPUID, and XGETBV for AVX2), so no
 * path runs on a CPU without its instructions; any can be forced for tests. No allocation, no Python, no globals
 * besides the cached CPUID result. Not a general-purpose hash API: lengths are size_t, one message at a time.
 */
#ifndef KS_SHA256_H
#define KS_SHA256_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KS_SHA256_BLOCK_SIZE 64
#define KS_SHA256_DIGEST_SIZE 32

/* Compression implementations, also bits of the mask returned by ks_sha256_impls(). */
typedef enum {
    KS_SHA256_NONE = 0,
    KS_SHA256_SCALAR = 1,     /* portable C, every CPU */
    KS_SHA256_SHANI = 2,      /* SHA-NI + SSE4.1 + SSSE3 intrinsics */
    KS_SHA256_BMI2 = 4,       /* the scalar rounds compiled for BMI2 (RORX) */
    KS_SHA256_AVX2 = 8        /* BMI2 rounds with the message schedule in AVX2 (VEX xmm) registers */
} ks_sha256_impl;

typedef void (*ks_sha256_compress_fn)(uint32_t state[8], const uint8_t *blocks, size_t count);

typedef struct {
    uint32_t state[8];
    uint8_t buffer[KS_SHA256_BLOCK_SIZE];
    size_t buffered;          /* bytes waiting in buffer (< 64) */
    uint64_t length;          /* bytes hashed so far */
    ks_sha256_compress_fn compress;
} ks_sha256_ctx;

/* An HMAC-SHA256 key: the hash states after the inner and outer padded key blocks. */
typedef struct {
    ks_sha256_ctx inner;
    ks_sha256_ctx outer;
} ks_hmac_key;

/* Bit mask of ks_sha256_impl values this CPU can run (KS_SHA256_SCALAR always). */
unsigned ks_sha256_impls(void);

/* The compression function of `impl`, or NULL when `impl` is unknown or not supported by this CPU. */
ks_sha256_compress_fn ks_sha256_compress_of(ks_sha256_impl impl);

void ks_sha256_init(ks_sha256_ctx *ctx, ks_sha256_compress_fn compress);
void ks_sha256_update(ks_sha256_ctx *ctx, const uint8_t *data, size_t len);
void ks_sha256_final(ks_sha256_ctx *ctx, uint8_t digest[KS_SHA256_DIGEST_SIZE]);

/* Precompute HMAC-SHA256 under `key` (any length; longer than 64 bytes is hashed first). */
void ks_hmac_init(ks_hmac_key *hmac, ks_sha256_compress_fn compress, const uint8_t *key, size_t key_len);
/* Start a message: `ctx` = the inner state, ready for ks_sha256_update. */
void ks_hmac_begin(const ks_hmac_key *hmac, ks_sha256_ctx *ctx);
/* Finish a message started with ks_hmac_begin. */
void ks_hmac_end(const ks_hmac_key *hmac, ks_sha256_ctx *ctx, uint8_t tag[KS_SHA256_DIGEST_SIZE]);

/* Overwrite `len` bytes with zeros in a way the compiler cannot elide (key material, states). */
void ks_sha256_wipe(void *pointer, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* KS_SHA256_H */
