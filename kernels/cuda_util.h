// cuda_util.h: the CUDA runtime glue every .cu file and the host engine share (C linkage).
//
// G4_CUDA_CHECK(call): one checker for every runtime call; on failure it prints the statement,
// function, file, line and error name, then aborts (a GPU error mid-run is not recoverable).
// G4_CUDA_LAUNCH_CHECK(): cudaGetLastError() after a launch, and a device sync as well when
// G4_SYNC_LAUNCHES=1 is set in the environment, so an error is reported at the launch that
// caused it.
// G4_PDL=0: decode-path kernels launched without programmatic dependent launch (pdl.cuh).
#ifndef G4_CUDA_UTIL_H
#define G4_CUDA_UTIL_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

// 0 when no usable GPU (no driver, no device); never aborts. *why (static string) says why.
int g4_cuda_device_count(const char **why);
// Name, SM count, L2 bytes and memory of device 0 into buf (for bench headers).
void g4_cuda_describe(char *buf, int n);
// With G4_PROFILE=1 the CUDA backend times every op of eager forwards with events; report
// prints the per-op split of the recorded work divided by `steps` (then clears it).
void g4_cuda_profile_reset(void);
void g4_cuda_profile_report(FILE *f, double steps);
// Programmatic dependent launch (kernels/pdl.cuh) of the decode-path kernels: on by default on
// sm_90+ devices, off with G4_PDL=0 in the environment (read once, at the first launch).
// g4_cuda_pdl_set(0 / 1) overrides it for the launches that follow (tests run both settings;
// a graph keeps the setting it was captured with); g4_cuda_pdl_set(-1) returns to the
// environment's.
int g4_cuda_pdl_enabled(void);
void g4_cuda_pdl_set(int on);
// 1 when the environment variable `name` is set to `value`, read once into *cache (which starts
// at -1): the kernels' A/B switches (G4_GEMM_PREFILL=mma, G4_ATTN_PREFILL=hmma, G4_SKINNY=0).
int g4_cuda_env_is(int *cache, const char *name, const char *value);

// The CUDA backend's load checks (its check_text / check_vision / check_audio): G4_OK, or a
// one-line user error naming the first op whose supported() predicate refuses the model's
// shape, the shape, and what the kernel takes. Host code (no GPU needed).
struct g4_text_config_s;
struct g4_vision_config_s;
struct g4_audio_config_s;
int g4_cuda_check_text(const struct g4_text_config_s *c);
int g4_cuda_check_vision(const struct g4_vision_config_s *c, int pool_k);
int g4_cuda_check_audio(const struct g4_audio_config_s *c);

#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#if defined(__GNUC__)
__attribute__((noreturn))
#endif
static inline void g4_cuda_fatal(cudaError_t e, const char *stmt, const char *func,
                                 const char *file, int line) {
    fprintf(stderr, "g4cu: CUDA error %s (%s)\n  in %s\n  at %s() %s:%d\n", cudaGetErrorName(e),
            cudaGetErrorString(e), stmt, func, file, line);
    abort();
}

#define G4_CUDA_CHECK(call)                                                                        \
    do {                                                                                           \
        cudaError_t g4_e_ = (call);                                                                \
        if (g4_e_ != cudaSuccess) g4_cuda_fatal(g4_e_, #call, __func__, __FILE__, __LINE__);       \
    } while (0)

int g4_cuda_sync_launches(void);
#define G4_CUDA_LAUNCH_CHECK()                                                                     \
    do {                                                                                           \
        G4_CUDA_CHECK(cudaGetLastError());                                                         \
        if (g4_cuda_sync_launches()) G4_CUDA_CHECK(cudaDeviceSynchronize());                       \
    } while (0)
#endif

#endif
