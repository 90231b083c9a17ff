// tolerance.h: the comparison policy against an HF dump: which named tolerance (max rel err
// ||ours - ref|| / ||ref||) a tensor is held to, shared by `g4cu compare` and the tests.
//
// Fixed tolerances, by backend, when no tolerance dump is given:
// cpu-f32: the CPU backend computes in fp32 like the fp32 HF reference on the same
//   fp16-rounded weights; the only differences are summation order and libm rounding, which
//   stay near 1e-6 per op and grow through the layers: 1e-4 bounds that on the shallow test
//   packages, while any real formula difference (a wrong scale, norm or mask) is >= 1e-3. It
//   does not hold at any depth (a deeper, wider network amplifies rounding ~1.5x per layer):
//   the tests derive the tolerance instead (hf-fp32x8 below).
// cuda-f16: fp16 activations and KV cache (each rounding ~2.4e-4 relative, ~100 per layer):
//   2e-2 per tensor; logits are judged by argmax agreement too.
//
// Derived tolerances (`g4cu compare --tol-from DUMP`): per tensor, a multiple of the error that
// a less precise HF run of the same case (same package weights, same ids) makes against the
// reference dump, floored. Deep random-weight models amplify rounding layer by layer, and an
// independent implementation in the same precision measures how much: an engine that is right
// stays within a small multiple of it at any depth, a wrong op lands far above. The dump says
// which precision HF ran in (its hf_dtype member; a dump without one is an fp16 dump, as
// tools/gpu/run.sh made them before the member existed).
// hf-fp16x3: an fp16 engine vs HF fp32, 3x HF fp16's error, floored at 1e-3.
// hf-fp32x8: an fp32 engine (the CPU backend) vs HF float64, 8x HF fp32's error, floored at
//   1e-5. Two fp32 implementations differ in how they sum (BLAS blocks and FMAs; our CPU
//   reference sums each dot product in order), so ours is a steady multiple of HF fp32's at any
//   depth: measured 0.8-3.2x on the fixtures' tensors and 2.4-4.5x on a hidden 2048, 12-layer,
//   GQA 4:1 package (tests/fixtures/refdumps/README.md); 8x leaves room for other shapes. The
//   floor covers what is not rounding noise: the RoPE bases the loader fits from the package's
//   fp16 tables (tiny2: theta 20000.3 for 20000) put up to 5e-6 on the first layers' q/k at 40
//   positions, before any amplification.
// A tolerance dump of another model or of other ids is refused, never ignored.
#ifndef G4_TOLERANCE_H
#define G4_TOLERANCE_H

#include <stddef.h>
#include <stdint.h>

#include "fidelity/npy.h"
#include "kernels/ops.h"

typedef struct {
    const char *name; // static: "cpu-f32", "cuda-f16", "hf-fp16x3", "hf-fp32x8"
    double rel;       // max rel err
} g4_tol;

extern const g4_tol g4_tol_cpu_f32;  // {"cpu-f32", 1e-4}
extern const g4_tol g4_tol_cuda_f16; // {"cuda-f16", 2e-2}

// The backend's tolerance: cpu-f32 for a host-memory (CPU) backend, else cuda-f16.
const g4_tol *g4_tol_for_backend(const g4_backend *be);

// A derivation rule: a dump HF ran in dump_dtype gives factor x its error, at least floor.
typedef struct {
    const char *dump_dtype; // the tolerance dump's precision
    const char *name;
    double factor, floor;
    const char *ref_dtypes[2]; // what the reference must be
} g4_tol_rule;

// hf-fp16x3 for a tensor on which HF's fp16 run has rel err e16 against the fp32 reference.
g4_tol g4_tol_hf_fp16x3(double e16);

// Opens the tolerance dump `path` for the reference `ref` (read from ref_path, input ids
// ids[n]) and picks its rule, or a user error saying why the two are not the same case in a
// higher and a lower precision.
int g4_tol_dump_open(const char *path, const char *ref_path, g4_npz *ref, const int32_t *ids,
                     int n, g4_npz **out, const g4_tol_rule **rule);
// The derived tolerance of tensor `name` (reference member a, values r as float): the rule's
// multiple of the tolerance dump's error against r. A user error when the dump lacks the
// tensor, has another shape, or holds non-finite values.
int g4_tol_derived(g4_npz *tol_dump, const char *tol_path, const g4_tol_rule *rule,
                   const char *name, const g4_array *a, const float *r, g4_tol *out);

#endif
