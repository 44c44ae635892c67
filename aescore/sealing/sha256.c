/*
 * sha256.c - SHA-256 compression (scalar, BMI2 and SHA-NI), the streaming hash and HMAC-SHA256 (see sha256.h).
 *
 * The SHA-NI path keeps the state as the two registers SHA256RNDS2 wants, ABEF and CDGH (lanes high to low),
 * and computes the message schedule four words at a time: W[t..t+3] = MSG2(MSG1(W[t-16..], W[t-12..]) +
 * W[t-7..t-4], W[t-4..t-1]). Each group of four rounds adds K to four schedule words; SHA256RNDS2 does two
 * rounds with the low two of them, then two more with the high two shuffled down.
 */
#include "sha256.h"

#include "aesni_ctr.h" /* ks_cpu_avx2: aescore's one CPUID + XGETBV reading of AVX2 */

#include <cpuid.h>
#include <immintrin.h>
#include <string.h>

#define KS_TARGET_SHANI __attribute__((target("sha,sse4.1,ssse3")))
#define KS_TARGET_BMI2 __attribute__((target("bmi2")))
#define KS_TARGET_AVX2 __attribute__((target("avx2,bmi2")))

static const uint32_t ks_sha256_k[64] __attribute__((aligned(16))) = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static const uint32_t ks_sha256_iv[8] = {
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

/* ------------------------------------------------------------------------------------------------------ */
/* CPU detection                                                                                          */
/* ------------------------------------------------------------------------------------------------------ */

static unsigned ks_sha256_detect(void) {
    unsigned eax, ebx, ecx, edx;
    unsigned result = KS_SHA256_SCALAR;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) {
        return result;
    }
    const int has_ssse3 = (ecx >> 9) & 1, has_sse41 = (ecx >> 19) & 1;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
        return result;
    }
    const int has_sha = (ebx >> 29) & 1, has_bmi2 = (ebx >> 8) & 1;
    if (has_bmi2) {
        result |= KS_SHA256_BMI2;
    }
    if (has_sha && has_ssse3 && has_sse41) {
        result |= KS_SHA256_SHANI;
    }
    if (has_bmi2 && ks_cpu_avx2()) {
        result |= KS_SHA256_AVX2;
    }
    return result;
}

unsigned ks_sha256_impls(void) {
    static int cached = -1;
    int value = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (value < 0) {
        value = (int)ks_sha256_detect();
        __atomic_store_n(&cached, value, __ATOMIC_RELAXED);
    }
    return (unsigned)value;
}

/* ------------------------------------------------------------------------------------------------------ */
/* Scalar compression (FIPS 180-4 6.2.2)                                                                  */
/* ------------------------------------------------------------------------------------------------------ */

#define KS_ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void ks_store_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline __attribute__((always_inline)) uint32_t ks_load_be32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return __builtin_bswap32(v);
}

/*
 * The 64 rounds are written out (eight at a time, the working variables renamed instead of moved) and the
 * message schedule lives in a 16-word ring computed as the rounds need it: a loop over t with the eight
 * variables shifted each round cost about 4.0k instructions a block; this form 3.4k, and 2.7k compiled for
 * BMI2 (RORX rotates into a new register, so fewer copies). Ch and Maj use the forms with one operation fewer.
 */
#define KS_SIGMA0(x) (KS_ROR(x, 2) ^ KS_ROR(x, 13) ^ KS_ROR(x, 22))
#define KS_SIGMA1(x) (KS_ROR(x, 6) ^ KS_ROR(x, 11) ^ KS_ROR(x, 25))
#define KS_GAMMA0(x) (KS_ROR(x, 7) ^ KS_ROR(x, 18) ^ ((x) >> 3))
#define KS_GAMMA1(x) (KS_ROR(x, 17) ^ KS_ROR(x, 19) ^ ((x) >> 10))
#define KS_CH(e, f, g) ((g) ^ ((e) & ((f) ^ (g))))
#define KS_MAJ(a, b, c) (((a) & (b)) | ((c) & ((a) | (b))))
#define KS_LOAD(t) (w[t] = ks_load_be32(blocks + 4 * (t)))
#define KS_SCHEDULE(t) \
    (w[(t) & 15] += KS_GAMMA1(w[((t) - 2) & 15]) + w[((t) - 7) & 15] + KS_GAMMA0(w[((t) - 15) & 15]))
