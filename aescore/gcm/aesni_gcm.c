/*
 * aesni_gcm.c - AES-GCM with AES-NI + PCLMULQDQ (xmm), VAES + VPCLMULQDQ (ymm, zmm); see aesni_gcm.h.
 *
 * GHASH arithmetic. Blocks are byte-reversed on load, so bit j of the 128-bit little-endian value is the
 * coefficient of x^(127-j) ("bit-reflected"). A carry-less multiply of two reflected values is the reflected
 * 256-bit product times x, so the key powers are stored premultiplied by x^-1 and the product needs no shift.
 * Reduction modulo x^128 + x^7 + x^2 + x + 1 folds the low 64 bits twice, each fold a swap of the qword
 * halves plus one carry-less multiply by 0xc2 << 56 (the reflected x + x^2 + x^7, the shift included).
 *
 * Throughput. A batch's blocks are multiplied by the matching powers H^n..H^1, the partial products summed
 * (Karatsuba: lo, hi and the product of the folded halves, three carry-less multiplies per block) and reduced
 * once. Every path stitches GHASH into CTR, as OpenSSL's aesni-gcm-x86_64 does: the carry-less multiplies of
 * one batch's ciphertext sit between the AES rounds of a batch of counter blocks, so the AES units and the
 * carry-less multiplier work side by side instead of one after the other. Decryption hashes each batch's
 * ciphertext during its own rounds (read before the plaintext overwrites it in place); encryption hashes
 * batch i-1 during batch i and the last batch on its own. Batches: 8 blocks on xmm (ks_aes8_ghash8_g128;
 * 0.78x OpenSSL before stitching, 1.08x after, on a Xeon without VAES; a VEX-encoded build for CPUs with
 * AVX), 16 blocks in 8 ymm (ks_aes8_ghash16_g256; the hashed blocks come from memory, 16 ymm registers
 * leave no room for them), 32 blocks in 8 zmm (ks_aes_ghash_g512; the hashed ciphertext stays in registers).
 * Unstitched, the VAES paths relied on the out-of-order core to overlap the two and were slower than
 * OpenSSL on a Zen 4 (AES-256, 1 MiB: 0.9x encrypting); stitched they measure 1.24x (zmm) and 1.05x (ymm)
 * there, see docs/aescore.md.
 *
 * Counters: the counter block is kept byte-reversed, so the big-endian 32-bit counter is the lowest dword of
 * each lane and a PADDD is exactly inc32.
 */
#include "aesni_gcm.h"

#include <cpuid.h>
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#define KS_TARGET_G128 __attribute__((target("aes,pclmul,sse4.1,ssse3")))
/* The same 128-bit path with VEX encoding (three-operand forms, no register copies): needs AVX, not AVX2. */
#define KS_TARGET_G128V __attribute__((target("aes,pclmul,sse4.1,ssse3,avx")))
#define KS_TARGET_G256 __attribute__((target("aes,pclmul,sse4.1,ssse3,avx2,vaes,vpclmulqdq")))
#define KS_TARGET_G512 __attribute__((target("aes,pclmul,sse4.1,ssse3,avx2,vaes,vpclmulqdq,avx512f,avx512bw")))
#define KS_INLINE static inline __attribute__((always_inline))
#define KS_POLY_HIGH ((long long)0xC200000000000000ULL)
/* From a pointer into ks_ghash_key.powers to the same entry of ks_ghash_key.folded. */
#define KS_FOLDED_OFFSET ((KS_GCM_POWERS + 3) * KS_BLOCK_SIZE)
/* The entry of ks_ghash_key.powers (or .folded) holding H^n: a batch of n blocks is hashed from there on. */
#define KS_POWERS_FROM(powers, n) ((powers) + KS_BLOCK_SIZE * (KS_GCM_POWERS - (n)))

static void ks_burn(void *pointer, size_t len) {
    memset(pointer, 0, len);
    __asm__ volatile("" : : "r"(pointer) : "memory");
}

static unsigned ks_gcm_detect(void) {
    unsigned eax, ebx, ecx, edx;
    unsigned result = ks_cpu_isas();
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !((ecx >> 1) & 1)) { /* PCLMULQDQ */
        return 0;
    }
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) || !((ecx >> 10) & 1)) { /* VPCLMULQDQ */
        result &= KS_ISA_AESNI;
    }
    return result;
}

/* See ks_gcm_xmm_vex: AVX with the OS saving YMM state, and KEYSTREAM_GCM_XMM not "sse" (the switch that
 * forces, and lets tests reach, the legacy-SSE build). Read once, like the ISAs. */
static int ks_gcm_detect_vex(void) {
    unsigned eax, ebx, ecx, edx;
    const char *setting = getenv("KEYSTREAM_GCM_XMM");
    if (setting != NULL && strcmp(setting, "sse") == 0) {
        return 0;
    }
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !((ecx >> 27) & 1) || !((ecx >> 28) & 1)) { /* OSXSAVE, AVX */
        return 0;
    }
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return (eax & 0x6) == 0x6; /* XMM and YMM state enabled */
}

int ks_gcm_xmm_vex(void) {
    static int cached = -1;
    int value = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (value < 0) {
        value = ks_gcm_detect_vex();
        __atomic_store_n(&cached, value, __ATOMIC_RELAXED);
    }
    return value;
}

unsigned ks_gcm_cpu_isas(void) {
    /* Computed once: CPUID is slow (a VM exit under most hypervisors), and this runs on every call. */
    static int cached = -1;
    int value = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (value < 0) {
        value = (int)ks_gcm_detect();
        __atomic_store_n(&cached, value, __ATOMIC_RELAXED);
    }
    return (unsigned)value;
}

/* ------------------------------------------------------------------------------------------------------ */
/* 128-bit helpers (also used by the wider paths for set-up and the final block)                          */
/* ------------------------------------------------------------------------------------------------------ */

