/*
 * aesni_ctr.c - AES-CTR with AES-NI (xmm), VAES-256 (ymm) and VAES-512 (zmm) intrinsics.
 *
 * Compiled with plain gcc/clang flags: every function that uses an extension carries a function-level
 * target attribute, and nothing runs an instruction the CPU lacks because the caller picks the path from
 * ks_cpu_isas() (CPUID + XGETBV).
 *
 * Counter handling. The 16-byte counter block is a big-endian 128-bit integer, kept here as two uint64_t
 * halves (hi, lo). The vector paths hold counters little-endian in each 128-bit lane ([lo, hi] qwords), add
 * the lane increments to the low qword only, and byte-reverse each lane with PSHUFB to get the big-endian
 * block. That is exact as long as the low 64 bits do not carry inside one batch; the (rare) batch that would
 * carry is built one counter at a time with a full 128-bit add instead, so the result always equals
 * C0 + i mod 2**128.
 *
 * Memory: every path reads exactly in[0..len) and writes exactly out[0..len). Tails shorter than a vector
 * use AVX-512BW masked loads/stores (which do not touch masked-out bytes) or a small stack buffer.
 */
#include "aesni_ctr.h"

#include <cpuid.h>
#include <immintrin.h>
#include <string.h>

#define KS_TARGET_AESNI __attribute__((target("aes,sse4.1,ssse3")))
#define KS_TARGET_VAES256 __attribute__((target("aes,sse4.1,ssse3,avx2,vaes")))
#define KS_TARGET_VAES512 __attribute__((target("aes,sse4.1,ssse3,avx2,vaes,avx512f,avx512bw")))
#define KS_INLINE static inline __attribute__((always_inline))
#define KS_LIKELY(x) __builtin_expect(!!(x), 1)

/* ------------------------------------------------------------------------------------------------------ */
/* CPU detection                                                                                          */
/* ------------------------------------------------------------------------------------------------------ */

static uint64_t ks_xgetbv0(void) {
    uint32_t eax, edx;
    /* Only called once CPUID says OSXSAVE is set, so XGETBV exists. */
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((uint64_t)edx << 32) | eax;
}

/* The vector-state bits of XCR0 the OS saves (0 without AVX/OSXSAVE): the YMM and ZMM checks below. */
static uint64_t ks_os_xcr0(void) {
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) {
        return 0;
    }
    const int has_osxsave = (ecx >> 27) & 1, has_avx = (ecx >> 28) & 1;
    return has_osxsave && has_avx ? ks_xgetbv0() : 0;
}

#define KS_OS_YMM(xcr0) (((xcr0) & 0x6) == 0x6)                          /* XMM and YMM state enabled */
#define KS_OS_ZMM(xcr0) (KS_OS_YMM(xcr0) && ((xcr0) & 0xe0) == 0xe0)    /* opmask, ZMM_Hi256, Hi16_ZMM */

static unsigned ks_detect_isas(void) {
    unsigned eax, ebx, ecx, edx;
    unsigned result = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) {
        return 0;
    }
    const int has_aes = (ecx >> 25) & 1, has_ssse3 = (ecx >> 9) & 1, has_sse41 = (ecx >> 19) & 1;
    if (!(has_aes && has_ssse3 && has_sse41)) {
        return 0;
    }
    result |= KS_ISA_AESNI;
    const uint64_t xcr0 = ks_os_xcr0();
    if (!KS_OS_YMM(xcr0) || !__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
        return result;
    }
    const int has_avx2 = (ebx >> 5) & 1, has_avx512f = (ebx >> 16) & 1, has_avx512bw = (ebx >> 30) & 1;
    const int has_vaes = (ecx >> 9) & 1;
    if (has_avx2 && has_vaes) {
        result |= KS_ISA_VAES256;
        if (KS_OS_ZMM(xcr0) && has_avx512f && has_avx512bw) {
            result |= KS_ISA_VAES512;
        }
    }
    return result;
}

static int ks_detect_avx2(void) {
    unsigned eax, ebx, ecx, edx;
    if (!KS_OS_YMM(ks_os_xcr0()) || !__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
        return 0;
    }
    return (ebx >> 5) & 1;
}