#define KS_ROUND(a, b, c, d, e, f, g, h, t, word)                                             \
    do {                                                                                      \
        const uint32_t t1 = (h) + KS_SIGMA1(e) + KS_CH(e, f, g) + ks_sha256_k[t] + (word);    \
        (d) += t1;                                                                            \
        (h) = t1 + KS_SIGMA0(a) + KS_MAJ(a, b, c);                                            \
    } while (0)
#define KS_EIGHT_ROUNDS(t, WORD)                              \
    KS_ROUND(a, b, c, d, e, f, g, h, (t) + 0, WORD((t) + 0)); \
    KS_ROUND(h, a, b, c, d, e, f, g, (t) + 1, WORD((t) + 1)); \
    KS_ROUND(g, h, a, b, c, d, e, f, (t) + 2, WORD((t) + 2)); \
    KS_ROUND(f, g, h, a, b, c, d, e, (t) + 3, WORD((t) + 3)); \
    KS_ROUND(e, f, g, h, a, b, c, d, (t) + 4, WORD((t) + 4)); \
    KS_ROUND(d, e, f, g, h, a, b, c, (t) + 5, WORD((t) + 5)); \
    KS_ROUND(c, d, e, f, g, h, a, b, (t) + 6, WORD((t) + 6)); \
    KS_ROUND(b, c, d, e, f, g, h, a, (t) + 7, WORD((t) + 7))

/* One body for both scalar paths; each caller is compiled for its own target and gets its own copy. */
static inline __attribute__((always_inline)) void ks_sha256_compress_rounds(uint32_t state[8], const uint8_t *blocks,
                                                                           size_t count) {
    uint32_t w[16];
    for (; count > 0; count--, blocks += KS_SHA256_BLOCK_SIZE) {
        uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
        uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
        KS_EIGHT_ROUNDS(0, KS_LOAD);
        KS_EIGHT_ROUNDS(8, KS_LOAD);
        KS_EIGHT_ROUNDS(16, KS_SCHEDULE);
        KS_EIGHT_ROUNDS(24, KS_SCHEDULE);
        KS_EIGHT_ROUNDS(32, KS_SCHEDULE);
        KS_EIGHT_ROUNDS(40, KS_SCHEDULE);
        KS_EIGHT_ROUNDS(48, KS_SCHEDULE);
        KS_EIGHT_ROUNDS(56, KS_SCHEDULE);
        state[0] += a;
        state[1] += b;
        state[2] += c;
        state[3] += d;
        state[4] += e;
        state[5] += f;
        state[6] += g;
        state[7] += h;
    }
    ks_sha256_wipe(w, sizeof w); /* the schedule of an HMAC key block is key-derived */
}

static void ks_sha256_compress_scalar(uint32_t state[8], const uint8_t *blocks, size_t count) {
    ks_sha256_compress_rounds(state, blocks, count);
}

KS_TARGET_BMI2 static void ks_sha256_compress_bmi2(uint32_t state[8], const uint8_t *blocks, size_t count) {
    ks_sha256_compress_rounds(state, blocks, count);
}

/* ------------------------------------------------------------------------------------------------------ */
/* AVX2 + BMI2 compression: vector message schedule beside scalar RORX rounds                             */
/* ------------------------------------------------------------------------------------------------------ */