KS_TARGET_G128 KS_INLINE __m128i ks_swap128(void) {
    return _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

/* Karatsuba: lo += a0 h0, hi += a1 h1, mi += (a0 + a1)(h0 + h1); the caller adds lo + hi to mi once per sum. */
KS_TARGET_G128 KS_INLINE void ks_mul_add128(__m128i a, __m128i h, __m128i h_folded, __m128i *lo, __m128i *mi,
                                            __m128i *hi) {
    *lo = _mm_xor_si128(*lo, _mm_clmulepi64_si128(a, h, 0x00));
    *hi = _mm_xor_si128(*hi, _mm_clmulepi64_si128(a, h, 0x11));
    *mi = _mm_xor_si128(*mi, _mm_clmulepi64_si128(_mm_xor_si128(a, _mm_shuffle_epi32(a, 0x4e)), h_folded, 0x00));
}

/* Finish Karatsuba and reduce the 256-bit lo + mi x^64 + hi x^128 modulo the GCM polynomial. */
KS_TARGET_G128 KS_INLINE __m128i ks_reduce128(__m128i lo, __m128i mi, __m128i hi) {
    const __m128i poly = _mm_set_epi64x(KS_POLY_HIGH, 1);
    mi = _mm_xor_si128(mi, _mm_xor_si128(lo, hi));
    mi = _mm_xor_si128(mi, _mm_xor_si128(_mm_shuffle_epi32(lo, 0x4e), _mm_clmulepi64_si128(lo, poly, 0x10)));
    return _mm_xor_si128(hi, _mm_xor_si128(_mm_shuffle_epi32(mi, 0x4e), _mm_clmulepi64_si128(mi, poly, 0x10)));
}

KS_TARGET_G128 KS_INLINE __m128i ks_fold_halves(__m128i h) {
    return _mm_xor_si128(h, _mm_shuffle_epi32(h, 0x4e));
}

KS_TARGET_G128 KS_INLINE __m128i ks_mul128(__m128i a, __m128i h) {
    __m128i lo = _mm_setzero_si128(), mi = lo, hi = lo;
    ks_mul_add128(a, h, ks_fold_halves(h), &lo, &mi, &hi);
    return ks_reduce128(lo, mi, hi);
}

KS_TARGET_G128 KS_INLINE __m128i ks_power(const ks_ghash_key *key, int exponent) {
    return _mm_loadu_si128((const __m128i *)(key->powers + KS_BLOCK_SIZE * (KS_GCM_POWERS - exponent)));
}

KS_TARGET_G128 KS_INLINE __m128i ks_power_folded(const ks_ghash_key *key, int exponent) {
    return _mm_loadu_si128((const __m128i *)(key->folded + KS_BLOCK_SIZE * (KS_GCM_POWERS - exponent)));
}

KS_TARGET_G128 static __m128i ks_encrypt_block(const ks_aes_key *key, __m128i block) {
    const int rounds = (int)key->rounds;
    block = _mm_xor_si128(block, _mm_loadu_si128((const __m128i *)key->round_keys));
    for (int r = 1; r < rounds; r++) {
        block = _mm_aesenc_si128(block, _mm_loadu_si128((const __m128i *)(key->round_keys + KS_BLOCK_SIZE * r)));
    }
    return _mm_aesenclast_si128(block, _mm_loadu_si128((const __m128i *)(key->round_keys + KS_BLOCK_SIZE * rounds)));
}

KS_TARGET_G128 ks_status ks_ghash_init(const uint8_t h[KS_BLOCK_SIZE], ks_ghash_key *out) {
    if (h == NULL || out == NULL) {
        return KS_ERR_NULL;
    }
    if (!(ks_gcm_cpu_isas() & KS_ISA_AESNI)) {
        return KS_ERR_ISA;
    }
    uint64_t halves[2];
    const __m128i reflected = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)h), ks_swap128());
    _mm_storeu_si128((__m128i *)halves, reflected);
    /* H * x^-1: a left shift of the reflected value; the bit shifted out (x^0) comes back as x^-1. */
    const uint64_t carry = halves[1] >> 63;
    halves[1] = (halves[1] << 1) | (halves[0] >> 63);
    halves[0] <<= 1;
    halves[1] ^= (uint64_t)KS_POLY_HIGH & (0 - carry);
    halves[0] ^= carry;
    const __m128i first = _mm_loadu_si128((const __m128i *)halves);
    __m128i power = first;
    memset(out->powers, 0, sizeof out->powers);
    memset(out->folded, 0, sizeof out->folded);
    for (int exponent = 1; exponent <= KS_GCM_POWERS; exponent++) {
        _mm_storeu_si128((__m128i *)(out->powers + KS_BLOCK_SIZE * (KS_GCM_POWERS - exponent)), power);
        _mm_storeu_si128((__m128i *)(out->folded + KS_BLOCK_SIZE * (KS_GCM_POWERS - exponent)), ks_fold_halves(power));
        power = ks_mul128(power, first);
    }
    ks_burn(halves, sizeof halves);
    return KS_OK;
}

KS_TARGET_G128 ks_status ks_gcm_init(const uint8_t *key, size_t key_len, ks_gcm_key *out) {
    if (key == NULL || out == NULL) {
        return KS_ERR_NULL;
    }
    if (!(ks_gcm_cpu_isas() & KS_ISA_AESNI)) {
        return KS_ERR_ISA;
    }
    ks_status status = ks_expand_key(key, key_len, &out->aes);
    if (status != KS_OK) {
        return status;
    }
    uint8_t h[KS_BLOCK_SIZE];
    _mm_storeu_si128((__m128i *)h, ks_encrypt_block(&out->aes, _mm_setzero_si128()));
    status = ks_ghash_init(h, &out->ghash);
    ks_burn(h, sizeof h);
    return status;
}

void ks_gcm_wipe(ks_gcm_key *key) {
    if (key != NULL) {
        ks_burn(key, sizeof *key);
    }
}

void ks_ghash_wipe(ks_ghash_key *key) {
    if (key != NULL) {
        ks_burn(key, sizeof *key);
    }
}

/* Absorb the final lengths block and return the reflected GHASH value as a normal block. */
KS_TARGET_G128 KS_INLINE __m128i ks_ghash_finish(const ks_ghash_key *key, __m128i acc, uint64_t aad_len, uint64_t len) {
    acc = _mm_xor_si128(acc, _mm_set_epi64x((long long)(aad_len * 8), (long long)(len * 8)));
    return _mm_shuffle_epi8(ks_mul128(acc, ks_power(key, 1)), ks_swap128());
}

/* ------------------------------------------------------------------------------------------------------ */
/* Shared tail helper                                                                                     */
/* ------------------------------------------------------------------------------------------------------ */

/* out[0..n) = in[0..n) ^ stream[0..n); touches nothing else of in/out. */
KS_TARGET_G128 KS_INLINE void ks_xor_stream(const uint8_t *in, uint8_t *out, const uint8_t *stream, size_t n) {
    size_t i = 0;
    for (; i + KS_BLOCK_SIZE <= n; i += KS_BLOCK_SIZE) {
        const __m128i data = _mm_loadu_si128((const __m128i *)(in + i));
        _mm_storeu_si128((__m128i *)(out + i), _mm_xor_si128(data, _mm_loadu_si128((const __m128i *)(stream + i))));
    }
    for (; i < n; i++) {
        out[i] = in[i] ^ stream[i];
    }
}

/* ------------------------------------------------------------------------------------------------------ */
/* 128-bit AES-NI + PCLMULQDQ: batches of 8 blocks, hashed with H^8..H^1 and one reduction, stitched      */
/* ------------------------------------------------------------------------------------------------------ */

KS_TARGET_G128 KS_INLINE __m128i ks_ghash_batch128(const ks_ghash_key *key, __m128i acc, const uint8_t *data, int n) {
    const __m128i swap = ks_swap128();
    __m128i lo = _mm_setzero_si128(), mi = lo, hi = lo;
#pragma GCC unroll 8
    for (int j = 0; j < n; j++) {
        __m128i x = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(data + KS_BLOCK_SIZE * j)), swap);
        if (j == 0) {
            x = _mm_xor_si128(x, acc);
        }
        ks_mul_add128(x, ks_power(key, n - j), ks_power_folded(key, n - j), &lo, &mi, &hi);
    }
    return ks_reduce128(lo, mi, hi);
}

KS_TARGET_G128 static __m128i ks_ghash_g128(const ks_ghash_key *key, __m128i acc, const uint8_t *data, size_t len) {
    for (; len >= 8 * KS_BLOCK_SIZE; data += 8 * KS_BLOCK_SIZE, len -= 8 * KS_BLOCK_SIZE) {
        acc = ks_ghash_batch128(key, acc, data, 8);
    }
    if (len) {
        uint8_t buffer[8 * KS_BLOCK_SIZE] = {0}; /* zero padding of the last block; public data only */
        memcpy(buffer, data, len);
        acc = ks_ghash_batch128(key, acc, buffer, (int)((len + KS_BLOCK_SIZE - 1) / KS_BLOCK_SIZE));
    }
    return acc;
}

