// profile.cuh: the per-op profile scope of the CUDA backend (G4_PROFILE=1). See profile.cu.
// Internal: included by kernels/backend_cuda.cu.
#ifndef G4_PROFILE_CUH
#define G4_PROFILE_CUH

#include <cuda_runtime_api.h>

namespace g4k {

struct ProfEntry;

// Records events around its lifetime on `stream` under `name` (a static string), when
// G4_PROFILE is set and the stream is not capturing a graph.
struct ProfScope {
    ProfEntry *e = nullptr;
    cudaStream_t st;
    ProfScope(const char *name, cudaStream_t stream);
    ~ProfScope();
};

} // namespace g4k

#endif
