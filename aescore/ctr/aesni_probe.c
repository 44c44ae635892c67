/* aesni_probe.c - instruction-throughput probes for the benchmark; see aesni_probe.h. */
#include "aesni_probe.h"

#include <immintrin.h>

#include "aesni_gcm.h"

#define KS_CHAINS 12
#define KS_T128 __attribute__((target("aes,pclmul,sse4.1")))
#define KS_T256 __attribute__((target("aes,pclmul,sse4.1,avx2,vaes,vpclmulqdq")))
#define KS_T512 __attribute__((target("aes,pclmul,sse4.1,avx2,vaes,vpclmulqdq,avx512f,avx512bw")))

/* One probe per width: WIDTH is the intrinsic prefix, LANES the blocks per register. */
#define KS_PROBES(TARGET, TYPE, SET1, XOR, AESENC, AESLAST, CLMUL, FOLD, LANES, SUFFIX)                    \
    TARGET static uint64_t ks_aes_##SUFFIX(uint64_t iterations, uint8_t *sink) {                          \
        TYPE x[KS_CHAINS];                                                                                 \
        const TYPE key = SET1(0x5a5a5a5a);                                                                 \
        for (int j = 0; j < KS_CHAINS; j++) {                                                              \
            x[j] = SET1(j);                                                                                \
        }                                                                                                  \
        for (uint64_t n = 0; n < iterations; n++) {                                                        \
            _Pragma("GCC unroll 9") for (int r = 0; r < 9; r++) {                                          \
                _Pragma("GCC unroll 12") for (int j = 0; j < KS_CHAINS; j++) {                             \
                    x[j] = AESENC(x[j], key);                                                              \
                }                                                                                          \
            }                                                                                              \
            _Pragma("GCC unroll 12") for (int j = 0; j < KS_CHAINS; j++) {                                 \
                x[j] = AESLAST(x[j], key);                                                                 \
            }                                                                                              \
        }                                                                                                  \
        TYPE folded = x[0];                                                                                \
        for (int j = 1; j < KS_CHAINS; j++) {                                                              \
            folded = XOR(folded, x[j]);                                                                    \
        }                                                                                                  \
        _mm_storeu_si128((__m128i *)sink, FOLD(folded));                                                   \
        return iterations * KS_CHAINS * LANES;                                                             \
    }                                                                                                      \
    TARGET static uint64_t ks_clmul_##SUFFIX(uint64_t iterations, uint8_t *sink) {                        \
        TYPE x[KS_CHAINS];                                                                                 \
        const TYPE key = SET1(0x5a5a5a5a);                                                                 \
        for (int j = 0; j < KS_CHAINS; j++) {                                                              \
            x[j] = SET1(j + 1);                                                                            \
        }                                                                                                  \
        for (uint64_t n = 0; n < iterations; n++) {                                                        \
            _Pragma("GCC unroll 12") for (int j = 0; j < KS_CHAINS; j++) {                                 \
                x[j] = CLMUL(x[j], key, 0x01);                                                             \
            }                                                                                              \
        }                                                                                                  \
        TYPE folded = x[0];                                                                                \
        for (int j = 1; j < KS_CHAINS; j++) {                                                              \
            folded = XOR(folded, x[j]);                                                                    \
        }                                                                                                  \
        _mm_storeu_si128((__m128i *)sink, FOLD(folded));                                                   \
        return iterations * KS_CHAINS * LANES / 3; /* three multiplies per block */                      \
    }

KS_T128 static inline __m128i ks_fold128(__m128i x) { return x; }
KS_T256 static inline __m128i ks_fold256(__m256i x) {
    return _mm_xor_si128(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
}
KS_T512 static inline __m128i ks_fold512(__m512i x) {
    return ks_fold256(_mm256_xor_si256(_mm512_castsi512_si256(x), _mm512_extracti64x4_epi64(x, 1)));
}

KS_PROBES(KS_T128, __m128i, _mm_set1_epi32, _mm_xor_si128, _mm_aesenc_si128, _mm_aesenclast_si128,
          _mm_clmulepi64_si128, ks_fold128, 1, 128)
KS_PROBES(KS_T256, __m256i, _mm256_set1_epi32, _mm256_xor_si256, _mm256_aesenc_epi128, _mm256_aesenclast_epi128,
          _mm256_clmulepi64_epi128, ks_fold256, 2, 256)
KS_PROBES(KS_T512, __m512i, _mm512_set1_epi32, _mm512_xor_si512, _mm512_aesenc_epi128, _mm512_aesenclast_epi128,
          _mm512_clmulepi64_epi128, ks_fold512, 4, 512)

typedef uint64_t (*ks_probe_fn)(uint64_t, uint8_t *);

static ks_status ks_probe(const ks_probe_fn *table, ks_isa isa, uint64_t iterations, uint64_t *blocks,
                          uint8_t *sink) {
    if (blocks == NULL || sink == NULL) {
        return KS_ERR_NULL;
    }
    if ((isa != KS_ISA_AESNI && isa != KS_ISA_VAES256 && isa != KS_ISA_VAES512) || !(ks_gcm_cpu_isas() & isa)) {
        return KS_ERR_ISA;
    }
    *blocks = table[isa == KS_ISA_AESNI ? 0 : isa == KS_ISA_VAES256 ? 1 : 2](iterations, sink);
    return KS_OK;
}

ks_status ks_probe_aes128(ks_isa isa, uint64_t iterations, uint64_t *blocks, uint8_t sink[KS_BLOCK_SIZE]) {
    static const ks_probe_fn table[3] = {ks_aes_128, ks_aes_256, ks_aes_512};
    return ks_probe(table, isa, iterations, blocks, sink);
}

ks_status ks_probe_clmul(ks_isa isa, uint64_t iterations, uint64_t *blocks, uint8_t sink[KS_BLOCK_SIZE]) {
    static const ks_probe_fn table[3] = {ks_clmul_128, ks_clmul_256, ks_clmul_512};
    return ks_probe(table, isa, iterations, blocks, sink);
}