KS_TARGET_G128 KS_INLINE void ks_aes8_g128(const __m128i *rk, const int rounds, __m128i *counter, __m128i *x) {
    const __m128i swap = ks_swap128(), one = _mm_set_epi32(0, 0, 0, 1);
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        x[j] = _mm_xor_si128(_mm_shuffle_epi8(*counter, swap), rk[0]);
        *counter = _mm_add_epi32(*counter, one);
    }
#pragma GCC unroll 14
    for (int r = 1; r < rounds; r++) {
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            x[j] = _mm_aesenc_si128(x[j], rk[r]);
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        x[j] = _mm_aesenclast_si128(x[j], rk[rounds]);
    }
}

/* One batch of 8 counter blocks through AES (keystream to x) stitched with the GHASH of the 8 blocks at
 * `hashed`: after each of AES rounds 1..8 comes the Karatsuba multiply of one block (lo, mi, hi), after round
 * 9 the batch's single reduction. The two chains are independent, so the AES unit and the carry-less
 * multiplier work side by side instead of one after the other (as OpenSSL's aesni-gcm-x86_64 does). */
KS_TARGET_G128 KS_INLINE __m128i ks_aes8_ghash8_g128(const __m128i *rk, const int rounds, __m128i *counter,
                                                     __m128i *x, const ks_ghash_key *key, __m128i acc,
                                                     const uint8_t *hashed) {
    const __m128i swap = ks_swap128(), one = _mm_set_epi32(0, 0, 0, 1);
    __m128i lo = _mm_setzero_si128(), mi = lo, hi = lo;
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        x[j] = _mm_xor_si128(_mm_shuffle_epi8(*counter, swap), rk[0]);
        *counter = _mm_add_epi32(*counter, one);
    }
#pragma GCC unroll 14
    for (int r = 1; r < rounds; r++) {
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            x[j] = _mm_aesenc_si128(x[j], rk[r]);
        }
        if (r <= 8) {
            __m128i block = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(hashed + KS_BLOCK_SIZE * (r - 1))), swap);
            if (r == 1) {
                block = _mm_xor_si128(block, acc);
            }
            ks_mul_add128(block, ks_power(key, 9 - r), ks_power_folded(key, 9 - r), &lo, &mi, &hi);
        } else if (r == 9) {
            acc = ks_reduce128(lo, mi, hi);
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        x[j] = _mm_aesenclast_si128(x[j], rk[rounds]);
    }
    return acc;
}

KS_TARGET_G128 KS_INLINE void ks_xor_store8_g128(const __m128i *x, const uint8_t *in, uint8_t *out) {
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        const __m128i data = _mm_loadu_si128((const __m128i *)(in + KS_BLOCK_SIZE * j));
        _mm_storeu_si128((__m128i *)(out + KS_BLOCK_SIZE * j), _mm_xor_si128(data, x[j]));
    }
}

/* Whole batches are stitched: decryption hashes each batch's ciphertext during its own AES rounds (before
 * the plaintext overwrites it in place); encryption hashes batch i-1's ciphertext during batch i's rounds
 * and the last batch's on its own. */
KS_TARGET_G128 KS_INLINE __m128i ks_gcm_g128_body(const ks_gcm_key *key, const int rounds, __m128i counter,
                                                  __m128i acc, const uint8_t *in, uint8_t *out, const size_t len,
                                                  const int decrypt) {
    __m128i rk[KS_MAX_ROUNDS + 1], x[8];
#pragma GCC unroll 15
    for (int r = 0; r <= rounds; r++) {
        rk[r] = _mm_loadu_si128((const __m128i *)(key->aes.round_keys + KS_BLOCK_SIZE * r));
    }
    counter = _mm_add_epi32(counter, _mm_set_epi32(0, 0, 0, 1));
    size_t remaining = len;
    if (decrypt) {
        for (; remaining >= 8 * KS_BLOCK_SIZE; in += 8 * KS_BLOCK_SIZE, out += 8 * KS_BLOCK_SIZE, remaining -= 8 * KS_BLOCK_SIZE) {
            acc = ks_aes8_ghash8_g128(rk, rounds, &counter, x, &key->ghash, acc, in);
            ks_xor_store8_g128(x, in, out);
        }
    } else if (remaining >= 8 * KS_BLOCK_SIZE) {
        ks_aes8_g128(rk, rounds, &counter, x);
        ks_xor_store8_g128(x, in, out);
        in += 8 * KS_BLOCK_SIZE, out += 8 * KS_BLOCK_SIZE, remaining -= 8 * KS_BLOCK_SIZE;
        for (; remaining >= 8 * KS_BLOCK_SIZE; in += 8 * KS_BLOCK_SIZE, out += 8 * KS_BLOCK_SIZE, remaining -= 8 * KS_BLOCK_SIZE) {
            acc = ks_aes8_ghash8_g128(rk, rounds, &counter, x, &key->ghash, acc, out - 8 * KS_BLOCK_SIZE);
            ks_xor_store8_g128(x, in, out);
        }
        acc = ks_ghash_batch128(&key->ghash, acc, out - 8 * KS_BLOCK_SIZE, 8);
    }
    if (remaining) {
        uint8_t stream[8 * KS_BLOCK_SIZE];
        if (decrypt) {
            acc = ks_ghash_g128(&key->ghash, acc, in, remaining);
        }
        ks_aes8_g128(rk, rounds, &counter, x);
        for (int j = 0; j < 8; j++) {
            _mm_storeu_si128((__m128i *)(stream + KS_BLOCK_SIZE * j), x[j]);
        }
        ks_xor_stream(in, out, stream, remaining);
        ks_burn(stream, sizeof stream);
        if (!decrypt) {
            acc = ks_ghash_g128(&key->ghash, acc, out, remaining);
        }
    }
    return acc;
}

/* ------------------------------------------------------------------------------------------------------ */
/* VAES + VPCLMULQDQ on ymm: batches of 16 blocks (8 ymm), hashed with H^16..H^1 and one reduction, stitched */
/* ------------------------------------------------------------------------------------------------------ */

/* Karatsuba partial products of one ymm of data (2 blocks, message byte order) with the 2 powers at `powers`,
 * per 128-bit lane; the first vector of a batch also adds the reflected accumulator `acc` to its first block. */
KS_TARGET_G256 KS_INLINE void ks_mul_add256(__m256i data, __m128i acc, const int first, const uint8_t *powers,
                                            __m256i *lo, __m256i *mi, __m256i *hi) {
    __m256i x = _mm256_shuffle_epi8(data, _mm256_broadcastsi128_si256(ks_swap128()));
    if (first) {
        x = _mm256_xor_si256(x, _mm256_zextsi128_si256(acc));
    }
    const __m256i h = _mm256_loadu_si256((const __m256i *)powers);
    const __m256i h_folded = _mm256_loadu_si256((const __m256i *)(powers + KS_FOLDED_OFFSET));
    *lo = _mm256_xor_si256(*lo, _mm256_clmulepi64_epi128(x, h, 0x00));
    *hi = _mm256_xor_si256(*hi, _mm256_clmulepi64_epi128(x, h, 0x11));
    *mi = _mm256_xor_si256(*mi, _mm256_clmulepi64_epi128(_mm256_xor_si256(x, _mm256_shuffle_epi32(x, 0x4e)), h_folded, 0x00));
    /* Add each product now: left to itself the compiler keeps the products for one XOR tree at the end and,
     * with 16 ymm registers, spills them. */
    __asm__("" : "+x"(*lo), "+x"(*mi), "+x"(*hi));
}

