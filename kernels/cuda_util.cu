// cuda_util.cu: device discovery and the launch-check switch (see cuda_util.h).
#include "kernels/common.cuh"
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

// The one SM-count query (g4k::num_sms, kernels/common.cuh), cached.
int g4k::num_sms() {
    static int n = 0;
    if (!n) {
        int dev = 0;
        G4_CUDA_CHECK(cudaGetDevice(&dev));
        G4_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    }
    return n;
}

int g4_cuda_sync_launches(void) {
    static int cached = -1;
    if (cached < 0) {
        const char *s = getenv("G4_SYNC_LAUNCHES");
        cached = s && strcmp(s, "0") != 0;
    }
    return cached;
}

extern "C" int g4_cuda_env_is(int *cache, const char *name, const char *value) {
    if (*cache < 0) *cache = g4_env_is(name, value);
    return *cache;
}

// -1: not decided yet; 0 / 1: the setting in force. The environment is read once; the device
// must be sm_90+ (griddepcontrol and the launch attribute exist from Hopper on).
static int pdl_state = -1;

static int pdl_device_ok(void) {
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
        cudaGetLastError(); // no device: launches fail on their own, with their own message
        return 0;
    }
    return major >= 9;
}

extern "C" int g4_cuda_pdl_enabled(void) {
    if (pdl_state < 0) {
        const char *s = getenv("G4_PDL");
        pdl_state = !(s && strcmp(s, "0") == 0) && pdl_device_ok();
    }
    return pdl_state;
}

extern "C" void g4_cuda_pdl_set(int on) {
    pdl_state = on < 0 ? -1 : on ? pdl_device_ok() : 0;
}
