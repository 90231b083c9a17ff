// keep_auto.h: which decoder linears `g4cu quantize --keep-auto BYTES` keeps fp16: the ones whose
// 4-bit quantization costs the most KL divergence per byte saved, from a sensitivity run
// (eval/sensitivity.h: each linear quantized alone, KL(p_f16 || p_one_q4) on calibration ids),
// within a budget of extra decoder bytes over the all-Q4 package.
#ifndef G4_KEEP_AUTO_H
#define G4_KEEP_AUTO_H

#include <stdint.h>

#include "fidelity/report.h"

// Bytes a [K, N] linear takes as fp16 minus what it takes as MatMulNBits (block `block`: codes
// N*kb*block/2, fp16 scales N*kb, zero points N*ceil(kb/2); kb = ceil(K / block)).
uint64_t g4_keep_auto_extra_bytes(int K, int N, int block);

// Greedy by kl_mean / extra bytes (evaluated rows only; ties by the row order): each row whose
// extra bytes still fit the budget is taken. picked[n] gets 1 for the kept rows; returns the
// number kept and the bytes used in *used.
int g4_keep_auto_pick(const g4_sens_row *rows, int n, uint64_t budget, int block, int *picked,
                      uint64_t *used);

#endif