/* Finish Karatsuba, reduce each lane and sum the two lanes. */
KS_TARGET_G256 KS_INLINE __m128i ks_reduce256(__m256i lo, __m256i mi, __m256i hi) {
    const __m256i poly = _mm256_broadcastsi128_si256(_mm_set_epi64x(KS_POLY_HIGH, 1));
    mi = _mm256_xor_si256(mi, _mm256_xor_si256(lo, hi));
    mi = _mm256_xor_si256(mi, _mm256_xor_si256(_mm256_shuffle_epi32(lo, 0x4e), _mm256_clmulepi64_epi128(lo, poly, 0x10)));
    hi = _mm256_xor_si256(hi, _mm256_xor_si256(_mm256_shuffle_epi32(mi, 0x4e), _mm256_clmulepi64_epi128(mi, poly, 0x10)));
    return _mm_xor_si128(_mm256_castsi256_si128(hi), _mm256_extracti128_si256(hi, 1));
}

KS_TARGET_G256 KS_INLINE __m128i ks_ghash_batch256(__m128i acc, const uint8_t *data,
                                                   const uint8_t *powers, int vectors) {
    __m256i lo = _mm256_setzero_si256(), mi = lo, hi = lo;
    /* Keep the 16 key vectors in memory (operands of VPCLMULQDQ) instead of hoisting them into registers
     * around the caller's loop, which would leave too few ymm registers and spill the partial products. */
    __asm__("" : "+r"(powers));
#pragma GCC unroll 8
    for (int v = 0; v < vectors; v++) {
        ks_mul_add256(_mm256_loadu_si256((const __m256i *)(data + 32 * v)), acc, v == 0, powers + 32 * v, &lo, &mi, &hi);
    }
    return ks_reduce256(lo, mi, hi);
}

KS_TARGET_G256 static __m128i ks_ghash_g256(const ks_ghash_key *key, __m128i acc, const uint8_t *data, size_t len) {
    for (; len >= 16 * KS_BLOCK_SIZE; data += 16 * KS_BLOCK_SIZE, len -= 16 * KS_BLOCK_SIZE) {
        acc = ks_ghash_batch256(acc, data, KS_POWERS_FROM(key->powers, 16), 8);
    }
    if (len) {
        uint8_t buffer[16 * KS_BLOCK_SIZE] = {0}; /* public data only */
        memcpy(buffer, data, len);
        const int blocks = (int)((len + KS_BLOCK_SIZE - 1) / KS_BLOCK_SIZE);
        acc = ks_ghash_batch256(acc, buffer, key->powers + KS_BLOCK_SIZE * (KS_GCM_POWERS - blocks), (blocks + 1) / 2);
    }
    return acc;
}

KS_TARGET_G256 KS_INLINE void ks_aes8_g256(const __m256i *rk, const int rounds, __m256i *counter, __m256i *x) {
    const __m256i swap = _mm256_broadcastsi128_si256(ks_swap128()), two = _mm256_set_epi32(0, 0, 0, 2, 0, 0, 0, 2);
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        x[j] = _mm256_xor_si256(_mm256_shuffle_epi8(*counter, swap), rk[0]);
        *counter = _mm256_add_epi32(*counter, two);
    }
#pragma GCC unroll 14
    for (int r = 1; r < rounds; r++) {
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            x[j] = _mm256_aesenc_epi128(x[j], rk[r]);
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        x[j] = _mm256_aesenclast_epi128(x[j], rk[rounds]);
    }
}

/* One stitched batch on ymm: 8 ymm of counter blocks through AES (keystream to x) and, after AES round r, the
 * Karatsuba multiplies of the r-th of the 8 ymm at `hashed` (16 blocks, read from memory: with 16 ymm
 * registers and no AVX-512 there is no room to keep them), after round 9 the batch's single reduction. */
KS_TARGET_G256 KS_INLINE __m128i ks_aes8_ghash16_g256(const __m256i *rk, const int rounds, __m256i *counter, __m256i *x,
                                                      __m128i acc, const uint8_t *hashed, const uint8_t *powers) {
    const __m256i swap = _mm256_broadcastsi128_si256(ks_swap128()), two = _mm256_set_epi32(0, 0, 0, 2, 0, 0, 0, 2);
    __m256i lo = _mm256_setzero_si256(), mi = lo, hi = lo;
    __asm__("" : "+r"(powers)); /* key vectors stay memory operands (see ks_ghash_batch256) */
    /* So do the round keys, loaded once a round: 8 blocks, 3 sums, the hashed vector and its products leave
     * no ymm register for them (kept in registers, they and the products were spilled to the stack). */
    __asm__("" : "+r"(rk));
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        x[j] = _mm256_xor_si256(_mm256_shuffle_epi8(*counter, swap), rk[0]);
        *counter = _mm256_add_epi32(*counter, two);
    }
#pragma GCC unroll 14
    for (int r = 1; r < rounds; r++) {
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            x[j] = _mm256_aesenc_epi128(x[j], rk[r]);
        }
        if (r <= 8) {
            ks_mul_add256(_mm256_loadu_si256((const __m256i *)(hashed + 32 * (r - 1))), acc, r == 1,
                          powers + 32 * (r - 1), &lo, &mi, &hi);
        } else if (r == 9) {
            acc = ks_reduce256(lo, mi, hi);
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        x[j] = _mm256_aesenclast_epi128(x[j], rk[rounds]);
    }
    return acc;
}

KS_TARGET_G256 KS_INLINE void ks_xor_store8_g256(const __m256i *x, const uint8_t *in, uint8_t *out) {
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        const __m256i data = _mm256_loadu_si256((const __m256i *)(in + 32 * j));
        _mm256_storeu_si256((__m256i *)(out + 32 * j), _mm256_xor_si256(data, x[j]));
    }
}