unsigned ks_cpu_isas(void) {
    /* Computed once; the race between first callers is benign (same value) but kept atomic for TSan. */
    static int cached = -1;
    int value = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (value < 0) {
        value = (int)ks_detect_isas();
        __atomic_store_n(&cached, value, __ATOMIC_RELAXED);
    }
    return (unsigned)value;
}

int ks_cpu_avx2(void) {
    static int cached = -1;
    int value = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (value < 0) {
        value = ks_detect_avx2();
        __atomic_store_n(&cached, value, __ATOMIC_RELAXED);
    }
    return value;
}

/* ------------------------------------------------------------------------------------------------------ */
/* Key expansion (FIPS-197 5.2, with SubWord done by AESKEYGENASSIST: constant time, no tables)           */
/* ------------------------------------------------------------------------------------------------------ */

KS_TARGET_AESNI static uint32_t ks_sub_word(uint32_t word) {
    /* AESKEYGENASSIST puts SubWord(X1) in dword 0 of its result; RCON 0 so nothing else is mixed in. */
    const __m128i assisted = _mm_aeskeygenassist_si128(_mm_set_epi32(0, 0, (int)word, 0), 0);
    return (uint32_t)_mm_cvtsi128_si32(assisted);
}

KS_TARGET_AESNI ks_status ks_expand_key(const uint8_t *key, size_t key_len, ks_aes_key *out) {
    static const uint8_t rcon[10] = {0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80, 0x1b, 0x36};
    if (key == NULL || out == NULL) {
        return KS_ERR_NULL;
    }
    if (key_len != 16 && key_len != 24 && key_len != 32) {
        return KS_ERR_KEY_SIZE;
    }
    if (!(ks_cpu_isas() & KS_ISA_AESNI)) {
        return KS_ERR_ISA;
    }
    const unsigned nk = (unsigned)key_len / 4, rounds = nk + 6, total = 4 * (rounds + 1);
    uint32_t words[4 * (KS_MAX_ROUNDS + 1)];
    memcpy(words, key, key_len); /* words are little-endian loads: byte 0 is the low byte */
    for (unsigned i = nk; i < total; i++) {
        uint32_t temp = words[i - 1];
        if (i % nk == 0) {
            /* RotWord is a rotation by one byte towards byte 0: a right rotate of the little-endian word. */
            temp = ks_sub_word((temp >> 8) | (temp << 24)) ^ rcon[i / nk - 1];
        } else if (nk > 6 && i % nk == 4) {
            temp = ks_sub_word(temp);
        }
        words[i] = words[i - nk] ^ temp;
    }
    memcpy(out->round_keys, words, 4 * total);
    memset(out->round_keys + 4 * total, 0, sizeof out->round_keys - 4 * total);
    out->rounds = rounds;
    /* The temporary schedule is key material too. */
    memset(words, 0, sizeof words);
    __asm__ volatile("" : : "r"(words) : "memory");
    return KS_OK;
}

void ks_wipe_key(ks_aes_key *key) {
    if (key == NULL) {
        return;
    }
    memset(key, 0, sizeof *key);
    __asm__ volatile("" : : "r"(key) : "memory");
}

/* ------------------------------------------------------------------------------------------------------ */
/* Counter helpers                                                                                        */
/* ------------------------------------------------------------------------------------------------------ */

/* (hi, lo) += n, modulo 2**128. */
KS_INLINE void ks_add(uint64_t *hi, uint64_t *lo, uint64_t n) {
    const uint64_t sum = *lo + n;
    *hi += sum < n;
    *lo = sum;
}

/* Write the big-endian counter block (hi, lo) + n (mod 2**128) to dst. */
KS_INLINE void ks_store_counter(uint8_t *dst, uint64_t hi, uint64_t lo, uint64_t n) {
    ks_add(&hi, &lo, n);
    const uint64_t be_hi = __builtin_bswap64(hi), be_lo = __builtin_bswap64(lo);
    memcpy(dst, &be_hi, 8);
    memcpy(dst + 8, &be_lo, 8);
}

/* ------------------------------------------------------------------------------------------------------ */
/* 128-bit AES-NI: 8 blocks in flight                                                                     */
/* ------------------------------------------------------------------------------------------------------ */