/*
 * The technique of Intel's "Fast SHA-256 Implementations on Intel Architecture Processors" (Guilford et al.,
 * 2012). The scalar paths compute the schedule W[16..63] one word at a time (about a quarter of a block's
 * instructions), on the same ALU ports as the rounds. Here it is computed four words at a time in vector
 * registers, with W+K stored to a stack array the rounds read back, and each group of four new words is written
 * next to four rounds that do not depend on it, so the out-of-order core overlaps the two. The rounds are the
 * scalar ones with RORX.
 *
 * One step, from x0..x3 = W[t-16..t-13], W[t-12..t-9], W[t-8..t-5], W[t-4..t-1]:
 *   W[t..t+3] = W[t-16..t-13] + sigma0(W[t-15..t-12]) + W[t-7..t-4] + sigma1(W[t-2..t+1])
 * sigma1 needs W[t] and W[t+1] for the upper two words, so it is done twice on two words: first on W[t-2],
 * W[t-1] (lanes 2 and 3 of x3) for the lower half, then on the lower half just finished for the upper. SSE has
 * no 32-bit rotate; sigma0 uses shift pairs, and sigma1 copies each word into both halves of a 64-bit lane, where
 * one 64-bit right shift by n leaves the 32-bit rotation by n in the low half.
 *
 * Given two or more blocks, both are scheduled at once, one per 128-bit half of a ymm register (as the Linux
 * kernel's sha256-avx2 does): the first block's rounds run beside the schedule of both, the second's from the
 * stored words alone. That halves the vector work a block (1 MiB: 373 MB/s against 356 one block at a time on a
 * Cascade Lake Xeon); a single block (HMAC key and final blocks, short messages) takes the xmm path.
 */
#define KS_VROR(x, n) _mm_or_si128(_mm_srli_epi32(x, n), _mm_slli_epi32(x, 32 - (n)))

KS_TARGET_AVX2 static inline __attribute__((always_inline)) __m128i ks_sha256_sigma1_pairs(__m128i pairs) {
    /* pairs holds two words, each in both halves of a 64-bit lane; the result is sigma1 of each in the low half */
    return _mm_xor_si128(_mm_xor_si128(_mm_srli_epi64(pairs, 17), _mm_srli_epi64(pairs, 19)),
                         _mm_srli_epi32(pairs, 10));
}

KS_TARGET_AVX2 static inline __attribute__((always_inline)) __m128i ks_sha256_schedule4(__m128i x0, __m128i x1,
                                                                                       __m128i x2, __m128i x3) {
    const __m128i low_pair = _mm_set_epi64x(-1, 0x0b0a090803020100LL);  /* words 0, 2 -> 0, 1; zero 2, 3 */
    const __m128i high_pair = _mm_set_epi64x(0x0b0a090803020100LL, -1); /* words 0, 2 -> 2, 3; zero 0, 1 */
    const __m128i w15 = _mm_alignr_epi8(x1, x0, 4);                     /* W[t-15..t-12] */
    const __m128i w7 = _mm_alignr_epi8(x3, x2, 4);                      /* W[t-7..t-4] */
    const __m128i sigma0 = _mm_xor_si128(_mm_xor_si128(KS_VROR(w15, 7), KS_VROR(w15, 18)),
                                         _mm_srli_epi32(w15, 3));
    const __m128i partial = _mm_add_epi32(_mm_add_epi32(x0, w7), sigma0);
    const __m128i s1_low = ks_sha256_sigma1_pairs(_mm_shuffle_epi32(x3, 0xFA)); /* W[t-2] W[t-2] W[t-1] W[t-1] */
    const __m128i low = _mm_add_epi32(partial, _mm_shuffle_epi8(s1_low, low_pair)); /* lanes 0, 1 final */
    const __m128i s1_high = ks_sha256_sigma1_pairs(_mm_shuffle_epi32(low, 0x50));  /* W[t] W[t] W[t+1] W[t+1] */
    return _mm_add_epi32(low, _mm_shuffle_epi8(s1_high, high_pair));
}

