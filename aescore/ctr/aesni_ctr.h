/*
 * aesni_ctr.h - AES-CTR keystream XOR with AES-NI, VAES-256 and VAES-512 (x86-64 intrinsics only).
 *
 * The C side is deliberately small: no allocation, no threads, no Python. Every function returns a named
 * ks_status code; the Cython module (_aesni.pyx) turns codes into exceptions, validates arguments, releases
 * the GIL and splits large inputs across threads.
 *
 * Counter layout: keystream block i is AES_K(C0 + i), where C0 is the 16-byte initial counter read as a
 * big-endian 128-bit integer and the addition wraps modulo 2**128 (pyaes's Counter, pyperformance's
 * crypto_pyaes). The byte `offset` of ks_ctr_xor is the keystream position of in[0]; block index offset / 16,
 * byte offset % 16 within it.
 */
#ifndef KS_AESNI_CTR_H
#define KS_AESNI_CTR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes (never bare numbers). */
typedef enum {
    KS_OK = 0,
    KS_ERR_NULL = 1,          /* a required pointer was NULL */
    KS_ERR_KEY_SIZE = 2,      /* key length is not 16, 24 or 32 bytes */
    KS_ERR_KEY_STATE = 3,     /* the expanded key was never initialised (round count invalid) */
    KS_ERR_ISA = 4,           /* unknown ISA path, or one the CPU does not support */
    KS_ERR_RANGE = 5,         /* offset + length exceeds 2**64 bytes of keystream (GCM: data too long) */
    KS_ERR_TAG = 6            /* GCM: the tag does not verify (aesni_gcm.h) */
} ks_status;

/* Code paths, also usable as bits of the mask returned by ks_cpu_isas(). */
typedef enum {
    KS_ISA_NONE = 0,
    KS_ISA_AESNI = 1,         /* 128-bit AES-NI + SSSE3/SSE4.1, 8 blocks in flight */
    KS_ISA_VAES256 = 2,       /* AVX2 + VAES on ymm, 16 blocks in flight */
    KS_ISA_VAES512 = 4        /* AVX-512F/BW + VAES on zmm, 32 blocks in flight, masked tail */
} ks_isa;

/* How ks_ctr_xor writes `out`. */
typedef enum {
    KS_STORE_CACHED = 0,      /* ordinary stores: the output stays in the caches for whoever reads it next */
    KS_STORE_STREAM = 1       /* non-temporal stores where the path has them (VAES-512), for outputs much
                                 larger than the caches: no read-for-ownership, the caller's data not evicted */
} ks_store;

#define KS_BLOCK_SIZE 16
#define KS_MAX_ROUNDS 14

/* An expanded AES encryption key. Immutable after ks_expand_key; safe to share between threads. */
typedef struct {
    uint8_t round_keys[(KS_MAX_ROUNDS + 1) * KS_BLOCK_SIZE];
    uint32_t rounds;          /* 10, 12 or 14; anything else means "not initialised" */
} ks_aes_key;

/* Bit mask of ks_isa values this CPU and OS can run (CPUID + XGETBV; never executes a missing instruction). */
unsigned ks_cpu_isas(void);

/* 1 when the CPU has AVX2 and the OS saves YMM state (the same CPUID + XGETBV reading), else 0: for the
 * non-AES code that uses VEX/ymm instructions (sha256.c), which must not run them on a CPU or OS without. */
int ks_cpu_avx2(void);

/* Expand a 16/24/32-byte key. Requires KS_ISA_AESNI. */
ks_status ks_expand_key(const uint8_t *key, size_t key_len, ks_aes_key *out);

/*
 * XOR `len` bytes of `in` with the keystream starting at byte `offset`, writing to `out`.
 * `out` may equal `in` (in place); other overlaps are not supported. Reads exactly in[0..len) and writes
 * exactly out[0..len). Requires offset + len <= 2**64 (KS_ERR_RANGE otherwise).
 */
ks_status ks_ctr_xor(const ks_aes_key *key, ks_isa isa, const uint8_t initial_counter[KS_BLOCK_SIZE],
                     uint64_t offset, const uint8_t *in, uint8_t *out, size_t len, ks_store store);

/* Overwrite a key schedule with zeros in a way the compiler cannot elide. */
void ks_wipe_key(ks_aes_key *key);

#ifdef __cplusplus
}
#endif

#endif /* KS_AESNI_CTR_H */