KS_TARGET_G256 KS_INLINE __m128i ks_gcm_g256_body(const ks_gcm_key *key, const int rounds, __m128i counter,
                                                  __m128i acc, const uint8_t *in, uint8_t *out, const size_t len,
                                                  const int decrypt) {
    __m256i rk[KS_MAX_ROUNDS + 1], x[8];
#pragma GCC unroll 15
    for (int r = 0; r <= rounds; r++) {
        rk[r] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(key->aes.round_keys + KS_BLOCK_SIZE * r)));
    }
    __m256i counters = _mm256_add_epi32(_mm256_broadcastsi128_si256(counter), _mm256_set_epi32(0, 0, 0, 2, 0, 0, 0, 1));
    size_t remaining = len;
    /* Stitched as on xmm (ks_gcm_g128_body): decryption hashes each batch's ciphertext during its own AES
     * rounds, before the plaintext overwrites it in place; encryption hashes batch i-1's during batch i's. */
    const uint8_t *batch_powers = KS_POWERS_FROM(key->ghash.powers, 16);
    if (decrypt) {
        for (; remaining >= 16 * KS_BLOCK_SIZE; in += 16 * KS_BLOCK_SIZE, out += 16 * KS_BLOCK_SIZE, remaining -= 16 * KS_BLOCK_SIZE) {
            acc = ks_aes8_ghash16_g256(rk, rounds, &counters, x, acc, in, batch_powers);
            ks_xor_store8_g256(x, in, out);
        }
    } else if (remaining >= 16 * KS_BLOCK_SIZE) {
        ks_aes8_g256(rk, rounds, &counters, x);
        ks_xor_store8_g256(x, in, out);
        in += 16 * KS_BLOCK_SIZE, out += 16 * KS_BLOCK_SIZE, remaining -= 16 * KS_BLOCK_SIZE;
        for (; remaining >= 16 * KS_BLOCK_SIZE; in += 16 * KS_BLOCK_SIZE, out += 16 * KS_BLOCK_SIZE, remaining -= 16 * KS_BLOCK_SIZE) {
            acc = ks_aes8_ghash16_g256(rk, rounds, &counters, x, acc, out - 16 * KS_BLOCK_SIZE, batch_powers);
            ks_xor_store8_g256(x, in, out);
        }
        acc = ks_ghash_batch256(acc, out - 16 * KS_BLOCK_SIZE, batch_powers, 8);
    }
    if (remaining) {
        uint8_t stream[16 * KS_BLOCK_SIZE];
        if (decrypt) {
            acc = ks_ghash_g256(&key->ghash, acc, in, remaining);
        }
        ks_aes8_g256(rk, rounds, &counters, x);
        for (int j = 0; j < 8; j++) {
            _mm256_storeu_si256((__m256i *)(stream + 32 * j), x[j]);
        }
        ks_xor_stream(in, out, stream, remaining);
        ks_burn(stream, sizeof stream);
        if (!decrypt) {
            acc = ks_ghash_g256(&key->ghash, acc, out, remaining);
        }
    }
    return acc;
}

/* ------------------------------------------------------------------------------------------------------ */
/* VAES + VPCLMULQDQ on zmm: stitched batches of 32 blocks (8 zmm), then 16 (4 zmm), masked tails       */
/* ------------------------------------------------------------------------------------------------------ */

KS_TARGET_G512 KS_INLINE __mmask64 ks_mask64(size_t remaining) {
    return remaining >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << remaining) - 1);
}

/* Karatsuba partial products of one zmm of data with the 4 powers at `powers`, per 128-bit lane: lo += x0 h0,
 * hi += x1 h1, mi += (x0 + x1)(h0 + h1). The first vector of a batch also adds the accumulator `acc`
 * (reflected) to its first block; pass zero for the others. */
KS_TARGET_G512 KS_INLINE void ks_mul_add512(__m512i data, __m128i acc, const int first, const uint8_t *powers,
                                            __m512i *lo, __m512i *mi, __m512i *hi) {
    __m512i x = _mm512_shuffle_epi8(data, _mm512_broadcast_i32x4(ks_swap128()));
    if (first) {
        x = _mm512_xor_si512(x, _mm512_zextsi128_si512(acc));
    }
    const __m512i h = _mm512_loadu_si512((const void *)powers);
    const __m512i h_folded = _mm512_loadu_si512((const void *)(powers + KS_FOLDED_OFFSET));
    *lo = _mm512_xor_si512(*lo, _mm512_clmulepi64_epi128(x, h, 0x00));
    *hi = _mm512_xor_si512(*hi, _mm512_clmulepi64_epi128(x, h, 0x11));
    *mi = _mm512_xor_si512(*mi, _mm512_clmulepi64_epi128(_mm512_xor_si512(x, _mm512_shuffle_epi32(x, _MM_PERM_BADC)), h_folded, 0x00));
}

/* Finish Karatsuba, reduce each lane and sum the four lanes into one 128-bit accumulator. */
KS_TARGET_G512 KS_INLINE __m128i ks_reduce512(__m512i lo, __m512i mi, __m512i hi) {
    const __m512i poly = _mm512_broadcast_i32x4(_mm_set_epi64x(KS_POLY_HIGH, 1));
    mi = _mm512_ternarylogic_epi64(mi, lo, hi, 0x96);
    mi = _mm512_ternarylogic_epi64(mi, _mm512_shuffle_epi32(lo, _MM_PERM_BADC), _mm512_clmulepi64_epi128(lo, poly, 0x10), 0x96);
    hi = _mm512_ternarylogic_epi64(hi, _mm512_shuffle_epi32(mi, _MM_PERM_BADC), _mm512_clmulepi64_epi128(mi, poly, 0x10), 0x96);
    const __m256i folded = _mm256_xor_si256(_mm512_castsi512_si256(hi), _mm512_extracti64x4_epi64(hi, 1));
    return _mm_xor_si128(_mm256_castsi256_si128(folded), _mm256_extracti128_si256(folded, 1));
}

/* Hash `vectors` zmm of data (len bytes of it valid, the rest read as zero) with the given powers. */
KS_TARGET_G512 KS_INLINE __m128i ks_ghash_batch512(__m128i acc, const uint8_t *data, size_t len,
                                                   const uint8_t *powers, int vectors) {
    __m512i lo = _mm512_setzero_si512(), mi = lo, hi = lo;
    __asm__("" : "+r"(powers)); /* key vectors stay memory operands (see ks_ghash_batch256) */
#pragma GCC unroll 4
    for (int v = 0; v < vectors; v++) {
        const __m512i loaded = len >= (size_t)(64 * (v + 1))
                                   ? _mm512_loadu_si512((const void *)(data + 64 * v))
                                   : _mm512_maskz_loadu_epi8(ks_mask64(len - 64 * (size_t)v), data + 64 * v);
        ks_mul_add512(loaded, acc, v == 0, powers + 64 * v, &lo, &mi, &hi);
    }
    return ks_reduce512(lo, mi, hi);
}

KS_TARGET_G512 static __m128i ks_ghash_g512(const ks_ghash_key *key, __m128i acc, const uint8_t *data, size_t len) {
    for (; len >= 16 * KS_BLOCK_SIZE; data += 16 * KS_BLOCK_SIZE, len -= 16 * KS_BLOCK_SIZE) {
        acc = ks_ghash_batch512(acc, data, 16 * KS_BLOCK_SIZE, KS_POWERS_FROM(key->powers, 16), 4);
    }
    if (len) {
        const int blocks = (int)((len + KS_BLOCK_SIZE - 1) / KS_BLOCK_SIZE);
        acc = ks_ghash_batch512(acc, data, len, key->powers + KS_BLOCK_SIZE * (KS_GCM_POWERS - blocks), (blocks + 3) / 4);
    }
    return acc;
}