/* The same step on two blocks, one per 128-bit half (each instruction here works on the two halves separately). */
KS_TARGET_AVX2 static inline __attribute__((always_inline)) __m256i ks_sha256_sigma1_pairs2(__m256i pairs) {
    return _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(pairs, 17), _mm256_srli_epi64(pairs, 19)),
                            _mm256_srli_epi32(pairs, 10));
}

#define KS_VROR2(x, n) _mm256_or_si256(_mm256_srli_epi32(x, n), _mm256_slli_epi32(x, 32 - (n)))

KS_TARGET_AVX2 static inline __attribute__((always_inline)) __m256i ks_sha256_schedule4x2(__m256i x0, __m256i x1,
                                                                                         __m256i x2, __m256i x3) {
    const __m256i low_pair = _mm256_set_epi64x(-1, 0x0b0a090803020100LL, -1, 0x0b0a090803020100LL);
    const __m256i high_pair = _mm256_set_epi64x(0x0b0a090803020100LL, -1, 0x0b0a090803020100LL, -1);
    const __m256i w15 = _mm256_alignr_epi8(x1, x0, 4);
    const __m256i w7 = _mm256_alignr_epi8(x3, x2, 4);
    const __m256i sigma0 = _mm256_xor_si256(_mm256_xor_si256(KS_VROR2(w15, 7), KS_VROR2(w15, 18)),
                                            _mm256_srli_epi32(w15, 3));
    const __m256i partial = _mm256_add_epi32(_mm256_add_epi32(x0, w7), sigma0);
    const __m256i s1_low = ks_sha256_sigma1_pairs2(_mm256_shuffle_epi32(x3, 0xFA));
    const __m256i low = _mm256_add_epi32(partial, _mm256_shuffle_epi8(s1_low, low_pair));
    const __m256i s1_high = ks_sha256_sigma1_pairs2(_mm256_shuffle_epi32(low, 0x50));
    return _mm256_add_epi32(low, _mm256_shuffle_epi8(s1_high, high_pair));
}

/*
 * The rounds: the scalar round of ks_sha256_compress_rounds with W+K read from wk. Maj(a, b, c) is computed as
 * b ^ ((a ^ b) & (b ^ c)), and a ^ b is the next round's b ^ c, so it is carried over (one operation fewer).
 */
#define KS_AVX2_ROUND(a, b, c, d, e, f, g, h, word)                                \
    do {                                                                           \
        const uint32_t t1 = (h) + KS_SIGMA1(e) + KS_CH(e, f, g) + (word);          \
        const uint32_t ab = (a) ^ (b);                                             \
        (d) += t1;                                                                 \
        (h) = t1 + KS_SIGMA0(a) + ((b) ^ (ab & bc));                               \
        bc = ab;                                                                   \
    } while (0)
#define KS_AVX2_FOUR_ROUNDS_AT(t, W, a, b, c, d, e, f, g, h) \
    KS_AVX2_ROUND(a, b, c, d, e, f, g, h, W((t) + 0));        \
    KS_AVX2_ROUND(h, a, b, c, d, e, f, g, W((t) + 1));        \
    KS_AVX2_ROUND(g, h, a, b, c, d, e, f, W((t) + 2));        \
    KS_AVX2_ROUND(f, g, h, a, b, c, d, e, W((t) + 3))
/* Rounds t..t+3 where t is a multiple of 8 (variables in place) or 4 more (renamed by four). */
#define KS_AVX2_FOUR_ROUNDS_EVEN(t, W) KS_AVX2_FOUR_ROUNDS_AT(t, W, a, b, c, d, e, f, g, h)
#define KS_AVX2_FOUR_ROUNDS_ODD(t, W) KS_AVX2_FOUR_ROUNDS_AT(t, W, e, f, g, h, a, b, c, d)
#define KS_AVX2_SIXTEEN_ROUNDS(t, W) \
    KS_AVX2_FOUR_ROUNDS_EVEN((t) + 0, W); \
    KS_AVX2_FOUR_ROUNDS_ODD((t) + 4, W);  \
    KS_AVX2_FOUR_ROUNDS_EVEN((t) + 8, W); \
    KS_AVX2_FOUR_ROUNDS_ODD((t) + 12, W)
