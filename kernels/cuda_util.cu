// cuda_util.cu: device discovery and the launch-check switch (see cuda_util.h).
#include "kernels/cuda_util.h"

#include <stdlib.h>
#include <string.h>

extern "C" int g4_cuda_device_count(const char **why) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        if (why) *why = cudaGetErrorString(e);
        cudaGetLastError(); // clear the sticky error so later probes start clean
        return 0;
    }
    if (n == 0 && why) *why = "no CUDA device";
    return n;
}

extern "C" void g4_cuda_describe(char *buf, int n) {
    cudaDeviceProp p;
    G4_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    int drv = 0, rt = 0;
    G4_CUDA_CHECK(cudaDriverGetVersion(&drv));
    G4_CUDA_CHECK(cudaRuntimeGetVersion(&rt));
    snprintf(buf, (size_t)n, "%s, sm_%d%d, %d SMs, L2 %d MB, %.1f GiB, driver %d, runtime %d",
             p.name, p.major, p.minor, p.multiProcessorCount, p.l2CacheSize >> 20,
             (double)p.totalGlobalMem / (1 << 30), drv, rt);
}

int g4_cuda_sync_launches(void) {
    static int cached = -1;
    if (cached < 0) {
        const char *s = getenv("G4_SYNC_LAUNCHES");
        cached = s && strcmp(s, "0") != 0;
    }
    return cached;
}