KS_TARGET_G512 KS_INLINE void ks_aes_g512(const __m512i *rk, const int rounds, __m512i *counter, __m512i *x, const int n) {
    const __m512i swap = _mm512_broadcast_i32x4(ks_swap128());
    const __m512i four = _mm512_broadcast_i32x4(_mm_set_epi32(0, 0, 0, 4));
#pragma GCC unroll 8
    for (int j = 0; j < n; j++) {
        x[j] = _mm512_xor_si512(_mm512_shuffle_epi8(*counter, swap), rk[0]);
        *counter = _mm512_add_epi32(*counter, four);
    }
#pragma GCC unroll 14
    for (int r = 1; r < rounds; r++) {
#pragma GCC unroll 8
        for (int j = 0; j < n; j++) {
            x[j] = _mm512_aesenc_epi128(x[j], rk[r]);
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < n; j++) {
        x[j] = _mm512_aesenclast_epi128(x[j], rk[rounds]);
    }
}

KS_TARGET_G512 KS_INLINE void ks_xor_tail_g512(const __m512i *x, const uint8_t *in, uint8_t *out, size_t len, const int n) {
#pragma GCC unroll 4
    for (int j = 0; j < n && len; j++) {
        const __mmask64 mask = ks_mask64(len);
        const __m512i data = _mm512_maskz_loadu_epi8(mask, in + 64 * j);
        _mm512_mask_storeu_epi8(out + 64 * j, mask, _mm512_xor_si512(data, x[j]));
        len = len >= 64 ? len - 64 : 0;
    }
}

/* Blocks per stitched batch on zmm: KS_G512_VECTORS zmm of 4 blocks, hashed with as many powers of H. */
#define KS_G512_VECTORS 8
#define KS_G512_BATCH (KS_G512_VECTORS * 64)

/* One stitched batch: KS_G512_VECTORS zmm of counter blocks through AES (keystream to x), and between its
 * rounds the GHASH of the KS_G512_VECTORS zmm `hashed` (data in message byte order, already in registers):
 * after AES round r the Karatsuba multiplies of vector r - 1, after the round that follows the last one the
 * batch's single reduction. Returns the new accumulator. */
KS_TARGET_G512 KS_INLINE __m128i ks_aes_ghash_g512(const __m512i *rk, const int rounds, __m512i *counter, __m512i *x,
                                                   __m128i acc, const __m512i *hashed, const uint8_t *powers) {
    const __m512i swap = _mm512_broadcast_i32x4(ks_swap128());
    const __m512i four = _mm512_broadcast_i32x4(_mm_set_epi32(0, 0, 0, 4));
    __m512i lo = _mm512_setzero_si512(), mi = lo, hi = lo;
    __asm__("" : "+r"(powers)); /* key vectors stay memory operands (see ks_ghash_batch256) */
    /* So do the round keys, loaded once a round: the 8 blocks, the 8 hashed vectors and the sums leave too
     * few zmm registers for all 15 (about 6% faster at AES-256 on Zen 4 than GCC's own choice). */
    __asm__("" : "+r"(rk));
#pragma GCC unroll 8
    for (int j = 0; j < KS_G512_VECTORS; j++) {
        x[j] = _mm512_xor_si512(_mm512_shuffle_epi8(*counter, swap), rk[0]);
        *counter = _mm512_add_epi32(*counter, four);
    }
#pragma GCC unroll 14
    for (int r = 1; r < rounds; r++) {
#pragma GCC unroll 8
        for (int j = 0; j < KS_G512_VECTORS; j++) {
            x[j] = _mm512_aesenc_epi128(x[j], rk[r]);
        }
        if (r <= KS_G512_VECTORS) {
            ks_mul_add512(hashed[r - 1], acc, r == 1, powers + 64 * (r - 1), &lo, &mi, &hi);
        } else if (r == KS_G512_VECTORS + 1) {
            acc = ks_reduce512(lo, mi, hi);
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < KS_G512_VECTORS; j++) {
        x[j] = _mm512_aesenclast_epi128(x[j], rk[rounds]);
    }
    return acc;
}

KS_TARGET_G512 KS_INLINE __m128i ks_gcm_g512_body(const ks_gcm_key *key, const int rounds, __m128i counter,
                                                  __m128i acc, const uint8_t *in, uint8_t *out, const size_t len,
                                                  const int decrypt) {
    __m512i rk[KS_MAX_ROUNDS + 1], x[KS_G512_VECTORS];
#pragma GCC unroll 15
    for (int r = 0; r <= rounds; r++) {
        rk[r] = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(key->aes.round_keys + KS_BLOCK_SIZE * r)));
    }
    __m512i counters = _mm512_add_epi32(_mm512_broadcast_i32x4(counter),
                                        _mm512_set_epi32(0, 0, 0, 4, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 1));
    size_t remaining = len;
    /* Stitched batches (ks_aes_ghash_g512). Decryption hashes each batch's ciphertext during its own AES
     * rounds, loaded before the plaintext overwrites it in place; encryption keeps each batch's ciphertext
     * in registers and hashes it during the next batch's rounds, the last batch's on its own. */
    const uint8_t *batch_powers = KS_POWERS_FROM(key->ghash.powers, 4 * KS_G512_VECTORS);
    __m512i c[KS_G512_VECTORS];
    if (decrypt) {
        for (; remaining >= KS_G512_BATCH; in += KS_G512_BATCH, out += KS_G512_BATCH, remaining -= KS_G512_BATCH) {
#pragma GCC unroll 8
            for (int j = 0; j < KS_G512_VECTORS; j++) {
                c[j] = _mm512_loadu_si512((const void *)(in + 64 * j));
            }
            acc = ks_aes_ghash_g512(rk, rounds, &counters, x, acc, c, batch_powers);
#pragma GCC unroll 8
            for (int j = 0; j < KS_G512_VECTORS; j++) {
                _mm512_storeu_si512((void *)(out + 64 * j), _mm512_xor_si512(c[j], x[j]));
            }
        }
    } else if (remaining >= KS_G512_BATCH) {
        ks_aes_g512(rk, rounds, &counters, x, KS_G512_VECTORS);
        for (;;) {
#pragma GCC unroll 8
            for (int j = 0; j < KS_G512_VECTORS; j++) {
                c[j] = _mm512_xor_si512(_mm512_loadu_si512((const void *)(in + 64 * j)), x[j]);
                _mm512_storeu_si512((void *)(out + 64 * j), c[j]);
            }
            in += KS_G512_BATCH, out += KS_G512_BATCH, remaining -= KS_G512_BATCH;
            if (remaining < KS_G512_BATCH) {
                break;
            }
            acc = ks_aes_ghash_g512(rk, rounds, &counters, x, acc, c, batch_powers);
        }
        __m512i lo = _mm512_setzero_si512(), mi = lo, hi = lo;
#pragma GCC unroll 8
        for (int j = 0; j < KS_G512_VECTORS; j++) {
            ks_mul_add512(c[j], acc, j == 0, batch_powers + 64 * j, &lo, &mi, &hi);
        }
        acc = ks_reduce512(lo, mi, hi);
    }
    /* What is left: whole 16-block batches (when a stitched batch is longer), AES then GHASH, then the tail. */
    for (; remaining >= 16 * KS_BLOCK_SIZE; in += 16 * KS_BLOCK_SIZE, out += 16 * KS_BLOCK_SIZE, remaining -= 16 * KS_BLOCK_SIZE) {
        if (decrypt) {
            acc = ks_ghash_batch512(acc, in, 16 * KS_BLOCK_SIZE, KS_POWERS_FROM(key->ghash.powers, 16), 4);
        }
        ks_aes_g512(rk, rounds, &counters, x, 4);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const __m512i data = _mm512_loadu_si512((const void *)(in + 64 * j));
            _mm512_storeu_si512((void *)(out + 64 * j), _mm512_xor_si512(data, x[j]));
        }
        if (!decrypt) {
            acc = ks_ghash_batch512(acc, out, 16 * KS_BLOCK_SIZE, KS_POWERS_FROM(key->ghash.powers, 16), 4);
        }
    }
    if (remaining) {
        if (decrypt) {
            acc = ks_ghash_g512(&key->ghash, acc, in, remaining);
        }
        if (remaining <= 64) {
            ks_aes_g512(rk, rounds, &counters, x, 1);
            ks_xor_tail_g512(x, in, out, remaining, 1);
        } else if (remaining <= 128) {
            ks_aes_g512(rk, rounds, &counters, x, 2);
            ks_xor_tail_g512(x, in, out, remaining, 2);
        } else {
            ks_aes_g512(rk, rounds, &counters, x, 4);
            ks_xor_tail_g512(x, in, out, remaining, 4);
        }
        if (!decrypt) {
            acc = ks_ghash_g512(&key->ghash, acc, out, remaining);
        }
    }
    return acc;
}