/*
 * Without this barrier GCC forwards the stores to wk into the rounds as VPEXTRD (two micro-ops each, plus a
 * move); read back from memory, each word is an ADD with a memory operand instead. Only wk (and the caller's
 * memory) live in memory here: the working variables are locals, so nothing else is reloaded.
 */
#define KS_AVX2_WK_IN_MEMORY() __asm__ volatile("" : : "r"(wk) : "memory")
/* Schedule W[t+16..t+19] into x0 (its oldest words, no longer needed), store W+K, then four rounds from t. */
#define KS_AVX2_STEP(t, PARITY, W, SCHEDULE, STORE, x0, x1, x2, x3) \
    x0 = SCHEDULE(x0, x1, x2, x3);                                 \
    STORE((t) + 16, x0);                                           \
    KS_AVX2_WK_IN_MEMORY();                                        \
    KS_AVX2_FOUR_ROUNDS_##PARITY(t, W)
#define KS_AVX2_SCHEDULED_SIXTEEN(t, W, SCHEDULE, STORE)          \
    KS_AVX2_STEP((t) + 0, EVEN, W, SCHEDULE, STORE, x0, x1, x2, x3); \
    KS_AVX2_STEP((t) + 4, ODD, W, SCHEDULE, STORE, x1, x2, x3, x0);  \
    KS_AVX2_STEP((t) + 8, EVEN, W, SCHEDULE, STORE, x2, x3, x0, x1); \
    KS_AVX2_STEP((t) + 12, ODD, W, SCHEDULE, STORE, x3, x0, x1, x2)
#define KS_AVX2_ADD_STATE()  \
    state[0] += a;           \
    state[1] += b;           \
    state[2] += c;           \
    state[3] += d;           \
    state[4] += e;           \
    state[5] += f;           \
    state[6] += g;           \
    state[7] += h

/*
 * wk layout. One block: W[t]+K[t] at wk[t]. Two blocks: each group of four words takes eight, the first block's
 * four then the second's (one ymm store), so W[t]+K[t] of block 0 is at 2t - t%4 and of block 1 four further.
 */
#define KS_WK_ONE(t) wk[t]
#define KS_WK_FIRST(t) wk[2 * (t) - (t) % 4]
#define KS_WK_SECOND(t) wk[2 * (t) - (t) % 4 + 4]
#define KS_STORE_ONE(t, x) \
    _mm_store_si128((__m128i *)&wk[t], _mm_add_epi32(x, _mm_load_si128((const __m128i *)&ks_sha256_k[t])))
#define KS_STORE_TWO(t, x)                                                                                    \
    _mm256_store_si256((__m256i *)&wk[2 * (t)],                                                               \
                       _mm256_add_epi32(x, _mm256_broadcastsi128_si256(                                       \
                                               _mm_load_si128((const __m128i *)&ks_sha256_k[t]))))

