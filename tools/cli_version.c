// cli_version.c: `g4cu --version`: the version, the git commit it was built from (version.h,
// written at build time by tools/cmake/version.cmake), then the CUDA runtime it was compiled
// against (linked statically, so that is what runs) and cuBLAS / cuDNN: the headers' version and
// the library's, loaded the way bench --kernels loads them, or why it could not be loaded
// (include/g4cu_dev.h g4cu_dev_gpu_libraries). Or that it was built without CUDA.
#include <g4cu_dev.h>
#include <stdio.h>

#include "tools/cli.h"
#include "version.h"

int g4_cli_version(void) {
    printf("g4cu %s\n", G4_VERSION);
    printf("commit %s\n", G4_GIT_COMMIT);
    fflush(stdout);
    return g4cu_dev_gpu_libraries(stdout) ? 1 : 0;
}
