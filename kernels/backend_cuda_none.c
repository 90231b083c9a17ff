// backend_cuda_none.c: the CUDA entry points the host code calls, in a build without CUDA
// (G4CU_CUDA=OFF, or AUTO without the toolkit): no backend, no device, nothing to profile. The
// commands turn the NULL backend into "--backend cuda: this g4cu was built without CUDA"
// (kernels/backend_select.c), and "auto" picks the CPU.
#include <stdio.h>

#include "kernels/cuda_util.h"
#include "kernels/ops.h"

#define G4_NO_CUDA_WHY "this g4cu was built without CUDA (cmake -DG4CU_CUDA=OFF)"

g4_backend *g4_backend_cuda(const char **why) {
    if (why) *why = G4_NO_CUDA_WHY;
    return NULL;
}

int g4_cuda_device_count(const char **why) {
    if (why) *why = G4_NO_CUDA_WHY;
    return 0;
}

void g4_cuda_describe(char *buf, int n) {
    if (n > 0) snprintf(buf, (size_t)n, "none (%s)", G4_NO_CUDA_WHY);
}

void g4_cuda_profile_reset(void) {}

void g4_cuda_profile_report(FILE *f, double steps) {
    (void)f;
    (void)steps;
}