KS_TARGET_AVX2 static void ks_sha256_compress_avx2(uint32_t state[8], const uint8_t *blocks, size_t count) {
    const __m128i byteswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
    const __m256i byteswap2 = _mm256_broadcastsi128_si256(byteswap);
    uint32_t wk[128] __attribute__((aligned(32)));
    uint32_t a, b, c, d, e, f, g, h, bc;
    /* Two blocks at a time: the first one's rounds run beside the schedule of both, the second's alone. */
    for (; count >= 2; count -= 2, blocks += 2 * KS_SHA256_BLOCK_SIZE) {
        __m256i x0 = _mm256_shuffle_epi8(
            _mm256_loadu2_m128i((const __m128i *)(blocks + 64), (const __m128i *)(blocks + 0)), byteswap2);
        __m256i x1 = _mm256_shuffle_epi8(
            _mm256_loadu2_m128i((const __m128i *)(blocks + 80), (const __m128i *)(blocks + 16)), byteswap2);
        __m256i x2 = _mm256_shuffle_epi8(
            _mm256_loadu2_m128i((const __m128i *)(blocks + 96), (const __m128i *)(blocks + 32)), byteswap2);
        __m256i x3 = _mm256_shuffle_epi8(
            _mm256_loadu2_m128i((const __m128i *)(blocks + 112), (const __m128i *)(blocks + 48)), byteswap2);
        KS_STORE_TWO(0, x0);
        KS_STORE_TWO(4, x1);
        KS_STORE_TWO(8, x2);
        KS_STORE_TWO(12, x3);
        KS_AVX2_WK_IN_MEMORY();
        a = state[0], b = state[1], c = state[2], d = state[3], e = state[4], f = state[5], g = state[6], h = state[7];
        bc = b ^ c;
        KS_AVX2_SCHEDULED_SIXTEEN(0, KS_WK_FIRST, ks_sha256_schedule4x2, KS_STORE_TWO);
        KS_AVX2_SCHEDULED_SIXTEEN(16, KS_WK_FIRST, ks_sha256_schedule4x2, KS_STORE_TWO);
        KS_AVX2_SCHEDULED_SIXTEEN(32, KS_WK_FIRST, ks_sha256_schedule4x2, KS_STORE_TWO);
        KS_AVX2_SIXTEEN_ROUNDS(48, KS_WK_FIRST);
        KS_AVX2_ADD_STATE();
        a = state[0], b = state[1], c = state[2], d = state[3], e = state[4], f = state[5], g = state[6], h = state[7];
        bc = b ^ c;
        KS_AVX2_SIXTEEN_ROUNDS(0, KS_WK_SECOND);
        KS_AVX2_SIXTEEN_ROUNDS(16, KS_WK_SECOND);
        KS_AVX2_SIXTEEN_ROUNDS(32, KS_WK_SECOND);
        KS_AVX2_SIXTEEN_ROUNDS(48, KS_WK_SECOND);
        KS_AVX2_ADD_STATE();
    }
    if (count) {
        __m128i x0 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(blocks + 0)), byteswap);
        __m128i x1 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(blocks + 16)), byteswap);
        __m128i x2 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(blocks + 32)), byteswap);
        __m128i x3 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(blocks + 48)), byteswap);
        KS_STORE_ONE(0, x0);
        KS_STORE_ONE(4, x1);
        KS_STORE_ONE(8, x2);
        KS_STORE_ONE(12, x3);
        KS_AVX2_WK_IN_MEMORY();
        a = state[0], b = state[1], c = state[2], d = state[3], e = state[4], f = state[5], g = state[6], h = state[7];
        bc = b ^ c;
        KS_AVX2_SCHEDULED_SIXTEEN(0, KS_WK_ONE, ks_sha256_schedule4, KS_STORE_ONE);
        KS_AVX2_SCHEDULED_SIXTEEN(16, KS_WK_ONE, ks_sha256_schedule4, KS_STORE_ONE);
        KS_AVX2_SCHEDULED_SIXTEEN(32, KS_WK_ONE, ks_sha256_schedule4, KS_STORE_ONE);
        KS_AVX2_SIXTEEN_ROUNDS(48, KS_WK_ONE);
        KS_AVX2_ADD_STATE();
    }
    ks_sha256_wipe(wk, sizeof wk); /* the schedule of an HMAC key block is key-derived */
}

/* ------------------------------------------------------------------------------------------------------ */
/* SHA-NI compression                                                                                     */
/* ------------------------------------------------------------------------------------------------------ */

