// cli_version.c: `g4cu --version`: the version, the git commit it was built from (version.h,
// written at build time by tools/cmake/version.cmake), the CUDA runtime it was compiled against
// (linked statically, so that is what runs), and cuBLAS / cuDNN: the headers' version and the
// library's, loaded here the way bench --kernels loads them (kernels/bench/baselines.h; nothing
// else uses them), or why it could not be loaded. Or that it was built without CUDA.
#ifndef G4_NO_CUDA
#include <cuda_runtime_api.h>

#include "kernels/bench/baselines.h"
#endif
#include <stdio.h>

#include "tools/cli.h"
#include "version.h"

int g4_cli_version(void) {
    printf("g4cu %s\n", G4_VERSION);
    printf("commit %s\n", G4_GIT_COMMIT);
#ifdef G4_NO_CUDA
    printf("CUDA: none (built without CUDA: --backend cpu only)\n");
#else
    printf("CUDA runtime %d.%d (CUDART_VERSION %d)\n", CUDART_VERSION / 1000,
           CUDART_VERSION % 1000 / 10, CUDART_VERSION);
    const char *why = "", *from = "";
    printf("cuBLAS %d.%d.%d (headers), ", CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUBLAS_VER_PATCH);
    const g4_cublas_api *bl = g4_cublas(&why, &from);
    int v[3] = {-1, -1, -1};
    if (bl && bl->cublasGetProperty(MAJOR_VERSION, &v[0]) == CUBLAS_STATUS_SUCCESS &&
        bl->cublasGetProperty(MINOR_VERSION, &v[1]) == CUBLAS_STATUS_SUCCESS &&
        bl->cublasGetProperty(PATCH_LEVEL, &v[2]) == CUBLAS_STATUS_SUCCESS)
        printf("loaded %d.%d.%d (%s)\n", v[0], v[1], v[2], from);
    else
        printf("%s\n", bl ? "loaded, version unknown (cublasGetProperty failed)" : why);
    printf("cuDNN %d.%d.%d (headers), ", CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL);
    const g4_cudnn_api *dn = g4_cudnn(&why, &from);
    if (dn) { // (MAJOR * 10000 + MINOR * 100 + PATCH since cuDNN 9, as CUDNN_VERSION)
        const size_t d = dn->cudnnGetVersion();
        printf("loaded %zu.%zu.%zu (%s)\n", d / 10000, d % 10000 / 100, d % 100, from);
    } else {
        printf("%s\n", why);
    }
#endif
    return 0;
}
