// cli_version.c: `g4cu --version`: the version, the git commit it was built from (version.h,
// written at build time by tools/cmake/version.cmake) and the CUDA runtime and cuBLAS headers
// it was compiled against (the libraries are linked statically, so these are what runs), or
// that it was built without CUDA.
#ifndef G4_NO_CUDA
#include <cublas_api.h>
#include <cuda_runtime_api.h>
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
    printf("cuBLAS %d.%d.%d\n", CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUBLAS_VER_PATCH);
#endif
    return 0;
}