KS_TARGET_SHANI static void ks_sha256_compress_shani(uint32_t state[8], const uint8_t *blocks, size_t count) {
    const __m128i byteswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
    __m128i low = _mm_loadu_si128((const __m128i *)&state[0]);  /* D C B A (lanes 3..0) */
    __m128i high = _mm_loadu_si128((const __m128i *)&state[4]); /* H G F E */
    low = _mm_shuffle_epi32(low, 0xB1);                         /* C D A B */
    high = _mm_shuffle_epi32(high, 0x1B);                       /* E F G H */
    __m128i abef = _mm_alignr_epi8(low, high, 8);                /* A B E F */
    __m128i cdgh = _mm_blend_epi16(high, low, 0xF0);             /* C D G H */
    for (; count > 0; count--, blocks += KS_SHA256_BLOCK_SIZE) {
        const __m128i abef_saved = abef, cdgh_saved = cdgh;
        __m128i w0 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(blocks + 0)), byteswap);
        __m128i w1 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(blocks + 16)), byteswap);
        __m128i w2 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(blocks + 32)), byteswap);
        __m128i w3 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(blocks + 48)), byteswap);
        for (int group = 0; group < 16; group++) {
            __m128i words;
            if (group < 4) {
                words = group == 0 ? w0 : group == 1 ? w1 : group == 2 ? w2 : w3;
            } else {
                __m128i next = _mm_sha256msg1_epu32(w0, w1);
                next = _mm_add_epi32(next, _mm_alignr_epi8(w3, w2, 4));
                words = _mm_sha256msg2_epu32(next, w3);
                w0 = w1;
                w1 = w2;
                w2 = w3;
                w3 = words;
            }
            __m128i message = _mm_add_epi32(words, _mm_load_si128((const __m128i *)&ks_sha256_k[4 * group]));
            cdgh = _mm_sha256rnds2_epu32(cdgh, abef, message);
            message = _mm_shuffle_epi32(message, 0x0E);
            abef = _mm_sha256rnds2_epu32(abef, cdgh, message);
        }
        abef = _mm_add_epi32(abef, abef_saved);
        cdgh = _mm_add_epi32(cdgh, cdgh_saved);
    }
    low = _mm_shuffle_epi32(abef, 0x1B);      /* F E B A */
    high = _mm_shuffle_epi32(cdgh, 0xB1);     /* D C H G */
    abef = _mm_blend_epi16(low, high, 0xF0);  /* D C B A */
    cdgh = _mm_alignr_epi8(high, low, 8);     /* H G F E */
    _mm_storeu_si128((__m128i *)&state[0], abef);
    _mm_storeu_si128((__m128i *)&state[4], cdgh);
}

ks_sha256_compress_fn ks_sha256_compress_of(ks_sha256_impl impl) {
    if (impl == KS_SHA256_SCALAR) {
        return ks_sha256_compress_scalar;
    }
    if (impl == KS_SHA256_BMI2 && (ks_sha256_impls() & KS_SHA256_BMI2)) {
        return ks_sha256_compress_bmi2;
    }
    if (impl == KS_SHA256_SHANI && (ks_sha256_impls() & KS_SHA256_SHANI)) {
        return ks_sha256_compress_shani;
    }
    if (impl == KS_SHA256_AVX2 && (ks_sha256_impls() & KS_SHA256_AVX2)) {
        return ks_sha256_compress_avx2;
    }
    return NULL;
}

/* ------------------------------------------------------------------------------------------------------ */
/* Streaming hash and HMAC                                                                                */
/* ------------------------------------------------------------------------------------------------------ */

void ks_sha256_wipe(void *pointer, size_t len) {
    memset(pointer, 0, len);
    __asm__ volatile("" : : "r"(pointer) : "memory");
}

void ks_sha256_init(ks_sha256_ctx *ctx, ks_sha256_compress_fn compress) {
    memcpy(ctx->state, ks_sha256_iv, sizeof ctx->state);
    ctx->buffered = 0;
    ctx->length = 0;
    ctx->compress = compress;
}