KS_TARGET_AESNI KS_INLINE __m128i ks_bswap128_mask(void) {
    return _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

/* Encrypt n counter blocks (hi, lo) + 0..n-1 into ks[0..n). */
KS_TARGET_AESNI KS_INLINE void ks_aesni_blocks(const __m128i *rk, const int rounds, uint64_t hi, uint64_t lo,
                                               __m128i *ks, const int n) {
    if (KS_LIKELY(lo <= UINT64_MAX - (uint64_t)(n - 1))) {
        const __m128i base = _mm_set_epi64x((long long)hi, (long long)lo), swap = ks_bswap128_mask();
#pragma GCC unroll 8
        for (int j = 0; j < n; j++) {
            ks[j] = _mm_shuffle_epi8(_mm_add_epi64(base, _mm_set_epi64x(0, j)), swap);
        }
    } else {
        uint8_t blocks[8 * KS_BLOCK_SIZE];
        for (int j = 0; j < n; j++) {
            ks_store_counter(blocks + KS_BLOCK_SIZE * j, hi, lo, (uint64_t)j);
            ks[j] = _mm_loadu_si128((const __m128i *)(blocks + KS_BLOCK_SIZE * j));
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < n; j++) {
        ks[j] = _mm_xor_si128(ks[j], rk[0]);
    }
#pragma GCC unroll 14
    for (int r = 1; r < rounds; r++) {
#pragma GCC unroll 8
        for (int j = 0; j < n; j++) {
            ks[j] = _mm_aesenc_si128(ks[j], rk[r]);
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < n; j++) {
        ks[j] = _mm_aesenclast_si128(ks[j], rk[rounds]);
    }
}

/* XOR up to 16 bytes through a stack buffer: touches only in[0..n) and out[0..n). */
KS_TARGET_AESNI KS_INLINE void ks_xor_partial16(__m128i keystream, const uint8_t *in, uint8_t *out, size_t n) {
    uint8_t buffer[KS_BLOCK_SIZE];
    memcpy(buffer, in, n);
    _mm_storeu_si128((__m128i *)buffer,
                     _mm_xor_si128(_mm_loadu_si128((const __m128i *)buffer), keystream));
    memcpy(out, buffer, n);
}

/* Process len bytes starting at keystream block (hi, lo), i.e. a block-aligned keystream position. */
KS_TARGET_AESNI KS_INLINE void ks_aesni_body(const ks_aes_key *key, const int rounds, uint64_t hi, uint64_t lo,
                                             const uint8_t *in, uint8_t *out, size_t len, const int stream) {
    (void)stream; /* no streaming stores on this path: 16-byte ones gain little */
    __m128i rk[KS_MAX_ROUNDS + 1];
#pragma GCC unroll 15
    for (int r = 0; r <= rounds; r++) {
        rk[r] = _mm_loadu_si128((const __m128i *)(key->round_keys + KS_BLOCK_SIZE * r));
    }
    __m128i ks[8];
    while (len >= 8 * KS_BLOCK_SIZE) {
        ks_aesni_blocks(rk, rounds, hi, lo, ks, 8);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            const __m128i data = _mm_loadu_si128((const __m128i *)(in + KS_BLOCK_SIZE * j));
            _mm_storeu_si128((__m128i *)(out + KS_BLOCK_SIZE * j), _mm_xor_si128(data, ks[j]));
        }
        ks_add(&hi, &lo, 8);
        in += 8 * KS_BLOCK_SIZE;
        out += 8 * KS_BLOCK_SIZE;
        len -= 8 * KS_BLOCK_SIZE;
    }
    if (len == 0) {
        return;
    }
    /* 1..127 bytes left: one batch of up to 8 blocks, all in flight together. */
    const size_t blocks = (len + KS_BLOCK_SIZE - 1) / KS_BLOCK_SIZE;
    if (blocks <= 2) {
        ks_aesni_blocks(rk, rounds, hi, lo, ks, 2);
    } else if (blocks <= 4) {
        ks_aesni_blocks(rk, rounds, hi, lo, ks, 4);
    } else {
        ks_aesni_blocks(rk, rounds, hi, lo, ks, 8);
    }
    size_t j = 0;
    for (; len >= KS_BLOCK_SIZE; j++, len -= KS_BLOCK_SIZE) {
        const __m128i data = _mm_loadu_si128((const __m128i *)(in + KS_BLOCK_SIZE * j));
        _mm_storeu_si128((__m128i *)(out + KS_BLOCK_SIZE * j), _mm_xor_si128(data, ks[j]));
    }
    if (len) {
        ks_xor_partial16(ks[j], in + KS_BLOCK_SIZE * j, out + KS_BLOCK_SIZE * j, len);
    }
}

/* ------------------------------------------------------------------------------------------------------ */
/* VAES on ymm (AVX2): 2 blocks per register, 8 registers = 16 blocks in flight                          */
/* ------------------------------------------------------------------------------------------------------ */

KS_TARGET_VAES256 KS_INLINE void ks_vaes256_blocks(const __m256i *rk, const int rounds, uint64_t hi, uint64_t lo,
                                                   __m256i *ks, const int n) {
    if (KS_LIKELY(lo <= UINT64_MAX - (uint64_t)(2 * n - 1))) {
        const __m256i swap = _mm256_broadcastsi128_si256(ks_bswap128_mask());
        const __m256i base = _mm256_add_epi64(
            _mm256_broadcastsi128_si256(_mm_set_epi64x((long long)hi, (long long)lo)), _mm256_set_epi64x(0, 1, 0, 0));
#pragma GCC unroll 8
        for (int j = 0; j < n; j++) {
            ks[j] = _mm256_shuffle_epi8(_mm256_add_epi64(base, _mm256_set_epi64x(0, 2 * j, 0, 2 * j)), swap);
        }
    } else {
        uint8_t blocks[16 * KS_BLOCK_SIZE];
        for (int j = 0; j < 2 * n; j++) {
            ks_store_counter(blocks + KS_BLOCK_SIZE * j, hi, lo, (uint64_t)j);
        }
        for (int j = 0; j < n; j++) {
            ks[j] = _mm256_loadu_si256((const __m256i *)(blocks + 32 * j));
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < n; j++) {
        ks[j] = _mm256_xor_si256(ks[j], rk[0]);
    }
#pragma GCC unroll 14
    for (int r = 1; r < rounds; r++) {
#pragma GCC unroll 8
        for (int j = 0; j < n; j++) {
            ks[j] = _mm256_aesenc_epi128(ks[j], rk[r]);
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < n; j++) {
        ks[j] = _mm256_aesenclast_epi128(ks[j], rk[rounds]);
    }
}

KS_TARGET_VAES256 KS_INLINE void ks_vaes256_body(const ks_aes_key *key, const int rounds, uint64_t hi,
                                                 uint64_t lo, const uint8_t *in, uint8_t *out, size_t len,
                                                 const int stream) {
    (void)stream; /* streaming stores are implemented on the VAES-512 path only */
    __m256i rk[KS_MAX_ROUNDS + 1];
#pragma GCC unroll 15
    for (int r = 0; r <= rounds; r++) {
        rk[r] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(key->round_keys + KS_BLOCK_SIZE * r)));
    }
    __m256i ks[8];
    while (len >= 8 * 32) {
        ks_vaes256_blocks(rk, rounds, hi, lo, ks, 8);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            const __m256i data = _mm256_loadu_si256((const __m256i *)(in + 32 * j));
            _mm256_storeu_si256((__m256i *)(out + 32 * j), _mm256_xor_si256(data, ks[j]));
        }
        ks_add(&hi, &lo, 16);
        in += 8 * 32;
        out += 8 * 32;
        len -= 8 * 32;
    }
    if (len == 0) {
        return;
    }
    /* 1..255 bytes left: one batch of up to 8 ymm. */
    const size_t pairs = (len + 31) / 32;
    if (pairs <= 1) {
        ks_vaes256_blocks(rk, rounds, hi, lo, ks, 1);
    } else if (pairs <= 2) {
        ks_vaes256_blocks(rk, rounds, hi, lo, ks, 2);
    } else if (pairs <= 4) {
        ks_vaes256_blocks(rk, rounds, hi, lo, ks, 4);
    } else {
        ks_vaes256_blocks(rk, rounds, hi, lo, ks, 8);
    }
    size_t j = 0;
    for (; len >= 32; j++, len -= 32) {
        const __m256i data = _mm256_loadu_si256((const __m256i *)(in + 32 * j));
        _mm256_storeu_si256((__m256i *)(out + 32 * j), _mm256_xor_si256(data, ks[j]));
    }
    if (len) {
        const uint8_t *tail_in = in + 32 * j;
        uint8_t *tail_out = out + 32 * j;
        __m128i keystream = _mm256_castsi256_si128(ks[j]);
        if (len >= KS_BLOCK_SIZE) {
            const __m128i data = _mm_loadu_si128((const __m128i *)tail_in);
            _mm_storeu_si128((__m128i *)tail_out, _mm_xor_si128(data, keystream));
            keystream = _mm256_extracti128_si256(ks[j], 1);
            tail_in += KS_BLOCK_SIZE;
            tail_out += KS_BLOCK_SIZE;
            len -= KS_BLOCK_SIZE;
        }
        if (len) {
            ks_xor_partial16(keystream, tail_in, tail_out, len);
        }
    }
}

/* ------------------------------------------------------------------------------------------------------ */
/* VAES on zmm (AVX-512F/BW): 4 blocks per register, 8 registers = 32 blocks in flight, masked tail       */
/* ------------------------------------------------------------------------------------------------------ */

KS_TARGET_VAES512 KS_INLINE void ks_vaes512_blocks(const __m512i *rk, const int rounds, uint64_t hi, uint64_t lo,
                                                   __m512i *ks, const int n) {
    if (KS_LIKELY(lo <= UINT64_MAX - (uint64_t)(4 * n - 1))) {
        const __m512i swap = _mm512_broadcast_i32x4(ks_bswap128_mask());
        const __m512i base = _mm512_add_epi64(_mm512_broadcast_i32x4(_mm_set_epi64x((long long)hi, (long long)lo)),
                                              _mm512_set_epi64(0, 3, 0, 2, 0, 1, 0, 0));
#pragma GCC unroll 8
        for (int j = 0; j < n; j++) {
            const long long step = 4LL * j;
            ks[j] = _mm512_shuffle_epi8(
                _mm512_add_epi64(base, _mm512_set_epi64(0, step, 0, step, 0, step, 0, step)), swap);
        }
    } else {
        uint8_t blocks[32 * KS_BLOCK_SIZE];
        for (int j = 0; j < 4 * n; j++) {
            ks_store_counter(blocks + KS_BLOCK_SIZE * j, hi, lo, (uint64_t)j);
        }
        for (int j = 0; j < n; j++) {
            ks[j] = _mm512_loadu_si512((const void *)(blocks + 64 * j));
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < n; j++) {
        ks[j] = _mm512_xor_si512(ks[j], rk[0]);
    }
#pragma GCC unroll 14
    for (int r = 1; r < rounds; r++) {
#pragma GCC unroll 8
        for (int j = 0; j < n; j++) {
            ks[j] = _mm512_aesenc_epi128(ks[j], rk[r]);
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < n; j++) {
        ks[j] = _mm512_aesenclast_epi128(ks[j], rk[rounds]);
    }
}

/* XOR len (< n * 64) bytes with ks[0..n) using byte-masked loads/stores for the partial register. */
KS_TARGET_VAES512 KS_INLINE void ks_vaes512_xor_tail(const __m512i *ks, const int n, const uint8_t *in,
                                                     uint8_t *out, size_t len) {
    for (int j = 0; j < n && len; j++) {
        if (len >= 64) {
            const __m512i data = _mm512_loadu_si512((const void *)(in + 64 * j));
            _mm512_storeu_si512((void *)(out + 64 * j), _mm512_xor_si512(data, ks[j]));
            len -= 64;
        } else {
            const __mmask64 mask = (__mmask64)((1ULL << len) - 1);
            const __m512i data = _mm512_maskz_loadu_epi8(mask, (const void *)(in + 64 * j));
            _mm512_mask_storeu_epi8((void *)(out + 64 * j), mask, _mm512_xor_si512(data, ks[j]));
            len = 0;
        }
    }
}

/* 32 blocks (512 bytes) per iteration; `stream` selects non-temporal stores (out must be 64-byte aligned). */
KS_TARGET_VAES512 KS_INLINE void ks_vaes512_loop(const __m512i *rk, const int rounds, uint64_t *hi, uint64_t *lo,
                                                 const uint8_t **in, uint8_t **out, size_t *len, const int stream) {
    __m512i ks[8];
    while (*len >= 8 * 64) {
        ks_vaes512_blocks(rk, rounds, *hi, *lo, ks, 8);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            const __m512i data = _mm512_xor_si512(_mm512_loadu_si512((const void *)(*in + 64 * j)), ks[j]);
            if (stream) {
                _mm512_stream_si512((void *)(*out + 64 * j), data);
            } else {
                _mm512_storeu_si512((void *)(*out + 64 * j), data);
            }
        }
        ks_add(hi, lo, 32);
        *in += 8 * 64;
        *out += 8 * 64;
        *len -= 8 * 64;
    }
}

/* 1..511 bytes: one batch of 1, 2, 4 or 8 zmm, all in flight together, masked for the partial register. */
KS_TARGET_VAES512 KS_INLINE void ks_vaes512_tail(const __m512i *rk, const int rounds, uint64_t hi, uint64_t lo,
                                                 const uint8_t *in, uint8_t *out, size_t len) {
    __m512i ks[8];
    const size_t vectors = (len + 63) / 64;
    if (vectors <= 1) {
        ks_vaes512_blocks(rk, rounds, hi, lo, ks, 1);
        ks_vaes512_xor_tail(ks, 1, in, out, len);
    } else if (vectors <= 2) {
        ks_vaes512_blocks(rk, rounds, hi, lo, ks, 2);
        ks_vaes512_xor_tail(ks, 2, in, out, len);
    } else if (vectors <= 4) {
        ks_vaes512_blocks(rk, rounds, hi, lo, ks, 4);
        ks_vaes512_xor_tail(ks, 4, in, out, len);
    } else {
        ks_vaes512_blocks(rk, rounds, hi, lo, ks, 8);
        ks_vaes512_xor_tail(ks, 8, in, out, len);
    }
}

KS_TARGET_VAES512 KS_INLINE void ks_vaes512_body(const ks_aes_key *key, const int rounds, uint64_t hi,
                                                 uint64_t lo, const uint8_t *in, uint8_t *out, size_t len,
                                                 const int stream) {
    __m512i rk[KS_MAX_ROUNDS + 1];
#pragma GCC unroll 15
    for (int r = 0; r <= rounds; r++) {
        rk[r] = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(key->round_keys + KS_BLOCK_SIZE * r)));
    }
    if (stream && len >= 8 * 64 && ((uintptr_t)out & 15) == 0) {
        /* Write around the caches (no read-for-ownership of `out`, no eviction of the caller's working
         * set). Align `out` to 64 bytes with 0..3 whole blocks first; if `out` is not even 16-byte aligned
         * relative to the keystream blocks, ordinary stores are used. */
        const size_t head = (size_t)(-(uintptr_t)out) & 63;
        if (head) {
            ks_vaes512_tail(rk, rounds, hi, lo, in, out, head);
            ks_add(&hi, &lo, head / KS_BLOCK_SIZE);
            in += head;
            out += head;
            len -= head;
        }
        ks_vaes512_loop(rk, rounds, &hi, &lo, &in, &out, &len, 1);
        _mm_sfence(); /* order the non-temporal stores before anything the caller does next */
    } else {
        ks_vaes512_loop(rk, rounds, &hi, &lo, &in, &out, &len, 0);
    }
    if (len) {
        ks_vaes512_tail(rk, rounds, hi, lo, in, out, len);
    }
}

