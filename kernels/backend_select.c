// backend_select.c: pick a backend by name for the commands ("cpu" or "cuda"). Part of the
// CUDA library (g4_cuda), the one layer that links both backends.
#include "kernels/backend_select.h"

#include <string.h>

#include "base/base.h"

int g4_backend_by_name(const char *name, g4_backend **out) {
    *out = NULL;
    if (!name || !strcmp(name, "cpu")) {
        *out = g4_backend_cpu();
        return G4_OK;
    }
    if (!strcmp(name, "cuda")) {
#ifdef G4_NO_CUDA
        return g4_fail(G4_EUSER, "--backend cuda: this g4cu was built without CUDA (cmake "
                                 "-DG4CU_CUDA=OFF); use --backend cpu");
#endif
        const char *why = "unknown reason";
        *out = g4_backend_cuda(&why);
        if (!*out) return g4_fail(G4_EUSER, "--backend cuda: no usable GPU (%s)", why);
        return G4_OK;
    }
    return g4_fail(G4_EUSER, "--backend '%s': expected cpu or cuda", name);
}
