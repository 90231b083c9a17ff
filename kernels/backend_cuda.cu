// backend_cuda.cu: the CUDA backend (see kernels/ops.h). Placeholder until the kernels land:
// reports no backend. (Being written.)
#include "kernels/cuda_util.h"
#include "kernels/ops.h"

extern "C" g4_backend *g4_backend_cuda(const char **why) {
    if (g4_cuda_device_count(why) == 0) return NULL;
    if (why) *why = "the CUDA backend is not wired yet";
    return NULL;
}