void ks_sha256_update(ks_sha256_ctx *ctx, const uint8_t *data, size_t len) {
    ctx->length += len;
    if (ctx->buffered) {
        const size_t take = len < KS_SHA256_BLOCK_SIZE - ctx->buffered ? len : KS_SHA256_BLOCK_SIZE - ctx->buffered;
        memcpy(ctx->buffer + ctx->buffered, data, take);
        ctx->buffered += take;
        data += take;
        len -= take;
        if (ctx->buffered < KS_SHA256_BLOCK_SIZE) {
            return;
        }
        ctx->compress(ctx->state, ctx->buffer, 1);
        ctx->buffered = 0;
    }
    const size_t whole = len / KS_SHA256_BLOCK_SIZE;
    if (whole) {
        ctx->compress(ctx->state, data, whole);
        data += whole * KS_SHA256_BLOCK_SIZE;
        len -= whole * KS_SHA256_BLOCK_SIZE;
    }
    if (len) {
        memcpy(ctx->buffer, data, len);
        ctx->buffered = len;
    }
}

void ks_sha256_final(ks_sha256_ctx *ctx, uint8_t digest[KS_SHA256_DIGEST_SIZE]) {
    const uint64_t bits = ctx->length * 8;
    size_t fill = ctx->buffered;
    ctx->buffer[fill++] = 0x80;
    if (fill > KS_SHA256_BLOCK_SIZE - 8) {
        memset(ctx->buffer + fill, 0, KS_SHA256_BLOCK_SIZE - fill);
        ctx->compress(ctx->state, ctx->buffer, 1);
        fill = 0;
    }
    memset(ctx->buffer + fill, 0, KS_SHA256_BLOCK_SIZE - 8 - fill);
    ks_store_be32(ctx->buffer + 56, (uint32_t)(bits >> 32));
    ks_store_be32(ctx->buffer + 60, (uint32_t)bits);
    ctx->compress(ctx->state, ctx->buffer, 1);
    for (int i = 0; i < 8; i++) {
        ks_store_be32(digest + 4 * i, ctx->state[i]);
    }
}

void ks_hmac_init(ks_hmac_key *hmac, ks_sha256_compress_fn compress, const uint8_t *key, size_t key_len) {
    uint8_t block[KS_SHA256_BLOCK_SIZE];
    memset(block, 0, sizeof block);
    if (key_len > KS_SHA256_BLOCK_SIZE) {
        ks_sha256_ctx hashed;
        ks_sha256_init(&hashed, compress);
        ks_sha256_update(&hashed, key, key_len);
        ks_sha256_final(&hashed, block);
        ks_sha256_wipe(&hashed, sizeof hashed);
    } else if (key_len) {
        memcpy(block, key, key_len);
    }
    for (int i = 0; i < KS_SHA256_BLOCK_SIZE; i++) {
        block[i] ^= 0x36;
    }
    ks_sha256_init(&hmac->inner, compress);
    ks_sha256_update(&hmac->inner, block, sizeof block);
    for (int i = 0; i < KS_SHA256_BLOCK_SIZE; i++) {
        block[i] ^= 0x36 ^ 0x5c;
    }
    ks_sha256_init(&hmac->outer, compress);
    ks_sha256_update(&hmac->outer, block, sizeof block);
    ks_sha256_wipe(block, sizeof block);
}

void ks_hmac_begin(const ks_hmac_key *hmac, ks_sha256_ctx *ctx) {
    *ctx = hmac->inner;
}

void ks_hmac_end(const ks_hmac_key *hmac, ks_sha256_ctx *ctx, uint8_t tag[KS_SHA256_DIGEST_SIZE]) {
    uint8_t inner[KS_SHA256_DIGEST_SIZE];
    ks_sha256_final(ctx, inner);
    *ctx = hmac->outer;
    ks_sha256_update(ctx, inner, sizeof inner);
    ks_sha256_final(ctx, tag);
    ks_sha256_wipe(inner, sizeof inner);
}
