// tolerance.c: the named tolerances against an HF dump (see tolerance.h).
#include "fidelity/tolerance.h"

#include <stdlib.h>

#include "base/base.h"
#include "fidelity/compare.h"

const g4_tol g4_tol_cpu_f32 = {"cpu-f32", 1e-4};
const g4_tol g4_tol_cuda_f16 = {"cuda-f16", 2e-2};

const g4_tol *g4_tol_for_backend(const g4_backend *be) {
    return be->host_memory ? &g4_tol_cpu_f32 : &g4_tol_cuda_f16;
}

g4_tol g4_tol_hf_fp16x3(double e16) {
    g4_tol t = {"hf-fp16x3", 3 * e16 > 1e-3 ? 3 * e16 : 1e-3};
    return t;
}

g4_tol g4_tol_for_tensor(const g4_tol *base, g4_npz *fp16_dump, const char *name,
                         const float *ref, size_t n) {
    const g4_array *h16;
    if (!fp16_dump || g4_npz_find(fp16_dump, name) < 0 ||
        g4_npz_get(fp16_dump, name, &h16) != G4_OK || h16->numel != n)
        return *base;
    float *h = g4_malloc(sizeof(float) * n + 1);
    g4_array_to_f32(h16, h);
    const double e16 = g4_cmp(h, ref, n, 0).rel;
    free(h);
    return g4_tol_hf_fp16x3(e16);
}