/* ------------------------------------------------------------------------------------------------------ */
/* One specialised function per (path, round count) so round loops are fully unrolled                     */
/* ------------------------------------------------------------------------------------------------------ */

typedef void (*ks_body_fn)(const ks_aes_key *, uint64_t, uint64_t, const uint8_t *, uint8_t *, size_t, int);

#define KS_SPECIALISE(PATH, TARGET, ROUNDS)                                                                 \
    TARGET static void ks_##PATH##_##ROUNDS(const ks_aes_key *key, uint64_t hi, uint64_t lo, const uint8_t *in, \
                                             uint8_t *out, size_t len, int stream) {                         \
        ks_##PATH##_body(key, ROUNDS, hi, lo, in, out, len, stream);                                         \
    }

KS_SPECIALISE(aesni, KS_TARGET_AESNI, 10)
KS_SPECIALISE(aesni, KS_TARGET_AESNI, 12)
KS_SPECIALISE(aesni, KS_TARGET_AESNI, 14)
KS_SPECIALISE(vaes256, KS_TARGET_VAES256, 10)
KS_SPECIALISE(vaes256, KS_TARGET_VAES256, 12)
KS_SPECIALISE(vaes256, KS_TARGET_VAES256, 14)
KS_SPECIALISE(vaes512, KS_TARGET_VAES512, 10)
KS_SPECIALISE(vaes512, KS_TARGET_VAES512, 12)
KS_SPECIALISE(vaes512, KS_TARGET_VAES512, 14)

