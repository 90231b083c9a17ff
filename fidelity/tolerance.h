// tolerance.h: the comparison policy against an HF dump: which named tolerance (max rel err
// ||ours - ref|| / ||ref||) a tensor is held to, shared by `g4cu compare` and the tests.
//
// cpu-f32: the CPU backend computes in fp32 like the fp32 HF reference on the same
//   fp16-rounded weights; the only differences are summation order and libm rounding, which
//   stay near 1e-6 per op and grow through 35 layers of residual adds: 1e-4 bounds that with
//   room, while any real formula difference (a wrong scale, norm or mask) is >= 1e-3.
// cuda-f16: fp16 activations and KV cache (each rounding ~2.4e-4 relative, ~100 per layer):
//   2e-2 per tensor; logits are judged by argmax agreement too.
// hf-fp16x3 (`g4cu compare --tol-from HF16.npz`): per tensor, 3x the error HF's own fp16 run
//   (same weights, same ids) makes against the fp32 dump, floored at 1e-3: deep random-weight
//   models amplify rounding layer by layer, and an independent fp16 implementation measures how
//   much; an fp16 engine that is right stays within a small multiple of it, a wrong op lands
//   far above.
#ifndef G4_TOLERANCE_H
#define G4_TOLERANCE_H

#include <stddef.h>

#include "fidelity/npy.h"
#include "kernels/ops.h"

typedef struct {
    const char *name; // static: "cpu-f32", "cuda-f16", "hf-fp16x3"
    double rel;       // max rel err
} g4_tol;

extern const g4_tol g4_tol_cpu_f32;  // {"cpu-f32", 1e-4}
extern const g4_tol g4_tol_cuda_f16; // {"cuda-f16", 2e-2}

// The backend's tolerance: cpu-f32 for a host-memory (CPU) backend, else cuda-f16.
const g4_tol *g4_tol_for_backend(const g4_backend *be);
// hf-fp16x3 for a tensor on which HF's fp16 run has rel err e16 against the fp32 reference.
g4_tol g4_tol_hf_fp16x3(double e16);
// The tolerance of tensor `name` with fp32 reference values ref[n]: hf-fp16x3 when fp16_dump
// (HF's fp16 dump of the same ids; NULL: none) holds `name` with n values, else *base.
g4_tol g4_tol_for_tensor(const g4_tol *base, g4_npz *fp16_dump, const char *name,
                         const float *ref, size_t n);

#endif