/* One function per (path, round count) so the round loops unroll completely. Each runs len bytes of data
 * from the block after `counter` (reflected: J0 plus the blocks already used), hashing the ciphertext into
 * the reflected accumulator `acc`, and returns the accumulator: the caller hashes the associated data first
 * and the lengths block last (ks_ghash_finish), so a message may be run in pieces of whole blocks. */
typedef __m128i (*ks_gcm_fn)(const ks_gcm_key *, __m128i, __m128i, const uint8_t *, uint8_t *, size_t, int);

#define KS_GCM_SPECIALISE(PATH, TARGET, ROUNDS)                                                               \
    TARGET static __m128i ks_gcm_##PATH##_##ROUNDS(const ks_gcm_key *key, __m128i counter, __m128i acc,       \
                                                    const uint8_t *in, uint8_t *out, size_t len, int decrypt) { \
        return ks_gcm_##PATH##_body(key, ROUNDS, counter, acc, in, out, len, decrypt);                        \
    }

KS_GCM_SPECIALISE(g128, KS_TARGET_G128, 10)
KS_GCM_SPECIALISE(g128, KS_TARGET_G128, 12)
KS_GCM_SPECIALISE(g128, KS_TARGET_G128, 14)
/* The same body compiled with VEX encoding (see ks_gcm_xmm_vex); same instructions, same results. */
#define ks_gcm_g128v_body ks_gcm_g128_body
KS_GCM_SPECIALISE(g128v, KS_TARGET_G128V, 10)
KS_GCM_SPECIALISE(g128v, KS_TARGET_G128V, 12)
KS_GCM_SPECIALISE(g128v, KS_TARGET_G128V, 14)
KS_GCM_SPECIALISE(g256, KS_TARGET_G256, 10)
KS_GCM_SPECIALISE(g256, KS_TARGET_G256, 12)
KS_GCM_SPECIALISE(g256, KS_TARGET_G256, 14)
KS_GCM_SPECIALISE(g512, KS_TARGET_G512, 10)
KS_GCM_SPECIALISE(g512, KS_TARGET_G512, 12)
KS_GCM_SPECIALISE(g512, KS_TARGET_G512, 14)

/* ------------------------------------------------------------------------------------------------------ */
/* Dispatch                                                                                               */
/* ------------------------------------------------------------------------------------------------------ */

typedef __m128i (*ks_ghash_fn)(const ks_ghash_key *, __m128i, const uint8_t *, size_t);

static int ks_path(ks_isa isa) {
    if ((isa != KS_ISA_AESNI && isa != KS_ISA_VAES256 && isa != KS_ISA_VAES512) || !(ks_gcm_cpu_isas() & isa)) {
        return -1;
    }
    return isa == KS_ISA_AESNI ? 0 : isa == KS_ISA_VAES256 ? 1 : 2;
}

/* The bulk functions, by path (ks_path, then 3: aesni VEX-encoded) and round count. */
static const ks_gcm_fn ks_gcm_table[4][3] = {
    {ks_gcm_g128_10, ks_gcm_g128_12, ks_gcm_g128_14},
    {ks_gcm_g256_10, ks_gcm_g256_12, ks_gcm_g256_14},
    {ks_gcm_g512_10, ks_gcm_g512_12, ks_gcm_g512_14},
    {ks_gcm_g128v_10, ks_gcm_g128v_12, ks_gcm_g128v_14}, /* aesni, VEX-encoded */
};
/* GHASH of the associated data, by the same path index. */
static const ks_ghash_fn ks_ghash_table[4] = {ks_ghash_g128, ks_ghash_g256, ks_ghash_g512, ks_ghash_g128};

/* The path index of ks_gcm_table for `isa`, or -1 when this CPU cannot run it. */
static int ks_gcm_path(ks_isa isa) {
    const int path = ks_path(isa);
    return path == 0 && ks_gcm_xmm_vex() ? 3 : path;
}

KS_TARGET_G128 ks_status ks_ghash(const ks_ghash_key *key, ks_isa isa, const uint8_t *aad, size_t aad_len,
                                  const uint8_t *data, size_t len, uint8_t out[KS_BLOCK_SIZE]) {
    static const ks_ghash_fn table[3] = {ks_ghash_g128, ks_ghash_g256, ks_ghash_g512};
    if (key == NULL || out == NULL || (aad_len && aad == NULL) || (len && data == NULL)) {
        return KS_ERR_NULL;
    }
    const int path = ks_path(isa);
    if (path < 0) {
        return KS_ERR_ISA;
    }
    __m128i acc = table[path](key, _mm_setzero_si128(), aad, aad_len);
    acc = table[path](key, acc, data, len);
    _mm_storeu_si128((__m128i *)out, ks_ghash_finish(key, acc, aad_len, len));
    return KS_OK;
}

/* Run one message; returns S = GHASH(A, C) xor AES_K(J0) (the tag) through `tag`. */
KS_TARGET_G128 static ks_status ks_gcm_run(const ks_gcm_key *key, ks_isa isa, const uint8_t *nonce,
                                           const uint8_t *aad, size_t aad_len, const uint8_t *in, uint8_t *out,
                                           size_t len, int decrypt, uint8_t tag[KS_BLOCK_SIZE]) {
    if (key == NULL || nonce == NULL || tag == NULL || (aad_len && aad == NULL) || (len && (in == NULL || out == NULL))) {
        return KS_ERR_NULL;
    }
    if (key->aes.rounds != 10 && key->aes.rounds != 12 && key->aes.rounds != 14) {
        return KS_ERR_KEY_STATE;
    }
    if ((uint64_t)len > KS_GCM_MAX_DATA) {
        return KS_ERR_RANGE;
    }
    const int path = ks_gcm_path(isa);
    if (path < 0) {
        return KS_ERR_ISA;
    }
    uint8_t j0[KS_BLOCK_SIZE];
    memcpy(j0, nonce, KS_GCM_NONCE_SIZE);
    j0[12] = 0, j0[13] = 0, j0[14] = 0, j0[15] = 1;
    const __m128i counter = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)j0), ks_swap128());
    const __m128i mask = ks_encrypt_block(&key->aes, _mm_loadu_si128((const __m128i *)j0));
    __m128i acc = aad_len ? ks_ghash_table[path](&key->ghash, _mm_setzero_si128(), aad, aad_len) : _mm_setzero_si128();
    acc = ks_gcm_table[path][(key->aes.rounds - 10) / 2](key, counter, acc, in, out, len, decrypt);
    const __m128i digest = ks_ghash_finish(&key->ghash, acc, aad_len, len);
    _mm_storeu_si128((__m128i *)tag, _mm_xor_si128(digest, mask));
    return KS_OK;
}