/* Keystream block (hi, lo) for the unaligned first block. */
KS_TARGET_AESNI static __m128i ks_encrypt_one(const ks_aes_key *key, uint64_t hi, uint64_t lo) {
    __m128i rk[KS_MAX_ROUNDS + 1];
    const int rounds = (int)key->rounds;
    for (int r = 0; r <= KS_MAX_ROUNDS; r++) { /* unused round keys are zero-filled by ks_expand_key */
        rk[r] = _mm_loadu_si128((const __m128i *)(key->round_keys + KS_BLOCK_SIZE * r));
    }
    __m128i block = _mm_shuffle_epi8(_mm_set_epi64x((long long)hi, (long long)lo), ks_bswap128_mask());
    block = _mm_xor_si128(block, rk[0]);
    for (int r = 1; r < rounds; r++) {
        block = _mm_aesenc_si128(block, rk[r]);
    }
    return _mm_aesenclast_si128(block, rk[rounds]);
}

KS_TARGET_AESNI static void ks_xor_head(const ks_aes_key *key, uint64_t hi, uint64_t lo, unsigned skip,
                                        const uint8_t *in, uint8_t *out, size_t n) {
    uint8_t keystream[KS_BLOCK_SIZE];
    _mm_storeu_si128((__m128i *)keystream, ks_encrypt_one(key, hi, lo));
    for (size_t i = 0; i < n; i++) {
        out[i] = in[i] ^ keystream[skip + i];
    }
    memset(keystream, 0, sizeof keystream);
    __asm__ volatile("" : : "r"(keystream) : "memory");
}

