// backend_select.h: backends by name, for the commands. Defined in the CUDA library (g4_cuda),
// which links both backends: code that includes this links g4_cuda.
#ifndef G4_BACKEND_SELECT_H
#define G4_BACKEND_SELECT_H

#include "kernels/ops.h"

// "cpu" (default when name is NULL) or "cuda"; a user error when the GPU is unusable.
int g4_backend_by_name(const char *name, g4_backend **out);

#endif