ks_status ks_gcm_seal(const ks_gcm_key *key, ks_isa isa, const uint8_t nonce[KS_GCM_NONCE_SIZE],
                      const uint8_t *aad, size_t aad_len, const uint8_t *in, uint8_t *out, size_t len,
                      uint8_t tag[KS_GCM_TAG_SIZE]) {
    return ks_gcm_run(key, isa, nonce, aad, aad_len, in, out, len, 0, tag);
}

ks_status ks_gcm_open(const ks_gcm_key *key, ks_isa isa, const uint8_t nonce[KS_GCM_NONCE_SIZE],
                      const uint8_t *aad, size_t aad_len, const uint8_t *in, uint8_t *out, size_t len,
                      const uint8_t tag[KS_GCM_TAG_SIZE]) {
    uint8_t expected[KS_BLOCK_SIZE];
    if (tag == NULL) {
        return KS_ERR_NULL;
    }
    const ks_status status = ks_gcm_run(key, isa, nonce, aad, aad_len, in, out, len, 1, expected);
    if (status != KS_OK) {
        return status;
    }
    unsigned difference = 0;
    for (int i = 0; i < KS_BLOCK_SIZE; i++) {
        difference |= (unsigned)(expected[i] ^ tag[i]);
    }
    ks_burn(expected, sizeof expected);
    if (difference != 0) {
        if (len) {
            ks_burn(out, len);
        }
        return KS_ERR_TAG;
    }
    return KS_OK;
}

/* ------------------------------------------------------------------------------------------------------ */
/* Incremental encryption: one message in pieces of any size                                              */
/* ------------------------------------------------------------------------------------------------------ */

/* ks_gcm_seal_state.state of a started, not yet finished encryption. */
#define KS_GCM_SEAL_OPEN 0x47434d53u

KS_TARGET_G128 ks_status ks_gcm_seal_start(ks_gcm_seal_state *state, const ks_gcm_key *key, ks_isa isa,
                                           const uint8_t nonce[KS_GCM_NONCE_SIZE], const uint8_t *aad,
                                           size_t aad_len) {
    if (state == NULL || key == NULL || nonce == NULL || (aad_len && aad == NULL)) {
        return KS_ERR_NULL;
    }
    if (key->aes.rounds != 10 && key->aes.rounds != 12 && key->aes.rounds != 14) {
        return KS_ERR_KEY_STATE;
    }
    const int path = ks_gcm_path(isa);
    if (path < 0) {
        return KS_ERR_ISA;
    }
    uint8_t j0[KS_BLOCK_SIZE];
    memcpy(j0, nonce, KS_GCM_NONCE_SIZE);
    j0[12] = 0, j0[13] = 0, j0[14] = 0, j0[15] = 1;
    memset(state, 0, sizeof *state);
    _mm_storeu_si128((__m128i *)state->counter, _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)j0), ks_swap128()));
    _mm_storeu_si128((__m128i *)state->mask, ks_encrypt_block(&key->aes, _mm_loadu_si128((const __m128i *)j0)));
    const __m128i acc = aad_len ? ks_ghash_table[path](&key->ghash, _mm_setzero_si128(), aad, aad_len) : _mm_setzero_si128();
    _mm_storeu_si128((__m128i *)state->acc, acc);
    state->aad_len = (uint64_t)aad_len;
    state->state = KS_GCM_SEAL_OPEN;
    return KS_OK;
}

KS_TARGET_G128 ks_status ks_gcm_seal_update(ks_gcm_seal_state *state, const ks_gcm_key *key, ks_isa isa,
                                            const uint8_t *in, uint8_t *out, size_t len) {
    if (state == NULL || key == NULL || (len && (in == NULL || out == NULL))) {
        return KS_ERR_NULL;
    }
    if (state->state != KS_GCM_SEAL_OPEN || (key->aes.rounds != 10 && key->aes.rounds != 12 && key->aes.rounds != 14)) {
        return KS_ERR_KEY_STATE;
    }
    if ((uint64_t)len > KS_GCM_MAX_DATA - state->len) {
        return KS_ERR_RANGE; /* before any output: the counter would pass its last value */
    }
    const int path = ks_gcm_path(isa);
    if (path < 0) {
        return KS_ERR_ISA;
    }
    __m128i acc = _mm_loadu_si128((const __m128i *)state->acc);
    size_t done = 0;
    uint32_t used = state->partial_len;
    /* First the rest of a block begun by an earlier call, with that block's keystream. */
    if (used) {
        for (; done < len && used < KS_BLOCK_SIZE; done++, used++) {
            const uint8_t c = (uint8_t)(in[done] ^ state->stream[used]);
            out[done] = c;
            state->partial[used] = c;
        }
        if (used == KS_BLOCK_SIZE) {
            acc = ks_ghash_g128(&key->ghash, acc, state->partial, KS_BLOCK_SIZE);
            ks_burn(state->stream, sizeof state->stream);
            memset(state->partial, 0, sizeof state->partial);
            used = 0;
        }
    }
    /* Then whole blocks through the path's stitched bulk code. */
    __m128i counter = _mm_loadu_si128((const __m128i *)state->counter);
    const size_t whole = (len - done) & ~(size_t)(KS_BLOCK_SIZE - 1);
    if (whole) {
        acc = ks_gcm_table[path][(key->aes.rounds - 10) / 2](key, counter, acc, in + done, out + done, whole, 0);
        counter = _mm_add_epi32(counter, _mm_set_epi32(0, 0, 0, (int)(uint32_t)(whole / KS_BLOCK_SIZE)));
        done += whole;
    }
    /* A last partial block: its keystream is kept for the next call, its ciphertext for GHASH. */
    if (done < len) {
        counter = _mm_add_epi32(counter, _mm_set_epi32(0, 0, 0, 1));
        _mm_storeu_si128((__m128i *)state->stream, ks_encrypt_block(&key->aes, _mm_shuffle_epi8(counter, ks_swap128())));
        for (; done < len; done++, used++) {
            const uint8_t c = (uint8_t)(in[done] ^ state->stream[used]);
            out[done] = c;
            state->partial[used] = c;
        }
    }
    _mm_storeu_si128((__m128i *)state->counter, counter);
    _mm_storeu_si128((__m128i *)state->acc, acc);
    state->partial_len = used;
    state->len += (uint64_t)len;
    return KS_OK;
}

KS_TARGET_G128 ks_status ks_gcm_seal_finish(ks_gcm_seal_state *state, const ks_gcm_key *key,
                                            uint8_t tag[KS_GCM_TAG_SIZE]) {
    if (state == NULL || key == NULL || tag == NULL) {
        return KS_ERR_NULL;
    }
    if (state->state != KS_GCM_SEAL_OPEN) {
        return KS_ERR_KEY_STATE;
    }
    __m128i acc = _mm_loadu_si128((const __m128i *)state->acc);
    if (state->partial_len) {
        acc = ks_ghash_g128(&key->ghash, acc, state->partial, state->partial_len); /* zero-padded */
    }
    const __m128i digest = ks_ghash_finish(&key->ghash, acc, state->aad_len, state->len);
    _mm_storeu_si128((__m128i *)tag, _mm_xor_si128(digest, _mm_loadu_si128((const __m128i *)state->mask)));
    ks_burn(state, sizeof *state);
    return KS_OK;
}

void ks_gcm_seal_wipe(ks_gcm_seal_state *state) {
    if (state != NULL) {
        ks_burn(state, sizeof *state);
    }
}