ks_status ks_ctr_xor(const ks_aes_key *key, ks_isa isa, const uint8_t initial_counter[KS_BLOCK_SIZE],
                     uint64_t offset, const uint8_t *in, uint8_t *out, size_t len, ks_store store) {
    if (key == NULL || initial_counter == NULL || (len && (in == NULL || out == NULL))) {
        return KS_ERR_NULL;
    }
    if (key->rounds != 10 && key->rounds != 12 && key->rounds != 14) {
        return KS_ERR_KEY_STATE;
    }
    if (offset != 0 && (uint64_t)len > (uint64_t)0 - offset) {
        return KS_ERR_RANGE;
    }
    const unsigned supported = ks_cpu_isas();
    if ((isa != KS_ISA_AESNI && isa != KS_ISA_VAES256 && isa != KS_ISA_VAES512) || !(supported & isa)) {
        return KS_ERR_ISA;
    }
    if (len == 0) {
        return KS_OK;
    }
    uint64_t hi, lo;
    memcpy(&hi, initial_counter, 8);
    memcpy(&lo, initial_counter + 8, 8);
    hi = __builtin_bswap64(hi);
    lo = __builtin_bswap64(lo);
    ks_add(&hi, &lo, offset / KS_BLOCK_SIZE);

    const unsigned skip = (unsigned)(offset % KS_BLOCK_SIZE);
    if (skip) {
        const size_t n = len < KS_BLOCK_SIZE - skip ? len : KS_BLOCK_SIZE - skip;
        ks_xor_head(key, hi, lo, skip, in, out, n);
        in += n;
        out += n;
        len -= n;
        ks_add(&hi, &lo, 1);
        if (len == 0) {
            return KS_OK;
        }
    }

    static const ks_body_fn table[3][3] = {
        {ks_aesni_10, ks_aesni_12, ks_aesni_14},
        {ks_vaes256_10, ks_vaes256_12, ks_vaes256_14},
        {ks_vaes512_10, ks_vaes512_12, ks_vaes512_14},
    };
    const int path = isa == KS_ISA_AESNI ? 0 : isa == KS_ISA_VAES256 ? 1 : 2;
    table[path][(key->rounds - 10) / 2](key, hi, lo, in, out, len, store == KS_STORE_STREAM);
    return KS_OK;
}
