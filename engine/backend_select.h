// backend_select.h: backends by name, and reading a backend buffer back as float32.
#ifndef G4_BACKEND_SELECT_H
#define G4_BACKEND_SELECT_H

#include "kernels/ops.h"

// "cpu" (default when name is NULL) or "cuda"; a user error when the GPU is unusable.
int g4_backend_by_name(const char *name, g4_backend **out);
// Copies b (any float type) to host memory as float32 [rows * cols].
void g4_buf_to_host_f32(g4_backend *be, const g4_buf *b, float *dst);

#endif
