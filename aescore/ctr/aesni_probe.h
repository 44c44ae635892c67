/*
 * aesni_probe.h - instruction-throughput probes for the benchmark (bench/bench_aescore.py): how fast could
 * AES-128 or GHASH run on this core if nothing but their round / carry-less-multiply instructions ran?
 *
 * Each probe runs `iterations` rounds of 12 independent dependency chains (enough to hide the latency) on
 * the path's register width and returns, through `blocks`, how many 16-byte blocks that work stands for:
 *   ks_probe_aes128: 9 AESENC + 1 AESENCLAST per block (one AES-128 encryption);
 *   ks_probe_clmul:  3 carry-less 64x64 multiplies per block (Karatsuba GHASH, reduction not counted).
 * `sink` receives a fold of the chains so the compiler cannot drop the work. No secrets are involved.
 */
#ifndef KS_AESNI_PROBE_H
#define KS_AESNI_PROBE_H

#include "aesni_ctr.h"

#ifdef __cplusplus
extern "C" {
#endif

ks_status ks_probe_aes128(ks_isa isa, uint64_t iterations, uint64_t *blocks, uint8_t sink[KS_BLOCK_SIZE]);
ks_status ks_probe_clmul(ks_isa isa, uint64_t iterations, uint64_t *blocks, uint8_t sink[KS_BLOCK_SIZE]);

#ifdef __cplusplus
}
#endif

#endif /* KS_AESNI_PROBE_H */
